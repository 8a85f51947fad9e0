"""Pricing every pass of a schedule and its memory over time: the figures every report prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from npusched.ir import MemArea
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.allocation import Allocation, allocate_ranges, fast_storage_ranges
from npusched.schedule.memory_model import SubgraphMemory, network_memory, scheduling_view, subgraph_memory
from npusched.schedule.pricing import Slack, price_op, staging_limit
from npusched.schedule.schedule import Schedule
from npusched.schedule.tensor_use import subgraphs_of, tensor_use
from npusched.target import performance as perf
from npusched.target import weights as wts
from npusched.target.estimators import Estimator, PricedArchitecture, with_estimator
from npusched.target.performance import Direction, Purpose

BandwidthKey = tuple[MemArea, Purpose, Direction]


@dataclass(frozen=True)
class OpCost:
    """Cost of one NPU pass under a schedule (one row of Vela's per-layer table).

    ``total_cycles`` is the larger of ``npu_cycles`` and each memory's ``access_cycles``; ``op_cycles`` is the
    compute-only estimate before weight and LUT DMA are added. ``sram_used`` is the fast storage in use at the
    pass's step of its subgraph as Vela's scheduler sees it, feature maps still in feature-map storage (its
    "SRAM Used" of --verbose-schedule; the actual use when feature-map storage is the fast storage);
    ``network_sram_used`` is the actual use over the whole inference (Vela's per-layer "SRAM Usage", which also
    counts CPU-side tensors and variables).
    """

    op_index: int
    name: str
    subgraph: str
    time_index: int
    npu_cycles: float
    op_cycles: float
    total_cycles: float
    access_cycles: dict[MemArea, float]
    bandwidth: dict[BandwidthKey, float]
    macs: int
    sram_used: int
    slack_buffering_cycles: Slack = 0.0  # per model under Estimator.BOTH
    full_weight_transfer_cycles: float = 0.0
    network_sram_used: int = 0
    parts: tuple[float, float] = (0.0, 0.0)  # under Estimator.BOTH: the two weighted model totals

    def bytes_moved(self, mem: MemArea, purpose: Purpose | None = None,
                    direction: Direction | None = None) -> float:
        return sum(v for (m, p, d), v in self.bandwidth.items()
                   if m == mem and purpose in (None, p) and direction in (None, d))



@dataclass(frozen=True)
class Evaluation:
    """Costs of a whole schedule. Totals are sums over passes in execution order, as Vela adds them."""

    ops: tuple[OpCost, ...]
    memory: tuple[SubgraphMemory, ...]
    total_cycles: float
    npu_cycles: float
    access_cycles: dict[MemArea, float]
    bandwidth: dict[BandwidthKey, float]
    macs: int
    peak_fast_storage: int
    staging_limit: int
    encoded_weight_bytes: int = 0
    original_weight_bytes: int = 0
    notes: tuple[str, ...] = field(default=())
    network_memory: SubgraphMemory | None = None
    parts: tuple[float, float] = (0.0, 0.0)  # under Estimator.BOTH: the two weighted model totals

    @property
    def sram_used_peaks(self) -> tuple[int, ...]:
        """Per subgraph, the most fast storage in use at any of its passes' steps as Vela's scheduler sees it (the
        largest "SRAM Used" of its verbose schedule). ``peak_fast_storage`` is the real requirement: it also
        counts the steps between passes and the feature maps the schedule moved into fast storage (Vela's
        "sram_memory_used" when its allocation leaves no gaps)."""
        return tuple(max((c.sram_used for c in self.ops if c.subgraph == m.name), default=0) for m in self.memory)

    @property
    def network_peak_fast_storage(self) -> int:
        """Peak of the whole-inference snapshot (a lower bound of what an allocator needs; Vela's equals it
        whenever its allocation leaves no gaps)."""
        return self.network_memory.peak if self.network_memory is not None else self.peak_fast_storage

    @cached_property
    def allocation(self) -> Allocation:
        """Addresses for every fast-storage buffer of the whole inference (``npusched.schedule.allocation``):
        its ``size_bytes`` is what the fast storage must hold, the peak only a lower bound on it. Worked out
        when first asked (solvers that only compare cycles never pay for it), then kept."""
        return allocate_ranges(fast_storage_ranges(self))

    def op(self, index: int) -> OpCost:
        for cost in self.ops:
            if cost.op_index == index:
                return cost
        raise KeyError(index)

    def bytes_moved(self, mem: MemArea, purpose: Purpose | None = None,
                    direction: Direction | None = None) -> float:
        return sum(v for (m, p, d), v in self.bandwidth.items()
                   if m == mem and purpose in (None, p) and direction in (None, d))



def evaluate(network_or_subgraph: Network | NpuSubgraph, arch: PricedArchitecture, schedule: Schedule) -> Evaluation:
    """Price every pass of the network (or of one subgraph) under ``schedule``."""
    costs: list[OpCost] = []
    memories: list[SubgraphMemory] = []
    total_cycles = 0.0
    npu_cycles = 0.0
    access: dict[MemArea, float] = {m: 0.0 for m in perf.ACCESS_AREAS}
    bandwidth: dict[BandwidthKey, float] = {}
    macs = 0
    encoded_total = 0
    original_total = 0
    seen_encodings: set[tuple] = set()
    seen_weights: set[int] = set()
    notes: list[str] = []
    whole, by_subgraph = _memory(network_or_subgraph, arch, schedule)
    for sg, (memory, seen) in zip(subgraphs_of(network_or_subgraph), by_subgraph, strict=True):
        memories.append(memory)
        prev_slack: Slack = 0.0
        for op in sg.ops:
            if not schedule.has_op(op.index):
                notes.append(f"op {op.index} ({op.name}) has no schedule entry and was not priced")
                prev_slack = 0.0
                continue
            op_sched = schedule.op(op.index)
            if op_sched.block_config is None:
                notes.append(f"op {op.index} ({op.name}) has no block config and was not priced")
                prev_slack = 0.0
                continue
            result, slack, full_transfer = price_op(arch, op, op_sched, schedule, prev_slack)
            step = memory.op_steps[op.index]
            used = seen.usage[step] if step < len(seen.usage) else 0
            costs.append(OpCost(
                op_index=op.index, name=op.name, subgraph=memory.name, time_index=step,
                npu_cycles=result.npu_cycles, op_cycles=result.op_cycles, total_cycles=result.total_cycles,
                access_cycles=dict(result.access_cycles), bandwidth=dict(result.bandwidth), macs=result.macs,
                sram_used=used, slack_buffering_cycles=slack, full_weight_transfer_cycles=full_transfer,
                network_sram_used=whole.usage[whole.op_steps[op.index]], parts=result.parts,
            ))
            total_cycles += result.total_cycles
            npu_cycles += result.npu_cycles
            for mem, value in result.access_cycles.items():
                access[mem] = access.get(mem, 0.0) + value
            for key, value in result.bandwidth.items():
                bandwidth[key] = bandwidth.get(key, 0.0) + value
            macs += result.macs
            if op.weights is not None:
                if id(op.weights) not in seen_weights:
                    seen_weights.add(id(op.weights))
                    original_total += int(op.weights.values.size) * int(op.weights.values.itemsize)
                depth = op_sched.block_config.ofm_block.depth
                encoding = (wts.weights_digest(op.weights), depth, op_sched.depth_slices)
                if encoding not in seen_encodings:
                    seen_encodings.add(encoding)
                    encoded = wts.encode_op_weights(arch, op, depth, op_sched.depth_slices)
                    encoded_total += sum(r.weight_bytes for r in encoded.ranges)
            prev_slack = slack
    peak = max((m.peak for m in memories), default=0)
    return Evaluation(
        ops=tuple(costs), memory=tuple(memories), total_cycles=total_cycles, npu_cycles=npu_cycles,
        access_cycles=access, bandwidth=bandwidth, macs=macs, peak_fast_storage=peak,
        staging_limit=staging_limit(arch), encoded_weight_bytes=encoded_total, original_weight_bytes=original_total,
        notes=tuple(notes), network_memory=whole,
        parts=(sum(c.parts[0] for c in costs), sum(c.parts[1] for c in costs)),
    )


# The memory over time of schedules evaluated lately, by (network, hardware, schedule) identity: it does not depend
# on the cost model, and a run evaluates one schedule under each of them.
_MEMORIES: dict[tuple, tuple[Network | NpuSubgraph, Schedule, tuple]] = {}
_MEMORIES_HELD = 8


def _memory(network_or_subgraph: Network | NpuSubgraph, arch: PricedArchitecture, schedule: Schedule
            ) -> tuple[SubgraphMemory, tuple[tuple[SubgraphMemory, SubgraphMemory], ...]]:
    """The whole inference's memory, and per subgraph its memory and that Vela's scheduler sees."""
    hardware = with_estimator(arch, Estimator.VELA_LEGACY)
    key = (id(network_or_subgraph), hardware, id(schedule))
    known = _MEMORIES.get(key)
    if known is not None and known[0] is network_or_subgraph and known[1] is schedule:
        return known[2]
    use = tensor_use(network_or_subgraph)
    view = scheduling_view(arch, schedule)
    by_subgraph = []
    for sg in subgraphs_of(network_or_subgraph):
        memory = subgraph_memory(sg, arch, schedule, use)
        by_subgraph.append((memory, memory if view is schedule else subgraph_memory(sg, arch, view, use)))
    found = (network_memory(network_or_subgraph, arch, schedule, use), tuple(by_subgraph))
    if len(_MEMORIES) >= _MEMORIES_HELD:
        _MEMORIES.clear()
    _MEMORIES[key] = (network_or_subgraph, schedule, found)  # held: their ids are not reused while the key stands
    return found
