#!/usr/bin/env python3
"""CP-SAT on generated networks of every architecture under the five golden configurations, through the CLI.

Each cell: `solve-schedule` with the default solver; it must exit 0 with a schedule (every printed schedule has
passed the verifier) no worse than the heuristic's, or 2 with one `error:` line that is not an internal error,
within the time limit + 2 s. Prints one line per cell and a summary.

Usage: python scripts/netgen_cpsat.py [--passes 60] [--seeds 1] [--time-limit 10] [--arch A ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from npusched.netgen import ARCHITECTURES, generate
from npusched.vela.command import vela_hardware_args

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, nargs="+", default=[60])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--arch", nargs="+", default=list(ARCHITECTURES))
    args = parser.parse_args()
    configs = json.loads((ROOT / "tests" / "data" / "golden" / "configs.json").read_text())
    problems = cells = 0
    worst_over = -1e9
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.arch:
            for passes in args.passes:
                for seed in range(args.seeds):
                    model = Path(tmp) / f"{arch}_{passes}_{seed}.tflite"
                    model.write_bytes(generate(arch, passes, seed, cpu_splits=1 if arch != "mixed" else None))
                    for name, config in configs.items():
                        out = Path(tmp) / "out.json"
                        out.unlink(missing_ok=True)
                        command = [sys.executable, "-m", "npusched.app.cli", str(model), "--quiet", "--json", str(out),
                                   "--time-limit", str(args.time_limit), "--workers", "2",
                                   *vela_hardware_args(config)]
                        start = time.monotonic()
                        done = subprocess.run(command, capture_output=True, text=True)
                        wall = time.monotonic() - start
                        worst_over = max(worst_over, wall - args.time_limit)
                        cells += 1
                        verdict = ""
                        if done.returncode == 0:
                            doc = json.loads(out.read_text())
                            heuristic = (doc.get("heuristic") or {}).get("cycles")
                            cycles = doc["totals"]["cycles"]
                            if heuristic is not None and cycles > heuristic:
                                verdict = f"WORSE than the heuristic ({cycles:.0f} > {heuristic:.0f})"
                            line = (f"{doc['status']:9s} {cycles / heuristic if heuristic else float('nan'):.4f} "
                                    f"{(doc.get('model_stats') or {}).get('mode', '')}")
                        else:
                            errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
                            line = done.stderr.strip().splitlines()[-1][:110] if done.stderr.strip() else ""
                            if done.returncode != 2 or len(errors) != 1 or "internal error" in done.stderr:
                                verdict = f"BAD EXIT {done.returncode}"
                        if wall > args.time_limit + 2:
                            verdict += f" OVER TIME ({wall:.1f} s)"
                        problems += bool(verdict)
                        print(f"{arch:13s} {passes:5d} {seed} {name:30s} {wall:5.1f}s {line} {verdict}", flush=True)
    print(f"\n{cells} cells, {problems} problems; largest overshoot of the limit {worst_over:+.2f} s")


if __name__ == "__main__":
    main()
