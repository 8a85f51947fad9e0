"""The one-way flow of a run: model file -> graph (its recipe) -> schedule -> evaluation -> report.

Every solver goes the same way (``run``): the run's recipe is made from its options (``recipe_for``), the solver's
runner (``SOLVERS``) builds the graphs it schedules (``build_graph``) and returns one schedule of one of them, and
that schedule is evaluated and verified here. The CLI, the Python API and the scripts all call ``run``, so every
number they print comes from the same evaluator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from npusched.app import cpsat_run
from npusched.errors import ConfigError, NpuschedError, OutputError, ScheduleError, StagingLimitError
from npusched.frontend.recipe import GraphRecipe
from npusched.frontend.tflite_reader import TfliteModel, read_model_bytes
from npusched.lowering.build import BuiltGraph, build_graph, normalised_bytes, read_model
from npusched.lowering.graph import Network
from npusched.run import (
    OBJECTIVES,
    UNLIMITED,
    FloorReport,
    MissingFloor,
    NormalisationReport,
    RunOptions,
    RunResult,
    SiteDecision,
    Solver,
    SolverReport,
    recipe_for,
)
from npusched.schedule.evaluator import Evaluation, evaluate, staging_limit, verify
from npusched.schedule.schedule import Schedule
from npusched.solvers.dp import dp_schedule
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.estimators import Estimator, PricedArchitecture, load_architecture, with_estimator
from npusched.vela.backend import WRITING_SECONDS, Compilation
from npusched.vela.default_core import solve_with_default_core

Log = Callable[[str], None]


def architecture(options: RunOptions) -> PricedArchitecture:
    """The hardware description the options name, pricing passes with the options' estimator."""
    return load_architecture(**options.architecture_arguments)


@dataclass(frozen=True)
class Loaded:
    """A run's inputs read: the model's bytes (checked to be a model), the hardware and the run's recipe."""

    data: bytes = field(repr=False)
    model: TfliteModel = field(repr=False)
    arch: PricedArchitecture
    recipe: GraphRecipe
    source: str
    read_seconds: float

    def build(self, recipe: GraphRecipe | None = None, *, verify_rewrites: bool = False) -> BuiltGraph:
        """The graph ``recipe`` (default: the run's) makes of the model."""
        return build_graph(self.data, self.source, self.arch, recipe or self.recipe, verify_rewrites=verify_rewrites,
                           parsed=self.model)

    @cached_property
    def unnormalised_counts(self) -> tuple[int, int]:
        """The NPU subgraphs and CPU operators of the model lowered as it is, for the normalisation report; (-1,
        -1) where it lowers only normalised."""
        try:
            before = self.build(GraphRecipe(normalise=False)).network
        except NpuschedError:
            return -1, -1
        return len(before.subgraphs), len(before.cpu_ops)


def load(options: RunOptions, recipe: GraphRecipe | None = None) -> Loaded:
    """Read and check the model (its errors first), then the hardware; the recipe is ``recipe_for`` the options
    unless given."""
    start = time.monotonic()
    data = read_model_bytes(options.model_path)
    model = read_model(data, str(options.model_path))
    read_seconds = time.monotonic() - start
    arch = architecture(options)
    return Loaded(data, model, arch, recipe or recipe_for(options, arch), str(options.model_path), read_seconds)


def load_graph(options: RunOptions, recipe: GraphRecipe | None = None) -> tuple[PricedArchitecture, BuiltGraph]:
    """The hardware and the graph of the options' recipe (or of ``recipe``)."""
    loaded = load(options, recipe)
    graph = loaded.build(verify_rewrites=options.verify_rewrites)
    return loaded.arch, replace(graph, timings_seconds={"read": loaded.read_seconds, **graph.timings_seconds})


def load_network(options: RunOptions) -> tuple[PricedArchitecture, Network, dict[str, float]]:
    """The hardware, the network the options' solver schedules (every priced site applied) and what each step
    took."""
    arch, graph = load_graph(options)
    return arch, graph.network, dict(graph.timings_seconds)


def scheduled_model_bytes(options: RunOptions) -> bytes:
    """The model a run with ``options`` schedules with every priced site applied (what `vela` is given to compile
    the same schedule): the options' file, normalised as the options' recipe says."""
    loaded = load(options)
    return normalised_bytes(loaded.data, loaded.source, loaded.recipe)[0]


def write_model(result: RunResult, path: Path) -> None:
    """--write-model: the model the run scheduled, as a .tflite file."""
    try:
        path.write_bytes(result.model_bytes or read_model_bytes(result.options.model_path))
    except OSError as exc:
        raise OutputError(f"--write-model {path}: cannot write ({exc.strerror or exc})") from None


@dataclass(frozen=True)
class Solved:
    """What a solver's runner returns: the graph it scheduled and its schedule, with what it says of them."""

    graph: BuiltGraph
    schedule: Schedule
    status: str = "feasible"
    report: SolverReport | None = None
    floors: tuple[FloorReport, ...] = ()
    missing_floors: tuple[MissingFloor, ...] = ()
    sites: tuple[SiteDecision, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunContext:
    """What a solver's runner is given: the options, the loaded inputs, where to log, when the run started (the
    time limit counts from it), the compile started ahead (if any) and the timings to add to."""

    options: RunOptions
    loaded: Loaded
    log: Log | None
    started: float
    compilation: Compilation | None
    timings: dict[str, float]


def _run_cpsat(context: RunContext) -> Solved:
    """``--solver cpsat``: both graphs searched, both Vela cores' schedules as floors (``cpsat_run``)."""
    options, loaded = context.options, context.loaded
    if options.objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective '{options.objective}' (known: {', '.join(OBJECTIVES)})")
    compilation = context.compilation

    def build(recipe: GraphRecipe) -> BuiltGraph:
        graph = loaded.build(recipe, verify_rewrites=options.verify_rewrites)
        # The report's lowering of the model as it is, made now: before the search, which the time plan then
        # shares out what is left, not after it (0.7 s of a 500-pass network's run past its plan).
        normalisation_report(loaded, graph)
        return graph

    outcome = cpsat_run.solve(build, loaded.recipe, options, loaded.arch, started=context.started, log=context.log,
                              timings=context.timings, begin=compilation.begin if compilation is not None else None,
                              fallback=compilation.start_fallback if compilation is not None else None,
                              answer=compilation.submit if compilation is not None else None)
    return Solved(outcome.graph, outcome.schedule, outcome.report.status, outcome.report, outcome.floors,
                  outcome.missing_floors, outcome.decisions, outcome.warnings)


def _heuristic(network: Network, arch: PricedArchitecture, options: RunOptions, _: bytes) -> Schedule:
    try:
        return heuristic_schedule(network, arch, options.optimise)
    except StagingLimitError as exc:
        raise StagingLimitError(f"{exc} (Vela's legacy scheduler stops here too: 'Allocation exceeds staging "
                                "limit')", needed_bytes=exc.needed_bytes) from None


def _dp(network: Network, arch: PricedArchitecture, options: RunOptions, _: bytes) -> Schedule:
    return dp_schedule(network, arch, options.optimise)


def _default_core(network: Network, arch: PricedArchitecture, options: RunOptions, model_bytes: bytes) -> Schedule:
    return solve_with_default_core(network, arch, options, model_bytes=model_bytes).schedule


def _one_graph(solve: Callable[[Network, PricedArchitecture, RunOptions, bytes], Schedule]
               ) -> Callable[[RunContext], Solved]:
    """The runner of a solver that schedules the run's graph alone."""

    def runner(context: RunContext) -> Solved:
        graph = context.loaded.build(verify_rewrites=context.options.verify_rewrites)
        context.timings.update(graph.timings_seconds)
        if context.compilation is not None:
            context.compilation.begin(graph.model_bytes)
        start = time.monotonic()
        schedule = solve(graph.network, context.loaded.arch, context.options, graph.model_bytes)
        context.timings["solve"] = time.monotonic() - start
        return Solved(graph, schedule)

    return runner


# What each solver is run by (``Solver.graph`` says which graph the run's recipe is of).
SOLVERS: dict[Solver, Callable[[RunContext], Solved]] = {
    Solver.CPSAT: _run_cpsat, Solver.HEURISTIC: _one_graph(_heuristic), Solver.DP: _one_graph(_dp),
    Solver.VELA_DEFAULT: _one_graph(_default_core)}
# How a baseline's schedule is named where it goes over the limit, and why that is still that core's schedule:
# legacy only warns there; the default core checks the limit only where it can spill feature maps to another memory
# (and its memory count can differ from npusched's, which is the judge).
_BASELINE_OVER_LIMIT = {
    Solver.HEURISTIC: ("the heuristic's (Vela legacy's)", "as Vela's legacy core goes over its arena"),
    Solver.VELA_DEFAULT: ("Vela's default core's", "by npusched's count of its buffers")}


def run(options: RunOptions, log: Log | None = None, started: float | None = None,
        compilation: Compilation | None = None) -> RunResult:
    """Load the model, build its graph(s) and schedule with ``options.solver`` (None: lower only).

    ``log`` receives progress lines of long solves. The time limit counts from ``started`` (a ``time.monotonic``
    reading; default: now), so a command line tool can count its own start-up too. A ``compilation`` started
    ahead (--output-dir) is told each graph the run may schedule as soon as it is known, and given the schedule
    as soon as the solver returns it, before the final evaluation and the other estimators' totals (it compiles
    meanwhile).
    """
    started = time.monotonic() if started is None else started
    loaded = load(options)
    timings = {"read": loaded.read_seconds}
    if options.solver is None:
        graph = loaded.build(verify_rewrites=options.verify_rewrites)
        timings.update(graph.timings_seconds)
        return RunResult(options=options, arch=loaded.arch, network=graph.network, status="lowered",
                         timings_seconds=timings, normalisation=normalisation_report(loaded, graph),
                         model_bytes=graph.model_bytes, recipe=graph.recipe, rewrites=graph.rewrites)
    try:
        solver = Solver(options.solver)
    except ValueError:
        raise ScheduleError(f"unknown solver '{options.solver}' (known: {', '.join(s.value for s in Solver)})"
                            ) from None
    if compilation is not None:  # its files written by the limit
        compilation.deadline = started + options.time_limit_seconds - WRITING_SECONDS
    solved = SOLVERS[solver](RunContext(options, loaded, log, started, compilation, timings))
    return _evaluated(solved, solver, loaded, options, compilation, timings)


def _evaluated(solved: Solved, solver: Solver, loaded: Loaded, options: RunOptions,
               compilation: Compilation | None, timings: dict[str, float]) -> RunResult:
    """The run's result: the schedule handed to the compile, then evaluated and verified (a baseline's schedule
    over the limit is reported as such, not refused)."""
    arch, graph, schedule = loaded.arch, solved.graph, solved.schedule
    network = graph.network
    if compilation is not None:
        compilation.submit(network, arch, schedule, graph.model_bytes)
    start = time.monotonic()
    evaluation = evaluate(network, arch, schedule)
    problems = verify(network, arch, schedule, evaluation)
    timings["evaluate"] = time.monotonic() - start
    status, warnings = solved.status, solved.warnings
    if solver.is_baseline:
        status, problems, warnings = _as_baseline(solver, network, arch, schedule, evaluation, problems)
    if problems:
        raise ScheduleError(f"the {options.solver} schedule fails verification: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return RunResult(options=options, arch=arch, network=network, status=status,
                     schedule=schedule, evaluation=evaluation, timings_seconds=timings, warnings=warnings,
                     solver_report=solved.report, normalisation=normalisation_report(loaded, graph),
                     model_bytes=graph.model_bytes, floors=solved.floors, missing_floors=solved.missing_floors,
                     sites=solved.sites, recipe=graph.recipe, rewrites=graph.rewrites,
                     cycles_by_estimator=totals_by_estimator(network, arch, schedule, evaluation))


def _as_baseline(solver: Solver, network: Network, arch: PricedArchitecture, schedule: Schedule,
                 evaluation: Evaluation, problems: list[str]) -> tuple[str, list[str], tuple[str, ...]]:
    """A Vela core's own schedule is that core's whatever npusched's rules say: over the limit it is reported as
    over it; the default core's decisions npusched cannot express, or its rules reject, are said, not fatal."""
    status = "feasible"
    warnings: tuple[str, ...] = ()
    if problems and not verify(network, arch, schedule, evaluation, UNLIMITED):
        # Valid but for the limit (at addresses, where fragmentation makes them need more than the peak).
        whose, why = _BASELINE_OVER_LIMIT[solver]
        limit = staging_limit(arch)
        peak = max(evaluation.peak_fast_storage, evaluation.allocation.size_bytes)
        status, problems = "over_limit", []
        warnings = (f"{whose} schedule uses {peak} bytes of fast storage, {peak - limit} bytes "
                    f"({(peak - limit) / max(limit, 1):.0%}) over the limit of {limit} bytes, {why}; --solver cpsat "
                    "keeps to the limit",)
    if solver is Solver.VELA_DEFAULT:
        if problems:
            status = "rejected"
        warnings = schedule.notes + warnings + tuple(f"npusched's rules reject the default core's schedule: "
                                                     f"{problem}" for problem in problems[:3])
        problems = []
    return status, problems, warnings


def normalisation_report(loaded: Loaded, graph: BuiltGraph) -> NormalisationReport | None:
    """What normalising changed (None: nothing, or not asked); the original is lowered only to count the NPU
    subgraphs and CPU operators it saved (a file that lowers only normalised is no error)."""
    record = graph.normalisation
    if record is None or not record.changed:
        return None
    counts = loaded.unnormalised_counts
    network = graph.network
    return NormalisationReport(record, counts[0], len(network.subgraphs), counts[1], len(network.cpu_ops),
                               graph.model_bytes)


def totals_by_estimator(network: Network, arch: PricedArchitecture, schedule: Schedule,
                        evaluation: Evaluation) -> dict[str, float]:
    """The schedule's total under every estimator (``evaluation`` is the one under ``arch.estimator``); the
    legacy total is also keyed by its older name ``vela``, which documents and scripts written before read."""
    totals = {other.value: evaluation.total_cycles if other is arch.estimator
              else evaluate(network, with_estimator(arch, other), schedule).total_cycles
              for other in Estimator.single()}
    return {**totals, "vela": totals[Estimator.VELA_LEGACY.value]}
