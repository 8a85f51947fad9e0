#!/usr/bin/env python3
"""Is npusched's heuristic as fast as Vela's legacy core? Both timed as whole processes on the same model and
configuration, alternately, and compared as the ratio of their medians.

    python scripts/bench/heuristic_speed.py [MODEL_DIR] [--config u55-128_hee_shared] [--runs 3] [--models a,b]

``solve-schedule --solver heuristic`` against ``vela --debug-force-legacy-core`` (the command line
``npusched.vela.command`` builds) on every model of MODEL_DIR (default: the corpus).
Target (issue 4): ratio ours / Vela <= 1.0 for every model.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from npusched.bench import cli, golden, paths, process, vela_cli
from npusched.bench.stats import geomean
from npusched.errors import exit_status


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("model_dir", nargs="?", type=Path, default=None, help="default: the corpus")
    cli.add_config(parser)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", help="comma-separated model names (default: all in MODEL_DIR)")
    args = parser.parse_args()
    config = golden.config(args.config)
    models = paths.corpus_models(paths.split_names(args.models), args.model_dir)
    hardware = golden.vela_hardware_args(config)
    print(f"config {args.config}; {args.runs} runs each, alternating; whole-process wall seconds (median)")
    print(f"{'model':<26} {'npusched':>9} {'vela':>9} {'ratio':>7}")
    ratios = []
    with tempfile.TemporaryDirectory() as out_dir:
        for model in models:
            ours_command = [sys.executable, "-m", "npusched.app.cli", str(model), *hardware, "--solver", "heuristic",
                            "--quiet"]
            vela_command = vela_cli.vela_command(golden.run_options_from_vela_args(model, config), Path(out_dir))
            ours, vela = [], []
            try:
                for _ in range(args.runs):
                    ours.append(process.wall_seconds(ours_command))
                    vela.append(process.wall_seconds(vela_command))
            except RuntimeError as exc:
                print(f"{model.stem:<26} skipped: {exc}")
                continue
            ratio = statistics.median(ours) / statistics.median(vela)
            ratios.append(ratio)
            print(f"{model.stem:<26} {statistics.median(ours):>9.2f} {statistics.median(vela):>9.2f} {ratio:>7.2f}")
    if ratios:
        print(f"geometric mean ratio {geomean(ratios):.2f}; worst {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
