"""Op-by-op comparison of npusched's schedule and cost model with Vela's golden output.

Used by scripts/fidelity.py and by the fidelity tests, so both measure the same thing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npusched.errors import ConfigError
from npusched.run import RunResult
from npusched.vela.report import read_per_layer, read_summary, read_verbose_schedule


@dataclass
class OpComparison:
    model: str
    name: str
    block_equal: bool
    npu_ours: float
    npu_vela: float
    cycles_ours: float
    cycles_vela: float

    @property
    def npu_error(self) -> float:
        return percent_error(self.npu_ours, self.npu_vela)

    @property
    def cycles_error(self) -> float:
        return percent_error(self.cycles_ours, self.cycles_vela)


def percent_error(ours: float, vela: float) -> float:
    if vela == 0:
        return 0.0 if ours == 0 else 100.0
    return 100.0 * (ours - vela) / vela


def load_config(golden_dir: Path, name: str) -> dict[str, Any]:
    for candidate in (golden_dir / "configs.json", golden_dir.parent / "configs.json"):
        if candidate.is_file():
            configs = json.loads(candidate.read_text())
            if name not in configs:
                raise ConfigError(f"unknown golden config '{name}' (known: {', '.join(sorted(configs))})")
            return configs[name]
    raise ConfigError(f"no configs.json in {golden_dir} or its parent")


@dataclass
class ModelComparison:
    """One model under one configuration: per-op comparisons, network totals and cascade groupings.

    Cascades are compared as (subgraph position, first op, last op) of every cascade of two or more ops.
    """

    model: str
    ops: list[OpComparison]
    cycles_ours: float
    cycles_vela: float
    cascades_ours: frozenset[tuple[int, int, int]]
    cascades_vela: frozenset[tuple[int, int, int]]

    @property
    def cycles_error(self) -> float:
        return percent_error(self.cycles_ours, self.cycles_vela)

    @property
    def cascades_equal(self) -> bool:
        return self.cascades_ours == self.cascades_vela


def _our_cascades(result: RunResult) -> frozenset[tuple[int, int, int]]:
    schedule, _ = result.solved()
    found = set()
    for sg_position, sg in enumerate(result.network.subgraphs):
        groups: dict[int, list[int]] = {}
        for position, op in enumerate(sg.ops):
            cascade = schedule.op(op.index).cascade
            if cascade is not None:
                groups.setdefault(cascade, []).append(position)
        found |= {(sg_position, p[0], p[-1]) for p in groups.values() if len(p) > 1}
    return frozenset(found)


def compare_with_golden(result: RunResult, golden: Path) -> ModelComparison:
    """Compare a run (npusched's heuristic, as a rule) with Vela's golden output for the same model and
    hardware."""
    schedule, evaluation = result.solved()
    model = Path(result.options.model_path).stem
    vela_schedules = read_verbose_schedule(golden / "vela_stdout.txt")
    vela_ops = [op for sched in vela_schedules for op in sched.ops]
    vela_rows = [row for group in read_per_layer(golden / "per_layer.csv") for row in group]
    ours_by_name: dict[str, list] = {}
    for cost in evaluation.ops:
        ours_by_name.setdefault(cost.name, []).append((cost, schedule.op(cost.op_index)))
    comparisons = []
    for vela_op, row in zip(vela_ops, vela_rows, strict=True):
        candidates = ours_by_name.get(vela_op.name)
        if not candidates:
            continue
        cost, op_sched = candidates.pop(0)
        comparisons.append(OpComparison(
            model=model, name=vela_op.name,
            block_equal=op_sched.block_config.old_style() == vela_op.block_config,
            npu_ours=cost.npu_cycles, npu_vela=float(row["NPU"]),
            cycles_ours=cost.total_cycles, cycles_vela=float(row["Op Cycles"]),
        ))
    vela_cascades = frozenset((sg_position, start, end) for sg_position, sched in enumerate(vela_schedules)
                              for _, start, end, _ in sched.cascades if end > start)
    return ModelComparison(
        model=model, ops=comparisons, cycles_ours=evaluation.total_cycles,
        cycles_vela=float(read_summary(golden / "summary.csv")["cycles_total"]),
        cascades_ours=_our_cascades(result), cascades_vela=vela_cascades,
    )
