"""How one CP-SAT solve is run: its budget (deadline, workers, seed, determinism, progress log) and the solver
parameters every solve of the search and of the window search shares."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from npusched.schedule.evaluator import Evaluation
from npusched.solvers.cpsat.model import SCALE, Log
from npusched.target.estimators import PricedArchitecture, objective_cycles

# A gap this small is closed: the bound and the answer differ by the per-pass rounding of the scaled prices.
CLOSED_GAP = 1e-6


def relative_gap(objective: float, bound: float) -> float:
    """How far ``bound`` is below ``objective``, as a share of it (at least 0); NaN without a bound."""
    if math.isnan(bound):
        return math.nan
    return max(0.0, (objective - bound) / objective) if objective else 0.0


def objective_of(evaluation: Evaluation, arch: PricedArchitecture) -> float:
    """What the search minimises, of an evaluated schedule (``objective_cycles``)."""
    return objective_cycles(arch, evaluation.total_cycles, evaluation.parts)


@dataclass(frozen=True)
class SearchBudget:
    """What a search may spend: ``time_limit_seconds`` of wall clock (a search sets its ``deadline``, a
    ``time.monotonic`` reading, when it starts), ``workers`` threads (None: one per CPU), ``seed``; with
    ``deterministic`` each solve stops after a fixed amount of CP-SAT's deterministic work instead (the clock stays
    a safety net), sized by ``work_limit_seconds``: the seconds the search may take by its inputs alone (default:
    the time limit; within a search, the wall clock left when a step starts). ``log`` receives progress lines."""

    time_limit_seconds: float = 30.0
    workers: int | None = None
    seed: int = 0
    deterministic: bool = False
    work_limit_seconds: float | None = None
    log: Log | None = None
    deadline: float = math.inf

    @property
    def threads(self) -> int:
        return self.workers or os.cpu_count() or 1

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def work_left(self) -> float:
        """The seconds a deterministic step is sized by: ``work_limit_seconds``, else the wall clock left."""
        return self.work_limit_seconds if self.work_limit_seconds is not None else self.seconds_left()


class Progress(cp_model.CpSolverSolutionCallback):
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


# Below this many workers a solve interleaves its subsolvers (``new_solver``).
INTERLEAVED_BELOW_WORKERS = 8


def new_solver(time_limit: float, budget: SearchBudget, work_seconds: float | None = None) -> cp_model.CpSolver:
    """A solver stopping at ``time_limit`` seconds of wall clock; with ``budget.deterministic``, after
    ``work_seconds`` (default: half the limit) of CP-SAT's deterministic time, which does not depend on the
    machine's load."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.05)
    solver.parameters.num_workers = max(1, budget.threads)
    solver.parameters.random_seed = budget.seed
    # Full linearisation: the price-row and residency links are MIP-like, and their LP bound proves optimality
    # where the default level stalls (mobilenet_v2 on 256 KiB of dedicated SRAM: 21% gap -> optimal in 25 s).
    solver.parameters.linearization_level = 2
    # No probing in presolve: on these models it fixes little and costs seconds (vww_96 on u65-256: 2.6 of the
    # 6.6 s presolve, more than a deterministic budget of 7.5 leaves for the search, which then found nothing).
    solver.parameters.cp_model_probing_level = 0
    # Interleaved: every worker takes turns at the whole portfolio of subsolvers. With a few workers CP-SAT's
    # default gives each one subsolver, and the LP-based ones that prove these models optimal may not run: with 2
    # workers on netgen and corpus networks (dedicated SRAM, Size) it proved nothing in 19 s where interleaved it
    # proves optimality in 4-10 s (docs/results/bounds.md). Deterministic solves need it anyway.
    if budget.deterministic or budget.threads < INTERLEAVED_BELOW_WORKERS:
        solver.parameters.interleave_search = True
    if budget.deterministic:
        # A deterministic-time budget stops the search at the same point whatever the machine load (the wall
        # clock limit above stays as a safety net).
        solver.parameters.max_deterministic_time = max(work_seconds or time_limit / 2, 0.05)
    return solver


def stopped_by_clock(solver: cp_model.CpSolver, status: cp_model.CpSolverStatus, budget: SearchBudget) -> bool:
    """Whether a deterministic solve ended at the wall clock, its safety net, before its work budget: its answer
    then depends on the machine's speed and load."""
    return (budget.deterministic and status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
            and solver.deterministic_time < 0.99 * solver.parameters.max_deterministic_time)
