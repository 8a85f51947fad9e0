"""The local executor: each cell in a process of its own, at most ``jobs`` at once, each under a wall-clock guard.

A process per cell (forked from a server that has imported npusched once, so starting one costs milliseconds)
means a crash, a leak or a hang takes down that cell only: the driver sees the process end without a result,
or kills it at its deadline, and records the cell as failed. Each cell process leads its own process group (so a
`vela` it started is killed with it) and dies with the fork server, which dies with the driver.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Generator
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from typing import Any

from npusched.sweep.events import CellWork, Event, Finished, Started
from npusched.sweep.grid import Cell
from npusched.sweep.lifetime import die_with_parent
from npusched.sweep.runner import failure, run_cell


@dataclass(frozen=True)
class _Running:
    cell: Cell
    process: Any
    connection: Connection
    started: float
    deadline: float


def start_fork_server() -> Any:
    """Start the fork server (it imports npusched while the driver expands the grid); returns its context."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["npusched.sweep.warm"])
    forkserver.ensure_running()
    return context


def run_local(cells: list[Cell], jobs: int, guard_seconds: float,
              work: CellWork = run_cell) -> Generator[Event, None, None]:
    """Run the cells, yielding Started/Finished as they happen; closing the generator kills the cells in flight.

    ``work`` measures one cell in its process (default: the runner). It is the test hook: a stand-in that crashes
    or hangs exercises the guards without depending on how long a real solve takes on the machine."""
    context = start_fork_server()
    pending = list(reversed(cells))
    running: dict[Connection, _Running] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                cell = pending.pop()
                job = _start(context, cell, guard_seconds, work)
                running[job.connection] = job
                yield Started(cell)
            timeout = max(0.0, min(job.deadline for job in running.values()) - time.monotonic())
            ready = wait([*running, *(job.process.sentinel for job in running.values())], timeout)
            for job in list(running.values()):
                if job.connection in ready or job.process.sentinel in ready:
                    result = _collect(job)
                elif time.monotonic() >= job.deadline:
                    _kill(job)
                    result = failure("timeout", f"exceeded the wall-clock guard of {guard_seconds:g} s",
                                     time.monotonic() - job.started)
                else:
                    continue
                del running[job.connection]
                yield Finished(job.cell, result)
    finally:
        for job in running.values():
            _kill(job)


def _start(context: Any, cell: Cell, guard_seconds: float, work: CellWork) -> _Running:
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_cell_main, args=(work, cell, sender), daemon=True,
                              name=f"npusched-cell-{cell.cell_id[:8]}")
    started = time.monotonic()
    process.start()
    sender.close()
    return _Running(cell=cell, process=process, connection=receiver, started=started,
                    deadline=started + guard_seconds)


def _cell_main(work: CellWork, cell: Cell, sender: Connection) -> None:
    """In the cell's process: its own process group, tied to its parent, one result sent back."""
    os.setpgrp()
    die_with_parent()
    sender.send(work(cell))
    sender.close()


def _collect(job: _Running) -> dict[str, Any]:
    """The cell's result, or why there is none (the process died before sending it)."""
    try:
        result = job.connection.recv()
    except (EOFError, OSError):
        result = None
    job.connection.close()
    if result is not None:
        return result  # not waiting for the process to exit: the fork server reaps it
    job.process.join()
    code = job.process.exitcode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    return failure("crashed", f"the cell's process died ({how}) before reporting a result",
                   time.monotonic() - job.started)


def _kill(job: _Running) -> None:
    try:
        os.killpg(job.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        job.process.kill()
    job.process.join()
    job.connection.close()
