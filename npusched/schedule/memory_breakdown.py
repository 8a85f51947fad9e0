"""Fast-storage use per step split by what holds it: whole feature maps, cascades' rolling buffers and weight
buffers — the picture of why a network does (not) fit.

It reads the evaluator's live ranges rather than walking the schedule again, so the three parts add up to the
evaluator's per-step use, and their largest sum is the evaluation's peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.evaluator import Evaluation, LiveRange, cascade_rolling_buffers, subgraphs_of, tensor_use
from npusched.schedule.schedule import Schedule

PARTS = ("feature maps", "rolling buffers", "weight buffers")


@dataclass(frozen=True)
class MemoryBreakdown:
    """One NPU subgraph's fast-storage use in bytes per step, by part (``PARTS``); ``op_at_step`` names the pass
    or passes (a cascade's share one step) that run at each pass step (odd steps lie between passes)."""

    subgraph: str
    feature_maps: tuple[int, ...]
    rolling_buffers: tuple[int, ...]
    weight_buffers: tuple[int, ...]
    op_at_step: dict[int, tuple[str, ...]]

    @property
    def parts(self) -> tuple[tuple[int, ...], ...]:
        return self.feature_maps, self.rolling_buffers, self.weight_buffers

    @property
    def total(self) -> tuple[int, ...]:
        return tuple(map(sum, zip(*self.parts, strict=True)))


def memory_breakdown(network: Network | NpuSubgraph, schedule: Schedule, evaluation: Evaluation
                     ) -> tuple[MemoryBreakdown, ...]:
    """Per NPU subgraph of ``network``, the use ``evaluation`` (of ``schedule``) found at each step, by part."""
    use = tensor_use(network)
    result = []
    for sg, memory in zip(subgraphs_of(network), evaluation.memory, strict=True):
        rolling_keys = {use.storage_key(op.ifm.tensor) for op in sg.ops
                        if op.index in cascade_rolling_buffers(sg, schedule)}
        parts = [[0] * len(memory.usage) for _ in PARTS]
        for rng in memory.live_ranges:
            row = parts[_part(rng, use, rolling_keys)]
            for step in range(rng.start, rng.end + 1):
                row[step] += rng.size
        op_at_step: dict[int, tuple[str, ...]] = {}
        for op in sg.ops:
            if op.index in memory.op_steps:
                step = memory.op_steps[op.index]
                op_at_step[step] = (*op_at_step.get(step, ()), op.name)
        feature_maps, rolling_buffers, weight_buffers = (tuple(p) for p in parts)
        result.append(MemoryBreakdown(memory.name, feature_maps, rolling_buffers, weight_buffers, op_at_step))
    return tuple(result)


def _part(rng: LiveRange, use: Any, rolling_keys: set[Any]) -> int:
    """Index into ``PARTS`` of what a live range holds (a rolling buffer is the range of a cascaded IFM)."""
    if rng.kind == "weight_buffer":
        return 2
    return 1 if any(use.storage_key(fm) in rolling_keys for fm in rng.feature_maps) else 0
