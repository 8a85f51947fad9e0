#!/usr/bin/env python3
"""Compare npusched's heuristic schedule and cost model with Vela's golden output, op by op.

Usage: python scripts/fidelity.py CONFIG [--core legacy|default] [--model-dir DIR] [--golden-dir DIR] [--per-op]
       [--models a,b] [--csv PATH]

--core default compares with Vela's default (C++) core instead (golden dir tests/data/golden/vela-5.2.0-regor):
its own schedule, read from its debug database, priced by npusched's evaluator under --estimator vela-default,
against its own per-op and network figures (what `--solver vela-default --estimator vela-default` reports,
without running Vela).

--model-dir and --golden-dir default to tests/data/corpus and tests/data/golden/vela-5.2.0-legacy; CONFIG is one
of the names in configs.json (looked up in the golden dir and its parent). For every model with a golden folder it
prints, per op matched by name: block config equal?, NPU cycles and op cycles (ours, Vela's, error %); then one
line per model and one summary line.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from npusched import solve_options
from npusched.app.pipeline import load_network
from npusched.errors import NpuschedError
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.default_core import compare_default_core
from npusched.vela.fidelity import ModelComparison, compare_with_golden, load_config

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--model-dir", type=Path, default=DATA / "corpus")
    parser.add_argument("--core", choices=("legacy", "default"), default="legacy",
                        help="which Vela core's golden output to compare with (default: %(default)s)")
    parser.add_argument("--golden-dir", type=Path, default=None,
                        help="default: tests/data/golden/vela-5.2.0-legacy, or vela-5.2.0-regor for --core default")
    parser.add_argument("--models", help="comma-separated model names (default: every model with golden output)")
    parser.add_argument("--per-op", action="store_true", help="print one line per op")
    parser.add_argument("--csv", type=Path, help="write the per-op comparison as CSV")
    parser.add_argument("--markdown", type=Path, help="append a per-model Markdown table to this file")
    args = parser.parse_args()
    if args.golden_dir is None:
        args.golden_dir = DATA / "golden" / ("vela-5.2.0-regor" if args.core == "default" else "vela-5.2.0-legacy")
    try:
        config = load_config(args.golden_dir, args.config)
    except NpuschedError as exc:
        raise SystemExit(f"error: {exc}") from None
    config_dir = args.golden_dir / args.config
    if not config_dir.is_dir():
        raise SystemExit(f"error: no golden folder {config_dir}")
    wanted = set(args.models.split(",")) if args.models else None
    models: list[ModelComparison] = []
    for golden in sorted(p for p in config_dir.iterdir() if p.is_dir()):
        if wanted and golden.name not in wanted:
            continue
        model_path = args.model_dir / f"{golden.name}.tflite"
        if not model_path.is_file():
            print(f"{golden.name}: model file missing in {args.model_dir}, skipped")
            continue
        try:
            if args.core == "default":
                arch, network, _ = load_network(run_options_from_vela_args(model_path, config, solver="vela-default",
                                                                           estimator="vela-default"))
                model = compare_default_core(network, arch, golden, golden.name)
            else:
                options = run_options_from_vela_args(model_path, config, solver="heuristic")
                model = compare_with_golden(solve_options(options).run, golden)
        except NpuschedError as exc:
            print(f"{golden.name}: error: {exc}")
            continue
        models.append(model)
        if args.per_op:
            for op in model.ops:
                print(f"  {'=' if op.block_equal else '!'} npu {op.npu_ours:>12.0f} vs {op.npu_vela:>12.0f} "
                      f"({op.npu_error:+6.2f}%)  op {op.cycles_ours:>12.0f} vs {op.cycles_vela:>12.0f} "
                      f"({op.cycles_error:+6.2f}%)  {op.name[:70]}")
        equal = sum(op.block_equal for op in model.ops)
        print(f"{model.model:<26} ops {len(model.ops):>4}  block config equal {equal:>4}  cascades "
              f"{'equal' if model.cascades_equal else 'DIFFER'}  total {model.cycles_ours:>14.1f} vs "
              f"{model.cycles_vela:>14.1f} ({model.cycles_error:+.2f}%)")
    all_ops = [op for model in models for op in model.ops]
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["model", "name", "block_equal", "npu_ours", "npu_vela", "cycles_ours", "cycles_vela"])
            for op in all_ops:
                writer.writerow([op.model, op.name, op.block_equal, op.npu_ours, op.npu_vela, op.cycles_ours,
                                 op.cycles_vela])
    equal_ops = [op for op in all_ops if op.block_equal]
    npu_ok = sum(abs(op.npu_error) <= 1.0 for op in equal_ops)
    cycles_ok = sum(abs(op.cycles_error) <= 1.0 for op in equal_ops)
    share = 100.0 * len(equal_ops) / len(all_ops) if all_ops else 0.0
    within = {limit: sum(abs(m.cycles_error) <= limit for m in models) for limit in (1.0, 2.0, 10.0)}
    cascades = sum(m.cascades_equal for m in models)
    summary = (f"{args.config}: {len(models)} models, {len(all_ops)} ops matched by name; block config equal "
               f"{len(equal_ops)} ({share:.1f}%); of those NPU cycles within 1%: {npu_ok}, op cycles within 1%: "
               f"{cycles_ok}; network totals within 1%/2%/10%: {within[1.0]}/{within[2.0]}/{within[10.0]} of "
               f"{len(models)}; cascade grouping equal: {cascades}/{len(models)}")
    print("SUMMARY " + summary)
    if args.markdown:
        with open(args.markdown, "a") as handle:
            handle.write(f"\n## {args.config}\n\n{summary}\n\n")
            handle.write("| model | ops | block config equal | cascades equal | npusched cycles | Vela cycles | "
                         "error % |\n|---|---:|---:|:---:|---:|---:|---:|\n")
            for m in models:
                handle.write(f"| {m.model} | {len(m.ops)} | {sum(op.block_equal for op in m.ops)} | "
                             f"{'yes' if m.cascades_equal else 'no'} | {m.cycles_ours:.1f} | {m.cycles_vela:.1f} | "
                             f"{m.cycles_error:+.2f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
