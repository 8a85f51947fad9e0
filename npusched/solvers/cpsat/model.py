"""The CP-SAT scheduler: cascades, stripes, block configs, weight buffering and fast-storage residency, jointly.

The model (``build_model``; solved and read back in ``solve_cpsat``) decides *regions*: runs ``lo..hi`` of one NPU
subgraph's execution order. A region is a whole subgraph (the full model: every subgraph at once, so the bound is
global) or a window of one, where the passes outside keep the incumbent schedule's choices (the large-neighbourhood
search for networks too big for one model). The builder follows OR-Tools' own samples: the data of a region
(``_region_data``), then each variable family with its constraints, in dicts keyed as below, then the objective;
the same dicts read the solution back (``_extract``). Per region:

* ``use[c]``: candidate ``c`` (``npusched.solvers.cpsat.candidates``) runs its passes ``start..end``; every pass of
  the region is covered by exactly one chosen candidate (exact cover, ``_add_exact_cover``). A window also
  holds the incumbent's runs just before and after it (``ext_lo..lo-1``, ``hi+1..ext_hi``), fixed, because their
  prices depend on what the window decides (boundary placements, slack).
* ``resident[F]``: feature map F is held whole in fast storage. Only with dedicated fast storage (feature maps
  default to DRAM), only for maps produced and consumed inside the region (with shared fast storage every
  feature map is there anyway); the others keep their placement (Vela's default, or the incumbent's in a window).
  ``in_rolling[F]``: a chosen cascade holds F only in its rolling buffers, so never whole (residency and rolling
  consistency, ``_add_residency``).
* ``price[c, placement, slack]``: which row of candidate c's price table applies: the placements of its boundary
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

``peak`` is the fast-storage limit for ``--optimise Performance``, whose objective is the cycles. For ``Size`` it
is a variable: the model is solved once minimising ``peak``, then again with ``peak`` held to the least found and
the cycles minimised (lexicographic; the second solve starts from the first's solution). The peak's proven bound
and the cycles' bound at that peak are both reported.

Everything the evaluator prices is in the tables, so ``evaluate(schedule).total_cycles`` equals the objective:
exactly as a float (the solver reports the evaluator's total of the schedule it extracts) and, scaled, term for
term. Each subgraph is evaluated on its own (its steps start at 0; no slack crosses a CPU operator), so regions
of different subgraphs share nothing but the limit.

"Optimal" means optimal over the candidate space (a few block configs per pass, cascades of at most
``MAX_CASCADE_LENGTH`` passes, a few stripe heights, the weight slicings of Vela's schedules); the search for
large networks (``_improve_by_windows``, after ``_shrink_peak_by_windows`` for Size) proves no bound of its own, so
its bound is the pass-wise one below.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ortools.sat.python import cp_model

from npusched.errors import ScheduleError
from npusched.ir import FeatureMap
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.evaluator import (
    Evaluation,
    elementwise_reuse_source,
    evaluate,
    staging_limit,
    storage_size,
    subgraphs_of,
    tensor_use,
    verify,
)
from npusched.schedule.memory_layout import MemoryLayout, memory_layout
from npusched.schedule.peak import explain_peak
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
from npusched.solvers.heuristic import sched_ops_of
from npusched.solvers.max_schedule import max_schedule, vela_tensor_placements
from npusched.target.arch import ArchitectureFeatures, OptimisationStrategy

# Prices are in cycles with fractions; the objective counts 1/SCALE cycles (rounded per pass).
SCALE = 1000
# Networks with more passes than this are improved window by window instead of in one model.
FULL_MODEL_MAX_PASSES = 120
# Passes a window decides at first (it grows when a sweep over the network finds nothing better).
WINDOW_PASSES = 16
# Wall-clock cap on one window's solve.
WINDOW_SOLVE_SECONDS = 2.0
# With --deterministic the window search makes this many moves per second of the limit, whatever the clock says.
DETERMINISTIC_MOVES_PER_SECOND = 1.0
# Optimising for size, the window search spends this share of its time and moves lowering the peak.
PEAK_SHARE = 0.4

Log = Callable[[str], None]


class OutOfTime(Exception):
    """Building the model would overrun its deadline."""


@dataclass(frozen=True)
class CpSatResult:
    schedule: Schedule
    status: str  # "optimal" | "feasible" | "fallback"
    objective_cycles: float
    bound_cycles: float
    gap: float
    solve_seconds: float
    reason: str = ""
    model_stats: dict[str, Any] = field(default_factory=dict)
    scaled_objective: int | None = None
    # A bound for any schedule at all (``any_schedule_bound``); ``bound_cycles`` holds over the candidate space.
    any_schedule_bound_cycles: float = math.nan
    # "Performance" (fewest cycles within the limit) or "Size" (least peak, then fewest cycles at that peak).
    strategy: str = "Performance"
    # Size: a proven lower bound on the peak fast storage of any schedule of the candidate space, and whether the
    # schedule's peak meets it (None where no bound was proven: window search, fallback before solving).
    peak_bound_bytes: int | None = None
    peak_proven_minimal: bool = False


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
class _Table:
    """Price rows of one candidate: cycles (scaled int) and per-pass floats per (placement combo, slack group);
    ``artefact`` when some row profits from the DMA-credit artefact of Vela's estimate."""

    movable: tuple[FeatureMap, ...]
    groups: tuple[tuple[float, ...], ...]
    rows: dict[tuple[tuple[int, ...], int], tuple[int, tuple[float, ...]]]
    artefact: bool


@dataclass(frozen=True)
class _RegionModel:
    """One region's data and its variables, in dicts keyed as in the module docstring: ``use[c]``,
    ``resident[F]``, ``price[c, placement, slack group]`` (c indexes ``data.candidates``)."""

    data: _RegionData
    use: dict[int, Any]
    resident: dict[FeatureMap, Any]
    price: dict[tuple[int, tuple[int, ...], int], Any]
    # The fast storage each memory constraint counts, with the literal that enforces it (None: always).
    memory: tuple[tuple[Any, Any], ...]

    def scaled_cycles(self) -> Any:
        """The region's total cycles (scaled by SCALE): each chosen price row's cost."""
        return sum(self.data.tables[k].rows[combo, group][0] * row for (k, combo, group), row in self.price.items())


@dataclass
class CpSatModel:
    """The built model and what extraction needs."""

    model: cp_model.CpModel
    regions: list[_RegionModel]
    limit: int
    placements: dict[FeatureMap, TensorPlacement]  # what every feature map keeps unless the model moves it
    net: NetworkFacts
    stats: dict[str, Any]
    cycles: Any  # the regions' total cycles, scaled by SCALE (a linear expression)
    peak: Any  # with ``minimise_memory``, the variable every memory constraint is held to; else the fixed limit


# --------------------------------------------------------------------------------------------------------------
# Facts about the network, computed once per solve


class NetworkFacts:
    """What every region of one network needs: tensor use, Vela's placements, a shared pricer, and per subgraph
    the scheduler's view of its passes and its live ranges (computed on first use)."""

    def __init__(self, network: Network, arch: ArchitectureFeatures) -> None:
        self.network = network
        self.arch = arch
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
            self._facts[sgi] = SubgraphFacts(sgi, sg, sched_ops_of(sg, self.use, formats), self.use, reuse)
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
                hint_first: bool = False, deadline: float | None = None, light: bool = False,
                log: Log | None = None) -> CpSatModel:
    """The CP-SAT model deciding ``regions``; ``references`` (hint first) supply verbatim candidates.

    With ``incumbent``, feature maps that are not decided keep its placements and the passes around each region
    its choices. With ``minimise_memory`` the limit becomes a variable to minimise (used to report the smallest
    fast storage any candidate schedule needs). ``light`` keeps to Vela's block configs (see ``all_candidates``).
    Raises ``OutOfTime`` past ``deadline``.
    """
    start_time = time.monotonic()
    limit = staging_limit(net.arch) if limit is None else int(limit)
    model = cp_model.CpModel()
    peak = model.new_int_var(0, limit, "peak_fast_storage") if minimise_memory else limit
    placements = dict(net.base)
    if incumbent is not None:
        placements.update((fm, incumbent.placement(fm) or place) for fm, place in net.base.items())
    built = [_add_region(model, net, region, references, placements, incumbent, hint_first, limit, peak,
                         not minimise_memory, deadline, light) for region in regions]
    cycles = sum(region.scaled_cycles() for region in built)
    model.minimize(peak if minimise_memory else cycles)
    proto = model.proto
    stats = {"candidates": sum(len(r.data.candidates) for r in built), "variables": len(proto.variables),
             "constraints": len(proto.constraints), "build_seconds": round(time.monotonic() - start_time, 3),
             "priced_passes": len(net.pricer.memo)}
    if log is not None and incumbent is None:
        log(f"cp-sat model: {stats['candidates']} candidates, {stats['variables']} variables, "
            f"{stats['constraints']} constraints, built in {stats['build_seconds']:.2f} s")
    return CpSatModel(model, built, limit, placements, net, stats, cycles, peak)


def _incumbent_runs(net: NetworkFacts, incumbent: Schedule | None, sgi: int) -> list[Candidate]:
    """The incumbent's runs (cascades and lone passes) of subgraph ``sgi`` as candidates, in order."""
    if incumbent is None:
        return []
    facts = net.facts(sgi)
    return [make_candidate(facts, start, ops, "hint") for start, ops in segments_of(incumbent, facts.sg)]


def _slack_before(net: NetworkFacts, runs: list[Candidate], sgi: int, pos: int) -> float:
    """The slack the run ending at ``pos - 1`` leaves (0 at the start of a subgraph or without an incumbent)."""
    before = next((run for run in runs if run.end == pos - 1), None)
    return net.pricer.price(net.subgraphs[sgi].ops, before, {}, 0.0)[1] if before is not None else 0.0


@dataclass(frozen=True)
class _RegionData:
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
    tables: tuple[_Table, ...]
    excluded: frozenset[int]
    slack_out: tuple[float, ...]
    slack_classes: dict[int, list[float]]
    prebuffer_after: int
    starting_at: dict[int, list[int]]  # position -> the candidates starting there
    ending_at: dict[int, list[int]]
    rolling: dict[FeatureMap, list[int]]  # map -> the candidates holding it only in rolling buffers


def _price_passes(net: NetworkFacts, facts: SubgraphFacts, lo: int, hi: int, deadline: float | None
                  ) -> tuple[dict[int, Any], dict[tuple[int, bool, int], Any]]:
    """Every pass's options and fastest block configs (``price_positions``), pass by pass: pricing takes most of
    the build time, so the deadline is checked in between."""
    full: dict[int, Any] = {}
    fastest: dict[tuple[int, bool, int], Any] = {}
    for pos in range(lo, hi + 1):
        _check(deadline)
        pass_full, pass_fastest = price_positions(net.arch, facts, (pos,))
        full.update(pass_full)
        fastest.update(pass_fastest)
    return full, fastest


def _region_data(net: NetworkFacts, region: Region, references: tuple[Schedule, ...],
                 placements: dict[FeatureMap, TensorPlacement], incumbent: Schedule | None, hint_first: bool,
                 limit: int, deadline: float | None, light: bool) -> _RegionData:
    sgi, lo, hi, ext_lo, ext_hi = region.sg_index, region.lo, region.hi, region.ext_lo, region.ext_hi
    facts = net.facts(sgi)
    sg = facts.sg
    layout = net.layout(sgi)
    priced = None if light else _price_passes(net, facts, lo, hi, deadline)
    runs = _incumbent_runs(net, incumbent, sgi)
    fixed = [run for run in runs if ext_lo <= run.start < lo or hi < run.start <= ext_hi]
    candidates = fixed + all_candidates(net.arch, facts, references, hint_first, lo, hi, light, priced)
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
    slack_out = tuple(net.pricer.price(sg.ops, c, {}, 0.0)[1] for c in candidates)  # placement-independent
    incoming_slack = _slack_before(net, runs, sgi, ext_lo)
    slack_classes = {pos: sorted({slack_out[k] for k in ending_at.get(pos - 1, [])}) if pos > ext_lo
                     else [incoming_slack] for pos in positions}
    tables = []
    for k, c in enumerate(candidates):
        if k % 16 == 0:
            _check(deadline)
        tables.append(_price_table(net, sg, c, [fm for fm in c.boundary if fm in movable], slack_classes[c.start],
                                   kept))
    excluded = frozenset(k for k, (c, table) in enumerate(zip(candidates, tables, strict=True))
                         if k >= len(fixed) and (table.artefact or c.internal & layout.grouped))
    prebuffer_after = next((run.mem_before for run in runs if run.start == ext_hi + 1), 0)
    return _RegionData(region, tuple(candidates), len(fixed), positions, live, movable, frozenset(decided), kept,
                       tuple(tables), excluded, slack_out, slack_classes, prebuffer_after, starting_at, ending_at,
                       rolling)


def _add_region(model: cp_model.CpModel, net: NetworkFacts, region: Region, references: tuple[Schedule, ...],
                placements: dict[FeatureMap, TensorPlacement], incumbent: Schedule | None, hint_first: bool,
                limit: int, peak: Any, cuts: bool, deadline: float | None, light: bool) -> _RegionModel:
    """Data, variables and constraints of one region, family by family as the module docstring lists them."""
    data = _region_data(net, region, references, placements, incumbent, hint_first, limit, deadline, light)
    use = _add_exact_cover(model, data)
    resident, in_rolling = _add_residency(model, data, use)
    price, after_slack = _add_price_tables(model, data, use, resident)
    _add_slack_chain(model, data, use, after_slack)
    ofm_over_ifm = _add_ofm_over_ifm(model, net, data, use, resident)
    memory = _add_memory_at_each_step(model, net, data, use, resident, in_rolling, ofm_over_ifm, peak)
    if cuts:
        _add_clique_cuts(model, net, data, resident, limit)
    return _RegionModel(data, use, resident, price, memory)


def _add_exact_cover(model: cp_model.CpModel, data: _RegionData) -> dict[int, Any]:
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


def _add_residency(model: cp_model.CpModel, data: _RegionData, use: dict[int, Any]
                   ) -> tuple[dict[FeatureMap, Any], dict[FeatureMap, Any]]:
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


def _add_price_tables(model: cp_model.CpModel, data: _RegionData, use: dict[int, Any],
                      resident: dict[FeatureMap, Any]
                      ) -> tuple[dict[tuple[int, tuple[int, ...], int], Any], dict[tuple[int, float], Any]]:
    """``price[c, placement, slack group]``: the row of c's price table that applies, one exactly when c runs,
    its placement bits agreeing with ``resident``; ``after_slack[c, s]``: c runs after a candidate that leaves
    slack s, one exactly when c runs, agreeing with the row's slack group (only where c's price depends on the
    slack). A single-row table is priced by ``use[c]`` itself."""
    sgi = data.region.sg_index
    price: dict[tuple[int, tuple[int, ...], int], Any] = {}
    after_slack: dict[tuple[int, float], Any] = {}
    for k, (c, table) in enumerate(zip(data.candidates, data.tables, strict=True)):
        if len(table.rows) == 1:
            ((combo, group),) = table.rows
            price[k, combo, group] = use[k]
            continue
        rows = {(combo, group): model.new_bool_var(f"price_sg{sgi}_p{c.start}_{k}_{(combo, group)}")
                for combo, group in table.rows}
        price.update(((k, combo, group), row) for (combo, group), row in rows.items())
        model.add(sum(rows.values()) == use[k])
        for bit, fm in enumerate(table.movable):
            model.add(sum(row for (combo, _), row in rows.items() if combo[bit]) <= resident[fm])
            model.add(sum(row for (combo, _), row in rows.items() if not combo[bit]) <= 1 - resident[fm])
        if len(table.groups) > 1:
            slacks = data.slack_classes[c.start]
            for i, s in enumerate(slacks):
                after_slack[k, s] = model.new_bool_var(f"after_slack_sg{sgi}_p{c.start}_{k}_{i}")
            model.add(sum(after_slack[k, s] for s in slacks) == use[k])
            for group, members in enumerate(table.groups):
                model.add(sum(row for (_, g), row in rows.items() if g == group)
                          == sum(after_slack[k, s] for s in members))
    return price, after_slack


def _add_slack_chain(model: cp_model.CpModel, data: _RegionData, use: dict[int, Any],
                     after_slack: dict[tuple[int, float], Any]) -> None:
    """Slack chain: at each boundary, the candidates that start there after slack s are no more than the chosen
    candidates ending just before it that leave s (a transportation problem: tight in the LP relaxation)."""
    incoming: dict[tuple[int, float], list[Any]] = {}
    for (k, s), var in after_slack.items():
        incoming.setdefault((data.candidates[k].start, s), []).append(var)
    for (pos, s), terms in incoming.items():
        model.add(sum(terms) <= sum(use[m] for m in data.ending_at.get(pos - 1, []) if data.slack_out[m] == s))


def _add_ofm_over_ifm(model: cp_model.CpModel, net: NetworkFacts, data: _RegionData, use: dict[int, Any],
                      resident: dict[FeatureMap, Any]) -> dict[int, Any]:
    """Bytes a lone elementwise candidate saves by writing its OFM over its IFM, per candidate: whenever it runs
    with shared fast storage; with dedicated, only when ``ofm_over_ifm[c]`` (both maps resident) is chosen."""
    saving: dict[int, Any] = {}
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


def _live_bytes(net: NetworkFacts, data: _RegionData, resident: dict[FeatureMap, Any],
                in_rolling: dict[FeatureMap, Any]) -> dict[Any, Any]:
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


def _add_memory_at_each_step(model: cp_model.CpModel, net: NetworkFacts, data: _RegionData, use: dict[int, Any],
                             resident: dict[FeatureMap, Any], in_rolling: dict[FeatureMap, Any],
                             saving: dict[int, Any], peak: Any) -> tuple[tuple[Any, Any], ...]:
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
    counted: list[tuple[Any, Any]] = []
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
        following = [data.candidates[m].mem_before * use[m] for m in data.starting_at.get(c.end + 1, [])
                     if data.candidates[m].mem_before]
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


def _add_clique_cuts(model: cp_model.CpModel, net: NetworkFacts, data: _RegionData, resident: dict[FeatureMap, Any],
                     limit: int) -> None:
    """Cuts the LP misses: of the movable maps live at a position, at most k-1 of those larger than limit/k fit
    at once (k = 2, 3, 4)."""
    for pos in data.positions:
        sizes = {fm: net.size(fm) for fm in resident if data.live[fm][0] <= pos <= data.live[fm][1]}
        for parts in (2, 3, 4):
            big = [resident[fm] for fm, size in sizes.items() if size * parts > limit]
            if len(big) >= parts:
                model.add(sum(big) <= parts - 1)


def _price_table(net: NetworkFacts, sg: NpuSubgraph, cand: Candidate, movable: list[FeatureMap], slacks: list[float],
                 kept: dict[FeatureMap, TensorPlacement]) -> _Table:
    """Every price of ``cand``: per residency of its movable boundary maps and per incoming slack; dimensions
    that never change the price are dropped, slacks with identical prices grouped. ``kept`` are the placements
    of maps the model does not decide that differ from Vela's defaults."""
    fast, base = net.fast, net.base
    internal = {fm: TensorPlacement(fast, base[fm].format) for fm in cand.internal if fm in base}
    full: dict[tuple[tuple[int, ...], float], tuple[int, tuple[float, ...]]] = {}
    artefact = False
    first_op = sg.ops[cand.start]
    for combo in itertools.product((0, 1), repeat=len(movable)):
        places = {**kept, **internal}
        for bit, fm in zip(combo, movable, strict=True):
            if bit:
                places[fm] = TensorPlacement(fast, base[fm].format)
        # The incoming slack changes only the first pass's price (the slack a pass leaves is its own).
        totals, _, credited = net.pricer.price(sg.ops, cand, places, slacks[0])
        artefact = artefact or credited
        rest = tuple(totals[1:])
        rest_scaled = sum(round(t * SCALE) for t in rest)
        for s in slacks:
            first, _, credited = net.pricer.price_pass(first_op, cand.ops[0], places, s)
            artefact = artefact or credited
            full[(combo, s)] = (round(first * SCALE) + rest_scaled, (first, *rest))
    relevant = []
    for bit in range(len(movable)):
        if any(full[(combo, s)][0] != full[(combo[:bit] + (1 - combo[bit],) + combo[bit + 1:], s)][0]
               for combo in itertools.product((0, 1), repeat=len(movable)) for s in slacks):
            relevant.append(bit)
    combos = list(itertools.product((0, 1), repeat=len(relevant)))

    def full_combo(reduced: tuple[int, ...]) -> tuple[int, ...]:
        out = [0] * len(movable)
        for bit, v in zip(relevant, reduced, strict=True):
            out[bit] = v
        return tuple(out)

    columns: dict[tuple[int, ...], list[float]] = {}
    for s in slacks:
        column = tuple(full[(full_combo(rc), s)][0] for rc in combos)
        columns.setdefault(column, []).append(s)
    groups = tuple(tuple(v) for v in columns.values())
    rows = {}
    for g, members in enumerate(groups):
        for rc in combos:
            rows[(rc, g)] = full[(full_combo(rc), members[0])]
    return _Table(tuple(movable[b] for b in relevant), groups, rows, artefact)


# --------------------------------------------------------------------------------------------------------------
# Extraction


def _extract(built: CpSatModel, value: Callable[[Any], int], incumbent: Schedule | None = None
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
        scaled += sum(data.tables[k].rows[combo, group][0] for (k, combo, group), row in region.price.items()
                      if value(row))
        for fm in data.decided:
            if fm in base:
                places[fm] = TensorPlacement(fast if fm in in_fast else base[fm].mem_area, base[fm].format)
    tensors = tuple(places.items())
    if incumbent is not None:
        return Schedule(ops=incumbent.with_ops(ops).ops, tensors=tensors, label="CPSAT", solver="cpsat"), scaled
    schedule = Schedule(ops=tuple(sorted(ops, key=lambda o: o.op_index)), tensors=tensors, label="CPSAT",
                        solver="cpsat")
    return schedule, scaled


def model_peak_bytes(region: _RegionModel, value: Callable[[Any], int]) -> int:
    """The peak fast storage the model itself reckons for a region's solution (``value`` reads the solver's): the
    largest amount any of its memory constraints that hold counts. For a whole subgraph it is the evaluator's
    peak, as both read the subgraph's ``MemoryLayout``."""
    def read(expr: Any) -> int:
        return expr if isinstance(expr, int) else value(expr)

    return max((read(used) for used, literal in region.memory if literal is None or value(literal)), default=0)


class _Progress(cp_model.CpSolverSolutionCallback):
    """Logs every solution: the objective in ``unit`` (the model counts 1/``scale`` of one)."""

    def __init__(self, log: Log | None, start: float, unit: str = "cycles", scale: int = SCALE) -> None:
        super().__init__()
        self.log = log
        self.start = start
        self.unit = unit
        self.scale = scale

    def on_solution_callback(self) -> None:
        if self.log is not None:
            elapsed = time.monotonic() - self.start
            self.log(f"cp-sat {elapsed:6.1f} s: objective {self.objective_value / self.scale:.0f} {self.unit}, "
                     f"bound {self.best_objective_bound / self.scale:.0f}")


def _hint(built: CpSatModel, hint: Schedule | None, peak_bytes: int | None = None) -> None:
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


def _solver(time_limit: float, workers: int, seed: int, deterministic: bool,
            work_seconds: float | None = None) -> cp_model.CpSolver:
    """A solver stopping at ``time_limit`` seconds of wall clock; with ``deterministic``, after ``work_seconds``
    (default: half the limit) of CP-SAT's deterministic time, which does not depend on the machine's load."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.05)
    solver.parameters.num_workers = max(1, workers)
    solver.parameters.random_seed = seed
    # Full linearisation: the price-row and residency links are MIP-like, and their LP bound proves optimality
    # where the default level stalls (mobilenet_v2 on 256 KiB of dedicated SRAM: 21% gap -> optimal in 25 s).
    solver.parameters.linearization_level = 2
    if deterministic:
        solver.parameters.interleave_search = True
        # A deterministic-time budget stops the search at the same point whatever the machine load (the wall
        # clock limit above stays as a safety net).
        solver.parameters.max_deterministic_time = max(work_seconds or time_limit / 2, 0.05)
    return solver


# --------------------------------------------------------------------------------------------------------------
# Solving


def solve_cpsat(network: Network, arch: ArchitectureFeatures, *, time_limit_seconds: float = 30.0,
                workers: int | None = None, seed: int = 0, deterministic: bool = False, hint: Schedule | None = None,
                hint_evaluation: Evaluation | None = None, log: Log | None = None) -> CpSatResult:
    """Schedule ``network`` with CP-SAT within ``time_limit_seconds`` of wall clock (building included; the
    answer's evaluation and verification too). ``hint_evaluation`` saves evaluating the hint again.

    ``arch.optimise`` picks the objective: "Performance", the fewest cycles within the fast-storage limit;
    "Size", the least peak fast storage first and then the fewest cycles at that peak (lexicographic).
    Never worse than ``hint`` when the hint verifies: the better of the two by the evaluator (by that objective)
    is returned. Small networks are solved in one model (bounds and gap over the whole candidate space); large
    ones, or when the one model cannot be built in time, are improved window by window from the hint. Raises
    ScheduleError when no candidate schedule fits the fast storage.
    """
    start = time.monotonic()
    net = NetworkFacts(network, arch)
    result = _search(net, start, time_limit_seconds, workers or os.cpu_count() or 1, seed, deterministic, hint,
                     hint_evaluation, log)
    return replace(result, any_schedule_bound_cycles=any_schedule_bound(net),
                   strategy="Size" if _size_first(arch) else "Performance")


def _size_first(arch: ArchitectureFeatures) -> bool:
    return arch.optimise is OptimisationStrategy.SIZE


def _rank(evaluation: Evaluation, size_first: bool) -> tuple[float, ...]:
    """What the objective compares: cycles, or (peak fast storage, cycles) when optimising for size."""
    return (evaluation.peak_fast_storage, evaluation.total_cycles) if size_first else (evaluation.total_cycles,)


def _search(net: NetworkFacts, start: float, time_limit_seconds: float, workers: int, seed: int,
            deterministic: bool, hint: Schedule | None, hint_evaluation: Evaluation | None,
            log: Log | None) -> CpSatResult:
    network, arch = net.network, net.arch
    size_first = _size_first(arch)
    references = tuple(s for s in (hint, _max_schedule_or_none(network, arch)) if s is not None)
    limit = staging_limit(arch)
    hint_eval = hint_evaluation if hint_evaluation is not None or hint is None else evaluate(network, arch, hint)
    # The hint with its evaluation when it fits the limit: what the search improves on, and falls back to.
    fitting = (hint, hint_eval) if hint is not None and hint_eval is not None and \
        not verify(network, arch, hint, hint_eval) else None
    # Keep back what the last evaluation and verification of the answer take (no more than setting up took).
    deadline = start + time_limit_seconds - 1.2 * (time.monotonic() - start)
    stats: dict[str, Any] = {"passes": net.passes}
    if net.passes > FULL_MODEL_MAX_PASSES and fitting is not None:
        return _windows_result(net, references, *fitting, limit, start, deadline, workers, seed,
                               deterministic, log, stats, "the network is too large for one model")
    try:
        # With a schedule that fits to improve on, leave time to improve it window by window should the one model
        # take too long to build.
        # Deterministic runs choose by size alone, never by the clock (the limit stays a safety net).
        share = 1.0 if deterministic else 0.75 if fitting is not None else 0.9
        built = build_model(net, whole_subgraph_regions(net), references, limit=limit, log=log,
                            minimise_memory=size_first, hint_first=hint is not None,
                            deadline=start + share * (deadline - start))
    except OutOfTime:
        if fitting is None:
            raise ScheduleError(_nothing_found(hint_eval, limit, time_limit_seconds)) from None
        return _windows_result(net, references, *fitting, limit, start, deadline, workers, seed,
                               deterministic, log, stats, "the one model could not be built in time")
    stats.update(built.stats, mode="full")
    _hint(built, hint, hint_eval.peak_fast_storage if hint_eval is not None else None)
    peak = _PeakBound()
    if size_first:
        # First the least peak, in half the time left; then the fewest cycles within it.
        solver = _solver((deadline - time.monotonic()) / 2, workers, seed, deterministic, time_limit_seconds / 4)
        status = solver.solve(built.model, _Progress(log, start, "bytes of fast storage", 1))
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            least_peak = round(solver.objective_value)
            peak = _PeakBound(least_peak, math.ceil(solver.best_objective_bound - 1e-6), status == cp_model.OPTIMAL)
            smallest = _extract(built, solver.boolean_value)
            if log is not None:
                log(f"cp-sat: peak {peak.found_bytes} bytes, bound {peak.bound_bytes} bytes; now the fewest cycles "
                    "within that peak")
            _hold_peak_and_minimise_cycles(built, solver, least_peak)
            solver = _solver(deadline - time.monotonic(), workers, seed, deterministic, time_limit_seconds / 4)
            cycles_status = solver.solve(built.model, _Progress(log, start))
            if cycles_status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                # The smallest schedule is a solution of the second model too; without time to find it, keep it.
                return _verified_result(net, smallest, hint, fitting[1] if fitting else None, cp_model.FEASIBLE,
                                        math.nan, peak,
                                        time.monotonic() - start, stats, log)
            status = cycles_status if status == cp_model.OPTIMAL else cp_model.FEASIBLE
    else:
        solver = _solver(deadline - time.monotonic(), workers, seed, deterministic, time_limit_seconds / 2)
        status = solver.solve(built.model, _Progress(log, start))
    solve_seconds = time.monotonic() - start
    if status == cp_model.INFEASIBLE:
        if fitting is not None:
            return _fallback(fitting[0], fitting[1].total_cycles, "the candidate space has no schedule that fits",
                             solve_seconds, stats)
        fit = smallest_fast_storage(net, references, deadline, deterministic)
        if fit.schedule is None:
            raise ScheduleError(f"no schedule fits {built.limit} bytes of fast storage")
        raise ScheduleError(f"no schedule fits {built.limit} bytes of fast storage; the smallest that fits needs "
                            f"{fit.needed_bytes} bytes"
                            + ("" if fit.proven else " or fewer (not proven within the time limit)")
                            + f": {explain_peak(network, arch, fit.schedule)}", needed_bytes=fit.needed_bytes)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if fitting is None:
            raise ScheduleError(_nothing_found(hint_eval, limit, time_limit_seconds))
        return _fallback(fitting[0], fitting[1].total_cycles, f"no CP-SAT solution within {time_limit_seconds:g} s",
                         solve_seconds, stats)
    return _verified_result(net, _extract(built, solver.boolean_value), hint, fitting[1] if fitting else None,
                            status, solver.best_objective_bound / SCALE, peak, solve_seconds, stats, log)


@dataclass(frozen=True)
class _PeakBound:
    """The least peak fast storage the first (Size) solve found and the lower bound it proved, in bytes."""

    found_bytes: int | None = None
    bound_bytes: int | None = None
    proven: bool = False


def _hold_peak_and_minimise_cycles(built: CpSatModel, solver: cp_model.CpSolver, peak_bytes: int) -> None:
    """Turn the solved Size model into its second stage: the peak held to ``peak_bytes``, the cycles minimised,
    every variable hinted with the first stage's solution (a schedule of that peak is known at once)."""
    model = built.model
    model.add(built.peak <= peak_bytes)
    model.minimize(built.cycles)
    model.clear_hints()
    for index in range(len(model.proto.variables)):
        variable = model.get_int_var_from_proto_index(index)
        model.add_hint(variable, solver.value(variable))


def _verified_result(net: NetworkFacts, found: tuple[Schedule, int], hint: Schedule | None,
                     hint_eval: Evaluation | None, status: cp_model.CpSolverStatus, bound: float, peak: _PeakBound,
                     solve_seconds: float, stats: dict[str, Any], log: Log | None) -> CpSatResult:
    """The solver's schedule once the evaluator has priced and verified it, or the hint (``hint_eval`` is given
    when the hint fits) when it is better by the objective or the solver's schedule fails verification."""
    schedule, scaled = found
    size_first = _size_first(net.arch)
    evaluation = evaluate(net.network, net.arch, schedule)
    problems = verify(net.network, net.arch, schedule, evaluation)
    if hint is not None and hint_eval is not None and (problems or _rank(hint_eval, size_first)
                                                       < _rank(evaluation, size_first)):
        # A failed verification should not happen (the model counts memory as the evaluator does); the judge has
        # the last word either way.
        reason = (f"the CP-SAT schedule fails verification: {problems[0]}" if problems
                  else "the hint is better than the CP-SAT schedule")
        return replace(_fallback(hint, hint_eval.total_cycles, reason, solve_seconds, stats, bound),
                       peak_bound_bytes=peak.bound_bytes, peak_proven_minimal=peak.proven)
    if problems:
        raise ScheduleError(f"the CP-SAT schedule fails verification: {problems[0]}")
    label = "optimal" if status == cp_model.OPTIMAL else "feasible"
    gap = 0.0 if status == cp_model.OPTIMAL else _gap(evaluation.total_cycles, bound) if not math.isnan(bound) \
        else math.nan
    within = ""
    if size_first and peak.found_bytes is not None:
        within = (f"peak {evaluation.peak_fast_storage} bytes, "
                  + ("the least in the candidate space" if peak.proven else f"bound {peak.bound_bytes} bytes")
                  + "; cycles at that peak: ")
    reason = (f"cp-sat {label}: {within}bound {bound:.0f} cycles, gap {gap:.2%}" if not math.isnan(bound)
              else f"cp-sat {label}: {within}no bound")
    schedule = schedule.with_status(label, reason)
    if log is not None:
        log(f"cp-sat {label}: {evaluation.total_cycles:.0f} cycles, {reason.split(': ', 1)[1]}, "
            f"{solve_seconds:.1f} s")
    return CpSatResult(schedule, label, evaluation.total_cycles, bound, gap, solve_seconds, "", stats, scaled,
                       peak_bound_bytes=peak.bound_bytes, peak_proven_minimal=peak.proven)


def _nothing_found(hint_eval: Evaluation | None, limit: int, seconds: float) -> str:
    why = ("the heuristic's (Vela legacy's) schedule needs "
           f"{hint_eval.peak_fast_storage} bytes" if hint_eval is not None else "the heuristic (Vela legacy) has none")
    return (f"no schedule that fits {limit} bytes of fast storage was found within {seconds:.3g} s ({why}); a "
            "longer --time-limit gives CP-SAT the time to find one or to prove there is none")


def _gap(cycles: float, bound: float) -> float:
    return max(0.0, (cycles - bound) / cycles) if cycles else 0.0


def _max_schedule_or_none(network: Network, arch: ArchitectureFeatures) -> Schedule | None:
    try:
        return max_schedule(network, arch)
    except ScheduleError:
        return None


def _fallback(schedule: Schedule, total: float, reason: str, seconds: float, stats: dict[str, Any],
              bound: float = math.nan) -> CpSatResult:
    return CpSatResult(schedule.with_status("fallback", reason), "fallback", total, bound,
                       _gap(total, bound) if not math.isnan(bound) else math.nan, seconds, reason, stats)


@dataclass(frozen=True)
class SmallestFit:
    """The least fast storage a schedule of the candidate space was found to need, whether that is proven the
    least, and the schedule that needs it (``needed_bytes`` -1 and no schedule when none was found in time)."""

    needed_bytes: int
    proven: bool
    schedule: Schedule | None = None


def smallest_fast_storage(net: NetworkFacts, references: tuple[Schedule, ...], deadline: float,
                          deterministic: bool = False) -> SmallestFit:
    """The least fast storage a schedule of the candidate space needs (CP-SAT, minimising the limit). With
    ``deterministic`` the search stops after a fixed amount of work (half the time left), not by the clock."""
    try:
        built = build_model(net, whole_subgraph_regions(net), references,
                            limit=max(staging_limit(net.arch), 1 << 40), minimise_memory=True, deadline=deadline)
    except OutOfTime:
        return SmallestFit(-1, False)
    solver = _solver(deadline - time.monotonic(), 1, 0, deterministic)
    status = solver.solve(built.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        schedule, _ = _extract(built, solver.boolean_value)
        return SmallestFit(int(solver.objective_value), status == cp_model.OPTIMAL, schedule)
    return SmallestFit(-1, False)


# --------------------------------------------------------------------------------------------------------------
# Large networks: windows of the execution order, the rest fixed (a large-neighbourhood search)


def _windows(net: NetworkFacts, width: int, evaluation: Evaluation) -> list[tuple[int, int, int]]:
    """(subgraph, first, last position) of windows of ``width`` passes over every subgraph, overlapping by half,
    the costliest first (where the time runs out before a sweep ends, the largest gains come first)."""
    cycles = {cost.op_index: cost.total_cycles for cost in evaluation.ops}
    step = max(1, width // 2)
    windows = [(sgi, lo, min(lo + width, len(sg.ops)) - 1) for sgi, sg in enumerate(net.subgraphs)
               for lo in range(0, max(1, len(sg.ops) - step), step) if sg.ops]

    def cost(window: tuple[int, int, int]) -> float:
        sgi, lo, hi = window
        return sum(cycles.get(op.index, 0.0) for op in net.subgraphs[sgi].ops[lo:hi + 1])

    return sorted(windows, key=lambda w: -cost(w))


def _aligned(net: NetworkFacts, incumbent: Schedule, sgi: int, lo: int, hi: int) -> Region:
    """The window ``lo..hi`` widened to whole runs of the incumbent (a window never cuts one of its cascades),
    with the runs just outside it."""
    runs = [(start, start + len(ops) - 1) for start, ops in segments_of(incumbent, net.subgraphs[sgi])]
    first = next(k for k, (_, end) in enumerate(runs) if end >= lo)
    last = next(k for k, (_, end) in enumerate(runs) if end >= hi)
    return Region(sgi, runs[first][0], runs[last][1], runs[max(first - 1, 0)][0],
                  runs[min(last + 1, len(runs) - 1)][1])


def _incumbent_cost(net: NetworkFacts, incumbent: Schedule, region: Region) -> int:
    """The scaled price of the incumbent over ``ext_lo..ext_hi``, as the window model's tables price it."""
    places = {fm: incumbent.placement(fm) or p for fm, p in net.base.items()}
    runs = _incumbent_runs(net, incumbent, region.sg_index)
    slack = _slack_before(net, runs, region.sg_index, region.ext_lo)
    total = 0
    for run in runs:
        if region.ext_lo <= run.start <= region.ext_hi:
            totals, slack, _ = net.pricer.price(net.subgraphs[region.sg_index].ops, run, places, slack)
            total += sum(round(t * SCALE) for t in totals)
    return total


def _improve_by_windows(net: NetworkFacts, references: tuple[Schedule, ...], incumbent: Schedule,
                        evaluation: Evaluation, limit: int, deadline: float, moves: float, workers: int, seed: int,
                        deterministic: bool, log: Log | None) -> tuple[Schedule, float, dict[str, Any]]:
    """Improve ``incumbent`` (verified; ``evaluation`` is the evaluator's) move by move until ``deadline`` or
    after ``moves`` moves (a deterministic search stops by count, never by the clock). A move
    decides some regions with everything else fixed, so an accepted move can only lower the total:

    * residency: every pass keeps the incumbent's choices, every feature map of every subgraph may move
      (dedicated fast storage only): maps live far longer than a window are placed here;
    * windows of the execution order, costliest first, with Vela's block configs only (cheap: nothing to price
      but the candidates themselves), then with every candidate, then wider.

    Each stage repeats until it finds nothing better. The result is verified after every sweep; should a
    sweep's result fail, the previous one is kept."""
    verified, verified_cycles = incumbent, evaluation.total_cycles
    stats = {"windows": 0, "improved_windows": 0, "sweeps": 0, "largest_window": 0}
    moves_left = moves
    longest = max(len(sg.ops) for sg in net.subgraphs)
    stages: list[tuple[str, int]] = [] if net.shared else [("residency", 0)]
    stages.append(("light", WINDOW_PASSES))
    width = WINDOW_PASSES
    while True:
        stages.append(("full", width))
        if width >= longest:
            break
        width *= 2

    def move(regions: list[Region], light: bool, seconds: float) -> bool:
        """Solve ``regions`` of the incumbent; True when that lowered its cost."""
        nonlocal incumbent, moves_left
        if moves_left <= 0:
            return False
        moves_left -= 1
        try:
            built = build_model(net, regions, (incumbent, *references), limit=limit, incumbent=incumbent,
                                hint_first=True, deadline=deadline - 0.1, light=light)
        except OutOfTime:
            return False
        _hint(built, incumbent)
        solver = _solver(min(deadline - time.monotonic(), seconds), workers, seed, deterministic, seconds / 2)
        status = solver.solve(built.model)
        stats["windows"] += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        if solver.objective_value >= sum(_incumbent_cost(net, incumbent, region) for region in regions):
            return False
        incumbent, _ = _extract(built, solver.boolean_value, incumbent)
        stats["improved_windows"] += 1
        return True

    while stages and time.monotonic() < deadline and moves_left > 0:
        kind, width = stages[0]
        improved = False
        if kind == "residency":
            # Every run fixed: the free part of each region is empty.
            regions = [Region(sgi, len(sg.ops), len(sg.ops) - 1, 0, len(sg.ops) - 1)
                       for sgi, sg in enumerate(net.subgraphs) if sg.ops]
            improved = move(regions, True, 4 * WINDOW_SOLVE_SECONDS)
        else:
            for sgi, lo, hi in _windows(net, width, evaluation):
                if deadline - time.monotonic() < 0.2 or moves_left <= 0:
                    break
                region = _aligned(net, incumbent, sgi, lo, hi)
                stats["largest_window"] = max(stats["largest_window"], region.hi - region.lo + 1)
                improved = move([region], kind == "light", WINDOW_SOLVE_SECONDS) or improved
        stats["sweeps"] += 1
        if not improved:
            stages.pop(0)
            continue
        evaluation = evaluate(net.network, net.arch, incumbent)
        if verify(net.network, net.arch, incumbent, evaluation, limit) or evaluation.total_cycles > verified_cycles:
            break
        verified, verified_cycles = incumbent, evaluation.total_cycles
        if log is not None:
            what = "residency" if kind == "residency" else f"{width}-pass windows" + (
                " (Vela block configs)" if kind == "light" else "")
            log(f"cp-sat: sweep {stats['sweeps']} ({what}): {verified_cycles:.0f} cycles")
    return verified, verified_cycles, stats


def _windows_result(net: NetworkFacts, references: tuple[Schedule, ...], hint: Schedule, hint_eval: Evaluation,
                    limit: int, start: float, deadline: float, workers: int, seed: int, deterministic: bool,
                    log: Log | None, stats: dict[str, Any], why: str) -> CpSatResult:
    """The window search from the hint: for Size, first windows that lower the peak (``PEAK_SHARE`` of the time
    and moves), then windows that lower the cycles within the peak reached."""
    if log is not None:
        log(f"cp-sat: {why}; improving the heuristic's schedule window by window")
    # A deterministic search stops after a number of moves, not at the clock (which stays a safety net).
    moves = max(1, round(DETERMINISTIC_MOVES_PER_SECOND * (deadline - time.monotonic()))) if deterministic else math.inf
    reason = f"large-neighbourhood search over windows ({why}): no bound over the candidate space"
    if _size_first(net.arch):
        peak_moves = max(1, round(PEAK_SHARE * moves)) if deterministic else math.inf
        hint, hint_eval, peak_stats = _shrink_peak_by_windows(
            net, references, hint, hint_eval, limit, time.monotonic() + PEAK_SHARE * (deadline - time.monotonic()),
            peak_moves, workers, seed, deterministic, log)
        stats.update(peak_stats)
        moves = max(1, moves - peak_moves)
        limit = min(limit, hint_eval.peak_fast_storage)
        reason += f"; peak lowered around its step only, cycles then lowered within {limit} bytes"
    schedule, cycles, window_stats = _improve_by_windows(net, references, hint, hint_eval, limit, deadline, moves,
                                                         workers, seed, deterministic, log)
    stats.update(window_stats, mode="windows")
    status = "feasible"
    return CpSatResult(schedule.with_status(status, reason), status, cycles, math.nan, math.nan,
                       time.monotonic() - start, reason, stats)


def _peak_rank(evaluation: Evaluation) -> tuple[int, int]:
    """(peak fast storage, steps at that peak): a move that lowers the use at one of several equal peaks counts
    as progress."""
    peak = evaluation.peak_fast_storage
    return peak, sum(memory.usage.count(peak) for memory in evaluation.memory)


def _peak_position(net: NetworkFacts, evaluation: Evaluation) -> tuple[int, int]:
    """(subgraph, position) of the pass at or just before the first step where fast-storage use peaks."""
    sgi, memory = max(enumerate(evaluation.memory), key=lambda item: item[1].peak)
    step = memory.usage.index(memory.peak)
    ops = net.subgraphs[sgi].ops
    return sgi, max((pos for pos, op in enumerate(ops) if memory.op_steps.get(op.index, 0) <= step), default=0)


def _shrink_peak_by_windows(net: NetworkFacts, references: tuple[Schedule, ...], incumbent: Schedule,
                            evaluation: Evaluation, limit: int, deadline: float, moves: float, workers: int,
                            seed: int, deterministic: bool, log: Log | None
                            ) -> tuple[Schedule, Evaluation, dict[str, Any]]:
    """Lower the peak fast storage of ``incumbent`` (verified) window by window: a window around the step where
    the use peaks is re-decided with its highest use minimised, twice as wide when that finds nothing lower,
    back to ``WINDOW_PASSES`` after a success. What a window decides (its cascades, its rolling and weight
    buffers, the residency of maps that live only inside it) lives only inside it, and the passes outside keep
    their choices, so the use elsewhere stays as it was: an accepted move never raises the peak. Each accepted
    move is verified by the evaluator. Stops at ``deadline``, after ``moves`` moves, or when a window as wide
    as the subgraph finds nothing lower."""
    stats = {"peak_windows": 0, "peak_improved_windows": 0}
    width = WINDOW_PASSES
    while moves > 0 and deadline - time.monotonic() > 0.2:
        moves -= 1
        sgi, pos = _peak_position(net, evaluation)
        last = len(net.subgraphs[sgi].ops) - 1
        if width > 2 * (last + 1):
            break
        region = _aligned(net, incumbent, sgi, max(0, pos - width // 2), min(last, pos + width // 2))
        peak = evaluation.peak_fast_storage
        try:
            built = build_model(net, [region], (incumbent, *references), limit=peak, minimise_memory=True,
                                incumbent=incumbent, hint_first=True, deadline=deadline - 0.1)
        except OutOfTime:
            break
        _hint(built, incumbent, peak)
        solver = _solver(min(deadline - time.monotonic(), WINDOW_SOLVE_SECONDS), workers, seed, deterministic,
                         WINDOW_SOLVE_SECONDS / 2)
        status = solver.solve(built.model)
        stats["peak_windows"] += 1
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and solver.objective_value < peak:
            candidate, _ = _extract(built, solver.boolean_value, incumbent)
            candidate_eval = evaluate(net.network, net.arch, candidate)
            if (not verify(net.network, net.arch, candidate, candidate_eval, limit)
                    and _peak_rank(candidate_eval) < _peak_rank(evaluation)):
                incumbent, evaluation, width = candidate, candidate_eval, WINDOW_PASSES
                stats["peak_improved_windows"] += 1
                if log is not None:
                    log(f"cp-sat: peak {evaluation.peak_fast_storage} bytes ({evaluation.total_cycles:.0f} cycles)")
                continue
        width *= 2
    return incumbent, evaluation, stats


def any_schedule_bound(net: NetworkFacts) -> float:
    """A lower bound on the total cycles of any schedule, whatever its block configs, stripes, cascades and
    placements: every pass's MACs at the NPU's peak MAC rate (operand traffic, weight transfers and elementwise
    work only add). Weak, but it needs no search, so it holds where the candidate space ends. Like every bound
    here it assumes no pass is priced below its own compute time, which only the DMA-credit artefact of Vela's
    estimate does (see ``npusched.solvers.cpsat.candidates``)."""
    peak_macs_per_cycle = net.arch.num_macs_per_cycle * net.arch.ncores
    return sum(op.macs for sg in net.subgraphs for op in sg.ops) / peak_macs_per_cycle
