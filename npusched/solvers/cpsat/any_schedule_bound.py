"""A lower bound on the total cycles of any schedule of a network: what a run reports as "Lower bound, any schedule".

The evaluator prices a schedule pass by pass (``npusched.schedule.pricing.price_op``), each pass the larger of its
NPU time and each memory's access time, and adds the passes up. So no schedule costs less than the sum over passes
of the least each pass can be priced at, whatever the schedule chooses for it:

* its **block config**: any block the SHRAM search (``npusched.target.block_config``) fits to the whole OFM or to
  an OFM stripe (the whole OFM's blocks and, on 2x2 micro-block hardware, a one-row stripe's: see
  ``npusched.schedule.options``);
* its **stripes and cascade**: the evaluator prices whole-op shapes, so a stripe changes only the blocks on offer
  and, in a cascade, the weight transfer Vela's legacy estimate leaves out (below);
* its **placements**: each feature map in its default memory or in fast storage, every combination tried (moving
  traffic to another memory can lower the largest access time, so "everything in the fastest memory" is not a
  bound by itself);
* its **weights**: read in place (their traffic in the memory that stores them: the stream read at least once, per
  OFM block column as the estimates count it) or copied into a fast-storage buffer (the whole stream's DMA less
  what the previous pass's slack hides, no access time; the default core also counts the buffer's reads).

Each price is the estimator's own (``npusched.target.performance``, ``performance_default``, queries from
``npusched.schedule.pricing.price_inputs``); the bound only leaves out terms that can only add (LUT and memory-copy
DMA) and takes the least each remaining one can be:

* **The DMA credit.** Vela's legacy estimate charges a cascaded pass's buffered weights no transfer and still takes
  off the part of its first weight DMA hidden under the previous pass: such a pass can cost less than its own
  compute time. A pass that may cascade with a neighbour is allowed that, up to its first DMA and up to the slack
  the previous pass can leave. That slack is the previous pass's compute time as Vela's scheduler estimates it,
  which, where the scheduler sees the pass's operands where they are (shared SRAM), is at most what that pass
  pays itself plus its own credit; a schedule whose pass leaves more slack than that pays at least as much as one
  that leaves exactly that (each cycle of slack saves the next pass at most a cycle), so the bound assumes no
  more. Elsewhere it takes the most slack any block config of the previous pass leaves.
* **Weight streams** are sized by the encoder at one block depth (Vela's for the whole OFM), whole depth. Another
  block depth or depth slicing changes a stream by a few percent (-2%..+1% by depth, down to -6% by slicing over
  the corpus), so every weight term counts ``WEIGHT_BYTES_MARGIN`` of the reference stream's weight bytes, and
  every credit that grows with it their size over that margin.
* **Least over block configs**, exactly but without pricing most of them: configs are ranked by their compute
  time with ideal memories (no latency, unlimited bandwidth: no placement beats it), and a config is priced only
  while that, or its least access time with the movable operands in fast storage (``_Bound._access_bound``),
  can still beat the best price found. Prices are memoised per op shape and placement, so repeated layers cost
  little; past ``WORK`` estimates a pass's configs beyond its ``EAGER_CONFIGS`` cheapest by ideal compute time
  are taken at the least they can cost by that, so that the bound of networks of many hundreds of passes takes
  about a second per cost model.

What it assumes of a schedule, beyond the evaluator's rules: feature maps in their default memory or in fast
storage, in the layouts lowering chose; with fast storage of its own (Dedicated_Sram) a subgraph's inputs and
outputs in feature-map storage (``verify`` rejects any other); cascades only between passes Vela's rules let
cascade (``npusched.schedule.rules.may_cascade``, as every solver builds them); weight streams within the margin
above; a pass's slack its scheduler estimate at no more than its whole OFM depth (``tail_slack_cycles`` is not
covered).

Under ``Estimator.CONTENTION`` the legacy formulas hold (its slack is never above the legacy one). Under
``Estimator.BOTH`` (the objective of ``--objective both``) each model's bound is worked out on its own and the
least of the two and their blend is returned, so that it holds both for the objective the search minimised (the
units of ``bound_cycles``) and for the one model whose cycles a run reports.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from npusched.ir import FeatureMap, MemArea, NpuBlockType, NpuOp, Shape4D, TensorFormat, round_up
from npusched.lowering.graph import Network
from npusched.schedule.options import one_row_blocks_differ, with_block_config
from npusched.schedule.pricing import price_inputs
from npusched.schedule.rules import ifm_stripes, weights_need_dma
from npusched.schedule.schedule import TensorPlacement
from npusched.schedule.tensor_use import default_placement
from npusched.solvers.cpsat.candidates import cascade_links
from npusched.solvers.cpsat.model import NetworkFacts
from npusched.target import performance as perf
from npusched.target import performance_default as perf_default
from npusched.target import weights as wts
from npusched.target.block_config import (
    BlockConfig,
    enumerate_block_configs,
    find_block_config_for_op,
    op_block_inputs,
)
from npusched.target.estimators import Estimator, PricedArchitecture, blend_parts
from npusched.target.performance import Direction, Purpose

# The share of the reference weight stream's bytes every weight term counts (see the module docstring).
WEIGHT_BYTES_MARGIN = 0.9
# Block configs of a pass tried by ideal compute time alone before the rest are ranked by an access bound too.
EAGER_CONFIGS = 8
# Estimates the bound of one cost model makes before it prices only the ``EAGER_CONFIGS`` block configs of each pass
# with the least ideal compute time and takes the others at the least that can cost (``_Bound._least``): about
# half a second's worth. Of the corpus only MobileNet-V2 (66 passes, 12,000-17,000) goes past it, its bound 0-4%
# lower than without the limit.
WORK = 10000
# A price sum in another order, or a least price within this share of the best, is taken as no lower: the total is
# lowered by ten times as much at the end, so that float rounding never puts the bound above a schedule's price.
TOLERANCE = 1e-9

Query = perf.PerformanceQuery


# What the bound takes per pass and cost model (the weight encodings already made by the search; measured on
# 634-702-pass networks: 0.45-1.0 s for one model, 1.1-2.5 s for both), rounded up: runs keep this back.
SECONDS_PER_PASS_AND_MODEL = 0.002


def any_schedule_bound_seconds(network: Network, arch: PricedArchitecture) -> float:
    """What a run keeps back of its time limit for the bound (from its inputs alone, so that a deterministic
    search's budget does not depend on the machine)."""
    models = 2 if arch.estimator is Estimator.BOTH else 1
    return SECONDS_PER_PASS_AND_MODEL * models * len(network.npu_ops)


def any_schedule_bound(net: NetworkFacts, deadline: float = math.inf) -> float:
    """A lower bound on the evaluator's total cycles of any schedule of ``net``'s network (module docstring):
    under ``Estimator.BOTH`` the least of each model's bound and their weighted blend. NaN (no bound) where it
    is not worked out by ``deadline`` (a ``time.monotonic`` reading): the run's limit comes first."""
    arch = net.arch
    try:
        if arch.estimator is Estimator.BOTH:
            legacy_arch, default_arch = blend_parts(arch)
            legacy = _Bound(net, legacy_arch, deadline).total()
            default = _Bound(net, default_arch, deadline).total()
            wa, wb = arch.blend_weights
            return min(legacy, default, wa * legacy + wb * default)
        return _Bound(net, arch, deadline).total()
    except _PastDeadline:
        return math.nan


class _PastDeadline(Exception):
    """The bound was not worked out in time."""


@functools.lru_cache(maxsize=16)
def single_byte_bursts(arch: PricedArchitecture) -> PricedArchitecture:
    """``arch`` with every memory's burst one byte long: no block access wastes part of a burst, so traffic is
    priced at its raw bytes, which no block config's bursts go below."""
    return replace(arch, memory_burst_length={m: 1 for m in arch.memory_burst_length})


@functools.lru_cache(maxsize=16)
def ideal_memories(arch: PricedArchitecture) -> PricedArchitecture:
    """``arch`` with memories that cost nothing: no latency, unlimited bandwidth, single-byte bursts. Every
    memory term of the estimate grows with latency, transfer time and burst length, so a pass's compute time
    here is a lower bound on it under any placement."""
    areas = arch.memory_bandwidths_per_cycle.keys()
    return replace(arch, memory_latency={m: (0, 0) for m in areas},
                   memory_bandwidths_per_cycle={m: math.inf for m in areas}, memory_burst_length={m: 1 for m in areas})


def block_configs(arch: PricedArchitecture, op: NpuOp) -> tuple[BlockConfig, ...]:
    """Every block config a schedule can give ``op``: those that fit its whole OFM, and those of a one-row stripe
    where 2x2 micro-block hardware then accumulates 1-high blocks (distinct by what the estimate reads)."""
    inputs = op_block_inputs(op)
    ifm2 = op.ifm2.shape if op.ifm2 is not None else None
    found = [c.config for c in enumerate_block_configs(arch, ofm_shape=op.ofm.shape, ifm_shape=op.ifm.shape,
                                                       ifm2_shape=ifm2, **inputs)]
    if one_row_blocks_differ(arch, op):
        row = op.ofm.shape.with_height(1)
        ifm_row, ifm2_row = ifm_stripes(op, row)
        found += [c.config for c in enumerate_block_configs(arch, ofm_shape=row, ifm_shape=ifm_row,
                                                            ifm2_shape=ifm2_row, **inputs)]
    unique: dict[tuple, BlockConfig] = {}
    for config in found:
        unique.setdefault((config.ofm_block, config.ifm_block, config.acc_type, config.is_partkernel), config)
    return tuple(unique.values())


def least_moving(query: Query, config: BlockConfig) -> BlockConfig:
    """``config`` made the block config that moves least data in the estimates' counts: one OFM block the size of
    the whole OFM (the IFM, weights and scales are read once per OFM block, or per OFM block column; the OFM's
    count does not depend on the block) fed by a 1x1 IFM block (a block reads at least one IFM element per
    channel). No block fits SHRAM so, but every count of a block that does is at least its count."""
    return replace(config, ofm_block=Shape4D(1, *(max(d, 1) for d in query.ofm_shape.as_list()[1:])),
                   ifm_block=Shape4D(1, 1, 1, config.ifm_block.depth))


def _unpadded(query: Query) -> Query:
    """``query`` without its kernel's padding, which no estimate reads: ops that differ only in padding then
    share their memoised prices."""
    kernel = query.kernel
    if kernel.padding == (0, 0, 0, 0) and not kernel.valid_padding:
        return query
    return replace(query, kernel=replace(kernel, padding=(0, 0, 0, 0), valid_padding=False))


@dataclass(frozen=True)
class _Weights:
    """An op's weight terms at ``WEIGHT_BYTES_MARGIN`` of its reference stream: streams read in place and
    buffered as the estimates take them, the least whole-stream DMA and the largest first DMA."""

    in_place: perf.WeightStream
    buffered: perf.WeightStream
    weight_bytes: int  # default core: encoded weights without their scales
    transfer: float  # least whole-stream DMA (the evaluator's full transfer cycles)
    first_dma: float  # largest first-slice DMA (legacy core)


class _Bound:
    """One cost model's bound over a network (``arch`` prices with one model): per pass, in each subgraph's
    execution order, the least price under any choices (``_floor``) after the most slack the previous pass can
    usefully leave (``_slack_cap``), added up. Prices are memoised per op shape and placement (by the identity of
    one query object per value, so that keys are cheap)."""

    def __init__(self, net: NetworkFacts, arch: PricedArchitecture, deadline: float = math.inf) -> None:
        self.net = net
        self.arch = arch
        self.deadline = deadline
        self.default = arch.estimator is Estimator.VELA_DEFAULT
        self.ideal = ideal_memories(arch)
        self.fast = arch.fast_storage_mem_area
        self.perm = arch.permanent_storage_mem_area
        self.shared = self.fast == arch.feature_map_storage_mem_area
        # Per op shape (the query without its block config and memories): block configs by ideal compute.
        self.ranked: dict[tuple, list[tuple[float, BlockConfig]]] = {}
        # Every op query (no block config) built, one object per value, and per op type, activation, query and block
        # config: (compute, largest access time) with no weight traffic.
        self.queries: dict[Query, Query] = {}
        self.plain: dict[tuple, tuple[float, dict[MemArea, float], float, float]] = {}
        self.compute: dict[tuple, float] = {}  # the same key: compute time alone
        self.floors: dict[tuple, dict[MemArea, float]] = {}  # ``_access_floor``'s per op shape and placement
        self.bare: dict[tuple, float] = {}  # the same per op shape: the least price of an op without weights
        self.bounds: dict[tuple, float] = {}  # ``_bound`` per op shape, placements and block config
        self.increments: dict[tuple, dict[MemArea, float]] = {}  # ``_increment`` per op and OFM block
        # Per op shape and const area: the most slack (scheduling-time compute) found among its block configs,
        # and whether every one was tried (else it is only known to reach that much).
        self.slacks: dict[tuple, tuple[float, bool]] = {}
        self.work = 0  # estimates made so far (see ``WORK``)
        self.eager_only = False
        min_bandwidth = min(arch.memory_bandwidths_per_cycle[self.perm], arch.memory_bandwidths_per_cycle[self.fast])
        # How far a whole-stream single buffer's first DMA (rounded to 16 bytes per core) can exceed its transfer.
        self.rounding_credit = 15 * arch.ncores / min_bandwidth + 1

    def total(self) -> float:
        """The sum over every subgraph's passes of each pass's least price after the most slack its previous
        pass can leave (``_slack_cap``)."""
        total = 0.0
        for sgi, sg in enumerate(self.net.subgraphs):
            links = cascade_links(self.net.facts(sgi)) if len(sg.ops) > 1 else []
            pinned = set() if self.shared else {*sg.inputs, *sg.outputs}
            # What the previous pass pays at most with no slack before it, and how far below its compute time
            # its price can fall (None: its slack is not tied to its own price, see ``_slack_cap``).
            before: tuple[float, float] | None = None
            for pos, op in enumerate(sg.ops):
                if time.monotonic() > self.deadline:
                    raise _PastDeadline
                may_cascade = bool((pos > 0 and links[pos - 1]) or (pos + 1 < len(sg.ops) and links[pos]))
                weights = self._weights(op)
                bufferable = weights is not None and weights_need_dma(self.arch, op)
                slack = 0.0  # a subgraph's first pass follows no slack
                need = max(weights.first_dma, weights.transfer) if weights is not None and bufferable else 0.0
                if pos > 0 and need > 0:
                    slack = self._slack_cap(sg.ops[pos - 1], before, need)
                self.eager_only = self.work >= WORK
                floor = self._floor(op, pinned, weights, may_cascade, slack)
                total += floor
                before = None
                if self._slack_within_price(op, pinned):
                    credit = 0.0
                    if weights is not None and bufferable and not self.default:
                        credit = self._credit(weights, may_cascade, slack)
                    before = (floor + min(slack, need), credit)
        return total * (1 - 10 * TOLERANCE)

    def _credit(self, weights: _Weights, may_cascade: bool, slack: float) -> float:
        """How far below its compute time the legacy estimate can price a pass with buffered weights after at
        most ``slack`` cycles of slack: the rounding of a single buffer's first DMA, and in a cascade the DMA
        credit."""
        return max(self.rounding_credit, min(weights.first_dma, slack)) if may_cascade else self.rounding_credit

    def _slack_within_price(self, op: NpuOp, pinned: set[FeatureMap]) -> bool:
        """Whether the slack ``op`` leaves is at most its own compute time as the evaluator prices it: true when
        the scheduler's estimate sees its operands where they are (each can only be in feature-map storage) and
        its constants in memory no slower than where they are priced from (fast storage, or permanent storage
        with at least fast storage's latency)."""
        fm_area = self.arch.feature_map_storage_mem_area
        for access in (op.ifm, op.ifm2, op.ofm):
            if access is not None and not access.tensor.is_const and \
                    [p.mem_area for p in self._placements(access.tensor, pinned)] != [fm_area]:
                return False
        if op.ofm.effective_shape != op.ofm.shape:
            return False
        latency = self.arch.memory_latency
        return self.default or latency[self.perm][0] >= latency[self.fast][0]

    def _slack_cap(self, prev: NpuOp, before: tuple[float, float] | None, need: float) -> float:
        """The most slack the pass ``prev`` can leave that a least-cycles schedule would use, capped at ``need``.

        Where that slack is at most ``prev``'s own compute time (``before`` is given: its price with no slack
        before it at most ``before[0]``, its credit below compute at most ``before[1]``), a pass's price is at
        least its slack less its credit; and each cycle of slack saves the next pass at most a cycle. So a
        schedule whose ``prev`` leaves more than ``before[0] + before[1]`` pays at least as much as one whose
        ``prev`` leaves exactly that, and the bound may assume no more. In any case no more than any block
        config of ``prev`` leaves (``_slack``)."""
        if before is not None:
            need = min(need, before[0] + before[1])
        return self._slack(prev, need)

    # ----------------------------------------------------------------------------------------------------------
    # Per pass

    def _placements(self, fm: FeatureMap, pinned: set[FeatureMap]) -> list[TensorPlacement]:
        """Where a schedule can put ``fm``: fast storage first (when it can move there), then its default memory,
        in the layout lowering chose; constants where they are kept."""
        if fm.is_const:
            return [default_placement(self.arch, fm)]
        base = self.net.base.get(fm) or default_placement(self.arch, fm)
        areas = [base.mem_area] if fm in pinned or base.mem_area == self.fast else [self.fast, base.mem_area]
        return [TensorPlacement(area, base.format) for area in areas]

    def _movable(self, op: NpuOp, pinned: set[FeatureMap]) -> tuple[int, bool, MemArea | None]:
        """How many of ``op``'s reads (distinct feature maps) and whether its write can leave fast storage, and
        the one memory they would go to (None: more than one)."""
        reads = [op.ifm.tensor] + ([op.ifm2.tensor] if op.ifm2 is not None and op.ifm2.tensor != op.ifm.tensor
                                   else [])
        moving = [fm for fm in (*reads, op.ofm.tensor) if len(self._placements(fm, pinned)) > 1]
        areas = {self._placements(fm, pinned)[1].mem_area for fm in moving}
        return (sum(fm in moving for fm in reads), op.ofm.tensor in moving and op.ofm.tensor not in reads,
                areas.pop() if len(areas) == 1 else None)

    def _queries(self, op: NpuOp, pinned: set[FeatureMap]) -> list[tuple[Query, Query]]:
        """The op's queries (no block config) under every combination of its operands' memories, the one with
        every movable operand in fast storage first (see ``_settled``): constants in fast storage (weights
        buffered) and in permanent storage (read in place), one object per value (the memo keys go by
        identity)."""
        ifm = self._placements(op.ifm.tensor, pinned)
        ofm = self._placements(op.ofm.tensor, pinned)
        same = op.ifm2 is not None and op.ifm2.tensor == op.ifm.tensor
        ifm2: Sequence[TensorPlacement | None] = [None]
        if op.ifm2 is not None and not same:
            ifm2 = self._placements(op.ifm2.tensor, pinned)
        out = []
        for a, b, c in itertools.product(ifm, ifm2, ofm):
            pair = []
            for const_area in (self.fast, self.perm):
                query = _unpadded(price_inputs(self.arch, op, None, ifm=a, ofm=c, ifm2=a if same else b,
                                               const_area=const_area).query)
                pair.append(self.queries.setdefault(query, query))
            out.append((pair[0], pair[1]))
        return out

    def _ranked(self, op: NpuOp) -> list[tuple[float, BlockConfig]]:
        """The op's block configs with their ideal compute time, cheapest first (shared by ops of one shape)."""
        query = _unpadded(price_inputs(
            self.arch, op, None, ifm=self._scheduling(op.ifm.tensor, self.fast),
            ofm=self._scheduling(op.ofm.tensor, self.fast),
            ifm2=self._scheduling(op.ifm2.tensor, self.fast) if op.ifm2 is not None else None,
            const_area=self.fast).query)
        if op.npu_block_type is not NpuBlockType.ElementWise:
            # with ideal memories only an elementwise pass's compute time reads its layouts (its padded OFM)
            query = replace(query, ifm_format=TensorFormat.NHWC, ofm_format=TensorFormat.NHWC,
                            ifm2_format=TensorFormat.NHWC)
        inputs = op_block_inputs(op)
        inputs["kernel"] = query.kernel
        key = (op.op_type, op.reported_activation, query, op.ifm.shape, op.ofm.shape,
               op.ifm2.shape if op.ifm2 is not None else None, tuple(inputs.values()))
        ranked = self.ranked.get(key)
        if ranked is None:
            ranked = sorted(((self._compute(self.ideal, op, with_block_config(query, c)), c)
                             for c in block_configs(self.arch, op)), key=lambda item: item[0])
            self.ranked[key] = ranked
        return ranked

    def _compute(self, arch: PricedArchitecture, op: NpuOp, query: Query) -> float:
        """``op``'s compute time (no DMA) under ``arch``'s cost model."""
        self.work += 1
        if self.default:
            return float(perf_default.measure_cycle_cost(arch, op.op_type, op.activation, query).op_cycles)
        return float(perf.measure_cycle_cost(arch, op.op_type, op.reported_activation, query).op_cycles)

    def _floor(self, op: NpuOp, pinned: set[FeatureMap], weights: _Weights | None, may_cascade: bool,
               slack: float) -> float:
        """The least price of ``op`` under any block config, placement and weight buffering, after a pass that
        leaves at most ``slack`` cycles (``_least`` per weight buffering: buffered first, the cheaper way
        mostly, so that fewer block configs need pricing in place)."""
        ranked = self._ranked(op)
        if not ranked:
            return 0.0  # no block fits: the evaluator leaves the pass unpriced
        queries = self._queries(op, pinned)
        fast = [q for q, _ in queries]

        movable = self._movable(op, pinned)
        perm = [q for _, q in queries]

        def ordering(computing: list[Query]) -> Callable[[int], float]:
            return lambda index: self._bound(op, ranked, fast, computing, movable, index)

        if weights is None:
            key = (op.op_type, op.reported_activation, id(ranked), *map(id, fast))
            if key not in self.bare:
                self.bare[key] = self._least(ranked, 0.0, self._access_floor(op, fast, ranked[0][1], {}),
                                             math.inf, lambda config, best: self._bare(op, config, fast, best),
                                             ordering(fast))
            return self.bare[key]
        best = math.inf
        if weights_need_dma(self.arch, op):
            credit = 0.0  # how far below its compute time a buffered pass can be priced
            if not self.default:
                credit = self._credit(weights, may_cascade, slack)
            once = self._increment(op, fast[0], least_moving(fast[0], ranked[0][1]), weights, True) \
                if self.default else {}
            floor = self._access_floor(op, fast, ranked[0][1], once)
            if self.default or not may_cascade:  # the transfer the slack does not hide, whatever the config
                floor = max(floor, weights.transfer - slack)
            if self.default:
                pairs = [(q, q) for q in fast]
                best = self._least(ranked, credit, floor, best, lambda config, best: self._with_weights(
                    op, config, pairs, weights, True, once, weights.transfer - slack, best), ordering(fast))
            else:
                best = self._least(ranked, credit, floor, best, lambda config, best: self._buffered(
                    op, config, fast, weights, may_cascade, slack, best), ordering(fast))
        pairs = list(queries)
        once = self._increment(op, perm[0], least_moving(perm[0], ranked[0][1]), weights, False)
        floor = self._access_floor(op, perm, ranked[0][1], once)
        return max(self._least(ranked, 0.0, floor, best, lambda config, best: self._with_weights(
            op, config, pairs, weights, False, once, 0.0, best), ordering(perm)), 0.0)

    def _least(self, ranked: list[tuple[float, BlockConfig]], credit: float, floor: float, best: float,
               price: Callable[[BlockConfig, float], float], bound: Callable[[int], float]) -> float:
        """The least of ``best`` and ``price`` over the block configs of ``ranked`` (by ideal compute time),
        given that a config's price is at least ``floor`` and at least its ideal compute time, and its
        ``bound`` (by index, ``_bound``), less ``credit``. ``price(config, best)`` may answer anything between
        the best so far and the config's price when the config cannot beat the best.

        The first ``EAGER_CONFIGS`` are tried by ideal compute time alone; where that does not settle the least
        (a pass whose access time decides its price), the rest that can still beat the best by their ideal
        compute time are tried by their bound, so that only those that can still beat it by that are priced.
        Once the bound has made ``WORK`` estimates (``eager_only``), the rest are taken at the least they can
        cost by their ideal compute time."""
        for count, (ideal, config) in enumerate(ranked):
            if max(ideal - credit, floor) >= best * (1 - TOLERANCE):
                return best
            if count == EAGER_CONFIGS:
                if self.eager_only:
                    return max(ideal - credit, floor)  # the rest: at least this
                break
            best = min(best, price(config, best))
        else:
            return best
        limit = best * (1 - TOLERANCE) + credit
        rest = sorted((bound(index), index) for index in range(EAGER_CONFIGS, len(ranked))
                      if ranked[index][0] < limit)
        for least, index in rest:
            if max(least - credit, floor) >= best * (1 - TOLERANCE):
                break
            best = min(best, price(ranked[index][1], best))
        return best

    def _bound(self, op: NpuOp, ranked: list[tuple[float, BlockConfig]], fast: list[Query], computing: list[Query],
               movable: tuple[int, bool, MemArea | None], index: int) -> float:
        """A least price of ``op`` with the block config ``ranked[index]`` with no weight traffic, credit or
        slack (each of those only adds, or takes off at most the credit): the largest of its ideal compute time,
        its access bound (``_access_bound``) and its compute bound (``_compute_bound``). The same for every op
        of that shape and placements, so it is worked out once."""
        key = (op.op_type, op.reported_activation, id(ranked), *map(id, fast), *map(id, computing), movable, index)
        found = self.bounds.get(key)
        if found is None:
            ideal, config = ranked[index]
            found = self.bounds[key] = max(ideal, self._access_bound(op, fast, config, movable),
                                           self._compute_bound(op, computing, config, movable))
        return found

    def _compute_bound(self, op: NpuOp, queries: list[Query], config: BlockConfig,
                       movable: tuple[int, bool, MemArea | None]) -> float:
        """A least compute time of ``op`` with ``config`` over its placements, where one comes at no extra cost:
        with one placement, or under the legacy estimate where fast storage is no slower than the memory the
        movable operands would go to (latency, bandwidth, burst), the compute time with all of them in fast
        storage (it grows with each operand's block access time). Otherwise none (0: the ideal compute time
        bounds it)."""
        base = movable[2]
        if len(queries) == 1 or (not self.default and base is not None and self._faster(self.fast, base)):
            return self._compute_at(op, queries[0], config)
        return 0.0

    def _faster(self, fast: MemArea, other: MemArea) -> bool:
        """Whether a block access to ``fast`` never takes longer than to ``other``: latencies, bandwidth and
        burst length all at least as good."""
        arch = self.arch
        return (all(a <= b for a, b in zip(arch.memory_latency[fast], arch.memory_latency[other], strict=True))
                and arch.memory_bandwidths_per_cycle[fast] >= arch.memory_bandwidths_per_cycle[other]
                and arch.memory_burst_length[fast] <= arch.memory_burst_length[other])

    def _access_bound(self, op: NpuOp, queries: list[Query], config: BlockConfig,
                      movable: tuple[int, bool, MemArea | None]) -> float:
        """A least access time of ``op`` (no weights) with ``config`` over its placements, from its price with
        every movable operand in fast storage (the first placement): another placement moves some of them to
        their default memory ``movable[2]``, which takes their bytes at no better bursts (its bursts are no
        shorter) and at its own bandwidth, and adds them to what is there already. ``movable``: how many of the
        op's reads and whether its write can move. With one placement, its access time."""
        _, access, reads, write = self._priced(op, queries[0], config)
        base = movable[2]
        bursts = self.arch.memory_burst_length
        if len(queries) == 1 or base is None or bursts[base] < bursts[self.fast]:
            return max((a for m, a in access.items() if len(queries) == 1 or m is not self.fast), default=0.0)
        ratio = self.arch.memory_bandwidths_per_cycle[self.fast] / self.arch.memory_bandwidths_per_cycle[base]
        whole = 1.0 if self.default else 0.0  # the default core rounds each memory's access time down
        others = max((a for m, a in access.items() if m is not self.fast and m is not base), default=0.0)
        least = math.inf
        for moved_write in (False, True) if movable[1] else (False,):
            in_fast = reads + (0.0 if moved_write else write) - whole
            in_base = access[base] + (ratio * write - whole if moved_write else 0.0)
            if movable[0] == 2:  # either read can move: the best share of them, moved continuously
                moves = [min(max((in_fast - in_base) / (1 + ratio), 0.0), reads)]
            else:
                moves = [0.0, reads] if movable[0] else [0.0]
            for x in moves:
                least = min(least, max(in_fast - x, in_base + ratio * x - (whole if x else 0.0), others))
        return least

    def _plain(self, op: NpuOp, query: Query, config: BlockConfig) -> tuple[float, dict[MemArea, float]]:
        """(compute time, access time per memory) of ``op`` with no weight traffic (none, or buffered under the
        legacy estimate, which keeps it out of the access time): the same for every op of that shape."""
        return self._priced(op, query, config)[:2]

    def _priced(self, op: NpuOp, query: Query, config: BlockConfig
                ) -> tuple[float, dict[MemArea, float], float, float]:
        """``_plain`` and the time fast storage spends reading and writing feature maps (unrounded)."""
        key = (op.op_type, op.reported_activation, id(query), id(config))
        found = self.plain.get(key)
        if found is None:
            self.work += 1
            q = with_block_config(query, config)
            if self.default:
                est: perf.PartialOpPerformance | perf_default.PartialOpPerformance = \
                    perf_default.partial_full_op_performance(self.arch, op.op_type, op.activation, q)
                moved = est.bandwidth
            else:
                est = perf.partial_full_op_performance(self.arch, op.op_type, op.reported_activation, q)
                moved = est.scaled_bandwidth
            bandwidth = self.arch.memory_bandwidths_per_cycle[self.fast]
            found = self.plain[key] = (float(est.cost.op_cycles), est.access_cycles,
                                       moved.get((self.fast, Purpose.FeatureMap, Direction.Read), 0.0) / bandwidth,
                                       moved.get((self.fast, Purpose.FeatureMap, Direction.Write), 0.0) / bandwidth)
        return found

    def _compute_at(self, op: NpuOp, query: Query, config: BlockConfig) -> float:
        """``op``'s compute time with ``config`` (memoised like ``_plain``)."""
        key = (op.op_type, op.reported_activation, id(query), id(config))
        found = self.plain.get(key)
        if found is not None:
            return found[0]
        compute = self.compute.get(key)
        if compute is None:
            compute = self.compute[key] = self._compute(self.arch, op, with_block_config(query, config))
        return compute

    def _with_weights(self, op: NpuOp, config: BlockConfig, pairs: list[tuple[Query, Query]], weights: _Weights,
                      buffered: bool, once: dict[MemArea, float], npu: float, best: float) -> float:
        """The least price of ``op`` with ``config`` and its weights read in place (or, under the default core,
        from a buffer) over its placements, its NPU time at least ``npu``. The weights' access times do not
        depend on the placements (they are read where they are stored or buffered) and the feature maps' do not
        depend on where the constants are: so the weights' are priced once, on the first placement, and added
        to each placement's price without weights (``pairs``: the query of each placement for its access time
        and for its compute time). When the price with the weights read once (``once``, what any block config
        at least reads) does not beat ``best``, that price is the answer: the config is no better."""
        least = self._with_extra(op, config, pairs, once, npu, best)
        if least >= best:
            return least
        extra = self._increment(op, pairs[0][1], config, weights, buffered)
        return self._with_extra(op, config, pairs, {m: max(a, once.get(m, 0.0)) for m, a in extra.items()}, npu,
                                best)

    def _with_extra(self, op: NpuOp, config: BlockConfig, pairs: list[tuple[Query, Query]],
                    extra: dict[MemArea, float], npu: float, best: float) -> float:
        """The least price of ``op`` with ``config`` over its placements, ``extra`` access time added per memory
        and the NPU time at least ``npu`` (a placement whose access time alone reaches ``best`` is not priced
        further)."""
        least = math.inf
        fast = self.fast
        for access_query, compute_query in pairs:
            price, elsewhere = npu, 0.0  # the price, and the largest access time of another memory than fast
            for m, a in self._priced(op, access_query, config)[1].items():
                if extra:
                    a += extra.get(m, 0.0)
                if a > price:
                    price = a
                if m is not fast and a > elsewhere:
                    elsewhere = a
            if price < best:
                price = max(price, self._compute_at(op, compute_query, config))
            least = min(least, price)
            if access_query is pairs[0][0] and elsewhere >= price:
                break  # settled (see ``_settled``)
        return least

    def _increment(self, op: NpuOp, query: Query, config: BlockConfig, weights: _Weights,
                   buffered: bool) -> dict[MemArea, float]:
        """The access time per memory that ``op``'s weights add with ``config`` (read in place, or with
        ``buffered`` from a buffer under the default core): priced with and without them. The default core's
        access times are whole cycles, so a share can be a cycle more than it adds to another total. The
        estimates count weight reads by OFM block (clipped to the OFM) alone, so configs with the same share."""
        key = (id(op), buffered, id(query), query.ofm_shape.min(config.ofm_block))
        found = self.increments.get(key)
        if found is not None:
            return found
        q = with_block_config(query, config)
        self.work += 2
        if self.default:
            stream = weights.buffered if buffered else weights.in_place
            est: perf.PartialOpPerformance | perf_default.PartialOpPerformance = \
                perf_default.partial_full_op_performance(self.arch, op.op_type, op.activation, q, weights=stream,
                                                         weight_bytes=weights.weight_bytes, pre_buffered=buffered)
            bare: perf.PartialOpPerformance | perf_default.PartialOpPerformance = \
                perf_default.partial_full_op_performance(self.arch, op.op_type, op.activation, q)
            whole = 1.0
        else:
            est = perf.partial_full_op_performance(self.arch, op.op_type, op.reported_activation, q,
                                                   weights=weights.in_place)
            bare = perf.partial_full_op_performance(self.arch, op.op_type, op.reported_activation, q)
            whole = 0.0
        found = self.increments[key] = {m: max(a - bare.access_cycles[m] - whole, 0.0)
                                        for m, a in est.access_cycles.items()}
        return found

    def _access_floor(self, op: NpuOp, queries: list[Query], config: BlockConfig,
                      extra: dict[MemArea, float]) -> float:
        """A least access time of ``op`` over every block config, under its cheapest placement, ``extra`` added
        per memory (what its weights add at least): its feature maps' priced with single-byte bursts (a block's
        bursts only scale traffic up) and ``least_moving`` (memoised per op shape and placement)."""
        arch = single_byte_bursts(self.arch)
        best = math.inf
        for query in queries:
            key = (op.op_type, op.reported_activation, id(query), config.ifm_block.depth)
            access = self.floors.get(key)
            if access is None:
                self.work += 1
                q = with_block_config(query, least_moving(query, config))
                if self.default:
                    est: perf.PartialOpPerformance | perf_default.PartialOpPerformance = \
                        perf_default.partial_full_op_performance(arch, op.op_type, op.activation, q)
                else:
                    est = perf.partial_full_op_performance(arch, op.op_type, op.reported_activation, q)
                access = self.floors[key] = est.access_cycles
            best = min(best, max(a + extra.get(m, 0.0) for m, a in access.items()))
        return best

    def _settled(self, price: float, access: dict[MemArea, float]) -> bool:
        """Whether ``price``, under the placement with every movable operand in fast storage, is the least over
        all placements: when it is the access time of another memory, which any other placement only adds to
        (a memory's access time is the sum of its operands'). The first placement tried is that one."""
        return any(a >= price for m, a in access.items() if m is not self.fast)

    def _bare(self, op: NpuOp, config: BlockConfig, queries: list[Query], best: float) -> float:
        """The least price of ``op`` (no weights) with ``config`` over its placements (or at least ``best``)."""
        least = math.inf
        for query in queries:
            if query is not queries[0] and self._compute_at(op, query, config) >= best:
                continue  # its compute time alone reaches the best: not priced further
            compute, access = self._plain(op, query, config)
            price = max(compute, *access.values())
            least = min(least, price)
            if query is queries[0] and self._settled(price, access):
                break
        return least

    def _buffered(self, op: NpuOp, config: BlockConfig, queries: list[Query], weights: _Weights,
                  may_cascade: bool, slack: float, best: float) -> float:
        """The least price under the legacy estimate of ``op`` with ``config`` and its weights in a fast-storage
        buffer, over its placements, after at most ``slack`` cycles of slack (or at least ``best``)."""
        credit = self._credit(weights, may_cascade, slack)
        least = math.inf
        for query in queries:
            if query is not queries[0] and self._compute_at(op, query, config) - credit >= best:
                continue  # its compute time alone reaches the best: not priced further
            # No access time for the weights; the NPU time is at least the compute less the rounding of a single
            # buffer's first DMA, and at least the transfer the slack cannot hide; in a cascade, no transfer at
            # all and the DMA credit.
            compute, access = self._plain(op, query, config)
            npu = max(compute - self.rounding_credit, weights.transfer - slack)
            if may_cascade:
                npu = min(npu, compute - min(weights.first_dma, slack))
            price = max(npu, *access.values())
            least = min(least, price)
            if query is queries[0] and self._settled(price, access):
                break
        return least

    # ----------------------------------------------------------------------------------------------------------
    # Weights and slack

    def _weights(self, op: NpuOp) -> _Weights | None:
        """``op``'s weight terms (``_Weights``) from its stream encoded for Vela's block config of the whole OFM,
        whole depth: every solver encodes that one, so it is mostly known already."""
        if op.weights is None:
            return None
        config = find_block_config_for_op(self.arch, op) or next(iter(block_configs(self.arch, op)), None)
        if config is None:
            return None
        depth = op.ofm.shape.depth
        ref = wts.encode_op_weights(self.arch, op, config.ofm_block.depth, (0, depth))
        scales = wts.SCALE_ENTRY_BYTES * depth
        weight_bytes = int(WEIGHT_BYTES_MARGIN * sum(r.weight_bytes for r in ref.ranges))
        in_place_bytes = scales + int(WEIGHT_BYTES_MARGIN * max(ref.total_bytes - scales, 0))
        first = sum(round_up(r.total_bytes, 16) for r in ref.ranges if r.slice_index == 0)
        first_bytes = math.ceil(first / WEIGHT_BYTES_MARGIN)
        least_bytes = int(WEIGHT_BYTES_MARGIN * ref.total_bytes)
        if self.default:
            transfer = float(perf_default.mem2mem_cycles(self.arch, self.perm, self.fast, least_bytes))
            stream_bytes = weight_bytes + scales
        else:
            transfer = perf.measure_mem2mem_cycles(self.arch, self.perm, self.fast, least_bytes)
            stream_bytes = in_place_bytes
        first_dma = perf.measure_mem2mem_cycles(self.arch, self.perm, self.fast, first_bytes)
        elements = int(op.weights.values.size)
        in_place = perf.WeightStream(encoded_bytes=stream_bytes, original_elements=elements, source_area=self.perm,
                                     scale_element_bytes=wts.SCALE_ENTRY_BYTES)
        buffered = replace(in_place, buffering=perf.BufferKind.SINGLE, buffer_area=self.fast,
                           first_slice_bytes_per_core=(stream_bytes,), full_transfer_cycles=transfer)
        return _Weights(in_place, buffered, weight_bytes, transfer, first_dma)

    def _slack(self, op: NpuOp, need: float) -> float:
        """The most slack ``op`` can leave the next pass, capped at ``need`` (no more is of use): its compute
        time as Vela's scheduler estimates it (feature maps in feature-map storage, constants in fast storage,
        or under the default core in place when not buffered) at its whole OFM depth, under its slowest block
        config."""
        fm_area = self.arch.feature_map_storage_mem_area
        areas = (self.fast, self.perm) if self.default and op.weights is not None else (self.fast,)
        most = 0.0
        for const_area in areas:
            query = price_inputs(self.arch, op, None, ifm=self._scheduling(op.ifm.tensor, fm_area),
                                 ofm=self._scheduling(op.ofm.tensor, fm_area),
                                 ifm2=self._scheduling(op.ifm2.tensor, fm_area) if op.ifm2 is not None else None,
                                 const_area=const_area, ofm_depth=op.ofm.shape.depth).query
            key = (op.op_type, op.reported_activation, query, op.ifm.shape, op.ofm.shape,
                   op.ifm2.shape if op.ifm2 is not None else None, tuple(op_block_inputs(op).values()))
            value, complete = self.slacks.get(key, (0.0, False))
            if value < need and not complete:
                value = 0.0
                for _, config in reversed(self._ranked(op)):
                    value = max(value, self._compute(self.arch, op, with_block_config(query, config)))
                    if value >= need:
                        break
                else:
                    complete = True
                self.slacks[key] = (value, complete)
            most = max(most, value)
            if most >= need:
                break
        return min(most, need)

    def _scheduling(self, fm: FeatureMap, fm_area: MemArea) -> TensorPlacement:
        """``fm`` in ``fm_area`` in its layout (constants where they are kept): how Vela's scheduler sees it."""
        if fm.is_const:
            return default_placement(self.arch, fm)
        base = self.net.base.get(fm) or default_placement(self.arch, fm)
        return TensorPlacement(fm_area, base.format)
