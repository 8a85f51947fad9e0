#!/usr/bin/env python3
"""CP-SAT on generated networks of growing size: wall time against the limit, and cycles against the heuristic.

Each cell runs the `solve-schedule` CLI as a whole process (so the wall time is what a user waits, loading and
pricing included) on a network from ``npusched.netgen`` and reads its JSON. Prints a Markdown table: passes,
configuration, limit, wall seconds and overshoot, the run's own timings (read+lower, heuristic, solve), the
search mode (one model or windows), candidates or windows, variables, cycles / heuristic, and the gap.

Usage: python scripts/bench_scale.py [--sizes 50 100 ...] [--configs NAME ...] [--limits 10 30] [--arch mixed]
Targets (issue 8): wall <= limit + 2 s everywhere; cycles/heuristic geomean <= 0.95 over 500+ passes at 30 s.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from npusched.netgen import generate
from npusched.vela.command import vela_hardware_args

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "golden" / "configs.json"


def run_cell(model: Path, config: dict, limit: float, out: Path) -> dict:
    command = [sys.executable, "-m", "npusched.app.cli", str(model), "--quiet", "--json", str(out),
               "--time-limit", str(limit), "--workers", "2",
               *vela_hardware_args(config)]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - start
    row: dict = {"wall": wall, "error": done.stderr.strip().splitlines()[-1] if done.returncode else ""}
    if done.returncode == 0:
        doc = json.loads(out.read_text())
        row.update(doc=doc)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 500, 1000, 2000])
    parser.add_argument("--configs", nargs="+", default=["u55-128_hee_shared", "u65-256_mid_dedicated256k"])
    parser.add_argument("--limits", type=float, nargs="+", default=[10.0, 30.0])
    parser.add_argument("--arch", default="mixed", help="netgen architecture (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    configs = json.loads(CONFIGS.read_text())
    print("| passes | config | limit s | wall s | over s | read+lower s | heuristic s | solve s | mode | "
          "candidates / windows | variables | cycles / heuristic | gap |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    ratios: dict[float, list[float]] = {limit: [] for limit in args.limits}
    worst_over = -math.inf
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            model = Path(tmp) / f"{args.arch}_{size}.tflite"
            model.write_bytes(generate(args.arch, size, args.seed))
            for name in args.configs:
                for limit in args.limits:
                    row = run_cell(model, configs[name], limit, Path(tmp) / "out.json")
                    over = row["wall"] - limit
                    worst_over = max(worst_over, over)
                    if "doc" not in row:
                        print(f"| {size} | {name} | {limit:g} | {row['wall']:.1f} | {over:+.1f} | | | | error: "
                              f"{row['error'][:60]} | | | | |")
                        continue
                    doc = row["doc"]
                    passes = sum(1 for op in doc["ops"] if op.get("block_config"))
                    stats = doc.get("model_stats") or {}
                    timings = doc.get("timings_seconds") or {}
                    heuristic = (doc.get("heuristic") or {}).get("cycles")
                    ratio = doc["totals"]["cycles"] / heuristic if heuristic else math.nan
                    if size >= 500 and heuristic:
                        ratios[limit].append(ratio)
                    mode = stats.get("mode", doc.get("status", ""))
                    count = stats.get("candidates", stats.get("windows", ""))
                    gap = doc.get("gap")
                    print(f"| {passes} | {name} | {limit:g} | {row['wall']:.1f} | {over:+.1f} | "
                          f"{timings.get('read', 0) + timings.get('lower', 0):.1f} | "
                          f"{timings.get('heuristic', math.nan):.1f} | {timings.get('solve', math.nan):.1f} | "
                          f"{mode} | {count} | {stats.get('variables', '')} | {ratio:.4f} | "
                          f"{'' if gap is None else f'{100 * gap:.1f}%'} |", flush=True)
    print()
    print(f"largest overshoot of the limit: {worst_over:+.2f} s")
    for limit, values in ratios.items():
        if values:
            geomean = math.exp(sum(math.log(v) for v in values) / len(values))
            print(f"geomean cycles / heuristic over networks of 500+ passes at {limit:g} s: {geomean:.4f} "
                  f"({len(values)} runs)")


if __name__ == "__main__":
    main()
