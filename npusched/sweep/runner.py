"""Run one cell and measure it: `pipeline.run` for npusched's solvers, the `vela` CLI for Vela's cores.

Runs inside the executor's worker process; returns a plain dict of measurements (the store's result columns)
and never raises for a failed run, so the error text lands in the store with the cell.
"""

from __future__ import annotations

import json
import math
import socket
import time
from typing import Any

from npusched.app.api import solve_options
from npusched.errors import NpuschedError
from npusched.ir import MemArea
from npusched.sweep.grid import AREA_COLUMNS, VELA_SOLVERS, Cell
from npusched.sweep.vela_cell import run_vela_cell


def run_cell(cell: Cell) -> dict[str, Any]:
    """Measurements of one cell; ``outcome`` is 'done' or 'failed' (then ``status`` says why and ``error`` how)."""
    started = time.monotonic()
    try:
        if cell.solver in VELA_SOLVERS:
            row = run_vela_cell(cell)
        else:
            row = _run_npusched(cell)
    except NpuschedError as exc:
        row = failure("error", _one_line(str(exc)))
    except Exception as exc:  # a bug must not lose the cell: record it and go on with the sweep
        row = failure("internal", f"{type(exc).__name__}: {_one_line(str(exc))}")
    row["wall_seconds"] = time.monotonic() - started
    row["host"] = socket.gethostname()
    return row


def failure(status: str, error: str, wall_seconds: float | None = None) -> dict[str, Any]:
    """The row of a cell that produced no schedule: 'error' (the run said why), 'timeout', 'crashed', 'internal'."""
    return {"outcome": "failed", "status": status, "error": error, "wall_seconds": wall_seconds}


def _run_npusched(cell: Cell) -> dict[str, Any]:
    result = solve_options(cell.run_options()).run
    evaluation = result.evaluation
    assert evaluation is not None  # a solver ran
    report = result.solver_report
    timings = result.timings_seconds
    row: dict[str, Any] = {
        "outcome": "done",
        "status": result.status,
        "cycles": evaluation.total_cycles,
        "npu_cycles": evaluation.npu_cycles,
        "peak_fast_storage_bytes": evaluation.peak_fast_storage,
        "fast_storage_limit_bytes": result.arch.arena_cache_size,
        "load_seconds": timings.get("read", 0.0) + timings.get("lower", 0.0),
        "solve_seconds": timings.get("solve"),
    }
    for area, column in AREA_COLUMNS.items():
        row[column] = evaluation.bytes_moved(MemArea(area))
    if report is not None:
        row.update(bound_cycles=_finite(getattr(report, "bound_cycles", None)),
                   gap=_finite(getattr(report, "gap", None)),
                   heuristic_cycles=_finite(getattr(report, "heuristic_cycles", None)))
        details = {"reason": getattr(report, "reason", "") or None,
                   "model_stats": dict(getattr(report, "model_stats", None) or {})}
        row["details"] = json.dumps(details, default=str)
    return row


def _finite(value: Any) -> float | None:
    """CP-SAT may report no bound (None or NaN); the store keeps NULL for that."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _one_line(text: str) -> str:
    return " ".join(text.split())
