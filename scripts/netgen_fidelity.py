#!/usr/bin/env python3
"""Vela as the oracle on generated networks: Vela 5.2.0 legacy's total cycles vs npusched's heuristic.

    python scripts/netgen_fidelity.py [--archs a,b] [--sizes 20,100] [--seeds 0] [--configs c1,c2]
        [--golden-configs PATH] [--keep DIR] [--timeout SECONDS] [--torch-style]

For every (architecture, size, seed) network of npusched.netgen and every configuration of the golden
configs.json it runs `vela --debug-force-legacy-core --verbose-schedule --verbose-performance` and npusched's
heuristic, and prints per case Vela's NPU passes and CPU ops, both totals and the difference. A case off by more
than 1% gets the first op whose cycles differ by more than 1% and what differs there (block config, stripes,
cascade, weight buffering, memory access cycles). Vela failing is data (its reason is printed); npusched failing
is reported with the commands that reproduce it. Generated files live in a temporary folder (or --keep DIR).
The networks are the plain variant, or with --torch-style as PyTorch exports them (NCHW input, PAD before VALID
convolutions; case names end in "-torch").
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from npusched import solve_options
from npusched.app.pipeline import scheduled_model_bytes
from npusched.bench import cli, golden, netgen_models, paths
from npusched.errors import NpuschedError, exit_status
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.fidelity import compare_with_golden
from npusched.vela.golden import run_golden
from npusched.vela.report import read_cpu_operator_count, read_per_layer, read_verbose_schedule

WITHIN_PERCENT = 1.0
# Vela walks the graph recursively; its default limit (1000) stops it on networks of more than ~600 passes.
VELA_DEEP_GRAPHS = ("--recursion-limit", "50000")
_ACCESS_COLUMNS = {"Sram": "SRAM AC", "Dram": "DRAM AC", "OnChipFlash": "OnFlash AC", "OffChipFlash": "OffFlash AC"}


@dataclass(frozen=True)
class Case:
    arch: str
    passes: int
    seed: int
    torch_style: bool = False

    @property
    def stem(self) -> str:
        return f"{self.arch}-{self.passes}-s{self.seed}" + "-torch" * self.torch_style


@dataclass(frozen=True)
class Outcome:
    """One case under one configuration; ``vela_error``/``ours_error`` say which side failed."""

    case: Case
    config: str
    vela_passes: int = 0
    vela_cpu_ops: int = 0
    vela_cycles: float | None = None
    ours_cycles: float | None = None
    vela_error: str = ""
    ours_error: str = ""
    first_difference: str = ""

    @property
    def difference_percent(self) -> float | None:
        if self.vela_cycles is None or self.ours_cycles is None or not self.vela_cycles:
            return None
        return 100.0 * (self.ours_cycles - self.vela_cycles) / self.vela_cycles


def reproduce(case: Case, config: dict[str, Any]) -> str:
    """Shell commands that regenerate the case and run npusched's heuristic on it."""
    model = f"/tmp/{case.stem}.tflite"
    extra = " ".join(config.get("extra_args", ()))
    style = " --torch-style" * case.torch_style
    return (f"python -m npusched.netgen {case.arch} --passes {case.passes} --seed {case.seed}{style} -o {model} && "
            f"solve-schedule {model} --solver heuristic --accelerator-config {config['accelerator_config']} "
            f"--config Arm/vela.ini --system-config {config['system_config']} --memory-mode "
            f"{config['memory_mode']} {extra}".rstrip())


def first_difference(model: Path, golden: Path, config: dict[str, Any]) -> str:
    """The first op (in Vela's order) whose op cycles differ by more than 1%, and which of its choices differ."""
    result = solve_options(run_options_from_vela_args(model, config, solver="heuristic")).run
    ours: dict[str, list[Any]] = {}
    for cost in result.evaluation.ops:
        ours.setdefault(cost.name, []).append((cost, result.schedule.op(cost.op_index)))
    vela_ops = [op for schedule in read_verbose_schedule(golden / "vela_stdout.txt") for op in schedule.ops]
    rows = [row for group in read_per_layer(golden / "per_layer.csv") for row in group]
    for position, (vela_op, row) in enumerate(zip(vela_ops, rows, strict=True)):
        if not ours.get(vela_op.name):
            continue
        cost, op = ours[vela_op.name].pop(0)
        vela_cycles = float(row["Op Cycles"])
        if abs(cost.total_cycles - vela_cycles) <= WITHIN_PERCENT / 100 * max(vela_cycles, 1.0):
            continue
        pairs = [("block", op.block_config.old_style(), vela_op.block_config),
                 ("ofm stripe", op.ofm_stripe.as_list(), vela_op.ofm_stripe),
                 ("ifm stripe", op.ifm_stripe.as_list(), vela_op.ifm_stripe),
                 ("cascaded", op.cascade is not None, vela_op.cascade != 0),  # Vela prints 0 outside cascades
                 ("depth slices", list(op.depth_slices), vela_op.depth_slices or None)]
        differs = [f"{what} ours {a} vela {b}" for what, a, b in pairs if b is not None and a != b]
        for mem, column in _ACCESS_COLUMNS.items():
            mine = sum(v for m, v in cost.access_cycles.items() if m.value == mem)
            if abs(mine - float(row[column])) > max(1.0, 0.01 * float(row[column])):
                differs.append(f"{column} ours {mine:.0f} vela {float(row[column]):.0f}")
        npu = float(row["NPU"])
        if abs(cost.npu_cycles - npu) > max(1.0, 0.01 * npu):
            differs.append(f"NPU cycles ours {cost.npu_cycles:.0f} vela {npu:.0f}")
        return (f"op {position} {vela_op.op_type} '{vela_op.name[:48]}': cycles {cost.total_cycles:.0f} vs "
                f"{vela_cycles:.0f}; " + ("; ".join(differs) or "no choice or per-memory figure differs"))
    return "no single op differs by more than 1% (the sum of small differences)"


def run_case(case: Case, config_name: str, config: dict[str, Any], work: Path, timeout_seconds: float) -> Outcome:
    model = work / f"{case.stem}.tflite"
    if not model.exists():  # normalised, as the heuristic schedules it (Vela is given the same file)
        written = netgen_models.write_network(work, case.arch, case.passes, case.seed,
                                              "torch" if case.torch_style else "plain")
        model.write_bytes(scheduled_model_bytes(run_options_from_vela_args(written, config, solver="heuristic")))
    golden = work / case.stem / config_name
    golden.mkdir(parents=True, exist_ok=True)
    vela_config = {**config, "extra_args": [*config.get("extra_args", ()), *VELA_DEEP_GRAPHS]}
    vela_error = run_golden(model, vela_config, golden, timeout_seconds)
    if vela_error:
        return Outcome(case, config_name, vela_error=vela_error)
    schedules = read_verbose_schedule(golden / "vela_stdout.txt")
    counted = replace(Outcome(case, config_name), vela_passes=sum(len(s.ops) for s in schedules),
                      vela_cpu_ops=read_cpu_operator_count(golden / "vela_stdout.txt"))
    try:
        options = run_options_from_vela_args(model, config, solver="heuristic")
        comparison = compare_with_golden(solve_options(options).run, golden)
        difference = ""
        if abs(comparison.cycles_error) > WITHIN_PERCENT:
            difference = first_difference(model, golden, config)
    except NpuschedError as exc:
        return replace(counted, ours_error=f"error: {exc}"[:200])
    except Exception as exc:  # a crash of npusched is a finding to report, not a reason to stop
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return replace(counted, ours_error=(
            f"CRASH {type(exc).__name__}: {str(exc)[:120]} at {Path(where.filename).name}:{where.lineno}; "
            f"reproduce: {reproduce(case, config)}"))
    return replace(counted, vela_cycles=comparison.cycles_vela, ours_cycles=comparison.cycles_ours,
                   first_difference=difference)


def print_outcome(outcome: Outcome) -> None:
    head = f"{outcome.case.stem:<24} {outcome.config:<28}"
    if outcome.vela_error:
        print(f"{head} VELA FAILS: {outcome.vela_error}", flush=True)
        return
    passes = f"passes {outcome.vela_passes:>5} cpu {outcome.vela_cpu_ops:>2}"
    if outcome.ours_error:
        print(f"{head} {passes}  NPUSCHED {outcome.ours_error}", flush=True)
        return
    print(f"{head} {passes}  vela {outcome.vela_cycles:>12.0f}  heuristic {outcome.ours_cycles:>12.0f}  "
          f"{outcome.difference_percent:+8.2f}%", flush=True)
    if outcome.first_difference:
        print(f"    first difference: {outcome.first_difference}", flush=True)


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--archs", help="comma-separated (default: all)")
    parser.add_argument("--sizes", default="20,100", help="comma-separated NPU pass budgets (default 20,100)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    cli.add_configs(parser)
    parser.add_argument("--golden-configs", type=Path, default=None, help="configs.json (default: the checkout's)")
    parser.add_argument("--keep", type=Path, help="keep generated models and Vela output in this folder")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per Vela run (default 900)")
    parser.add_argument("--torch-style", action="store_true",
                        help="generate the networks as PyTorch exports them (python -m npusched.netgen --torch-style)")
    args = parser.parse_args()
    configs = golden.load_configs(args.golden_configs)
    archs, _ = netgen_models.check(paths.split_names(args.archs))
    names = golden.select(configs, paths.split_names(args.configs))
    cases = [Case(a, int(p), int(s), args.torch_style) for a in archs for p in args.sizes.split(",")
             for s in args.seeds.split(",")]
    work = args.keep or Path(tempfile.mkdtemp(prefix="netgen_fidelity_"))
    work.mkdir(parents=True, exist_ok=True)
    outcomes = []
    try:
        for case in cases:
            for name in names:
                outcomes.append(run_case(case, name, configs[name], work, args.timeout))
                print_outcome(outcomes[-1])
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    compiled = [o for o in outcomes if not o.vela_error]
    compared = [o for o in compiled if o.difference_percent is not None]
    within = sum(abs(o.difference_percent or 0.0) <= WITHIN_PERCENT for o in compared)
    style = "torch-style" if args.torch_style else "plain"
    print(f"SUMMARY ({style} networks) within {WITHIN_PERCENT:g}% in {within}/{len(compiled)} cases Vela compiles "
          f"({len(outcomes)} cases; Vela fails on {len(outcomes) - len(compiled)}; npusched fails on "
          f"{len(compiled) - len(compared)})")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
