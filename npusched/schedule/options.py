"""Priced options: every (block config x OFM stripe height) an NPU op can run with, and what each one costs.

The solvers choose from these. An option fixes the OFM stripe (how many rows of the OFM the op produces per
step of a cascade), the IFM/IFM2 stripes that stripe needs, and one block config that fits in SHRAM for that
stripe. Its price comes from the same pure functions the evaluator uses, so a solver ranking options ranks them
on the evaluator's terms:

* cycles are Vela 5.2.0's: the block config is chosen for the stripe, but the op is priced with the shapes of
  the whole op (Vela's scheduler and per-layer report both do this; a striped op is never priced stripe by
  stripe). Options that share a block config therefore share one price, whatever their stripe height;
  :func:`striped_op_cycles` gives the stripe-by-stripe estimate for callers that want it;
* weights are encoded for the block config's OFM depth over the whole OFM depth (one depth slice), as Vela
  encodes them when it creates a stripe's scheduling info; buffered weights are priced as one buffer filled
  before the op starts (no prefetch under the previous op, which depends on the schedule);
* memory per option is what Vela's cascade builder counts for a striped op: the IFM, IFM2 and OFM stripes with
  the depth rounded up to 16 channels (rolling buffers are brick-formatted), plus the weight buffer.

Everything is pure. Within one call each block config is priced once and the weights are encoded once per
block depth; whole results are memoised per (architecture, op, stripe heights, placements, buffering), and
:func:`clear_caches` empties that memo. Which blocks fit does not depend on the stripe height except through
the cap a stripe puts on the block height, so the whole OFM's block list is searched once per op and capped per
stripe; Vela's own choice is searched per stripe, since its ranking does depend on the stripe.
:func:`cheapest_options` gives what a candidate space takes of that answer without pricing every block config.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from npusched.ir import FeatureMap, MemArea, NpuOp, Shape4D, TensorFormat, ceil_div, round_up
from npusched.schedule.pricing import price_inputs
from npusched.schedule.rules import (
    ALLOCATION_QUANTUM,
    brick_padded_bytes,
    ifm_stripes,
    pareto_front,
    pricing_weight_stream,
    weights_need_dma,
)
from npusched.schedule.schedule import TensorPlacement
from npusched.target import performance as perf
from npusched.target import performance_default as perf_default
from npusched.target import weights as wts
from npusched.target.block_config import (
    BlockConfig,
    enumerate_block_configs,
    find_block_config,
    op_block_inputs,
)
from npusched.target.estimators import Estimator, PricedArchitecture, blend_parts

__all__ = [
    "ACCESS_AREAS",
    "OpOption",
    "OptionPrice",
    "StripeChoice",
    "cheapest_options",
    "clear_caches",
    "dominated",
    "drop_dominated",
    "option_key",
    "price_options",
    "stripe_choice",
    "striped_op_cycles",
    "vela_choice",
    "weights_buffered_by_default",
]

# Order of the per-memory access cycles in ``OptionPrice.access_cycles``.
ACCESS_AREAS: tuple[MemArea, ...] = perf.ACCESS_AREAS


# --------------------------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class StripeChoice:
    """One OFM stripe height of an op and the stripes it needs; shared by every block config at that height.

    ``ifm``/``ifm2`` are the input rows (and columns) the OFM stripe reads, kernel skirt included, clamped to the
    input tensors; at full height they are the full input shapes, as in Vela. ``count`` is how many stripes
    cover the OFM. The ``*_bytes`` are the stripe sizes Vela's cascade builder counts (depth rounded up to 16).
    ``vela_block`` is the (height, width, depth) of Vela's block config for this stripe (None: nothing fits).
    """

    op_index: int
    ofm: Shape4D
    ifm: Shape4D
    ifm2: Shape4D | None
    count: int
    ofm_bytes: int
    ifm_bytes: int
    ifm2_bytes: int
    vela_block: tuple[int, int, int] | None

    @property
    def height(self) -> int:
        return self.ofm.height

    @property
    def is_full(self) -> bool:
        return self.count == 1


@dataclass(frozen=True, slots=True)
class OptionPrice:
    """What running the whole op with one block config costs.

    ``op_cycles`` is the compute estimate (Vela's ``measure_cycle_cost``); ``npu_cycles`` adds the weight, LUT
    and memcpy DMA with nothing hidden under the previous op; ``access_cycles`` are per memory of
    :data:`ACCESS_AREAS`; ``total_cycles`` is the largest of them all, as in Vela's per-layer report.
    ``encoded_weight_bytes`` is the whole encoded stream (scales included) for this block depth,
    ``weight_buffer_bytes`` the fast storage it occupies when buffered (0 when read in place).
    """

    op_cycles: int
    npu_cycles: float
    access_cycles: tuple[float, ...]
    total_cycles: float
    macs: int
    encoded_weight_bytes: int
    weight_buffer_bytes: int


@dataclass(frozen=True, slots=True)
class OpOption:
    """One way to run an op: a block config at one OFM stripe height, with its price.

    ``is_vela_choice`` marks the block config Vela's search picks for this stripe. The flat attributes the
    solvers read (``op_cycles``, ``ofm_stripe``, ...) are forwarded from the shared stripe and price values.
    """

    block_config: BlockConfig
    stripe: StripeChoice
    price: OptionPrice
    is_vela_choice: bool

    # stripe
    @property
    def op_index(self) -> int:
        return self.stripe.op_index

    @property
    def ofm_stripe(self) -> Shape4D:
        return self.stripe.ofm

    @property
    def ifm_stripe(self) -> Shape4D:
        return self.stripe.ifm

    @property
    def ifm2_stripe(self) -> Shape4D | None:
        return self.stripe.ifm2

    @property
    def stripe_height(self) -> int:
        return self.stripe.ofm.height

    @property
    def num_stripes(self) -> int:
        return self.stripe.count

    # price
    @property
    def op_cycles(self) -> int:
        return self.price.op_cycles

    @property
    def npu_cycles(self) -> float:
        return self.price.npu_cycles

    @property
    def total_cycles(self) -> float:
        return self.price.total_cycles

    @property
    def access_cycles(self) -> dict[MemArea, float]:
        return dict(zip(ACCESS_AREAS, self.price.access_cycles, strict=True))

    @property
    def macs(self) -> int:
        return self.price.macs

    @property
    def encoded_weight_bytes(self) -> int:
        return self.price.encoded_weight_bytes

    @property
    def weight_buffer_bytes(self) -> int:
        return self.price.weight_buffer_bytes

    @property
    def ofm_block(self) -> Shape4D:
        return self.block_config.ofm_block

    def __str__(self) -> str:
        return (f"op {self.op_index} stripe {self.stripe.height}/{self.stripe.count} block "
                f"{self.block_config.old_style()} cycles {self.price.total_cycles:g}")


def option_key(option: OpOption) -> tuple[int, int, int, int]:
    """(stripe height, OFM block height, width, depth): identifies an option within its op."""
    blk = option.block_config.ofm_block
    return (option.stripe.ofm.height, blk.height, blk.width, blk.depth)


# --------------------------------------------------------------------------------------------------------------
# Placement (where the op's operands live while it runs)


def weights_buffered_by_default(arch: PricedArchitecture, op: NpuOp) -> bool:
    """Vela buffers an op's weights in fast storage when they sit in a slower, separate permanent memory, except
    for fully connected ops (their weights are read once, in place)."""
    return op.op_type != "FullyConnected" and weights_need_dma(arch, op)


def _placement(arch: PricedArchitecture, fm: FeatureMap,
               placements: Mapping[FeatureMap, Any] | None) -> TensorPlacement:
    """Memory and layout of a feature map: constants in permanent storage, otherwise ``placements`` or the
    architecture's feature-map storage in NHWC."""
    if fm.is_const:
        return TensorPlacement(arch.permanent_storage_mem_area, TensorFormat.NHWC)
    place = placements.get(fm) if placements is not None else None
    if place is None:
        return TensorPlacement(arch.feature_map_storage_mem_area, TensorFormat.NHWC)
    return TensorPlacement(place.mem_area, place.format)


# --------------------------------------------------------------------------------------------------------------
# Stripes


def stripe_choice(arch: PricedArchitecture, op: NpuOp, height: int) -> StripeChoice:
    """The stripes of ``op`` at OFM stripe ``height`` (clamped to 1..OFM height) and Vela's block for it."""
    full = op.ofm.shape
    height = max(1, min(int(height), full.height))
    ofm = full.with_height(height)
    ifm, ifm2 = ifm_stripes(op, ofm)
    config = find_block_config(arch, ofm_shape=ofm, ifm_shape=ifm, ifm2_shape=ifm2, **op_block_inputs(op))
    vela_block = None
    if config is not None:
        blk = config.ofm_block
        vela_block = (blk.height, blk.width, blk.depth)
    return StripeChoice(
        op_index=op.index, ofm=ofm, ifm=ifm, ifm2=ifm2, count=ceil_div(full.height, height),
        ofm_bytes=brick_padded_bytes(ofm, op.ofm.tensor.dtype.size_in_bytes),
        ifm_bytes=brick_padded_bytes(ifm, op.ifm.tensor.dtype.size_in_bytes),
        ifm2_bytes=(brick_padded_bytes(ifm2, op.ifm2.tensor.dtype.size_in_bytes)
                    if op.ifm2 is not None and ifm2 is not None else 0),
        vela_block=vela_block,
    )


# --------------------------------------------------------------------------------------------------------------
# Pricing one block config


@dataclass(frozen=True)
class _OpContext:
    """Everything about an op's pricing that does not depend on the block config."""

    op: NpuOp
    query: perf.PerformanceQuery  # config left as None
    buffered: bool
    lut: perf.DmaTransfer | None
    memcpy: perf.DmaTransfer | None


def one_row_blocks_differ(arch: PricedArchitecture, op: NpuOp) -> bool:
    """Whether a one-row OFM stripe of ``op`` has block configs of its own: a 1-high kernel on 2x2 micro-block
    hardware accumulates a 1-high stripe in 1-high blocks."""
    return op.kernel.height == 1 and arch.ofm_ublock.height == 2 and op.ofm.shape.height != 1


def _op_context(arch: PricedArchitecture, op: NpuOp, placements: Mapping[FeatureMap, Any] | None,
                weights_buffered: bool | None) -> _OpContext:
    buffered = weights_buffered_by_default(arch, op) if weights_buffered is None else bool(weights_buffered)
    buffered = buffered and op.weights is not None
    const_area = arch.fast_storage_mem_area if buffered else arch.permanent_storage_mem_area
    inputs = price_inputs(arch, op, None, ifm=_placement(arch, op.ifm.tensor, placements),
                          ofm=_placement(arch, op.ofm.tensor, placements),
                          ifm2=_placement(arch, op.ifm2.tensor, placements) if op.ifm2 is not None else None,
                          const_area=const_area)
    return _OpContext(op, inputs.query, buffered, inputs.lut, inputs.memcpy)


def _weight_stream(arch: PricedArchitecture, ctx: _OpContext,
                   block_depth: int) -> tuple[perf.WeightStream | None, int]:
    op = ctx.op
    if op.weights is None:
        return None, 0
    encoded = wts.encode_op_weights(arch, op, block_depth, (0, op.ofm.shape.depth))
    if not ctx.buffered:
        return pricing_weight_stream(arch, op, encoded, perf.BufferKind.NONE), encoded.total_bytes
    transfer = perf.measure_mem2mem_cycles(arch, arch.permanent_storage_mem_area, arch.fast_storage_mem_area,
                                           encoded.total_bytes)
    return pricing_weight_stream(arch, op, encoded, perf.BufferKind.SINGLE, transfer), encoded.total_bytes


def _estimate(arch: PricedArchitecture, ctx: _OpContext, query: perf.PerformanceQuery,
              weights: perf.WeightStream | None, costs: tuple[perf.CycleCost, ...] | None = None
              ) -> perf.OpPerformance:
    """One option's estimate as the evaluator will price it (under ``Estimator.BOTH``: both models, weighted).
    ``costs``: its compute costs (``_compute_costs``) where worked out already."""
    op = ctx.op
    if arch.estimator is Estimator.BOTH:
        legacy_arch, default_arch = blend_parts(arch)
        a = _estimate(legacy_arch, ctx, query, weights, costs[:1] if costs is not None else None)
        b = _estimate(default_arch, ctx, query, weights, costs[1:] if costs is not None else None)
        wa, wb = arch.blend_weights
        return perf.OpPerformance(
            npu_cycles=wa * a.npu_cycles + wb * b.npu_cycles, total_cycles=wa * a.total_cycles + wb * b.total_cycles,
            access_cycles={m: wa * a.access_cycles.get(m, 0.0) + wb * b.access_cycles.get(m, 0.0)
                           for m in dict.fromkeys([*a.access_cycles, *b.access_cycles])},
            macs=a.macs, op_cycles=wa * a.op_cycles + wb * b.op_cycles)
    cost = costs[0] if costs is not None else None
    if arch.estimator is Estimator.VELA_DEFAULT:
        # ranked as the evaluator will price it: the default core rewards other blocks (those dividing the OFM)
        scales = weights.scale_element_bytes * op.ofm.shape.depth if weights is not None else 0
        return perf_default.estimate_full_op_performance(
            arch, op.op_type, op.activation, query, weights=weights,
            weight_bytes=max(weights.encoded_bytes - scales, 0) if weights is not None else 0,
            lut=ctx.lut, memcpy=ctx.memcpy, cost=cost)
    return perf.estimate_full_op_performance(arch, op.op_type, op.reported_activation, query, weights=weights,
                                             lut=ctx.lut, memcpy=ctx.memcpy, cost=cost)


def _compute_costs(arch: PricedArchitecture, ctx: _OpContext, query: perf.PerformanceQuery
                   ) -> tuple[perf.CycleCost, ...]:
    """The compute cost of ``query`` under each cost model ``_estimate`` prices with (legacy, then default)."""
    op = ctx.op
    if arch.estimator is Estimator.BOTH:
        legacy_arch, default_arch = blend_parts(arch)
        return (*_compute_costs(legacy_arch, ctx, query), *_compute_costs(default_arch, ctx, query))
    if arch.estimator is Estimator.VELA_DEFAULT:
        return (perf_default.measure_cycle_cost(arch, op.op_type, op.activation, query),)
    return (perf.measure_cycle_cost(arch, op.op_type, op.reported_activation, query),)


def _compute_floor(arch: PricedArchitecture, costs: tuple[perf.CycleCost, ...]) -> float:
    """The least total an option with these compute costs can be priced at: every model's total is at least its
    compute time (nothing hides under a previous pass here), and ``Estimator.BOTH`` blends them."""
    if arch.estimator is Estimator.BOTH:
        wa, wb = arch.blend_weights
        return wa * costs[0].op_cycles + wb * costs[1].op_cycles
    return float(costs[0].op_cycles)


def _price(arch: PricedArchitecture, ctx: _OpContext, config: BlockConfig,
           streams: dict[int, tuple[perf.WeightStream | None, int]],
           costs: tuple[perf.CycleCost, ...] | None = None) -> OptionPrice:
    depth = config.ofm_block.depth
    stream = streams.get(depth)
    if stream is None:
        stream = streams[depth] = _weight_stream(arch, ctx, depth)
    weights, encoded_bytes = stream
    query = with_block_config(ctx.query, config)
    result = _estimate(arch, ctx, query, weights, costs)
    access = tuple(result.access_cycles.get(m, 0.0) for m in ACCESS_AREAS)
    return OptionPrice(
        op_cycles=int(result.op_cycles), npu_cycles=result.npu_cycles, access_cycles=access,
        total_cycles=result.total_cycles, macs=result.macs, encoded_weight_bytes=encoded_bytes,
        weight_buffer_bytes=round_up(encoded_bytes, ALLOCATION_QUANTUM) if ctx.buffered else 0,
    )


def with_block_config(query: perf.PerformanceQuery, config: BlockConfig) -> perf.PerformanceQuery:
    """A copy of ``query`` for another block config (skipping dataclass ``replace``'s re-validation: this runs for
    every block config priced)."""
    clone = object.__new__(perf.PerformanceQuery)
    clone.__dict__.update(query.__dict__)
    clone.__dict__["config"] = config
    return clone


def striped_op_cycles(arch: PricedArchitecture, op: NpuOp, option: OpOption,
                      placements: Mapping[FeatureMap, Any] | None = None) -> float:
    """Compute cycles of the op run stripe by stripe: one stripe's estimate (stripe shapes, the option's block
    config) times the number of stripes. Not Vela's price (see the module docstring); for solvers that want
    the overhead of partial blocks at stripe edges to show."""
    ctx = _op_context(arch, op, placements, None)
    query = with_block_config(ctx.query, option.block_config)
    stripe = option.stripe
    query.__dict__.update(ifm_shape=stripe.ifm, ofm_shape=stripe.ofm, ifm2_shape=stripe.ifm2)
    cost = perf.measure_cycle_cost(arch, op.op_type, op.reported_activation, query)
    return float(cost.op_cycles) * stripe.count


# --------------------------------------------------------------------------------------------------------------
# Enumeration


_RESULTS: OrderedDict[tuple, tuple[Any, NpuOp, tuple[OpOption, ...]]] = OrderedDict()
_RESULTS_LIMIT = 512


def clear_caches() -> None:
    """Forget memoised option lists (block-config and weight-encoding caches belong to their modules)."""
    _RESULTS.clear()
    _COMPUTE_COSTS.clear()


def _placement_signature(arch: PricedArchitecture, op: NpuOp, placements: Mapping[FeatureMap, Any] | None) -> tuple:
    fms = [op.ifm.tensor, op.ofm.tensor] + ([op.ifm2.tensor] if op.ifm2 is not None else [])
    return tuple(_placement(arch, fm, placements) for fm in fms)


def _normalise_heights(op: NpuOp, stripe_heights: Iterable[int] | None) -> tuple[int, ...]:
    full = op.ofm.shape.height
    if stripe_heights is None:
        return tuple(range(1, full + 1))
    return tuple(sorted({max(1, min(int(h), full)) for h in stripe_heights}))


def price_options(arch: PricedArchitecture, op: NpuOp, *, stripe_heights: Iterable[int] | None = None,
                  placements: Mapping[FeatureMap, Any] | None = None,
                  weights_buffered: bool | None = None) -> tuple[OpOption, ...]:
    """Every (block config x OFM stripe height) option of ``op``, priced.

    ``stripe_heights`` defaults to every height 1..OFM height (the heights Vela's cascade search can give an op:
    its own stripe candidates, and its consumer's stripe times the consumer's stride); heights are clamped to
    that range. ``placements`` maps feature maps to objects with ``mem_area`` and ``format`` (e.g. the
    ``TensorPlacement`` values of a schedule); unlisted feature maps live in feature-map storage, NHWC.
    ``weights_buffered`` says whether the weights are read from a fast-storage buffer (default: Vela's rule,
    :func:`weights_buffered_by_default`).

    Options come grouped by stripe height (ascending), each group in Vela's block search order. Within a group
    exactly one option is Vela's choice, unless no block config fits at that height (then the group is empty).
    """
    heights = _normalise_heights(op, stripe_heights)
    # Keyed by identity (ops may carry unhashable attributes); the entry keeps arch and op alive so the ids
    # cannot be reused while it exists.
    key = (id(arch), id(op), heights, _placement_signature(arch, op, placements), weights_buffered)
    entry = _RESULTS.get(key)
    if entry is not None and entry[0] is arch and entry[1] is op:
        _RESULTS.move_to_end(key)
        return entry[2]
    result = _price_options(arch, op, heights, placements, weights_buffered)
    _RESULTS[key] = (arch, op, result)
    if len(_RESULTS) > _RESULTS_LIMIT:
        _RESULTS.popitem(last=False)
    return result


def _stripe_groups(arch: PricedArchitecture, op: NpuOp, heights: tuple[int, ...]
                   ) -> list[tuple[StripeChoice, list[BlockConfig]]]:
    """Per stripe height, its stripes and the block configs that fit it, in Vela's block search order."""
    block_inputs = op_block_inputs(op)
    full = op.ofm.shape
    ifm2_full = op.ifm2.shape if op.ifm2 is not None else None
    # Which blocks fit in SHRAM does not depend on the stripe height, except that a stripe caps the block height
    # (and a 1-high stripe with a 1-high kernel on 2-high micro-block hardware accumulates in 1-high blocks).
    # So the whole OFM's candidates, capped per stripe, are every stripe's candidates.
    everything = enumerate_block_configs(arch, ofm_shape=full, ifm_shape=op.ifm.shape, ifm2_shape=ifm2_full,
                                         **block_inputs)
    configs = [c.config for c in everything]
    config_heights = [c.ofm_block.height for c in configs]
    ub_height = arch.ofm_ublock.height
    max_height = arch.ofm_block_max.height
    groups = []
    for height in heights:
        stripe = stripe_choice(arch, op, height)
        if height == 1 and one_row_blocks_differ(arch, op):
            group = [c.config for c in enumerate_block_configs(arch, ofm_shape=stripe.ofm, ifm_shape=stripe.ifm,
                                                               ifm2_shape=stripe.ifm2, **block_inputs)]
        elif height >= max_height or height == full.height:
            group = configs
        else:
            cap = round_up(height, ub_height)
            group = [c for c, h in zip(configs, config_heights, strict=True) if h <= cap]
        groups.append((stripe, group))
    return groups


def _dims(config: BlockConfig) -> tuple[int, int, int]:
    blk = config.ofm_block
    return (blk.height, blk.width, blk.depth)


def _price_options(arch: PricedArchitecture, op: NpuOp, heights: tuple[int, ...],
                   placements: Mapping[FeatureMap, Any] | None,
                   weights_buffered: bool | None) -> tuple[OpOption, ...]:
    ctx = _op_context(arch, op, placements, weights_buffered)
    streams: dict[int, tuple[perf.WeightStream | None, int]] = {}
    prices: dict[tuple[int, int, int], OptionPrice] = {}
    options: list[OpOption] = []
    append = options.append
    for stripe, group in _stripe_groups(arch, op, heights):
        vela = stripe.vela_block
        for config in group:
            dims = _dims(config)
            price = prices.get(dims)
            if price is None:
                price = prices[dims] = _price(arch, ctx, config, streams)
            append(OpOption(config, stripe, price, dims == vela))
    return tuple(options)


def cheapest_options(arch: PricedArchitecture, op: NpuOp, *, stripe_heights: Iterable[int] | None,
                     weights_buffered: bool, count: int) -> tuple[tuple[OpOption, ...], dict[int, OpOption]]:
    """What a candidate space takes of :func:`price_options` (feature maps where feature-map storage keeps them),
    without pricing every block config.

    Returns (the full-height options: the ``count`` first by total cycles, Vela's first on ties, of those
    :func:`drop_dominated` keeps, and Vela's own; per stripe height its fastest option, Vela's on ties, else the
    first in search order) — exactly those selected from ``price_options``' answer. No total is below its compute
    time, which costs about a third of a whole estimate (no weight encoding, no memory terms): block configs are
    priced cheapest compute time first, and only while that can still change the selection.
    """
    heights = _normalise_heights(op, stripe_heights)
    groups = _stripe_groups(arch, op, heights)
    ctx = _op_context(arch, op, None, weights_buffered)
    # A block's price is worked out with the first config of its dims in search order, as price_options does.
    first: dict[tuple[int, int, int], BlockConfig] = {}
    for _, group in groups:
        for config in group:
            first.setdefault(_dims(config), config)
    known = _known_compute_costs(arch, op, ctx.query)
    costs = {}
    for dims, config in first.items():
        cost = known.get(config)
        if cost is None:
            cost = known[config] = _compute_costs(arch, ctx, with_block_config(ctx.query, config))
        costs[dims] = cost
    floors = {dims: _compute_floor(arch, cost) for dims, cost in costs.items()}
    streams: dict[int, tuple[perf.WeightStream | None, int]] = {}
    prices: dict[tuple[int, int, int], OptionPrice] = {}

    def option(stripe: StripeChoice, config: BlockConfig) -> OpOption:
        dims = _dims(config)
        price = prices.get(dims)
        if price is None:
            price = prices[dims] = _price(arch, ctx, first[dims], streams, costs[dims])
        return OpOption(config, stripe, price, dims == stripe.vela_block)

    full: tuple[OpOption, ...] = ()
    fastest: dict[int, OpOption] = {}
    for stripe, group in groups:
        order = sorted(range(len(group)), key=lambda i: floors[_dims(group[i])])
        best: tuple[tuple[float, bool, int], OpOption] | None = None
        for i in order:
            if best is not None and floors[_dims(group[i])] > best[1].total_cycles:
                break
            candidate = option(stripe, group[i])
            rank = (candidate.total_cycles, not candidate.is_vela_choice, i)
            if best is None or rank < best[0]:
                best = (rank, candidate)
        if best is not None:
            fastest[stripe.height] = best[1]
        if stripe.is_full:
            full = _fastest_kept(stripe, group, [floors[_dims(c)] for c in group], option, count)
    return full, fastest


# Compute costs per (architecture, op type, activation, query without its block config), per block config: passes of
# one shape (repeated layers) share them. The entry keeps the architecture alive, so its id is not reused meanwhile.
_COMPUTE_COSTS: dict[tuple, tuple[PricedArchitecture, dict[BlockConfig, tuple[perf.CycleCost, ...]]]] = {}
_COMPUTE_COSTS_LIMIT = 4096


def _known_compute_costs(arch: PricedArchitecture, op: NpuOp, query: perf.PerformanceQuery
                         ) -> dict[BlockConfig, tuple[perf.CycleCost, ...]]:
    key = (id(arch), op.op_type, op.reported_activation, query)
    entry = _COMPUTE_COSTS.get(key)
    if entry is None or entry[0] is not arch:
        if len(_COMPUTE_COSTS) >= _COMPUTE_COSTS_LIMIT:
            _COMPUTE_COSTS.clear()
        entry = _COMPUTE_COSTS[key] = (arch, {})
    return entry[1]


def _fastest_kept(stripe: StripeChoice, group: list[BlockConfig], floors: list[float],
                  option: Callable[[StripeChoice, BlockConfig], OpOption], count: int) -> tuple[OpOption, ...]:
    """The ``count`` fastest options of ``group`` that ``drop_dominated`` keeps, and Vela's (``cheapest_options``).

    An option can only be beaten or equalled in every figure by one whose total is no larger, and every config
    whose floor is below a threshold is priced before the threshold passes it: so whether an option with a total
    below the threshold is kept is settled then, and is decided as ``pareto_front`` decides it, in order of its
    figures, against the options kept before it."""
    vela = [i for i, c in enumerate(group) if _dims(c) == stripe.vela_block]
    priced = {i: option(stripe, group[i]) for i in vela}
    order = sorted(range(len(group)), key=lambda i: floors[i])
    front: list[tuple[float, ...]] = []  # the figures of the options kept so far
    settled: list[int] = []  # below the threshold and kept (Vela's always)
    pending = [(priced[i].total_cycles, i) for i in priced]  # priced, not below a threshold yet: a heap by total
    heapq.heapify(pending)
    for k in range(len(order) + 1):
        threshold = floors[order[k]] if k < len(order) else math.inf
        newly: list[int] = []
        while pending and pending[0][0] < threshold:
            newly.append(heapq.heappop(pending)[1])
        newly.sort()
        rows = {i: _price_row(priced[i].price) for i in newly}
        for i in sorted(newly, key=rows.__getitem__):  # stable: of equal figures the first in search order
            row = rows[i]
            kept = _undominated(front, row)
            if kept:
                front.append(row)
            if kept or priced[i].is_vela_choice:
                settled.append(i)
        if newly and len(settled) >= count or k == len(order):
            fastest = sorted(sorted(settled), key=lambda i: (priced[i].total_cycles, not priced[i].is_vela_choice))
            chosen = set(fastest[:count])
            # in search order, so that drop_dominated keeps the same first of equal options again
            return tuple(priced[i] for i in sorted(priced) if i in chosen or i in vela)
        if order[k] not in priced:
            priced[order[k]] = option(stripe, group[order[k]])
            heapq.heappush(pending, (priced[order[k]].total_cycles, order[k]))
    raise AssertionError("unreachable: the last threshold settles every option")


def _undominated(front: list[tuple[float, ...]], row: tuple[float, ...]) -> bool:
    """Whether no row of ``front`` is at most ``row`` in every figure (loops, not nested generators: this runs for
    every option ``_fastest_kept`` places, against every option kept before it)."""
    for other in front:
        for f, r in zip(other, row, strict=True):
            if not f <= r:
                break
        else:
            return False
    return True


# --------------------------------------------------------------------------------------------------------------
# Selection helpers


def vela_choice(options: Sequence[OpOption], stripe_height: int | None = None) -> OpOption | None:
    """Vela's option among ``options`` (of one op): its block config at ``stripe_height`` (default: the full
    OFM height, i.e. the op not striped)."""
    for option in options:
        if not option.is_vela_choice:
            continue
        if option.stripe.is_full if stripe_height is None else option.stripe.ofm.height == stripe_height:
            return option
    return None


def _default_costs(option: OpOption) -> tuple[float, ...]:
    price = option.price
    stripe = option.stripe
    return (*_price_row(price), float(stripe.ifm_bytes), float(stripe.ifm2_bytes), float(stripe.ofm_bytes))


def _price_row(price: OptionPrice) -> tuple[float, ...]:
    return (price.total_cycles, price.npu_cycles, float(price.op_cycles), *price.access_cycles,
            float(price.encoded_weight_bytes), float(price.weight_buffer_bytes))


def _group_by_stripe(option: OpOption) -> object:
    return (option.stripe.op_index, option.stripe.ofm.height)


def _front_mask(table: np.ndarray) -> list[bool]:
    """Keep-mask over the rows of ``table`` (``pareto_front``)."""
    keep = [False] * len(table)
    for idx in pareto_front(table):
        keep[idx] = True
    return keep


def drop_dominated(options: Sequence[OpOption], *, costs: Callable[[OpOption], Sequence[float]] | None = None,
                   group: Callable[[OpOption], object] | None = _group_by_stripe) -> tuple[OpOption, ...]:
    """``options`` without those another option beats or equals in every cost and memory figure.

    ``costs`` gives the figures to compare (lower is better; default: total, NPU, compute and per-memory access
    cycles, encoded weight bytes, weight buffer and stripe bytes). Options are compared within a ``group``
    (default: the same op and stripe height, since a cascade fixes an op's stripe height, so options at
    different heights are not interchangeable); pass ``group=None`` to compare all. Of options equal in every
    figure the first stays. Vela's choices are always kept. Order is preserved.
    """
    groups: dict[object, list[int]] = {}
    for i, option in enumerate(options):
        groups.setdefault(group(option) if group is not None else None, []).append(i)
    # With the default figures and groups, the stripe figures are the same throughout a group, so only the
    # prices decide, and stripe heights that offer the same block configs share one answer.
    by_prices = costs is None and group is _group_by_stripe
    rows: dict[int, tuple[float, ...]] = {}
    masks: dict[tuple[int, ...], list[bool]] = {}
    keep = [False] * len(options)
    for members in groups.values():
        members_options = [options[i] for i in members]
        if by_prices:
            key = tuple(id(o.price) for o in members_options)
            mask = masks.get(key)
            if mask is None:
                table = []
                for option in members_options:
                    row = rows.get(id(option.price))
                    if row is None:
                        row = rows[id(option.price)] = _price_row(option.price)
                    table.append(row)
                mask = masks[key] = _front_mask(np.asarray(table, dtype=np.float64))
        else:
            cost_fn = costs if costs is not None else _default_costs
            mask = _front_mask(np.asarray([cost_fn(o) for o in members_options], dtype=np.float64))
        for i, option, kept in zip(members, members_options, mask, strict=True):
            keep[i] = kept or option.is_vela_choice
    return tuple(o for o, k in zip(options, keep, strict=True) if k)


def dominated(options: Sequence[OpOption], *, costs: Callable[[OpOption], Sequence[float]] | None = None,
              group: Callable[[OpOption], object] | None = _group_by_stripe) -> tuple[OpOption, ...]:
    """The options :func:`drop_dominated` drops (same arguments)."""
    kept = {id(o) for o in drop_dominated(options, costs=costs, group=group)}
    return tuple(o for o in options if id(o) not in kept)
