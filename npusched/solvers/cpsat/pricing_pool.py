"""Pricing a subgraph's passes in several processes.

Pricing every pass of a large network (``candidates.price_pass_choices``: its block configs, weight encodings
and stripes) takes most of the time before any search starts, and each pass is priced on its own, so the
passes are shared out among forked processes. Each answer is what the pass's pricing gives in one process,
so the candidate space, and every schedule drawn from it, does not depend on how many processes priced it.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from npusched.solvers.cpsat.candidates import SubgraphFacts, price_pass_choices
from npusched.target import weights as wts
from npusched.target.arch import ArchitectureFeatures

# Passes per task: small enough that a run out of time waits little for the tasks under way.
CHUNK_PASSES = 8

# What the forked processes price: set before the pool forks (the processes inherit it), cleared after.
_WORK: tuple[ArchitectureFeatures, SubgraphFacts] | None = None


def usable_processes(workers: int) -> int:
    """The processes to price with for ``workers`` (no more than the CPUs this process may run on), 1 where
    processes cannot be forked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(workers, cpus))


def _price_chunk(positions: Sequence[int]) -> tuple[list[tuple[int, Any]], list]:
    """The passes' pricing and the weight encodings' sizes it found (the caller encodes the chosen ones again)."""
    assert _WORK is not None  # set by price_in_processes before the fork
    arch, facts = _WORK
    priced = [(pos, price_pass_choices(arch, facts.sg.ops[pos], facts.stripe_heights[pos])) for pos in positions]
    digests = {wts.weights_digest(op.weights) for pos in positions if (op := facts.sg.ops[pos]).weights is not None}
    return priced, wts.known_stream_sizes(digests)


def price_in_processes(arch: ArchitectureFeatures, facts: SubgraphFacts, positions: Sequence[int], processes: int,
                       deadline: float | None) -> bool:
    """Price the passes at ``positions`` not priced yet into ``facts.priced``, in ``processes`` forked processes
    (by the caller alone where one would do as well). False where ``deadline`` (a ``time.monotonic`` reading)
    passed first: what was priced by then is kept."""
    global _WORK
    todo = [pos for pos in positions if pos not in facts.priced]
    if processes < 2 or len(todo) < 2 * CHUNK_PASSES:
        for pos in todo:
            if deadline is not None and time.monotonic() > deadline:
                return False
            facts.priced[pos] = price_pass_choices(arch, facts.sg.ops[pos], facts.stripe_heights[pos])
        return True
    _WORK = (arch, facts)
    pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"))
    try:
        pending: set[Future] = {pool.submit(_price_chunk, todo[k:k + CHUNK_PASSES])
                                for k in range(0, len(todo), CHUNK_PASSES)}
        while pending:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                return False
            done, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                priced, sizes = future.result()
                facts.priced.update(priced)
                wts.remember_stream_sizes(sizes)
        return True
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        _WORK = None
