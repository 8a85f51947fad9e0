"""Repairing a CP-SAT answer whose buffers do not fit at addresses.

The model keeps the live bytes at every step within the limit; the buffers must also get addresses within it,
and fragmentation can make the allocation larger than the peak (``npusched.schedule.allocation``). Modelling
every offset is too large for the whole network, so the check is lazy: each answer is allocated, and one that
overflows makes the model tighten its per-step limit by the excess and solve again, warm-started from that
answer, for a few rounds within the deadline. An answer that fits is kept; when none does, the caller falls back
(to the heuristic's schedule when that fits). The first solve's bound stays the bound: the tightened models
search a smaller space.

The per-step limits count each NPU subgraph's own buffers; maps the CPU side keeps live around a subgraph (a
residual held across an attention block) are in the allocation but in no limit, so an excess they cause is
never repaired. Where every feature map lives in fast storage, the floor of ``npusched.solvers.peak_floor``
(whole inference) says at once whether any schedule can fit: when it cannot, no round is tried and the reason
names the floor, the smallest size any schedule needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from npusched.schedule.allocation import allocate_ranges, fast_storage_ranges
from npusched.schedule.evaluator import Evaluation, evaluate
from npusched.schedule.schedule import Schedule
from npusched.solvers import interruption
from npusched.solvers.cpsat.model import CpSatModel, Log, extract_schedule
from npusched.solvers.cpsat.solver import SearchBudget, new_solver
from npusched.solvers.peak_floor import network_floor

# Re-solves at most; each tightens the limit by the last answer's excess.
MAX_REPAIR_ROUNDS = 4
# A re-solve needs at least this much of the deadline left to be worth starting.
MIN_REPAIR_SECONDS = 0.3
# Buffers named where a network that cannot fit peaks, largest first.
LISTED = 4


@dataclass(frozen=True)
class AllocationRepair:
    """What fitting CP-SAT's answer at addresses took: re-solves (``rounds``), the excess of the first answer's
    allocation over the limit, the cycles the kept answer costs above the first one, and whether it fits."""

    rounds: int = 0
    first_excess_bytes: int = 0
    cost_cycles: float = 0.0
    fits: bool = True
    reason: str = ""
    # The least fast storage any schedule needs, when that is over the limit (then ``reason`` says so).
    needed_bytes: int | None = None

    def as_stats(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "first_excess_bytes": self.first_excess_bytes,
                "cost_cycles": round(self.cost_cycles, 1), "fits": self.fits}


def repair_allocation(built: CpSatModel, solver: cp_model.CpSolver, status: cp_model.CpSolverStatus,
                      budget: SearchBudget, work_seconds: float, log: Log | None = None
                      ) -> tuple[tuple[Schedule, int] | None, cp_model.CpSolverStatus, AllocationRepair]:
    """CP-SAT's answer in ``solver`` (of ``built``) as (schedule, scaled objective) when it fits at addresses,
    else the answer of a re-solve with the limit tightened by the excess that does; None when no round found one
    (``status`` is the last solve's; FEASIBLE after any repair, since its bound no longer holds)."""
    net, limit = built.net, built.limit
    found = extract_schedule(built, solver.boolean_value)
    evaluation = evaluate(net.network, net.arch, found[0])
    first_cycles = evaluation.total_cycles
    size = allocate_ranges(fast_storage_ranges(evaluation), target_bytes=limit).size_bytes
    if size <= limit:
        return found, status, AllocationRepair()
    first_excess = size - limit
    floor = _floor_over_limit(built, evaluation, size)
    if floor is not None:
        return None, status, AllocationRepair(0, first_excess, 0.0, False, floor[1], floor[0])
    cap, rounds = limit, 0
    while size > limit:
        if rounds >= MAX_REPAIR_ROUNDS or budget.seconds_left() < MIN_REPAIR_SECONDS or cap <= size - limit:
            why = (f"CP-SAT's answers need {size} bytes of addresses ({size - limit} over the limit) after "
                   f"{rounds} repairs")
            return None, status, AllocationRepair(rounds, first_excess, 0.0, False, why)
        cap -= size - limit
        rounds += 1
        if log is not None:
            log(f"cp-sat: the answer's buffers need {size} bytes of addresses, {size - limit} over the limit; "
                f"solving again with {cap} bytes per step (repair {rounds})")
        _tighten(built, solver, cap)
        solver = new_solver(budget.seconds_left(), budget, work_seconds)
        status = interruption.solve(solver, built.model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            why = f"no CP-SAT answer within {cap} bytes per step after {rounds} repairs"
            return None, status, AllocationRepair(rounds, first_excess, 0.0, False, why)
        found = extract_schedule(built, solver.boolean_value)
        evaluation = evaluate(net.network, net.arch, found[0])
        size = allocate_ranges(fast_storage_ranges(evaluation), target_bytes=limit).size_bytes
    cost = evaluation.total_cycles - first_cycles
    return found, cp_model.FEASIBLE, AllocationRepair(rounds, first_excess, cost, True)


def _floor_over_limit(built: CpSatModel, evaluation: Evaluation, size: int) -> tuple[int, str] | None:
    """(bytes, why) when no schedule of ``built``'s network fits its limit: the whole inference's floor is over
    it. None when the floor fits, or when feature maps may leave fast storage (then there is no such floor)."""
    net, limit = built.net, built.limit
    try:
        floor = network_floor(net.network, net.arch, held_operands=True, joins=net.joins).whole_bytes
    except ValueError:
        return None
    if floor <= limit:
        return None
    # Where the answer (which needs ``size``) holds most, and what.
    ranges = fast_storage_ranges(evaluation)
    steps = range(min(r.start for r in ranges), max(r.end for r in ranges) + 1)
    live_at = {step: [r for r in ranges if r.start <= step <= r.end] for step in steps}
    step = max(steps, key=lambda s: sum(r.size for r in live_at[s]))
    live = sorted(live_at[step], key=lambda r: -r.size)
    largest = ", ".join("/".join(r.tensors) + f" {r.size} B" for r in live[:LISTED])
    memory = evaluation.network_memory
    names = {op.index: op.name for sg in net.network.subgraphs for op in sg.ops}
    running = [names[index] for index, at in (memory.op_steps.items() if memory else ()) if at == step]
    where = f" (op '{running[0]}')" if running else ""
    needs = f"needs {floor} bytes" if size == floor else f"needs at least {floor} bytes"
    return floor, (f"no schedule fits {limit} bytes of fast storage; the smallest that fits {needs}: no schedule "
                   f"Vela's rules allow holds fewer at once (CP-SAT's answer peaks at step {step}{where} with "
                   f"{sum(r.size for r in live)} bytes, feature maps the CPU operators keep live included; "
                   f"largest live there: {largest})")


def _tighten(built: CpSatModel, solver: cp_model.CpSolver, cap_bytes: int) -> None:
    """Hold every memory constraint of ``built`` to ``cap_bytes``, hinted with ``solver``'s answer."""
    model = built.model
    for region in built.regions:
        for used, literal in region.memory:
            if isinstance(used, int):
                continue
            constraint = model.add(used <= cap_bytes)
            if literal is not None:
                constraint.only_enforce_if(literal)
    model.clear_hints()
    for index in range(len(model.proto.variables)):
        variable = model.get_int_var_from_proto_index(index)
        model.add_hint(variable, solver.value(variable))
