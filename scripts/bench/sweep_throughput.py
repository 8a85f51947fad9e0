#!/usr/bin/env python3
"""Sweep throughput: a 40-cell heuristic-only grid with --jobs 1 and with --jobs 2, wall time and speed-up.

    python scripts/bench/sweep_throughput.py [--repeat 2]

The grid of scripts/bench/grids/throughput.yaml (5 corpus models x 2 accelerators x 4 arena sizes, the heuristic:
40 cells), run into a fresh store through the ``npusched-sweep`` command (process start-up and store writes
included). The goal on a 2-core machine is a
speed-up of at least 1.7: measure on an idle machine. Each run also times a pure-Python CPU burn in 1 and 2
processes: its speed-up says how much of the second core other work on the machine left free (2.0 when idle).
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from npusched.bench import cli
from npusched.errors import exit_status

GRID = Path(__file__).resolve().parent / "grids" / "throughput.yaml"


def sweep_seconds(jobs: int, store: Path) -> float:
    args = [sys.executable, "-m", "npusched.sweep.cli", "--grid", str(GRID), "--jobs", str(jobs), "--store",
            str(store), "--quiet"]
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
    parser = cli.parser(__doc__)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.repeat):
            one = sweep_seconds(1, Path(tmp) / f"jobs1_{run}.sqlite")
            two = sweep_seconds(2, Path(tmp) / f"jobs2_{run}.sqlite")
            burn = free_parallelism()
            print(f"run {run + 1}: --jobs 1 {one:.1f} s, --jobs 2 {two:.1f} s, speed-up {one / two:.2f}x "
                  f"(CPU burn speed-up on this machine now: {burn:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
