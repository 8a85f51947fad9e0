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

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from npusched.app.floors import DEFAULT, LEGACY, DefaultCoreRun, Floor, legacy_floor
from npusched.app.graph_choice import Graphs, decisions
from npusched.app.time_plan import NetworkSize, TimePlan, plan_run, predicted_spent_seconds
from npusched.errors import ScheduleError, one_line
from npusched.frontend.recipe import GraphRecipe
from npusched.lowering.build import BuiltGraph
from npusched.lowering.graph import Network
from npusched.run import FloorReport, MissingFloor, ObjectiveKind, RunOptions, SiteDecision, SolverReport
from npusched.schedule.evaluator import Evaluation, evaluate, verify
from npusched.schedule.schedule import Schedule
from npusched.solvers import interruption
from npusched.solvers.cpsat import (
    NO_TIME_TO_SEARCH,
    CpSatResult,
    NetworkFacts,
    SearchBudget,
    objective_rank,
    solve_cpsat,
    with_any_schedule_bound,
)
from npusched.solvers.cpsat.any_schedule_bound import any_schedule_bound, any_schedule_bound_seconds
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.arch import OptimisationStrategy
from npusched.target.estimators import OVER_CAP_PENALTY, Estimator, PricedArchitecture, blended, objective_cycles
from npusched.vela.backend import estimated_compile_seconds
from npusched.vela.command import VelaError, vela_executable

Log = Callable[[str], None]
# What is told of a schedule to compile (beside the run as its fallback, or as the answer): its network, hardware,
# schedule and model.
Compile = Callable[[Network, PricedArchitecture, Schedule, bytes], None]


class Begin(Protocol):
    """Told a graph's model the run may schedule (``likely``: its search's answer, not only a core's own)."""

    def __call__(self, model_bytes: bytes, *, likely: bool = True) -> None: ...


@dataclass(frozen=True)
class Searched:
    """One graph's search: its answer and that answer's evaluation under the objective."""

    graph: BuiltGraph
    result: CpSatResult
    evaluation: Evaluation
    objective: PricedArchitecture

    @property
    def rank(self) -> tuple[float, ...]:
        return objective_rank(self.evaluation, self.objective)


@dataclass(frozen=True)
class CpSatRun:
    """What the run returns: the graph and schedule chosen, CP-SAT's report, the floors and the site decisions."""

    graph: BuiltGraph
    schedule: Schedule
    report: SolverReport
    floors: tuple[FloorReport, ...]
    decisions: tuple[SiteDecision, ...]
    missing_floors: tuple[MissingFloor, ...] = ()
    warnings: tuple[str, ...] = ()


def objective_arch(arch: PricedArchitecture, options: RunOptions, floors: Sequence[Floor]) -> PricedArchitecture:
    """What the search minimises. "both": half the legacy model's cycles plus half the default core's model's, the
    latter scaled by the legacy core's total over the default core's (each core's own total by its own model: the
    default core's as it reports it), so the sum is the legacy core's total times the mean of the two ratios
    (answer / that core's own), and a ratio over 1 costs ``OVER_CAP_PENALTY`` times as much beyond 1 (so an answer
    slower than either core by its own model is taken only where none is faster than both); "estimator", or
    ``--estimator contention``: ``arch`` as it is."""
    if options.objective != "both" or arch.estimator not in (Estimator.VELA_LEGACY, Estimator.VELA_DEFAULT):
        return arch
    by_core = {floor.report.core: floor for floor in floors}
    legacy, default = by_core.get(LEGACY), by_core.get(DEFAULT)
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


def describe_objective(objective: PricedArchitecture) -> str:
    """The objective as the JSON's ``objective`` field states it (docs/guide/schedule-format.md)."""
    if objective.estimator is Estimator.BOTH:
        legacy, default = objective.blend_weights
        over = f", each over {objective.blend_cap:,.0f} x {OVER_CAP_PENALTY}" if objective.blend_cap > 0 else ""
        return f"both: vela-legacy x {legacy:.3g} + vela-default x {default:.3g}{over}"
    return objective.estimator.value


def objective_in_words(objective: PricedArchitecture) -> str:
    """The objective as the summary says it to a user: which totals it weighs, against which cores."""
    if objective.estimator is not Estimator.BOTH:
        return f"the cycles by {objective.estimator.value}'s model"
    legacy, default = objective.blend_weights
    words = (f"both Vela cores' models, each against that core's own schedule: {legacy:.3g} x the cycles by Vela "
             f"legacy's model + {default:.3g} x the cycles by the default core's (so that a cycle is the same share "
             "of either core's total)")
    if objective.blend_cap > 0:
        words += (f"; a weighted total over {objective.blend_cap:,.0f}, where the answer would be slower than that "
                  f"core's own schedule by its own model, costs {OVER_CAP_PENALTY}x")
    return words


def solve(build: Callable[[GraphRecipe], BuiltGraph], recipe: GraphRecipe, options: RunOptions,
          arch: PricedArchitecture, *, started: float, log: Log | None, timings: dict[str, float],
          begin: Begin | None = None, fallback: Compile | None = None,
          answer: Compile | None = None) -> CpSatRun:
    """The run (module docstring): npusched's graph is ``recipe``'s, each graph made by ``build``. ``begin`` is
    told each graph the run may schedule as soon as it is known (a compile started ahead), ``fallback`` Vela
    legacy's own schedule as soon as it is made (compiled beside the run, so that a compiled model exists at the
    limit) and ``answer`` the answer as soon as it is chosen (it compiles while the any-schedule bound is worked
    out, where that follows the search); the time limit counts from ``started``."""
    start = time.monotonic()
    graphs = Graphs(build, recipe)
    compile_seconds = estimated_compile_seconds(graphs.own.network, started_ahead=options.compile_started_ahead) \
        if options.compile_follows else 0.0
    if compile_seconds and log is not None:
        log(f"keeping {compile_seconds:.1f} s of the time limit for Vela's backend compile")
    plan = _time_plan(options, arch, graphs, started, compile_seconds)
    if log is not None:
        for phase, why in plan.dropped:
            log(f"time plan: no {phase.replace('_', ' ')} ({why})")
    # No time to search (the limit is too short for the network): the answer is the better of the cores' own
    # schedules, which the fallback compile beside the run compiles.
    variants = [] if not plan.searches else \
        [graph for graph, searched in ((graphs.own, plan.own_graph_search), (graphs.vela, plan.vela_graph_search))
         if searched]
    # Where Vela's graph is not searched, a core's own schedule of it is the answer if the search finds nothing
    # better: compiled ahead too (else, begun after the search, it would compile whole past its deadline).
    floors_may_answer = not variants or (graphs.distinct and not plan.vela_graph_search)
    if begin is not None:
        for variant in variants:
            begin(variant.model_bytes)
        if floors_may_answer:
            begin(graphs.vela.model_bytes, likely=False)
    timings["lower"] = time.monotonic() - start
    start = time.monotonic()
    floors, default_run, missing = _floors(graphs, options, arch, log, plan)
    legacy = next((f for f in floors if f.report.core == LEGACY and f.report.fits), None)
    if fallback is not None and legacy is not None:
        fallback(graphs.vela.network, arch, legacy.start, graphs.vela.model_bytes)
    elif options.compile_started_ahead and compile_seconds:
        # Nothing compiled beside the run to write at the limit: the answer's compile is kept back as the slowest.
        compile_seconds = estimated_compile_seconds(graphs.own.network, started_ahead=True, no_fallback=True)
        plan = replace(plan, compile_seconds=compile_seconds)
    objective = objective_arch(arch, options, floors)
    timings["floors"] = time.monotonic() - start
    hints = {id(variant): _fitting(_starts(variant, graphs, floors, default_run, arch), variant, objective)
             for variant in variants}
    bound_seconds = _bound_seconds(variants, objective, plan)
    early_bound: float | None = None  # not worked out before the search
    if bound_seconds and variants == [graphs.own]:
        # The one graph searched is the answer's (or a floor's, below): its bound is worked out first, so that the
        # search gets what it leaves of its prediction (a many-pass RNN's takes a tenth of it).
        start = time.monotonic()
        early_bound = any_schedule_bound(NetworkFacts(graphs.own.network, objective), start + bound_seconds)
        timings["bound"] = time.monotonic() - start
        bound_seconds = 0.0
    searches, errors = _search_graphs(variants, graphs, hints, objective, options, plan, bound_seconds,
                                      started=started, log=log, timings=timings)
    if floors_may_answer:
        searches += _floor_answers(floors, graphs, objective, "" if variants else NO_TIME_TO_SEARCH)
    if not searches and graphs.own not in variants:
        # No core's schedule fits, and Vela's graph was not searched or has none that fits: npusched's graph, whose
        # rewrites may need less, is searched with what is left.
        own_start = _fitting(_starts(graphs.own, graphs, floors, default_run, arch), graphs.own, objective)
        searches, own_errors = _search_graphs([graphs.own], graphs, {id(graphs.own): own_start}, objective, options,
                                              plan, _bound_seconds([graphs.own], objective, plan), started=started,
                                              log=log, timings=timings)
        errors += own_errors
    if not searches:
        raise _no_fit_error(errors, graphs, arch)
    best = min(searches, key=lambda s: s.rank)  # a tie keeps npusched's graph (listed first)
    if answer is not None:
        answer(best.graph.network, arch, best.result.schedule, best.graph.model_bytes)
    bound = early_bound if best.graph is graphs.own and early_bound is not None \
        else _late_bound(best.graph, objective, options, plan, started)
    return replace(_outcome(best, searches, graphs, floors, arch, objective, compile_seconds, bound, plan),
                   missing_floors=tuple(missing), warnings=(plan.warning,) if plan.warning else ())


def _time_plan(options: RunOptions, arch: PricedArchitecture, graphs: Graphs, started: float,
               compile_seconds: float) -> TimePlan:
    """The run's plan (``time_plan``) once npusched's graph is lowered: in a deterministic run from predictions
    alone, else from what loading and lowering took."""
    both = options.objective == ObjectiveKind.BOTH and Estimator(options.estimator) is not Estimator.CONTENTION
    size = NetworkSize.of(graphs.own.network, graphs.distinct, 2 if both else 1)
    spent = predicted_spent_seconds(size) if options.deterministic else time.monotonic() - started
    try:
        vela_executable()
        available = True
    except VelaError:
        available = False
    return plan_run(options.time_limit_seconds, size, spent, compile_seconds,
                    cpus=options.workers or os.cpu_count() or 1, default_core_available=available)


def _late_bound(graph: BuiltGraph, objective: PricedArchitecture, options: RunOptions, plan: TimePlan,
                started: float) -> float:
    """The any-schedule bound of the graph returned, after the search (NaN where the plan dropped it), worked out
    to a deadline: what is left of the limit but the final evaluation (and the compile, where it does not run
    beside it)."""
    if not plan.any_schedule_bound:
        return math.nan
    deadline = started + options.time_limit_seconds - plan.predicted["evaluation"] \
        - (0.0 if _compiles_beside(options) else plan.compile_seconds)
    return any_schedule_bound(NetworkFacts(graph.network, objective), deadline)


def _bound_seconds(variants: list[BuiltGraph], objective: PricedArchitecture, plan: TimePlan) -> float:
    """What the any-schedule bound, worked out once for the graph returned, is given (the larger graph's)."""
    return max([plan.predicted.get("any_schedule_bound", 0.0),
                *(any_schedule_bound_seconds(v.network, objective) for v in variants)]) \
        if plan.any_schedule_bound else 0.0


def _compiles_beside(options: RunOptions) -> bool:
    """Whether Vela's compile of the answer runs in a process of its own beside what follows the search (started
    ahead, on a machine of more than one CPU)."""
    return options.compile_started_ahead and (os.cpu_count() or 1) > 1


def _search_graphs(variants: list[BuiltGraph], graphs: Graphs,
                   hints: dict[int, tuple[Schedule, Evaluation] | None], objective: PricedArchitecture,
                   options: RunOptions, plan: TimePlan, bound_seconds: float, *, started: float, log: Log | None,
                   timings: dict[str, float]) -> tuple[list[Searched], list[tuple[BuiltGraph, ScheduleError]]]:
    """Each graph's search with its share of what is left of the limit, Vela's graph's first: what its search
    leaves unspent (it proved its answer optimal early) goes to npusched's, whose answer the run returns more often;
    with ``--deterministic`` each's work is its share of the plan (predicted from the inputs), never the clock. The
    searches are returned npusched's first (a tie keeps it). ``bound_seconds``: what the any-schedule bound after
    them is given."""
    searches: list[Searched] = []
    errors: list[tuple[BuiltGraph, ScheduleError]] = []
    # The wall clock as the plan shares it. A deterministic search's work is the plan's share, which in such a run
    # is predicted from the inputs alone (loading, lowering, the floors, the bound and the compile all taken off).
    order, shares, works = (variants[::-1], (1 - plan.own_share, 1.0),
                            (plan.vela_search_seconds, plan.answer_search_seconds)) \
        if len(variants) == 2 else (variants, (1.0,) * len(variants), (plan.answer_search_seconds,) * len(variants))
    for variant, share, work in zip(order, shares, works, strict=True):
        if searches and interruption.requested():
            break  # Ctrl-C: the answer so far
        hint, hint_eval = hints[id(variant)] or (None, None)
        # Keep back what the final evaluation, verification and report take after the search (the plan's), the
        # bound and Vela's compile when one follows: a compile started ahead runs beside the other two.
        after = plan.predicted["evaluation"] + bound_seconds
        left = options.time_limit_seconds - (time.monotonic() - started) \
            - (max(plan.compile_seconds, after) if _compiles_beside(options) else plan.compile_seconds + after)
        search_start = time.monotonic()
        try:
            budget = SearchBudget(left * share, options.workers, options.seed, options.deterministic, work, log)
            result = solve_cpsat(variant.network, objective, budget, hint=hint, hint_evaluation=hint_eval,
                                 any_bound=False)
        except ScheduleError as exc:
            errors.append((variant, exc))
            continue
        finally:
            timings[f"search_{'own' if variant is graphs.own else 'vela'}"] = time.monotonic() - search_start
        searches.append(Searched(variant, result, evaluate(variant.network, objective, result.schedule), objective))
    return sorted(searches, key=lambda searched: searched.graph is not graphs.own), \
        sorted(errors, key=lambda error: error[0] is not graphs.own)


def _floor_answers(floors: list[Floor], graphs: Graphs, objective: PricedArchitecture,
                   reason: str) -> list[Searched]:
    """Both cores' own schedules of Vela's graph as answers, where that graph is not searched (the time plan
    dropped its search, or left no time to search at all: ``reason``): the run's answer is then never worse than
    either by the objective all the same."""
    answers = []
    for floor in floors:
        if not floor.report.fits:
            continue
        evaluation = evaluate(graphs.vela.network, objective, floor.start)
        total = objective_cycles(objective, evaluation.total_cycles, evaluation.parts)
        result = CpSatResult(floor.start.with_status("fallback", reason), "fallback", total, math.nan, math.nan, 0.0,
                             reason)
        answers.append(Searched(graphs.vela, result, evaluation, objective))
    return answers


def _floors(graphs: Graphs, options: RunOptions, arch: PricedArchitecture, log: Log | None,
            plan: TimePlan) -> tuple[list[Floor], DefaultCoreRun | None, list[MissingFloor]]:
    """Both Vela cores' own schedules of Vela's graph (the default core's started first: it runs meanwhile; not
    where the time plan dropped it), and those that could not be made, with why: a floor is a bonus, never a
    failure of the run."""
    default_run = _start_default_core(options, graphs.vela.model_bytes, plan) if plan.default_core_floor else None
    floors: list[Floor] = []
    missing: list[MissingFloor] = []
    try:
        legacy = legacy_floor(graphs.vela.network, arch)
    except Exception as exc:  # noqa: BLE001 - the search goes on from the other starts
        legacy = ScheduleError(f"internal error ({type(exc).__name__}: {one_line(str(exc))[:200]})")
    if isinstance(legacy, Floor):
        floors.append(legacy)
    else:
        missing.append(MissingFloor(LEGACY, str(legacy)))
    default_why = next((why for phase, why in plan.dropped if phase == "default_core_floor"), "")
    if default_run is not None:
        default, default_why = default_run.floor(graphs.vela.network, arch)
        floors += [default] if default is not None else []
    if not any(f.report.core == DEFAULT for f in floors):
        missing.append(MissingFloor(DEFAULT, default_why))
    if log is not None:
        log("floors: " + "; ".join([f"{f.report.core} {f.report.cycles_by_estimator[arch.estimator.value]:,.0f} "
                                    f"cycles{'' if f.report.fits else ' (does not fit)'}" for f in floors]
                                   + [f"no {m.core} floor ({m.reason})" for m in missing]))
    return floors, default_run, missing


def _starts(variant: BuiltGraph, graphs: Graphs, floors: list[Floor], default_run: DefaultCoreRun | None,
            arch: PricedArchitecture) -> list[Schedule]:
    """What the search of ``variant`` may start from: on Vela's graph, both cores' own schedules; on npusched's, the
    heuristic's and the default core's read onto it (and the floors, where the two graphs are one). Where the
    heuristic's schedule does not fit the limit (Vela legacy goes over its arena, or needs more at addresses), its
    Size schedule too (on Vela's graph, where no core's fits), which mostly fits: a large network's search needs a
    schedule that fits to improve on."""
    starts: list[Schedule | None]
    if variant is not graphs.own:
        starts = [f.start for f in floors]
        if not any(f.report.fits for f in floors) and arch.optimise is not OptimisationStrategy.SIZE:
            # No core's schedule fits (or the default core's was not made): the heuristic's Size schedule mostly
            # does, and a large network's windows need one that fits to improve on.
            starts.append(heuristic_schedule_or_none(variant, arch, OptimisationStrategy.SIZE))
        return [s for s in starts if s is not None]
    # Where the graphs are one, Vela legacy's floor is the heuristic's schedule of this graph: not made twice.
    same = graphs.vela is variant and arch.estimator is Estimator.VELA_LEGACY
    heuristic = next((f.start for f in floors if f.report.core == LEGACY), None) if same else None
    if heuristic is None:
        heuristic = heuristic_schedule_or_none(variant, arch)
    starts = [heuristic]
    if arch.optimise is not OptimisationStrategy.SIZE and (heuristic is None or verify(
            variant.network, arch, heuristic, evaluate(variant.network, arch, heuristic))):
        starts.append(heuristic_schedule_or_none(variant, arch, OptimisationStrategy.SIZE))
    if default_run is not None:
        starts.append(default_run.schedule_onto(variant.network, arch))
    if not graphs.distinct:
        starts += [f.start for f in floors]
    return [s for s in starts if s is not None]


def _no_fit_error(errors: list[tuple[BuiltGraph, ScheduleError]], graphs: Graphs,
                  arch: PricedArchitecture) -> ScheduleError:
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


def _legacy_error(graphs: Graphs, arch: PricedArchitecture) -> ScheduleError | None:
    """Where no search found the smallest fit in time, Vela legacy's staging-limit error still names it."""
    legacy = legacy_floor(graphs.vela.network, arch)
    return legacy if isinstance(legacy, ScheduleError) else None


def heuristic_schedule_or_none(variant: BuiltGraph, arch: PricedArchitecture,
                               strategy: OptimisationStrategy | None = None) -> Schedule | None:
    try:
        return heuristic_schedule(variant.network, arch, strategy or arch.optimise)
    except ScheduleError:
        return None


def _fitting(schedules: Sequence[Schedule], variant: BuiltGraph,
             objective: PricedArchitecture) -> tuple[Schedule, Evaluation] | None:
    """The best of ``schedules`` of ``variant`` by the objective among those that verify; None where none does. A
    schedule met before is not evaluated again (where the graphs are one, the heuristic's start is mostly Vela
    legacy's floor; on a network of a thousand passes an evaluation is half a second)."""
    best: tuple[Schedule, Evaluation] | None = None
    seen: list[Schedule] = []
    for schedule in schedules:
        if schedule in seen:
            continue  # the same rank as before: never better (ties keep the first)
        seen.append(schedule)
        evaluation = evaluate(variant.network, objective, schedule)
        if verify(variant.network, objective, schedule, evaluation):
            continue
        if best is None or objective_rank(evaluation, objective) < objective_rank(best[1], objective):
            best = schedule, evaluation
    return best


def _start_default_core(options: RunOptions, model_bytes: bytes, plan: TimePlan) -> DefaultCoreRun:
    """The default core started on Vela's graph, stopped (the process is killed) where it runs past twice the
    plan's prediction, or a third of the limit. A deterministic run, whose answer must not depend on the machine's
    load, waits for the longer of the two (within the limit): only a network the CLI takes several times its
    prediction on (NASNetMobile on a U65) can lose the floor there."""
    allowance = 2 * plan.default_core_cli_seconds + 2.0
    third = options.time_limit_seconds / 3
    if options.deterministic:
        return DefaultCoreRun(options, model_bytes, max(min(max(third, allowance), options.time_limit_seconds), 1.0))
    return DefaultCoreRun(options, model_bytes, max(min(third, allowance), 1.0))


def _outcome(best: Searched, searches: list[Searched], graphs: Graphs, floors: list[Floor],
             arch: PricedArchitecture, objective: PricedArchitecture, compile_seconds: float,
             any_bound_cycles: float, plan: TimePlan) -> CpSatRun:
    """The answer, its report (``any_bound_cycles``: the any-schedule bound of its graph, NaN where the time plan
    dropped it) and the site decisions. The report's "heuristic" is Vela legacy's own schedule."""
    result = best.result
    reason = result.reason
    if reason == NO_TIME_TO_SEARCH and compile_seconds:
        reason += f"; {compile_seconds:.1f} s of the limit kept for Vela's compile (--output-dir)"
    if interruption.requested():
        reason = "; ".join(filter(None, (reason, "interrupted (Ctrl-C): the best schedule found so far")))
    if plan.dropped:
        reason = "; ".join(filter(None, (reason, "the time plan left out " + ", ".join(
            phase.replace("_", " ") for phase, _ in plan.dropped) + f" ({plan.dropped[0][1]})")))
    returned = {f.report.core for f in floors if best.graph is graphs.vela
                and (f.start.ops, f.start.tensors) == (result.schedule.ops, result.schedule.tensors)}
    if returned:
        reason = "; ".join(filter(None, (reason, f"the search found nothing better than {' and '.join(returned)}'s "
                                                  "own schedule, which is returned")))
    legacy = next((f for f in floors if f.report.core == LEGACY), None)
    legacy_eval = legacy.by_estimator[arch.estimator.value] if legacy is not None else None
    result = with_any_schedule_bound(result, any_bound_cycles, lambda: objective_cycles(
        objective, best.evaluation.total_cycles, best.evaluation.parts))
    report = SolverReport(
        status=result.status, bound_cycles=result.bound_cycles, gap=result.gap, solve_seconds=result.solve_seconds,
        reason=reason, model_stats={**result.model_stats, "graphs_searched": len(searches),
                                    "time_plan": plan.as_json()},
        heuristic_cycles=legacy_eval.total_cycles if legacy_eval is not None else None,
        heuristic_peak_fast_storage_bytes=legacy_eval.peak_fast_storage if legacy_eval is not None else None,
        any_schedule_bound_cycles=result.any_schedule_bound_cycles, strategy=result.strategy,
        peak_bound_bytes=result.peak_bound_bytes, peak_proven_minimal=result.peak_proven_minimal,
        objective=describe_objective(objective), objective_words=objective_in_words(objective))
    floor_reports = tuple(_returned(f.report, f.report.core in returned) for f in floors)
    other = next((s for s in searches if s is not best), None)
    if not plan.own_graph_search:
        chosen = decisions(graphs.sites, best.graph, "kept", "priced out: npusched's graph was not searched (the time "
                                                             "plan left it out: its start would take too long)")
    elif not plan.vela_graph_search:
        chosen = decisions(graphs.sites, best.graph, "kept: Vela's graph was not searched (the time plan left it out)",
                           "priced out: a Vela core's own schedule of Vela's graph is better")
    elif other is None:
        chosen = decisions(graphs.sites, best.graph, "kept: no schedule of Vela's graph fits", "priced out")
    else:
        with_sites = f"CP-SAT {_figure(searches[0])} with the priced rewrites, {_figure(searches[1])} without"
        chosen = decisions(graphs.sites, best.graph, f"kept: {with_sites}", f"priced out: {with_sites}")
    return CpSatRun(best.graph, result.schedule, report, floor_reports, chosen)


def _figure(searched: Searched) -> str:
    evaluation = searched.evaluation
    if len(searched.rank) > 1:
        return f"{evaluation.peak_fast_storage:,} bytes / {evaluation.total_cycles:,.0f}"
    return f"{evaluation.total_cycles:,.0f}"


def _returned(report: FloorReport, returned: bool) -> FloorReport:
    return replace(report, returned=True) if returned else report
