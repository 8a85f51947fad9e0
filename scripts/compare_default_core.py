#!/usr/bin/env python3
"""CP-SAT against Vela's default (C++) core under that core's own cost model (--estimator vela-default).

Usage: python scripts/compare_default_core.py [--time-limit S] [--workers N] [--configs a,b] [--models a,b] [--csv PATH]

For every corpus model x golden configuration (tests/data/golden/vela-5.2.0-regor) it prints one CSV row: CP-SAT's
total (deterministic), the default core's own schedule priced by npusched's evaluator on Vela legacy's graph (read from
the golden debug database), the default core's own total (its summary.csv), the heuristic's total, CP-SAT's status, and
why npusched's verifier rejects the default core's schedule where it does (its graph is not npusched's: such a
schedule is no start for CP-SAT), and "yes" where the wall clock stopped CP-SAT before its deterministic work
budget (that cell may differ from run to run); then in how many cells CP-SAT is no worse than the default
core's schedule where that schedule is valid, and the geometric mean of the ratio over all cells.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

from npusched.app.pipeline import load_network, run
from npusched.errors import NpuschedError
from npusched.schedule.evaluator import evaluate, verify
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.default_core import read_default_core_ops, schedule_from_default_core
from npusched.vela.fidelity import load_config
from npusched.vela.report import read_summary

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
GOLDEN = DATA / "golden" / "vela-5.2.0-regor"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0, help="per cell, as solve-schedule's default")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--configs", help="comma-separated configuration names (default: all)")
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--csv", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    configs = args.configs.split(",") if args.configs else sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())
    header = ("config,model,cpsat_cycles,default_schedule_cycles,default_core_cycles,heuristic_cycles,status,"
              "default_schedule_rejected,stopped_by_clock")
    rows = [header]
    print(header)
    ratios: list[float] = []
    valid_ratios: list[float] = []
    for config_name in configs:
        config = load_config(GOLDEN, config_name)
        for golden in sorted(p for p in (GOLDEN / config_name).iterdir() if p.is_dir()):
            if args.models and golden.name not in args.models.split(","):
                continue
            options = run_options_from_vela_args(DATA / "corpus" / f"{golden.name}.tflite", config,
                                                 estimator="vela-default", solver="cpsat",
                                                 time_limit_seconds=args.time_limit, workers=args.workers,
                                                 deterministic=True)
            try:
                result = run(options)
            except NpuschedError as exc:
                row = f"{config_name},{golden.name},error,{str(exc)[:80].replace(',', ';')},,,,,"
            else:
                # The default core's schedule read onto Vela legacy's graph, the one CP-SAT's competes on (CP-SAT's
                # may stage inputs and write in place too): the default core's own graph also runs on the NPU what
                # that graph leaves to the CPU (an int16 softmax, NCHW transposes), which would count against it.
                arch, network, _ = load_network(replace(options, solver="vela-default", default_core_graph=False))
                imported = schedule_from_default_core(network, arch, read_default_core_ops(golden / "debug_db.xml"))
                own = evaluate(network, arch, imported.schedule)
                problems = verify(network, arch, imported.schedule, own)
                own_total = float(read_summary(golden / "summary.csv")["cycles_total"])
                assert result.evaluation is not None and result.solver_report is not None
                cycles = result.evaluation.total_cycles
                ratios.append(cycles / own.total_cycles)
                if not problems:
                    valid_ratios.append(cycles / own.total_cycles)
                why = problems[0].replace(",", ";") if problems else ""
                row = (f"{config_name},{golden.name},{cycles:.0f},{own.total_cycles:.0f},{own_total:.0f},"
                       f"{result.solver_report.heuristic_cycles or 0:.0f},{result.status},{why},"
                       f"{'yes' if result.solver_report.model_stats.get('stopped_by_clock') else ''}")
            rows.append(row)
            print(row, flush=True)
    if ratios:
        no_worse = sum(r <= 1.0 for r in valid_ratios)
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        rejected = len(ratios) - len(valid_ratios)
        print(f"SUMMARY CP-SAT no worse than the default core's schedule in {no_worse}/{len(valid_ratios)} cells "
              f"where npusched's verifier accepts that schedule ({rejected} where it does not); geomean CP-SAT / "
              f"default core's schedule {geomean:.3f} over all {len(ratios)}")
    if args.csv:
        args.csv.write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
