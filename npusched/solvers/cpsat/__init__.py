"""CP-SAT scheduling: the model (``model``), the strategies that solve it (``search``) and the window search for
networks too large for one model (``windows``)."""

from npusched.solvers.cpsat.model import NetworkFacts
from npusched.solvers.cpsat.search import (
    NO_TIME_TO_SEARCH,
    CpSatResult,
    objective_rank,
    smallest_fast_storage,
    solve_cpsat,
    with_any_schedule_bound,
)
from npusched.solvers.cpsat.solver import SearchBudget

__all__ = ["NO_TIME_TO_SEARCH", "CpSatResult", "NetworkFacts", "SearchBudget", "objective_rank",
           "smallest_fast_storage", "solve_cpsat", "with_any_schedule_bound"]
