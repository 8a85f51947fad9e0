"""The driver of a sweep: skip the cells the store has, run the rest through an executor, record each as it ends.

The driver is the store's only writer, and writes a cell only once its result is in, so whatever stops the sweep
(Ctrl-C, SIGKILL, a crashed worker) loses at most the cells in flight.
"""

from __future__ import annotations

import contextlib
import time

from npusched.sweep import store as sweep_store
from npusched.sweep.events import Executor, Started
from npusched.sweep.grid import Cell
from npusched.sweep.progress import Progress, SweepSummary


def run_sweep(cells: tuple[Cell, ...], store: sweep_store.Store, execute: Executor, *, command: str,
              retry_failed: bool = False, quiet: bool = False) -> SweepSummary:
    """Run every cell the store does not hold yet (failed ones too with ``retry_failed``)."""
    started = time.monotonic()
    settled = sweep_store.settled_ids(store, (c.cell_id for c in cells), retry_failed=retry_failed)
    todo = [cell for cell in cells if cell.cell_id not in settled]
    sweep_store.begin_sweep(store, command, len(cells))
    progress = Progress(len(todo), quiet)
    interrupted = False
    try:
        with contextlib.closing(execute(todo)) as events:
            for event in events:
                if isinstance(event, Started):
                    progress.started()
                    continue
                sweep_store.record(store, event.cell, event.result)
                progress.finished(event.cell.label, event.result)
    except KeyboardInterrupt:  # the cells in flight are killed as the executor closes; the store is consistent
        interrupted = True
    finally:
        progress.close()
    return SweepSummary(cells=len(cells), skipped=len(settled), done=progress.done, failed=progress.failed,
                        seconds=time.monotonic() - started, interrupted=interrupted)
