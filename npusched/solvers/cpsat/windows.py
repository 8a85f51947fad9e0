"""Large networks: windows of the execution order re-decided with the rest fixed (a large-neighbourhood search).

Used for networks with more passes than one model holds, or when the one model cannot be built in time. Every
accepted move lowers the objective with everything outside its window unchanged. The search proves no bound of its
own: the path bound over the whole candidate space (``npusched.solvers.cpsat.path_bound``), when it was priced in
time, is its start, its bound and its stopping rule.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

from ortools.sat.python import cp_model

from npusched.schedule.evaluator import Evaluation, evaluate, verify
from npusched.schedule.pricing import Slack
from npusched.schedule.schedule import Schedule
from npusched.solvers import interruption
from npusched.solvers.cpsat.candidates import segments_of
from npusched.solvers.cpsat.model import (
    SCALE,
    CpSatModel,
    NetworkFacts,
    OutOfTime,
    Region,
    add_hint,
    build_model,
    extract_schedule,
    incumbent_runs,
    slack_before,
)
from npusched.solvers.cpsat.solver import CLOSED_GAP, SearchBudget, new_solver, objective_of, relative_gap
from npusched.target.arch import OptimisationStrategy
from npusched.target.estimators import Estimator

# Passes a window decides at first (it grows when a sweep over the network finds nothing better).
WINDOW_PASSES = 16


# Wall-clock cap on one window's solve.
WINDOW_SOLVE_SECONDS = 2.0


# With --deterministic the window search stops when the work its moves did, charged from what each did (never from
# the clock), reaches half its work budget, so that a machine twice as busy still ends it by that work. A move is
# charged a fixed part, a part per variable of its model and one per unit of CP-SAT's deterministic time: the line
# under the wall time of the moves of NASNetMobile, EfficientNetB0, DenseNet121 and yolov8_tiny_128 on both kinds of
# fast storage, 2 cores.
MOVE_SECONDS = 0.1
MOVE_SECONDS_PER_VARIABLE = 1e-4
MOVE_SECONDS_PER_DETERMINISTIC_UNIT = 1.6
LOAD_MARGIN = 2.0


# Optimising for size, the window search spends this share of its time and moves lowering the peak.
PEAK_SHARE = 0.4


@dataclass(frozen=True)
class WindowsOutcome:
    """The window search's schedule (verified), its evaluation, why it ran, and its counters."""

    schedule: Schedule
    evaluation: Evaluation
    reason: str
    stats: dict[str, Any]


def search_windows(net: NetworkFacts, references: tuple[Schedule, ...], hint: Schedule, hint_eval: Evaluation,
                   limit: int, budget: SearchBudget, why: str, bound_cycles: float = math.nan,
                   least_peak_bytes: int | None = None) -> WindowsOutcome:
    """The window search from the hint (verified; ``hint_eval`` its evaluation): for Size, first windows that lower
    the peak (``PEAK_SHARE`` of the time and moves; none when the hint's is ``least_peak_bytes`` already), then
    windows that lower the cycles within the peak reached, until the objective (``objective_cycles``) meets
    ``bound_cycles``."""
    if budget.log is not None:
        budget.log(f"cp-sat: {why}; improving the schedule window by window")
    # A deterministic search stops by the work its moves did, not at the clock (which stays a safety net).
    work = budget.work_left() / LOAD_MARGIN if budget.deterministic else math.inf
    reason = f"large-neighbourhood search over windows ({why})"
    stats: dict[str, Any] = {}
    if net.arch.optimise is OptimisationStrategy.SIZE and (least_peak_bytes is None
                                                           or hint_eval.peak_fast_storage > least_peak_bytes):
        peak_budget = replace(budget, deadline=time.monotonic() + PEAK_SHARE * budget.seconds_left())
        hint, hint_eval, peak_stats, peak_work = _shrink_peak_by_windows(net, references, hint, hint_eval, limit,
                                                                         peak_budget, PEAK_SHARE * work)
        stats.update(peak_stats)
        work = max(MOVE_SECONDS, work - peak_work)
        reason += "; peak lowered around its step only"
    if net.arch.optimise is OptimisationStrategy.SIZE:
        limit = min(limit, hint_eval.peak_fast_storage)
        reason += f"; cycles lowered within {limit} bytes"
    schedule, evaluation, window_stats = _improve_by_windows(net, references, hint, hint_eval, limit, budget, work,
                                                             bound_cycles)
    stats.update(window_stats, mode="windows")
    if window_stats.get("exhausted"):
        reason += "; stopped early: no window of any width or boundary offset improves the schedule"
    return WindowsOutcome(schedule, evaluation, reason, stats)


def _improve_by_windows(net: NetworkFacts, references: tuple[Schedule, ...], incumbent: Schedule,
                        evaluation: Evaluation, limit: int, budget: SearchBudget, work: float,
                        bound_cycles: float = math.nan) -> tuple[Schedule, Evaluation, dict[str, Any]]:
    """Improve ``incumbent`` (verified; ``evaluation`` is the evaluator's) move by move until the deadline or
    until its moves have done ``work`` seconds of it (``move_seconds``: a deterministic search stops by that
    charge, never by the clock). A move
    decides some regions with everything else fixed, so an accepted move can only lower the total:

    * residency: every pass keeps the incumbent's choices, every feature map of every subgraph may move
      (dedicated fast storage only): maps live far longer than a window are placed here;
    * windows of the execution order, costliest first, with Vela's block configs only (cheap: nothing to price
      but the candidates themselves), then with every candidate, then wider;
    * then, while time and moves are left, rounds of every width again with the window boundaries shifted by an
      eighth of a window more each round (a cascade a boundary cut can now form): the search stops before the
      limit only when the objective meets ``bound_cycles`` (the gap is closed) or no round of the four offsets in a
      row finds anything better (``exhausted``: no such window improves the schedule).

    Each stage repeats until it finds nothing better. The result is verified after every sweep; should a
    sweep's result fail, the previous one is kept."""
    search = _WindowSearch(net, references, incumbent, evaluation, limit, budget, work)
    stats = search.stats
    longest = max(len(sg.ops) for sg in net.subgraphs)
    widths = [WINDOW_PASSES]
    while widths[-1] < longest:
        widths.append(2 * widths[-1])
    # (kind, window width, offset of the window boundaries)
    stages: list[tuple[str, int, int]] = [] if net.shared else [("residency", 0, 0)]
    stages += [("vela_configs_only", WINDOW_PASSES, 0), *(("full", width, 0) for width in widths)]
    idle_rounds = 0
    while time.monotonic() < budget.deadline and search.work_left > 0 and not interruption.requested():
        if relative_gap(objective_of(search.verified_eval, net.arch), bound_cycles) <= CLOSED_GAP:
            stats["gap_closed"] = True
            break
        if not stages:
            if idle_rounds >= 4:
                stats["exhausted"] = True  # every offset of every width found nothing better
                break
            stats["rounds"] += 1
            stages = [("full", width, (stats["rounds"] % 4) * width // 8) for width in widths]
            idle_rounds += 1
        kind, width, offset = stages[0]
        improved = search.sweep(kind, width, offset)
        stats["sweeps"] += 1
        if not improved:
            if budget.seconds_left() < 0.2 or search.work_left <= 0:
                break  # cut short: the stage is not known to find nothing
            stages.pop(0)
            continue
        idle_rounds = 0
        if not search.accept():
            break
        search.log_sweep(kind, width, offset, bound_cycles)
    return search.verified, search.verified_eval, stats


class _WindowSearch:
    """The state of one window search: the incumbent (and the last verified schedule, kept when a sweep's result
    fails), the work left and the statistics."""

    def __init__(self, net: NetworkFacts, references: tuple[Schedule, ...], incumbent: Schedule,
                 evaluation: Evaluation, limit: int, budget: SearchBudget, work: float) -> None:
        self.net, self.references, self.limit, self.budget = net, references, limit, budget
        self.incumbent, self.evaluation = incumbent, evaluation
        self.verified, self.verified_eval = incumbent, evaluation
        self.work_left = work
        self.stats: dict[str, Any] = {"windows": 0, "improved_windows": 0, "sweeps": 0, "largest_window": 0,
                                      "rounds": 0}
        # Under Estimator.BOTH with a cap: the incumbent's two weighted model totals (scaled), which a window may
        # raise up to the cap but never above it, nor above where they are (a window's objective is its cycles).
        self.parts = _scaled(evaluation.parts)
        self.capped = net.arch.estimator is Estimator.BOTH and net.arch.blend_cap > 0

    def sweep(self, kind: str, width: int, offset: int) -> bool:
        """One stage's moves over the incumbent; True when any lowered its cost."""
        net = self.net
        if kind == "residency":
            # Every run fixed: the free part of each region is empty.
            regions = [Region(sgi, len(sg.ops), len(sg.ops) - 1, 0, len(sg.ops) - 1)
                       for sgi, sg in enumerate(net.subgraphs) if sg.ops]
            return self.move(regions, True, 4 * WINDOW_SOLVE_SECONDS)
        improved = False
        for sgi, lo, hi in windows_by_cost(net, width, self.evaluation, offset):
            if self.budget.seconds_left() < 0.2 or self.work_left <= 0:
                break
            region = aligned_region(net, self.incumbent, sgi, lo, hi)
            self.stats["largest_window"] = max(self.stats["largest_window"], region.hi - region.lo + 1)
            improved = self.move([region], kind == "vela_configs_only", WINDOW_SOLVE_SECONDS) or improved
        return improved

    def move(self, regions: list[Region], vela_configs_only: bool, seconds: float) -> bool:
        """Solve ``regions`` of the incumbent; True when that lowered its cost."""
        if self.work_left <= 0:
            return False
        net, budget = self.net, self.budget
        try:
            built = build_model(net, regions, (self.incumbent, *self.references), limit=self.limit,
                                incumbent=self.incumbent, hint_first=True, deadline=budget.deadline - 0.1,
                                vela_configs_only=vela_configs_only)
        except OutOfTime:
            return False
        add_hint(built, self.incumbent)
        before = [_incumbent_parts(net, self.incumbent, region) for region in regions]
        held: list[tuple[Any, int, int]] = []
        if self.capped:  # (window's part, the incumbent's over the window, the incumbent's total) per model
            legacy = sum(region.scaled_legacy_part() for region in built.regions)
            held = [(legacy, sum(b[1] for b in before), self.parts[0]),
                    (built.cycles - legacy, sum(b[0] - b[1] for b in before), self.parts[1])]
            cap = round(net.arch.blend_cap * SCALE)
            for window, window_before, total in held:
                built.model.add(window <= window_before + max(0, cap - total))
        solver = new_solver(_solve_seconds(budget, seconds), budget, seconds / 2)
        status = interruption.solve(solver, built.model)
        self.work_left -= move_seconds(built, solver)
        self.stats["windows"] += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        if solver.objective_value >= sum(b[0] for b in before):
            return False
        self.incumbent, _ = extract_schedule(built, solver.boolean_value, self.incumbent)
        if held:
            legacy_total, default_total = (total - window_before + solver.value(window)
                                           for window, window_before, total in held)
            self.parts = (legacy_total, default_total)
        self.stats["improved_windows"] += 1
        return True

    def accept(self) -> bool:
        """Verify the improved incumbent and keep it; False (the search stops, the last verified schedule kept)
        where it fails or costs more."""
        net, limit = self.net, self.limit
        evaluation = self.evaluation = evaluate(net.network, net.arch, self.incumbent)
        problems = verify(net.network, net.arch, self.incumbent, evaluation, limit)
        if problems or objective_of(evaluation, net.arch) > objective_of(self.verified_eval, net.arch):
            if problems and evaluation.network_peak_fast_storage <= limit:
                # Its buffers do not fit at addresses: the sweep is undone (what that costs is recorded).
                self.stats["allocation_repairs"] = {
                    "rounds": 0, "rejected_sweeps": 1, "first_excess_bytes": evaluation.allocation.size_bytes - limit,
                    "cost_cycles": round(self.verified_eval.total_cycles - evaluation.total_cycles, 1),
                    "fits": True}
            return False
        self.verified, self.verified_eval = self.incumbent, evaluation
        self.parts = _scaled(evaluation.parts)
        return True

    def log_sweep(self, kind: str, width: int, offset: int, bound_cycles: float) -> None:
        if self.budget.log is None:
            return
        what = "residency" if kind == "residency" else f"{width}-pass windows" + (
            " (Vela block configs)" if kind == "vela_configs_only" else "") + (" shifted" if offset else "")
        total = self.verified_eval.total_cycles
        bound = "" if math.isnan(bound_cycles) else \
            f", bound {bound_cycles:.0f} (gap {1 - bound_cycles / total:.2%})"
        self.budget.log(f"cp-sat: sweep {self.stats['sweeps']} ({what}): {total:.0f} cycles{bound}")


def windows_by_cost(net: NetworkFacts, width: int, evaluation: Evaluation, offset: int = 0
                    ) -> list[tuple[int, int, int]]:
    """(subgraph, first, last position) of windows of ``width`` passes over every subgraph, overlapping by half,
    starting at multiples of half a window plus ``offset`` (and at 0), the costliest first (where the time runs
    out before a sweep ends, the largest gains come first)."""
    cycles = {cost.op_index: cost.total_cycles for cost in evaluation.ops}
    step = max(1, width // 2)
    windows = [(sgi, lo, min(lo + width, len(sg.ops)) - 1) for sgi, sg in enumerate(net.subgraphs) if sg.ops
               for lo in sorted({0, *range(offset % step, max(1, len(sg.ops) - step), step)})]

    def cost(window: tuple[int, int, int]) -> float:
        sgi, lo, hi = window
        return sum(cycles.get(op.index, 0.0) for op in net.subgraphs[sgi].ops[lo:hi + 1])

    return sorted(windows, key=lambda w: -cost(w))


def aligned_region(net: NetworkFacts, incumbent: Schedule, sgi: int, lo: int, hi: int) -> Region:
    """The window ``lo..hi`` widened to whole runs of the incumbent (a window never cuts one of its cascades),
    with the runs just outside it."""
    runs = [(start, start + len(ops) - 1) for start, ops in segments_of(incumbent, net.subgraphs[sgi])]
    first = next(k for k, (_, end) in enumerate(runs) if end >= lo)
    last = next(k for k, (_, end) in enumerate(runs) if end >= hi)
    return Region(sgi, runs[first][0], runs[last][1], runs[max(first - 1, 0)][0],
                  runs[min(last + 1, len(runs) - 1)][1])


def _incumbent_parts(net: NetworkFacts, incumbent: Schedule, region: Region) -> tuple[int, int]:
    """The scaled price of the incumbent over ``ext_lo..ext_hi``, as the window model's tables price it, and (under
    ``Estimator.BOTH``) its weighted legacy-model part."""
    places = {fm: incumbent.placement(fm) or p for fm, p in net.base.items()}
    runs = incumbent_runs(net, incumbent, region.sg_index)
    slack: Slack = slack_before(net, runs, region.sg_index, region.ext_lo)
    total = legacy = 0
    for run in runs:
        if region.ext_lo <= run.start <= region.ext_hi:
            totals, slack, _, parts = net.pricer.price(net.subgraphs[region.sg_index].ops, run, places, slack)
            total += sum(round(t * SCALE) for t in totals)
            legacy += sum(round(p * SCALE) for p in parts)
    return total, legacy


def _scaled(parts: tuple[float, float]) -> tuple[int, int]:
    return round(parts[0] * SCALE), round(parts[1] * SCALE)


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
                            evaluation: Evaluation, limit: int, budget: SearchBudget, work: float
                            ) -> tuple[Schedule, Evaluation, dict[str, Any], float]:
    """Lower the peak fast storage of ``incumbent`` (verified) window by window: a window around the step where
    the use peaks is re-decided with its highest use minimised, twice as wide when that finds nothing lower,
    back to ``WINDOW_PASSES`` after a success. What a window decides (its cascades, its rolling and weight
    buffers, the residency of maps that live only inside it) lives only inside it, and the passes outside keep
    their choices, so the use elsewhere stays as it was: an accepted move never raises the peak. Each accepted
    move is verified by the evaluator. Stops at the deadline, once its moves have done ``work`` seconds of it
    (``move_seconds``), or when a window as wide as the subgraph finds nothing lower; returns the work done too."""
    stats = {"peak_windows": 0, "peak_improved_windows": 0}
    width = WINDOW_PASSES
    done = 0.0
    while done < work and budget.seconds_left() > 0.2:
        sgi, pos = _peak_position(net, evaluation)
        last = len(net.subgraphs[sgi].ops) - 1
        if width > 2 * (last + 1):
            break
        region = aligned_region(net, incumbent, sgi, max(0, pos - width // 2), min(last, pos + width // 2))
        peak = evaluation.peak_fast_storage
        try:
            built = build_model(net, [region], (incumbent, *references), limit=peak, minimise_memory=True,
                                incumbent=incumbent, hint_first=True, deadline=budget.deadline - 0.1)
        except OutOfTime:
            break
        add_hint(built, incumbent, peak)
        solver = new_solver(_solve_seconds(budget, WINDOW_SOLVE_SECONDS), budget, WINDOW_SOLVE_SECONDS / 2)
        status = interruption.solve(solver, built.model)
        done += move_seconds(built, solver)
        stats["peak_windows"] += 1
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and solver.objective_value < peak:
            candidate, _ = extract_schedule(built, solver.boolean_value, incumbent)
            candidate_eval = evaluate(net.network, net.arch, candidate)
            if (not verify(net.network, net.arch, candidate, candidate_eval, limit)
                    and _peak_rank(candidate_eval) < _peak_rank(evaluation)):
                incumbent, evaluation, width = candidate, candidate_eval, WINDOW_PASSES
                stats["peak_improved_windows"] += 1
                if budget.log is not None:
                    budget.log(f"cp-sat: peak {evaluation.peak_fast_storage} bytes "
                               f"({evaluation.total_cycles:.0f} cycles)")
                continue
        width *= 2
    return incumbent, evaluation, stats, done


def _solve_seconds(budget: SearchBudget, seconds: float) -> float:
    """The wall clock a move's solve may take: ``seconds``, or in a deterministic search whatever the search has
    left (its solve stops by its work, ``seconds / 2`` units of deterministic time, which a busy machine takes
    longer to do)."""
    return budget.seconds_left() if budget.deterministic else min(budget.seconds_left(), seconds)


def move_seconds(built: CpSatModel, solver: cp_model.CpSolver) -> float:
    """What a move is charged: from its model's size and CP-SAT's deterministic time, which do not depend on the
    machine or its load (the seconds it takes on an idle one, as a rule)."""
    return MOVE_SECONDS + MOVE_SECONDS_PER_VARIABLE * built.stats["variables"] \
        + MOVE_SECONDS_PER_DETERMINISTIC_UNIT * solver.response_proto.deterministic_time
