#!/usr/bin/env python3
"""Wall time of our heuristic (`solve-schedule --solver heuristic`) against Vela's legacy core on the same model
and configuration, both timed as whole processes, alternately, and compared as the ratio of medians.

Usage: python scripts/bench_heuristic.py [MODEL_DIR] [--config NAME] [--configs-file PATH] [--runs N] [--models a,b]
(defaults: the corpus and configurations in tests/data)
Target (issue 4): ratio ours/Vela <= 1.0 for every model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from npusched.vela.command import vela_hardware_args

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def _wall_seconds(command: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        raise RuntimeError(f"{command[0]} failed: {last[0]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", type=Path, default=DATA / "corpus")
    parser.add_argument("--config", default="u55-128_hee_shared")
    parser.add_argument("--configs-file", type=Path, default=DATA / "golden" / "configs.json")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", help="comma-separated model names (default: all in MODEL_DIR)")
    args = parser.parse_args()
    config = json.loads(args.configs_file.read_text())[args.config]
    models = sorted(args.model_dir.glob("*.tflite"))
    if args.models:
        models = [m for m in models if m.stem in set(args.models.split(","))]
    hw = vela_hardware_args(config)
    print(f"config {args.config}; {args.runs} runs each, alternating; whole-process wall seconds (median)")
    print(f"{'model':<26} {'npusched':>9} {'vela':>9} {'ratio':>7}")
    ratios = []
    with tempfile.TemporaryDirectory() as out_dir:
        for model in models:
            ours_cmd = [sys.executable, "-m", "npusched.app.cli", str(model), *hw, "--solver", "heuristic", "--quiet"]
            vela_cmd = ["vela", str(model), *hw, "--debug-force-legacy-core", "--output-dir", out_dir]
            ours, vela = [], []
            try:
                for _ in range(args.runs):
                    ours.append(_wall_seconds(ours_cmd))
                    vela.append(_wall_seconds(vela_cmd))
            except RuntimeError as exc:
                print(f"{model.stem:<26} skipped: {exc}")
                continue
            ratio = statistics.median(ours) / statistics.median(vela)
            ratios.append(ratio)
            print(f"{model.stem:<26} {statistics.median(ours):>9.2f} {statistics.median(vela):>9.2f} {ratio:>7.2f}")
    if ratios:
        print(f"geometric mean ratio {statistics.geometric_mean(ratios):.2f}; worst {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
