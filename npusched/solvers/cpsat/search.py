"""The strategies that solve the CP-SAT model: Performance (fewest cycles within the limit), Size (least peak,
then fewest cycles at it), the fallback to the hint, the smallest fast storage that fits, and the hand-over to the
window search for large networks."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ortools.sat.python import cp_model

from npusched.errors import ScheduleError
from npusched.ir import FeatureMap
from npusched.lowering.graph import Network
from npusched.schedule.evaluator import Evaluation, evaluate, staging_limit, verify
from npusched.schedule.peak import explain_peak
from npusched.schedule.schedule import Schedule
from npusched.solvers import interruption
from npusched.solvers.cpsat.any_schedule_bound import any_schedule_bound, any_schedule_bound_seconds
from npusched.solvers.cpsat.model import (
    SCALE,
    CpSatModel,
    Log,
    NetworkFacts,
    OutOfTime,
    RegionData,
    add_hint,
    add_path_hint,
    build_model,
    extract_schedule,
    whole_network_data,
    whole_subgraph_regions,
)
from npusched.solvers.cpsat.path_bound import PathBound, least_peak, path_bound, path_schedule, resident_maps
from npusched.solvers.cpsat.pricing_pool import usable_processes
from npusched.solvers.cpsat.repair import repair_allocation
from npusched.solvers.cpsat.solver import (
    CLOSED_GAP,
    Progress,
    SearchBudget,
    new_solver,
    objective_of,
    relative_gap,
    stopped_by_clock,
)
from npusched.solvers.cpsat.windows import search_windows
from npusched.solvers.max_schedule import max_schedule
from npusched.solvers.peak_floor import PeakFloor, network_floor
from npusched.target.arch import OptimisationStrategy
from npusched.target.estimators import Estimator, PricedArchitecture

# Networks with more passes than this are improved window by window instead of in one model.
FULL_MODEL_MAX_PASSES = 120


# Of the time left, what pricing the whole candidate space of a large network for the path bound may take (else the
# window search goes on without it: its windows reuse what was priced), and what the bound's subgradient steps may
# take. Its estimate is per pass and cost model over the processes: a deterministic run prices it where the highest
# rate measured on the window-searched networks (dedicated fast storage, where weights are priced buffered and not)
# fits that share of its work; another, where a typical rate for its kind of fast storage fits the time left.
WHOLE_SPACE_SHARE = 0.9
PATH_BOUND_SHARE = 0.15
PRICING_SECONDS_PER_PASS_AND_MODEL = 0.05
TYPICAL_PRICING_SECONDS_PER_PASS_AND_MODEL = {"shared": 0.025, "dedicated": 0.04}
# The rates are those of passes of this many OFM elements or more; a smaller pass counts as that fraction of one
# (an RNN's one-row passes, ~200 elements, price ~40 times faster: 914 of kws_lstm_fused's in about 1 s).
PRICING_FULL_PASS_ELEMENTS = 4096


# What a search gets at least when its time is gone and no hint fits (a schedule is still needed).
MIN_SEARCH_SECONDS = 0.5
NO_TIME_TO_SEARCH = "no time left to search within the time limit (the hint's schedule, unimproved)"
STOPPED_BY_CLOCK = ("--deterministic: the wall clock stopped the search before its work budget, so another run may "
                    "give another schedule; a longer --time-limit makes it reproducible")


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


def solve_cpsat(network: Network, arch: PricedArchitecture, budget: SearchBudget | None = None, *,
                hint: Schedule | None = None, hint_evaluation: Evaluation | None = None,
                any_bound: bool = True) -> CpSatResult:
    """Schedule ``network`` with CP-SAT within ``budget.time_limit_seconds`` of wall clock (building included;
    the answer's evaluation and verification too). ``hint_evaluation`` saves evaluating the hint again. With
    ``budget.deterministic`` the search's work is sized by ``budget.work_limit_seconds`` (default: the time
    limit): a caller whose time limit is what its clock left passes the seconds its inputs alone give, so that the
    same inputs give the same schedule on a loaded machine (where the wall clock is only a safety net).

    ``arch.optimise`` picks the objective: "Performance", the fewest cycles within the fast-storage limit;
    "Size", the least peak fast storage first and then the fewest cycles at that peak (lexicographic).
    Never worse than ``hint`` when the hint verifies: the better of the two by the evaluator (by that objective)
    is returned; with no time left (``time_limit_seconds`` <= 0) a hint that fits is returned as it is, else the
    search gets ``MIN_SEARCH_SECONDS``. Small networks are solved in one model (bounds and gap over the whole
    candidate space); large ones, or when the one model cannot be built in time, are improved window by window
    from the hint. With ``any_bound`` the any-schedule bound is worked out after the search, within the limit
    (``any_schedule_bound_seconds`` is kept back from the search, its work budget too); a caller that searches
    several graphs works it out once, for the one it returns. Raises ScheduleError when no candidate schedule
    fits the fast storage; where nothing fits within Vela's cascade rules (with held gates), the search is made
    again with cascades through joins (``NetworkFacts.joins``, which Size has from the start).
    """
    start = time.monotonic()
    budget = budget or SearchBudget()
    time_limit_seconds, work_limit_seconds = budget.time_limit_seconds, budget.work_limit_seconds
    if time_limit_seconds <= 0 and hint is not None:
        # No time to search (the run spent it, or keeps it for Vela's compile): the hint, when it fits.
        hint_evaluation = hint_evaluation or evaluate(network, arch, hint)
        if not verify(network, arch, hint, hint_evaluation):
            return replace(_fallback(hint, hint_evaluation.total_cycles, NO_TIME_TO_SEARCH, time.monotonic() - start,
                                     {"passes": len(network.npu_ops)}),
                           strategy="Size" if _size_first(arch) else "Performance")
    kept_back = any_schedule_bound_seconds(network, arch) if any_bound else 0.0
    time_limit_seconds = max(time_limit_seconds - kept_back, MIN_SEARCH_SECONDS)
    if work_limit_seconds is not None:
        work_limit_seconds = max(work_limit_seconds - kept_back, MIN_SEARCH_SECONDS)
    budget = replace(budget, time_limit_seconds=time_limit_seconds, work_limit_seconds=work_limit_seconds,
                     workers=budget.threads)

    def search(net: NetworkFacts) -> CpSatResult:
        return _search(net, start, budget, hint, hint_evaluation)

    net = NetworkFacts(network, arch)
    try:
        result = search(net)
    except ScheduleError as exc:
        if net.joins or exc.needed_bytes is None:
            raise
        # Nothing fits within Vela's cascade rules: cascades through joins may fit (Size has them from the start).
        net = NetworkFacts(network, arch, joins=True)
        result = search(net)
    if result.model_stats.get("stopped_by_clock"):
        result = replace(result, reason="; ".join(filter(None, (result.reason, STOPPED_BY_CLOCK))))
    if any_bound:
        answer = result.schedule
        result = with_any_schedule_bound(result, any_schedule_bound(net),
                                         lambda: objective_of(evaluate(network, arch, answer), arch))
    return replace(result, strategy="Size" if _size_first(arch) else "Performance")


def with_any_schedule_bound(result: CpSatResult, any_bound_cycles: float, answer_objective: Callable[[], float]
                            ) -> CpSatResult:
    """``result`` with the any-schedule bound, which also stands in as its candidate-space bound where that is
    lower or missing (a bound on every schedule holds over the candidate space too: so every run has one, also
    where the path bound could not be priced in time). ``answer_objective`` gives the answer's objective for the
    gap (worked out only then)."""
    if math.isfinite(any_bound_cycles) and not result.bound_cycles >= any_bound_cycles:
        result = replace(result, bound_cycles=any_bound_cycles,
                         gap=relative_gap(answer_objective(), any_bound_cycles))
    return replace(result, any_schedule_bound_cycles=any_bound_cycles)


def _size_first(arch: PricedArchitecture) -> bool:
    return arch.optimise is OptimisationStrategy.SIZE


def objective_rank(evaluation: Evaluation, arch: PricedArchitecture) -> tuple[float, ...]:
    """What the objective compares: cycles (under ``Estimator.BOTH``, with the excess over the cap penalised),
    or (peak fast storage, cycles) when optimising for size."""
    cycles = objective_of(evaluation, arch)
    if _size_first(arch):
        return evaluation.peak_fast_storage, cycles
    return (cycles,)


@dataclass(frozen=True)
class _Search:
    """One search's inputs as its stages read them: the network, when it started, its budget (deadline set), the
    hint and its evaluation, the hint again where it fits the limit (what the search improves on and falls back
    to), the references the candidate space is built around, the limit, the work each deterministic step is sized
    by, and the statistics the result reports."""

    net: NetworkFacts
    start: float
    budget: SearchBudget
    hint: Schedule | None
    hint_eval: Evaluation | None
    fitting: tuple[Schedule, Evaluation] | None
    references: tuple[Schedule, ...]
    limit: int
    work: float
    stats: dict[str, Any]

    @property
    def size_first(self) -> bool:
        return _size_first(self.net.arch)

    def fallback(self, reason: str, seconds: float) -> CpSatResult:
        assert self.fitting is not None
        return _fallback(self.fitting[0], self.fitting[1].total_cycles, reason, seconds, self.stats)


def _search(net: NetworkFacts, start: float, budget: SearchBudget, hint: Schedule | None,
            hint_evaluation: Evaluation | None) -> CpSatResult:
    """Relax the whole candidate space (the path bound, maybe its own answer), then build the one model and solve
    it (Size: least peak, then cycles at it), else improve the hint window by window; the answer verified."""
    search = _prepare(net, start, budget, hint, hint_evaluation)
    # With a schedule that fits to improve on, leave time to improve it window by window should the one model take
    # too long to build. Deterministic runs choose by size alone, never by the clock (the limit stays a safety net).
    deadline = search.budget.deadline
    share = 1.0 if budget.deterministic else 0.75 if search.fitting is not None else 0.9
    build_deadline = start + share * (deadline - start)
    relaxed = _relax_whole_space(net, search.references, hint is not None,
                                 search.fitting[1] if search.fitting else None, search.limit, search.budget,
                                 build_deadline, search.stats)
    if relaxed.start is not None and relaxed.closes_gap(net.arch):
        return _path_result(net, relaxed, start, search.stats, budget.log)
    if search.fitting is None and relaxed.bound is not None and not relaxed.bound.feasible:
        raise _smallest_fit_error(net, relaxed.datas, search.limit)
    if net.passes > FULL_MODEL_MAX_PASSES and search.fitting is not None:
        return _windows_result(net, search.references, *search.fitting, relaxed, search.limit, search.budget, start,
                               search.stats, "the network is too large for one model")
    try:
        built = build_model(net, whole_subgraph_regions(net), search.references, limit=search.limit, log=budget.log,
                            minimise_memory=search.size_first, hint_first=hint is not None, deadline=build_deadline,
                            datas=relaxed.datas or None)
    except OutOfTime:
        if search.fitting is None:
            raise ScheduleError(_nothing_found(net, search.hint_eval, search.limit, budget.time_limit_seconds)
                                ) from None
        if budget.deterministic:
            search.stats["stopped_by_clock"] = True  # the build ran out of time: the clock chose the window search
        return _windows_result(net, search.references, *search.fitting, relaxed, search.limit, search.budget, start,
                               search.stats, "the one model could not be built in time")
    search.stats.update(built.stats, mode="full")
    if relaxed.start is not None and relaxed.bound is not None and relaxed.bound.paths is not None \
            and not search.size_first:
        add_path_hint(built, relaxed.bound.paths, relaxed.resident)
    else:
        add_hint(built, hint, search.hint_eval.peak_fast_storage if search.hint_eval is not None else None)
    return _solve_built(search, built, relaxed)


def _prepare(net: NetworkFacts, start: float, budget: SearchBudget, hint: Schedule | None,
             hint_evaluation: Evaluation | None) -> _Search:
    network, arch = net.network, net.arch
    references = tuple(s for s in (hint, _max_schedule_or_none(network, arch)) if s is not None)
    limit = staging_limit(arch)
    hint_eval = hint_evaluation if hint_evaluation is not None or hint is None else evaluate(network, arch, hint)
    fitting = (hint, hint_eval) if hint is not None and hint_eval is not None and \
        not verify(network, arch, hint, hint_eval) else None
    # Keep back what the last evaluation and verification of the answer take (no more than setting up took).
    deadline = start + budget.time_limit_seconds - 1.2 * (time.monotonic() - start)
    # What the deterministic steps are sized by (inputs only, never the clock).
    work = budget.time_limit_seconds if budget.work_limit_seconds is None \
        else max(budget.work_limit_seconds, MIN_SEARCH_SECONDS)
    return _Search(net, start, replace(budget, deadline=deadline, work_limit_seconds=work), hint, hint_eval, fitting,
                   references, limit, work, {"passes": net.passes})


def _solve_built(search: _Search, built: CpSatModel, relaxed: _Relaxed) -> CpSatResult:
    """Solve the one model: Performance, the fewest cycles; Size, the least peak in half the time left, then the
    fewest cycles within it. Then what the status says: the answer (its buffers fitted at addresses), or the
    fallback, or why nothing fits."""
    budget, start, stats, work, log = search.budget, search.start, search.stats, search.work, search.budget.log
    peak = _PeakBound()
    if search.size_first:
        solver = new_solver(budget.seconds_left() / 2, budget, work / 4)
        status = interruption.solve(solver, built.model, Progress(log, start, "bytes of fast storage", 1))
        _note_clock(stats, solver, status, budget)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            least_peak = round(solver.objective_value)
            peak = _PeakBound(least_peak, math.ceil(solver.best_objective_bound - 1e-6), status == cp_model.OPTIMAL)
            smallest = extract_schedule(built, solver.boolean_value)
            if log is not None:
                log(f"cp-sat: peak {peak.found_bytes} bytes, bound {peak.bound_bytes} bytes; now the fewest cycles "
                    "within that peak")
            _hold_peak_and_minimise_cycles(built, solver, least_peak)
            solver = new_solver(budget.seconds_left(), budget, work / 4)
            cycles_status = interruption.solve(solver, built.model, Progress(log, start))
            _note_clock(stats, solver, cycles_status, budget)
            if cycles_status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                # The smallest schedule is a solution of the second model too; without time to find it, keep it.
                return _verified_result(search.net, smallest, search.hint, search.fitting[1] if search.fitting
                                        else None, cp_model.FEASIBLE, math.nan, peak, time.monotonic() - start,
                                        stats, log)
            status = cycles_status if status == cp_model.OPTIMAL else cp_model.FEASIBLE
    else:
        solver = new_solver(budget.seconds_left(), budget, work / 2)
        status = interruption.solve(solver, built.model, Progress(log, start))
        _note_clock(stats, solver, status, budget)
    return _concluded(search, built, relaxed, solver, status, peak)


def _concluded(search: _Search, built: CpSatModel, relaxed: _Relaxed, solver: cp_model.CpSolver,
               status: cp_model.CpSolverStatus, peak: _PeakBound) -> CpSatResult:
    net, budget, start, stats, limit = search.net, search.budget, search.start, search.stats, search.limit
    solve_seconds = time.monotonic() - start
    if status == cp_model.INFEASIBLE:
        if search.fitting is not None:
            return search.fallback("the candidate space has no schedule that fits", solve_seconds)
        if relaxed.datas:
            raise _smallest_fit_error(net, relaxed.datas, limit)
        raise _no_fit_error(search, built)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if search.fitting is None:
            raise ScheduleError(_nothing_found(net, search.hint_eval, limit, budget.time_limit_seconds))
        return search.fallback(f"no CP-SAT solution within {budget.time_limit_seconds:g} s", solve_seconds)
    bound = solver.best_objective_bound / SCALE  # the first solve's: a repair searches a smaller space
    if not search.size_first or peak.found_bytes == relaxed.least_peak_bytes:
        bound = max(bound, relaxed.bound_cycles())  # Size: both bound the cycles at the least peak
    # The answer's buffers must also fit at addresses; if they do not, solve again with the limit tightened.
    found, status, repair = repair_allocation(built, solver, status, budget, search.work / 4, budget.log)
    stats["allocation_repairs"] = repair.as_stats()
    if found is None:
        if search.fitting is None:
            raise ScheduleError(repair.reason if repair.needed_bytes is not None else
                                f"no schedule whose buffers fit {limit} bytes of fast storage was found: "
                                f"{repair.reason}", needed_bytes=repair.needed_bytes)
        return search.fallback(repair.reason, time.monotonic() - start)
    return _verified_result(net, found, search.hint, search.fitting[1] if search.fitting else None, status, bound,
                            peak, time.monotonic() - start if repair.rounds else solve_seconds, stats, budget.log)


def _no_fit_error(search: _Search, built: CpSatModel) -> ScheduleError:
    """No candidate schedule fits, and nothing fitting was given: the smallest that fits, searched for."""
    fit = smallest_fast_storage(search.net, search.references, search.budget.deadline, search.budget.deterministic,
                                search.work / 2)
    if fit.schedule is None:
        return ScheduleError(f"no schedule fits {built.limit} bytes of fast storage")
    return ScheduleError(f"no schedule fits {built.limit} bytes of fast storage; the smallest that fits needs "
                         f"{fit.needed_bytes} bytes"
                         + ("" if fit.proven else " or fewer (not proven within the time limit)")
                         + f": {explain_peak(search.net.network, search.net.arch, fit.schedule)}",
                         needed_bytes=fit.needed_bytes)


def _note_clock(stats: dict[str, Any], solver: cp_model.CpSolver, status: cp_model.CpSolverStatus,
                budget: SearchBudget) -> None:
    if stopped_by_clock(solver, status, budget):
        stats["stopped_by_clock"] = True


def _windows_result(net: NetworkFacts, references: tuple[Schedule, ...], hint: Schedule, hint_eval: Evaluation,
                    relaxed: _Relaxed, limit: int, budget: SearchBudget, start: float, stats: dict[str, Any],
                    why: str) -> CpSatResult:
    """The window search's answer as a result, with the path bound when the whole candidate space was priced: the
    search starts from the better of the hint (verified) and the bound's own path, and stops when it meets the
    bound. For Size the least peak is exact, and the cycles are bounded at the answer's peak."""
    if relaxed.start is not None:
        hint, hint_eval = relaxed.start
    bound = relaxed.bound_cycles()
    outcome = search_windows(net, references, hint, hint_eval, limit, budget, why, bound_cycles=bound,
                             least_peak_bytes=relaxed.least_peak_bytes)
    stats.update(outcome.stats)
    peak = outcome.evaluation.peak_fast_storage
    if relaxed.datas and _size_first(net.arch) and relaxed.least_peak_bytes != peak:
        # The bound held at the least peak; the answer's is larger, where fewer cycles may be possible.
        bound = _bound_cycles(_path_bound(net, relaxed.datas, peak, outcome.evaluation, budget, stats))
    return _bounded_result(net, outcome.schedule, outcome.evaluation, bound, relaxed.least_peak_bytes,
                           outcome.reason, start, stats)


def _path_result(net: NetworkFacts, relaxed: _Relaxed, start: float, stats: dict[str, Any], log: Log | None
                 ) -> CpSatResult:
    """The path bound's own path as the answer: it meets the bound, so no search can do better."""
    assert relaxed.start is not None
    schedule, evaluation = relaxed.start
    stats["mode"] = "path"
    if log is not None:
        log("cp-sat: the path bound's schedule meets the bound: optimal over the candidate space")
    return _bounded_result(net, schedule, evaluation, relaxed.bound_cycles(), relaxed.least_peak_bytes,
                           "the shortest path over the candidate space (path bound)", start, stats)


def _bounded_result(net: NetworkFacts, schedule: Schedule, evaluation: Evaluation, bound: float,
                    least_peak_bytes: int | None, why: str, start: float, stats: dict[str, Any]) -> CpSatResult:
    objective = objective_of(evaluation, net.arch)
    gap = relative_gap(objective, bound)
    status = "optimal" if gap <= CLOSED_GAP else "feasible"
    reason = why + (f"; path bound {bound:.0f} cycles, gap {gap:.2%}" if not math.isnan(bound) else "")
    peak = evaluation.peak_fast_storage
    scaled = sum(round(cost.total_cycles * SCALE) for cost in evaluation.ops)  # as the model's tables count it
    return CpSatResult(schedule.with_status(status, reason), status, evaluation.total_cycles, bound, gap,
                       time.monotonic() - start, reason, stats, scaled, peak_bound_bytes=least_peak_bytes,
                       peak_proven_minimal=least_peak_bytes is not None and peak <= least_peak_bytes)


@dataclass(frozen=True)
class _Relaxed:
    """The whole candidate space (``datas``; empty when it was not priced), its path bound (at the least peak for
    Size, which ``least_peak_bytes`` gives) and the bound's path (with dedicated fast storage, repaired: the maps
    ``resident`` made resident where they fit) as a start when it verifies and beats the hint by the objective."""

    datas: tuple[RegionData, ...] = ()
    bound: PathBound | None = None
    least_peak_bytes: int | None = None
    start: tuple[Schedule, Evaluation] | None = None
    resident: frozenset[FeatureMap] = frozenset()  # the start's resident maps (dedicated fast storage)

    def bound_cycles(self) -> float:
        return _bound_cycles(self.bound)

    def closes_gap(self, arch: PricedArchitecture) -> bool:
        """The start meets the bound by the objective (the over-cap penalty included)."""
        if self.start is None:
            return False
        return relative_gap(objective_of(self.start[1], arch), self.bound_cycles()) <= CLOSED_GAP


def _bound_cycles(bound: PathBound | None) -> float:
    return bound.scaled / SCALE if bound is not None and bound.feasible else math.nan


def _priced_passes(net: NetworkFacts) -> float:
    """The network's passes as the pricing rates count them (``PRICING_FULL_PASS_ELEMENTS``)."""
    return sum(min(1.0, op.ofm.shape.elements() / PRICING_FULL_PASS_ELEMENTS) for op in net.network.npu_ops)


def _relax_whole_space(net: NetworkFacts, references: tuple[Schedule, ...], hint_first: bool,
                       hint_eval: Evaluation | None, limit: int, budget: SearchBudget, build_deadline: float,
                       stats: dict[str, Any]) -> _Relaxed:
    """Price the whole candidate space and bound it (``hint_eval``: the hint's when it fits). A network the one
    model holds is priced by ``build_deadline``, as its build would be (the build then reuses it); a larger one,
    where its estimate fits the time left (a deterministic run: ``WHOLE_SPACE_SHARE`` of its work), within that
    share of the time, and what it priced is not lost when the window search follows: its windows reuse it."""
    large = net.passes > FULL_MODEL_MAX_PASSES
    models = 2 if net.arch.estimator is Estimator.BOTH else 1
    if budget.deterministic:
        # Sized by the workers asked for, not the CPUs found, so that it decides alike everywhere.
        rate, processes, available, within = (PRICING_SECONDS_PER_PASS_AND_MODEL, budget.threads,
                                              WHOLE_SPACE_SHARE * budget.work_left(), "work budget")
    else:
        # Left out where it could not be done in the time left, which the window search then gets instead.
        rate, processes, available, within = (
            TYPICAL_PRICING_SECONDS_PER_PASS_AND_MODEL["shared" if net.shared else "dedicated"],
            usable_processes(budget.threads), budget.seconds_left(), "time left")
    if large and _priced_passes(net) * models * rate / processes > available:
        stats["path_bound"] = f"the whole candidate space is too large to price within the {within}"
        return _Relaxed()
    deadline = build_deadline if not large else budget.deadline if budget.deterministic else \
        min(budget.deadline, time.monotonic() + WHOLE_SPACE_SHARE * budget.seconds_left())
    try:
        datas = tuple(whole_network_data(net, references, hint_first, deadline, usable_processes(budget.threads)))
    except OutOfTime:
        stats["path_bound"] = "the whole candidate space could not be priced in time"
        if budget.deterministic and large:
            stats["stopped_by_clock"] = True
        return _Relaxed()
    least = least_peak(net, datas) if _size_first(net.arch) else None
    bound = _path_bound(net, datas, limit if least is None else min(limit, least), hint_eval, budget, stats)
    if budget.log is not None and bound.feasible:
        budget.log(f"cp-sat: path bound {bound.scaled / SCALE:.0f} cycles"
                   + (" (the candidate space's optimum)" if bound.iterations == 1 else
                      f" ({bound.iterations} subgradient steps)") + (f" at the least peak, {least} bytes"
                                                                       if least is not None else ""))
    start = None
    resident: frozenset[FeatureMap] = frozenset()
    if bound.paths is not None:
        # Dedicated fast storage: the relaxation's path with maps made resident where they still fit.
        resident = frozenset() if bound.exact else resident_maps(net, datas, bound.paths, limit)
        schedule = path_schedule(net, datas, bound.paths, resident)
        evaluation = evaluate(net.network, net.arch, schedule)
        if not verify(net.network, net.arch, schedule, evaluation, limit) and \
                (hint_eval is None or objective_rank(evaluation, net.arch) < objective_rank(hint_eval, net.arch)):
            start = (schedule, evaluation)
    stats["path_start"] = start is not None
    return _Relaxed(datas, bound, least, start, resident)


def _smallest_fit_error(net: NetworkFacts, datas: Sequence[RegionData], limit: int) -> ScheduleError:
    """No schedule of the candidate space fits ``limit``: the error names the least it needs (the bottleneck path,
    exact) and what is live at the step where that path peaks."""
    least = least_peak(net, datas)
    fit = path_bound(net, datas, least)
    assert fit.paths is not None  # the least peak fits by definition
    schedule = path_schedule(net, datas, fit.paths)
    return ScheduleError(f"no schedule fits {limit} bytes of fast storage; the smallest that fits needs {least} "
                         f"bytes: {explain_peak(net.network, net.arch, schedule)}{_what_sets(net, least)}",
                         needed_bytes=least)


def _rules_floor(net: NetworkFacts) -> tuple[PeakFloor, str] | None:
    """The least any schedule the cascade rules of the candidate space (Vela's, with held operands, and with joins
    where it has them) allow needs, and those rules named; None where feature maps may leave fast storage."""
    try:
        floor = network_floor(net.network, net.arch, held_operands=True, joins=net.joins).npu
    except ValueError:
        return None
    return floor, "the cascade rules (Vela's, and cascades through joins)" if net.joins else "Vela's cascade rules"


def _what_sets(net: NetworkFacts, least: int) -> str:
    """Whether the cascade rules of the candidate space or the network itself set the floor ``least``."""
    found = _rules_floor(net)
    if found is None:
        return ""
    floor, rules = found
    first, last = floor.run
    if floor.floor_bytes < least:
        return f"; {rules} allow schedules down to {floor.describe()}, with stripes outside the candidate space"
    if first == last:
        return (f"; the network itself sets that floor: pass {floor.position} ({floor.op_name}) needs it with its "
                f"operands whole, and no cascade {rules} allow can stripe it")
    return (f"; {rules} set that floor: no schedule they allow needs less (passes {first}..{last} cascaded, at "
            "least)")


def _path_bound(net: NetworkFacts, datas: Sequence[RegionData], limit: int, upper: Evaluation | None,
                budget: SearchBudget, stats: dict[str, Any]) -> PathBound:
    """The path bound within ``limit`` bytes, its multipliers stepped towards ``upper``'s cost; a deterministic run
    by iterations alone (the deadline a safety net)."""
    deadline = budget.deadline if budget.deterministic else \
        min(budget.deadline, time.monotonic() + PATH_BOUND_SHARE * budget.seconds_left())
    upper_scaled = objective_of(upper, net.arch) * SCALE if upper is not None else None
    bound = path_bound(net, datas, limit, upper_scaled, deadline)
    stats["path_bound"] = {"bound_cycles": round(bound.scaled / SCALE, 1) if bound.feasible else None,
                           "exact": bound.exact, "iterations": bound.iterations, "seconds": round(bound.seconds, 3)}
    if budget.deterministic and bound.timed_out:
        stats["stopped_by_clock"] = True  # fewer steps than its inputs alone give: another run may differ
    return bound


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
    model.minimize(built.objective)
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
    if hint is not None and hint_eval is not None and (problems or objective_rank(hint_eval, net.arch)
                                                       < objective_rank(evaluation, net.arch)):
        # A failed verification should not happen (the model counts memory as the evaluator does); the judge has
        # the last word either way.
        reason = (f"the CP-SAT schedule fails verification: {problems[0]}" if problems
                  else "the hint is better than the CP-SAT schedule")
        return replace(_fallback(hint, hint_eval.total_cycles, reason, solve_seconds, stats, bound),
                       peak_bound_bytes=peak.bound_bytes, peak_proven_minimal=peak.proven)
    if problems:
        raise ScheduleError(f"the CP-SAT schedule fails verification: {problems[0]}")
    objective = objective_of(evaluation, net.arch)
    gap = 0.0 if status == cp_model.OPTIMAL else relative_gap(objective, bound)
    label = "optimal" if status == cp_model.OPTIMAL or gap <= CLOSED_GAP else "feasible"
    within = ""
    if size_first and peak.found_bytes is not None:
        within = (f"peak {evaluation.peak_fast_storage} bytes, "
                  + ("the least in the candidate space" if peak.proven else f"bound {peak.bound_bytes} bytes")
                  + "; cycles at that peak: ")
    reason = (f"cp-sat {label}: {within}bound {bound:.0f} cycles, gap {gap:.2%}" if not math.isnan(bound)
              else f"cp-sat {label}: {within}no bound")
    schedule = schedule.with_status(label, reason)
    if log is not None:
        # Under --objective both a model over its core's total is penalised: the bound is the penalised objective's.
        penalty = f" (objective {objective:.0f}, over-cap penalty included)" \
            if objective > evaluation.total_cycles + 0.5 else ""
        log(f"cp-sat {label}: {evaluation.total_cycles:.0f} cycles{penalty}, {reason.split(': ', 1)[1]}, "
            f"{solve_seconds:.1f} s")
    return CpSatResult(schedule, label, evaluation.total_cycles, bound, gap, solve_seconds, "", stats, scaled,
                       peak_bound_bytes=peak.bound_bytes, peak_proven_minimal=peak.proven)


def _nothing_found(net: NetworkFacts, hint_eval: Evaluation | None, limit: int, seconds: float) -> str:
    """No schedule found in time: none exists where the cascade rules' floor is over the limit (say so, and what
    sets it), else a longer time limit may find one."""
    found = _rules_floor(net)
    if found is not None and found[0].floor_bytes > limit:
        floor, rules = found
        return f"no schedule fits {limit} bytes of fast storage: every schedule {rules} allow needs {floor.describe()}"
    why = ("the heuristic's (Vela legacy's) schedule needs "
           f"{hint_eval.peak_fast_storage} bytes" if hint_eval is not None else "the heuristic (Vela legacy) has none")
    return (f"no schedule that fits {limit} bytes of fast storage was found within {seconds:.3g} s ({why}); a "
            "longer --time-limit gives CP-SAT the time to find one or to prove there is none")


def _max_schedule_or_none(network: Network, arch: PricedArchitecture) -> Schedule | None:
    try:
        return max_schedule(network, arch)
    except ScheduleError:
        return None


def _fallback(schedule: Schedule, total: float, reason: str, seconds: float, stats: dict[str, Any],
              bound: float = math.nan) -> CpSatResult:
    return CpSatResult(schedule.with_status("fallback", reason), "fallback", total, bound, relative_gap(total, bound),
                       seconds, reason, stats)


@dataclass(frozen=True)
class SmallestFit:
    """The least fast storage a schedule of the candidate space was found to need, whether that is proven the
    least, and the schedule that needs it (``needed_bytes`` -1 and no schedule when none was found in time)."""

    needed_bytes: int
    proven: bool
    schedule: Schedule | None = None


def smallest_fast_storage(net: NetworkFacts, references: tuple[Schedule, ...], deadline: float,
                          deterministic: bool = False, work_seconds: float | None = None) -> SmallestFit:
    """The least fast storage a schedule of the candidate space needs (CP-SAT, minimising the limit). With
    ``deterministic`` the search stops after a fixed amount of work (``work_seconds``, default half the time
    left), not by the clock."""
    try:
        built = build_model(net, whole_subgraph_regions(net), references,
                            limit=max(staging_limit(net.arch), 1 << 40), minimise_memory=True, deadline=deadline)
    except OutOfTime:
        return SmallestFit(-1, False)
    solver = new_solver(deadline - time.monotonic(),
                        SearchBudget(workers=1, deterministic=deterministic, deadline=deadline), work_seconds)
    status = interruption.solve(solver, built.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        schedule, _ = extract_schedule(built, solver.boolean_value)
        return SmallestFit(int(solver.objective_value), status == cp_model.OPTIMAL, schedule)
    return SmallestFit(-1, False)
