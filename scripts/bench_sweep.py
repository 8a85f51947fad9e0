"""Sweep throughput: a 40-cell heuristic-only grid with --jobs 1 and with --jobs 2, wall time and speed-up.

    python scripts/bench_sweep.py [MODEL_DIR] [--repeat 2]

5 corpus models x 2 accelerators x 4 arena sizes = 40 cells, each run into a fresh store through the
`npusched-sweep` command (process start-up and store writes included). The goal on a 2-core machine is a
speed-up of at least 1.7. Each run also times a pure-Python CPU burn in 1 and 2 processes: its speed-up says how
much of the second core other work on the machine left free (2.0 on an idle machine).
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("mobilenet_v2_224_int8", "person_detect", "vww_96_int8", "resnet_large_ic_int8", "str_ww_int8")


def sweep_seconds(model_dir: Path, jobs: int, store: Path) -> float:
    args = [sys.executable, "-m", "npusched.sweep.cli", *(str(model_dir / f"{m}.tflite") for m in MODELS),
            "--accelerator-config", "ethos-u55-128", "ethos-u65-256", "--arena-cache-size", "384k", "512k", "1M",
            "2M", "--solver", "heuristic", "--jobs", str(jobs), "--store", str(store), "--quiet"]
    start = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if done.returncode != 0 or "40 cells: 40 run, 0 failed" not in done.stdout:
        sys.exit(f"error: the sweep did not run its 40 cells: {done.stdout.strip()} {done.stderr.strip()}")
    return seconds


def _burn(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i
    return total


def free_parallelism() -> float:
    """Wall time of 4 equal CPU-bound tasks in 1 process over that in 2 processes."""
    seconds = []
    for processes in (1, 2):
        start = time.monotonic()
        with multiprocessing.Pool(processes) as pool:
            pool.map(_burn, [5_000_000] * 4)
        seconds.append(time.monotonic() - start)
    return seconds[0] / seconds[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, nargs="?", default=REPO / "tests" / "data" / "corpus")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.repeat):
            one = sweep_seconds(args.model_dir, 1, Path(tmp) / f"jobs1_{run}.sqlite")
            two = sweep_seconds(args.model_dir, 2, Path(tmp) / f"jobs2_{run}.sqlite")
            burn = free_parallelism()
            print(f"run {run + 1}: --jobs 1 {one:.1f} s, --jobs 2 {two:.1f} s, speed-up {one / two:.2f}x "
                  f"(CPU burn speed-up on this machine now: {burn:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
