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

from npusched.ir import FeatureMap, NpuOp, TensorFormat
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
from npusched.target.block_config import find_block_config_for_op
from npusched.target.estimators import PricedArchitecture

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


def vela_tensor_placements(network: Network | NpuSubgraph, arch: PricedArchitecture, use: TensorUse | None = None
                           ) -> tuple[tuple[FeatureMap, TensorPlacement], ...]:
    """Memory area and layout of every non-constant feature map, as Vela's scheduler sets them up.

    A map passed between passes of one NPU subgraph takes the layout the lowering decided (``FeatureMap.format``,
    ``npusched.lowering.formats``): Vela judges it on its optimised graph, before passes are packed, where a map
    read through a reshape is still seen at another shape and the packed passes no longer show it. A map entering
    or leaving a subgraph is linear, also where ``network`` is a part of a larger one (a window, the first passes)."""
    use = use if use is not None else tensor_use(network)
    formats: dict[FeatureMap, TensorFormat] = {}
    for sg in subgraphs_of(network):
        formats.update((fm, TensorFormat.NHWC) for fm in sg.inputs if not fm.is_const and fm not in formats)
        for op in sg.ops:
            for access in (op.ifm, op.ifm2):
                if access is not None and not access.tensor.is_const:
                    formats.setdefault(access.tensor, TensorFormat.NHWC)
            out = op.ofm.tensor
            formats.setdefault(out, TensorFormat.NHWC if out in use.subgraph_outputs else out.format)
    area = arch.feature_map_storage_mem_area
    return tuple((fm, TensorPlacement(area, fmt)) for fm, fmt in formats.items())


# --------------------------------------------------------------------------------------------------------------
# Block configs and weight buffering


def full_op_schedule(arch: PricedArchitecture, op: NpuOp) -> OpSchedule:
    """The op at full size with Vela's block config and its weights encoded whole, unbuffered."""
    ifm2 = op.ifm2.shape if op.ifm2 is not None else None
    config = find_block_config_for_op(arch, op, op.ofm.shape, op.ifm.shape, ifm2)
    encoded = None
    if op.weights is not None and config is not None:
        encoded = EncodedWeightsRef.of(wts.encode_op_weights(arch, op, config.ofm_block.depth, (0, op.ofm.shape.depth)),
                       config.ofm_block.depth)
    return OpSchedule(op_index=op.index, block_config=config, ofm_stripe=op.ofm.shape, ifm_stripe=op.ifm.shape,
                      ifm2_stripe=ifm2, encoded_weights=encoded)


def buffer_weights(network: Network | NpuSubgraph, arch: PricedArchitecture, ref: Schedule, limit: int) -> Schedule:
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


def max_schedule(network: Network | NpuSubgraph, arch: PricedArchitecture,
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
