#!/usr/bin/env python3
"""Compare npusched's heuristic schedule and cost model with Vela's golden output, op by op.

    python scripts/fidelity.py CONFIG [--core legacy|default] [--model-dir DIR] [--golden-dir DIR] [--per-op]
        [--models a,b] [--csv PATH] [--markdown PATH]

--model-dir and --golden-dir default to tests/data/corpus and tests/data/golden/vela-5.2.0-legacy; CONFIG is one
of the names in configs.json (looked up in the golden dir and its parent). For every model with a golden folder it
prints, per op matched by name: block config equal?, NPU cycles and op cycles (ours, Vela's, error %); then one
line per model and one summary line. --markdown appends the per-model table (docs/results/fidelity.md is made so).

--core default compares with Vela's default (C++) core instead (golden dir tests/data/golden/vela-5.2.0-regor):
its own schedule, read from its debug database, priced by npusched's evaluator under --estimator vela-default,
against its own per-op and network figures (what ``--solver vela-default --estimator vela-default`` reports,
without running Vela).
"""

from __future__ import annotations

import sys
from pathlib import Path

from npusched import solve_options
from npusched.app.pipeline import load_network
from npusched.bench import cli, paths, table
from npusched.errors import NpuschedError, exit_status
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.default_core import compare_default_core
from npusched.vela.fidelity import ModelComparison, compare_with_golden, load_config


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("config")
    parser.add_argument("--model-dir", type=Path, default=None, help="default: the corpus")
    parser.add_argument("--core", choices=("legacy", "default"), default="legacy",
                        help="which Vela core's golden output to compare with (default: %(default)s)")
    parser.add_argument("--golden-dir", type=Path, default=None,
                        help="default: tests/data/golden/vela-5.2.0-legacy, or vela-5.2.0-regor for --core default")
    parser.add_argument("--models", help="comma-separated model names (default: every model with golden output)")
    parser.add_argument("--per-op", action="store_true", help="print one line per op")
    parser.add_argument("--csv", type=Path, help="write the per-op comparison as CSV")
    parser.add_argument("--markdown", type=Path, help="append a per-model Markdown table to this file")
    args = parser.parse_args()
    args.golden_dir = args.golden_dir or paths.golden_dir(args.core)
    args.model_dir = args.model_dir or paths.corpus_dir()
    config = load_config(args.golden_dir, args.config)
    config_dir = args.golden_dir / args.config
    if not config_dir.is_dir():
        raise NpuschedError(f"no golden folder {config_dir}")
    wanted = set(paths.split_names(args.models) or ())
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
        table.write_csv(args.csv, [vars(op) for op in all_ops],
                        ["model", "name", "block_equal", "npu_ours", "npu_vela", "cycles_ours", "cycles_vela"])
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
        rows = [{"model": m.model, "ops": len(m.ops), "equal": sum(op.block_equal for op in m.ops),
                 "cascades": "yes" if m.cascades_equal else "no", "ours": f"{m.cycles_ours:.1f}",
                 "vela": f"{m.cycles_vela:.1f}", "error": f"{m.cycles_error:+.2f}"} for m in models]
        with open(args.markdown, "a") as handle:
            handle.write(f"\n## {args.config}\n\n{summary}\n\n" + table.markdown(
                rows, ["model", "ops", "equal", "cascades", "ours", "vela", "error"],
                ["model", "ops", "block config equal", "cascades equal", "npusched cycles", "Vela cycles", "error %"],
                cell=table.plain, align="lrrcrrr") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
