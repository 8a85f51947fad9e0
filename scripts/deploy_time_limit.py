#!/usr/bin/env python3
"""--time-limit with --output-dir: how long Vela's backend takes to compile a schedule, and whether whole runs
end within the limit (issue 21, item 3).

``fit`` compiles the heuristic's schedule of corpus models and generated networks with Vela's backend
(``compile_schedule``, each in a fresh process, as a run compiles once and imports Vela for it) and prints the
compile time against the network's size (NPU passes, weight bytes, feature-map elements), the least-squares
line and that line scaled over every point; the pipeline keeps back
``npusched.vela.backend.estimated_compile_seconds`` (such a line) for the compile.

``check`` runs the ``solve-schedule`` command as a whole process (start-up, loading, solving and compiling
included) with ``--output-dir`` on generated networks, and prints each run's wall time and overshoot of the
limit; the target is an overshoot of at most 2 s. With ``--no-output-dir`` the same without the compile.

Usage:
    python scripts/deploy_time_limit.py fit [--sizes 50 100 200 400 700] [--archs mixed mobilenet_v2 ...]
    python scripts/deploy_time_limit.py check [--sizes 100 300 700] [--limits 10 30] [--archs mixed]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "corpus"
CONFIGS = json.loads((ROOT / "tests" / "data" / "golden" / "configs.json").read_text())
DEFAULT_CONFIGS = ("u55-128_hee_shared", "u65-256_mid_dedicated256k")


def compile_one(model: Path, config: str, ahead: bool) -> dict:
    """In a fresh process (as a run compiles: once, Vela imported by the compile): the heuristic's schedule of
    ``model``, then Vela's backend compiling it, timed; the network's size as the estimate reads it. With ``ahead``
    the compile is started before the run, as the command line starts it, and only its finish is timed."""
    from npusched.app.pipeline import run
    from npusched.vela.backend import Compilation, VelaRefusal, estimated_compile_seconds
    from npusched.vela.command import run_options_from_vela_args

    options = run_options_from_vela_args(model, CONFIGS[config], solver="heuristic")
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


FEATURES = ("passes", "weight_megabytes", "ofm_mega_elements")


def fit(args: argparse.Namespace) -> None:
    import numpy as np

    from npusched.netgen import generate

    rows: list[dict] = []
    print("| model | config | NPU passes | weights MB | OFM M elements | compile s | estimate s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        models = [] if args.no_corpus else sorted(CORPUS.glob("*.tflite"))
        for arch in args.archs:
            for size in args.sizes:
                path = Path(tmp) / f"{arch}_{size}.tflite"
                path.write_bytes(generate(arch, size, args.seed))
                models.append(path)
        for model in models:
            for name in args.configs:
                done = subprocess.run([sys.executable, __file__, "compile-one", str(model), name,
                                       *(["--ahead"] if args.ahead else [])],
                                      capture_output=True, text=True, cwd=ROOT)
                if done.returncode != 0:
                    print(f"| {model.stem} | {name} | | | | failed: {done.stderr.strip()[-80:]} | |")
                    continue
                row = json.loads(done.stdout.strip().splitlines()[-1])
                measured = f"{row['seconds']:.2f}" if "seconds" in row else f"refused: {row['error'][:70]}"
                print(f"| {model.stem} | {name} | {row['passes']} | {row['weight_megabytes']:.2f} | "
                      f"{row['ofm_mega_elements']:.2f} | {measured} | {row['estimate_seconds']:.2f} |", flush=True)
                if "seconds" in row:
                    rows.append(row)
    x = np.array([[1.0, *(row[f] for f in FEATURES)] for row in rows])
    y = np.array([row["seconds"] for row in rows])
    coefficients = np.clip(np.linalg.lstsq(x, y, rcond=None)[0], 0.0, None)  # no term may lower the estimate
    cover = max(y / (x @ coefficients))  # scaled up until the line is over every measurement
    print(f"\n{len(rows)} compilations; least squares (negative terms dropped): "
          + " + ".join(f"{c:.4f} x {name}" for c, name in zip(coefficients, ("1", *FEATURES), strict=True)))
    print(f"over every point: x {cover:.2f} -> fixed {coefficients[0] * cover:.3f} s, "
          + ", ".join(f"{c * cover:.4f} s per {name}" for c, name in zip(coefficients[1:], FEATURES, strict=True)))
    estimates = np.array([row["estimate_seconds"] for row in rows])
    print(f"the current estimate: at least the measurement on {int(sum(estimates >= y))} of {len(rows)}, "
          f"{max(estimates / y):.1f}x at most, {float(np.median(estimates / y)):.1f}x the median")


def check(args: argparse.Namespace) -> None:
    from npusched.netgen import generate
    from npusched.vela.command import vela_hardware_args

    print("| arch | passes | config | limit s | wall s | over s | load+lower s | heuristic s | solve s | status |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    worst: tuple[float, str] = (-float("inf"), "")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs:
            for size in args.sizes:
                model = Path(tmp) / f"{arch}_{size}.tflite"
                model.write_bytes(generate(arch, size, args.seed))
                for name in args.configs:
                    for limit in args.limits:
                        for _ in range(args.repeat):
                            out = Path(tmp) / "out.json"
                            out.unlink(missing_ok=True)
                            command = [sys.executable, "-m", "npusched.app.cli", str(model), "--quiet",
                                       "--json", str(out), "--time-limit", f"{limit:g}", "--workers",
                                       str(args.workers), *vela_hardware_args(CONFIGS[name])]
                            if not args.no_output_dir:
                                command += ["--output-dir", str(Path(tmp) / "vela")]
                            start = time.monotonic()
                            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
                            wall = time.monotonic() - start
                            over = wall - limit
                            doc = json.loads(out.read_text()) if out.exists() else {}
                            timings = doc.get("timings_seconds") or {}
                            status = doc.get("status", "") if done.returncode == 0 else \
                                f"exit {done.returncode}: {done.stderr.strip()[-70:]}"
                            passes = sum(1 for op in doc.get("ops", ()) if op.get("block_config")) or size
                            loading = sum(timings.get(key, 0.0) for key in ("read", "normalise", "lower"))
                            print(f"| {arch} | {passes} | {name} | {limit:g} | {wall:.1f} | {over:+.1f} | "
                                  f"{loading:.1f} | {timings.get('heuristic', float('nan')):.1f} | "
                                  f"{timings.get('solve', float('nan')):.1f} | {status} |", flush=True)
                            if over > worst[0]:
                                worst = (over, f"{arch} {passes} passes, {name}, --time-limit {limit:g}")
    print(f"\nlargest overshoot: {worst[0]:+.2f} s ({worst[1]})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fitting = commands.add_parser("fit", help="Vela's backend compile time against the pass count")
    fitting.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 400, 700])
    fitting.add_argument("--archs", nargs="+", default=["mixed", "mobilenet_v2", "unet", "nasnet"])
    fitting.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS))
    fitting.add_argument("--no-corpus", action="store_true", help="generated networks only")
    fitting.add_argument("--seed", type=int, default=11)
    fitting.add_argument("--ahead", action="store_true",
                         help="the compile started before the run, as the command line starts it: time its finish")
    checking = commands.add_parser("check", help="whole runs with --output-dir against --time-limit")
    checking.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 700])
    checking.add_argument("--archs", nargs="+", default=["mixed"])
    checking.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS))
    checking.add_argument("--limits", type=float, nargs="+", default=[10.0, 30.0])
    checking.add_argument("--repeat", type=int, default=1, help="runs per cell (default: %(default)s)")
    checking.add_argument("--workers", type=int, default=2)
    checking.add_argument("--no-output-dir", action="store_true", help="the same runs without the compile")
    checking.add_argument("--seed", type=int, default=11)
    one = commands.add_parser("compile-one", help="(used by fit) one timed compilation in this process")
    one.add_argument("model", type=Path)
    one.add_argument("config")
    one.add_argument("--ahead", action="store_true")
    args = parser.parse_args()
    if args.command == "compile-one":
        print(json.dumps(compile_one(args.model, args.config, args.ahead)))
    else:
        fit(args) if args.command == "fit" else check(args)


if __name__ == "__main__":
    main()
