#!/usr/bin/env python3
"""CP-SAT on every corpus model under the five golden configurations: time to a proven optimum, and cycles
against the heuristic and Vela legacy's golden totals.

In-process, one cell after another, 2 workers; the time counts the whole solve (building included), not
loading. Prints a Markdown table, the median and largest time to a proven optimum, and per configuration the
geometric mean of CP-SAT / Vela legacy.

Usage: python scripts/time_to_optimum.py [--time-limit 30] [--models NAME ...] [--configs NAME ...]
Target (issue 8): median time to a proven optimum <= 3 s.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import time
from pathlib import Path

from npusched.app.pipeline import load_network
from npusched.errors import ScheduleError
from npusched.schedule.evaluator import evaluate, verify
from npusched.solvers.cpsat import solve_cpsat
from npusched.solvers.heuristic import heuristic_schedule
from npusched.vela.command import run_options_from_vela_args

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--models", nargs="+", default=sorted(p.stem for p in (DATA / "corpus").glob("*.tflite")))
    parser.add_argument("--configs", nargs="+")
    args = parser.parse_args()
    configs = json.loads((DATA / "golden" / "configs.json").read_text())
    print("| model | config | status | solve s | CP-SAT | heuristic | Vela legacy | CP-SAT / Vela | gap |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    optimum_seconds: list[float] = []
    ratios: dict[str, list[float]] = {}
    for name in args.configs or list(configs):
        for model in args.models:
            options = run_options_from_vela_args(DATA / "corpus" / f"{model}.tflite", configs[name])
            arch, network, _ = load_network(options)
            summary = DATA / "golden" / "vela-5.2.0-legacy" / name / model / "summary.csv"
            vela = float(next(csv.DictReader(summary.open()))["cycles_total"]) if summary.is_file() else math.nan
            try:
                hint = heuristic_schedule(network, arch, options.optimise)
            except ScheduleError:
                hint = None
            start = time.monotonic()
            try:
                result = solve_cpsat(network, arch, time_limit_seconds=args.time_limit, workers=2, hint=hint)
            except ScheduleError as exc:
                print(f"| {model} | {name} | error: {exc} | | | | | | |")
                continue
            seconds = time.monotonic() - start
            ev = evaluate(network, arch, result.schedule)
            assert not verify(network, arch, result.schedule, ev)
            heuristic = evaluate(network, arch, hint).total_cycles if hint is not None else math.nan
            if result.status == "optimal":
                optimum_seconds.append(seconds)
            if math.isfinite(vela):
                ratios.setdefault(name, []).append(ev.total_cycles / vela)
            gap = "" if math.isnan(result.gap) else f"{100 * result.gap:.2f}%"
            print(f"| {model} | {name} | {result.status} | {seconds:.1f} | {ev.total_cycles:.0f} | {heuristic:.0f} | "
                  f"{vela:.0f} | {ev.total_cycles / vela:.3f} | {gap} |", flush=True)
    print()
    if optimum_seconds:
        print(f"proven optimal: {len(optimum_seconds)} cells; time to the optimum: median "
              f"{statistics.median(optimum_seconds):.1f} s, largest {max(optimum_seconds):.1f} s")
    for name, values in ratios.items():
        print(f"{name}: geomean CP-SAT / Vela legacy {math.exp(sum(map(math.log, values)) / len(values)):.3f} "
              f"({len(values)} models)")


if __name__ == "__main__":
    main()
