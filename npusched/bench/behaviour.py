"""Is a checkout's behaviour a kept release's? A run's schedule and totals, kept and compared.

What is kept of a run is what it decides and what the evaluator makes of it (``essence``): every pass's block
config, stripes, cascade, weight buffering, placements and cycles, every fast-storage address, the totals, the
status and the floors' totals; timings, notes and the solver's own statistics are left out (they are not the
schedule). ``scripts/bench/behaviour_diff.py`` keeps and checks the corpus x the golden configurations x every
solver; tests/test_behaviour.py checks a slice of what it kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npusched.app.pipeline import run
from npusched.bench.golden import load_configs
from npusched.bench.paths import corpus_dir, data_dir
from npusched.errors import NpuschedError, one_line
from npusched.io.report_json import document
from npusched.run import RunOptions, Solver
from npusched.vela.command import run_options_from_vela_args

# Where the schedules of a release are kept, by the release's commit.
KEPT_DIR = Path("behaviour")
SOLVERS = tuple(solver.value for solver in Solver)
# The fields of a pass's record that are the schedule and its price (its description, names and shapes, too).
OP_FIELDS = ("name", "placement", "op_type", "ifm_shape", "ofm_shape", "block_config", "block_config_part_kernel",
             "ofm_stripe", "ifm_stripe", "ifm2_stripe", "cascade", "rolling_buffer", "weight_buffering",
             "prefetch_window", "placements", "ofm_mem_area", "ofm_format", "cycles", "npu_cycles", "access_cycles",
             "sram_used_bytes", "subgraph_index", "subgraph_op_index")
Cell = tuple[str, str, str]  # (corpus model, golden configuration, solver)


def kept_dir(release: str) -> Path:
    return data_dir() / KEPT_DIR / release


def cell_key(cell: Cell) -> str:
    return "__".join(cell)


def cell_options(cell: Cell, time_limit_seconds: float) -> RunOptions:
    """The options ``solve-schedule MODEL <configuration> --solver S --deterministic --workers 1 --seed 0`` runs."""
    model, config, solver = cell
    return run_options_from_vela_args(corpus_dir() / f"{model}.tflite", load_configs()[config],
                                      solver=solver, deterministic=True, workers=1, seed=0,
                                      time_limit_seconds=time_limit_seconds)


def essence(written: dict[str, Any] | None, error: str) -> dict[str, Any]:
    """What a run decided and what it costs (the document ``--json`` writes), without what varies from run to run;
    or the one-line error it ended with."""
    if written is None:
        return {"error": error}
    allocation = written.get("fast_storage_allocation")
    if allocation is not None:
        allocation = {key: value for key, value in allocation.items() if key != "method"} | \
            {"method": allocation.get("method")}
    return {
        "status": written["status"],
        "label": written.get("label"),
        "totals": written["totals"],
        "allocation": allocation,
        "sites": written.get("sites"),
        "floors": [{key: floor[key] for key in ("core", "own_cycles", "cycles_by_estimator", "fits", "returned")}
                   for floor in written.get("floors") or []],
        "ops": [{key: op[key] for key in OP_FIELDS if key in op} for op in written["ops"]],
    }


def run_cell(cell: Cell, time_limit_seconds: float) -> dict[str, Any]:
    """One cell run as the command line runs it (``run``, then the document ``--json`` writes): its essence, with
    whether the wall clock ended a deterministic search (then the run is not reproducible) and the limit."""
    try:
        written: dict[str, Any] | None = json.loads(json.dumps(document(run(cell_options(cell, time_limit_seconds))),
                                                               allow_nan=False))
        error = ""
    except NpuschedError as exc:
        written, error = None, f"error: {one_line(str(exc))}"
    result = essence(written, error)
    result["clock_ended"] = "clock" in ((written or {}).get("status_reason") or "")
    result["time_limit"] = time_limit_seconds
    return result


def same_behaviour(kept: dict[str, Any], now: dict[str, Any]) -> bool:
    return {k: v for k, v in kept.items() if k != "clock_ended"} == {k: v for k, v in now.items() if k != "clock_ended"}


def first_difference(kept: Any, now: Any, where: str = "") -> str:
    """The path of the first field that differs, with both values."""
    if isinstance(kept, dict) and isinstance(now, dict):
        for k in sorted(set(kept) | set(now)):
            if k != "clock_ended" and kept.get(k) != now.get(k):
                return first_difference(kept.get(k), now.get(k), f"{where}.{k}")
    if isinstance(kept, list) and isinstance(now, list) and len(kept) == len(now):
        for i, (a, b) in enumerate(zip(kept, now, strict=True)):
            if a != b:
                return first_difference(a, b, f"{where}[{i}]")
    return (f"{where or '.'}: kept {json.dumps(kept, sort_keys=True)[:120]}, "
            f"now {json.dumps(now, sort_keys=True)[:120]}")
