"""The CP-SAT scheduler: cascades, stripes, block configs, weight buffering and fast-storage residency, jointly.

The model (``build_model``; read back by ``extract_schedule``; solved in ``search``) decides *regions*: runs
``lo..hi`` of one NPU subgraph's execution order. A region is a whole subgraph (the full model: every subgraph at
once, so the bound is global) or a window of one, where the passes outside keep the incumbent schedule's choices
(the window search, ``windows``, for networks too big for one model). The builder follows OR-Tools' own samples:
the data of a region (``region_data``), then each variable family with its constraints, in dicts keyed as below,
then the objective; the same dicts read the solution back (``extract_schedule``). Per region:

* ``use[c]``: candidate ``c`` (``npusched.solvers.cpsat.candidates``) runs its passes ``start..end``; every pass of
  the region is covered by exactly one chosen candidate (exact cover, ``_add_exact_cover``). A window also
  holds the incumbent's runs just before and after it (``ext_lo..lo-1``, ``hi+1..ext_hi``), fixed, because their
  prices depend on what the window decides (boundary placements, slack).
* ``resident[F]``: feature map F is held whole in fast storage. Only with dedicated fast storage (feature maps
  default to DRAM), only for maps produced and consumed inside the region (with shared fast storage every
  feature map is there anyway); the others keep their placement (Vela's default, or the incumbent's in a window).
  ``in_rolling[F]``: a chosen cascade holds F only in its rolling buffers, so never whole (residency and rolling
  consistency, ``_add_residency``).
* ``row[c, placement, slack]``: which row of candidate c's price table applies: the placements of its boundary
  feature maps (linked to ``resident``) and the slack the previous candidate leaves for prefetching weights
  (linked to which candidate ends just before c). Each row is the evaluator's own price, so the objective is the
  evaluator's total cycles of the region, scaled by ``SCALE`` and rounded per pass (price tables,
  ``_add_price_tables``).
* ``after_slack[c, s]``: the candidate before c leaves slack s (only where c's price depends on it); per boundary
  these form a transportation problem with the candidates ending there, which keeps the LP relaxation tight
  (slack chain, ``_add_slack_chain``).
* ``ofm_over_ifm[c]``: a lone elementwise candidate writes its OFM over its IFM (``_add_ofm_over_ifm``).
* Memory at each step (``_add_memory_at_each_step``, ``_add_clique_cuts``): for every candidate, at its step and
  at the odd step after it (where the next candidate's pre-buffered weights appear), feature maps live at that
  step + its rolling and weight buffers - the OFM written over its IFM (elementwise) <= ``peak``. Feature maps are
  live over the positions the subgraph's ``MemoryLayout`` gives them (``npusched.schedule.memory_layout``, which the
  evaluator's walk and the DP read too; maps sharing a buffer, such as LSTM states, as one range), weight buffers
  as ``weight_buffer_bytes`` splits them, so ``model_peak_bytes`` of a solution is the evaluator's peak. The same
  limits are also stated per pass, summed
  over the candidates that could cover it, without enforcement literals (implied for integer choices, stronger in
  the LP), with clique cuts on maps larger than half (a third, a quarter) of the limit.

The objective. With one cost model (``--objective estimator``, or any single estimator) it is the cycles:
minimise sum over regions of sum over chosen rows of price(row) (scaled). Under ``--objective both``
(``Estimator.BOTH``) each row's price is w_l x its cycles under Vela legacy's model + w_d x its cycles under the
default core's (``blend_weights``, set so that a cycle is the same share of either core's own total), and each of
the two weighted model totals L and D over the cap C (``blend_cap``: half the legacy core's own total, where either
ratio to its core reaches 1) is penalised a hundredfold (``OVER_CAP_PENALTY``):

    minimise  L + D + 100 x (max(0, L - C) + max(0, D - C))

with one non-negative variable per excess (``_penalised``), so an answer slower than either core by that core's
own model is taken only where none is faster than both.

``peak`` is the fast-storage limit for ``--optimise Performance``, whose objective is the cycles. For ``Size`` it
is a variable: the model is solved once minimising ``peak``, then again with ``peak`` held to the least found and
the cycles minimised (lexicographic; the second solve starts from the first's solution). The peak's proven bound
and the cycles' bound at that peak are both reported.

Everything the evaluator prices is in the tables, so ``evaluate(schedule).total_cycles`` equals the objective:
exactly as a float (the solver reports the evaluator's total of the schedule it extracts) and, scaled, term for
term. Each subgraph is evaluated on its own (its steps start at 0; no slack crosses a CPU operator), so regions
of different subgraphs share nothing but the limit.

"Optimal" means optimal over the candidate space (a few block configs per pass, cascades of at most
``MAX_CASCADE_LENGTH`` passes, a few stripe heights, the weight slicings of Vela's schedules). The same space as
shortest paths over the execution order (``npusched.solvers.cpsat.path_bound``) bounds it on every network, the
window search's for large networks (``npusched.solvers.cpsat.windows``) too.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ortools.sat.python import cp_model

from npusched.ir import FeatureMap
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.evaluator import elementwise_reuse_source, staging_limit, storage_size, subgraphs_of, tensor_use
from npusched.schedule.memory_layout import MemoryLayout, memory_layout
from npusched.schedule.pricing import Slack
from npusched.schedule.schedule import OpSchedule, Schedule, TensorPlacement
from npusched.solvers.cpsat.candidates import (
    Candidate,
    Pricer,
    SubgraphFacts,
    all_candidates,
    make_candidate,
    price_positions,
    segments_of,
)
from npusched.solvers.cpsat.pricing_pool import CHUNK_CANDIDATES, fork_map, price_in_processes
from npusched.solvers.heuristic import sched_ops_of
from npusched.solvers.max_schedule import vela_tensor_placements
from npusched.target.arch import OptimisationStrategy
from npusched.target.estimators import OVER_CAP_PENALTY, Estimator, PricedArchitecture

# Prices are in cycles with fractions; the objective counts 1/SCALE cycles (rounded per pass).
SCALE = 1000

Log = Callable[[str], None]
# A linear expression over the model's variables, or a constant.
Expr = cp_model.LinearExpr | int
# A price row: (candidate, placement bits of its movable boundary maps, slack group).
RowKey = tuple[int, tuple[int, ...], int]


class OutOfTime(Exception):
    """Building the model would overrun its deadline."""


@dataclass(frozen=True)
class Region:
    """Positions ``lo..hi`` of subgraph ``sg_index`` are decided; ``ext_lo..lo-1`` and ``hi+1..ext_hi`` are the
    incumbent's neighbouring runs, held fixed but priced (equal to ``lo``/``hi`` for a whole subgraph)."""

    sg_index: int
    lo: int
    hi: int
    ext_lo: int
    ext_hi: int


@dataclass(frozen=True)
class PriceTable:
    """Price rows of one candidate: cycles (scaled int) and per-pass floats per (placement combo, slack group);
    ``artefact`` when some row profits from the DMA-credit artefact of Vela's estimate."""

    movable: tuple[FeatureMap, ...]
    groups: tuple[tuple[Slack, ...], ...]
    # (placement combo, slack group) -> (scaled cycles, per-pass cycles, scaled legacy part under Estimator.BOTH)
    rows: dict[tuple[tuple[int, ...], int], tuple[int, tuple[float, ...], int]]
    artefact: bool


@dataclass(frozen=True)
class RegionModel:
    """One region's data and its variables, in dicts keyed as in the module docstring: ``use[c]``,
    ``resident[F]``, ``row[c, placement, slack group]`` (c indexes ``data.candidates``)."""

    data: RegionData
    use: dict[int, cp_model.IntVar]
    resident: dict[FeatureMap, cp_model.IntVar]
    row: dict[RowKey, cp_model.IntVar]
    # The fast storage each memory constraint counts, with the literal that enforces it (None: always).
    memory: tuple[tuple[Expr, cp_model.IntVar | None], ...]

    def scaled_cycles(self) -> Expr:
        """The region's total cycles (scaled by SCALE): each chosen price row's cost."""
        return sum(self.data.tables[k].rows[combo, group][0] * chosen for (k, combo, group), chosen in self.row.items())

    def scaled_legacy_part(self) -> Expr:
        """Under ``Estimator.BOTH``: the weighted legacy-model part of ``scaled_cycles`` (the rest is the default
        core's model's)."""
        return sum(self.data.tables[k].rows[combo, group][2] * chosen for (k, combo, group), chosen in self.row.items())


@dataclass
class CpSatModel:
    """The built model and what extraction needs."""

    model: cp_model.CpModel
    regions: list[RegionModel]
    limit: int
    placements: dict[FeatureMap, TensorPlacement]  # what every feature map keeps unless the model moves it
    net: NetworkFacts
    stats: dict[str, Any]
    cycles: Expr  # the regions' total cycles, scaled by SCALE
    # With ``minimise_memory``, the variable every memory constraint is held to; else the fixed limit.
    peak: cp_model.IntVar | int
    # What is minimised after the peak (scaled): the cycles, under Estimator.BOTH with each weighted model total's
    # excess over the arch's cap penalised (``npusched.target.arch.objective_cycles``); a window's, its cycles.
    objective: Expr = 0


# --------------------------------------------------------------------------------------------------------------
# Facts about the network, computed once per solve


class NetworkFacts:
    """What every region of one network needs: tensor use, Vela's placements, a shared pricer, and per subgraph
    the scheduler's view of its passes and its live ranges (computed on first use)."""

    def __init__(self, network: Network, arch: PricedArchitecture, joins: bool | None = None) -> None:
        self.network = network
        self.arch = arch
        # Cascades through residual joins and gates (``candidates.SubgraphFacts.joins``): for Size by default.
        self.joins = arch.optimise is OptimisationStrategy.SIZE if joins is None else joins
        self.subgraphs = subgraphs_of(network)
        self.use = tensor_use(network)
        self.base: dict[FeatureMap, TensorPlacement] = dict(vela_tensor_placements(network, arch, self.use))
        self.fast = arch.fast_storage_mem_area
        self.shared = self.fast == arch.feature_map_storage_mem_area
        self.pricer = Pricer(arch, self.base)
        self._facts: dict[int, SubgraphFacts] = {}
        self._layouts: dict[int, MemoryLayout] = {}

    @cached_property
    def passes(self) -> int:
        return sum(len(sg.ops) for sg in self.subgraphs)

    def facts(self, sgi: int) -> SubgraphFacts:
        if sgi not in self._facts:
            sg = self.subgraphs[sgi]
            formats = {fm: p.format for fm, p in self.base.items()}
            all_fast = Schedule(ops=(), tensors=tuple((fm, TensorPlacement(self.fast, p.format))
                                                      for fm, p in self.base.items()))
            reuse: dict[int, tuple[FeatureMap, FeatureMap, int]] = {}
            for pos, op in enumerate(sg.ops):
                src = elementwise_reuse_source(op, self.arch, all_fast, self.use)
                if (src is not None and src is not op.ofm.tensor and self.use.storage_key(src) == src
                        and self.use.storage_key(op.ofm.tensor) == op.ofm.tensor):
                    reuse[pos] = (src, op.ofm.tensor, storage_size(src, self.base[src].format))
            sched_ops = sched_ops_of(sg, self.use, formats, held_operands=True, joins=self.joins)
            self._facts[sgi] = SubgraphFacts(sgi, sg, sched_ops, self.use, reuse, self.joins)
        return self._facts[sgi]

    def layout(self, sgi: int) -> MemoryLayout:
        """Every feature map of subgraph ``sgi`` laid out in positions, at its size under Vela's placements (the
        model decides which of them are resident)."""
        if sgi not in self._layouts:
            sg = self.subgraphs[sgi]
            self._layouts[sgi] = memory_layout(sg.ops, sg.outputs, self.use, self.size)
        return self._layouts[sgi]

    def size(self, fm: FeatureMap) -> int:
        return storage_size(fm, self.base[fm].format) if fm in self.base else 0


# --------------------------------------------------------------------------------------------------------------
# Building


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise OutOfTime


def whole_subgraph_regions(net: NetworkFacts) -> list[Region]:
    return [Region(sgi, 0, len(sg.ops) - 1, 0, len(sg.ops) - 1) for sgi, sg in enumerate(net.subgraphs) if sg.ops]


def build_model(net: NetworkFacts, regions: Sequence[Region], references: tuple[Schedule, ...], *,
                limit: int | None = None, minimise_memory: bool = False, incumbent: Schedule | None = None,
                hint_first: bool = False, deadline: float | None = None, vela_configs_only: bool = False,
                log: Log | None = None, datas: Sequence[RegionData] | None = None) -> CpSatModel:
    """The CP-SAT model deciding ``regions``; ``references`` (hint first) supply verbatim candidates.

    With ``incumbent``, feature maps that are not decided keep its placements and the passes around each region
    its choices. With ``minimise_memory`` the limit becomes a variable to minimise (used to report the smallest
    fast storage any candidate schedule needs). ``vela_configs_only`` keeps to Vela's block configs (see
    ``all_candidates``). ``datas`` are the regions' data when the caller has them already (``whole_network_data``
    for ``whole_subgraph_regions``).
    Raises ``OutOfTime`` past ``deadline``.
    """
    start_time = time.monotonic()
    limit = staging_limit(net.arch) if limit is None else int(limit)
    model = cp_model.CpModel()
    peak = model.new_int_var(0, limit, "peak_fast_storage") if minimise_memory else limit
    placements = dict(net.base)
    if incumbent is not None:
        placements.update((fm, incumbent.placement(fm) or place) for fm, place in net.base.items())
    if datas is None:
        datas = [region_data(net, region, references, placements=placements, incumbent=incumbent,
                             hint_first=hint_first, limit=limit, deadline=deadline,
                             vela_configs_only=vela_configs_only) for region in regions]
    # Clique cuts tighten a fixed limit; minimising the peak, they would cut off every peak above the limit.
    built = [_add_region(model, net, data, limit=limit, peak=peak, clique_cuts=not minimise_memory)
             for data in datas]
    cycles = sum(region.scaled_cycles() for region in built)
    objective = cycles if incumbent is not None else _penalised(model, net.arch, cycles, built)
    model.minimize(peak if minimise_memory else objective)
    proto = model.proto
    stats = {"candidates": sum(len(r.data.candidates) for r in built), "variables": len(proto.variables),
             "constraints": len(proto.constraints), "build_seconds": round(time.monotonic() - start_time, 3),
             "priced_passes": net.pricer.priced}
    if log is not None and incumbent is None:
        log(f"cp-sat model: {stats['candidates']} candidates, {stats['variables']} variables, "
            f"{stats['constraints']} constraints, built in {stats['build_seconds']:.2f} s")
    return CpSatModel(model, built, limit, placements, net, stats, cycles, peak, objective)


def _penalised(model: cp_model.CpModel, arch: PricedArchitecture, cycles: Expr,
               regions: Sequence[RegionModel]) -> Expr:
    """``cycles`` plus, under ``Estimator.BOTH`` with a cap, ``OVER_CAP_PENALTY`` x the excess of each weighted
    model total over the cap (``objective_cycles``, as a linear expression: one non-negative variable per
    excess)."""
    if arch.estimator is not Estimator.BOTH or arch.blend_cap <= 0:
        return cycles
    legacy = sum(region.scaled_legacy_part() for region in regions)
    cap = round(arch.blend_cap * SCALE)
    penalty: Expr = 0
    for name, part in (("legacy", legacy), ("default", cycles - legacy)):
        excess = model.new_int_var(0, 1 << 50, f"{name}_model_over_cap")
        model.add(excess >= part - cap)
        penalty += excess
    return cycles + round(OVER_CAP_PENALTY) * penalty


def incumbent_runs(net: NetworkFacts, incumbent: Schedule | None, sgi: int) -> list[Candidate]:
    """The incumbent's runs (cascades and lone passes) of subgraph ``sgi`` as candidates, in order."""
    if incumbent is None:
        return []
    facts = net.facts(sgi)
    return [make_candidate(facts, start, ops, "hint") for start, ops in segments_of(incumbent, facts.sg)]


def slack_before(net: NetworkFacts, runs: list[Candidate], sgi: int, pos: int) -> Slack:
    """The slack the run ending at ``pos - 1`` leaves (0 at the start of a subgraph or without an incumbent)."""
    before = next((run for run in runs if run.end == pos - 1), None)
    return net.pricer.price(net.subgraphs[sgi].ops, before, {}, 0.0)[1] if before is not None else 0.0


@dataclass(frozen=True)
class RegionData:
    """The data of one region's model, computed before any variable exists (module docstring, per region).

    ``candidates`` start with the incumbent's ``fixed`` runs around the window; ``positions`` are ext_lo..ext_hi;
    ``live`` the live ranges (feature maps and shared buffers) that reach them; ``movable`` the maps whose
    residency the model decides; ``decided`` those and every map some candidate holds only in rolling buffers;
    ``kept`` the placements of undecided maps that differ from Vela's; ``tables`` each candidate's prices;
    ``excluded`` the candidates kept out (they profit from the estimate's DMA-credit artefact, or would hold a
    member of a shared buffer only in a rolling buffer);
    ``slack_out`` the slack each candidate leaves; ``slack_classes`` per position the slacks the candidates
    ending just before it can leave; ``prebuffer_after`` the weights the run after the region pre-buffers."""

    region: Region
    candidates: tuple[Candidate, ...]
    fixed: int
    positions: range
    live: dict[Any, tuple[int, int]]
    movable: frozenset[FeatureMap]
    decided: frozenset[FeatureMap]
    kept: dict[FeatureMap, TensorPlacement]
    tables: tuple[PriceTable, ...]
    excluded: frozenset[int]
    slack_out: tuple[Slack, ...]
    slack_classes: dict[int, list[Slack]]
    prebuffer_after: int
    starting_at: dict[int, list[int]]  # position -> the candidates starting there
    ending_at: dict[int, list[int]]
    rolling: dict[FeatureMap, list[int]]  # map -> the candidates holding it only in rolling buffers


def whole_network_data(net: NetworkFacts, references: tuple[Schedule, ...], hint_first: bool,
                       deadline: float | None = None, processes: int = 1) -> list[RegionData]:
    """The data of every whole subgraph (the candidate space of the one model) without building the model: what
    the path bound (``npusched.solvers.cpsat.path_bound``) reads, and ``build_model`` can take. The passes are
    priced, and the candidates' price tables worked out, in ``processes`` processes (``pricing_pool``). Raises
    ``OutOfTime`` past ``deadline``."""
    regions = whole_subgraph_regions(net)
    for region in regions:
        facts = net.facts(region.sg_index)
        if not price_in_processes(net.arch, facts, range(region.lo, region.hi + 1), processes, deadline):
            raise OutOfTime
    return [region_data(net, region, references, placements=dict(net.base), incumbent=None, hint_first=hint_first,
                        limit=staging_limit(net.arch), deadline=deadline, vela_configs_only=False,
                        processes=processes)
            for region in regions]


def _price_passes(net: NetworkFacts, facts: SubgraphFacts, lo: int, hi: int, deadline: float | None
                  ) -> tuple[dict[int, Any], dict[tuple[int, bool, int], Any]]:
    """Every pass's options and fastest block configs (``price_positions``), pass by pass: pricing takes most of
    the build time, so the deadline is checked in between."""
    if not price_in_processes(net.arch, facts, range(lo, hi + 1), 1, deadline):
        raise OutOfTime
    return price_positions(net.arch, facts, range(lo, hi + 1))


def region_data(net: NetworkFacts, region: Region, references: tuple[Schedule, ...], *,
                 placements: dict[FeatureMap, TensorPlacement], incumbent: Schedule | None, hint_first: bool,
                 limit: int, deadline: float | None, vela_configs_only: bool, processes: int = 1) -> RegionData:
    """What the model of ``region`` is built from: its candidates and their price tables (worked out in
    ``processes`` processes, ``pricing_pool.fork_map``), and which maps it decides."""
    sgi, lo, hi, ext_lo, ext_hi = region.sg_index, region.lo, region.hi, region.ext_lo, region.ext_hi
    facts = net.facts(sgi)
    sg = facts.sg
    layout = net.layout(sgi)
    priced = None if vela_configs_only else _price_passes(net, facts, lo, hi, deadline)
    runs = incumbent_runs(net, incumbent, sgi)
    fixed = [run for run in runs if ext_lo <= run.start < lo or hi < run.start <= ext_hi]
    candidates = fixed + all_candidates(net.arch, facts, references, hint_first, lo, hi,
                                        vela_configs_only=vela_configs_only, priced=priced)
    _check(deadline)
    positions = range(ext_lo, ext_hi + 1)
    live = {key: (r.start, r.end) for key, r in layout.ranges.items() if r.start <= ext_hi and r.end >= ext_lo}
    inputs = set(sg.inputs)
    # A map larger than the whole fast storage can never be resident: leaving it out keeps the price tables
    # small and the LP relaxation from holding a fraction of it.
    movable = frozenset(fm for fm, (a, c) in layout.positions.items()
                        if ext_lo <= a and c <= ext_hi and fm not in layout.grouped and not net.shared
                        and fm not in inputs and fm not in net.use.subgraph_outputs and fm in net.base
                        and net.size(fm) <= limit)
    decided = movable | {fm for c in candidates for fm in c.internal}
    kept = {fm: placements[fm] for fm in live if isinstance(fm, FeatureMap) and fm not in decided
            and fm in placements and placements[fm] != net.base[fm]}
    starting_at: dict[int, list[int]] = {}
    ending_at: dict[int, list[int]] = {}
    rolling: dict[FeatureMap, list[int]] = {}
    for k, c in enumerate(candidates):
        starting_at.setdefault(c.start, []).append(k)
        ending_at.setdefault(c.end, []).append(k)
        for fm in c.internal:
            rolling.setdefault(fm, []).append(k)
    # Placement-independent; worked out here, so that the processes pricing the tables inherit what it priced.
    slack_out = tuple(net.pricer.price(sg.ops, c, {}, 0.0)[1] for c in candidates)
    incoming_slack = slack_before(net, runs, sgi, ext_lo)
    slack_classes = {pos: sorted({slack_out[k] for k in ending_at.get(pos - 1, [])}) if pos > ext_lo
                     else [incoming_slack] for pos in positions}
    boundaries = [[fm for fm in c.boundary if fm in movable] for c in candidates]

    def portable_table(k: int) -> tuple[tuple[int, ...], Any, Any, bool]:
        # maps by index: another process's copies are not the model's keys
        found = _price_table(net, sg, candidates[k], boundaries[k], slack_classes[candidates[k].start], kept)
        return tuple(boundaries[k].index(fm) for fm in found.movable), found.groups, found.rows, found.artefact

    answers = fork_map(portable_table, range(len(candidates)), processes, deadline, CHUNK_CANDIDATES)
    if answers is None:
        raise OutOfTime
    tables = [PriceTable(tuple(boundaries[k][b] for b in bits), groups, rows, artefact)
              for k, (bits, groups, rows, artefact) in enumerate(answers)]
    excluded = frozenset(k for k, (c, table) in enumerate(zip(candidates, tables, strict=True))
                         if k >= len(fixed) and (table.artefact or c.internal & layout.grouped))
    prebuffer_after = next((run.mem_before for run in runs if run.start == ext_hi + 1), 0)
    return RegionData(region=region, candidates=tuple(candidates), fixed=len(fixed), positions=positions, live=live,
                      movable=movable, decided=frozenset(decided), kept=kept, tables=tuple(tables), excluded=excluded,
                      slack_out=slack_out, slack_classes=slack_classes, prebuffer_after=prebuffer_after,
                      starting_at=starting_at, ending_at=ending_at, rolling=rolling)


def _add_region(model: cp_model.CpModel, net: NetworkFacts, data: RegionData, *, limit: int,
                peak: cp_model.IntVar | int, clique_cuts: bool) -> RegionModel:
    """Variables and constraints of one region, family by family as the module docstring lists them."""
    use = _add_exact_cover(model, data)
    resident, in_rolling = _add_residency(model, data, use)
    row, after_slack = _add_price_tables(model, data, use, resident)
    _add_slack_chain(model, data, use, after_slack)
    ofm_over_ifm = _add_ofm_over_ifm(model, net, data, use, resident)
    memory = _add_memory_at_each_step(model, net, data, use, resident, in_rolling, ofm_over_ifm, peak)
    if clique_cuts:
        _add_clique_cuts(model, net, data, resident, limit)
    return RegionModel(data, use, resident, row, memory)


def _add_exact_cover(model: cp_model.CpModel, data: RegionData) -> dict[int, cp_model.IntVar]:
    """``use[c]``: candidate c runs; every position is covered by exactly one chosen candidate. The incumbent's
    runs around a window are chosen, the excluded candidates are not."""
    sgi = data.region.sg_index
    use = {k: model.new_bool_var(f"use_sg{sgi}_p{c.start}_{c.end}_{c.source}_{k}")
           for k, c in enumerate(data.candidates)}
    for k in range(data.fixed):
        model.add(use[k] == 1)
    for pos in data.positions:
        model.add_exactly_one(use[k] for k, c in enumerate(data.candidates) if c.start <= pos <= c.end)
    for k in sorted(data.excluded):
        model.add(use[k] == 0)
    return use


def _add_residency(model: cp_model.CpModel, data: RegionData, use: dict[int, cp_model.IntVar]
                   ) -> tuple[dict[FeatureMap, cp_model.IntVar], dict[FeatureMap, cp_model.IntVar]]:
    """``resident[F]``: movable map F is held whole in fast storage; ``in_rolling[F]``: a chosen cascade holds F
    only in its rolling buffers (one variable, so the memory constraints name it once instead of every such
    cascade); rolling consistency: never both."""
    resident = {fm: model.new_bool_var(f"resident_{fm.name or fm.uid}")
                for fm in sorted(data.movable, key=lambda fm: data.live[fm])}
    in_rolling = {}
    for fm, holders in data.rolling.items():
        in_rolling[fm] = model.new_bool_var(f"in_rolling_{fm.name or fm.uid}")
        model.add(in_rolling[fm] == sum(use[k] for k in holders))
        if fm in resident:
            model.add(resident[fm] + in_rolling[fm] <= 1)
    return resident, in_rolling


def _add_price_tables(model: cp_model.CpModel, data: RegionData, use: dict[int, cp_model.IntVar],
                      resident: dict[FeatureMap, cp_model.IntVar]
                      ) -> tuple[dict[RowKey, cp_model.IntVar], dict[tuple[int, Slack], cp_model.IntVar]]:
    """``row[c, placement, slack group]``: the row of c's price table that applies, one exactly when c runs,
    its placement bits agreeing with ``resident``; ``after_slack[c, s]``: c runs after a candidate that leaves
    slack s, one exactly when c runs, agreeing with the row's slack group (only where c's price depends on the
    slack). A single-row table is priced by ``use[c]`` itself."""
    sgi = data.region.sg_index
    row: dict[RowKey, cp_model.IntVar] = {}
    after_slack: dict[tuple[int, Slack], cp_model.IntVar] = {}
    for k, (c, table) in enumerate(zip(data.candidates, data.tables, strict=True)):
        if len(table.rows) == 1:
            ((combo, group),) = table.rows
            row[k, combo, group] = use[k]
            continue
        rows = {(combo, group): model.new_bool_var(f"row_sg{sgi}_p{c.start}_{k}_{(combo, group)}")
                for combo, group in table.rows}
        row.update(((k, combo, group), chosen) for (combo, group), chosen in rows.items())
        model.add(sum(rows.values()) == use[k])
        for bit, fm in enumerate(table.movable):
            model.add(sum(chosen for (combo, _), chosen in rows.items() if combo[bit]) <= resident[fm])
            model.add(sum(chosen for (combo, _), chosen in rows.items() if not combo[bit]) <= 1 - resident[fm])
        if len(table.groups) > 1:
            slacks = data.slack_classes[c.start]
            for i, s in enumerate(slacks):
                after_slack[k, s] = model.new_bool_var(f"after_slack_sg{sgi}_p{c.start}_{k}_{i}")
            model.add(sum(after_slack[k, s] for s in slacks) == use[k])
            for group, members in enumerate(table.groups):
                model.add(sum(chosen for (_, g), chosen in rows.items() if g == group)
                          == sum(after_slack[k, s] for s in members))
    return row, after_slack


def _add_slack_chain(model: cp_model.CpModel, data: RegionData, use: dict[int, cp_model.IntVar],
                     after_slack: dict[tuple[int, Slack], cp_model.IntVar]) -> None:
    """Slack chain: at each boundary, the candidates that start there after slack s are no more than the chosen
    candidates ending just before it that leave s (a transportation problem: tight in the LP relaxation)."""
    incoming: dict[tuple[int, Slack], list[Any]] = {}
    for (k, s), var in after_slack.items():
        incoming.setdefault((data.candidates[k].start, s), []).append(var)
    for (pos, s), terms in incoming.items():
        model.add(sum(terms) <= sum(use[m] for m in data.ending_at.get(pos - 1, []) if data.slack_out[m] == s))


def _add_ofm_over_ifm(model: cp_model.CpModel, net: NetworkFacts, data: RegionData, use: dict[int, cp_model.IntVar],
                      resident: dict[FeatureMap, cp_model.IntVar]) -> dict[int, Expr]:
    """Bytes a lone elementwise candidate saves by writing its OFM over its IFM, per candidate: whenever it runs
    with shared fast storage; with dedicated, only when ``ofm_over_ifm[c]`` (both maps resident) is chosen."""
    saving: dict[int, Expr] = {}
    for k, c in enumerate(data.candidates):
        if c.reuse is None:
            continue
        src, dst, size = c.reuse
        if net.shared:
            saving[k] = size * use[k]
        elif src in resident and dst in resident:
            ofm_over_ifm = model.new_bool_var(f"ofm_over_ifm_sg{data.region.sg_index}_p{c.start}_{k}")
            model.add_implication(ofm_over_ifm, use[k])
            model.add_implication(ofm_over_ifm, resident[src])
            model.add_implication(ofm_over_ifm, resident[dst])
            saving[k] = size * ofm_over_ifm
    return saving


def _live_bytes(net: NetworkFacts, data: RegionData, resident: dict[FeatureMap, cp_model.IntVar],
                in_rolling: dict[FeatureMap, cp_model.IntVar]) -> dict[Any, Any]:
    """Fast-storage bytes of each live range (a feature map or a shared buffer), as an expression."""
    layout = net.layout(data.region.sg_index)

    def live_bytes(key: Any) -> Any:
        if not isinstance(key, FeatureMap):  # a buffer shared by several maps, sized by the first
            return layout.ranges[key].size if net.shared else 0
        size = net.size(key)
        if key in resident:
            return size * resident[key]
        if net.shared:
            return size * (1 - in_rolling[key]) if key in in_rolling else size
        # Dedicated fast storage: a map the model does not move keeps its placement; one that only ever lives in
        # rolling buffers is never whole in fast storage (its buffer is the candidate's own memory).
        place = data.kept.get(key) or net.base.get(key)
        return size if key not in data.decided and place is not None and place.mem_area == net.fast else 0

    return {key: live_bytes(key) for key in data.live}


def _add_memory_at_each_step(model: cp_model.CpModel, net: NetworkFacts, data: RegionData,
                             use: dict[int, cp_model.IntVar],
                             resident: dict[FeatureMap, cp_model.IntVar], in_rolling: dict[FeatureMap, cp_model.IntVar],
                             saving: dict[int, Expr], peak: cp_model.IntVar | int
                             ) -> tuple[tuple[Expr, cp_model.IntVar | None], ...]:
    """Memory at each step <= ``peak`` (the limit, or the variable minimised for Size): for every chosen
    candidate at its own step and at the odd step after it (where the next candidate's pre-buffered weights
    appear), the feature maps live there + its rolling and weight buffers - the OFM written over its IFM; and the
    same per position summed over whichever candidate covers it, free of enforcement literals (implied for
    integer choices, but they also hold in the LP relaxation)."""
    live_bytes = _live_bytes(net, data, resident, in_rolling)
    live_at = {pos: [live_bytes[key] for key, (a, b) in data.live.items() if a <= pos <= b] for pos in data.positions}
    own_at: dict[int, list[Any]] = {pos: [] for pos in data.positions}
    own_after: dict[int, list[Any]] = {pos: [] for pos in data.positions}
    in_reach_of: dict[tuple[int, int], Any] = {}
    counted: list[tuple[Expr, cp_model.IntVar | None]] = []
    ext_lo, ext_hi = data.region.ext_lo, data.region.ext_hi
    for k, c in enumerate(data.candidates):
        # The same maps are in reach of every candidate over the same passes.
        if (c.start, c.end) not in in_reach_of:
            in_reach_of[c.start, c.end] = sum(live_bytes[key] for key, (a, b) in data.live.items()
                                              if a <= c.end and b >= c.start)
        in_reach = in_reach_of[c.start, c.end]
        saved = saving.get(k, 0)
        own_at[c.start].append(c.mem_at * use[k] - saved)
        own_after[c.end].append(c.mem_after * use[k] - saved)
        if c.mem_before and c.start > ext_lo:
            own_after[c.start - 1].append(c.mem_before * use[k])
        counted.append((in_reach + c.mem_at - saved, use[k]))
        following: list[Expr] = [data.candidates[m].mem_before * use[m]
                                 for m in data.starting_at.get(c.end + 1, []) if data.candidates[m].mem_before]
        if c.end == ext_hi:
            following.append(data.prebuffer_after)
        counted.append((in_reach + c.mem_after - saved + sum(following), use[k]))
    for pos in data.positions:
        covering = [c.mem_at * use[k] for k, c in enumerate(data.candidates) if c.start < pos <= c.end and c.mem_at]
        counted.append((sum(live_at[pos]) + sum(own_at[pos]) + sum(covering), None))
        counted.append((sum(live_at[pos]) + sum(own_after[pos]) + (data.prebuffer_after if pos == ext_hi else 0), None))
    for used, literal in counted:
        constraint = model.add(used <= peak)
        if literal is not None:
            constraint.only_enforce_if(literal)
    return tuple(counted)


def _add_clique_cuts(model: cp_model.CpModel, net: NetworkFacts, data: RegionData,
                     resident: dict[FeatureMap, cp_model.IntVar],
                     limit: int) -> None:
    """Cuts the LP misses: of the movable maps live at a position, at most k-1 of those larger than limit/k fit
    at once (k = 2, 3, 4)."""
    for pos in data.positions:
        sizes = {fm: net.size(fm) for fm in resident if data.live[fm][0] <= pos <= data.live[fm][1]}
        for parts in (2, 3, 4):
            big = [resident[fm] for fm, size in sizes.items() if size * parts > limit]
            if len(big) >= parts:
                model.add(sum(big) <= parts - 1)


def _price_table(net: NetworkFacts, sg: NpuSubgraph, cand: Candidate, movable: list[FeatureMap], slacks: list[Slack],
                 kept: dict[FeatureMap, TensorPlacement]) -> PriceTable:
    """Every price of ``cand``: per residency of its movable boundary maps and per incoming slack; dimensions
    that never change the price are dropped, slacks with identical prices grouped. ``kept`` are the placements
    of maps the model does not decide that differ from Vela's defaults."""
    fast, base = net.fast, net.base
    internal = {fm: TensorPlacement(fast, base[fm].format) for fm in cand.internal if fm in base}
    full: dict[tuple[tuple[int, ...], Slack], tuple[int, tuple[float, ...], int]] = {}
    artefact = False
    first_op = sg.ops[cand.start]
    for combo in itertools.product((0, 1), repeat=len(movable)):
        places = {**kept, **internal}
        for bit, fm in zip(combo, movable, strict=True):
            if bit:
                places[fm] = TensorPlacement(fast, base[fm].format)
        # The incoming slack changes only the first pass's price (the slack a pass leaves is its own).
        totals, _, credited, parts = net.pricer.price(sg.ops, cand, places, slacks[0])
        artefact = artefact or credited
        rest = tuple(totals[1:])
        rest_scaled = sum(round(t * SCALE) for t in rest)
        rest_part = sum(round(p * SCALE) for p in parts[1:])
        for s, (first, _, credited, part) in zip(
                slacks, net.pricer.price_pass_after(first_op, cand.ops[0], places, slacks), strict=True):
            artefact = artefact or credited
            full[(combo, s)] = (round(first * SCALE) + rest_scaled, (first, *rest), round(part * SCALE) + rest_part)

    def price(combo: tuple[int, ...], s: Slack) -> tuple[int, int]:
        return full[(combo, s)][0], full[(combo, s)][2]

    relevant = []
    for bit in range(len(movable)):
        if any(price(combo, s) != price(combo[:bit] + (1 - combo[bit],) + combo[bit + 1:], s)
               for combo in itertools.product((0, 1), repeat=len(movable)) for s in slacks):
            relevant.append(bit)
    combos = list(itertools.product((0, 1), repeat=len(relevant)))

    def full_combo(reduced: tuple[int, ...]) -> tuple[int, ...]:
        out = [0] * len(movable)
        for bit, v in zip(relevant, reduced, strict=True):
            out[bit] = v
        return tuple(out)

    columns: dict[tuple[tuple[int, int], ...], list[Slack]] = {}
    for s in slacks:
        column = tuple(price(full_combo(rc), s) for rc in combos)
        columns.setdefault(column, []).append(s)
    groups = tuple(tuple(v) for v in columns.values())
    rows = {}
    for g, members in enumerate(groups):
        for rc in combos:
            rows[(rc, g)] = full[(full_combo(rc), members[0])]
    return PriceTable(tuple(movable[b] for b in relevant), groups, rows, artefact)


# --------------------------------------------------------------------------------------------------------------
# Hints and extraction


def add_hint(built: CpSatModel, hint: Schedule | None, peak_bytes: int | None = None) -> None:
    """Hint the candidates the hint schedule is made of (verbatim candidates carry its exact choices) and, when
    the model minimises the peak, that schedule's ``peak_bytes`` (without it CP-SAT often finds no first solution
    within a deterministic budget)."""
    if hint is None:
        return
    if peak_bytes is not None and not isinstance(built.peak, int):
        built.model.add_hint(built.peak, min(peak_bytes, built.limit))
    for region in built.regions:
        internal: set[FeatureMap] = set()
        for k, use in region.use.items():
            cand = region.data.candidates[k]
            built.model.add_hint(use, 1 if cand.source == "hint" else 0)
            if cand.source == "hint":
                internal.update(cand.internal)
        for fm, r in region.resident.items():
            place = hint.placement(fm)
            fast = place is not None and place.mem_area == built.net.fast and fm not in internal
            built.model.add_hint(r, 1 if fast else 0)


def add_path_hint(built: CpSatModel, paths: Sequence[Sequence[int]],
                  resident: frozenset[FeatureMap] = frozenset()) -> None:
    """Hint one path per region (the candidates ``npusched.solvers.cpsat.path_bound`` chose, in the regions'
    order), the maps ``resident`` in fast storage."""
    for region, path in zip(built.regions, paths, strict=True):
        chosen = set(path)
        for k, use in region.use.items():
            built.model.add_hint(use, 1 if k in chosen else 0)
        for fm, var in region.resident.items():
            built.model.add_hint(var, 1 if fm in resident else 0)


def extract_schedule(built: CpSatModel, value: Callable[[Any], int], incumbent: Schedule | None = None
             ) -> tuple[Schedule, int]:
    """The schedule the solver chose (over ``incumbent`` when the model decided only windows of it) and its
    scaled objective."""
    ops: list[OpSchedule] = []
    places = dict(built.placements)
    scaled = 0
    fast, base = built.net.fast, built.net.base
    for region in built.regions:
        data = region.data
        in_fast = {fm for fm, var in region.resident.items() if value(var)}
        for k, use in region.use.items():
            if value(use):
                ops.extend(data.candidates[k].ops)
                in_fast.update(data.candidates[k].internal)
        scaled += sum(data.tables[k].rows[combo, group][0] for (k, combo, group), chosen in region.row.items()
                      if value(chosen))
        for fm in data.decided:
            if fm in base:
                places[fm] = TensorPlacement(fast if fm in in_fast else base[fm].mem_area, base[fm].format)
    tensors = tuple(places.items())
    if incumbent is not None:
        return Schedule(ops=incumbent.with_ops(ops).ops, tensors=tensors, label="CPSAT", solver="cpsat"), scaled
    schedule = Schedule(ops=tuple(sorted(ops, key=lambda o: o.op_index)), tensors=tensors, label="CPSAT",
                        solver="cpsat")
    return schedule, scaled


def model_peak_bytes(region: RegionModel, value: Callable[[Any], int]) -> int:
    """The peak fast storage the model itself reckons for a region's solution (``value`` reads the solver's): the
    largest amount any of its memory constraints that hold counts. For a whole subgraph it is the evaluator's
    peak, as both read the subgraph's ``MemoryLayout``."""
    def read(expr: Any) -> int:
        return expr if isinstance(expr, int) else value(expr)

    return max((read(used) for used, literal in region.memory if literal is None or value(literal)), default=0)
