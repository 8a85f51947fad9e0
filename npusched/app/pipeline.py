"""The one-way flow of a run: model file -> pass graph -> schedule -> evaluation -> report.

The CLI and the scripts both call `run`, so every number they print comes from the same evaluator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from npusched.app import cpsat_run
from npusched.app.graph_choice import IN_PLACE_WRITES, SOFTMAX_DEEP_VIEWS
from npusched.errors import ConfigError, NpuschedError, OutputError, ScheduleError, StagingLimitError
from npusched.frontend.normalise import normalise
from npusched.frontend.tflite_reader import TfliteModel, parse_tflite, read_model_bytes
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import Network, lower_model
from npusched.run import OBJECTIVES, UNLIMITED, NormalisationReport, RunOptions, RunResult
from npusched.schedule.evaluator import Evaluation, evaluate, staging_limit, verify
from npusched.schedule.schedule import Schedule
from npusched.solvers.dp import dp_schedule
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.arch import ArchitectureFeatures, load_architecture
from npusched.target.estimators import Estimator, with_estimator
from npusched.vela import backend
from npusched.vela.backend import Compilation
from npusched.vela.default_core import solve_with_default_core


def architecture(options: RunOptions) -> ArchitectureFeatures:
    """The hardware description the options name, pricing passes with the options' estimator."""
    return load_architecture(**options.hardware)


def load_network(options: RunOptions, skipped: frozenset[str] = frozenset()
                 ) -> tuple[ArchitectureFeatures, Network, dict[str, float]]:
    """Read the model and the hardware description, and lower the (normalised) model into NPU passes: npusched's
    own graph for the solvers that schedule it (every priced rewrite applied, but the sites ``skipped`` names:
    what ``--solver cpsat`` prices against Vela's graph), Vela's for the two cores' own schedules."""
    arch, network, timings, _ = load_normalised_network(options, skipped)
    return arch, network, timings


def scheduled_model_bytes(options: RunOptions) -> bytes:
    """``npusched.vela.backend.scheduled_model_bytes`` for the options' own hardware."""
    return backend.scheduled_model_bytes(options, architecture(options))


def write_model(result: RunResult, path: Path) -> None:
    """--write-model: the model the run scheduled, as a .tflite file."""
    try:
        path.write_bytes(result.model_bytes or read_model_bytes(result.options.model_path))
    except OSError as exc:
        raise OutputError(f"--write-model {path}: cannot write ({exc.strerror or exc})") from None


def load_normalised_network(options: RunOptions, skipped: frozenset[str] = frozenset()
                            ) -> tuple[ArchitectureFeatures, Network, dict[str, float], NormalisationReport | None]:
    """Read -> validate -> normalise (but the priced sites ``skipped`` names) -> lower; with what normalisation
    changed (None: nothing, or not asked)."""
    timings: dict[str, float] = {}
    data, model, arch = _read(options, timings)
    report = None
    if options.normalise:
        start = time.monotonic()
        normalised, record = normalise(data, str(options.model_path), stage=options.stages_maps(arch),
                                       skip=skipped, softmax_split_bytes=options.softmax_split_bytes(arch))
        if record.changed:
            report = _normalisation_report(model, arch, normalised, record)
            model = parse_tflite(normalised, str(options.model_path))
            validate_model(model)
        timings["normalise"] = time.monotonic() - start
    start = time.monotonic()
    own = options.schedules_own_graph
    network = lower_model(model, arch, in_place=own and IN_PLACE_WRITES.key not in skipped,
                          deep_views=own and SOFTMAX_DEEP_VIEWS.key not in skipped,
                          default_core=options.lowers_default_core_graph)
    timings["lower"] = time.monotonic() - start
    if report is not None:
        report = replace(report, subgraphs_after=len(network.subgraphs), cpu_ops_after=len(network.cpu_ops))
    return arch, network, timings, report


def _read(options: RunOptions, timings: dict[str, float]) -> tuple[bytes, TfliteModel, ArchitectureFeatures]:
    start = time.monotonic()
    data = read_model_bytes(options.model_path)
    model = parse_tflite(data, str(options.model_path))
    validate_model(model)
    timings["read"] = time.monotonic() - start
    return data, model, architecture(options)


def _normalisation_report(original: TfliteModel, arch: ArchitectureFeatures, normalised: bytes, record: Any,
                          network: Network | None = None) -> NormalisationReport:
    """What normalising changed; the original is lowered only to count the NPU subgraphs and CPU operators it
    saved (a file that lowers only normalised is no error)."""
    try:
        before = lower_model(original, arch)
        counts = len(before.subgraphs), len(before.cpu_ops)
    except NpuschedError:
        counts = -1, -1
    after = (len(network.subgraphs), len(network.cpu_ops)) if network is not None else (0, 0)
    return NormalisationReport(record, counts[0], after[0], counts[1], after[1], normalised)


def run(options: RunOptions, log: Callable[[str], None] | None = None, started: float | None = None,
        compilation: Compilation | None = None) -> RunResult:
    """Load and lower the model, then schedule it with ``options.solver`` (None: lower only).

    ``log`` receives progress lines of long solves. The time limit counts from ``started`` (a ``time.monotonic``
    reading; default: now), so a command line tool can count its own start-up too. A ``compilation`` started
    ahead (--output-dir) is told each graph the run may schedule as soon as it is known, and given the schedule
    as soon as the solver returns it, before the final evaluation and the other estimators' totals (it compiles
    meanwhile).
    """
    started = time.monotonic() if started is None else started
    if options.solver == "cpsat":
        return _run_cpsat(options, log, started, compilation)
    arch, network, timings, normalisation = load_normalised_network(options)
    model_bytes = normalisation.model_bytes if normalisation is not None else read_model_bytes(options.model_path)
    if options.solver is None:
        return RunResult(options=options, arch=arch, network=network, status="lowered", timings_seconds=timings,
                         normalisation=normalisation, model_bytes=model_bytes)
    if compilation is not None:
        compilation.begin(model_bytes)
    start = time.monotonic()
    schedule = _solve(network, arch, options, model_bytes)
    timings["solve"] = time.monotonic() - start
    if compilation is not None:
        compilation.submit(network, arch, schedule, model_bytes)
    start = time.monotonic()
    evaluation = evaluate(network, arch, schedule)
    problems = verify(network, arch, schedule, evaluation)
    timings["evaluate"] = time.monotonic() - start
    status = "feasible"
    warnings: tuple[str, ...] = ()
    # Why a baseline's schedule may go over the arena and still be that core's: legacy only warns there; the default
    # core checks the limit only where it can spill feature maps to another memory (and its memory count can
    # differ from npusched's, which is the judge).
    baseline = {"heuristic": ("the heuristic's (Vela legacy's)", "as Vela's legacy core goes over its arena"),
                "vela-default": ("Vela's default core's", "by npusched's count of its buffers")}
    if problems and options.solver in baseline and not verify(network, arch, schedule, evaluation, UNLIMITED):
        # Valid but for the limit: reported as over it.
        whose, why = baseline[options.solver]
        limit = staging_limit(arch)
        # At addresses, when fragmentation makes them need more than the peak.
        peak = max(evaluation.peak_fast_storage, evaluation.allocation.size_bytes)
        status, problems = "over_limit", []
        warnings = (f"{whose} schedule uses {peak} bytes of fast storage, {peak - limit} bytes "
                    f"({(peak - limit) / max(limit, 1):.0%}) over the limit of {limit} bytes, {why}; --solver cpsat "
                    "keeps to the limit",)
    if options.solver == "vela-default":
        # Vela's default core's own schedule is a baseline: what npusched cannot express, or its rules reject, is
        # said, not fatal, and a schedule the rules reject has that status (priced all the same).
        if problems:
            status = "rejected"
        warnings = schedule.notes + warnings + tuple(f"npusched's rules reject the default core's schedule: "
                                                     f"{problem}" for problem in problems[:3])
        problems = []
    _raise_for(options, problems)
    return RunResult(options=options, arch=arch, network=network, status=status, schedule=schedule,
                     evaluation=evaluation, timings_seconds=timings, warnings=warnings, normalisation=normalisation,
                     cycles_by_estimator=totals_by_estimator(network, arch, schedule, evaluation),
                     model_bytes=model_bytes)


def _run_cpsat(options: RunOptions, log: Callable[[str], None] | None, started: float,
               compilation: Compilation | None) -> RunResult:
    """``--solver cpsat``: both graphs searched, both Vela cores' schedules as floors (``cpsat_run``)."""
    if options.objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective '{options.objective}' (known: {', '.join(OBJECTIVES)})")
    timings: dict[str, float] = {}
    data, model, arch = _read(options, timings)
    outcome = cpsat_run.solve(data, options, arch, started=started, log=log, timings=timings,
                              begin=compilation.begin if compilation is not None else None)
    variant, schedule = outcome.variant, outcome.schedule
    if compilation is not None:
        compilation.submit(variant.network, arch, schedule, variant.model_bytes)
    start = time.monotonic()
    evaluation = evaluate(variant.network, arch, schedule)
    _raise_for(options, verify(variant.network, arch, schedule, evaluation))
    timings["evaluate"] = time.monotonic() - start
    record = variant.normalisation
    normalisation = None
    if record is not None and record.changed:
        normalisation = _normalisation_report(model, arch, variant.model_bytes, record, variant.network)
    return RunResult(options=options, arch=arch, network=variant.network, status=outcome.report.status,
                     schedule=schedule, evaluation=evaluation, timings_seconds=timings, solver_report=outcome.report,
                     normalisation=normalisation, model_bytes=variant.model_bytes, floors=outcome.floors,
                     sites=outcome.decisions,
                     cycles_by_estimator=totals_by_estimator(variant.network, arch, schedule, evaluation))


def _raise_for(options: RunOptions, problems: list[str]) -> None:
    if problems:
        raise ScheduleError(f"the {options.solver} schedule fails verification: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def totals_by_estimator(network: Network, arch: ArchitectureFeatures, schedule: Schedule,
                        evaluation: Evaluation) -> dict[str, float]:
    """The schedule's total under every estimator (``evaluation`` is the one under ``arch.estimator``); the
    legacy total is also keyed by its older name ``vela``, which documents and scripts written before read."""
    totals = {other.value: evaluation.total_cycles if other is arch.estimator
              else evaluate(network, with_estimator(arch, other), schedule).total_cycles
              for other in Estimator.single()}
    return {**totals, "vela": totals[Estimator.VELA_LEGACY.value]}


def _solve(network: Network, arch: ArchitectureFeatures, options: RunOptions, model_bytes: bytes) -> Schedule:
    """The schedule of a solver other than CP-SAT."""
    if options.solver == "heuristic":
        try:
            return heuristic_schedule(network, arch, options.optimise)
        except StagingLimitError as exc:
            raise StagingLimitError(f"{exc} (Vela's legacy scheduler stops here too: 'Allocation exceeds staging "
                                    "limit')", needed_bytes=exc.needed_bytes) from None
    if options.solver == "dp":
        return dp_schedule(network, arch, options.optimise)
    if options.solver == "vela-default":
        return solve_with_default_core(network, arch, options, model_bytes=model_bytes).schedule
    raise ScheduleError(f"unknown solver '{options.solver}' (known: cpsat, heuristic, dp, vela-default)")
