#!/usr/bin/env python3
"""How close the "any schedule" lower bound comes to the best schedule found, over the corpus and configurations.

    python scripts/any_schedule_bound.py [--time-limit 10] [--models a,b] [--configs c,d] [--estimator NAME]
                                         [--csv out.csv]

Per corpus model (tests/data/corpus) and configuration (tests/data/golden/configs.json), on Vela's graph as the
tests schedule it: the bound (``npusched.solvers.cpsat.any_schedule_bound``) and the seconds it took; the
evaluator's totals of the heuristic's (Vela's own), the 2020 DP's and CP-SAT's schedules (``--time-limit``
seconds of deterministic work, one worker, from the heuristic); the best of the three and bound / best. Then the geomean
of bound / best over every cell and per configuration, and the least and largest. A cell where no schedule fits
prints without a ratio. ``--estimator`` prices with another model (default: the configuration's, vela-legacy).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from npusched.app.pipeline import load_network  # noqa: E402
from npusched.errors import ScheduleError  # noqa: E402
from npusched.schedule.evaluator import evaluate  # noqa: E402
from npusched.solvers.cpsat import NetworkFacts, solve_cpsat  # noqa: E402
from npusched.solvers.cpsat.any_schedule_bound import any_schedule_bound  # noqa: E402
from npusched.solvers.dp import dp_schedule  # noqa: E402
from npusched.solvers.heuristic import heuristic_schedule  # noqa: E402
from npusched.target.estimators import Estimator, with_estimator  # noqa: E402
from npusched.vela.command import run_options_from_vela_args  # noqa: E402

DATA = REPO / "tests" / "data"
COLUMNS = ["model", "config", "passes", "bound", "bound_seconds", "heuristic", "dp", "cpsat", "best", "ratio"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def cell(path: Path, config: dict, time_limit: float, estimator: str | None) -> dict:
    """One model under one configuration: the bound, each solver's total and the ratio to the best."""
    arch, network, _ = load_network(run_options_from_vela_args(path, config, solver=None))
    if estimator is not None:
        arch = with_estimator(arch, Estimator(estimator))
    start = time.monotonic()
    bound = any_schedule_bound(NetworkFacts(network, arch))
    seconds = time.monotonic() - start
    totals: dict[str, float | None] = {"heuristic": None, "dp": None, "cpsat": None}
    hint = None
    try:
        hint = heuristic_schedule(network, arch)
        totals["heuristic"] = evaluate(network, arch, hint).total_cycles
    except ScheduleError:
        pass
    try:
        totals["dp"] = evaluate(network, arch, dp_schedule(network, arch, arch.optimise)).total_cycles
    except ScheduleError:
        pass
    try:
        # work-sized: the same search whatever the machine's load (the clock, at three times that, a safety net)
        result = solve_cpsat(network, arch, time_limit_seconds=3 * time_limit, work_limit_seconds=time_limit,
                             workers=1, deterministic=True, hint=hint)
        totals["cpsat"] = evaluate(network, arch, result.schedule).total_cycles
    except ScheduleError:
        pass
    found = [t for t in totals.values() if t is not None]
    best = min(found) if found else None
    return {"passes": len(network.npu_ops), "bound": bound, "bound_seconds": seconds, **totals, "best": best,
            "ratio": bound / best if best else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT seconds per cell (default 10)")
    parser.add_argument("--models", help="comma-separated corpus models (default: all)")
    parser.add_argument("--configs", help="comma-separated configurations of configs.json (default: all)")
    parser.add_argument("--estimator", choices=Estimator.names(), help="price with this model instead")
    parser.add_argument("--csv", type=Path, help="also write the table here")
    args = parser.parse_args()
    configs = json.loads((DATA / "golden" / "configs.json").read_text())
    config_names = args.configs.split(",") if args.configs else list(configs)
    models = args.models.split(",") if args.models else sorted(p.stem for p in (DATA / "corpus").glob("*.tflite"))
    rows = []
    print("| model | configuration | passes | bound | bound s | heuristic | DP | CP-SAT | best | bound / best |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in models:
        for name in config_names:
            row = {"model": model, "config": name,
                   **cell(DATA / "corpus" / f"{model}.tflite", configs[name], args.time_limit, args.estimator)}
            rows.append(row)

            def figure(key: str, row: dict = row) -> str:
                return "-" if row[key] is None else f"{row[key]:,.0f}"

            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}"
            print(f"| {model} | {name} | {row['passes']} | {figure('bound')} | {row['bound_seconds']:.2f} | "
                  f"{figure('heuristic')} | {figure('dp')} | {figure('cpsat')} | {figure('best')} | {ratio} |",
                  flush=True)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    print()
    print(f"geomean bound / best over {len(ratios)} cells: {geomean(ratios):.3f} "
          f"(least {min(ratios):.3f}, largest {max(ratios):.3f}); slowest bound "
          f"{max(r['bound_seconds'] for r in rows):.2f} s")
    for name in config_names:
        print(f"  {name}: {geomean([r['ratio'] for r in rows if r['config'] == name and r['ratio']]):.3f}")
    if args.csv is not None:
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            for r in rows:
                writer.writerow({k: r[k] for k in COLUMNS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
