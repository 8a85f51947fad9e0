"""Whether a schedule is valid for its network: every pass has its choices; stripes, weight slices and buffers
agree with the op; cascades are consistent; fast storage never exceeds its limit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from npusched.ir import MemArea, NpuOp
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.allocation import Allocation, allocate_ranges, fast_storage_ranges
from npusched.schedule.memory_model import cascade_rolling_buffers
from npusched.schedule.pass_costs import Evaluation, evaluate
from npusched.schedule.pricing import block_depth, staging_limit
from npusched.schedule.rules import ifm_stripes, lagged_buffer_height, weights_need_dma
from npusched.schedule.schedule import OpSchedule, Schedule
from npusched.schedule.tensor_use import feature_map_label, subgraphs_of
from npusched.target import weights as wts
from npusched.target.estimators import PricedArchitecture


def _stripe_problems(op: NpuOp, op_sched: OpSchedule) -> Iterable[str]:
    ofm = op.ofm.shape
    stripe = op_sched.ofm_stripe
    label = f"op {op.index} ({op.name})"
    if any(s <= 0 or s > f for s, f in zip(stripe.as_list(), ofm.as_list(), strict=True)):
        yield f"{label}: OFM stripe {stripe} is empty or exceeds the OFM {ofm}"
    if op_sched.cascade is None and stripe != ofm:
        yield f"{label}: OFM stripe {stripe} is partial but the op is in no cascade"
    if stripe == ofm and op_sched.ifm_stripe != op.ifm.shape:
        yield f"{label}: IFM stripe {op_sched.ifm_stripe} does not match the full IFM {op.ifm.shape}"
    if (op.ifm2 is None) != (op_sched.ifm2_stripe is None):
        yield f"{label}: IFM2 stripe {op_sched.ifm2_stripe} does not match the op's IFM2"


def _cascade_problems(sg: NpuSubgraph, schedule: Schedule) -> Iterable[str]:
    """A cascade is a run of consecutive passes, each reading the previous one's OFM; every cascaded pass's IFM
    stripe covers the rows its OFM stripe needs, and the rolling buffer between two passes holds at least the
    consumer's IFM stripe and the producer's OFM stripe."""
    ops = [op for op in sg.ops if schedule.has_op(op.index)]
    rolling = cascade_rolling_buffers(sg, schedule)
    seen: set[Any] = set()
    prev: NpuOp | None = None
    prev_sched: OpSchedule | None = None
    for op in ops:
        op_sched = schedule.op(op.index)
        cascade = op_sched.cascade
        label = f"op {op.index} ({op.name})"
        continues = cascade is not None and prev_sched is not None and prev_sched.cascade == cascade
        if cascade is not None and not continues:
            if cascade in seen:
                yield f"{label}: cascade {cascade} is not a run of consecutive passes"
            seen.add(cascade)
        if cascade is not None:
            need = ifm_stripes(op, op_sched.ofm_stripe)[0]
            stripe = op_sched.ifm_stripe
            if stripe.height < need.height or stripe.width < need.width:
                yield (f"{label}: IFM stripe {stripe} is smaller than the {need.height} rows x {need.width} columns "
                       f"its OFM stripe {op_sched.ofm_stripe} reads")
        if continues and prev is not None and prev_sched is not None:
            if op.ifm.tensor != prev.ofm.tensor:
                yield f"{label}: cascaded after op {prev.index} but does not read its OFM as IFM"
            buffer = rolling.get(op.index)
            stripe = op_sched.ifm_stripe
            if buffer is not None and (buffer.height < max(stripe.height, prev_sched.ofm_stripe.height)
                                       or buffer.width < stripe.width
                                       or buffer.depth < prev_sched.ofm_stripe.depth):
                yield (f"{label}: rolling buffer {buffer} cannot hold its IFM stripe {stripe} and the producer's "
                       f"OFM stripe {prev_sched.ofm_stripe}")
        prev, prev_sched = op, op_sched
    yield from _lagged_read_problems(ops, schedule, rolling)


def _lagged_read_problems(ops: list[NpuOp], schedule: Schedule, rolling: dict[int, Any]) -> Iterable[str]:
    """A pass reading as second operand a map made earlier in its own cascade reads it from the rolling buffer
    after its producer, which must hold the rows the passes between run ahead (``rules.lagged_buffer_height``)."""
    made_at = {op.ofm.tensor: k for k, op in enumerate(ops)}
    for q, op in enumerate(ops):
        second = op.ifm2
        p = made_at.get(second.tensor) if second is not None else None
        cascade = schedule.op(op.index).cascade
        if second is None or p is None or cascade is None or q - p < 2 \
                or any(schedule.op(o.index).cascade != cascade for o in ops[p:q]):
            continue
        heights = [schedule.op(o.index).ofm_stripe.height for o in ops[p:q + 1]]
        kernels = [o.kernel.area_height() for o in ops[p + 1:q]]
        need = lagged_buffer_height(heights, kernels, ops[p].ofm.shape.height)
        buffer = rolling.get(ops[p + 1].index)
        if buffer is None or buffer.height < need:
            yield (f"op {op.index} ({op.name}): reads {feature_map_label(second.tensor)} {q - p} passes after it is "
                   f"made in its cascade, which needs a rolling buffer of {need} rows, not {buffer}")


def _weight_problems(arch: PricedArchitecture, op: NpuOp, op_sched: OpSchedule) -> Iterable[str]:
    label = f"op {op.index} ({op.name})"
    buffering = op_sched.weight_buffering
    if op.weights is None:
        if buffering.is_buffered or op_sched.encoded_weights is not None:
            yield f"{label}: has no weights but the schedule buffers or encodes some"
        return
    slices = op_sched.depth_slices
    if len(slices) < 2 or slices[0] != 0 or slices[-1] != op_sched.ofm_stripe.depth or any(
            a >= b for a, b in zip(slices, slices[1:], strict=False)):
        yield f"{label}: depth slices {list(slices)} do not rise from 0 to the stripe depth"
        return
    encoded = wts.encode_op_weights(arch, op, block_depth(op_sched), slices)
    ref = op_sched.encoded_weights
    if ref is not None and tuple(ref.depth_slices) != tuple(slices):
        yield f"{label}: buffered depth slices {list(slices)} differ from the encoded {list(ref.depth_slices)}"
    elif ref is not None and (ref.total_bytes != encoded.total_bytes
                            or tuple(ref.double_buffer_sizes) != tuple(encoded.double_buffer_sizes)):
        yield f"{label}: recorded encoded weight sizes disagree with the encoder"
    expected = {"none": 0, "single": 1, "double": 2}[buffering.kind]
    if len(buffering.buffer_sizes) != expected:
        yield f"{label}: {buffering.kind} buffering needs {expected} buffers, has {len(buffering.buffer_sizes)}"
    elif buffering.kind == "single" and buffering.buffer_sizes[0] < encoded.double_buffer_sizes[0]:
        yield f"{label}: weight buffer of {buffering.buffer_sizes[0]} bytes is smaller than its slice"
    elif buffering.kind == "double" and any(
            b < e for b, e in zip(buffering.buffer_sizes, encoded.double_buffer_sizes, strict=False)):
        yield f"{label}: weight buffers {list(buffering.buffer_sizes)} are smaller than their slices"
    if buffering.is_buffered and not weights_need_dma(arch, op):
        yield f"{label}: weights are buffered although they need no DMA"


def _flash_problems(sg: NpuSubgraph, schedule: Schedule) -> Iterable[str]:
    """Flash is read-only to the NPU: no map it writes may be placed there (Vela's backend refuses it)."""
    for op in sg.ops:
        place = schedule.placement(op.ofm.tensor)
        if place is not None and place.mem_area in (MemArea.OnChipFlash, MemArea.OffChipFlash):
            yield f"op {op.index} ({op.name}): its OFM {feature_map_label(op.ofm.tensor)} is placed in read-only " \
                  f"{place.mem_area.value}"


def _boundary_problems(sg: NpuSubgraph, arch: PricedArchitecture, schedule: Schedule) -> Iterable[str]:
    """A subgraph's inputs and outputs are what the CPU (or the application) writes and reads: with fast storage
    of its own (Dedicated_Sram), which only the NPU addresses, they must stay in the feature-map memory."""
    fast = arch.fast_storage_mem_area
    if fast == arch.feature_map_storage_mem_area:
        return
    for role, maps in (("input", sg.inputs), ("output", sg.outputs)):
        for fm in maps:
            place = schedule.placement(fm)
            if place is not None and place.mem_area == fast:
                yield (f"subgraph {sg.name}: its {role} {feature_map_label(fm)} is placed in the NPU's own fast "
                       f"storage ({fast.name}), where the CPU cannot {'write' if role == 'input' else 'read'} it")


def verify(network: Network | NpuSubgraph, arch: PricedArchitecture, schedule: Schedule,
           evaluation: Evaluation | None = None, limit: int | None = None, addresses: bool = True) -> list[str]:
    """Every way ``schedule`` is invalid for ``network``; empty when it is valid.

    Checked: every pass has its choices; stripes, weight slices and buffers agree with the op; cascades are runs
    of consecutive passes each reading the previous one's OFM, with IFM stripes covering what their OFM stripes
    read and rolling buffers holding both stripes around them; and fast storage (feature maps the schedule puts
    there, rolling and weight buffers) never exceeds ``limit`` (default: the architecture's arena cache size) —
    every subgraph's first step above it is reported; where the use fits at every step, the buffers must also
    fit at addresses (``allocation``: fragmentation can make the address space larger than the peak), unless
    ``addresses`` is False. With fast storage of its own (Dedicated_Sram) no subgraph input or output is there.
    """
    problems: list[str] = []
    for sg in subgraphs_of(network):
        for op in sg.ops:
            if not schedule.has_op(op.index):
                problems.append(f"op {op.index} ({op.name}): no schedule entry")
                continue
            op_sched = schedule.op(op.index)
            if op_sched.block_config is None:
                problems.append(f"op {op.index} ({op.name}): no block config")
                continue
            problems.extend(_stripe_problems(op, op_sched))
            problems.extend(_weight_problems(arch, op, op_sched))
            depth = op_sched.slack_ofm_depth
            if depth is not None and not 0 < depth <= op_sched.ofm_stripe.depth:
                problems.append(f"op {op.index} ({op.name}): slack depth {depth} is outside its OFM stripe depth "
                                f"{op_sched.ofm_stripe.depth}")
        problems.extend(_cascade_problems(sg, schedule))
        problems.extend(_boundary_problems(sg, arch, schedule))
        problems.extend(_flash_problems(sg, schedule))
    evaluation = evaluation if evaluation is not None else evaluate(network, arch, schedule)
    budget = staging_limit(arch) if limit is None else int(limit)
    for memory in evaluation.memory:
        over = [t for t, used in enumerate(memory.usage) if used > budget]
        if over:
            t = over[0]
            problems.append(f"subgraph {memory.name}: fast storage use {memory.usage[t]} bytes at step {t} "
                            f"exceeds the limit of {budget} bytes")
    if addresses and not problems:
        allocation = allocate_ranges(fast_storage_ranges(evaluation), target_bytes=budget)
        if allocation.size_bytes > budget:
            problems.append(allocation_problem(allocation, budget))
    return problems


def allocation_problem(allocation: Allocation, budget: int) -> str:
    """The line that says an allocation does not fit, by how much and why (fragmentation above the peak)."""
    return (f"fast storage allocation needs addresses up to {allocation.size_bytes} bytes, "
            f"{allocation.size_bytes - budget} bytes over the limit of {budget} bytes (live peak "
            f"{allocation.live_peak_bytes} bytes at one step)")
