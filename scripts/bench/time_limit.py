#!/usr/bin/env python3
"""Does a run end within --time-limit? Whole ``solve-schedule`` processes on generated networks against the limit,
and Vela's backend compile time the limit keeps back for --output-dir.

    python scripts/bench/time_limit.py check [--archs mixed] [--sizes 100 300 700] [--seeds 11] [--configs c1,c2]
        [--limits 10 30] [--repeat 1] [--workers 2] [--output-dir] [--cpu-split] [--large 500]
    python scripts/bench/time_limit.py fit [--archs mixed,mobilenet_v2,unet,nasnet] [--sizes 50 100 200 400 700]
        [--configs c1,c2] [--no-corpus] [--seed 11] [--ahead] [--models FILE_OR_DIR ...]

``check`` runs the command as a user waits for it (start-up, loading, the heuristic, pricing, the search, the
report and with --output-dir Vela's compile) on each network (``npusched.netgen``; --cpu-split: one CPU operator
splitting each, ``mixed`` its own) under each configuration (default u55-128_hee_shared,u65-256_mid_dedicated256k)
and limit, and prints a Markdown row per run: wall time and overshoot, the run's own timings, the search's mode,
candidates or windows, variables, cycles / heuristic, gap, and a verdict: WORSE than the heuristic, OVER TIME (more
than 2 s over), or BAD EXIT (anything but a schedule, or exit 2 with one ``error:`` line that is no internal
error). Then the largest overshoot and the geometric mean of cycles / heuristic over the networks of --large
passes or more. Targets: every run within limit + 2 s; at 30 s, cycles / heuristic <= 0.95 over 500+ passes.
As measured in docs/results/time-limit.md: ``check --sizes 50 100 200 500 1000 2000`` (CP-SAT at scale),
``check --archs all --sizes 60 --seeds 0 --configs all --limits 10 --cpu-split`` (every architecture under every
configuration), ``check --output-dir --archs mixed,mobilenet_v2,nasnet,unet`` (deployed runs).

``fit`` compiles the heuristic's schedule of the corpus and generated networks with Vela's backend, each in a
fresh process as a run compiles once (--ahead: started before the run, as the command line starts it, and only
its finish timed), and prints the compile time against the network's size (NPU passes, weight bytes,
feature-map elements), the least-squares line and that line scaled over 95% of them: the constants of
``npusched.vela.backend.estimated_compile_seconds``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from npusched.bench import cli, golden, netgen_models, paths, process, table
from npusched.bench.stats import geomean, ratio
from npusched.errors import exit_status
from npusched.sweep.grid import find_models

DEFAULT_CONFIGS = "u55-128_hee_shared,u65-256_mid_dedicated256k"
FEATURES = ("passes", "weight_megabytes", "ofm_mega_elements")
COVERED_PERCENT = 95
CHECK_COLUMNS = ["arch", "seed", "passes", "config", "limit", "wall", "over", "load", "heuristic_seconds", "solve",
                 "status", "mode", "count", "variables", "vs_heuristic", "gap", "verdict"]
CHECK_HEADERS = ["arch", "seed", "passes", "config", "limit s", "wall s", "over s", "load+lower s",
                 "heuristic+floors s",
                 "solve s", "status", "mode", "candidates / windows", "variables", "cycles / heuristic", "gap",
                 "verdict"]


def verdict(done: process.ProcessRun, limit: float) -> str:
    """What is wrong with a run, if anything (the module docstring)."""
    found = ""
    if done.done.returncode == 0:
        cycles, heuristic = done.cycles, done.heuristic_cycles
        if cycles is not None and heuristic is not None and cycles > heuristic:
            found = f"WORSE than the heuristic ({cycles:.0f} > {heuristic:.0f})"
    else:
        errors = [line for line in done.done.stderr.splitlines() if line.startswith("error:")]
        if done.done.returncode != 2 or len(errors) != 1 or "internal error" in done.done.stderr:
            found = f"BAD EXIT {done.done.returncode}"
    if done.wall_seconds > limit + 2:
        found += f" OVER TIME ({done.wall_seconds:.1f} s)"
    return found.strip()


def check_row(done: process.ProcessRun, limit: float) -> dict[str, Any]:
    stats, doc = done.stats, done.doc or {}
    gap = doc.get("gap")
    status = doc.get("status", "") if done.done.returncode == 0 else f"exit {done.done.returncode}: {done.error[:70]}"
    return {"wall": round(done.wall_seconds, 1), "over": f"{done.wall_seconds - limit:+.1f}",
            "load": round(done.load_seconds, 1), "heuristic_seconds": round(done.start_seconds, 1),
            "solve": round(done.solve_seconds, 1), "passes": done.passes,
            "status": status, "mode": stats.get("mode", ""), "count": stats.get("candidates", stats.get("windows", "")),
            "variables": stats.get("variables", ""), "gap": "" if gap is None else f"{100 * gap:.1f}%",
            "vs_heuristic": _round(ratio(done.cycles, done.heuristic_cycles), 4), "verdict": verdict(done, limit)}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def check(args: argparse.Namespace) -> int:
    configs = golden.load_configs()
    names = golden.select(configs, paths.split_names(args.configs))
    archs, _ = netgen_models.check(paths.split_names(args.archs))
    printer = table.MarkdownPrinter(CHECK_COLUMNS, CHECK_HEADERS, cell=table.plain, align="lrrlrrrrrrllrrrrl")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for arch in archs:
            for size in args.sizes:
                for seed in args.seeds:
                    splits = 1 if args.cpu_split and arch != "mixed" else None
                    model = netgen_models.write_network(work, arch, size, seed, cpu_splits=splits)
                    for name in names:
                        for limit in args.limits:
                            for _ in range(args.repeat):
                                arguments = ["--time-limit", f"{limit:g}", "--workers", str(args.workers),
                                             *golden.vela_hardware_args(configs[name]),
                                             *(["--output-dir", str(work / "vela")] if args.output_dir else [])]
                                done = process.solve_schedule(model, arguments, work, cwd=paths.repo_root())
                                row = {"arch": arch, "seed": seed, "config": name, "limit": limit,
                                       "size": size, **check_row(done, limit)}
                                rows.append(row)
                                printer.row(row)
    worst = max(rows, key=lambda r: float(r["over"]))
    print(f"\n{len(rows)} runs, {sum(bool(r['verdict']) for r in rows)} with a verdict; largest overshoot "
          f"{worst['over']} s ({worst['arch']} {worst['passes'] or worst['size']} passes, {worst['config']}, "
          f"--time-limit {worst['limit']:g})")
    for limit in args.limits:
        large = [r["vs_heuristic"] for r in rows if r["limit"] == limit and (r["passes"] or 0) >= args.large]
        if any(v is not None for v in large):
            print(f"geomean cycles / heuristic over networks of {args.large}+ passes at {limit:g} s: "
                  f"{geomean(large):.4f} ({sum(v is not None for v in large)} runs)")
    return 0


def compile_one(model: Path, config: golden.Config, ahead: bool) -> dict[str, Any]:
    """In this process (as a run compiles: once, Vela imported by the compile): the heuristic's schedule of
    ``model``, then Vela's backend compiling it, timed; the network's size as the estimate reads it."""
    from npusched.app.pipeline import run
    from npusched.vela.backend import Compilation, VelaRefusal, estimated_compile_seconds

    options = golden.run_options_from_vela_args(model, config, solver="heuristic")
    with tempfile.TemporaryDirectory() as out, Compilation(options, Path(out) / "vela", ahead=ahead) as compilation:
        result = run(options, compilation=compilation)
        ops = result.network.npu_ops
        row = {"passes": len(ops),
               "weight_megabytes": sum(op.weights.size_in_bytes for op in ops if op.weights is not None) / 1e6,
               "ofm_mega_elements": sum(op.ofm.shape.elements() for op in ops) / 1e6,
               "estimate_seconds": estimated_compile_seconds(result.network, started_ahead=ahead)}
        start = time.monotonic()
        try:
            compilation.finish(result)
        except VelaRefusal as exc:  # a refusal is reported, not timed
            return {**row, "error": " ".join(str(exc).split())}
        return {**row, "seconds": time.monotonic() - start}


def fit(args: argparse.Namespace) -> int:
    import numpy as np

    names = golden.select(golden.load_configs(), paths.split_names(args.configs))
    archs, _ = netgen_models.check(paths.split_names(args.archs))
    printer = table.MarkdownPrinter(["model", "config", "passes", "weights", "ofm", "measured", "estimate"],
                                    ["model", "config", "NPU passes", "weights MB", "OFM M elements", "compile s",
                                     "estimate s"], cell=lambda _, v: f"{v:.2f}" if isinstance(v, float) else str(v),
                                    align="llrrrrr")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        models = [] if args.no_corpus else paths.corpus_models()
        models += list(find_models(tuple(args.models))) if args.models else []
        models += [netgen_models.write_network(Path(tmp), a, size, args.seed) for a in archs for size in args.sizes]
        for model in models:
            for name in names:
                done = subprocess.run([sys.executable, __file__, "compile-one", str(model), name,
                                       *(["--ahead"] if args.ahead else [])], capture_output=True, text=True,
                                      check=False)
                if done.returncode != 0:
                    printer.row({"model": model.stem, "config": name, "measured": f"failed: {done.stderr[-80:]}"})
                    continue
                row = json.loads(done.stdout.strip().splitlines()[-1])
                printer.row({"model": model.stem, "config": name, "passes": row["passes"],
                             "weights": row["weight_megabytes"], "ofm": row["ofm_mega_elements"],
                             "estimate": row["estimate_seconds"],
                             "measured": row["seconds"] if "seconds" in row else f"refused: {row['error'][:70]}"})
                if "seconds" in row:
                    rows.append(row)
    x = np.array([[1.0, *(row[f] for f in FEATURES)] for row in rows])
    y = np.array([row["seconds"] for row in rows])
    coefficients = np.clip(np.linalg.lstsq(x, y, rcond=None)[0], 0.0, None)  # no term may lower the estimate
    # Scaled up until the line is over 19 compiles in 20: past its prediction a run writes the fallback compiled
    # beside it, so covering the slowest few would keep back from every run what only they need.
    cover = float(np.percentile(y / (x @ coefficients), COVERED_PERCENT))
    print(f"\n{len(rows)} compilations; least squares (negative terms dropped): "
          + " + ".join(f"{c:.4f} x {name}" for c, name in zip(coefficients, ("1", *FEATURES), strict=True)))
    print(f"over {COVERED_PERCENT}% of them: x {cover:.2f} -> fixed {coefficients[0] * cover:.3f} s, "
          + ", ".join(f"{c * cover:.4f} s per {name}" for c, name in zip(coefficients[1:], FEATURES, strict=True)))
    estimates = np.array([row["estimate_seconds"] for row in rows])
    print(f"the current estimate: at least the measurement on {int(sum(estimates >= y))} of {len(rows)}, "
          f"{max(estimates / y):.1f}x at most, {float(np.median(estimates / y)):.1f}x the median")
    return 0


def main() -> int:
    parser = cli.parser(__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser("check", help="whole runs against --time-limit")
    checking.add_argument("--archs", default="mixed",
                          help="comma-separated netgen architectures, or 'all' (default: mixed)")
    checking.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 700], help="NPU passes asked")
    checking.add_argument("--seeds", type=int, nargs="+", default=[11])
    cli.add_configs(checking, DEFAULT_CONFIGS)
    checking.add_argument("--limits", type=float, nargs="+", default=[10.0, 30.0])
    checking.add_argument("--repeat", type=int, default=1, help="runs per cell (default: %(default)s)")
    checking.add_argument("--workers", type=int, default=2)
    checking.add_argument("--output-dir", action="store_true", help="compile with Vela's backend too, as a deploy")
    checking.add_argument("--cpu-split", action="store_true", help="one CPU operator splitting each network")
    checking.add_argument("--large", type=int, default=500, help="passes from which a network counts as large")
    fitting = commands.add_parser("fit", help="Vela's backend compile time against the network's size")
    fitting.add_argument("--archs", default="mixed,mobilenet_v2,unet,nasnet", help="comma-separated, or 'all'")
    fitting.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 400, 700])
    cli.add_configs(fitting, DEFAULT_CONFIGS)
    fitting.add_argument("--no-corpus", action="store_true", help="generated networks only")
    fitting.add_argument("--seed", type=int, default=11)
    fitting.add_argument("--models", type=Path, nargs="*", default=[], help="more model files or folders of them")
    fitting.add_argument("--ahead", action="store_true",
                         help="the compile started before the run, as the command line starts it: time its finish")
    one = commands.add_parser("compile-one", help="(used by fit) one timed compilation in this process")
    one.add_argument("model", type=Path)
    one.add_argument("config")
    one.add_argument("--ahead", action="store_true")
    args = parser.parse_args()
    if args.command == "compile-one":
        print(json.dumps(compile_one(args.model, golden.load_configs()[args.config], args.ahead)))
        return 0
    return check(args) if args.command == "check" else fit(args)


if __name__ == "__main__":
    sys.exit(exit_status(main))
