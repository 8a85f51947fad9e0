"""The 2020 dynamic-programming scheduler (Vela's Pareto-frontier search), on our schedule and cost model.

Vela's 2020 scheduler built, for every pass, a frontier of partial schedules that are not worse than one another
in every figure (bandwidth-weighted cycles, peak SRAM, SRAM of the open strategy), pruned to a few candidates,
and grew it pass by pass with two strategies: *weight streaming* (the pass runs whole, its weights streamed
through fast-storage buffers) and *IFM streaming* (the pass is the end of a cascade of passes that run stripe
by stripe, each reading its predecessor's output from a rolling buffer). Candidates over the SRAM limit were
dropped; at the end the best by a weighted metric was kept.

This module keeps that search and replaces what it measures:

* the passes of an NPU subgraph are taken in execution order, and a strategy covers a run of consecutive passes
  (one pass, or a cascade of up to ``max_cascade_length``); the frontier lives at the boundaries between
  passes. Our memory model puts a cascade at one step of the execution order, so only consecutive passes can
  cascade, which makes the 2020 search over DAG predecessors a search over this order;
* a pass's options are our block configs (``npusched.schedule.options.price_options``) times weight-buffering
  choices (read in place, one buffer, double buffers over 2 or 4 depth slices, or Vela's own slicing); a
  cascade is striped backwards from the OFM stripe height of its last pass as Vela's legacy scheduler does, and
  its rolling buffers are sized by ``npusched.schedule.cascades.rolling_buffer_shape``;
* cycles come from ``npusched.schedule.evaluator.price_op`` (the evaluator's own price, including the previous
  pass's slack under which weights are prefetched), and fast-storage use is computed step by step from the
  subgraph's ``MemoryLayout`` and ``weight_buffer_bytes``, which the evaluator's walk reads too, so a candidate
  that the DP keeps under the limit passes ``verify`` (``DpSubgraph.peak_bytes`` is the evaluator's peak).

One knowingly different price: the evaluator (like Vela) leaves out the weight DMA of a cascaded pass. The DP
ranks cascaded passes with that DMA charged (``charge_cascade_weights``), so that it cascades to save memory
rather than to hide a transfer the hardware still has to make. The reported totals are the evaluator's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from npusched.errors import ScheduleError
from npusched.ir import FeatureMap, NpuOp, Shape4D, ceil_div, round_up
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.cascades import SchedOp, rolling_buffer_shape
from npusched.schedule.evaluator import (
    TensorUse,
    elementwise_reuse_source,
    evaluate,
    placement_of,
    price_op,
    scheduler_op_cycles,
    staging_limit,
    subgraphs_of,
    tensor_use,
    verify,
)
from npusched.schedule.memory_layout import memory_layout, weight_buffer_bytes
from npusched.schedule.options import drop_dominated, price_options
from npusched.schedule.rules import (
    cascade_stripes,
    ifm_stripes,
    may_cascade,
    pareto_front,
    rolling_buffer_bytes,
    storage_size,
    weights_need_dma,
)
from npusched.schedule.schedule import EncodedWeightsRef, OpSchedule, Schedule, TensorPlacement, WeightBuffering
from npusched.solvers.heuristic import sched_ops_of
from npusched.solvers.max_schedule import vela_tensor_placements
from npusched.target import performance as perf
from npusched.target import weights as wts
from npusched.target.arch import OptimisationStrategy
from npusched.target.block_config import BlockConfig
from npusched.target.estimators import PricedArchitecture

DP_LABEL = "DP"
UNLIMITED = 1 << 62
# Slack large enough to hide any transfer.
_ALL_HIDDEN = 1e18


@dataclass(frozen=True)
class DpOptions:
    """Search limits (2020 defaults where they exist).

    ``frontier_size`` is the 2020 cap on candidates kept per boundary (``pareto_max_candidates``), of which
    ``low_memory_keep`` are the smallest-memory ones (so a tight limit later on still finds a candidate that
    fits); ``configs_per_stripe`` caps the block configs tried per pass and stripe height (2020: the fattest and
    thinnest of ``block_config_limit``); ``cascade_heights`` are the OFM stripe heights tried for a cascade's last
    pass. ``place_feature_maps``: when feature maps live outside fast storage (dedicated SRAM), move those
    between passes into it afterwards, one at a time, while that is faster and fits (not part of the 2020
    search, which left them where they were; Vela 5.2.0 does move them).
    """

    frontier_size: int = 16
    low_memory_keep: int = 4
    group_frontier_size: int = 4
    configs_per_stripe: int = 3
    max_cascade_length: int = 8
    cascade_heights: tuple[int, ...] = (1, 2, 4, 8)
    use_cascading: bool = True
    charge_cascade_weights: bool = True
    place_feature_maps: bool = True


# --------------------------------------------------------------------------------------------------------------
# Values of the search


@dataclass(frozen=True)
class _Priced:
    """One pass with one block config and weight buffering, priced after a given previous pass."""

    op_sched: OpSchedule
    exposed_cycles: float  # nothing hidden under the previous pass
    hidden_cycles: float  # everything that can be hidden is
    slack: float
    buffers_all: int  # weight buffers live at the pass's step
    buffers_kept: int  # of those, live at the step after it (the one holding the last slice)
    pre_buffer: int  # weight buffer live at the step before it

    def cycles(self, prev_slack: float) -> float:
        """Cycles after a pass leaving ``prev_slack``; a buffered pass that does not pre-buffer hides nothing."""
        buffering = self.op_sched.weight_buffering
        hidden = prev_slack if buffering.pre_buffered or not buffering.is_buffered else 0.0
        return max(self.exposed_cycles - hidden, self.hidden_cycles)


@dataclass(frozen=True)
class _GroupChoice:
    """Choices for every pass of one strategy (a pass, or a cascade), with what they add up to."""

    ops: tuple[OpSchedule, ...]
    cycles: float
    slack: float
    buffers_all: int
    buffers_kept: int
    pre_buffer: int


@dataclass(frozen=True)
class _PartialSchedule:
    """A schedule of the passes before a boundary: total cycles, peak fast storage, what stays live into the
    step after its last strategy (``tail``) and the slack its last pass leaves to the next one."""

    cycles: float
    peak: int
    tail: int
    slack: float
    group: _Group | None = None
    ops: tuple[OpSchedule, ...] = ()
    parent: _PartialSchedule | None = field(default=None, repr=False)

    def op_schedules(self, cascade_names: Sequence[int]) -> list[OpSchedule]:
        """Every pass's choices, with cascade (named by the op index of its last pass, ``cascade_names`` maps
        positions to op indices) and rolling buffer filled in."""
        out: list[OpSchedule] = []
        node: _PartialSchedule | None = self
        while node is not None:
            group = node.group
            if group is not None:
                cascade = cascade_names[group.end] if group.cascaded else None
                out.extend(replace(op, cascade=cascade, rolling_buffer=group.rolling[k])
                           for k, op in enumerate(node.ops))
            node = node.parent
        return out


@dataclass(frozen=True)
class _Group:
    """A strategy's shape: passes ``start``..``end`` (positions) with OFM stripes (full when not cascaded)."""

    start: int
    end: int
    stripes: tuple[Shape4D, ...]
    ifm_stripes: tuple[Shape4D, ...]
    ifm2_stripes: tuple[Shape4D | None, ...]
    rolling: tuple[Shape4D | None, ...]

    @property
    def cascaded(self) -> bool:
        return self.end > self.start


# --------------------------------------------------------------------------------------------------------------
# Pareto frontier


def _pareto(items: Sequence[Any], metrics: Any) -> list[Any]:
    """Items no other item beats or equals in every metric (lower is better); of equal ones the first stays."""
    if len(items) <= 1:
        return list(items)
    table = np.asarray([metrics(item) for item in items], dtype=np.float64)
    return [items[idx] for idx in pareto_front(table)]


# --------------------------------------------------------------------------------------------------------------
# The search over one subgraph


class _SubgraphSearch:
    def __init__(self, arch: PricedArchitecture, sg: NpuSubgraph, use: TensorUse, placements: Schedule, limit: int,
                 optimise: OptimisationStrategy, options: DpOptions) -> None:
        self.arch = arch
        self.sg = sg
        self.use = use
        self.base = placements
        self.limit = limit
        self.size_first = optimise is OptimisationStrategy.SIZE
        self.opts = options
        formats = {fm: place.format for fm, place in placements.tensors}
        self.sops: tuple[SchedOp, ...] = sched_ops_of(sg, use, formats)
        self.ops: tuple[NpuOp, ...] = tuple(s.op for s in self.sops)
        self.n = len(self.ops)
        self.fast = arch.fast_storage_mem_area
        self._price_cache: dict[tuple, tuple[float, float, float]] = {}
        self._static_cache: dict[tuple, list[_Priced]] = {}
        self._choice_cache: dict[tuple, list[tuple[_Priced, float]]] = {}
        self._vela_cache: dict[tuple, tuple[int, ...] | None] = {}
        self._configs_cache: dict[tuple[int, int], list[Any]] = {}
        self._pricing_schedules: dict[tuple[int, bool, bool], Schedule] = {}
        self._spanning_cache: dict[tuple[int, int], int] = {}
        self._in_fast = [(self._fast_size(op.ifm.tensor) > 0, self._fast_size(op.ofm.tensor) > 0) for op in self.ops]
        self._reuse = [elementwise_reuse_source(op, arch, placements, use) is not None for op in self.ops]
        self._layout = memory_layout(self.ops, sg.outputs, use, lambda fm: self._fast_size(fm) or None)
        self._groups = [self._groups_from(start) for start in range(self.n)]
        heights: list[set[int]] = [set() for _ in range(self.n)]
        for groups in self._groups:
            for group in groups:
                for k, stripe in enumerate(group.stripes):
                    heights[group.start + k].add(stripe.height)
        self._heights = [tuple(sorted(h)) for h in heights]

    # ---- memory -----------------------------------------------------------------------------------------------

    def _fast_size(self, fm: FeatureMap) -> int:
        """Bytes ``fm`` takes in fast storage under the base placements (0 when it lives elsewhere)."""
        if fm.is_const:
            return 0
        place = placement_of(self.arch, self.base, fm)
        if place.mem_area != self.fast:
            return 0
        return storage_size(fm, place.format)

    def _spanning(self, start: int, end: int) -> int:
        """Fast storage held by feature maps live across passes ``start``..``end`` that none of them touches."""
        key = (start, end)
        if key not in self._spanning_cache:
            self._spanning_cache[key] = self._layout.held_across(start, end)
        return self._spanning_cache[key]

    def _touched(self, group: _Group) -> int:
        """Fast storage of the feature maps the strategy's passes read or write (rolling buffers at their size)."""
        sizes: dict[Any, int] = {}
        for k, pos in enumerate(range(group.start, group.end + 1)):
            op = self.ops[pos]
            rolling = group.rolling[k]
            if rolling is not None:
                sizes[("rolling", pos)] = rolling_buffer_bytes(rolling, op.ifm.tensor.dtype.size_in_bytes)
            elif not op.ifm.tensor.is_const:
                sizes[self.use.storage_key(op.ifm.tensor)] = self._fast_size(op.ifm.tensor)
            if op.ifm2 is not None and not op.ifm2.tensor.is_const:
                sizes[self.use.storage_key(op.ifm2.tensor)] = self._fast_size(op.ifm2.tensor)
            if pos < group.end:
                continue  # the next pass's rolling buffer
            if not group.cascaded and self._reuse[pos]:
                continue  # written over its IFM
            sizes[self.use.storage_key(op.ofm.tensor)] = self._fast_size(op.ofm.tensor)
        return sum(sizes.values())

    # ---- strategies -------------------------------------------------------------------------------------------

    def _can_follow(self, pos: int) -> bool:
        """Whether pass ``pos`` may join the cascade of pass ``pos - 1`` (Vela's cascade rules)."""
        return pos > 0 and may_cascade(self.sops[pos - 1], self.sops[pos])

    def _single(self, pos: int) -> _Group:
        op = self.ops[pos]
        ifm2 = op.ifm2.shape if op.ifm2 is not None else None
        return _Group(pos, pos, (op.ofm.shape,), (op.ifm.shape,), (ifm2,), (None,))

    def _cascade(self, start: int, end: int, height: int) -> _Group | None:
        """Passes ``start``..``end`` striped backwards from ``height`` rows of the last pass's OFM, as Vela's
        legacy scheduler stripes a cascade; None when some pass would not be striped."""
        ops = self.ops[start:end + 1]
        stripes = cascade_stripes(ops, height)
        if stripes is None:
            return None
        inputs = [ifm_stripes(op, stripe) for op, stripe in zip(ops, stripes, strict=True)]
        ifms = [ifm for ifm, _ in inputs]
        ifm2s = [ifm2 for _, ifm2 in inputs]
        rolling: list[Shape4D | None] = [None]
        for k in range(1, len(stripes)):
            rolling.append(rolling_buffer_shape(stripes[k - 1], ifms[k]))
        return _Group(start, end, tuple(stripes), tuple(ifms), tuple(ifm2s), tuple(rolling))

    def _groups_from(self, start: int) -> list[_Group]:
        groups = [self._single(start)]
        if not self.opts.use_cascading:
            return groups
        end = start
        while end + 1 < self.n and end + 1 - start < self.opts.max_cascade_length and self._can_follow(end + 1):
            end += 1
            last_height = self.ops[end].ofm.shape.height
            heights = sorted({h for h in self.opts.cascade_heights if h < last_height})
            for h in heights:
                group = self._cascade(start, end, h)
                if group is not None:
                    groups.append(group)
        return groups

    # ---- pricing ----------------------------------------------------------------------------------------------

    def _configs(self, pos: int, height: int) -> list[Any]:
        """Block configs worth trying for pass ``pos`` at an OFM stripe height: the undominated ones (priced
        on their own), the fastest first, always with Vela's choice."""
        key = (pos, height)
        if key not in self._configs_cache:
            op = self.ops[pos]
            every = price_options(self.arch, op, stripe_heights=self._heights[pos])
            opts = [o for o in every if o.stripe_height == height]
            kept = sorted(drop_dominated(opts), key=lambda o: (o.total_cycles, o.weight_buffer_bytes))
            chosen = kept[: self.opts.configs_per_stripe]
            chosen += [o for o in kept if o.is_vela_choice and o not in chosen]
            self._configs_cache[key] = [o.block_config for o in chosen]
        return self._configs_cache[key]

    def _pricing_schedule(self, pos: int, ifm_rolling: bool, ofm_rolling: bool) -> Schedule:
        """Placements of one pass's operands (rolling buffers in fast storage, bricked)."""
        key = (pos, ifm_rolling, ofm_rolling)
        if key not in self._pricing_schedules:
            op = self.ops[pos]
            tensors = []
            for access, rolling in ((op.ifm, ifm_rolling), (op.ifm2, False), (op.ofm, ofm_rolling)):
                if access is None or access.tensor.is_const:
                    continue
                place = placement_of(self.arch, self.base, access.tensor)
                if rolling:
                    place = TensorPlacement(self.fast, place.format)
                tensors.append((access.tensor, place))
            self._pricing_schedules[key] = Schedule(ops=(), tensors=tuple(tensors))
        return self._pricing_schedules[key]

    def _weight_variants(self, op: NpuOp, config: BlockConfig, cascaded: bool, first_in_group: bool
                         ) -> list[tuple[WeightBuffering, wts.EncodedWeights | None]]:
        """Ways to get the pass's weights: in place, one buffer, or double buffers over 2 or 4 depth slices;
        the buffered ones with and without pre-buffering under the previous pass (first pass of a strategy
        only). A cascaded pass keeps whole weights (every stripe reads all of them)."""
        if op.weights is None:
            return [(WeightBuffering(), None)]
        depth = op.ofm.shape.depth
        block_depth = config.ofm_block.depth
        full = wts.encode_op_weights(self.arch, op, block_depth, (0, depth))
        variants: list[tuple[WeightBuffering, wts.EncodedWeights | None]] = [(WeightBuffering(), full)]
        if not weights_need_dma(self.arch, op):
            return variants
        slicings: list[tuple[int, ...]] = [(0, depth)]
        if not cascaded:
            for parts in (2, 4):
                step = round_up(ceil_div(depth, parts), wts.OFM_SPLIT_DEPTH)
                if step < depth:
                    slicings.append((*range(0, depth, step), depth))
        for slices in slicings:
            variants.extend(self._buffered(op, config, slices, first_in_group))
        return variants

    def _buffered(self, op: NpuOp, config: BlockConfig, slices: tuple[int, ...], first_in_group: bool
                  ) -> list[tuple[WeightBuffering, wts.EncodedWeights | None]]:
        encoded = wts.encode_op_weights(self.arch, op, config.ofm_block.depth, slices)
        sizes = tuple(encoded.double_buffer_sizes)
        kind = perf.BufferKind.SINGLE if len(slices) == 2 else perf.BufferKind.DOUBLE
        buffers = sizes[:1] if kind is perf.BufferKind.SINGLE else sizes
        pre_options = (True, False) if first_in_group and op is not self.ops[0] else (False,)
        return [(WeightBuffering(kind, slices, buffers, pre), encoded) for pre in pre_options]

    def _vela_slicing(self, pos: int, config: BlockConfig, prev_slack: float) -> tuple[int, ...] | None:
        """The depth slices Vela's weight buffering would choose after a pass leaving ``prev_slack`` (slices
        sized so that fetching one takes about as long as computing the one before)."""
        key = (pos, id(config), prev_slack)
        if key not in self._vela_cache:
            op = self.ops[pos]
            depth = op.ofm.shape.depth
            block_depth = config.ofm_block.depth
            base = OpSchedule(op_index=op.index, block_config=config, ofm_stripe=op.ofm.shape,
                              ifm_stripe=op.ifm.shape, ifm2_stripe=op.ifm2.shape if op.ifm2 is not None else None)
            schedule = self._pricing_schedule(pos, False, False)
            plan = wts.plan_weight_buffering(
                lambda s: wts.encode_op_weights(self.arch, op, block_depth, s), depth, block_depth,
                needs_dma=True, is_fully_connected=False, cascaded=False, buffer_limit_bytes=self.limit,
                slack_cycles=prev_slack, slack_memory=self.limit,
                transfer_cycles=lambda size: perf.measure_mem2mem_cycles(
                    self.arch, self.arch.permanent_storage_mem_area, self.fast, size),
                op_cycles=lambda d: scheduler_op_cycles(self.arch, op, base, schedule, d),
            )
            slices = tuple(plan.depth_slices) if plan.buffered and len(plan.depth_slices) > 3 else None
            self._vela_cache[key] = slices
        return self._vela_cache[key]

    def _price(self, group: _Group, k: int, config: BlockConfig, buffering: WeightBuffering,
               encoded: wts.EncodedWeights | None) -> _Priced:
        """Price of one choice as a function of the previous pass's slack, from two evaluator prices.

        The evaluator's cycles of a pass have the form max(K - hidden, M), where ``hidden`` is the slack it
        hides its first weight (or LUT) transfer under; so pricing once with nothing hidden and once with
        everything hidden gives the price after any previous pass.
        """
        pos = group.start + k
        op = self.ops[pos]
        ref = EncodedWeightsRef.of(encoded, config.ofm_block.depth) if encoded is not None else None
        # The cascade is named and the rolling buffer set when the strategy is chosen; for the price only
        # whether the pass is cascaded matters (the evaluator then leaves out its weight DMA). Stripes do not
        # change the price (the evaluator prices the whole pass), nor rolling buffers already in fast storage.
        op_sched = OpSchedule(op_index=op.index, block_config=config, ofm_stripe=group.stripes[k],
                              ifm_stripe=group.ifm_stripes[k], ifm2_stripe=group.ifm2_stripes[k],
                              weight_buffering=buffering, encoded_weights=ref)
        ifm_moved = group.rolling[k] is not None and not self._in_fast[pos][0]
        ofm_moved = group.cascaded and pos < group.end and not self._in_fast[pos][1]
        as_cascaded = group.cascaded and not (self.opts.charge_cascade_weights and buffering.is_buffered)
        key = (pos, ifm_moved, ofm_moved, as_cascaded, config, buffering)
        numbers = self._price_cache.get(key)
        if numbers is None:
            schedule = self._pricing_schedule(pos, ifm_moved, ofm_moved)
            priced_as = replace(op_sched, cascade=op.index) if as_cascaded else op_sched
            exposed, slack, _ = price_op(self.arch, op, priced_as, schedule, 0.0)
            hidden, _, _ = price_op(self.arch, op, priced_as, schedule, _ALL_HIDDEN)
            assert not isinstance(slack, tuple), "the DP prices under one model"
            numbers = self._price_cache[key] = (float(exposed.total_cycles), float(hidden.total_cycles), float(slack))
        held = weight_buffer_bytes(buffering)
        return _Priced(op_sched, *numbers, held.at, held.after, held.before)

    def _op_choices(self, group: _Group, k: int, prev_slack: float) -> list[tuple[_Priced, float]]:
        """The undominated choices, with their cycles, for the ``k``-th pass of a strategy after a pass leaving
        ``prev_slack``."""
        pos = group.start + k
        key = (pos, group.stripes[k].height, group.rolling[k] is not None, group.cascaded and pos < group.end,
               group.cascaded, k == 0, prev_slack)
        hit = self._choice_cache.get(key)
        if hit is None:
            priced = self._static_choices(group, k)
            op = self.ops[pos]
            if op.weights is not None and not group.cascaded and weights_need_dma(self.arch, op):
                for config in self._configs(pos, group.stripes[k].height):
                    slices = self._vela_slicing(pos, config, prev_slack)
                    if slices is not None:
                        priced.extend(self._price(group, k, config, buffering, encoded)
                                      for buffering, encoded in self._buffered(op, config, slices, k == 0))
            rows = [(p, p.cycles(prev_slack)) for p in priced]
            hit = self._choice_cache[key] = _pareto(
                rows, lambda r: (r[1], r[0].buffers_all, r[0].buffers_kept, r[0].pre_buffer, -r[0].slack))
        return hit

    def _static_choices(self, group: _Group, k: int) -> list[_Priced]:
        """Every choice for the ``k``-th pass of a strategy that does not depend on the pass before it."""
        pos = group.start + k
        key = (pos, group.stripes[k].height, group.rolling[k] is not None, group.cascaded and pos < group.end,
               group.cascaded, k == 0)
        if key not in self._static_cache:
            op = self.ops[pos]
            self._static_cache[key] = [
                self._price(group, k, config, buffering, encoded)
                for config in self._configs(pos, group.stripes[k].height)
                for buffering, encoded in self._weight_variants(op, config, group.cascaded, k == 0)
            ]
        return list(self._static_cache[key])

    def _group_choices(self, group: _Group, incoming_slack: float) -> list[_GroupChoice]:
        """The undominated ways to run a strategy's passes after a pass that leaves ``incoming_slack``."""
        states = [_GroupChoice((), 0.0, incoming_slack, 0, 0, 0)]
        for k in range(group.end - group.start + 1):
            grown: list[_GroupChoice] = []
            for state in states:
                for priced, cycles in self._op_choices(group, k, state.slack):
                    grown.append(_GroupChoice(
                        state.ops + (priced.op_sched,), state.cycles + cycles, priced.slack,
                        state.buffers_all + priced.buffers_all, state.buffers_kept + priced.buffers_kept,
                        state.pre_buffer + priced.pre_buffer,
                    ))
            states = _pareto(grown, lambda s: (s.cycles, s.buffers_all, s.buffers_kept, s.pre_buffer, -s.slack))
            states = self._cap(states, lambda s: s.cycles, lambda s: s.buffers_all, self.opts.group_frontier_size)
        return states

    # ---- the frontier -----------------------------------------------------------------------------------------

    def _objective(self, cand: _PartialSchedule) -> tuple[float, ...]:
        if self.size_first:
            # 2020's candidate metric: SRAM and cycles weighed by the architecture's weights.
            weight_sram = float(self.arch.max_sram_used_weight)
            weight_cycles = float(self.arch.cycles_weight)
            return (cand.peak * weight_sram + cand.cycles * weight_cycles, cand.cycles)
        return (cand.cycles, cand.peak)

    def _cap(self, items: list[Any], objective: Any, memory: Any, size: int) -> list[Any]:
        if len(items) <= size:
            return items
        by_objective = sorted(items, key=objective)
        low = max(1, min(self.opts.low_memory_keep, size // 4))
        kept = by_objective[: size - low]
        kept_ids = {id(x) for x in kept}
        for item in sorted(items, key=lambda x: (memory(x), objective(x))):
            if len(kept) >= size:
                break
            if id(item) not in kept_ids:
                kept.append(item)
                kept_ids.add(id(item))
        return kept

    def _prune(self, candidates: list[_PartialSchedule]) -> list[_PartialSchedule]:
        front = _pareto(candidates, lambda c: (c.cycles, c.peak, c.tail, -c.slack))
        return self._cap(front, self._objective, lambda c: (c.peak, c.tail), self.opts.frontier_size)

    def run(self) -> tuple[list[_PartialSchedule], int]:
        """Final candidates (best first) and the smallest peak any complete candidate reached (over the limit
        ones included, for the error message)."""
        frontiers: list[list[_PartialSchedule]] = [[] for _ in range(self.n + 1)]
        frontiers[0] = [_PartialSchedule(0.0, 0, 0, 0.0)]
        smallest = [UNLIMITED] * (self.n + 1)
        smallest[0] = 0
        for start in range(self.n):
            frontier = self._prune(frontiers[start])
            frontiers[start] = frontier
            if not frontier:
                continue
            for group in self._groups[start]:
                touched = self._touched(group) + self._spanning(group.start, group.end)
                by_slack: dict[float, list[_GroupChoice]] = {}
                for cand in frontier:
                    choices = by_slack.get(cand.slack)
                    if choices is None:
                        choices = by_slack[cand.slack] = self._group_choices(group, cand.slack)
                    for choice in choices:
                        at_step = touched + choice.buffers_all
                        before = cand.tail + choice.pre_buffer
                        peak = max(cand.peak, at_step, before)
                        smallest[group.end + 1] = min(smallest[group.end + 1], max(peak, smallest[start]))
                        if peak > self.limit:
                            continue
                        frontiers[group.end + 1].append(_PartialSchedule(
                            cand.cycles + choice.cycles, peak, at_step - (choice.buffers_all - choice.buffers_kept),
                            choice.slack, group, choice.ops, cand))
        final = sorted(self._prune(frontiers[self.n]), key=self._objective)
        return final, smallest[self.n]


# --------------------------------------------------------------------------------------------------------------
# Public entry point


def _tensors(arch: PricedArchitecture, placements: tuple[tuple[FeatureMap, TensorPlacement], ...],
             ops: Sequence[OpSchedule],
             op_by_index: Mapping[int, NpuOp]) -> tuple[tuple[FeatureMap, TensorPlacement], ...]:
    """Base placements with every rolling buffer's feature map moved into fast storage."""
    rolling = {op_by_index[o.op_index].ifm.tensor for o in ops if o.rolling_buffer is not None}
    out = []
    for fm, place in placements:
        if fm in rolling:
            place = TensorPlacement(arch.fast_storage_mem_area, place.format)
        out.append((fm, place))
    return tuple(out)


def dp_schedule(network: Network | NpuSubgraph, arch: PricedArchitecture,
                optimise: OptimisationStrategy | str = OptimisationStrategy.PERFORMANCE,
                options: DpOptions | None = None) -> Schedule:
    """The 2020 dynamic-programming schedule of ``network`` (a Network or one NpuSubgraph) under ``arch``.

    ``optimise`` "Performance" keeps the fastest candidate that fits, "Size" the best by 2020's weighted
    metric (fast storage weighs far more than cycles). The fast-storage limit is the arena cache size. Cascades
    are named by the op index of their last pass. Raises ScheduleError when no candidate fits.
    """
    opts = options or DpOptions()
    strategy = OptimisationStrategy.parse(optimise)
    limit = staging_limit(arch)
    use = tensor_use(network)
    placements = vela_tensor_placements(network, arch, use)
    op_by_index = {op.index: op for sg in subgraphs_of(network) for op in sg.ops}
    for op in op_by_index.values():
        if not price_options(arch, op, stripe_heights=(op.ofm.shape.height,)):
            raise ScheduleError(f"no block config fits op {op.index} ({op.name})")
    chosen: list[OpSchedule] = []
    notes: list[str] = []
    for sg in subgraphs_of(network):
        picked = dp_subgraph(arch, sg, use, placements, limit, strategy, opts)
        if picked is None:
            continue
        chosen.extend(picked.ops)
        cascades = len({o.cascade for o in picked.ops if o.cascade is not None})
        notes.append(f"{sg.name}: {cascades} cascades, peak fast storage {picked.peak_bytes} bytes, "
                     f"limit {limit} bytes")
    chosen.sort(key=lambda o: o.op_index)
    schedule = Schedule(ops=tuple(chosen), tensors=_tensors(arch, placements, chosen, op_by_index), label=DP_LABEL,
                        status="fits", solver="dp", notes=tuple(notes))
    if opts.place_feature_maps and arch.feature_map_storage_mem_area != arch.fast_storage_mem_area:
        schedule = _place_feature_maps(network, arch, schedule, limit)
    return schedule


@dataclass(frozen=True)
class DpSubgraph:
    """The DP's pick for one subgraph and the peak fast storage its own memory reckoning gives it (which the
    evaluator's must equal: both read the subgraph's ``MemoryLayout``)."""

    ops: tuple[OpSchedule, ...]
    peak_bytes: int


def dp_subgraph(arch: PricedArchitecture, sg: NpuSubgraph, use: TensorUse,
                placements: tuple[tuple[FeatureMap, TensorPlacement], ...], limit: int,
                strategy: OptimisationStrategy, opts: DpOptions) -> DpSubgraph | None:
    """The best candidate of one subgraph the evaluator accepts under ``limit`` (None for a subgraph without
    passes). Raises ScheduleError naming the smallest peak any candidate needs when none fits."""
    base = Schedule(ops=(), tensors=placements)
    search = _SubgraphSearch(arch, sg, use, base, limit, strategy, opts)
    if search.n == 0:
        return None
    final, smallest = search.run()
    op_by_index = {op.index: op for op in sg.ops}
    names = [op.index for op in search.ops]
    picked = _first_verified(sg, arch, placements, final, op_by_index, limit, names)
    if picked is None:
        # The smallest peak of any complete candidate: from this search when some went over the limit only
        # at the end, and from one without a limit that ranks by memory first.
        relaxed = _SubgraphSearch(arch, sg, use, base, UNLIMITED, OptimisationStrategy.SIZE, opts)
        need = min([c.peak for c in relaxed.run()[0]] + [smallest])
        raise ScheduleError(f"no schedule fits {limit} bytes of fast storage; the smallest that fits needs "
                            f"{need} bytes", needed_bytes=need)
    return DpSubgraph(tuple(picked.op_schedules(names)), picked.peak)


def _place_feature_maps(network: Network | NpuSubgraph, arch: PricedArchitecture, schedule: Schedule,
                        limit: int) -> Schedule:
    """Greedily move feature maps passed between NPU passes into fast storage, in execution order, keeping each
    move that makes the network faster and still verifies."""
    boundary = {fm for sg in subgraphs_of(network) for fm in (*sg.inputs, *sg.outputs)}
    best = evaluate(network, arch, schedule).total_cycles
    moved = 0
    for index, (fm, place) in enumerate(schedule.tensors):
        if fm.is_const or fm in boundary or place.mem_area == arch.fast_storage_mem_area:
            continue
        tensors = list(schedule.tensors)
        tensors[index] = (fm, TensorPlacement(arch.fast_storage_mem_area, place.format))
        trial = replace(schedule, tensors=tuple(tensors))
        evaluation = evaluate(network, arch, trial)
        if evaluation.total_cycles < best and not verify(network, arch, trial, evaluation, limit=limit):
            schedule, best = trial, evaluation.total_cycles
            moved += 1
    if moved:
        schedule = replace(schedule, notes=(*schedule.notes, f"{moved} feature maps moved into fast storage"))
    return schedule


def _first_verified(sg: NpuSubgraph, arch: PricedArchitecture, placements: tuple, final: Sequence[_PartialSchedule],
                    op_by_index: Mapping[int, NpuOp], limit: int, names: Sequence[int]) -> _PartialSchedule | None:
    """The best final candidate that the evaluator accepts for this subgraph (the DP's memory model mirrors
    the evaluator's, so normally the first)."""
    for cand in final:
        ops = cand.op_schedules(names)
        schedule = Schedule(ops=tuple(sorted(ops, key=lambda o: o.op_index)),
                            tensors=_tensors(arch, placements, ops, op_by_index))
        if not verify(sg, arch, schedule, evaluate(sg, arch, schedule), limit=limit):
            return cand
    return None
