#!/usr/bin/env python3
"""CP-SAT against the heuristic and Vela on the corpus x the golden configurations, as a sweep (the tables of
docs/results/corpus.md: per model and configuration, and per configuration).

    python scripts/bench/corpus_sweep.py [MODEL_DIR] [--configs c1,c2] [--models m1,m2] [--time-limit 30]
        [--vela] [--jobs 1] [--workers 2] [--store corpus_sweep.sqlite] [--csv out.csv] [--markdown out.md]

Every model x configuration of configs.json with the heuristic (Vela legacy's scheduler: its totals are Vela's) and
CP-SAT, and with --vela the ``vela`` CLI's legacy and default cores, run by the sweep engine as ``npusched-sweep``
runs them (a process per cell, CP-SAT ``--deterministic``) into a resumable store: rerun it and only the missing
cells run, and ``npusched-sweep report STORE`` reads the same store. To the sweep's per-case table it adds Vela
legacy's total (the golden summaries, unless --vela ran the CLI) and CP-SAT against it. The Markdown gives, per
configuration and over the SRAM-constrained ones, the geometric means of CP-SAT / heuristic and CP-SAT / Vela, how
many cells CP-SAT proved optimal, and how long it took to prove them (median and largest).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from npusched.bench import cli, golden, paths, table
from npusched.bench.stats import geomean, ratio
from npusched.errors import exit_status
from npusched.sweep import store as sweep_store
from npusched.sweep.engine import run_sweep
from npusched.sweep.grid import Grid, expand
from npusched.sweep.local import run_local
from npusched.sweep.report import case_rows

COLUMNS = ["model", "config", "vela_legacy_cycles", "vela_default_cycles", "heuristic_cycles", "cpsat_cycles",
           "cpsat_vs_heuristic", "cpsat_vs_vela", "cpsat_vs_vela_default", "cpsat_status", "bound", "gap",
           "heuristic_peak", "cpsat_peak", "bytes_sram", "bytes_dram", "bytes_offchipflash", "variables",
           "constraints", "build_seconds", "heuristic_seconds", "cpsat_seconds", "heuristic_error", "cpsat_error"]
MARKDOWN = ["model", "config", "vela_legacy_cycles", "vela_default_cycles", "heuristic_cycles", "cpsat_cycles",
            "cpsat_vs_heuristic", "cpsat_vs_vela", "cpsat_status", "bound", "gap", "heuristic_peak", "cpsat_peak",
            "bytes_sram", "bytes_dram", "bytes_offchipflash", "cpsat_seconds"]


def comparison_rows(store_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweep's case rows (one per model x configuration) with Vela's totals and CP-SAT against them."""
    rows = []
    for case in case_rows(store_rows, "heuristic"):
        details = json.loads(case.get("cpsat_details") or "{}").get("model_stats", {})
        row = {name: case.get(name) for name in COLUMNS}
        row.update(bound=case.get("cpsat_bound"), gap=case.get("cpsat_gap"), variables=details.get("variables"),
                   constraints=details.get("constraints"), build_seconds=details.get("build_seconds"),
                   vela_legacy_cycles=case.get("vela_cli_legacy_cycles")
                   or golden.legacy_total(case["config"], case["model"]),
                   vela_default_cycles=case.get("vela_cli_default_cycles"))
        for area in ("sram", "dram", "offchipflash"):
            moved = case.get(f"cpsat_bytes_{area}")
            row[f"bytes_{area}"] = round(moved) if moved is not None else None
        row["cpsat_vs_vela"] = ratio(row["cpsat_cycles"], row["vela_legacy_cycles"])
        row["cpsat_vs_vela_default"] = ratio(row["cpsat_cycles"], row["vela_default_cycles"])
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], store_rows: list[dict[str, Any]], args: argparse.Namespace,
             configs: dict[str, golden.Config]) -> str:
    """The per-case table, the geometric means per configuration, and the time to a proven optimum."""
    columns = [c for c in MARKDOWN if c != "vela_default_cycles" or any(r.get(c) for r in rows)]
    groups = {n: [r for r in rows if r["config"] == n] for n in dict.fromkeys(r["config"] for r in rows)}
    groups["SRAM-constrained"] = [r for r in rows if golden.constrained(configs[r["config"]])]
    means = []
    for name, members in groups.items():
        if members:
            means.append({"config": name, "vs_heuristic": geomean(r.get("cpsat_vs_heuristic") for r in members),
                          "vs_vela": geomean(r.get("cpsat_vs_vela") for r in members),
                          "vs_vela_default": geomean(r.get("cpsat_vs_vela_default") for r in members),
                          "optimal": f"{sum(r.get('cpsat_status') == 'optimal' for r in members)}/{len(members)}"})
    mean_columns = ["config", "vs_heuristic", "vs_vela", *(["vs_vela_default"] if args.vela else []), "optimal"]
    # the solve's own time where the run reports one, else the cell's (loading included)
    proven = [r["solve_seconds"] if r["solve_seconds"] is not None else r["wall_seconds"] for r in store_rows
              if r["solver"] == "cpsat" and r["status"] == "optimal"]
    timing = (f"Time to a proven optimum over {len(proven)} cells: median {statistics.median(proven):.1f} s, "
              f"largest {max(proven):.1f} s." if proven else "No cell proven optimal.")
    return "\n".join([f"CP-SAT time limit {args.time_limit:g} s, {args.workers} workers.", "",
                      table.markdown(rows, columns), "", "Geometric means per configuration:", "",
                      table.markdown(means, mean_columns, ["config", "CP-SAT / heuristic", "CP-SAT / Vela legacy",
                                                           *(["CP-SAT / Vela default"] if args.vela else []),
                                                           "proven optimal"]),
                      "", timing]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("model_dir", type=Path, nargs="?", default=None, help="default: the corpus")
    cli.add_configs(parser)
    parser.add_argument("--models", help="comma-separated model names (default: every one in MODEL_DIR)")
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--vela", action="store_true", help="also run the vela CLI (legacy and default cores)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers per cell")
    parser.add_argument("--store", type=Path, default=Path("corpus_sweep.sqlite"))
    parser.add_argument("--csv", type=Path, default=Path("corpus_sweep.csv"))
    parser.add_argument("--markdown", type=Path, default=Path("corpus_sweep.md"))
    args = parser.parse_args(argv)
    configs = golden.load_configs()
    names = golden.select(configs, paths.split_names(args.configs))
    models = tuple(paths.corpus_models(paths.split_names(args.models), args.model_dir))
    solvers = ("heuristic", "cpsat", *(("vela-cli-legacy", "vela-cli-default") if args.vela else ()))
    grid = Grid(models=models, configurations=tuple(golden.sweep_configuration(n, configs[n]) for n in names),
                solvers=solvers, time_limit_seconds=args.time_limit, workers=args.workers)
    cells = tuple(sorted(expand(grid), key=lambda c: (names.index(c.configuration), c.model)))  # as the tables
    store = sweep_store.open_store(args.store)
    execute = functools.partial(run_local, jobs=args.jobs, guard_seconds=2 * args.time_limit + 300)
    print(run_sweep(cells, store, execute, command=" ".join(sys.argv)).line(str(args.store)), flush=True)
    wanted = {cell.cell_id for cell in cells}
    store_rows = [r for r in sweep_store.rows(store) if r["cell_id"] in wanted]
    order = {(c.configuration, c.model): i for i, c in enumerate(cells)}
    rows = sorted(comparison_rows(store_rows), key=lambda r: order[(r["config"], r["model"])])
    table.write_csv(args.csv, rows, COLUMNS)
    args.markdown.write_text(markdown(rows, store_rows, args, configs))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
