"""Candidates for the CP-SAT scheduler: ways to run an interval of consecutive passes of one subgraph.

A candidate fixes every choice for the passes ``start..end`` (positions in the subgraph's execution order): one
pass run whole (``start == end``, no cascade) or a cascade of several. What it leaves open is where the feature
maps on its boundary live (fast storage or their default area) and what the pass before it leaves as slack for
prefetching weights; its price is a table over exactly those, filled by the evaluator's own ``price_op``.

Where candidates come from (and how many, per subgraph of n passes):

* every pass alone: its best few block configs (``BLOCK_CONFIGS_PER_OP`` by cycles, ranked once with weights
  copied into one buffer and once with weights read in place, plus Vela's), each both ways: <= 2 x (2 x 3 + 1);
  in the quick first sweep over a large network (``vela_configs_only``), Vela's block config alone;
* the passes of the hint (the heuristic's schedule) and of Vela's MAX_BUFFERED schedule, verbatim: the hint is a
  solution of the model whenever it fits and avoids the artefact below, and Vela's own weight slicings are on
  offer;
* cascades: every run of 2..``MAX_CASCADE_LENGTH`` consecutive passes Vela's rules let cascade (cascadable kinds,
  single consumer, the consumer reads the producer's OFM as its IFM, brick-format stripes), at a few final stripe
  heights (1..``SMALL_STRIPES`` and the ``STRIPE_HEIGHTS`` largest powers of two above, below the OFM height),
  each pass with Vela's block config for its stripe or the fastest one that fits it, weights all buffered or all
  in place: <= n x (MAX_CASCADE_LENGTH - 1) x (SMALL_STRIPES + STRIPE_HEIGHTS) x 4;
* with ``joins`` (``--optimise Size``, or where nothing fits without them), runs also through residual joins and
  gates: an ADD/SUB/MUL holding a second operand made before the run, or reading one made inside it from its
  producer's rolling buffer, deepened for the rows between (``rules.reads_lagged``), so that the skip of a
  residual block or the gated map of a swish need not be whole; such runs take one-row stripes only, and every
  rolling buffer the rows Vela's pull order needs (``rules.pulled_buffer_height``);
* and every such run with smallest stripes, for memory (Vela's block configs, weights buffered or in place:
  <= n x (MAX_CASCADE_LENGTH - 1) x 4; with joins up to ``MAX_JOINED_LENGTH`` passes long): Vela's minimal
  stripes (each pass as many rows as the next pass's vertical stride: the stripes of its ``--optimise Size``
  schedule) and one-row stripes (two for an upscaling pass), which give the smallest rolling buffers; Vela never
  proposes them, but its backend compiles them.

Generated buffered weights are not pre-buffered (their buffer is live from their own step): Vela's estimate
credits the prefetch under the previous pass either way, so a pre-buffered variant would cost the same and only
take more memory. Why cascades stop at ``MAX_CASCADE_LENGTH`` and what the smallest stripes buy is measured in
docs/guide/architecture.md ("The CP-SAT candidate space").

Dominated block configs are dropped before ranking (``drop_dominated``). Candidates that would profit from an
artefact of Vela's estimate are kept out of the model, the hint's own included: a cascaded pass with buffered
weights is priced with its weight transfer at zero but still credited with the part of it hidden under the
previous pass, which can price it below its own compute time. Keeping the candidate space independent of the
hint this way also keeps it independent of the memory limit, so more memory never shrinks it. The hint stays the
fallback: the result is the better of the two by the evaluator.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from npusched.ir import FeatureMap, NpuOp, ResamplingMode, Shape4D
from npusched.lowering.graph import NpuSubgraph
from npusched.schedule.cascades import SchedOp, elementwise_cascadable, rolling_buffer_shape
from npusched.schedule.evaluator import TensorUse
from npusched.schedule.memory_layout import weight_buffer_bytes
from npusched.schedule.options import OpOption, StripeChoice, cheapest_options, drop_dominated
from npusched.schedule.pass_kind import pass_kind
from npusched.schedule.pricing import BlendedPrice, PartialPrice, Slack, partial_price_op
from npusched.schedule.rules import (
    cascade_reach,
    cascade_stripes,
    ifm_stripes,
    lagged_buffer_height,
    minimal_stripe_height,
    pulled_buffer_height,
    rolling_buffer_bytes,
    rows_past_the_kernel,
    weights_need_dma,
)
from npusched.schedule.schedule import EncodedWeightsRef, OpSchedule, Schedule, TensorPlacement, WeightBuffering
from npusched.target import weights as wts
from npusched.target.block_config import BlockConfig, find_block_config_for_op
from npusched.target.estimators import PricedArchitecture
from npusched.target.performance import BufferKind

BLOCK_CONFIGS_PER_OP = 3
MAX_CASCADE_LENGTH = 8
# With joins, runs with smallest stripes reach this far: a stage of residual blocks from the network input.
MAX_JOINED_LENGTH = 16
STRIPE_HEIGHTS = 3
SMALL_STRIPES = 8

# A pass's pricing (``price_pass_choices``): full-height options per weight buffering; (buffered, stripe height)
# -> fastest block config.
PassChoices = tuple[dict[bool, tuple[OpOption, ...]], dict[tuple[bool, int], Any]]


@dataclass(frozen=True)
class Candidate:
    """One way to run passes ``start..end`` of subgraph ``sg``.

    ``boundary`` are the feature maps it reads from or writes to outside itself; ``internal`` those that live
    only in its rolling buffers. Memory of its own (rolling and weight buffers) is split by step: ``mem_before``
    at the odd step before it (pre-buffered weights), ``mem_at`` at its own step, ``mem_after`` at the odd step
    after it. ``reuse`` is (IFM, OFM, bytes) when a lone elementwise pass may write its OFM over its IFM.
    """

    sg: int
    start: int
    end: int
    ops: tuple[OpSchedule, ...]
    source: str
    boundary: tuple[FeatureMap, ...]
    internal: frozenset[FeatureMap]
    mem_before: int
    mem_at: int
    mem_after: int
    reuse: tuple[FeatureMap, FeatureMap, int] | None = None
    key: tuple = field(default=(), compare=False)


def op_schedule(arch: PricedArchitecture, op: NpuOp, config: BlockConfig, ofm_stripe: Shape4D, ifm_stripe: Shape4D,
                ifm2_stripe: Shape4D | None, *, buffered: bool, cascade: int | None = None,
                rolling: Shape4D | None = None, pre_buffered: bool = False) -> OpSchedule:
    """A pass with whole-depth weights, read in place or copied whole into one fast-storage buffer."""
    encoded = None
    buffering = WeightBuffering()
    if op.weights is not None:
        enc = wts.encode_op_weights(arch, op, config.ofm_block.depth, (0, ofm_stripe.depth))
        encoded = EncodedWeightsRef.of(enc, config.ofm_block.depth)
        if buffered:
            buffering = WeightBuffering(BufferKind.SINGLE, (0, ofm_stripe.depth), (enc.double_buffer_sizes[0],),
                                        pre_buffered)
    return OpSchedule(op_index=op.index, block_config=config, ofm_stripe=ofm_stripe, ifm_stripe=ifm_stripe,
                      ifm2_stripe=ifm2_stripe, cascade=cascade, weight_buffering=buffering, encoded_weights=encoded,
                      rolling_buffer=rolling)


@dataclass
class SubgraphFacts:
    """What candidate building needs to know about one subgraph."""

    index: int
    sg: NpuSubgraph
    sched_ops: tuple[SchedOp, ...]
    use: TensorUse
    reuse: dict[int, tuple[FeatureMap, FeatureMap, int]]  # position -> (ifm, ofm, bytes) when fusable
    joins: bool = False  # cascades through residual joins and gates (``sched_ops`` built with ``joins`` too)
    # position -> its options at full height per weight buffering, and (buffered, height) -> fastest block config
    priced: dict[int, PassChoices] = field(default_factory=dict)
    # Cascades share their passes' stripes, so each is worked out once: (position, OFM stripe) -> its IFM stripes
    # and -> Vela's block config for it; (position, stripe, weights buffered, id of the block config) -> (that
    # config, the pass before ``make_candidate`` places it in its cascade).
    ifm_stripes: dict[tuple[int, Shape4D], tuple[Shape4D, Shape4D | None]] = field(default_factory=dict)
    vela_configs: dict[tuple[int, Shape4D], BlockConfig | None] = field(default_factory=dict)
    passes: dict[tuple[int, Shape4D, bool, int], tuple[BlockConfig, OpSchedule]] = field(default_factory=dict)

    @cached_property
    def cascade_runs(self) -> tuple[tuple[int, int, tuple[Shape4D, ...]], ...]:
        """Every cascade of the module docstring Vela's rules allow in the subgraph, as (start, end, OFM stripe
        of each pass), without duplicates."""
        return tuple(self._run_kinds)

    @cached_property
    def minimal_only(self) -> frozenset[tuple[int, int, tuple[Shape4D, ...]]]:
        """The runs with minimal or one-row stripes that no final stripe height gives: they are there for memory,
        so they take Vela's block configs only (half as many candidates keeps the model's solve time)."""
        return frozenset(run for run, derived in self._run_kinds.items() if not derived)

    @cached_property
    def link_reach(self) -> tuple[int | None, ...]:
        """Per position k < n - 1: None when pass k + 1 may not follow pass k in a cascade, else the last position
        a cascade through them must reach (k + 1, or with ``joins`` the last pass reading k's OFM lagged)."""
        return tuple(cascade_reach(self.sched_ops, k, self.joins) for k in range(len(self.sched_ops) - 1))

    @cached_property
    def _run_kinds(self) -> dict[tuple[int, int, tuple[Shape4D, ...]], bool]:
        """Every run of ``cascade_runs`` -> whether a final stripe height gives its stripes."""
        n = len(self.sg.ops)
        reach = self.link_reach
        runs: dict[tuple[int, int, tuple[Shape4D, ...]], bool] = {}
        longest = MAX_JOINED_LENGTH if self.joins else MAX_CASCADE_LENGTH
        # Passes that cascade only with joins (residual ADDs and SUBs holding a map).
        joined = [self.joins and sop.cascadable_kind and not elementwise_cascadable(sop.op, held_operands=True)
                  for sop in self.sched_ops]
        for start in range(n):
            end = must_reach = start
            through_join = joined[start]
            while end + 1 < n and end - start + 1 < longest and (link := reach[end]) is not None:
                end += 1
                must_reach = max(must_reach, link)
                through_join = through_join or joined[end] or link > end
                if end < must_reach:
                    continue  # a pass reading a map of the run lagged is not in it yet
                # Runs through joins are there for memory: smallest stripes only (cheap to consider).
                for h in stripe_heights(self.sched_ops[end].ofm_shape.height) \
                        if end - start < MAX_CASCADE_LENGTH and not through_join else ():
                    if (stripes := _cascade_stripes(self, start, end, h)) is not None:
                        runs[start, end, tuple(stripes)] = True
                for follow_stride in (False,) if through_join else (True, False):  # Vela's has no joins
                    if (stripes := _minimal_stripes(self, start, end, follow_stride)) is not None:
                        runs.setdefault((start, end, tuple(stripes)), False)
        return runs

    @cached_property
    def stripe_heights(self) -> dict[int, tuple[int, ...]]:
        """Per position, its full OFM height and every stripe height a cascade through it gives it: the same
        whichever window asks, so pricing is shared between windows."""
        heights: dict[int, set[int]] = {pos: {op.ofm.shape.height} for pos, op in enumerate(self.sg.ops)}
        for start, _, stripes in self.cascade_runs:
            for k, stripe in enumerate(stripes):
                heights[start + k].add(stripe.height)
        return {pos: tuple(sorted(hs)) for pos, hs in heights.items()}


def make_candidate(facts: SubgraphFacts, start: int, ops: Sequence[OpSchedule], source: str) -> Candidate:
    """A candidate from explicit pass choices (rolling buffers filled in where missing)."""
    end = start + len(ops) - 1
    sg_ops = facts.sg.ops
    internal: set[FeatureMap] = set()
    fixed: list[OpSchedule] = []
    cascade = sg_ops[end].index if len(ops) > 1 else None
    for k, op_sched in enumerate(ops):
        if len(ops) > 1:
            rolling = op_sched.rolling_buffer
            if k > 0:
                internal.add(sg_ops[start + k].ifm.tensor)
                if rolling is None:
                    rolling = _rolling_buffer(facts, start, ops, k)
            else:
                rolling = None
            op_sched = replace(op_sched, cascade=cascade, rolling_buffer=rolling)
        fixed.append(op_sched)
    boundary: list[FeatureMap] = []
    for k in range(len(ops)):
        op = sg_ops[start + k]
        for access in (op.ifm, op.ifm2):
            if access is not None and not access.tensor.is_const and access.tensor not in internal:
                if access.tensor not in boundary:
                    boundary.append(access.tensor)
    last_ofm = sg_ops[end].ofm.tensor
    if last_ofm not in boundary:
        boundary.append(last_ofm)
    before = at = after = 0
    for k, op_sched in enumerate(fixed):
        held = weight_buffer_bytes(op_sched.weight_buffering)
        before, at, after = before + held.before, at + held.at, after + held.after
        if k > 0:
            fm = sg_ops[start + k].ifm.tensor
            assert op_sched.rolling_buffer is not None  # every cascaded pass after the first has one
            size = rolling_buffer_bytes(op_sched.rolling_buffer, fm.dtype.size_in_bytes)
            at += size
            after += size
    reuse = facts.reuse.get(start) if len(ops) == 1 else None
    if start == 0:
        before = 0  # a pre-buffer of the first pass starts at step 0 with everything else
    key = (start, tuple(fixed))
    return Candidate(facts.index, start, end, tuple(fixed), source, tuple(boundary), frozenset(internal),
                     before, at, after, reuse, key)


def _rolling_buffer(facts: SubgraphFacts, start: int, ops: Sequence[OpSchedule], k: int) -> Shape4D:
    """The rolling buffer pass ``start + k`` of a cascade reads its IFM from: Vela's size; with joins the rows
    Vela's pull order needs (``rules.pulled_buffer_height``), deepened to the rows the passes reading it lagged,
    later in the cascade, still need (``rules.lagged_buffer_height``)."""
    shape = rolling_buffer_shape(ops[k - 1].ofm_stripe, ops[k].ifm_stripe)
    producer = start + k - 1
    full_height = facts.sg.ops[producer].ofm.shape.height
    if facts.joins:
        shape = shape.with_height(pulled_buffer_height(ops[k - 1].ofm_stripe.height, ops[k].ifm_stripe.height,
                                                       full_height, rows_past_the_kernel(facts.sg.ops[start + k])))
    for reader in facts.sched_ops[producer].dependants[1:]:
        if reader > start + len(ops) - 1:
            continue  # not in this cascade: make_candidate's caller keeps such runs out
        heights = [ops[p - start].ofm_stripe.height for p in range(producer, reader + 1)]
        kernels = [facts.sg.ops[p].kernel.area_height() for p in range(producer + 1, reader)]
        shape = shape.with_height(max(shape.height, lagged_buffer_height(heights, kernels, full_height)))
    return shape


def single_candidates(arch: PricedArchitecture, facts: SubgraphFacts, pos: int,
                      options: Mapping[bool, Sequence[OpOption]]) -> list[Candidate]:
    """A pass alone: its best few block configs (``options``: its full-height options per weight buffering),
    each with every weight buffering of ``_lone_pass``."""
    chosen: list[OpOption] = []
    for group in options.values():
        ranked = sorted(drop_dominated(group), key=lambda o: (o.total_cycles, not o.is_vela_choice))
        chosen += ranked[:BLOCK_CONFIGS_PER_OP] + [o for o in group if o.is_vela_choice]
    seen: set = set()
    out = []
    for option in chosen:
        dims = option.block_config.ofm_block
        if dims in seen:
            continue
        seen.add(dims)
        out.extend(_lone_pass(arch, facts, pos, option.block_config))
    return out


def _lone_pass(arch: PricedArchitecture, facts: SubgraphFacts, pos: int, config: BlockConfig) -> list[Candidate]:
    """A pass alone with ``config``, weights in place or in one buffer."""
    op = facts.sg.ops[pos]
    ifm2 = op.ifm2.shape if op.ifm2 is not None else None
    return [make_candidate(facts, pos, (op_schedule(arch, op, config, op.ofm.shape, op.ifm.shape, ifm2,
                                                    buffered=buffered),), "single")
            for buffered in ((False, True) if weights_need_dma(arch, op) else (False,))]


def vela_single_candidates(arch: PricedArchitecture, facts: SubgraphFacts, pos: int) -> list[Candidate]:
    """A pass alone with Vela's block config for its whole OFM (see ``_lone_pass``)."""
    config = find_block_config_for_op(arch, facts.sg.ops[pos])
    return _lone_pass(arch, facts, pos, config) if config is not None else []


def cascade_links(facts: SubgraphFacts) -> list[bool]:
    """links[k]: may pass k+1 join a cascade with pass k (Vela's rules that do not depend on the stripe, with
    the facts' joins)."""
    return [reach is not None for reach in facts.link_reach]


def _cascade_stripes(facts: SubgraphFacts, start: int, end: int, final_height: int) -> list[Shape4D] | None:
    """OFM stripes of passes start..end derived backwards from the last pass's stripe height (Vela's rule:
    each producer's stripe is its consumer's stripe times the consumer's vertical stride). A nearest-neighbour
    upscaling pass takes even stripes only, as in Vela's min schedule: an odd one makes Vela's command stream
    address a row before its IFM ("Negative address offset")."""
    last = facts.sg.ops[end]
    if last.resampling_mode == ResamplingMode.NEAREST and final_height % 2:
        return None
    return cascade_stripes([sop.op for sop in facts.sched_ops[start:end + 1]], final_height)


def _minimal_stripes(facts: SubgraphFacts, start: int, end: int, follow_stride: bool) -> list[Shape4D] | None:
    """Smallest OFM stripes of passes start..end: with ``follow_stride`` as Vela's minimal (``--optimise Size``)
    schedule sets them (as many rows as the next pass steps over), else one row; even for an upscaling pass."""
    sops = facts.sched_ops
    stripes = []
    for pos in range(start, end + 1):
        after = sops[pos + 1].op if follow_stride and pos + 1 < len(sops) else None
        height = minimal_stripe_height(sops[pos].op, after)  # without a next pass: one row
        if height >= sops[pos].ofm_shape.height:
            return None  # that pass would not be striped
        stripes.append(sops[pos].ofm_shape.with_height(height))
    return stripes


def cascade_candidate(arch: PricedArchitecture, facts: SubgraphFacts, start: int, stripes: Sequence[Shape4D],
                      buffered: bool,
                      fastest: dict[tuple[int, bool, int], Any] | None = None) -> Candidate | None:
    """A cascade of passes from ``start`` with these OFM ``stripes``; each pass takes Vela's block config for its
    stripe, or with ``fastest`` ((position, buffered, stripe height) -> block config) the one that fits its stripe
    with the lowest price."""
    ops = []
    for k, stripe in enumerate(stripes):
        pos = start + k
        op = facts.sg.ops[pos]
        buf = buffered and weights_need_dma(arch, op)
        inputs = facts.ifm_stripes.get((pos, stripe))
        if inputs is None:
            inputs = facts.ifm_stripes[pos, stripe] = ifm_stripes(op, stripe)
        ifm_stripe, ifm2_stripe = inputs
        if fastest is not None:
            config = fastest.get((pos, buf, stripe.height))
        elif (pos, stripe) in facts.vela_configs:
            config = facts.vela_configs[pos, stripe]
        else:
            config = facts.vela_configs[pos, stripe] = find_block_config_for_op(arch, op, stripe, ifm_stripe,
                                                                                ifm2_stripe)
        if config is None:
            return None
        built = facts.passes.get((pos, stripe, buf, id(config)))
        if built is None or built[0] is not config:
            built = facts.passes[pos, stripe, buf, id(config)] = (
                config, op_schedule(arch, op, config, stripe, ifm_stripe, ifm2_stripe, buffered=buf))
        ops.append(built[1])
    return make_candidate(facts, start, ops, "cascade-fastest" if fastest is not None else "cascade")


def price_positions(arch: PricedArchitecture, facts: SubgraphFacts, positions: Iterable[int]
               ) -> tuple[dict[int, dict[bool, tuple[OpOption, ...]]], dict[tuple[int, bool, int], Any]]:
    """Every pass's options at full height that single candidates are made of (per weight buffering) and, for
    every stripe a cascade may give it, the cheapest block config that fits ((position, buffered, height) ->
    config). Each pass's block configs are priced once per weight buffering, for all its heights together, and
    kept in ``facts`` for other windows."""
    full: dict[int, dict[bool, tuple[OpOption, ...]]] = {}
    fastest: dict[tuple[int, bool, int], Any] = {}
    alike, todo = kinds_to_price(arch, facts, positions)
    for first in todo:
        priced_kind(arch, facts, first, price_pass_choices(arch, facts.sg.ops[first], facts.stripe_heights[first]))
    share_priced(facts, alike)
    for pos in positions:
        full[pos], best = facts.priced[pos]
        fastest.update(((pos, buf, h), config) for (buf, h), config in best.items())
    return full, fastest


def same_kind_positions(facts: SubgraphFacts, positions: Iterable[int]) -> dict[int, int]:
    """Each position -> the first of ``positions`` whose pass is of its kind with the same stripe heights (itself
    where none is): its choices are that pass's (``for_pass``)."""
    first: dict[Hashable, int] = {}
    return {pos: first.setdefault((pass_kind(facts.sg.ops[pos]) if SHARE_PASS_KINDS else pos,
                                   tuple(facts.stripe_heights[pos])), pos) for pos in positions}


def kinds_to_price(arch: PricedArchitecture, facts: SubgraphFacts, positions: Iterable[int]
                   ) -> tuple[dict[int, int], list[int]]:
    """(``same_kind_positions`` of the passes at ``positions`` not priced yet, the first pass of each kind still
    to price). A kind priced lately for the same hardware, in another graph of the run (which shares most passes
    with this one) or an earlier run, is taken from there."""
    alike = same_kind_positions(facts, [pos for pos in positions if pos not in facts.priced])
    todo = []
    for first in sorted(set(alike.values())):
        known = _PRICED_KINDS.get(_kind_key(arch, facts, first)) if SHARE_PASS_KINDS else None
        if known is None:
            todo.append(first)
        else:
            facts.priced[first] = for_pass(known, facts.sg.ops[first])
    return alike, todo


def priced_kind(arch: PricedArchitecture, facts: SubgraphFacts, pos: int, choices: PassChoices) -> None:
    """The pass at ``pos`` priced: kept in ``facts`` and for its kind (``kinds_to_price``)."""
    facts.priced[pos] = choices
    if SHARE_PASS_KINDS:
        if len(_PRICED_KINDS) >= _PRICED_KINDS_HELD:
            _PRICED_KINDS.clear()
        _PRICED_KINDS[_kind_key(arch, facts, pos)] = choices


def _kind_key(arch: PricedArchitecture, facts: SubgraphFacts, pos: int) -> tuple:
    # The architecture by identity (it is compared so): the key holds it, so its id is not reused meanwhile.
    return arch, pass_kind(facts.sg.ops[pos]), tuple(facts.stripe_heights[pos])


# Passes' choices priced lately, by (architecture, kind of pass, stripe heights).
_PRICED_KINDS: dict[tuple, PassChoices] = {}
_PRICED_KINDS_HELD = 1 << 12


def clear_caches() -> None:
    """Forget the passes' choices and prices kept for later networks (``kinds_to_price``, ``_shared_prices``)."""
    _PRICED_KINDS.clear()
    _SHARED_PRICES.clear()


def share_priced(facts: SubgraphFacts, alike: Mapping[int, int]) -> None:
    """Each position's choices from the first of its kind (``same_kind_positions``), priced already."""
    for pos, first in alike.items():
        if pos != first:
            facts.priced[pos] = for_pass(facts.priced[first], facts.sg.ops[pos])


def for_pass(choices: PassChoices, op: NpuOp) -> PassChoices:
    """Another pass's choices (of ``op``'s kind) as ``op``'s: its options name ``op``."""
    full, best = choices
    stripes: dict[int, StripeChoice] = {}

    def own(option: OpOption) -> OpOption:
        stripe = stripes.get(id(option.stripe))
        if stripe is None:
            stripe = stripes[id(option.stripe)] = replace(option.stripe, op_index=op.index)
        return replace(option, stripe=stripe)

    return {buf: tuple(own(option) for option in options) for buf, options in full.items()}, best


def price_pass_choices(arch: PricedArchitecture, op: NpuOp, heights: Sequence[int]) -> PassChoices:
    """A pass's options at full height per weight buffering (those ``single_candidates`` chooses from) and per
    (buffering, stripe height) its fastest block config (``cheapest_options``)."""
    full: dict[bool, tuple[OpOption, ...]] = {}
    best: dict[tuple[bool, int], Any] = {}
    for buf in ((True, False) if weights_need_dma(arch, op) else (False,)):
        full[buf], fastest = cheapest_options(arch, op, stripe_heights=heights, weights_buffered=buf,
                                              count=BLOCK_CONFIGS_PER_OP)
        best.update(((buf, height), option.block_config) for height, option in fastest.items())
    return full, best


def stripe_heights(full: int) -> list[int]:
    """Final stripe heights tried for a cascade ending in a pass ``full`` rows high: every height up to
    ``SMALL_STRIPES`` (where memory is tight, Vela's own choices fall) and the larger powers of two, the largest
    ``STRIPE_HEIGHTS`` of them. The same whatever the memory limit, so more memory never shrinks the choice."""
    powers = []
    h = SMALL_STRIPES * 2
    while h < full:
        powers.append(h)
        h *= 2
    return sorted({h for h in range(1, min(SMALL_STRIPES, full - 1) + 1)} | set(powers[-STRIPE_HEIGHTS:]))


def segments_of(schedule: Schedule, sg: NpuSubgraph) -> list[tuple[int, tuple[OpSchedule, ...]]]:
    """The (start position, pass choices) runs of a schedule over one subgraph: cascades and lone passes."""
    out: list[tuple[int, list[OpSchedule]]] = []
    for pos, op in enumerate(sg.ops):
        if not schedule.has_op(op.index):
            return []
        op_sched = schedule.op(op.index)
        if op_sched.block_config is None:
            return []
        if out and op_sched.cascade is not None and out[-1][1][-1].cascade == op_sched.cascade:
            out[-1][1].append(op_sched)
        else:
            out.append((pos, [op_sched]))
    return [(start, tuple(ops)) for start, ops in out]


def all_candidates(arch: PricedArchitecture, facts: SubgraphFacts, references: Sequence[Schedule],
                   hint_first: bool = False,
                   lo: int = 0, hi: int | None = None, vela_configs_only: bool = False,
                   priced: tuple[dict[int, Any], dict[tuple[int, bool, int], Any]] | None = None) -> list[Candidate]:
    """Every candidate of one subgraph (see the module docstring) that lies within positions ``lo..hi`` (default:
    the whole subgraph), without duplicates; with ``hint_first`` the first reference is the hint and its
    candidates are marked "hint". ``vela_configs_only`` keeps to Vela's block configs (no option is priced to
    find faster ones), for a first quick pass over a large network. ``priced`` is ``price_positions`` over
    ``lo..hi`` when the caller has it already."""
    hi = len(facts.sg.ops) - 1 if hi is None else hi
    cands: list[Candidate] = []
    for number, ref in enumerate(references):
        for start, ops in segments_of(ref, facts.sg):
            if lo <= start and start + len(ops) - 1 <= hi:
                cands.append(make_candidate(facts, start, ops, "hint" if number == 0 and hint_first else "reference"))
    runs = [(start, stripes, (start, end, stripes) not in facts.minimal_only)
            for start, end, stripes in facts.cascade_runs if lo <= start and end <= hi]
    fastest: dict[tuple[int, bool, int], Any] | None = None
    if vela_configs_only:
        for pos in range(lo, hi + 1):
            cands.extend(vela_single_candidates(arch, facts, pos))
    else:
        full, fastest = priced if priced is not None else price_positions(arch, facts, range(lo, hi + 1))
        for pos in range(lo, hi + 1):
            cands.extend(single_candidates(arch, facts, pos, full[pos]))
    for start, stripes, any_config in runs:
        for buffered, best in itertools.product((True, False), (None, fastest) if fastest and any_config else (None,)):
            cand = cascade_candidate(arch, facts, start, stripes, buffered, best)
            if cand is not None:
                cands.append(cand)
    unique: dict[tuple, Candidate] = {}
    for cand in cands:
        unique.setdefault(cand.key, cand)
    return list(unique.values())


# --------------------------------------------------------------------------------------------------------------
# Pricing


# Passes of one kind (``pass_kind``) are priced once, their options and prices shared; off, every pass is priced
# on its own (what the tests compare the sharing with).
SHARE_PASS_KINDS = True


def _price_key(kind: int, op_sched: OpSchedule) -> tuple:
    """What a pass's price depends on: the pass's kind (``pass_kind``: passes of one kind price alike), and of its
    choices, since the evaluator prices whole-op shapes, not the stripe heights and rolling buffer, only the block
    config, the weights, whether the pass is in a cascade and the slack it leaves the next pass
    (``tail_slack_cycles``, ``slack_ofm_depth``)."""
    return (kind, op_sched.block_config, op_sched.weight_buffering, op_sched.encoded_weights,
            op_sched.cascade is None, op_sched.tail_slack_cycles, op_sched.ofm_stripe.depth,
            op_sched.slack_ofm_depth)


@dataclass
class _SharedPrices:
    """What a ``Pricer`` knows that holds for any network on its architecture (kinds of pass, not passes)."""

    memo: dict[tuple, tuple[float, Slack, bool, float]] = field(default_factory=dict)
    partials: dict[tuple, PartialPrice | BlendedPrice] = field(default_factory=dict)
    keys: dict[tuple, int] = field(default_factory=dict)
    kind_numbers: dict[Hashable, int] = field(default_factory=dict)


def _shared_prices(arch: PricedArchitecture) -> _SharedPrices:
    """The prices known on ``arch``: a run prices two graphs that share most passes, and a few estimators'
    architectures in turn; the last few architectures' are kept."""
    known = _SHARED_PRICES.pop(arch, None)
    if known is None or len(known.memo) > _SHARED_PRICES_HELD:
        known = _SharedPrices()
    _SHARED_PRICES[arch] = known  # the newest last
    while len(_SHARED_PRICES) > _SHARED_ARCHITECTURES:
        del _SHARED_PRICES[next(iter(_SHARED_PRICES))]
    return known


_SHARED_PRICES: dict[PricedArchitecture, _SharedPrices] = {}
_SHARED_ARCHITECTURES = 4
_SHARED_PRICES_HELD = 1 << 18


class Pricer:
    """Per-pass prices from the evaluator's ``price_op``, memoised by (kind of pass, choices, operand placements,
    slack), for every network on the same architecture (``_shared_prices``).

    The price tables ask for the same pass and placements after up to a dozen different slacks, and the slack
    changes only the last step of the estimate; so the rest (``partial_price_op``) is memoised without it and
    finished per slack."""

    def __init__(self, arch: PricedArchitecture, base: Mapping[FeatureMap, TensorPlacement]) -> None:
        self.arch = arch
        self.base = dict(base)
        shared = _shared_prices(arch) if SHARE_PASS_KINDS else _SharedPrices()
        self.memo, self.partials, self.keys, self.kind_numbers = (shared.memo, shared.partials, shared.keys,
                                                                  shared.kind_numbers)
        self.interned: dict[int, int] = {}
        self.alive: list[OpSchedule] = []
        self.operands: dict[int, tuple[FeatureMap, ...]] = {}
        self.kinds: dict[int, int] = {}  # pass index -> its kind's number
        self.priced = 0  # prices worked out here (not known already)

    def _kind(self, op: NpuOp) -> int:
        kind = self.kinds.get(op.index)
        if kind is None:
            signature = pass_kind(op) if SHARE_PASS_KINDS else op.index
            kind = self.kinds[op.index] = self.kind_numbers.setdefault(signature, len(self.kind_numbers))
        return kind

    def _key(self, op: NpuOp, op_sched: OpSchedule, places: Mapping[FeatureMap, TensorPlacement]
             ) -> tuple[tuple, tuple]:
        """(memo key without the slack, operand placements). Choices are interned once per OpSchedule object and
        placements reduced to memory names, so building a key does not hash block configs and enums every time."""
        ident = self.interned.get(id(op_sched))
        if ident is None:
            ident = self.keys.setdefault(_price_key(self._kind(op), op_sched), len(self.keys))
            self.interned[id(op_sched)] = ident
            self.alive.append(op_sched)
        operands = self.operands.get(op.index)
        if operands is None:
            operands = self.operands[op.index] = tuple(
                access.tensor for access in (op.ifm, op.ifm2, op.ofm)
                if access is not None and not access.tensor.is_const)
        local = tuple((fm, places.get(fm) or self.base.get(fm)) for fm in operands)
        # The op fixes which maps its operands are; their memory and layout (by identity: enum hashing is slow).
        where = tuple((id(p.mem_area), id(p.format)) if p is not None else None for _, p in local)
        return (ident, where), local

    def price_pass(self, op: NpuOp, op_sched: OpSchedule, places: Mapping[FeatureMap, TensorPlacement],
                   prev_slack: Slack) -> tuple[float, Slack, bool, float]:
        """(total cycles, slack left for the next pass, priced below its own compute time, and under
        ``Estimator.BOTH`` the weighted legacy-model part of the total) of one pass."""
        return self.price_pass_after(op, op_sched, places, (prev_slack,))[0]

    def price_pass_after(self, op: NpuOp, op_sched: OpSchedule, places: Mapping[FeatureMap, TensorPlacement],
                         slacks: Sequence[Slack]) -> list[tuple[float, Slack, bool, float]]:
        """``price_pass`` after each of ``slacks`` (the key is built once for them all)."""
        base_key, local = self._key(op, op_sched, places)
        out = []
        for prev_slack in slacks:
            key = (*base_key, prev_slack)
            value = self.memo.get(key)
            if value is None:
                partial = self.partials.get(base_key)
                if partial is None:
                    schedule = Schedule(ops=(op_sched,), tensors=tuple((fm, p) for fm, p in local if p is not None))
                    partial = self.partials[base_key] = partial_price_op(self.arch, op, op_sched, schedule)
                result, slack, _ = partial.finish(self.arch, prev_slack)
                # Vela's estimate subtracts the weight DMA hidden under the previous pass even from a cascaded pass
                # whose own transfer it prices at zero, which can price it below its compute time.
                value = (float(result.total_cycles), slack,
                         bool(result.npu_cycles < result.op_cycles - 1e-6), result.parts[0])
                self.memo[key] = value
                self.priced += 1
            out.append(value)
        return out

    def price(self, sg_ops: Sequence[NpuOp], cand: Candidate, places: Mapping[FeatureMap, TensorPlacement],
              prev_slack: Slack) -> tuple[list[float], Slack, bool, list[float]]:
        """Per-pass totals of a candidate, the slack its last pass leaves, whether any pass profits from the
        DMA-credit artefact and per pass the legacy part of its total (see ``price_pass``)."""
        totals, parts = [], []
        slack = prev_slack
        artefact = False
        for k, op_sched in enumerate(cand.ops):
            op = sg_ops[cand.start + k]
            total, slack, credited, part = self.price_pass(op, op_sched, places, slack)
            artefact = artefact or credited
            totals.append(total)
            parts.append(part)
        return totals, slack, artefact, parts
