#!/usr/bin/env python3
"""Does what fits npusched's memory model fit Vela's allocator? CP-SAT schedules of generated networks compiled
with Vela's backend (issue 21).

Cells: every netgen architecture x the two Dedicated_Sram golden configurations and a Shared_Sram arena
(u55-128, High_End_Embedded) at 0.5x, 0.75x and 1x the heuristic's peak fast storage. Each cell runs
`solve-schedule` (CP-SAT, --time-limit) with --json and --output-dir and records: whether it compiled, Vela's own
allocation of the fast storage against the limit, npusched's allocation, whether Vela's estimate equals npusched's,
and how many allocation repairs CP-SAT needed and what they cost in cycles. Prints one line per cell, then the
totals. One cell at a time (the machine is shared).

Usage: python scripts/allocation_check.py [--passes 30] [--time-limit 10] [--arch A ...] [--keras-style]
                                          [--csv PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from npusched.netgen import ARCHITECTURES, generate
from npusched.vela.command import vela_hardware_args

ROOT = Path(__file__).resolve().parents[1]
DEDICATED = ("u65-256_mid_dedicated256k", "u65-512_high_dedicated384k")
SHARED = "u55-128_hee_shared"
ARENA_FACTORS = (0.5, 0.75, 1.0)


def _solve(model: Path, hardware: list[str], extra: list[str], out: Path) -> tuple[subprocess.CompletedProcess[str],
                                                                                      dict[str, Any] | None, float]:
    json_path = out / "run.json"
    json_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "npusched.app.cli", str(model), "--quiet", "--json", str(json_path),
               *hardware, *extra]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - start
    doc = json.loads(json_path.read_text()) if json_path.exists() else None
    return done, doc, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--arch", nargs="+", default=list(ARCHITECTURES))
    parser.add_argument("--keras-style", action="store_true",
                        help="the networks exported as Keras does (run-time shape arithmetic, normalised first)")
    parser.add_argument("--csv", type=Path, help="also write one row per cell here")
    args = parser.parse_args()
    configs = json.loads((ROOT / "tests" / "data" / "golden" / "configs.json").read_text())
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for arch in args.arch:
            model = work / f"{arch}_{args.passes}_{args.seed}.tflite"
            model.write_bytes(generate(arch, args.passes, args.seed, keras_style=args.keras_style))
            cells: list[tuple[str, list[str]]] = [(name, vela_hardware_args(configs[name])) for name in DEDICATED]
            shared = vela_hardware_args(configs[SHARED])
            _, heuristic, _ = _solve(model, shared, ["--solver", "heuristic"], work)
            if heuristic is not None:
                peak = int(heuristic["totals"]["peak_fast_storage_bytes"])
                cells += [(f"{SHARED}_x{factor:g}", [*shared, "--arena-cache-size", str(int(factor * peak))])
                          for factor in ARENA_FACTORS]
            for name, hardware in cells:
                out = work / "vela-out"
                done, doc, wall = _solve(model, hardware, ["--time-limit", f"{args.time_limit:g}", "--workers",
                                                           str(args.workers), "--output-dir", str(out)], work)
                rows.append(_row(arch, name, done, doc, wall))
                print(_line(rows[-1]), flush=True)
    _summary(rows)
    if args.csv is not None:
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _row(arch: str, cell: str, done: subprocess.CompletedProcess[str], doc: dict[str, Any] | None,
         wall: float) -> dict[str, Any]:
    backend = (doc or {}).get("vela_backend") or {}
    allocation = (doc or {}).get("fast_storage_allocation") or {}
    repairs = ((doc or {}).get("model_stats") or {}).get("allocation_repairs") or {}
    error = next((line for line in done.stderr.splitlines() if line.startswith("error:")), "")
    return {
        "arch": arch, "cell": cell, "exit": done.returncode, "wall_seconds": round(wall, 1),
        "status": (doc or {}).get("status", ""), "compiled": bool(backend.get("tflite")) and done.returncode == 0,
        "limit_bytes": allocation.get("limit_bytes", ""), "live_peak_bytes": allocation.get("live_peak_bytes", ""),
        "npusched_allocation_bytes": allocation.get("size_bytes", ""),
        "vela_allocation_bytes": backend.get("vela_allocation_bytes", ""),
        "vela_fits": backend.get("allocation_fits", ""), "estimates_agree": backend.get("agreed", ""),
        "repairs": repairs.get("rounds", ""), "rejected_sweeps": repairs.get("rejected_sweeps", ""),
        "repair_cost_cycles": repairs.get("cost_cycles", ""),
        "error": error[:160],
    }


def _line(row: dict[str, Any]) -> str:
    if row["exit"] != 0:
        return f"{row['arch']:13s} {row['cell']:34s} {row['wall_seconds']:5.1f}s exit {row['exit']}: {row['error']}"
    return (f"{row['arch']:13s} {row['cell']:34s} {row['wall_seconds']:5.1f}s {row['status']:9s} limit "
            f"{row['limit_bytes']} peak {row['live_peak_bytes']} ours {row['npusched_allocation_bytes']} vela "
            f"{row['vela_allocation_bytes']} fits {row['vela_fits']} agree {row['estimates_agree']} repairs "
            f"{row['repairs']} undone {row['rejected_sweeps']} cost {row['repair_cost_cycles']}")


def _summary(rows: list[dict[str, Any]]) -> None:
    compiled = [r for r in rows if r["compiled"]]
    fits = [r for r in compiled if r["vela_fits"] is True]
    agree = [r for r in compiled if r["estimates_agree"] is True]
    repaired = [r for r in rows if (isinstance(r["repairs"], int) and r["repairs"] > 0) or r["rejected_sweeps"]]
    fragmented = [r for r in compiled if r["npusched_allocation_bytes"] != r["live_peak_bytes"]]
    no_schedule = [r for r in rows if r["exit"] == 2 and not r["compiled"]]
    print(f"\n{len(rows)} cells: {len(compiled)} compiled, Vela's allocation within the limit in {len(fits)}, "
          f"estimates equal in {len(agree)}; {len(no_schedule)} ended with an error (no schedule or refused), "
          f"{len(rows) - len(compiled) - len(no_schedule)} otherwise")
    print(f"allocation above the live peak (fragmentation) in {len(fragmented)} compiled cells; repair needed in "
          f"{len(repaired)} cells ({sum(r['repairs'] or 0 for r in repaired)} re-solves, "
          f"{sum(r['rejected_sweeps'] or 0 for r in repaired)} window sweeps undone), costing "
          f"{sum(float(r['repair_cost_cycles'] or 0) for r in repaired):.0f} cycles in all")
    for r in rows:
        if r["compiled"] and (r["vela_fits"] is not True or r["estimates_agree"] is not True):
            print(f"  NOT OK: {_line(r)}")
        elif r["exit"] not in (0, 2):
            print(f"  BAD EXIT: {_line(r)}")


if __name__ == "__main__":
    main()
