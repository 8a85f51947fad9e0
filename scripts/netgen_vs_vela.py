#!/usr/bin/env python3
"""CP-SAT on generated Keras-style networks against both Vela cores' own totals, as a user would compare them.

Usage: python scripts/netgen_vs_vela.py [--archs a,b] [--passes 40] [--seed 1] [--time-limit 15] [--workers 2]
           [--configs a,b] [--csv PATH] [--torch-style]

For every architecture (npusched.netgen, ``keras_style``: what users export; ``torch_style`` with --torch-style,
as PyTorch -> ONNX -> TFLite exports it; the ``style`` column says which) x golden configuration it runs the
``vela`` CLI's default core and its legacy core on the generated file (each core's own summary total, its own
graph), then ``solve-schedule``'s CP-SAT under ``--estimator vela-default`` and under ``--estimator vela-legacy``.
One row per cell: both cores' totals, CP-SAT's status and total under each estimator, and the two ratios (CP-SAT
under vela-default / the default core's total; under vela-legacy / the legacy core's). Unlike
compare_default_core.py, each core here schedules its own graph: a ratio above 1 can come from the graph (what
each core's graph optimiser makes of the model) as well as from the schedule. A failed run is a row with its
error, never dropped; the summary gives the geometric means over the cells where both exist and lists those
above 1.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched.app.pipeline import run  # noqa: E402
from npusched.errors import NpuschedError  # noqa: E402
from npusched.netgen import ARCHITECTURES, generate  # noqa: E402
from npusched.vela.command import last_line, run_options_from_vela_args, run_vela  # noqa: E402
from npusched.vela.report import read_summary  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden" / "configs.json"
COLUMNS = ["arch", "style", "config", "default_core_cycles", "legacy_core_cycles", "status_default",
           "cpsat_default_cycles", "status_legacy", "cpsat_legacy_cycles", "ratio_default", "ratio_legacy"]


def core_total(model: Path, config: dict[str, Any], core: str) -> float | str:
    """The core's own summary total for ``model``, or why it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        done = run_vela(run_options_from_vela_args(model, config), Path(tmp), core=core)  # type: ignore[arg-type]
        summaries = list(Path(tmp).glob("*_summary_*.csv"))
        if done.returncode != 0 or not summaries:
            return f"vela {core} failed: {last_line(done)}"
        return float(read_summary(summaries[0])["cycles_total"])


def cpsat(model: Path, config: dict[str, Any], estimator: str, time_limit: float, workers: int
          ) -> tuple[str, float | str]:
    options = run_options_from_vela_args(model, config, solver="cpsat", estimator=estimator,
                                         time_limit_seconds=time_limit, workers=workers)
    try:
        result = run(options)
    except NpuschedError as exc:
        return "error", str(exc)[:200]
    return result.status, result.cycles_by_estimator[estimator]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHITECTURES))
    parser.add_argument("--passes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--configs", help="comma-separated configuration names (default: all five)")
    parser.add_argument("--csv", type=Path, help="also write the rows to this file")
    parser.add_argument("--torch-style", action="store_true",
                        help="generate PyTorch-style exports (NCHW input, explicit PAD) instead of Keras-style ones")
    args = parser.parse_args()
    configs = json.loads(CONFIGS.read_text())
    names = args.configs.split(",") if args.configs else list(configs)
    rows: list[dict[str, Any]] = []
    writer = None
    handle = args.csv.open("w", newline="") if args.csv else None
    if handle is not None:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
    print(",".join(COLUMNS), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs.split(","):
            style = "torch" if args.torch_style else "keras"
            model = Path(tmp) / f"{arch}_{args.passes}_{args.seed}_{style}.tflite"
            model.write_bytes(generate(arch, args.passes, args.seed, keras_style=not args.torch_style,
                                       torch_style=args.torch_style))
            for name in names:
                config = configs[name]
                row: dict[str, Any] = {"arch": arch, "style": style, "config": name,
                                       "default_core_cycles": core_total(model, config, "default"),
                                       "legacy_core_cycles": core_total(model, config, "legacy")}
                row["status_default"], row["cpsat_default_cycles"] = cpsat(model, config, "vela-default",
                                                                           args.time_limit, args.workers)
                row["status_legacy"], row["cpsat_legacy_cycles"] = cpsat(model, config, "vela-legacy",
                                                                         args.time_limit, args.workers)
                for ratio, ours, theirs in (("ratio_default", "cpsat_default_cycles", "default_core_cycles"),
                                            ("ratio_legacy", "cpsat_legacy_cycles", "legacy_core_cycles")):
                    both = all(isinstance(row[k], float) for k in (ours, theirs))
                    row[ratio] = round(row[ours] / row[theirs], 3) if both else ""
                rows.append(row)
                print(",".join(str(round(v) if isinstance(v, float) and not key.startswith("ratio") else v)
                               for key, v in row.items()), flush=True)
                if writer is not None and handle is not None:
                    writer.writerow(row)
                    handle.flush()
    if handle is not None:
        handle.close()
    for ratio, core in (("ratio_default", "default"), ("ratio_legacy", "legacy")):
        values = [row[ratio] for row in rows if row[ratio] != ""]
        above = [f"{row['arch']} {row['config']} {row[ratio]}" for row in rows if row[ratio] != "" and row[ratio] > 1]
        if values:
            mean = math.exp(sum(math.log(v) for v in values) / len(values))
            print(f"against the {core} core: {len(values)} cells, geomean {mean:.3f}; above 1: {above or 'none'}")
    failed = [f"{row['arch']} {row['config']}" for row in rows if "" in (row["ratio_default"], row["ratio_legacy"])]
    print(f"cells without both ratios: {len(failed)}" + (f" ({'; '.join(failed)})" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
