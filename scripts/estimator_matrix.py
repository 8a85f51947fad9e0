#!/usr/bin/env python3
"""Like for like: CP-SAT against each of Vela's two cores, each priced by each cost model (a 2x2 per configuration).

Usage:
    python scripts/estimator_matrix.py [--time-limit 15] [--workers 1] [--configs a,b] [--models a,b]
        [--netgen [--netgen-archs mobilenet_v2,efficientnet,resnet,audio1d,unet] [--netgen-passes 60]
         [--netgen-seed 0]] [--no-corpus] [--jobs 1] [--csv docs/estimator_matrix.csv] [--summary-only]

For every corpus model (tests/data/corpus) x golden configuration (tests/data/golden/configs.json), and with
--netgen for generated networks (npusched.netgen.generate) x the same configurations, it runs, under each of the
two estimators (vela-legacy, vela-default):

* ``heuristic``: the legacy core's schedule (npusched's exact reproduction of Vela legacy's scheduler);
* ``vela-default``: the default core's schedule (the ``vela`` CLI's default core, read back);
* ``cpsat``: CP-SAT optimising under that estimator (deterministic, --workers 1, --time-limit 15 by default, as
  scripts/compare_default_core.py);

and records every schedule's total under both estimators (``cycles_by_estimator``): one CSV row per run. A run
under estimator E lowers the graph E's core schedules (under vela-default strided convolutions are kept), so each
cell compares schedules of the same graph: CP-SAT optimised under E / that core's schedule, both from runs under
E, priced by E (the default core's schedule is read onto that graph too: ``RunOptions.default_core_graph``).

The summary prints, per configuration and overall, the 2x2 of geometric means (rows: against the legacy core's
schedule / against the default core's schedule; columns: priced by vela-legacy / priced by vela-default) with the
worst cell, then the cross numbers: CP-SAT optimised under one estimator, priced by the other, against CP-SAT
optimised under that other one and against the cores' schedules (what optimising under the wrong model costs).
A cell whose run fails (no schedule fits, Vela fails) is counted and listed, one line each, never dropped.

The CSV is written row by row and read back on start: rerun it and only the missing runs run (delete it to start
over). --summary-only prints the summary from the CSV without running anything.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched.app.pipeline import run  # noqa: E402
from npusched.netgen import generate  # noqa: E402
from npusched.vela.command import run_options_from_vela_args  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
CONFIGS = DATA / "golden" / "configs.json"
ESTIMATORS = ("vela-legacy", "vela-default")
SOLVERS = ("heuristic", "vela-default", "cpsat")
CORES = {"heuristic": "the legacy core's schedule", "vela-default": "the default core's schedule"}
SHORT = {"vela-legacy": "legacy", "vela-default": "default"}
NETGEN_ARCHS = ("mobilenet_v2", "efficientnet", "resnet", "audio1d", "unet")
COLUMNS = ["source", "config", "model", "solver", "estimator", "status", "legacy_cycles", "default_cycles",
           "seconds", "error"]


def run_case(case: dict[str, Any], config: dict[str, Any], todo: list[tuple[str, str]], time_limit: float,
             workers: int) -> list[dict[str, Any]]:
    """The runs ``todo`` ((solver, estimator) pairs) of one model x configuration, one row each."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(case["path"]) if case["path"] else Path(tmp) / f"{case['model']}.tflite"
        if not case["path"]:
            arch, passes, seed = case["netgen"]
            model.write_bytes(generate(arch, passes, seed, cpu_splits=1))
        for solver, estimator in todo:
            extra = (dict(time_limit_seconds=time_limit, workers=workers, deterministic=True)
                     if solver == "cpsat" else {})
            if solver == "vela-default":
                # on the graph CP-SAT schedules: the default core's own also runs on the NPU what this one leaves to
                # the CPU (an int16 softmax, NCHW transposes), which would count against it
                extra["default_core_graph"] = False
            options = run_options_from_vela_args(model, config, solver=solver, estimator=estimator, **extra)
            row: dict[str, Any] = {"source": case["source"], "config": case["config"], "model": case["model"],
                                   "solver": solver, "estimator": estimator}
            start = time.monotonic()
            try:
                result = run(options)
            except Exception as exc:  # noqa: BLE001 - any failure is one failed cell, listed in the summary
                row.update(status="error", error=f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300])
            else:
                totals = result.cycles_by_estimator
                row.update(status=result.status, legacy_cycles=round(totals["vela-legacy"]),
                           default_cycles=round(totals["vela-default"]))
            row["seconds"] = round(time.monotonic() - start, 1)
            rows.append(row)
    return rows


def load_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def key(row: dict[str, Any]) -> tuple[str, str, str, str, str]:
    return row["source"], row["config"], row["model"], row["solver"], row["estimator"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def cycles(row: dict[str, Any] | None, estimator: str) -> float | None:
    """The row's total priced by ``estimator``; None when the run failed."""
    if row is None or row.get("status") in (None, "", "error"):
        return None
    value = row.get(f"{SHORT[estimator]}_cycles")
    return float(value) if value not in (None, "") else None


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The 2x2 tables, the cross numbers and the failures, as printed lines."""
    by_case: dict[tuple[str, str, str], dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        by_case[row["source"], row["config"], row["model"]][row["solver"], row["estimator"]] = row
    lines: list[str] = []
    failures: list[str] = []
    for (source, config, model), runs in sorted(by_case.items()):
        for (solver, estimator), row in sorted(runs.items()):
            if row.get("status") == "error":
                failures.append(f"FAILED {source} {config} {model} {solver} under {estimator}: {row.get('error')}")
    # cell (core, priced-by) -> group -> list of (case, ratio); group is the configuration or "all"
    groups = sorted({config for _, config, _ in by_case}) + ["all"]
    for source in sorted({source for source, _, _ in by_case}):
        cases = {case: runs for case, runs in by_case.items() if case[0] == source}
        lines.append(f"== {source}: CP-SAT (optimised under the column's estimator) / the core's schedule, both "
                     "priced by the column's estimator (geomean; worst; cells) ==")
        for group in groups:
            chosen = {case: runs for case, runs in cases.items() if group in ("all", case[1])}
            if not chosen:
                continue
            lines.append(f"-- {group} ({len(chosen)} models x configurations) --")
            lines.append(f"{'':42s} | {'priced by vela-legacy':>34s} | {'priced by vela-default':>34s}")
            for core, label in CORES.items():
                cells = []
                for estimator in ESTIMATORS:
                    ratios, missing = [], []
                    for case, runs in sorted(chosen.items()):
                        ours = cycles(runs.get(("cpsat", estimator)), estimator)
                        theirs = cycles(runs.get((core, estimator)), estimator)
                        if ours is None or theirs is None:
                            missing.append(case[2] if group != "all" else f"{case[1]}/{case[2]}")
                        else:
                            ratios.append((ours / theirs, case))
                    if ratios:
                        worst = max(ratios)
                        text = (f"{geomean([r for r, _ in ratios]):.3f}; worst {worst[0]:.3f} ({worst[1][2]}); "
                                f"{len(ratios)}" + (f" (+{len(missing)} failed)" if missing else ""))
                    else:
                        text = f"- ({len(missing)} failed)"
                    cells.append(text)
                lines.append(f"against {label:34s} | {cells[0]:>34s} | {cells[1]:>34s}")
            for wrong, right in (("vela-legacy", "vela-default"), ("vela-default", "vela-legacy")):
                against: dict[str, list[float]] = defaultdict(list)
                for _, runs in sorted(chosen.items()):
                    ours = cycles(runs.get(("cpsat", wrong)), right)
                    if ours is None:
                        continue
                    for name, solver in (("CP-SAT under " + right, "cpsat"), ("legacy core", "heuristic"),
                                         ("default core", "vela-default")):
                        theirs = cycles(runs.get((solver, right)), right)
                        if theirs is not None:
                            against[name].append(ours / theirs)
                parts = [f"/ {name} {geomean(values):.3f} (worst {max(values):.3f}, slower in "
                         f"{sum(v > 1.0005 for v in values)}/{len(values)})"
                         for name, values in against.items() if values]
                lines.append(f"cross: CP-SAT optimised under {wrong}, priced by {right}: " + "; ".join(parts))
    lines.append(f"{len(failures)} failed runs" + (":" if failures else ""))
    lines.extend(failures)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--configs", help="comma-separated configuration names (default: all five)")
    parser.add_argument("--models", help="comma-separated corpus model names (default: all)")
    parser.add_argument("--no-corpus", action="store_true", help="leave out the corpus models")
    parser.add_argument("--netgen", action="store_true", help="also generated networks")
    parser.add_argument("--netgen-archs", default=",".join(NETGEN_ARCHS))
    parser.add_argument("--netgen-passes", type=int, default=60)
    parser.add_argument("--netgen-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="model x configuration cases run in parallel")
    parser.add_argument("--csv", type=Path, default=REPO / "docs" / "estimator_matrix.csv")
    parser.add_argument("--summary-only", action="store_true", help="print the summary of --csv, run nothing")
    args = parser.parse_args()

    done = load_rows(args.csv)
    if not args.summary_only:
        configs = json.loads(CONFIGS.read_text())
        names = args.configs.split(",") if args.configs else sorted(configs)
        cases: list[dict[str, Any]] = []
        for name in names:
            if not args.no_corpus:
                for path in sorted((DATA / "corpus").glob("*.tflite")):
                    if not args.models or path.stem in args.models.split(","):
                        cases.append({"source": "corpus", "config": name, "model": path.stem, "path": str(path)})
            if args.netgen:
                for arch in args.netgen_archs.split(","):
                    cases.append({"source": "netgen", "config": name, "path": "",
                                  "model": f"{arch}_{args.netgen_passes}_{args.netgen_seed}",
                                  "netgen": (arch, args.netgen_passes, args.netgen_seed)})
        have = {key(row) for row in done}
        work = []
        for case in cases:
            todo = [(solver, estimator) for solver in SOLVERS for estimator in ESTIMATORS
                    if (case["source"], case["config"], case["model"], solver, estimator) not in have]
            if todo:
                work.append((case, configs[case["config"]], todo))
        print(f"{len(cases)} cases, {len(work)} with runs to do ({sum(len(t) for _, _, t in work)} runs)",
              flush=True)
        new = not args.csv.exists() or args.csv.stat().st_size == 0
        with args.csv.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            if new:
                writer.writeheader()
            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                futures = [pool.submit(run_case, case, config, todo, args.time_limit, args.workers)
                           for case, config, todo in work]
                for future in futures:
                    for row in future.result():
                        writer.writerow(row)
                        print(",".join(str(row.get(name, "")) for name in COLUMNS), flush=True)
                    handle.flush()
                    done.extend(future.result())
    for line in summary(done):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
