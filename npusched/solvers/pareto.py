"""The cycles-vs-fast-storage frontier: the fewest cycles CP-SAT finds within each of a range of fast-storage
limits, from the smallest limit any candidate schedule fits in up to the peak of the unconstrained optimum (where
more memory stops helping).

The limits are the smallest fit (``cpsat.smallest_fast_storage``), that peak, and ``inner_points`` limits between:
half of them (rounded up) spaced geometrically, the others placed one at a time by bisection in the step of the
curve where cycles drop most (where it bends). Every schedule found is a candidate at every limit it fits (each
solve is hinted with the fastest one so far, or Vela's heuristic for that limit when it is faster), so cycles
never increase with the limit. CP-SAT's candidate space depends on its hint, so a smaller limit's solve can beat
the unconstrained one; the unconstrained solve is then repeated from the best schedule. A solve's bound holds
over its own candidate space at its limit and every smaller one: a point's bound is the largest such bound at or
above its limit that does not exceed its cycles, which gives its gap. ``npusched.app.pareto`` runs it for a model
file and, when asked, Vela's legacy core at the same arena sizes.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from npusched.errors import ScheduleError
from npusched.lowering.graph import Network
from npusched.schedule.evaluator import Evaluation, evaluate, staging_limit, verify
from npusched.schedule.rules import ALLOCATION_QUANTUM
from npusched.schedule.schedule import Schedule
from npusched.solvers.cpsat import NetworkFacts, SearchBudget, smallest_fast_storage, solve_cpsat
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.max_schedule import max_schedule
from npusched.target.estimators import PricedArchitecture

Log = Callable[[str], None]

DEFAULT_INNER_POINTS = 5
# A point joins the frontier only if it saves more than this many cycles over every smaller limit (prices are
# floats summed over passes).
CYCLES_TOLERANCE = 0.5
# Share of the time limit kept back for loading, the final checks and writing the outputs.
RESERVE_SHARE = 0.1


@dataclass(frozen=True)
class ParetoPoint:
    """The best verified schedule found within ``limit_bytes`` of fast storage.

    ``found_at_limit_bytes`` is the limit whose solve produced it (a smaller one when nothing better was found
    here); ``bound_cycles`` is a lower bound on the cycles of every schedule within this limit in the candidate
    space of one of the solves (NaN when none was proven); ``on_frontier`` says the point is faster than every
    smaller limit's.
    """

    limit_bytes: int
    cycles: float
    peak_fast_storage_bytes: int
    bound_cycles: float
    gap: float
    found_at_limit_bytes: int
    on_frontier: bool
    schedule: Schedule
    evaluation: Evaluation


@dataclass(frozen=True)
class Frontier:
    """Every limit tried, ascending (cycles non-increasing), and how the ends were found: the smallest fit and
    the peak and cycles of the (last) unconstrained solve, the largest limit tried."""

    points: tuple[ParetoPoint, ...]
    smallest_fit_bytes: int
    smallest_fit_proven: bool
    unconstrained_peak_bytes: int
    unconstrained_cycles: float
    notes: tuple[str, ...] = ()

    @property
    def frontier(self) -> tuple[ParetoPoint, ...]:
        """The points where more memory buys fewer cycles."""
        return tuple(p for p in self.points if p.on_frontier)


@dataclass(frozen=True)
class VelaPoint:
    """Vela legacy's result with ``--arena-cache-size limit_bytes``; ``error`` is its last output line when it
    failed (its legacy core stops with an assertion on arenas too small for it)."""

    limit_bytes: int
    cycles: float = math.nan
    sram_used_bytes: int = -1
    error: str = ""


@dataclass(frozen=True)
class ParetoRun:
    """A finished ``--pareto`` run: the frontier and Vela's points (empty unless asked for)."""

    model_name: str
    hardware: str
    frontier: Frontier
    vela: tuple[VelaPoint, ...] = ()


@dataclass(frozen=True)
class _Found:
    """A schedule some solve produced, with its evaluation, the limit it was solved for and that solve's bound."""

    limit_bytes: int
    schedule: Schedule
    evaluation: Evaluation
    bound_cycles: float


def limits_between(smallest_bytes: int, largest_bytes: int, inner_points: int) -> tuple[int, ...]:
    """``smallest_bytes``, ``largest_bytes`` and ``inner_points`` limits spaced geometrically between them
    (memory needs span orders of magnitude; the curve bends near the small end), each rounded down to the
    allocation quantum, without repeats. From a smallest fit of 0 bytes (dedicated SRAM: everything can stay in
    DRAM) they halve down from the largest."""
    if largest_bytes <= smallest_bytes:
        return (smallest_bytes,)
    base = smallest_bytes or largest_bytes / 2 ** (inner_points + 1)
    inner = (int(base * (largest_bytes / base) ** (i / (inner_points + 1))) // ALLOCATION_QUANTUM
             * ALLOCATION_QUANTUM for i in range(1, inner_points + 1))
    return tuple(sorted({smallest_bytes, largest_bytes, *(v for v in inner if smallest_bytes < v < largest_bytes)}))


class _Budget:
    """Splits the time limit across the solves still to come. Deterministic runs get fixed shares (their
    searches stop after an amount of work derived from the time they are given, which must not depend on the
    clock); others share out whatever time is left, so time a quick solve saves goes to the later ones."""

    def __init__(self, started: float, time_limit_seconds: float, shares: int, deterministic: bool) -> None:
        self.deadline = started + time_limit_seconds * (1 - RESERVE_SHARE)
        self.fixed = time_limit_seconds * (1 - RESERVE_SHARE) / shares if deterministic else None
        self.left = shares

    def next(self, shares: int = 1) -> float:
        """Seconds for the next solve, which takes ``shares`` of the remaining shares."""
        left, self.left = self.left, max(self.left - shares, 1)
        if self.fixed is not None:
            return self.fixed * shares
        return max((self.deadline - time.monotonic()) * shares / left, 0.5)


def pareto_frontier(network: Network, arch_at: Callable[[int], PricedArchitecture], top_limit_bytes: int, *,
                    inner_points: int = DEFAULT_INNER_POINTS, time_limit_seconds: float = 60.0,
                    started: float | None = None, workers: int | None = None, seed: int = 0,
                    deterministic: bool = False, log: Log | None = None) -> Frontier:
    """The frontier of ``network``; ``arch_at(limit)`` is the hardware with that fast-storage limit and
    ``top_limit_bytes`` the largest the hardware allows (the unconstrained solve's). The whole search keeps to
    ``time_limit_seconds`` counted from ``started`` (a ``time.monotonic`` reading; default: now)."""
    started = time.monotonic() if started is None else started
    # One share per solve (the unconstrained one may be repeated at the end); the smallest fit, which CP-SAT proves
    # with one worker, two.
    budget = _Budget(started, time_limit_seconds, inner_points + 5, deterministic)
    say = log or (lambda line: None)
    solve = _Solver(network, arch_at, workers, seed, deterministic)

    top_arch = arch_at(top_limit_bytes)
    top_hint = _heuristic(network, top_arch)
    top = solve(top_limit_bytes, top_hint, budget.next())
    if top is None:
        raise ScheduleError(f"no schedule found within {time_limit_seconds:g} s even with unlimited fast storage; "
                            "a longer --time-limit gives CP-SAT the time to find one")
    unconstrained_peak = top.evaluation.peak_fast_storage
    say(f"pareto: unconstrained: {top.evaluation.total_cycles:.0f} cycles (bound {top.bound_cycles:.0f}) at a "
        f"peak of {unconstrained_peak} bytes of fast storage")

    references = tuple(s for s in (top_hint, _max_schedule(network, top_arch)) if s is not None)
    seconds = budget.next(shares=2)
    # The low end with cascades through joins: the limits below Vela's rules' least are solved with them too.
    fit = smallest_fast_storage(NetworkFacts(network, top_arch, joins=True), references, time.monotonic() + seconds,
                                deterministic)
    smallest, proven = fit.needed_bytes, fit.proven
    notes = []
    if smallest < 0:
        notes.append(f"the smallest fit was not found within {seconds:.1f} s, so the curve has one point; a longer "
                     "--time-limit gives CP-SAT the time to build and solve its models")
    if smallest < 0 or smallest > unconstrained_peak:  # (the latter: CP-SAT stopped above a size known to fit)
        smallest, proven = unconstrained_peak, False
    say(f"pareto: the smallest fit is {smallest} bytes" + ("" if proven else " or fewer (not proven)"))

    # Half the inner limits (rounded up) spaced geometrically, the others placed by bisection where cycles drop.
    geometric = (inner_points + 1) // 2
    limits = limits_between(smallest, unconstrained_peak, geometric)
    if len(limits) == 1 and proven:
        notes.append("the smallest fit is also the unconstrained optimum's peak: more fast storage buys nothing")
    found = [top]
    planned = len(limits) + inner_points - geometric
    queue = list(limits[:-1])
    for number in range(1, planned):
        if not queue:
            bend = _bisection(limits, found)
            if bend is None:
                break
            limits = tuple(sorted({*limits, bend}))
            queue.append(bend)
        limit = queue.pop(0)
        seconds = budget.next()
        point_start = time.monotonic()
        result = solve(limit, _best_hint(network, arch_at(limit), found), seconds)
        if result is None:
            notes.append(f"no schedule within {limit} bytes was found in {seconds:.1f} s")
            say(f"pareto {number}/{planned}: {limit} bytes: nothing found in {seconds:.1f} s")
            continue
        found.append(result)
        say(f"pareto {number}/{planned}: {limit} bytes: {result.evaluation.total_cycles:.0f} cycles, peak "
            f"{result.evaluation.peak_fast_storage} bytes, bound {result.bound_cycles:.0f}, "
            f"{time.monotonic() - point_start:.1f} s")
    best = min(found, key=lambda f: f.evaluation.total_cycles)
    if best.evaluation.total_cycles < top.evaluation.total_cycles - CYCLES_TOLERANCE:
        # A smaller limit's solve, hinted with other schedules, searched candidates the unconstrained one lacked:
        # solve the top again from there so that its bound covers the best schedule.
        again = solve(top_limit_bytes, best.schedule, budget.next())
        if again is not None:
            found.append(again)
            top = again
            say(f"pareto: unconstrained again: {again.evaluation.total_cycles:.0f} "
                f"cycles, peak {again.evaluation.peak_fast_storage} bytes, bound {again.bound_cycles:.0f}")
            limits = tuple(sorted({*limits, again.evaluation.peak_fast_storage}))
    points = _assemble(network, arch_at, limits, found)
    return Frontier(points, smallest, proven, limits[-1], top.evaluation.total_cycles, tuple(notes))


def _fastest_within(limit: int, found: Sequence[_Found]) -> _Found | None:
    fitting = [f for f in found if f.evaluation.peak_fast_storage <= limit]
    return min(fitting, key=lambda f: (f.evaluation.total_cycles, f.evaluation.peak_fast_storage), default=None)


def _bisection(limits: Sequence[int], found: Sequence[_Found]) -> int | None:
    """The middle of the widest-dropping step of the curve so far: between two neighbouring limits ``a < b``
    whose fastest schedules differ, the bend lies above ``a`` and at most at the peak of ``b``'s schedule. None
    when every drop is located to within an allocation quantum."""
    steps = []
    for low, high in itertools.pairwise(limits):
        below, above = _fastest_within(low, found), _fastest_within(high, found)
        if below is None or above is None:
            continue
        drop = below.evaluation.total_cycles - above.evaluation.total_cycles
        middle = (low + above.evaluation.peak_fast_storage) // 2 // ALLOCATION_QUANTUM * ALLOCATION_QUANTUM
        if drop > CYCLES_TOLERANCE and low < middle < above.evaluation.peak_fast_storage:
            steps.append((drop, middle))
    return max(steps)[1] if steps else None


def _best_hint(network: Network, arch: PricedArchitecture, found: Sequence[_Found]) -> Schedule | None:
    """The fastest schedule that fits ``arch``'s limit among those found so far and Vela's heuristic for that limit
    (whose choices also widen CP-SAT's candidates); the heuristic's when nothing fits (still a reference)."""
    heuristic = _heuristic(network, arch)
    fastest = _fastest_within(staging_limit(arch), found)
    options = [(fastest.evaluation.total_cycles, fastest.schedule)] if fastest is not None else []
    if heuristic is not None:
        evaluation = evaluate(network, arch, heuristic)
        if not verify(network, arch, heuristic, evaluation):
            options.append((evaluation.total_cycles, heuristic))
    return min(options, key=lambda option: option[0])[1] if options else heuristic


class _Solver:
    """One CP-SAT solve at a given limit, hinted; None when CP-SAT finds nothing that fits in time."""

    def __init__(self, network: Network, arch_at: Callable[[int], PricedArchitecture], workers: int | None, seed: int,
                 deterministic: bool) -> None:
        self.network, self.arch_at = network, arch_at
        self.workers, self.seed, self.deterministic = workers, seed, deterministic

    def __call__(self, limit: int, hint: Schedule | None, seconds: float) -> _Found | None:
        arch = self.arch_at(limit)
        hint_eval = evaluate(self.network, arch, hint) if hint is not None else None
        try:
            budget = SearchBudget(seconds, self.workers, self.seed, self.deterministic)
            result = solve_cpsat(self.network, arch, budget, hint=hint, hint_evaluation=hint_eval)
        except ScheduleError:
            return None
        evaluation = evaluate(self.network, arch, result.schedule)
        return _Found(limit, result.schedule, evaluation, result.bound_cycles)


def _heuristic(network: Network, arch: PricedArchitecture) -> Schedule | None:
    """Vela legacy's schedule under ``arch`` (a reference for CP-SAT's candidates even where it goes over the
    limit); None where Vela's legacy scheduler stops."""
    try:
        return heuristic_schedule(network, arch, "Performance")
    except ScheduleError:
        return None


def _max_schedule(network: Network, arch: PricedArchitecture) -> Schedule | None:
    try:
        return max_schedule(network, arch)
    except ScheduleError:
        return None


def _assemble(network: Network, arch_at: Callable[[int], PricedArchitecture], limits: Sequence[int],
              found: Sequence[_Found]) -> tuple[ParetoPoint, ...]:
    """Per limit, the fastest schedule found that fits it (whatever limit it was solved for), checked by the
    evaluator's ``verify``; limits nothing fits are left out."""
    points: list[ParetoPoint] = []
    best_so_far = math.inf
    for limit in limits:
        best = _fastest_within(limit, found)
        if best is None:
            continue
        problems = verify(network, arch_at(limit), best.schedule, best.evaluation)
        if problems:  # cannot happen (fitting was judged on the same evaluation); the judge has the last word
            raise ScheduleError(f"the frontier's schedule at {limit} bytes fails verification: {problems[0]}")
        cycles = best.evaluation.total_cycles
        # A solve's bound holds over its own candidate space (which depends on its hint) at its limit and every
        # smaller one; a bound above the schedule's cycles is about a space that does not contain it.
        bounds = [f.bound_cycles for f in found if f.limit_bytes >= limit and f.bound_cycles <= cycles + 1]
        bound = max(bounds, default=math.nan)
        gap = max(0.0, (cycles - bound) / cycles) if cycles and not math.isnan(bound) else math.nan
        points.append(ParetoPoint(limit, cycles, best.evaluation.peak_fast_storage, bound, gap, best.limit_bytes,
                                  cycles < best_so_far - CYCLES_TOLERANCE, best.schedule, best.evaluation))
        best_so_far = min(best_so_far, cycles)
    return tuple(points)
