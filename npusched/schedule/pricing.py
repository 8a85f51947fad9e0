"""What one pass costs under a schedule: Vela 5.2.0's legacy-core full-op estimate, fed with the schedule's block
config, tensor placements and weight buffering (and, under the contention estimator, the slack it leaves)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from npusched.ir import FeatureMap, MemArea, NpuBlockType, NpuOp, TensorFormat
from npusched.lowering.graph import WEIGHT_TWINS
from npusched.schedule.rules import allocation_bytes, pricing_weight_stream, storage_size
from npusched.schedule.schedule import OpSchedule, Schedule, TensorPlacement
from npusched.schedule.tensor_use import placement_of
from npusched.target import performance as perf
from npusched.target import performance_default as perf_default
from npusched.target import weights as wts
from npusched.target.block_config import BlockConfig
from npusched.target.contention import contention_slack
from npusched.target.estimators import Estimator, PricedArchitecture, blend_parts
from npusched.target.performance_query import query_for_op


@dataclass(frozen=True)
class PriceInputs:
    """What the cost model reads of one pass besides its weight stream: the performance query (shapes, block
    config, formats and memories of its operands) and the DMAs of its lookup table and of a memory copy."""

    query: perf.PerformanceQuery
    lut: perf.DmaTransfer | None
    memcpy: perf.DmaTransfer | None


def price_inputs(arch: PricedArchitecture, op: NpuOp, config: BlockConfig | None, *, ifm: TensorPlacement,
                 ofm: TensorPlacement, ifm2: TensorPlacement | None, const_area: MemArea | None,
                 ofm_depth: int | None = None) -> PriceInputs:
    """A pass's price inputs with its operands placed as given: the one place they are built, for the options
    layer, the heuristic's own estimates and ``price_op`` alike. ``ofm_depth`` prices only part of the OFM depth
    (a weight slice)."""
    query = query_for_op(op, config, ofm_depth=ofm_depth, ifm_format=ifm.format, ofm_format=ofm.format,
                         ifm2_format=ifm2.format if ifm2 is not None else TensorFormat.NHWC,
                         ifm_area=ifm.mem_area, ofm_area=ofm.mem_area,
                         ifm2_area=ifm2.mem_area if ifm2 is not None else None, const_area=const_area)
    lut = None
    if op.activation_lut is not None:
        lut = perf.DmaTransfer(arch.permanent_storage_mem_area, MemArea.Shram,
                               allocation_bytes(op.activation_lut.size_in_bytes))
    memcpy = None
    if op.npu_block_type == NpuBlockType.Dma:
        memcpy = perf.DmaTransfer(ifm.mem_area, ofm.mem_area, storage_size(op.ifm.tensor, ifm.format))
    return PriceInputs(query, lut, memcpy)


def schedule_price_inputs(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule, *,
                          ofm_depth: int | None = None, const_area: MemArea | None = None,
                          scheduling_areas: bool = False) -> PriceInputs:
    """The price inputs of a pass under a schedule.

    With ``scheduling_areas`` the feature maps are priced where they sit while Vela schedules (feature-map
    storage), which is what its buffering decisions are based on; otherwise where the schedule puts them.
    """

    def placed(fm: FeatureMap) -> TensorPlacement:
        place = placement_of(arch, schedule, fm)
        if scheduling_areas and not fm.is_const:
            return TensorPlacement(arch.feature_map_storage_mem_area, place.format)
        return place

    return price_inputs(arch, op, op_sched.block_config, ifm=placed(op.ifm.tensor), ofm=placed(op.ofm.tensor),
                        ifm2=placed(op.ifm2.tensor) if op.ifm2 is not None else None, const_area=const_area,
                        ofm_depth=ofm_depth)


def scheduler_op_cycles(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule,
                        ofm_depth: int | None = None, first: bool = True,
                        const_area: MemArea | None = None) -> float:
    """The compute estimate Vela's scheduler uses while buffering weights: constants assumed in fast storage
    (unless ``const_area`` says where) and, by default, the op's full OFM depth (even when the op writes only a
    depth slice of its OFM), with the op's own activation (not ``reported_activation``: the scheduler runs before
    Vela packs a standalone one into the pass). ``first=False`` prices a later weight slice (the default core then
    charges no first IFM block fetch)."""
    if ofm_depth is None:
        ofm_depth = op.ofm.shape.depth
    query = schedule_price_inputs(arch, op, op_sched, schedule, ofm_depth=ofm_depth,
                                  const_area=const_area or arch.fast_storage_mem_area, scheduling_areas=True).query
    if arch.estimator is Estimator.VELA_DEFAULT:
        return perf_default.measure_cycle_cost(arch, op.op_type, op.activation, query, first=first).op_cycles
    return perf.measure_cycle_cost(arch, op.op_type, op.activation, query).op_cycles


def block_depth(op_sched: OpSchedule) -> int:
    """OFM depth of the block the op runs with, which its weights are encoded for."""
    assert op_sched.block_config is not None, "only an op with a block config is priced"
    return op_sched.block_config.ofm_block.depth


def encoded_weights_for(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule) -> wts.EncodedWeights | None:
    """The weight stream the schedule's op reads (encoded for its block depth and depth slices)."""
    if op.weights is None:
        return None
    return wts.encode_op_weights(arch, op, block_depth(op_sched), op_sched.depth_slices)


def full_weight_transfer_cycles(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule) -> float:
    """DMA time of the op's whole, unsliced weight stream (what Vela compares slack against)."""
    full = wts.encode_op_weights(arch, op, block_depth(op_sched), (0, op_sched.ofm_stripe.depth))
    return perf.measure_mem2mem_cycles(arch, arch.permanent_storage_mem_area, arch.fast_storage_mem_area,
                                       full.total_bytes)


def slack_buffering_cycles(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule) -> float:
    """NPU time under which the next pass may prefetch its first weights: the compute time of the schedule's
    ``slack_ofm_depth`` when given, else of this pass's last weight slice (or the whole pass when its weights are
    not sliced)."""
    if op_sched.slack_ofm_depth is not None:
        return scheduler_op_cycles(arch, op, op_sched, schedule, op_sched.slack_ofm_depth)
    if op_sched.tail_slack_cycles is not None:
        return op_sched.tail_slack_cycles
    slices = op_sched.depth_slices
    depth = slices[-1] - slices[-2] if len(slices) > 2 else None
    const_area = None
    if arch.estimator is Estimator.VELA_DEFAULT and not op_sched.weight_buffering.is_buffered:
        # the default core's slack of an op that reads its weights in place is that op's cost as its reference
        # schedule has it: weights where they are kept (their latency slows the op)
        const_area = arch.permanent_storage_mem_area
    return scheduler_op_cycles(arch, op, op_sched, schedule, depth, first=depth is None, const_area=const_area)


# The slack one pass leaves the next for prefetching its weights: cycles, or under ``Estimator.BOTH`` each model's.
Slack = float | tuple[float, float]


def price_op(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule, prev_slack_cycles: Slack
             ) -> tuple[perf.OpPerformance, Slack, float]:
    """(estimate, own slack-buffering cycles, full weight transfer cycles) of one pass."""
    return _known_partial_price(arch, op, op_sched, schedule).finish(arch, prev_slack_cycles)


def _known_partial_price(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule,
                         schedule: Schedule) -> PartialPrice | BlendedPrice:
    """``partial_price_op``, kept: a single model's price reads of the schedule only where the pass's operands sit
    and, for Vela legacy, whether a weight twin encoded the same stream before, so a pass priced again with those
    unchanged (the next evaluation of a schedule that differs elsewhere, the same schedule under the objective's
    blend) is the same price. (The CP-SAT price tables keep their own.)"""
    if arch.estimator is Estimator.BOTH:
        return _blended(_known_partial_price, arch, op, op_sched, schedule)
    scale_bytes = _scale_bytes(arch, op, op_sched, schedule)
    key = (arch, id(op), op_sched, scale_bytes, placement_of(arch, schedule, op.ifm.tensor),
           placement_of(arch, schedule, op.ofm.tensor),
           placement_of(arch, schedule, op.ifm2.tensor) if op.ifm2 is not None else None)
    known = _PRICES.get(key)
    if known is not None and known[0] is op:
        return known[1]
    price = _single_partial_price(arch, op, op_sched, schedule, scale_bytes)
    if len(_PRICES) >= _PRICES_HELD:
        _PRICES.clear()
    _PRICES[key] = (op, price)  # holding the op keeps its id from being reused while the key stands
    return price


# Single-model prices of passes evaluated lately, by (architecture, pass identity, its choices and operand places).
_PRICES: dict[tuple, tuple[NpuOp, PartialPrice]] = {}
_PRICES_HELD = 1 << 15


@dataclass(frozen=True)
class PartialPrice:
    """``price_op`` short of the previous pass's slack, which changes only the estimate's NPU cycles and total (and,
    under the contention estimator, the slack this pass leaves): computed once per pass and placements by callers
    that price it after many different previous passes (the CP-SAT price tables), and finished per slack."""

    estimate: perf.PartialOpPerformance | perf_default.PartialOpPerformance
    slack: float  # own slack-buffering cycles
    full_transfer: float
    # This pass's buffered weight bytes when the contention estimator adjusts the slack it leaves (None: it does not).
    contention_bytes: int | None = None

    def finish(self, arch: PricedArchitecture, prev_slack_cycles: Slack
               ) -> tuple[perf.OpPerformance, Slack, float]:
        """(estimate, own slack-buffering cycles, full weight transfer cycles) after ``prev_slack_cycles``."""
        assert not isinstance(prev_slack_cycles, tuple), "a single model's price follows a single model's slack"
        result = self.estimate.finish(prev_slack_cycles, self.slack)
        slack = self.slack
        if self.contention_bytes is not None:
            slack = contention_slack(arch, result, slack, self.contention_bytes)
        return result, slack, self.full_transfer


@dataclass(frozen=True)
class BlendedPrice:
    """``PartialPrice`` under ``Estimator.BOTH``: each Vela core's model prices the pass after the slack the
    previous pass leaves under that model, and the estimate is their weighted sum (``blend_weights``)."""

    legacy: PartialPrice
    default: PartialPrice

    def finish(self, arch: PricedArchitecture, prev_slack_cycles: Slack
               ) -> tuple[perf.OpPerformance, Slack, float]:
        legacy_arch, default_arch = blend_parts(arch)
        slacks = prev_slack_cycles if isinstance(prev_slack_cycles, tuple) else (prev_slack_cycles,) * 2
        a, a_slack, a_transfer = self.legacy.finish(legacy_arch, slacks[0])
        b, b_slack, b_transfer = self.default.finish(default_arch, slacks[1])
        wa, wb = arch.blend_weights
        access = {mem: wa * a.access_cycles.get(mem, 0.0) + wb * b.access_cycles.get(mem, 0.0)
                  for mem in dict.fromkeys([*a.access_cycles, *b.access_cycles])}
        blend = perf.OpPerformance(npu_cycles=wa * a.npu_cycles + wb * b.npu_cycles, access_cycles=access,
                                   total_cycles=wa * a.total_cycles + wb * b.total_cycles, macs=a.macs,
                                   bandwidth=a.bandwidth, scaled_bandwidth=a.scaled_bandwidth,
                                   op_cycles=wa * a.op_cycles + wb * b.op_cycles,
                                   parts=(wa * a.total_cycles, wb * b.total_cycles))
        assert not isinstance(a_slack, tuple) and not isinstance(b_slack, tuple)
        return blend, (a_slack, b_slack), wa * a_transfer + wb * b_transfer


def partial_price_op(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule,
                     schedule: Schedule) -> PartialPrice | BlendedPrice:
    """``price_op`` of one pass short of the previous pass's slack (see ``PartialPrice``)."""
    if arch.estimator is Estimator.BOTH:
        return _blended(partial_price_op, arch, op, op_sched, schedule)
    return _single_partial_price(arch, op, op_sched, schedule, _scale_bytes(arch, op, op_sched, schedule))


def _blended(price: Callable[[PricedArchitecture, NpuOp, OpSchedule, Schedule], PartialPrice | BlendedPrice],
             arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule) -> BlendedPrice:
    """A pass's price under ``Estimator.BOTH``: each Vela core's model's, by ``price``."""
    legacy_arch, default_arch = blend_parts(arch)
    legacy = price(legacy_arch, op, op_sched, schedule)
    default = price(default_arch, op, op_sched, schedule)
    assert isinstance(legacy, PartialPrice) and isinstance(default, PartialPrice)
    return BlendedPrice(legacy, default)


def _scale_bytes(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule) -> int:
    """What Vela legacy's estimate counts of one channel's encoded scale (no other model reads it)."""
    return 0 if arch.estimator is Estimator.VELA_DEFAULT else _legacy_scale_element_bytes(op, op_sched, schedule)


def _single_partial_price(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule,
                          scale_bytes: int) -> PartialPrice:
    if arch.estimator is Estimator.VELA_DEFAULT:
        return _partial_price_default(arch, op, op_sched, schedule)
    return _partial_price_legacy(arch, op, op_sched, schedule, scale_bytes)


def _partial_price_legacy(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule,
                          scale_bytes: int) -> PartialPrice:
    """``partial_price_op`` under Vela legacy's model (or the contention estimator built on it)."""
    buffering = op_sched.weight_buffering
    encoded = encoded_weights_for(arch, op, op_sched)
    stream = None
    full_transfer = 0.0
    const_area = None
    if encoded is not None:
        if buffering.is_buffered:
            # Vela prices the whole-stream DMA only for ops outside cascades (a cascaded op keeps 0).
            if op_sched.cascade is None:
                full_transfer = full_weight_transfer_cycles(arch, op, op_sched)
            const_area = arch.fast_storage_mem_area
            stream = pricing_weight_stream(arch, op, encoded, buffering.kind, full_transfer, scale_bytes)
        else:
            const_area = arch.permanent_storage_mem_area
            stream = pricing_weight_stream(arch, op, encoded, perf.BufferKind.NONE, scale_element_bytes=scale_bytes)
    inputs = schedule_price_inputs(arch, op, op_sched, schedule, const_area=const_area)
    slack = slack_buffering_cycles(arch, op, op_sched, schedule)
    estimate = perf.partial_full_op_performance(arch, op.op_type, op.reported_activation, inputs.query, weights=stream,
                                                lut=inputs.lut, memcpy=inputs.memcpy)
    contention_bytes = None
    if arch.estimator is Estimator.CONTENTION:
        contention_bytes = encoded.total_bytes if encoded is not None and buffering.is_buffered else 0
    return PartialPrice(estimate, slack, full_transfer, contention_bytes)


def _encodings(op: NpuOp, op_sched: OpSchedule) -> set[tuple[int, tuple[int, ...]]]:
    """The (block depth, depth slices) Vela's compile encodes the op's weights for: its stream (what
    ``encoded_weights_for`` encodes), and the whole stream unsliced where it times the whole-stream DMA (buffered,
    outside cascades)."""
    if op.weights is None or op_sched.block_config is None:
        return set()
    depth = min(block_depth(op_sched), op.weights.shape[-1])  # a block deeper than the weights encodes the same
    found = {(depth, tuple(op_sched.depth_slices))}
    if op_sched.weight_buffering.is_buffered and op_sched.cascade is None:
        found.add((depth, (0, op.ofm.shape.depth)))
    return found


def _legacy_scale_element_bytes(op: NpuOp, op_sched: OpSchedule, schedule: Schedule) -> int:
    """How many bytes of one channel's scale and bias Vela legacy's estimate subtracts from the encoded stream.

    An encoded scale entry is 10 bytes, but Vela records that on the bias tensor only when it encodes it: a pass
    every one of whose encodings an earlier pass with the same weights and scales made (``WEIGHT_TWINS``: an
    unrolled RNN's time steps) takes them from Vela's cache, and its estimate reads the bias at its own element
    size, so more of the stream counts as weights."""
    twins = op.attr(WEIGHT_TWINS, ())
    if not isinstance(twins, tuple) or not twins or op.bias is None:
        return wts.SCALE_ENTRY_BYTES
    earlier: set[tuple[int, tuple[int, ...]]] = set()
    for index in twins:
        if schedule.has_op(index):
            earlier |= _encodings(op, schedule.op(index))
    cached = _encodings(op, op_sched) <= earlier
    return op.bias.dtype.size_in_bytes if cached else wts.SCALE_ENTRY_BYTES


def _partial_price_default(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule, schedule: Schedule
                           ) -> PartialPrice:
    """``partial_price_op`` under Vela's default core: its whole-stream DMA estimate is made for every buffered op
    (the legacy core left it 0 inside cascades) with its own copy formula, and a pre-buffered first slice is not
    this op's traffic."""
    buffering = op_sched.weight_buffering
    encoded = encoded_weights_for(arch, op, op_sched)
    stream = None
    full_transfer = 0.0
    weight_bytes = 0
    const_area = None
    if encoded is not None:
        weight_bytes = sum(r.weight_bytes for r in encoded.ranges)
        const_area = arch.permanent_storage_mem_area
        if buffering.is_buffered:
            full = wts.encode_op_weights(arch, op, block_depth(op_sched), (0, op_sched.ofm_stripe.depth))
            full_transfer = float(perf_default.mem2mem_cycles(arch, arch.permanent_storage_mem_area,
                                                              arch.fast_storage_mem_area, full.total_bytes))
            const_area = arch.fast_storage_mem_area
            stream = pricing_weight_stream(arch, op, encoded, buffering.kind, full_transfer)
        else:
            stream = pricing_weight_stream(arch, op, encoded, perf.BufferKind.NONE)
    inputs = schedule_price_inputs(arch, op, op_sched, schedule, const_area=const_area)
    slack = slack_buffering_cycles(arch, op, op_sched, schedule)
    estimate = perf_default.partial_full_op_performance(
        arch, op.op_type, op.activation, inputs.query, weights=stream, weight_bytes=weight_bytes,
        pre_buffered=buffering.pre_buffered, lut=inputs.lut, memcpy=inputs.memcpy)
    return PartialPrice(estimate, slack, full_transfer)


# --------------------------------------------------------------------------------------------------------------
# Whole schedule


def staging_limit(arch: PricedArchitecture) -> int:
    """The fast-storage budget the scheduler works to (Vela's optimisation SRAM limit: the arena cache size)."""
    return int(arch.arena_cache_size)
