"""What one pass costs under a schedule: Vela 5.2.0's legacy-core full-op estimate, fed with the schedule's block
config, tensor placements and weight buffering (and, under the contention estimator, the slack it leaves)."""

from __future__ import annotations

from npusched.ir import FeatureMap, MemArea, NpuBlockType, NpuOp, Shape4D, TensorFormat
from npusched.schedule.rules import allocation_bytes, pricing_weight_stream, storage_size
from npusched.schedule.schedule import OpSchedule, Schedule
from npusched.schedule.tensor_use import placement_of
from npusched.target import performance as perf
from npusched.target import performance_default as perf_default
from npusched.target import weights as wts
from npusched.target.arch import ArchitectureFeatures, Estimator
from npusched.target.contention import contention_slack


def op_query(arch: ArchitectureFeatures, op: NpuOp, op_sched: OpSchedule, schedule: Schedule, *,
             ofm_depth: int | None = None, const_area: MemArea | None = None,
             scheduling_areas: bool = False) -> perf.PerformanceQuery:
    """The performance query of a pass under a schedule.

    With ``scheduling_areas`` the feature maps are priced where they sit while Vela schedules (feature-map
    storage), which is what its buffering decisions are based on; otherwise where the schedule puts them.
    ``ofm_depth`` prices only part of the OFM depth (a weight slice).
    """

    def area(fm: FeatureMap) -> MemArea:
        if scheduling_areas and not fm.is_const:
            return arch.feature_map_storage_mem_area
        return placement_of(arch, schedule, fm).mem_area

    def fmt(fm: FeatureMap) -> TensorFormat:
        return placement_of(arch, schedule, fm).format

    ofm_shape = op.ofm.effective_shape
    if ofm_depth is not None:
        ofm_shape = ofm_shape.with_depth(ofm_depth)
    ifm2 = op.ifm2
    const_shape = Shape4D(1, 1, 1, op.ofm.shape.depth) if op.bias is not None else None
    return perf.PerformanceQuery(
        npu_block_type=op.npu_block_type,
        ifm_shape=op.ifm.effective_shape,
        ofm_shape=ofm_shape,
        config=op_sched.block_config,
        ifm_bits=op.ifm.tensor.dtype.size_in_bits,
        ofm_bits=op.ofm.tensor.dtype.size_in_bits,
        ifm_format=fmt(op.ifm.tensor),
        ofm_format=fmt(op.ofm.tensor),
        ifm_memory_area=area(op.ifm.tensor),
        ofm_memory_area=area(op.ofm.tensor),
        ifm2_shape=ifm2.effective_shape if ifm2 is not None else None,
        ifm2_bits=ifm2.tensor.dtype.size_in_bits if ifm2 is not None else 0,
        ifm2_format=fmt(ifm2.tensor) if ifm2 is not None else TensorFormat.NHWC,
        ifm2_memory_area=area(ifm2.tensor) if ifm2 is not None else None,
        const_shape=const_shape,
        const_memory_area=const_area if const_shape is not None else None,
        kernel=op.kernel,
    )


def scheduler_op_cycles(arch: ArchitectureFeatures, op: NpuOp, op_sched: OpSchedule, schedule: Schedule,
                        ofm_depth: int | None = None) -> float:
    """The compute estimate Vela's scheduler uses while buffering weights: constants assumed in fast storage and,
    by default, the op's full OFM depth (even when the op writes only a depth slice of its OFM)."""
    if ofm_depth is None:
        ofm_depth = op.ofm.shape.depth
    query = op_query(arch, op, op_sched, schedule, ofm_depth=ofm_depth, const_area=arch.fast_storage_mem_area,
                     scheduling_areas=True)
    if arch.estimator is Estimator.VELA_DEFAULT:
        return perf_default.measure_cycle_cost(arch, op.op_type, op.activation, query).op_cycles
    return perf.measure_cycle_cost(arch, op.op_type, op.activation, query).op_cycles


def block_depth(op_sched: OpSchedule) -> int:
    """OFM depth of the block the op runs with, which its weights are encoded for."""
    assert op_sched.block_config is not None, "only an op with a block config is priced"
    return op_sched.block_config.ofm_block.depth


def encoded_weights_for(arch: ArchitectureFeatures, op: NpuOp, op_sched: OpSchedule) -> wts.EncodedWeights | None:
    """The weight stream the schedule's op reads (encoded for its block depth and depth slices)."""
    if op.weights is None:
        return None
    return wts.encode_op_weights(arch, op, block_depth(op_sched), op_sched.depth_slices)


def full_weight_transfer_cycles(arch: ArchitectureFeatures, op: NpuOp, op_sched: OpSchedule) -> float:
    """DMA time of the op's whole, unsliced weight stream (what Vela compares slack against)."""
    full = wts.encode_op_weights(arch, op, block_depth(op_sched), (0, op_sched.ofm_stripe.depth))
    return perf.measure_mem2mem_cycles(arch, arch.permanent_storage_mem_area, arch.fast_storage_mem_area,
                                       full.total_bytes)


def slack_buffering_cycles(arch: ArchitectureFeatures, op: NpuOp, op_sched: OpSchedule, schedule: Schedule) -> float:
    """NPU time under which the next pass may prefetch its first weights: the compute time of the schedule's
    ``slack_ofm_depth`` when given, else of this pass's last weight slice (or the whole pass when its weights are
    not sliced)."""
    if op_sched.slack_ofm_depth is not None:
        return scheduler_op_cycles(arch, op, op_sched, schedule, op_sched.slack_ofm_depth)
    if op_sched.tail_slack_cycles is not None:
        return op_sched.tail_slack_cycles
    slices = op_sched.depth_slices
    depth = slices[-1] - slices[-2] if len(slices) > 2 else None
    return scheduler_op_cycles(arch, op, op_sched, schedule, depth)


def _lut_transfer(arch: ArchitectureFeatures, op: NpuOp) -> perf.DmaTransfer | None:
    if op.activation_lut is None:
        return None
    return perf.DmaTransfer(arch.permanent_storage_mem_area, MemArea.Shram,
                            allocation_bytes(op.activation_lut.size_in_bytes))


def _memcpy_transfer(arch: ArchitectureFeatures, op: NpuOp, schedule: Schedule) -> perf.DmaTransfer | None:
    if op.npu_block_type != NpuBlockType.Dma:
        return None
    src = placement_of(arch, schedule, op.ifm.tensor)
    dst = placement_of(arch, schedule, op.ofm.tensor)
    return perf.DmaTransfer(src.mem_area, dst.mem_area, storage_size(op.ifm.tensor, src.format))


def price_op(arch: ArchitectureFeatures, op: NpuOp, op_sched: OpSchedule, schedule: Schedule, prev_slack_cycles: float
             ) -> tuple[perf.OpPerformance, float, float]:
    """(estimate, own slack-buffering cycles, full weight transfer cycles) of one pass."""
    if arch.estimator is Estimator.VELA_DEFAULT:
        return _price_op_default(arch, op, op_sched, schedule, prev_slack_cycles)
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
            stream = pricing_weight_stream(arch, op, encoded, buffering.kind, full_transfer)
        else:
            const_area = arch.permanent_storage_mem_area
            stream = pricing_weight_stream(arch, op, encoded, perf.BufferKind.NONE)
    query = op_query(arch, op, op_sched, schedule, const_area=const_area)
    slack = slack_buffering_cycles(arch, op, op_sched, schedule)
    result = perf.estimate_full_op_performance(
        arch, op.op_type, op.activation, query,
        weights=stream,
        prev_slack_cycles=prev_slack_cycles,
        slack_buffering_cycles=slack,
        lut=_lut_transfer(arch, op),
        memcpy=_memcpy_transfer(arch, op, schedule),
    )
    if arch.estimator is Estimator.CONTENTION:
        buffered_bytes = encoded.total_bytes if encoded is not None and buffering.is_buffered else 0
        slack = contention_slack(arch, result, slack, buffered_bytes)
    return result, slack, full_transfer


def _price_op_default(arch: ArchitectureFeatures, op: NpuOp, op_sched: OpSchedule, schedule: Schedule,
                      prev_slack_cycles: float) -> tuple[perf.OpPerformance, float, float]:
    """``price_op`` under Vela's default core: its whole-stream DMA estimate is made for every buffered op (the
    legacy core left it 0 inside cascades) with its own copy formula, and a pre-buffered first slice is not this
    op's traffic."""
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
    query = op_query(arch, op, op_sched, schedule, const_area=const_area)
    slack = slack_buffering_cycles(arch, op, op_sched, schedule)
    result = perf_default.estimate_full_op_performance(
        arch, op.op_type, op.activation, query, weights=stream, weight_bytes=weight_bytes,
        pre_buffered=buffering.pre_buffered, prev_slack_cycles=prev_slack_cycles, slack_buffering_cycles=slack,
        lut=_lut_transfer(arch, op), memcpy=_memcpy_transfer(arch, op, schedule))
    return result, slack, full_transfer


# --------------------------------------------------------------------------------------------------------------
# Whole schedule


def staging_limit(arch: ArchitectureFeatures) -> int:
    """The fast-storage budget the scheduler works to (Vela's optimisation SRAM limit: the arena cache size)."""
    return int(arch.arena_cache_size)
