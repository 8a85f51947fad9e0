"""Ctrl-C during a search: the search stops where it is and the run goes on with the best schedule found so far
(evaluated, reported and, with ``--output-dir``, compiled); a second Ctrl-C ends the run at once.

While ``handling_ctrl_c`` is active (the command line holds it around a run), the first SIGINT asks every CP-SAT
solve under way to stop (``CpSolver.stop_search``: it returns its best solution) and every later one to stop at
once, and the searches' loops end (``requested``). A solve runs in a thread of its own then, so that the signal is
handled while it runs (Python runs signal handlers in the main thread only, and CP-SAT's own SIGINT handling
would stop the one solve but not the search around it). Without it, solves run as they always do.

Every solve goes through ``solve``, which also stops a solve limited by the wall clock alone at its limit itself:
CP-SAT keeps the longest time between two of its own checks of the clock in hand, and with interleaved workers
that is a batch of subsolver tasks, seconds long on these models, so its own check ended solves up to a third of
their time early (kws_tcn_49x40 on ethos-u65-256: at 11.4 s of 16.4, with its gap at 8%).
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ortools.sat.python import cp_model

# Where a solve's own limit is moved to, beyond twice its wall limit: only should its timer not stop it.
BACKSTOP_SECONDS = 10.0

_requested = threading.Event()
_handling = threading.Event()
_active: set[cp_model.CpSolver] = set()
_lock = threading.Lock()


def requested() -> bool:
    """Whether Ctrl-C asked the search to stop."""
    return _requested.is_set()


def request() -> None:
    """Stop every solve under way and every later one (what the first Ctrl-C does)."""
    _requested.set()
    with _lock:
        for solver in _active:
            solver.stop_search()


@contextlib.contextmanager
def handling_ctrl_c() -> Iterator[None]:
    """Within it, the first Ctrl-C stops the search (``request``), a second raises ``KeyboardInterrupt``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if requested():
            raise KeyboardInterrupt
        request()

    previous = signal.signal(signal.SIGINT, on_sigint)
    _requested.clear()
    _handling.set()
    try:
        yield
    finally:
        _handling.clear()
        signal.signal(signal.SIGINT, previous)


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel,
          callback: cp_model.CpSolverSolutionCallback | None = None) -> cp_model.CpSolverStatus:
    """``solver.solve(model, callback)``, stopped at its wall-clock limit here (module docstring) and by Ctrl-C
    while ``handling_ctrl_c`` is active (then it returns at once where Ctrl-C came before it started)."""
    clock = _stop_at_wall_limit(solver)
    try:
        return _solve(solver, model, callback)
    finally:
        if clock is not None:
            clock.cancel()


def _stop_at_wall_limit(solver: cp_model.CpSolver) -> threading.Timer | None:
    """A timer stopping a solve limited by the wall clock alone at its ``max_time_in_seconds``, CP-SAT's own limit
    moved out of the way (kept, further out, as a backstop); None for a solve with a deterministic limit (its
    wall limit is only a safety net, and stays CP-SAT's)."""
    parameters = solver.parameters
    limit = parameters.max_time_in_seconds
    if math.isfinite(parameters.max_deterministic_time) or not math.isfinite(limit):
        return None
    parameters.max_time_in_seconds = 2 * limit + BACKSTOP_SECONDS
    timer = threading.Timer(limit, solver.stop_search)
    timer.daemon = True
    timer.start()
    return timer


def _solve(solver: cp_model.CpSolver, model: cp_model.CpModel,
           callback: cp_model.CpSolverSolutionCallback | None) -> cp_model.CpSolverStatus:
    if not _handling.is_set() or threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback)
    solver.parameters.catch_sigint_signal = False  # the signal is ours: CP-SAT's handler would hide it
    if requested():
        solver.parameters.max_time_in_seconds = 0.001
    answer: list[cp_model.CpSolverStatus] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(solver.solve(model, callback))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="cp-sat solve", daemon=True)
    with _lock:
        _active.add(solver)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.1)  # the main thread wakes to run the SIGINT handler
    finally:
        if worker.is_alive():  # a second Ctrl-C: the run ends, and so does the solve
            solver.stop_search()
            worker.join()
        with _lock:
            _active.discard(solver)
    if failure:
        raise failure[0]
    return answer[0]
