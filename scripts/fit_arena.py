#!/usr/bin/env python3
"""Does npusched fit generated networks into arenas Vela's legacy core over-runs (by up to 1.5x)?

Usage: python scripts/fit_arena.py --peaks GRID.csv [--config u55-256_hee_shared_arena128k] [--passes 60]
           [--seed 0] [--time-limit 30] [--workers N] [--csv PATH]

``GRID.csv`` is a ``never_slower.py --size`` grid of the same configuration (its ``legacy_sram``: the SRAM Vela's
legacy core uses under ``--optimise Size``, its smallest). For every network of it and every arena of ``ARENAS``
that this peak over-runs by a factor in (1, 1.5], it runs ``solve-schedule`` as a user would (the configuration,
``--arena-cache-size`` the arena, the default objective, ``--output-dir``) and records whether the schedule fits
and compiles: Vela's backend writes it, its allocation is within the arena and its estimate equals npusched's.
Where nothing fits, the row keeps the error's least size and what sets it (the smallest-fit error names both).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from never_slower import compile_verdict, without_arena  # noqa: E402

from npusched.app.pipeline import run  # noqa: E402
from npusched.errors import NpuschedError  # noqa: E402
from npusched.netgen import generate  # noqa: E402
from npusched.vela.command import run_options_from_vela_args  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden" / "configs.json"
ARENAS = tuple(k * 1024 for k in (64, 96, 128, 192, 256, 384, 512, 768, 1024))
OVER_RUN = 1.5
COLUMNS = ["arch", "style", "arena", "legacy_sram", "over_run", "status", "allocation", "vela_allocation",
           "compiled", "needed", "what_sets", "seconds"]


def arenas_for(legacy_bytes: int) -> list[int]:
    """The arenas ``legacy_bytes`` over-runs by a factor in (1, OVER_RUN]."""
    return [a for a in ARENAS if a < legacy_bytes <= OVER_RUN * a]


def fit(model: Path, config: dict[str, Any], arena: int, args: argparse.Namespace) -> dict[str, Any]:
    extra = [a for a in without_arena(config) if a not in ("--optimise", "Size")]
    options = run_options_from_vela_args(model, {**config, "extra_args": extra + ["--arena-cache-size", str(arena)]},
                                         solver="cpsat", time_limit_seconds=args.time_limit, workers=args.workers)
    try:
        result = run(options)
    except NpuschedError as exc:
        text = str(exc)
        needed = re.search(r"needs (\d+) bytes", text)
        sets = re.search(r"; ((?:the network itself|the cascade rules|Vela's cascade rules)[^;]*)$", text)
        return {"status": "does not fit", "needed": int(needed.group(1)) if needed else "",
                "what_sets": (sets.group(1) if sets else text)[:160]}
    _, evaluation = result.solved()
    row: dict[str, Any] = {"status": "fits", "allocation": evaluation.allocation.size_bytes}
    row["compiled"], row["vela_allocation"] = compile_verdict(result)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peaks", type=Path, required=True, help="a never_slower.py --size grid's CSV")
    parser.add_argument("--config", default="u55-256_hee_shared_arena128k")
    parser.add_argument("--passes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    configs = json.loads(CONFIGS.read_text())
    if args.config not in configs:
        print(f"error: unknown configuration '{args.config}'", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    writer = csv.DictWriter(args.csv.open("w", newline=""), COLUMNS) if args.csv else None
    if writer is not None:
        writer.writeheader()
    with tempfile.TemporaryDirectory() as tmp:
        for grid_row in csv.DictReader(args.peaks.open()):
            if not grid_row.get("legacy_sram"):
                continue
            legacy = int(grid_row["legacy_sram"])
            arch, style = grid_row["arch"], grid_row["style"]
            model = Path(tmp) / f"{arch}-{style}.tflite"
            model.write_bytes(generate(arch, args.passes, args.seed, keras_style=style == "keras",
                                       torch_style=style == "torch"))
            for arena in arenas_for(legacy):
                start = time.monotonic()
                row = {"arch": arch, "style": style, "arena": arena, "legacy_sram": legacy,
                       "over_run": round(legacy / arena, 3), **fit(model, configs[args.config], arena, args)}
                row["seconds"] = round(time.monotonic() - start, 1)
                rows.append(row)
                print("  ".join(f"{k}={row[k]}" for k in COLUMNS if k in row), flush=True)
                if writer is not None:
                    writer.writerow(row)
    compiled = sum(r.get("compiled") == "yes" for r in rows)
    print(f"{len(rows)} (network, arena) cases Vela legacy over-runs by up to {OVER_RUN}x: {compiled} fit and "
          f"compile within the arena ({compiled / max(len(rows), 1):.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
