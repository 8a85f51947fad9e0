"""The Ray executor: one task per cell, asking for as many CPUs as the cell's CP-SAT workers.

Tasks only compute; the driver writes the store. The wall-clock guard is the driver's: a task past its deadline
is force-cancelled (its worker process killed). Tasks are not retried by Ray: a crashed worker is a failed cell,
which ``--retry-failed`` runs again. Model files travel through Ray's object store, so the workers of a cluster
need npusched installed but not the models.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

from npusched.sweep.events import CellWork, Event, Finished, Started
from npusched.sweep.grid import Cell, GridError, file_sha256
from npusched.sweep.runner import failure, run_cell


def run_ray(cells: list[Cell], jobs: int | None, guard_seconds: float, address: str | None = None,
            work: CellWork = run_cell) -> Generator[Event, None, None]:
    """Run the cells on a Ray cluster (``address``) or a local instance started here and stopped at the end;
    at most ``jobs`` tasks in flight (default: the cluster's CPUs)."""
    try:
        import ray
    except ImportError:
        raise GridError("the ray executor needs Ray: pip install 'npusched[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise GridError(f"cannot start or reach Ray at {address or 'a local instance'}: {exc}") from None
    limit = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(max_retries=0)(_run_task)
    paths = {cell.model_sha256: cell.model_path for cell in cells}
    models = {sha: ray.put(Path(path).read_bytes()) for sha, path in paths.items()}
    pending = list(reversed(cells))
    running: dict[Any, tuple[Cell, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < limit:
                cell = pending.pop()
                ref = task.options(num_cpus=cell.workers or 1).remote(work, cell, models[cell.model_sha256])
                running[ref] = (cell, time.monotonic())
                yield Started(cell)
            timeout = max(0.0, min(start for _, start in running.values()) + guard_seconds - time.monotonic())
            ready, _ = ray.wait(list(running), num_returns=1, timeout=timeout)
            for ref in list(running):
                cell, start = running[ref]
                if ref in ready:
                    result = _result(ray, ref, start)
                elif time.monotonic() - start >= guard_seconds:
                    ray.cancel(ref, force=True)
                    result = failure("timeout", f"exceeded the wall-clock guard of {guard_seconds:g} s",
                                     time.monotonic() - start)
                else:
                    continue
                del running[ref]
                yield Finished(cell, result)
    finally:
        for ref in running:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _result(ray: Any, ref: Any, start: float) -> dict[str, Any]:
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        text = " ".join(str(exc).split())[:500]
        return failure("crashed", f"the Ray task failed: {type(exc).__name__}: {text}", time.monotonic() - start)


def _run_task(work: CellWork, cell: Cell, model_bytes: bytes) -> dict[str, Any]:
    """In a Ray worker: run the cell on its model file, or on a copy of the driver's when this node lacks it."""
    path = Path(cell.model_path)
    if path.is_file() and file_sha256(path) == cell.model_sha256:
        return work(cell)
    with tempfile.TemporaryDirectory(prefix="npusched-model-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_bytes(model_bytes)
        return work(replace(cell, model_path=str(copy)))
