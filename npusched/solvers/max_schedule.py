"""Vela's "max" schedule: every pass at full size, no cascading, weights buffered as Vela buffers them.

When everything fits in fast storage Vela 5.2.0 (legacy core) ships exactly this schedule, named
``<subgraph>_MAX_BUFFERED``. It is built in three steps, each reproduced here:

1. tensor layouts: a pass's OFM is stored in the NPU's 16-channel brick format (NHCWB16) unless it leaves the
   subgraph, must stay linear for a consumer or producer, or is the output of an elementwise pass whose depth
   is not a multiple of 16 and that could overwrite a linear IFM in place;
2. per pass, Vela's block config for the whole OFM;
3. weight buffering, pass by pass in execution order, against the memory use of the unbuffered schedule: the
   weights of a pass are sliced by OFM depth so that the first slice can be fetched while the previous pass
   still runs and later slices while earlier ones compute, then double- or single-buffered in fast storage.

The result is judged by ``npusched.schedule.evaluator`` like every other schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from npusched.ir import FeatureMap, NpuBlockType, NpuOp, TensorFormat
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.evaluator import (
    TensorUse,
    scheduler_op_cycles,
    staging_limit,
    subgraph_memory,
    subgraphs_of,
    tensor_use,
    weights_need_dma,
)
from npusched.schedule.schedule import EncodedWeightsRef, OpSchedule, Schedule, TensorPlacement, WeightBuffering
from npusched.target import performance as perf
from npusched.target import weights as wts
from npusched.target.arch import ArchitectureFeatures
from npusched.target.block_config import find_block_config_for_op

MAX_LABEL = "MAX_BUFFERED"
# Vela buffers the max schedule against an effectively unlimited budget (1 << 32 bytes).
UNLIMITED_STAGING = 1 << 32


@dataclass(frozen=True)
class MaxScheduleOptions:
    """``staging_limit`` is the budget the finished schedule must fit (default: the arena cache size);
    ``buffering_limit`` the budget weight buffering is planned against (Vela: unlimited)."""

    staging_limit: int | None = None
    buffering_limit: int = UNLIMITED_STAGING


# --------------------------------------------------------------------------------------------------------------
# Tensor layouts


def _must_stay_linear(fm: FeatureMap, arch: ArchitectureFeatures, use: TensorUse,
                      ops_by_index: dict[int, NpuOp]) -> bool:
    """Whether a feature map has to keep the plain NHWC layout (Vela's check_format_restrictions).

    It does when it is produced outside the NPU, written into a variable (LSTM state), read or written by some
    pass with another shape, at a channel offset that is not a multiple of 16, or by DMA, or when it feeds a
    ReduceSum that needs linear input.
    """
    producers = [ops_by_index[i] for i in use.producers.get(fm, ()) if i in ops_by_index]
    consumers = [ops_by_index[i] for i in use.consumers.get(fm, ()) if i in ops_by_index]
    if not producers or fm in use.subgraph_outputs or fm in use.subgraph_inputs:
        return True
    for op in producers:
        # A pass writing a slice (a concatenation's copy, or a convolution writing in place) is judged by its offset.
        if (op.ofm.offset is None and op.ofm.shape != fm.shape) or op.npu_block_type == NpuBlockType.Dma:
            return True
        if op.ofm.offset is not None and op.ofm.offset.depth % 16 != 0:
            return True
        # a concatenation's copy sees the whole OFM: at a reshape of it (a reshaped concatenation), Vela keeps it linear
        if op.ofm.offset is not None and op.ofm.shape not in (op.ofm.access_shape, fm.shape):
            return True
        if op.attr("memory_function") == "VariableTensorWrite":
            return True
        if op.op_type == "DepthwiseConv2DBias" and op.attr("original_type") == "ResizeBilinear":
            return True  # half-pixel-centre resize rewrites the OFM strides
    for op in consumers:
        if op.npu_block_type == NpuBlockType.Dma:
            return True
        for access in (op.ifm, op.ifm2):
            if access is None or access.tensor != fm:
                continue
            if access.shape != fm.shape:
                return True
            if access.offset is not None and access.offset.depth % 16 != 0:
                return True
        if op.op_type == "ReduceSum" and (fm.dtype.size_in_bits == 32 or arch.accelerator_config == "ethos-u65-512"):
            return True
    return False


def _elementwise_prefers_linear(op: NpuOp, formats: dict[FeatureMap, TensorFormat]) -> bool:
    """An elementwise OFM whose depth is not a multiple of 16 stays linear when it could overwrite a linear IFM
    of the same shape and type (bricks would pad it and prevent the reuse)."""
    if op.npu_block_type != NpuBlockType.ElementWise or op.ofm.shape.depth % 16 == 0:
        return False
    for access in (op.ifm, op.ifm2):
        if access is None or access.shape != op.ofm.shape or access.tensor.orig_shape == ():
            continue
        if access.tensor.dtype != op.ofm.tensor.dtype:
            continue
        if formats.get(access.tensor, TensorFormat.NHWC) == TensorFormat.NHWC:
            return True
    return False


def vela_tensor_placements(network: Network | NpuSubgraph, arch: ArchitectureFeatures, use: TensorUse | None = None
                           ) -> tuple[tuple[FeatureMap, TensorPlacement], ...]:
    """Memory area and layout of every non-constant feature map, as Vela's scheduler sets them up."""
    use = use if use is not None else tensor_use(network)
    formats: dict[FeatureMap, TensorFormat] = {}
    order: list[FeatureMap] = []
    for sg in subgraphs_of(network):
        ops_by_index = {op.index: op for op in sg.ops}
        for fm in sg.inputs:
            if not fm.is_const and fm not in formats:
                formats[fm] = TensorFormat.NHWC
                order.append(fm)
        for op in sg.ops:
            for access in (op.ifm, op.ifm2):
                if access is not None and not access.tensor.is_const and access.tensor not in formats:
                    formats[access.tensor] = TensorFormat.NHWC
                    order.append(access.tensor)
            out = op.ofm.tensor
            if out not in formats:
                order.append(out)
            if (out in use.subgraph_outputs or _must_stay_linear(out, arch, use, ops_by_index)
                    or _elementwise_prefers_linear(op, formats)):
                formats.setdefault(out, TensorFormat.NHWC)
            else:
                formats[out] = TensorFormat.NHCWB16
    area = arch.feature_map_storage_mem_area
    return tuple((fm, TensorPlacement(area, formats[fm])) for fm in order)


# --------------------------------------------------------------------------------------------------------------
# Block configs and weight buffering


def full_op_schedule(arch: ArchitectureFeatures, op: NpuOp) -> OpSchedule:
    """The op at full size with Vela's block config and its weights encoded whole, unbuffered."""
    ifm2 = op.ifm2.shape if op.ifm2 is not None else None
    config = find_block_config_for_op(arch, op, op.ofm.shape, op.ifm.shape, ifm2)
    encoded = None
    if op.weights is not None and config is not None:
        encoded = EncodedWeightsRef.of(wts.encode_op_weights(arch, op, config.ofm_block.depth, (0, op.ofm.shape.depth)),
                       config.ofm_block.depth)
    return OpSchedule(op_index=op.index, block_config=config, ofm_stripe=op.ofm.shape, ifm_stripe=op.ifm.shape,
                      ifm2_stripe=ifm2, encoded_weights=encoded)


def buffer_weights(network: Network | NpuSubgraph, arch: ArchitectureFeatures, ref: Schedule, limit: int) -> Schedule:
    """Vela's propose_schedule_buffering: decide, pass by pass, how each pass's weights are buffered.

    ``ref`` is the unbuffered schedule; its memory use at each pass sets how much fast storage is left for
    weight buffers (``limit`` minus that use). The previous pass's remaining slack (cycles and bytes) decides
    how much of the first slice can be prefetched under it.
    """
    use = tensor_use(network)
    new_ops: list[OpSchedule] = []
    for sg in subgraphs_of(network):
        memory = subgraph_memory(sg, arch, ref, use)
        prev_slack_cycles = 0.0
        prev_slack_memory = 0
        for op in sg.ops:
            op_sched = ref.op(op.index)
            step = memory.op_steps[op.index]
            used = memory.usage[step] if step < len(memory.usage) else 0
            slack_cycles = scheduler_op_cycles(arch, op, op_sched, ref)
            slack_memory = limit - used
            if op.weights is not None and op_sched.block_config is not None:
                block_depth = op_sched.block_config.ofm_block.depth

                def encode(slices: tuple[int, ...], _op: NpuOp = op, _depth: int = block_depth) -> wts.EncodedWeights:
                    return wts.encode_op_weights(arch, _op, _depth, slices)

                priced: list[int] = []

                def op_cycles(depth: int, _op: NpuOp = op, _sched: OpSchedule = op_sched,
                              _priced: list[int] = priced) -> float:
                    _priced.append(depth)
                    return scheduler_op_cycles(arch, _op, _sched, ref, depth)

                def transfer(size: int) -> float:
                    return perf.measure_mem2mem_cycles(arch, arch.permanent_storage_mem_area,
                                                       arch.fast_storage_mem_area, size)

                plan = wts.plan_weight_buffering(
                    encode, op_sched.ofm_stripe.depth, block_depth,
                    needs_dma=weights_need_dma(arch, op),
                    is_fully_connected=op.op_type == "FullyConnected",
                    cascaded=op_sched.cascade is not None,
                    buffer_limit_bytes=slack_memory,
                    slack_cycles=prev_slack_cycles,
                    slack_memory=prev_slack_memory,
                    transfer_cycles=transfer,
                    op_cycles=op_cycles,
                )
                if plan.buffer_sizes:
                    kind = perf.BufferKind.DOUBLE if plan.double_buffered else perf.BufferKind.SINGLE
                    buffering = WeightBuffering(kind, tuple(plan.depth_slices), tuple(plan.buffer_sizes),
                                                bool(plan.pre_buffer))
                else:
                    buffering = WeightBuffering()
                sliced_but_unbuffered = plan.tail_cycles is not None and len(plan.depth_slices) <= 2
                op_sched = OpSchedule(
                    op_index=op.index, block_config=op_sched.block_config, ofm_stripe=op_sched.ofm_stripe,
                    ifm_stripe=op_sched.ifm_stripe, ifm2_stripe=op_sched.ifm2_stripe, cascade=op_sched.cascade,
                    weight_buffering=buffering, encoded_weights=EncodedWeightsRef.of(plan.encoded, block_depth),
                    rolling_buffer=op_sched.rolling_buffer,
                    # The planner prices the planned last slice last; the evaluator prices that depth again.
                    slack_ofm_depth=priced[-1] if sliced_but_unbuffered else None,
                )
                if plan.tail_cycles is not None:
                    slack_cycles = plan.tail_cycles
                slack_memory -= plan.slack_memory_used
            new_ops.append(op_sched)
            prev_slack_cycles = slack_cycles
            prev_slack_memory = slack_memory
    return ref.with_ops(new_ops)


def max_schedule(network: Network | NpuSubgraph, arch: ArchitectureFeatures,
                 options: MaxScheduleOptions | None = None) -> Schedule:
    """Vela's ``<sg>_MAX_BUFFERED`` schedule of every NPU subgraph of ``network``.

    ``status`` is "fits" when its peak fast-storage use stays below the staging limit (Vela then keeps it) and
    "over_limit" otherwise (Vela would go on to cascade; this schedule is then only a reference).
    """
    opts = options or MaxScheduleOptions()
    use = tensor_use(network)
    placements = vela_tensor_placements(network, arch, use)
    ops = [full_op_schedule(arch, op) for sg in subgraphs_of(network) for op in sg.ops]
    missing = [op.op_index for op in ops if op.block_config is None]
    template = Schedule(ops=tuple(ops), tensors=placements, label="MAX", solver="max")
    buffered = buffer_weights(network, arch, template, opts.buffering_limit)
    limit = staging_limit(arch) if opts.staging_limit is None else int(opts.staging_limit)
    peak = max((subgraph_memory(sg, arch, buffered, use).peak for sg in subgraphs_of(network)), default=0)
    notes = [f"peak fast storage {peak} bytes, limit {limit} bytes"]
    if missing:
        notes.append(f"no block config fits for ops {missing}")
    fits = peak < limit and not arch.is_spilling_enabled() and not missing
    status = "fits" if fits else "over_limit"
    return Schedule(ops=buffered.ops, tensors=placements, label=MAX_LABEL, status=status, solver="max",
                    notes=tuple(notes))
