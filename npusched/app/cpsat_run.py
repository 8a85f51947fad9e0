"""A CP-SAT run: both graphs searched, both Vela cores' schedules as floors, an objective that honours both models.

1. The graphs (``graph_choice``): npusched's own (every priced rewrite site, in-place writes) and Vela's (the
   unconditional rewrites only). Vela's default core starts on Vela's graph in the background (``floors``).
2. The floors: Vela legacy's own schedule (the heuristic) and the default core's, both on Vela's graph, priced
   under every estimator.
3. The objective (``--objective``): "estimator", ``--estimator``'s model alone; or "both", each model relative
   to its own core's schedule, weighted so that a cycle is worth the same share of either core's total
   (``objective_arch``). Every figure printed stays ``--estimator``'s.
4. The searches: npusched's graph from the better of the heuristic's and the default core's schedules, then
   Vela's graph from the better floor, each with its share of the time limit; the better answer by the
   objective is returned. Since the search on Vela's graph starts from the floors and CP-SAT never returns worse
   than its start, the answer is never worse than either core's schedule by the objective.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from npusched.app.floors import DefaultCoreRun, Floor, legacy_floor
from npusched.app.graph_choice import Graphs, Variant, decisions
from npusched.errors import ScheduleError
from npusched.lowering.graph import Network
from npusched.run import FloorReport, RunOptions, SiteDecision, SolverReport
from npusched.schedule.evaluator import Evaluation, evaluate, verify
from npusched.schedule.schedule import Schedule
from npusched.solvers.cpsat import (
    NO_TIME_TO_SEARCH,
    CpSatResult,
    NetworkFacts,
    objective_rank,
    solve_cpsat,
    with_any_schedule_bound,
)
from npusched.solvers.cpsat.any_schedule_bound import any_schedule_bound, any_schedule_bound_seconds
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.arch import ArchitectureFeatures
from npusched.target.estimators import OVER_CAP_PENALTY, Estimator, blended, objective_cycles
from npusched.vela.backend import estimated_compile_seconds
from npusched.vela.command import VelaError, vela_executable

Log = Callable[[str], None]
# Of the time left (and of a deterministic run's work), what the search of npusched's own graph gets when Vela's
# is searched too; Vela's gets the rest. Vela's starts from the better floor, mostly the better start already where
# a rewrite does not pay (the staged 320 x 320 input: its floor is 25% faster than npusched's graph's answer).
OWN_GRAPH_SHARE = 2 / 3
# What both Vela cores' schedules and the search of Vela's graph add to a run, per pass: on a 700-pass MobileNet-V2
# (u65-256) the floors took 5.2 s and Vela's graph's lowering 1.2 s beside the heuristic's 1.5 s.
FLOORS_SECONDS_PER_PASS = 0.008


@dataclass(frozen=True)
class Searched:
    """One graph's search: its answer and that answer's evaluation under the objective."""

    variant: Variant
    result: CpSatResult
    evaluation: Evaluation
    objective: ArchitectureFeatures

    @property
    def rank(self) -> tuple[float, ...]:
        return objective_rank(self.evaluation, self.objective)


@dataclass(frozen=True)
class CpSatRun:
    """What the run returns: the graph and schedule chosen, CP-SAT's report, the floors and the site decisions."""

    variant: Variant
    schedule: Schedule
    report: SolverReport
    floors: tuple[FloorReport, ...]
    decisions: tuple[SiteDecision, ...]


def objective_arch(arch: ArchitectureFeatures, options: RunOptions, floors: Sequence[Floor]) -> ArchitectureFeatures:
    """What the search minimises. "both": half the legacy model's cycles plus half the default core's model's, the
    latter scaled by the legacy core's total over the default core's (each core's own total by its own model: the
    default core's as it reports it), so the sum is the legacy core's total times the mean of the two ratios
    (answer / that core's own), and a ratio over 1 costs ``OVER_CAP_PENALTY`` times as much beyond 1 (so an answer
    slower than either core by its own model is taken only where none is faster than both); "estimator", or
    ``--estimator contention``: ``arch`` as it is."""
    if options.objective != "both" or arch.estimator not in (Estimator.VELA_LEGACY, Estimator.VELA_DEFAULT):
        return arch
    by_core = {floor.report.core: floor for floor in floors}
    legacy, default = by_core.get("vela-legacy"), by_core.get("vela-default")
    reference = legacy or default
    if reference is None:
        return blended(arch, 0.5, 0.5)
    legacy_total = legacy.report.total_cycles if legacy is not None \
        else reference.report.cycles_by_estimator[Estimator.VELA_LEGACY.value]
    default_total = default.report.total_cycles if default is not None \
        else reference.report.cycles_by_estimator[Estimator.VELA_DEFAULT.value]
    if legacy_total <= 0 or default_total <= 0:
        return blended(arch, 0.5, 0.5)
    return blended(arch, 0.5, 0.5 * legacy_total / default_total, cap=0.5 * legacy_total)


def describe_objective(objective: ArchitectureFeatures) -> str:
    if objective.estimator is Estimator.BOTH:
        legacy, default = objective.blend_weights
        over = f", each over {objective.blend_cap:,.0f} x {OVER_CAP_PENALTY}" if objective.blend_cap > 0 else ""
        return f"both: vela-legacy x {legacy:.3g} + vela-default x {default:.3g}{over}"
    return objective.estimator.value


def solve(data: bytes, options: RunOptions, arch: ArchitectureFeatures, *, started: float, log: Log | None,
          timings: dict[str, float], begin: Callable[[bytes], None] | None = None) -> CpSatRun:
    """The run (module docstring). ``begin`` is told each graph the run may schedule as soon as it is known (a
    compile started ahead); the time limit counts from ``started``."""
    start = time.monotonic()
    graphs = Graphs(data, str(options.model_path), arch, normalise_model=options.normalise,
                    stage=options.stages_maps(arch), softmax_split_bytes=options.softmax_split_bytes(arch))
    compile_seconds = estimated_compile_seconds(graphs.own.network, started_ahead=options.compile_started_ahead) \
        if options.compile_follows else 0.0
    if compile_seconds and log is not None:
        log(f"keeping {compile_seconds:.1f} s of the time limit for Vela's backend compile")
    lean = too_short_for_floors(options, graphs.own.network, compile_seconds)
    variants = [graphs.own] if lean or not graphs.distinct else [graphs.own, graphs.vela]
    for variant in variants:
        if begin is not None:
            begin(variant.model_bytes)
    timings["lower"] = time.monotonic() - start
    start = time.monotonic()
    floors, default_run = ([], None) if lean else _floors(graphs, options, arch, log)
    objective = arch if lean else objective_arch(arch, options, floors)
    timings["floors"] = time.monotonic() - start
    hints = {id(variant): _fitting(_starts(variant, graphs, floors, default_run, arch), variant, objective)
             for variant in variants}
    searches: list[Searched] = []
    errors: list[tuple[Variant, ScheduleError]] = []
    # The any-schedule bound is worked out once, for the graph returned: kept back for the larger one.
    bound_seconds = max(any_schedule_bound_seconds(variant.network, objective) for variant in variants)
    shares = (OWN_GRAPH_SHARE, 1.0) if len(variants) == 2 else (1.0,)
    work_shares = (OWN_GRAPH_SHARE, 1 - OWN_GRAPH_SHARE) if len(variants) == 2 else (1.0,)
    for variant, share, work_share in zip(variants, shares, work_shares, strict=True):
        hint, hint_eval = hints[id(variant)] or (None, None)
        # Keep back what the final evaluation, verification and report take after the search (the schedule is
        # also evaluated under every other estimator), and Vela's compile when one follows.
        after_search = (1.5 + len(Estimator.single()) - 1) * _evaluation_seconds(variant) + 0.2
        left = options.time_limit_seconds - (time.monotonic() - started) - after_search - compile_seconds \
            - bound_seconds
        search_start = time.monotonic()
        try:
            result = solve_cpsat(variant.network, objective, time_limit_seconds=left * share,
                                 workers=options.workers, seed=options.seed, deterministic=options.deterministic,
                                 hint=hint, hint_evaluation=hint_eval, log=log, any_bound=False,
                                 work_limit_seconds=(options.time_limit_seconds - compile_seconds - bound_seconds)
                                 * work_share)
        except ScheduleError as exc:
            errors.append((variant, exc))
            continue
        finally:
            timings[f"search_{'own' if variant is graphs.own else 'vela'}"] = time.monotonic() - search_start
        searches.append(Searched(variant, result, evaluate(variant.network, objective, result.schedule), objective))
    if not searches:
        raise _no_fit_error(errors, graphs, arch)
    best = min(searches, key=lambda s: s.rank)  # a tie keeps npusched's graph (searched first)
    bound = any_schedule_bound(NetworkFacts(best.variant.network, objective))
    own_start = hints[id(graphs.own)]
    start_eval = own_start[1] if own_start is not None else None
    return _outcome(best, searches, graphs, floors, arch, objective, compile_seconds, lean, start_eval, bound)


def too_short_for_floors(options: RunOptions, network: Network, compile_seconds: float) -> bool:
    """Whether the limit is too short for the network to make both Vela cores' schedules and search Vela's graph
    too: less Vela's compile, under three times what they add (``FLOORS_SECONDS_PER_PASS``), so that twice that is
    left to search. Such a run searches npusched's graph alone, by ``--estimator``'s model, as earlier releases
    did. Decided by the inputs alone (a deterministic run's graphs must not depend on the machine)."""
    return options.time_limit_seconds - compile_seconds < 3 * FLOORS_SECONDS_PER_PASS * len(network.npu_ops)


def _floors(graphs: Graphs, options: RunOptions, arch: ArchitectureFeatures,
            log: Log | None) -> tuple[list[Floor], DefaultCoreRun | None]:
    """Both Vela cores' own schedules of Vela's graph (the default core's started first: it runs meanwhile)."""
    default_run = _start_default_core(options, graphs.vela.model_bytes)
    legacy = legacy_floor(graphs.vela.network, arch)
    floors = [legacy] if isinstance(legacy, Floor) else []
    default_why = "the vela CLI is not installed"
    if default_run is not None:
        default, default_why = default_run.floor(graphs.vela.network, arch)
        floors += [default] if default is not None else []
    if log is not None:
        log("floors: " + "; ".join(f"{f.report.core} {f.report.cycles_by_estimator[arch.estimator.value]:,.0f} "
                                   f"cycles{'' if f.report.fits else ' (does not fit)'}" for f in floors)
            + ("" if any(f.report.core == "vela-default" for f in floors)
               else f"; no default-core floor ({default_why})"))
    return floors, default_run


def _starts(variant: Variant, graphs: Graphs, floors: list[Floor], default_run: DefaultCoreRun | None,
            arch: ArchitectureFeatures) -> list[Schedule]:
    """What the search of ``variant`` may start from: on Vela's graph, both cores' own schedules; on npusched's, the
    heuristic's and the default core's read onto it (and the floors, where the two graphs are one)."""
    if variant is not graphs.own:
        return [f.start for f in floors]
    starts = [heuristic_schedule_or_none(variant, arch)]
    if default_run is not None:
        starts.append(default_run.schedule_onto(variant.network, arch))
    if not graphs.distinct:
        starts += [f.start for f in floors]
    return [s for s in starts if s is not None]


def _no_fit_error(errors: list[tuple[Variant, ScheduleError]], graphs: Graphs,
                  arch: ArchitectureFeatures) -> ScheduleError:
    """Why no graph has a schedule within the limit: the least a graph needs where its search found it (the smaller
    of the two), but not Vela's graph's as the run's where npusched's graph, whose rewrites may need less, ended
    its search without its own (then both are said); else Vela legacy's staging-limit error."""
    known = sorted((exc for _, exc in errors if exc.needed_bytes is not None), key=lambda exc: exc.needed_bytes or 0)
    own = next((exc for variant, exc in errors if variant is graphs.own), None)
    if own is not None and own.needed_bytes is None and known:
        return ScheduleError(f"{own}; on Vela's graph (without npusched's rewrites) the smallest that fits needs "
                             f"{known[0].needed_bytes} bytes")
    if known:
        return known[0]
    return _legacy_error(graphs, arch) or errors[0][1]


def _legacy_error(graphs: Graphs, arch: ArchitectureFeatures) -> ScheduleError | None:
    """Where no search found the smallest fit in time, Vela legacy's staging-limit error still names it."""
    legacy = legacy_floor(graphs.vela.network, arch)
    return legacy if isinstance(legacy, ScheduleError) else None


def heuristic_schedule_or_none(variant: Variant, arch: ArchitectureFeatures) -> Schedule | None:
    try:
        return heuristic_schedule(variant.network, arch, arch.optimise)
    except ScheduleError:
        return None


def _fitting(schedules: Sequence[Schedule], variant: Variant,
             objective: ArchitectureFeatures) -> tuple[Schedule, Evaluation] | None:
    """The best of ``schedules`` of ``variant`` by the objective among those that verify; None where none does."""
    best: tuple[Schedule, Evaluation] | None = None
    for schedule in schedules:
        evaluation = evaluate(variant.network, objective, schedule)
        if verify(variant.network, objective, schedule, evaluation):
            continue
        if best is None or objective_rank(evaluation, objective) < objective_rank(best[1], objective):
            best = schedule, evaluation
    return best


def _start_default_core(options: RunOptions, model_bytes: bytes) -> DefaultCoreRun | None:
    """The default core started on Vela's graph: a deterministic run waits for it up to the limit (its answer
    must not depend on the machine's load), another a third of the limit."""
    try:
        vela_executable()
    except VelaError:
        return None
    share = 1.0 if options.deterministic else 1 / 3
    return DefaultCoreRun(options, model_bytes, max(options.time_limit_seconds * share, 1.0))


def _evaluation_seconds(variant: Variant) -> float:
    """About what one evaluation of the variant takes (scripts/bench_pricing.py: about 1 ms per pass)."""
    return 0.001 * len(variant.network.npu_ops)


def _outcome(best: Searched, searches: list[Searched], graphs: Graphs, floors: list[Floor],
             arch: ArchitectureFeatures, objective: ArchitectureFeatures, compile_seconds: float,
             lean: bool, start_eval: Evaluation | None, any_bound_cycles: float) -> CpSatRun:
    """The answer, its report (``any_bound_cycles``: the any-schedule bound of its graph) and the site decisions.
    The report's "heuristic" is Vela legacy's own schedule (a lean run's: the heuristic's on npusched's graph,
    ``start_eval``)."""
    result = best.result
    reason = result.reason
    if reason == NO_TIME_TO_SEARCH and compile_seconds:
        reason += f"; {compile_seconds:.1f} s of the limit kept for Vela's compile (--output-dir)"
    if lean:
        reason = "; ".join(filter(None, (reason, "the time limit is too short for the network to make both Vela "
                                                 "cores' schedules too: npusched's graph alone, by --estimator's "
                                                 "model")))
    returned = {f.report.core for f in floors if best.variant is graphs.vela
                and (f.start.ops, f.start.tensors) == (result.schedule.ops, result.schedule.tensors)}
    if returned:
        reason = "; ".join(filter(None, (reason, f"the search found nothing better than {' and '.join(returned)}'s "
                                                  "own schedule, which is returned")))
    legacy = next((f for f in floors if f.report.core == "vela-legacy"), None)
    legacy_eval = legacy.by_estimator[arch.estimator.value] if legacy is not None else start_eval if lean else None
    result = with_any_schedule_bound(result, any_bound_cycles, lambda: objective_cycles(
        objective, best.evaluation.total_cycles, best.evaluation.parts))
    report = SolverReport(
        status=result.status, bound_cycles=result.bound_cycles, gap=result.gap, solve_seconds=result.solve_seconds,
        reason=reason, model_stats={**result.model_stats, "graphs_searched": len(searches)},
        heuristic_cycles=legacy_eval.total_cycles if legacy_eval is not None else None,
        heuristic_peak_fast_storage_bytes=legacy_eval.peak_fast_storage if legacy_eval is not None else None,
        any_schedule_bound_cycles=result.any_schedule_bound_cycles, strategy=result.strategy,
        peak_bound_bytes=result.peak_bound_bytes, peak_proven_minimal=result.peak_proven_minimal,
        objective=describe_objective(objective))
    floor_reports = tuple(_returned(f.report, f.report.core in returned) for f in floors)
    other = next((s for s in searches if s is not best), None)
    if other is None:
        kept = ("kept: not priced (the time limit is too short for the network to search Vela's graph too)" if lean
                else "kept: no schedule of Vela's graph fits")
        chosen = decisions(graphs.sites, best.variant, kept, "priced out")
    else:
        with_sites = f"CP-SAT {_figure(searches[0])} with the priced rewrites, {_figure(searches[1])} without"
        chosen = decisions(graphs.sites, best.variant, f"kept: {with_sites}", f"priced out: {with_sites}")
    return CpSatRun(best.variant, result.schedule, report, floor_reports, chosen)


def _figure(searched: Searched) -> str:
    evaluation = searched.evaluation
    if len(searched.rank) > 1:
        return f"{evaluation.peak_fast_storage:,} bytes / {evaluation.total_cycles:,.0f}"
    return f"{evaluation.total_cycles:,.0f}"


def _returned(report: FloorReport, returned: bool) -> FloorReport:
    return replace(report, returned=True) if returned else report
