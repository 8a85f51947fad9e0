"""Cascading: running a chain of passes stripe by stripe so that only rolling buffers sit between them.

A cascade is a run of consecutive passes of one NPU subgraph in which every pass feeds only the next one. Instead
of writing a whole feature map before the next pass starts, the producer writes an OFM stripe into a small rolling
buffer and the consumer reads it while the producer moves on. The grouping rules, the rolling-buffer sizes and
the memory estimates that decide whether a longer cascade is worth it follow Vela 5.2.0's ``CascadeBuilder``
(legacy core), so that the heuristic scheduler picks the same cascades Vela does.

This module also holds the scheduler's view of a pass (``SchedOp``) and the per-pass choices of one candidate
schedule (``StripeCost``, Vela's ``SchedulerOpInfo``): both the cascade builder and the memory model read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from npusched.ir import FeatureMap, NpuBlockType, NpuOp, Shape4D, TensorFormat, round_up
from npusched.schedule.rules import (
    BRICK_DEPTH,
    allocation_bytes,
    brick_padded_bytes,
    may_cascade,
    operand_bytes,
    rolling_buffer_bytes,
)
from npusched.target.block_config import BlockConfig

# Block types whose passes never take part in a cascade.
_NEVER_CASCADED = (NpuBlockType.Default, NpuBlockType.VectorProduct, NpuBlockType.ReduceSum)


@dataclass(frozen=True)
class SchedOp:
    """What the scheduler knows about one pass of a subgraph, independent of any candidate schedule.

    ``pos`` is the pass's position in the subgraph (Vela's scheduler-op index, which names cascades);
    ``dependants`` are the positions of the passes of the same subgraph that read its OFM (one entry per
    operand, so a pass reading the OFM twice counts twice); ``ifm_consumers`` counts the readers of its IFM
    within the subgraph the same way.
    """

    pos: int
    op: NpuOp
    ifm_format: TensorFormat
    ifm2_format: TensorFormat | None
    ofm_format: TensorFormat
    requires_full_ifm: bool
    requires_full_ifm2: bool
    requires_full_ofm: bool
    dependants: tuple[int, ...]
    ifm_consumers: int
    ofm_reuses_ifm: bool
    binary_elementwise: bool
    cascadable_kind: bool

    @property
    def ifm(self) -> FeatureMap:
        return self.op.ifm.tensor

    @property
    def ofm(self) -> FeatureMap:
        return self.op.ofm.tensor

    @property
    def ifm_shape(self) -> Shape4D:
        return self.op.ifm.shape

    @property
    def ofm_shape(self) -> Shape4D:
        return self.op.ofm.shape

    @property
    def ifm_bytes(self) -> int:
        return operand_bytes(self.op.ifm.shape, self.ifm_format, self.ifm.dtype.size_in_bytes)

    @property
    def ifm2_bytes(self) -> int:
        if self.op.ifm2 is None or self.ifm2_format is None:
            return 0
        return operand_bytes(self.op.ifm2.shape, self.ifm2_format, self.op.ifm2.tensor.dtype.size_in_bytes)

    @property
    def ofm_bytes(self) -> int:
        return operand_bytes(self.op.ofm.shape, self.ofm_format, self.ofm.dtype.size_in_bytes)


@dataclass(frozen=True)
class WeightBufferSpec:
    """One fast-storage weight buffer of a pass: its size and whether it is one of a double-buffer pair."""

    size: int
    double: bool = False

    @property
    def storage(self) -> int:
        return allocation_bytes(self.size)


@dataclass(frozen=True)
class StripeCost:
    """The choices for one pass in one candidate schedule (Vela's ``SchedulerOpInfo``).

    ``encoded`` is the weight stream (``npusched.target.weights.EncodedWeights``) the pass reads, ``depth_slices``
    the OFM depth slices it was encoded for; ``buffers`` the weight buffers in fast storage. ``op_cycles`` is the
    scheduler's compute estimate of the whole pass; the ``slack_*`` fields say how much time and fast storage the
    next pass may use to prefetch its weights under this one (``slack_depth``: the OFM depth whose compute time
    ``slack_cycles`` is, when weight slicing set it).
    """

    block_config: BlockConfig
    stripe_input: Shape4D
    stripe_input2: Shape4D | None
    stripe: Shape4D
    op_cycles: float = 0.0
    cascade: int = 0
    encoded: Any = None
    depth_slices: tuple[int, ...] = ()
    buffers: tuple[WeightBufferSpec, ...] = ()
    pre_buffer: bool = False
    slack_cycles: float = 0.0
    slack_depth: int | None = None
    slack_memory: int = 0
    full_transfer_cycles: float = 0.0

    @property
    def weight_buffer_bytes(self) -> int:
        return sum(b.storage for b in self.buffers)


@dataclass(frozen=True)
class CascadeInfo:
    """A cascade of the passes at positions ``start``..``end``; ``buffers`` maps each pass after the first to
    the shape of the rolling buffer it reads; ``mem_usage`` is the cascade's own fast-storage estimate."""

    start: int
    end: int
    buffers: dict[int, Shape4D] = field(default_factory=dict)
    mem_usage: int = 0


def rolling_buffer_shape(producer_stripe: Shape4D, consumer_ifm_stripe: Shape4D) -> Shape4D:
    """Shape of the rolling buffer between two cascaded passes.

    It holds the consumer's IFM stripe plus one producer stripe, rounded to whole consumer stripes; it is as
    wide as the wider of the two (a strided consumer may read a narrower IFM than the producer writes) and in
    brick format, so its depth is padded to 16.
    """
    height = round_up(producer_stripe.height + consumer_ifm_stripe.height, consumer_ifm_stripe.height)
    width = max(producer_stripe.width, consumer_ifm_stripe.width)
    return Shape4D(1, height, width, round_up(producer_stripe.depth, BRICK_DEPTH))


def is_cascadable(sop: SchedOp, cost: StripeCost) -> bool:
    """A pass can join a cascade when its kind allows it and the candidate schedule really stripes it."""
    return sop.cascadable_kind and cost.stripe.height < sop.ofm_shape.height


def estimate_sram_usage(sop: SchedOp, cost: StripeCost, non_local: int) -> int:
    """Fast storage a pass needs on its own when all of its feature maps are in fast storage.

    Operands that must be whole count in full; striped ones count one stripe (depth padded to 16). A binary
    elementwise pass's second operand is a constant or scalar kept in permanent storage.
    """
    ifm2 = 0 if sop.binary_elementwise else sop.ifm2_bytes
    element = sop.ifm.dtype.size_in_bytes
    if sop.requires_full_ifm:
        ifm = sop.ifm_bytes
    else:
        ifm = brick_padded_bytes(cost.stripe_input, element)
    if sop.ofm_reuses_ifm:
        ofm = 0
    elif sop.requires_full_ofm:
        ofm = sop.ofm_bytes
    else:
        ofm = brick_padded_bytes(cost.stripe, sop.ofm.dtype.size_in_bytes)
    return ifm + ifm2 + ofm + non_local


def _feature_map_between(producer: SchedOp, consumer: SchedOp, costs: Mapping[int, StripeCost]) -> tuple[Shape4D, int]:
    """Shape and size of what sits between two neighbouring passes of a cascade."""
    if producer.requires_full_ofm or consumer.requires_full_ifm:
        shape = max(producer.ofm_shape, consumer.ifm_shape)
        return shape, max(producer.ofm_bytes, consumer.ifm_bytes)
    shape = rolling_buffer_shape(costs[producer.pos].stripe, costs[consumer.pos].stripe_input)
    return shape, rolling_buffer_bytes(shape, producer.ofm.dtype.size_in_bytes)


def build_cascades(
    sched_ops: Sequence[SchedOp],
    all_ops: Sequence[SchedOp],
    ref_costs: Mapping[int, StripeCost],
    fallback_costs: Mapping[int, StripeCost],
    guiding_limit: int,
    spilling: bool,
    non_local: Mapping[int, int],
) -> tuple[dict[int, StripeCost], dict[int, CascadeInfo]]:
    """Group ``sched_ops`` into cascades (Vela's ``CascadeBuilder.build_cascades``).

    ``ref_costs`` is the striped candidate; a pass that ends up in no cascade takes its ``fallback_costs``
    entry (the unstriped template) instead. ``all_ops`` is every pass of the subgraph by position (cascades
    follow OFM consumers, which may lie outside ``sched_ops``). Returns the chosen cost per position (cascade
    members carry the cascade's end position) and the cascades by end position.

    Shared fast storage: a cascade grows while the passes do not already fit under the peak usage seen so far,
    and is kept at the length whose total (first IFM, buffers, last OFM and what else is live) is smallest.
    Dedicated fast storage (spilling): only the buffers count and the limit is hard.
    """
    chosen: dict[int, StripeCost] = {}
    cascades: dict[int, CascadeInfo] = {}
    between: dict[tuple[int, int], tuple[Shape4D, int]] = {}
    peak = guiding_limit

    def buffer_between(producer: SchedOp, consumer: SchedOp) -> tuple[Shape4D, int]:
        key = (producer.pos, consumer.pos)
        if key not in between:
            between[key] = _feature_map_between(producer, consumer, ref_costs)
        return between[key]

    def take_fallback(sop: SchedOp) -> None:
        nonlocal peak
        chosen[sop.pos] = fallback_costs[sop.pos]
        if not spilling:
            peak = max(estimate_sram_usage(sop, fallback_costs[sop.pos], non_local.get(sop.pos, 0)), peak)

    for first in sched_ops:
        if first.pos in chosen:
            continue
        if not is_cascadable(first, ref_costs[first.pos]):
            take_fallback(first)
            continue

        members = [first]
        best = [first]
        first_ifm = 0 if spilling else first.ifm_bytes
        buffers_total = ref_costs[first.pos].weight_buffer_bytes
        best_size = estimate_sram_usage(first, fallback_costs[first.pos], non_local.get(first.pos, 0))
        first_non_local = non_local.get(first.pos, 0)

        producer = first
        while len(producer.dependants) == 1:
            nxt = all_ops[producer.dependants[0]]
            if (nxt.pos in chosen or nxt.pos not in ref_costs or not is_cascadable(nxt, ref_costs[nxt.pos])
                    or not may_cascade(producer, nxt)):
                break  # taken, not striped, or not joinable without reordering the passes
            _, ifm_buffer = buffer_between(producer, nxt)
            alone = estimate_sram_usage(nxt, fallback_costs[nxt.pos], non_local.get(nxt.pos, 0))
            members.append(nxt)
            buffers_total += ifm_buffer + ref_costs[nxt.pos].weight_buffer_bytes
            if spilling:
                if alone < peak or buffers_total > peak:
                    break
                best = list(members)
                best_size = buffers_total
            else:
                size = first_ifm + buffers_total + nxt.ofm_bytes + first_non_local
                if (alone < peak and best_size < peak) or first_ifm + buffers_total > best_size:
                    break
                # A longer cascade wins when it is smaller than the best so far, or smaller than running this
                # pass uncascaded.
                if size < best_size or size < alone:
                    best_size = size
                    best = list(members)
            producer = nxt

        if len(best) > 1:
            end = first.pos + len(best) - 1
            rolling: dict[int, Shape4D] = {}
            prev: SchedOp | None = None
            for member in best:
                chosen[member.pos] = replace(ref_costs[member.pos], cascade=end)
                if prev is not None:
                    rolling[member.pos] = buffer_between(prev, member)[0]
                prev = member
            cascades[end] = CascadeInfo(first.pos, end, rolling, best_size - first_non_local)
            if not spilling:
                peak = max(best_size, peak)
        else:
            take_fallback(first)
    return chosen, cascades


def schedule_memory_estimate(sched_ops: Sequence[SchedOp], costs: Mapping[int, StripeCost],
                             cascades: Mapping[int, CascadeInfo], non_local: Mapping[int, int]) -> int:
    """Peak fast storage of a candidate: a cascade's own estimate for its passes, whole IFM, OFM and weight
    buffers for the others, each plus what else is live (Vela's ``estimate_schedule_memory_usage``)."""
    peak = 0
    for sop in sched_ops:
        cost = costs.get(sop.pos)
        if cost is None:
            continue
        if cost.cascade:
            usage = cascades[cost.cascade].mem_usage + non_local.get(sop.pos, 0)
        else:
            usage = sop.ifm_bytes + sop.ofm_bytes + cost.weight_buffer_bytes + non_local.get(sop.pos, 0)
        peak = max(usage, peak)
    return peak


def cascadable_kind(op: NpuOp, held_operands: bool = False, joins: bool = False) -> bool:
    """The parts of Vela's cascadability test that depend on the pass alone, not on its stripe
    (``held_operands``, ``joins``: see ``elementwise_cascadable``)."""
    if op.npu_block_type in _NEVER_CASCADED:
        return False
    if op.ifm.offset is not None or (op.ifm2 is not None and op.ifm2.offset is not None):
        return False
    if op.op_type == "Conv2DBackpropInputSwitchedBias" or op.attr("padding") == "TILE":
        return False
    return elementwise_cascadable(op, held_operands, joins)


# Binary elementwise passes that may join a cascade holding a feature map as second operand: MULs with
# ``held_operands``, residual joins as well with ``joins``.
_HELD_GATES = ("Mul",)
_HELD_JOINS = ("Add", "Sub", "Mul")


def elementwise_cascadable(op: NpuOp, held_operands: bool = False, joins: bool = False) -> bool:
    """A binary elementwise pass cascades only when its first operand (in the TFLite order) is a full-size
    feature map and its second a constant or scalar (Vela's rule).

    ``held_operands`` (npusched's own schedules) lets the second operand of a MUL be a feature map too: a swish or
    squeeze-excite gate, as the default core cascades them. Made before the cascade starts, it is held whole and
    Vela's backend reads it per stripe as it reads a constant one; made inside the cascade (``joins`` only), it is
    read from its producer's rolling buffer (``rules.reads_lagged``). Not where the operands are swapped, as the
    backend would then follow the cascade through the second. ``joins`` (``--optimise Size``, or where nothing
    fits without them) lets residual ADDs and SUBs join the same way; under Performance they gained nothing on a
    MobileNet-V2 and their many extra cascades slowed CP-SAT's search (15 s: 13% worse)."""
    if op.npu_block_type != NpuBlockType.ElementWise or op.ifm2 is None:
        return True
    first, second = (op.ifm2, op.ifm) if op.reversed_operands else (op.ifm, op.ifm2)
    first_ok = not (first.tensor.is_const or _is_scalar(first.tensor) or _declared_shape(first.tensor)
                    != _declared_shape(op.ofm.tensor))
    if second.tensor.is_const or _is_scalar(second.tensor):
        return first_ok
    kinds = _HELD_JOINS if joins else _HELD_GATES if held_operands else ()
    return first_ok and op.op_type in kinds and not op.reversed_operands and second.tensor != first.tensor


def _is_scalar(fm: FeatureMap) -> bool:
    return fm.orig_shape == () and fm.shape.elements() == 1


def _declared_shape(fm: FeatureMap) -> tuple[int, ...]:
    return tuple(fm.orig_shape) if fm.orig_shape is not None else tuple(fm.shape.as_list())
