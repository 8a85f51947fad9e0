"""Pricing in several processes.

Pricing a large network's candidate space takes most of the time before any search starts: every pass's block
configs, weight encodings and stripes (``candidates.price_pass_choices``), then every candidate's price table.
Each pass and each candidate is priced on its own, so the work is shared out among forked processes
(``fork_map``). Every answer is what pricing gives in one process, so the candidate space, and every schedule
drawn from it, does not depend on how many processes priced it.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar, cast

from npusched.solvers.cpsat.candidates import (
    SubgraphFacts,
    kinds_to_price,
    price_pass_choices,
    priced_kind,
    share_priced,
)
from npusched.target import weights as wts
from npusched.target.estimators import PricedArchitecture

Item = TypeVar("Item")

# Items per task of a pool: passes, and candidates' price tables. Small enough that a run out of time waits little
# for the tasks under way; a pool is worth its fork only for a few tasks per process.
CHUNK_PASSES = 8
CHUNK_CANDIDATES = 64
MIN_CHUNKS = 2

# What the forked processes do to each item: set before the pool forks (the processes inherit it), cleared after.
_WORK: Callable[[Any], Any] | None = None
_FORKING = threading.Lock()  # one pool at a time: _WORK is the forked processes' only instruction


def usable_processes(workers: int) -> int:
    """The processes to price with for ``workers`` (no more than the CPUs this process may run on), 1 where
    processes cannot be forked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(workers, cpus))


def fork_map(work: Callable[[Item], Any], items: Sequence[Item], processes: int, deadline: float | None,
             chunk: int) -> list[Any] | None:
    """``[work(item) for item in items]``, in ``processes`` forked processes, ``chunk`` items per task (by the
    caller alone where fewer than ``MIN_CHUNKS`` tasks per process would be shared out). Answers must pickle; they
    come back as copies. None where ``deadline`` (a ``time.monotonic`` reading) passed first."""
    global _WORK
    if processes < 2 or len(items) < MIN_CHUNKS * processes * chunk:
        out = []
        for item in items:
            if deadline is not None and time.monotonic() > deadline:
                return None
            out.append(work(item))
        return out
    tasks = [(start, items[start:start + chunk]) for start in range(0, len(items), chunk)]
    context = multiprocessing.get_context("fork")
    with _FORKING:
        _WORK = work
        workers: list[tuple[Any, Connection]] = []
        try:
            for n in range(processes):
                reader, writer = context.Pipe(duplex=False)
                process = context.Process(target=_serve, args=(tasks[n::processes], writer), daemon=True)
                process.start()
                writer.close()  # the process's own end is its only writer: were it to die, reading ends
                workers.append((process, reader))
            return _gather([reader for _, reader in workers], len(items), deadline)
        finally:
            # Past the deadline the tasks under way are of no use: their processes go now. Each answers down a
            # pipe of its own, so one killed halfway through an answer leaves no reader waiting for the rest
            # (a process pool's shared queue did: the run then never exited).
            for process, reader in workers:
                if process.is_alive():
                    process.kill()
                process.join()
                reader.close()
            _WORK = None


def _serve(tasks: Sequence[tuple[int, Sequence[Any]]], writer: Connection) -> None:
    """A forked process's work: each task's answers (or what stopped it) sent as soon as they are made."""
    assert _WORK is not None  # set by fork_map before the fork
    try:
        for start, part in tasks:
            writer.send((start, [_WORK(item) for item in part]))
    except Exception as exc:  # noqa: BLE001 - raised again in the caller
        writer.send((None, exc))
    finally:
        writer.close()


def _gather(readers: list[Connection], count: int, deadline: float | None) -> list[Any] | None:
    """The ``count`` answers the processes send down ``readers``, in order; None past ``deadline``."""
    in_order: list[Any] = [None] * count
    remaining = count
    pending = list(readers)
    while remaining:
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            return None
        if not pending:
            raise RuntimeError(f"the pricing processes ended with {remaining} answers not sent")
        ready = set(wait(pending, timeout))
        for reader in [r for r in pending if r in ready]:
            try:
                start, answers = cast(tuple[Any, Any], reader.recv())
            except EOFError:  # that process is done
                pending.remove(reader)
                continue
            if start is None:
                raise answers
            in_order[start:start + len(answers)] = answers
            remaining -= len(answers)
    return in_order


def price_in_processes(arch: PricedArchitecture, facts: SubgraphFacts, positions: Sequence[int], processes: int,
                       deadline: float | None) -> bool:
    """Price the passes at ``positions`` not priced yet into ``facts.priced`` (``fork_map``). The processes hand
    back the weight encodings' sizes they found, so that the caller need not encode the chosen ones again. False
    where ``deadline`` passed first (what was priced by then is kept where one process priced it)."""
    alike, todo = kinds_to_price(arch, facts, positions)

    def price(pos: int) -> tuple[Any, list]:
        choices = facts.priced[pos] = price_pass_choices(arch, facts.sg.ops[pos], facts.stripe_heights[pos])
        return choices, wts.take_new_stream_sizes()

    answers = fork_map(price, todo, processes, deadline, CHUNK_PASSES)
    if answers is None:
        return False
    for pos, (choices, sizes) in zip(todo, answers, strict=True):
        priced_kind(arch, facts, pos, choices)
        wts.remember_stream_sizes(sizes)
    share_priced(facts, alike)
    return True
