"""CP-SAT solves stopped at their wall-clock limit by npusched, not by CP-SAT's own check of the clock, which keeps
the longest time between two of its checks in hand and, with interleaved workers, ended solves seconds early."""

from __future__ import annotations

import threading

from ortools.sat.python import cp_model

from npusched.solvers import interruption


def _golomb_ruler(marks: int, longest: int) -> cp_model.CpModel:
    """The shortest Golomb ruler of ``marks`` marks: slow by construction at 14 (its proof takes CP-SAT hours; a
    ruler within ``longest`` it finds at once)."""
    model = cp_model.CpModel()
    at = [model.new_int_var(0, longest, f"mark{i}") for i in range(marks)]
    model.add(at[0] == 0)
    for a, b in zip(at, at[1:], strict=False):
        model.add(a < b)
    model.add_all_different([at[j] - at[i] for i in range(marks) for j in range(i + 1, marks)])
    model.minimize(at[-1])
    return model


def _solver(wall_seconds: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = wall_seconds
    solver.parameters.num_workers = 2
    solver.parameters.interleave_search = True
    return solver


def test_a_solve_limited_by_the_wall_clock_alone_runs_to_its_limit(monkeypatch) -> None:
    """Stopped by a timer of its limit (which fires no sooner), CP-SAT's own limit moved beyond it."""
    fired: list[float] = []

    class Recorded(threading.Timer):
        def __init__(self, interval: float, function, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            def stop() -> None:
                fired.append(interval)
                function()
            super().__init__(interval, stop, *args, **kwargs)

    monkeypatch.setattr(interruption.threading, "Timer", Recorded)
    solver = _solver(1.0)
    status = interruption.solve(solver, _golomb_ruler(14, 400))
    assert status != cp_model.OPTIMAL  # stopped, not proven
    assert fired == [1.0]  # by the timer at its limit, not before it by CP-SAT's own check
    assert solver.parameters.max_time_in_seconds == 2 * 1.0 + interruption.BACKSTOP_SECONDS


def test_a_solve_with_a_deterministic_limit_keeps_cp_sats_own_wall_limit() -> None:
    """Its wall limit is a safety net, and its answer must not depend on a timer."""
    solver = _solver(10.0)
    solver.parameters.max_deterministic_time = 0.05
    interruption.solve(solver, _golomb_ruler(14, 400))
    assert solver.parameters.max_time_in_seconds == 10.0
