"""Vela's own scheduling heuristic (5.2.0, legacy core), as a solver producing a ``Schedule``.

For every NPU subgraph it goes through the steps Vela takes, with the same numbers:

1. the *max* template: every pass whole, with its block config; buffering its weights gives ``MAX_BUFFERED``;
2. the *min* schedule: every pass striped to the smallest stripe its consumer can use, then grouped into cascades
   (``npusched.schedule.cascades``) against the staging limit (under ``--optimise Size`` against the largest set of
   whole feature maps any one pass needs, after which the limit becomes the min schedule's peak);
3. if ``MAX_BUFFERED`` fits the limit (shared fast storage only) it is the answer; otherwise each cascade of the
   min schedule is re-striped: stripe heights of its last pass are tried in increasing order while the cascades
   rebuilt for them still fit and do not split further, weights buffered first; the result is buffered again as
   ``MIN_BUFFERED``;
4. intermediate feature maps are placed in fast storage (``npusched.solvers.fast_storage``); when some had to be
   evicted, optimising for performance retries the weight buffering with smaller buffers and keeps the retry only
   if it is faster overall and spends less time on DRAM.

The scheduler keeps its working state (per-pass choices of each candidate, the residence of each feature map) in
plain values it rebuilds rather than edits, and converts the winner into a ``Schedule`` at the end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from npusched.errors import ScheduleError, StagingLimitError
from npusched.ir import FeatureMap, MemArea, NpuBlockType, Shape4D, TensorFormat
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.cascades import (
    CascadeInfo,
    SchedOp,
    StripeCost,
    WeightBufferSpec,
    build_cascades,
    cascadable_kind,
    schedule_memory_estimate,
)
from npusched.schedule.evaluator import (
    TensorUse,
    evaluate,
    staging_limit,
    subgraphs_of,
    tensor_use,
)
from npusched.schedule.peak import explain_peak
from npusched.schedule.pricing import PriceInputs, price_inputs
from npusched.schedule.rules import (
    cascade_forces_even,
    ifm_stripes,
    minimal_stripe_height,
    pricing_weight_stream,
    producer_stripe_height,
    weights_need_dma,
)
from npusched.schedule.schedule import EncodedWeightsRef, OpSchedule, Schedule, TensorPlacement, WeightBuffering
from npusched.solvers.fast_storage import (
    FastStorageResult,
    Residence,
    Snapshot,
    SubgraphFacts,
    fusable_ifm,
    live_ranges,
    use_fast_storage,
)
from npusched.solvers.max_schedule import vela_tensor_placements
from npusched.target import performance as perf
from npusched.target import weights as wts
from npusched.target.arch import OptimisationStrategy
from npusched.target.block_config import BlockConfig, find_block_config_for_op
from npusched.target.estimators import PricedArchitecture

# Vela buffers the max schedule against an effectively unlimited budget.
UNLIMITED = 1 << 32


@dataclass(frozen=True)
class SubgraphResult:
    """The schedule Vela settles on for one subgraph, in the scheduler's own terms."""

    name: str
    label: str
    sched_ops: tuple[SchedOp, ...]
    costs: dict[int, StripeCost]
    cascades: dict[int, CascadeInfo]
    where: dict[FeatureMap, Residence]
    sram_limit: int
    snapshot: Snapshot
    peak: int = 0
    fits: bool = True
    total_cycles: float = 0.0
    dram_cycles: float = 0.0
    notes: tuple[str, ...] = ()


@dataclass
class _Totals:
    """Network cycle totals of the subgraphs scheduled so far (Vela compares against them)."""

    total: float = 0.0
    dram: float = 0.0


@dataclass(frozen=True)
class _Context:
    """Everything fixed while one subgraph is scheduled."""

    arch: PricedArchitecture
    facts: SubgraphFacts
    spilling: bool
    limit: int

    @property
    def ops(self) -> tuple[SchedOp, ...]:
        return self.facts.sched_ops


# --------------------------------------------------------------------------------------------------------------
# The scheduler's view of a subgraph


def sched_ops_of(sg: NpuSubgraph, use: TensorUse, formats: Mapping[FeatureMap, TensorFormat],
                 held_operands: bool = False, joins: bool = False) -> tuple[SchedOp, ...]:
    """Each pass of ``sg`` with the facts Vela's scheduler derives from the graph (which operands must be whole,
    who reads the OFM, whether the OFM may overwrite the IFM); ``held_operands`` lets MULs with a second feature-map
    operand (a gate) cascade, ``joins`` residual ADDs and SUBs too (``cascades.elementwise_cascadable``), which
    Vela's rules do not."""
    inputs = set(sg.inputs)
    outputs = set(sg.outputs)
    ops = list(sg.ops)
    readers: dict[FeatureMap, list[int]] = {}
    for pos, op in enumerate(ops):
        for access in (op.ifm, op.ifm2):
            if access is not None and not access.tensor.is_const:
                readers.setdefault(access.tensor, []).append(pos)

    def fmt(fm: FeatureMap) -> TensorFormat:
        return formats.get(fm, TensorFormat.NHWC)

    result = []
    for pos, op in enumerate(ops):
        ifm, ofm = op.ifm.tensor, op.ofm.tensor
        ifm2 = op.ifm2.tensor if op.ifm2 is not None else None
        # Read more than once: whole, unless with joins every reader is a pass of the subgraph (whether the later
        # ones may read it lagged is the cascade's to check: ``rules.may_cascade``, ``rules.reads_lagged``).
        readers_here = len(readers.get(ofm, ()))
        read_twice = use.consumer_count(ofm) > 1 and not (joins and use.consumer_count(ofm) == readers_here)
        full_ofm = (ofm in outputs or fmt(ofm) == TensorFormat.NHWC
                    or op.attr("memory_function") == "ConcatSliceWrite" or read_twice)
        result.append(SchedOp(
            pos=pos,
            op=op,
            ifm_format=fmt(ifm),
            ifm2_format=fmt(ifm2) if ifm2 is not None else None,
            ofm_format=fmt(ofm),
            requires_full_ifm=ifm in inputs or fmt(ifm) == TensorFormat.NHWC,
            requires_full_ifm2=ifm2 is not None and (ifm2 in inputs or fmt(ifm2) == TensorFormat.NHWC),
            requires_full_ofm=full_ofm,
            dependants=tuple(readers.get(ofm, ())),
            ifm_consumers=len(readers.get(ifm, ())),
            ofm_reuses_ifm=fusable_ifm(op, use, formats) is not None,
            binary_elementwise=op.npu_block_type == NpuBlockType.ElementWise and op.ifm2 is not None,
            cascadable_kind=cascadable_kind(op, held_operands, joins),
        ))
    return tuple(result)


def min_memory_requirement(sched_ops: Sequence[SchedOp]) -> int:
    """The most fast storage any single pass needs for the operands it must hold whole (Vela's guide for
    ``--optimise Size``)."""
    need = 0
    for sop in sched_ops:
        op_need = 0
        if sop.requires_full_ifm:
            op_need += sop.ifm_bytes
        if sop.requires_full_ifm2:
            op_need += sop.ifm2_bytes
        if sop.requires_full_ofm:
            op_need += sop.ofm_bytes
        need = max(need, op_need)
    return need


# --------------------------------------------------------------------------------------------------------------
# Pricing helpers (the scheduler's estimates, with feature maps where they currently are)


def _area(ctx: _Context, where: Mapping[FeatureMap, Residence], fm: FeatureMap) -> MemArea:
    if fm.is_const:
        return ctx.arch.permanent_storage_mem_area
    res = where.get(fm)
    return res.mem_area if res is not None else ctx.facts.default_area


def _price_inputs(ctx: _Context, sop: SchedOp, config: BlockConfig, where: Mapping[FeatureMap, Residence],
                  ofm_depth: int | None = None, const_area: MemArea | None = None) -> PriceInputs:
    """The pass's price inputs with its feature maps where the scheduler has them now."""
    op = sop.op
    return price_inputs(
        ctx.arch, op, config, ofm_depth=ofm_depth,
        ifm=TensorPlacement(_area(ctx, where, op.ifm.tensor), sop.ifm_format),
        ofm=TensorPlacement(_area(ctx, where, op.ofm.tensor), sop.ofm_format),
        ifm2=(TensorPlacement(_area(ctx, where, op.ifm2.tensor), sop.ifm2_format or TensorFormat.NHWC)
              if op.ifm2 is not None else None),
        const_area=const_area or ctx.arch.fast_storage_mem_area,
    )


def _op_cycles(ctx: _Context, sop: SchedOp, config: BlockConfig, where: Mapping[FeatureMap, Residence],
               ofm_depth: int | None = None) -> float:
    query = _price_inputs(ctx, sop, config, where, ofm_depth).query
    return perf.measure_cycle_cost(ctx.arch, sop.op.op_type, sop.op.activation, query).op_cycles


def _element_access(ctx: _Context, costs: Mapping[int, StripeCost]):
    def access(sop: SchedOp, where: Mapping[FeatureMap, Residence]) -> tuple[float, float, float]:
        # Vela scores the OFM written at the whole tensor's depth: a concatenation slice counts as the whole.
        query = _price_inputs(ctx, sop, costs[sop.pos].block_config, where, ofm_depth=sop.ofm_shape.depth).query
        result = perf.measure_element_access(ctx.arch, query)
        return float(result.ifm_read[0]), float(result.ifm_read[1]), float(result.ofm_write)
    return access


def _encode(ctx: _Context, sop: SchedOp, config: BlockConfig, slices: tuple[int, ...]) -> wts.EncodedWeights:
    return wts.encode_op_weights(ctx.arch, sop.op, config.ofm_block.depth, slices)


# --------------------------------------------------------------------------------------------------------------
# Candidate schedules


def _stripe_cost(ctx: _Context, sop: SchedOp, stripe: Shape4D, cache: dict) -> StripeCost:
    """The pass producing ``stripe`` per step: its IFM stripes, block config, full-depth weights and compute
    estimate (Vela's ``create_scheduler_info`` plus the cycle estimate)."""
    key = (sop.pos, stripe)
    if key in cache:
        return cache[key]
    op = sop.op
    ifm_stripe, ifm2_stripe = ifm_stripes(op, stripe)
    config = find_block_config_for_op(ctx.arch, op, stripe, ifm_stripe, ifm2_stripe)
    if config is None:
        raise ScheduleError(f"no block config fits op {op.index} ({op.name}) with OFM stripe {stripe}")
    encoded = _encode(ctx, sop, config, (0, sop.ofm_shape.depth)) if op.weights is not None else None
    cost = StripeCost(
        block_config=config,
        stripe_input=ifm_stripe,
        stripe_input2=ifm2_stripe,
        stripe=stripe,
        op_cycles=_op_cycles(ctx, sop, config, {}, sop.ofm_shape.depth),  # whole depth, as Vela estimates
        encoded=encoded,
        depth_slices=(0, stripe.depth),
    )
    cache[key] = cost
    return cost


def _min_schedule(ctx: _Context, cache: dict) -> dict[int, StripeCost]:
    """Every pass striped to the smallest height the next pass in execution order steps by."""
    costs: dict[int, StripeCost] = {}
    after = None
    for sop in reversed(ctx.ops):
        height = minimal_stripe_height(sop.op, after.op if after is not None else None)
        costs[sop.pos] = _stripe_cost(ctx, sop, sop.ofm_shape.with_height(height), cache)
        after = sop
    return costs


def _striped(ctx: _Context, final_stripe: Shape4D, ref: Mapping[int, StripeCost], cache: dict
             ) -> dict[int, StripeCost]:
    """A new striping of the passes in ``ref``, derived backwards from the last pass's ``final_stripe``.

    Weight buffers of ``ref`` are carried over, sized for the new full-depth encoding.
    """
    costs: dict[int, StripeCost] = {}
    stripe = final_stripe
    for sop in reversed(ctx.ops):
        if sop.pos not in ref:
            continue
        cost = _stripe_cost(ctx, sop, stripe, cache)
        if ref[sop.pos].buffers:
            sizes = cost.encoded.double_buffer_sizes
            cost = replace(cost, buffers=tuple(WeightBufferSpec(sizes[i], b.double)
                                               for i, b in enumerate(ref[sop.pos].buffers)))
        costs[sop.pos] = cost
        cascade = ref[sop.pos].cascade
        force_even = cascade_forces_even([other.op for other in ctx.ops
                                          if other.pos in ref and ref[other.pos].cascade == cascade])
        stripe = sop.ifm_shape.with_height(producer_stripe_height(sop.op, stripe.height, force_even))
    return costs


# --------------------------------------------------------------------------------------------------------------
# Weight buffering


def _buffered(ctx: _Context, ref: Mapping[int, StripeCost], snap: Snapshot, limit: int,
              where: Mapping[FeatureMap, Residence], evicted_sizes: Mapping[int, int] | None = None
              ) -> dict[int, StripeCost]:
    """Vela's ``propose_schedule_buffering``: pass by pass, buffer the weights in the fast storage left over at
    the pass's step, prefetching under the previous pass where its slack allows."""
    usage = list(snap.usage)
    out: dict[int, StripeCost] = {}
    prev: StripeCost | None = None
    for sop in ctx.ops:
        if sop.pos not in ref:
            continue
        base = ref[sop.pos]
        t = snap.time_index[sop.pos]
        used = usage[t] if t < len(usage) else 0
        cost = replace(base, slack_cycles=base.op_cycles, slack_depth=None, slack_memory=limit - used)
        if sop.op.weights is not None:
            buffer_limit = cost.slack_memory
            evicted = (evicted_sizes or {}).get(sop.pos, 0)
            if evicted and buffer_limit / evicted >= 1.5:
                buffer_limit -= evicted
            cost = _buffer_weights(ctx, sop, cost, base, prev, buffer_limit, usage, t, where)
        out[sop.pos] = cost
        prev = cost
    return out


def _buffer_weights(ctx: _Context, sop: SchedOp, cost: StripeCost, base: StripeCost, prev: StripeCost | None,
                    buffer_limit: int, usage: list[int], t: int, where: Mapping[FeatureMap, Residence]
                    ) -> StripeCost:
    config = cost.block_config
    depth = base.stripe.depth
    full_slices = (0, depth)
    full = _encode(ctx, sop, config, full_slices)
    if sop.op.op_type == "FullyConnected" or not weights_need_dma(ctx.arch, sop.op):
        return replace(cost, encoded=full, depth_slices=full_slices)
    if base.cascade:
        # A cascaded pass keeps its whole weights in fast storage for the cascade's step.
        usage[t] += full.total_bytes

    def transfer(size: int) -> float:
        return perf.measure_mem2mem_cycles(ctx.arch, ctx.arch.permanent_storage_mem_area,
                                           ctx.arch.fast_storage_mem_area, size)

    depths_priced: list[int] = []

    def priced(d: int) -> float:
        depths_priced.append(d)
        return _op_cycles(ctx, sop, config, where, d)

    plan = wts.plan_weight_buffering(
        lambda slices: _encode(ctx, sop, config, slices), depth, config.ofm_block.depth,
        needs_dma=True, is_fully_connected=False, cascaded=bool(base.cascade),
        buffer_limit_bytes=buffer_limit,
        slack_cycles=prev.slack_cycles if prev is not None else 0,
        slack_memory=prev.slack_memory if prev is not None else 0,
        transfer_cycles=transfer,
        op_cycles=priced,
    )
    changes: dict[str, Any] = {}
    if plan.full_transfer_cycles is not None:
        changes["full_transfer_cycles"] = plan.full_transfer_cycles
    if plan.tail_cycles is not None:
        # The planner prices the last planned slice last: its depth is what the schedule records.
        changes["slack_cycles"] = plan.tail_cycles
        changes["slack_depth"] = depths_priced[-1]
    if plan.buffered:
        changes.update(
            encoded=plan.encoded, depth_slices=tuple(plan.depth_slices), pre_buffer=bool(plan.pre_buffer),
            buffers=tuple(WeightBufferSpec(size, plan.double_buffered) for size in plan.buffer_sizes),
            slack_memory=cost.slack_memory - plan.slack_memory_used,
        )
    else:
        # Vela reads the full-depth weights in place but leaves any buffers the reference had.
        changes.update(encoded=full, depth_slices=full_slices)
    return replace(cost, **changes)


# --------------------------------------------------------------------------------------------------------------
# Cascades and sub-schedules


def _non_local_for_min(ctx: _Context, costs: Mapping[int, StripeCost], snap: Snapshot) -> dict[int, int]:
    """Fast storage live at each pass of the min schedule besides the pass's own IFM and OFM."""
    result = {}
    for sop in ctx.ops:
        if ctx.spilling:
            own = 0
        else:
            ifm = 0 if sop.ifm.is_const else sop.ifm_bytes
            own = ifm + (0 if sop.ofm_reuses_ifm else sop.ofm_bytes)
        result[sop.pos] = snap.at(sop.pos) - own
    return result


@dataclass(frozen=True)
class _Restriped:
    costs: dict[int, StripeCost]
    cascades: dict[int, CascadeInfo]


def _optimise_cascade(ctx: _Context, info: CascadeInfo, costs: Mapping[int, StripeCost], snap: Snapshot,
                      template: Mapping[int, StripeCost], limit: int, cache: dict) -> _Restriped | None:
    """Re-stripe one cascade of the min schedule (Vela's ``optimize_sub_schedule``): taller stripes of its last
    pass are tried until the rebuilt cascades no longer fit or split into more cascades."""
    positions = range(info.start, info.end + 1)
    sub_ops = [ctx.ops[p] for p in positions]
    sub = {p: costs[p] for p in positions}
    parallel = snap.usage[snap.time_index[info.start]] - info.mem_usage
    first = sub_ops[0]
    persistent_ifm = first.ifm_bytes if not ctx.spilling and first.ifm_consumers > 1 else 0
    non_local = {p: parallel + (persistent_ifm if p != info.start else 0) for p in positions}

    buffered = _buffered(ctx, sub, snap, ctx.limit, {})
    last = sub_ops[-1]
    best: _Restriped | None = None
    most_cascades = 0
    for i, height in enumerate(range(sub[last.pos].stripe.height + 1, last.ofm_shape.height // 2 + 1)):
        proposal = _striped(ctx, last.ofm_shape.with_height(height), buffered, cache)
        chosen, cascades = build_cascades(sub_ops, ctx.ops, proposal, template, limit, ctx.spilling, non_local)
        if i == 0:
            most_cascades = len(cascades)
        usage = schedule_memory_estimate(sub_ops, chosen, cascades, non_local)
        if usage <= limit and len(cascades) <= most_cascades:
            best = _Restriped(chosen, cascades)
            if not cascades:
                break
        else:
            break
    return best


# --------------------------------------------------------------------------------------------------------------
# Pricing a finished subgraph (Vela's network performance pass, from the scheduler's own state)


def _price(ctx: _Context, costs: Mapping[int, StripeCost], where: Mapping[FeatureMap, Residence]
           ) -> tuple[float, float]:
    """(total cycles, DRAM access cycles) of the subgraph under ``costs``, priced from the scheduler's own state
    (slack and weight-transfer cycles as Vela recorded them while buffering)."""
    arch = ctx.arch
    total = 0.0
    dram = 0.0
    prev_slack = 0.0
    for sop in ctx.ops:
        cost = costs[sop.pos]
        op = sop.op
        stream = None
        const_area = arch.permanent_storage_mem_area
        if cost.encoded is not None:
            kind = perf.BufferKind.NONE
            if cost.buffers:
                kind = perf.BufferKind.DOUBLE if cost.buffers[0].double else perf.BufferKind.SINGLE
                const_area = arch.fast_storage_mem_area
            stream = pricing_weight_stream(arch, op, cost.encoded, kind, cost.full_transfer_cycles)
        inputs = _price_inputs(ctx, sop, cost.block_config, where, const_area=const_area)
        result = perf.estimate_full_op_performance(
            arch, op.op_type, op.activation, inputs.query, weights=stream, prev_slack_cycles=prev_slack,
            slack_buffering_cycles=cost.slack_cycles, lut=inputs.lut, memcpy=inputs.memcpy,
        )
        total += result.total_cycles
        dram += result.access_cycles.get(MemArea.Dram, 0.0)
        prev_slack = cost.slack_cycles
    return total, dram


# --------------------------------------------------------------------------------------------------------------
# One subgraph, start to finish


def _apply_rolling_buffers(ctx: _Context, cascades: Mapping[int, CascadeInfo], where: Mapping[FeatureMap, Residence]
                           ) -> dict[FeatureMap, Residence]:
    """The IFM of every cascaded pass after the first becomes a rolling buffer in fast storage."""
    moved = dict(where)
    for info in cascades.values():
        for pos in info.buffers:
            moved[ctx.ops[pos].ifm] = Residence(ctx.arch.fast_storage_mem_area, True)
    return moved


def schedule_subgraph(arch: PricedArchitecture, sg: NpuSubgraph, use: TensorUse,
                      formats: Mapping[FeatureMap, TensorFormat], optimise: OptimisationStrategy,
                      earlier: _Totals | None = None) -> SubgraphResult:
    """Run Vela's scheduler on one NPU subgraph. ``earlier`` holds the cycle totals of the subgraphs scheduled
    before it (Vela judges a weight-buffering retry on network totals)."""
    earlier = earlier or _Totals()
    sched_ops = sched_ops_of(sg, use, formats)
    variable_writes = frozenset(s.pos for s in sched_ops if s.op.attr("memory_function") == "VariableTensorWrite")
    facts = SubgraphFacts(sched_ops=sched_ops, outputs=sg.outputs, use=use,
                          formats=formats, fast_area=arch.fast_storage_mem_area,
                          default_area=arch.feature_map_storage_mem_area, variable_writes=variable_writes)
    size_strategy = optimise is OptimisationStrategy.SIZE
    ctx = _Context(arch=arch, facts=facts, spilling=bool(arch.is_spilling_enabled()), limit=staging_limit(arch))
    cache: dict = {}
    nowhere: dict[FeatureMap, Residence] = {}

    template = {sop.pos: _stripe_cost(ctx, sop, sop.ofm_shape, cache) for sop in ctx.ops}
    snap_template = live_ranges(facts, template, {}, nowhere)
    max_buffered = _buffered(ctx, template, snap_template, UNLIMITED, nowhere)
    max_peak = live_ranges(facts, max_buffered, {}, nowhere).peak

    min_costs = _min_schedule(ctx, cache)
    guide = min_memory_requirement(sched_ops) if size_strategy else ctx.limit
    non_local = _non_local_for_min(ctx, min_costs, live_ranges(facts, min_costs, {}, nowhere))
    min_costs, min_cascades = build_cascades(ctx.ops, ctx.ops, min_costs, template, guide, ctx.spilling, non_local)
    snap_min = live_ranges(facts, min_costs, min_cascades, nowhere)
    if size_strategy:
        ctx = replace(ctx, limit=snap_min.peak)
    limit = ctx.limit

    notes: list[str] = []
    if max_peak < limit and not ctx.spilling:
        label, costs, cascades = "MAX_BUFFERED", max_buffered, {}
        unbuffered = min_costs, min_cascades
    else:
        costs = dict(min_costs)
        cascades = dict(min_cascades)
        for info in list(min_cascades.values()):
            better = _optimise_cascade(ctx, info, costs, snap_min, template, limit, cache)
            if better is not None:
                del cascades[info.end]
                costs.update(better.costs)
                cascades.update(better.cascades)
        unbuffered = costs, cascades
        costs = _buffered(ctx, costs, live_ranges(facts, costs, cascades, nowhere), limit, nowhere)
        label = "MIN_BUFFERED"

    snapshot = live_ranges(facts, costs, cascades, nowhere)
    where = _apply_rolling_buffers(ctx, cascades, nowhere)
    placed = use_fast_storage(facts, costs, cascades, where, {}, limit, _element_access(ctx, costs))
    if not size_strategy and placed.evicted:
        costs, placed, snapshot, retried = _retry_smaller_buffers(ctx, costs, cascades, placed, unbuffered, earlier)
        if retried:
            notes.append("weight buffers shrunk to keep feature maps in fast storage")
    total, dram = _price(ctx, costs, placed.where)
    return SubgraphResult(name=sg.name, label=label, sched_ops=sched_ops, costs=costs,
                          cascades=cascades, where=placed.where, sram_limit=limit, snapshot=snapshot,
                          peak=placed.peak, fits=placed.fits, total_cycles=total, dram_cycles=dram,
                          notes=tuple(notes))


def _retry_smaller_buffers(ctx: _Context, costs: dict[int, StripeCost], cascades: dict[int, CascadeInfo],
                           placed: FastStorageResult, unbuffered: tuple[dict, dict], earlier: _Totals
                           ) -> tuple[dict[int, StripeCost], FastStorageResult, Snapshot, bool]:
    """Vela's ``optimize_weight_buffering_size``: shrink the weight buffers of passes whose buffers overlap an
    evicted feature map, re-place the feature maps, and keep the result only if the network gets faster and
    spends less time on DRAM (both rounded to hundredths, as Vela compares them)."""
    facts = ctx.facts
    total0, dram0 = _price(ctx, costs, placed.where)
    total0 += earlier.total
    dram0 += earlier.dram
    restored = dict(placed.where)
    restored.update(placed.scratched)
    default_snap = live_ranges(facts, costs, cascades, restored)
    shrink: dict[int, int] = {}
    pos_of = {sop.op.index: sop.pos for sop in ctx.ops}
    weight_ranges = [(pos_of[r.weight_of], r) for r in default_snap.ranges if r.weight_of is not None]
    for evicted in placed.evicted:
        for owner, wr in weight_ranges:
            if evicted.overlaps(wr):
                shrink[owner] = shrink.get(owner, 0) + evicted.size
    base_costs, base_cascades = unbuffered
    new_costs = _buffered(ctx, base_costs, live_ranges(facts, base_costs, base_cascades, restored), ctx.limit,
                          restored, shrink)
    where = _apply_rolling_buffers(ctx, base_cascades, restored)
    retry = use_fast_storage(facts, new_costs, base_cascades, where, placed.scratched, ctx.limit,
                             _element_access(ctx, new_costs))
    total1, dram1 = _price(ctx, new_costs, retry.where)
    total1 += earlier.total
    dram1 += earlier.dram
    gain_total = round((total0 - total1) / total0, 2) if total0 != 0 else 0
    gain_dram = round((dram0 - dram1) / dram0, 2) if dram0 != 0 else 0
    if gain_total >= 0 and gain_dram > 0:
        return new_costs, retry, live_ranges(facts, new_costs, base_cascades, restored), True
    restored = dict(retry.where)
    restored.update(retry.scratched)
    where = _apply_rolling_buffers(ctx, cascades, restored)
    again = use_fast_storage(facts, costs, cascades, where, retry.scratched, ctx.limit, _element_access(ctx, costs))
    return costs, again, live_ranges(facts, costs, cascades, restored), False


# --------------------------------------------------------------------------------------------------------------
# Public entry point


def _op_schedule(sop: SchedOp, cost: StripeCost, cascade_op_index: int | None) -> OpSchedule:
    buffering = WeightBuffering()
    if cost.buffers:
        kind = perf.BufferKind.DOUBLE if cost.buffers[0].double else perf.BufferKind.SINGLE
        buffering = WeightBuffering(kind, tuple(cost.depth_slices), tuple(b.size for b in cost.buffers),
                                    cost.pre_buffer)
    encoded = None
    if cost.encoded is not None:
        encoded = EncodedWeightsRef.of(cost.encoded, cost.block_config.ofm_block.depth)
    return OpSchedule(op_index=sop.op.index, block_config=cost.block_config, ofm_stripe=cost.stripe,
                      ifm_stripe=cost.stripe_input, ifm2_stripe=cost.stripe_input2, cascade=cascade_op_index,
                      weight_buffering=buffering, encoded_weights=encoded, slack_ofm_depth=cost.slack_depth)


def _acceptable_schedule(arch: PricedArchitecture, sg: NpuSubgraph, use: TensorUse,
                         formats: Mapping[FeatureMap, TensorFormat], optimise: OptimisationStrategy,
                         earlier: _Totals) -> SubgraphResult:
    """Vela's schedule of one subgraph, or where Vela would fail, the other strategy's when that one fits.

    Vela fails when the feature maps it must keep in fast storage exceed the staging limit ("Allocation exceeds
    staging limit"), and, with dedicated fast storage, when a size-optimised schedule peaks above the cache
    size (its staging limit is then the min schedule's peak, not the cache). Under shared storage a schedule
    that passes that check is emitted at any peak: Vela then only warns that the arena is exceeded.
    """
    limit = staging_limit(arch)
    size = optimise is OptimisationStrategy.SIZE
    result = schedule_subgraph(arch, sg, use, formats, optimise, earlier)
    if result.fits and (result.peak <= limit or not arch.is_spilling_enabled()):
        return result
    other = schedule_subgraph(arch, sg, use, formats,
                              OptimisationStrategy.PERFORMANCE if size else OptimisationStrategy.SIZE, earlier)
    if not (other.fits and other.peak <= limit):
        smaller = result if result.peak <= other.peak else other
        schedule = _as_schedule((smaller,), sg, arch)
        evaluation = evaluate(sg, arch, schedule)
        why = explain_peak(sg, arch, schedule, evaluation)
        if evaluation.peak_fast_storage > smaller.peak:
            # Shared storage: Vela checks what it stages against the limit, then runs over it as over an arena.
            raise StagingLimitError(f"no schedule fits {limit} bytes of fast storage; Vela legacy's scheduler needs "
                                    f"{smaller.peak} bytes staged there, and from that limit on schedules the "
                                    f"network over it as over an arena: {why}", needed_bytes=smaller.peak)
        raise StagingLimitError(f"no schedule fits {limit} bytes of fast storage; the smallest that fits needs "
                                f"{smaller.peak} bytes: {why}", needed_bytes=smaller.peak)
    note = (f"Vela's {'size' if size else 'performance'}-optimised schedule needs {result.peak} bytes of fast "
            f"storage, more than the {limit} available; the {'performance' if size else 'size'}-optimised one fits")
    return replace(other, notes=(*other.notes, note))


def schedule_subgraphs(network_or_subgraph: Network | NpuSubgraph, arch: PricedArchitecture,
                       optimise: OptimisationStrategy | str | None = None) -> tuple[SubgraphResult, ...]:
    """Vela's scheduler run on every NPU subgraph in order, in the scheduler's own terms."""
    strategy = OptimisationStrategy.parse(optimise) if optimise else arch.optimise
    use = tensor_use(network_or_subgraph)
    placements = vela_tensor_placements(network_or_subgraph, arch, use)
    formats = {fm: place.format for fm, place in placements}
    totals = _Totals()
    results = []
    for sg in subgraphs_of(network_or_subgraph):
        result = _acceptable_schedule(arch, sg, use, formats, strategy, totals)
        totals.total += result.total_cycles
        totals.dram += result.dram_cycles
        results.append(result)
    return tuple(results)


def heuristic_schedule(network_or_subgraph: Network | NpuSubgraph, arch: PricedArchitecture,
                       optimise: OptimisationStrategy | str | None = None) -> Schedule:
    """The schedule Vela 5.2.0's legacy scheduler picks for ``network_or_subgraph`` (a Network or one
    NpuSubgraph) under ``arch``; ``optimise`` is "Performance" or "Size" (default: the architecture's).

    Cascades are numbered by the op index of their last pass. Raises ScheduleError where Vela stops with
    "Allocation exceeds staging limit".
    """
    return _as_schedule(schedule_subgraphs(network_or_subgraph, arch, optimise), network_or_subgraph, arch)


def _as_schedule(results: Sequence[SubgraphResult], network_or_subgraph: Network | NpuSubgraph,
                 arch: PricedArchitecture) -> Schedule:
    """The scheduler's per-subgraph results as one Schedule (tensors not in a result keep Vela's placement)."""
    use = tensor_use(network_or_subgraph)
    placements = vela_tensor_placements(network_or_subgraph, arch, use)
    ops: list[OpSchedule] = []
    where: dict[FeatureMap, Residence] = {}
    notes: list[str] = []
    for result in results:
        for sop in result.sched_ops:
            cost = result.costs[sop.pos]
            cascade = result.sched_ops[cost.cascade].op.index if cost.cascade else None
            ops.append(_op_schedule(sop, cost, cascade))
        where.update(result.where)
        notes.append(f"{result.name}: {result.label}, {len(result.cascades)} cascades, "
                     f"staging limit {result.sram_limit} bytes")
        notes.extend(f"{result.name}: {n}" for n in result.notes)
    tensors = tuple((fm, TensorPlacement(where[fm].mem_area, place.format) if fm in where else place)
                    for fm, place in placements)
    labels = {r.label for r in results}
    label = labels.pop() if len(labels) == 1 else "MIXED"
    return Schedule(ops=tuple(sorted(ops, key=lambda o: o.op_index)), tensors=tensors, label=label,
                    status="fits", solver="heuristic", notes=tuple(notes))
