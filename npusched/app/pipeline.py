"""The one-way flow of a run: model file -> pass graph -> schedule -> evaluation -> report.

The CLI and the scripts both call `run`, so every number they print comes from the same evaluator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from npusched.errors import NpuschedError, OutputError, ScheduleError, StagingLimitError
from npusched.frontend.tflite_reader import parse_tflite, read_model_bytes
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import Network, lower_model
from npusched.run import (
    UNLIMITED,
    NormalisationReport,
    RunOptions,
    RunResult,
    SolverReport,
    architecture,
    lowers_default_core_graph,
    rewrites_vela_graph,
    scheduled_model,
)
from npusched.schedule.evaluator import Evaluation, evaluate, staging_limit, verify
from npusched.schedule.schedule import Schedule
from npusched.solvers.cpsat import NO_TIME_TO_SEARCH, objective_rank, solve_cpsat
from npusched.solvers.dp import dp_schedule
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.arch import ArchitectureFeatures, Estimator
from npusched.vela.backend import estimated_compile_seconds
from npusched.vela.default_core import default_core_hint, solve_with_default_core


def load_network(options: RunOptions) -> tuple[ArchitectureFeatures, Network, dict[str, float]]:
    """Read the model and the hardware description, and lower the (normalised) model into NPU passes."""
    arch, network, timings, _ = load_normalised_network(options)
    return arch, network, timings


def scheduled_model_bytes(options: RunOptions) -> bytes:
    """The model a run with ``options`` schedules: the normalised one, or the file as it is (--no-normalise, or
    nothing to fold)."""
    return scheduled_model(read_model_bytes(options.model_path), options, architecture(options))[0]


def write_model(options: RunOptions, path: Path) -> None:
    """--write-model: the scheduled model as a .tflite file."""
    try:
        path.write_bytes(scheduled_model_bytes(options))
    except OSError as exc:
        raise OutputError(f"--write-model {path}: cannot write ({exc.strerror or exc})") from None


def load_normalised_network(
        options: RunOptions) -> tuple[ArchitectureFeatures, Network, dict[str, float], NormalisationReport | None]:
    """Read -> validate -> normalise -> lower; with what normalisation changed (None: nothing, or not asked).

    Where something was folded the original is lowered too, only to count the NPU subgraphs and CPU operators
    normalisation saved.
    """
    timings: dict[str, float] = {}
    start = time.monotonic()
    source = str(options.model_path)
    data = read_model_bytes(options.model_path)
    model = parse_tflite(data, source)
    validate_model(model)
    timings["read"] = time.monotonic() - start
    arch = architecture(options)
    report = None
    if options.normalise:
        start = time.monotonic()
        normalised, record = scheduled_model(data, options, arch)
        if record.changed:
            try:  # only to count what normalisation saved: a file that lowers only normalised is no error
                before = lower_model(model, arch)
                counts = len(before.subgraphs), len(before.cpu_ops)
            except NpuschedError:
                counts = -1, -1
            model = parse_tflite(normalised, source)
            validate_model(model)
            report = NormalisationReport(record, counts[0], 0, counts[1], 0, normalised)
        timings["normalise"] = time.monotonic() - start
    start = time.monotonic()
    network = lower_model(model, arch, in_place=rewrites_vela_graph(options),
                          default_core=lowers_default_core_graph(options))
    timings["lower"] = time.monotonic() - start
    if report is not None:
        report = replace(report, subgraphs_after=len(network.subgraphs), cpu_ops_after=len(network.cpu_ops))
    return arch, network, timings, report


def run(options: RunOptions, log: Callable[[str], None] | None = None, started: float | None = None,
        scheduled: Callable[[Network, ArchitectureFeatures, Schedule], None] | None = None) -> RunResult:
    """Load and lower the model, then schedule it with ``options.solver`` (None: lower only).

    ``log`` receives progress lines of long solves. The time limit counts from ``started`` (a ``time.monotonic``
    reading; default: now), so a command line tool can count its own start-up too. ``scheduled`` is given the
    schedule as soon as the solver returns it, before the final evaluation and the other estimators' totals (a
    compile started ahead goes on with it meanwhile).
    """
    started = time.monotonic() if started is None else started
    arch, network, timings, normalisation = load_normalised_network(options)
    if options.solver is None:
        return RunResult(options=options, arch=arch, network=network, status="lowered", timings_seconds=timings,
                         normalisation=normalisation)
    start = time.monotonic()
    # The file Vela's default core is run on (--solver vela-default, its hint): the normalised one, or the options'.
    model_bytes = normalisation.model_bytes if normalisation is not None else None
    schedule, report, known = _solve(network, arch, options, started, log, timings, model_bytes)
    timings["solve"] = time.monotonic() - start
    if scheduled is not None:
        scheduled(network, arch, schedule)
    start = time.monotonic()
    evaluation = known if known is not None else evaluate(network, arch, schedule)
    problems = verify(network, arch, schedule, evaluation)
    timings["evaluate"] = time.monotonic() - start
    status = report.status if report is not None else "feasible"
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
    if problems:
        raise ScheduleError(f"the {options.solver} schedule fails verification: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return RunResult(options=options, arch=arch, network=network, status=status, schedule=schedule,
                     evaluation=evaluation, timings_seconds=timings, solver_report=report, warnings=warnings,
                     normalisation=normalisation,
                     cycles_by_estimator=totals_by_estimator(network, arch, schedule, evaluation))


def totals_by_estimator(network: Network, arch: ArchitectureFeatures, schedule: Schedule,
                        evaluation: Evaluation) -> dict[str, float]:
    """The schedule's total under every estimator (``evaluation`` is the one under ``arch.estimator``); the
    legacy total is also keyed by its older name ``vela``, which documents and scripts written before read."""
    totals = {other.value: evaluation.total_cycles if other is arch.estimator
              else evaluate(network, replace(arch, estimator=other), schedule).total_cycles for other in Estimator}
    return {**totals, "vela": totals[Estimator.VELA_LEGACY.value]}


def _solve(network: Network, arch: ArchitectureFeatures, options: RunOptions, started: float,
           log: Callable[[str], None] | None, timings: dict[str, float],
           model_bytes: bytes | None) -> tuple[Schedule, SolverReport | None, Evaluation | None]:
    """The solver's schedule, its report, and its evaluation where the solve made one already (the hint's, when
    CP-SAT returns the hint's decisions: on a large network a second evaluation is half a second)."""
    if options.solver == "heuristic":
        try:
            return heuristic_schedule(network, arch, options.optimise), None, None
        except StagingLimitError as exc:
            raise StagingLimitError(f"{exc} (Vela's legacy scheduler stops here too: 'Allocation exceeds staging "
                                    "limit')", needed_bytes=exc.needed_bytes) from None
    if options.solver == "dp":
        return dp_schedule(network, arch, options.optimise), None, None
    if options.solver == "vela-default":
        return solve_with_default_core(network, arch, options, model_bytes=model_bytes).schedule, None, None
    if options.solver != "cpsat":
        raise ScheduleError(f"unknown solver '{options.solver}' (known: cpsat, heuristic, dp, vela-default)")
    heuristic_error: ScheduleError | None = None
    start = time.monotonic()
    try:
        hint: Schedule | None = heuristic_schedule(network, arch, options.optimise)
    except ScheduleError as exc:
        hint, heuristic_error = None, exc  # CP-SAT may still find a schedule that fits
    timings["heuristic"] = time.monotonic() - start
    start = time.monotonic()
    hint_eval = evaluate(network, arch, hint) if hint is not None else None
    evaluation_seconds = time.monotonic() - start
    heuristic_eval = hint_eval
    if arch.estimator is Estimator.VELA_DEFAULT:
        # Under its own model the default core's schedule is a baseline to beat too: the search starts from the
        # better of the two cores' schedules by the objective (cycles, or peak then cycles), so it is never worse.
        # A deterministic run waits for it (its start must not depend on the machine's load): up to the limit.
        share = 1.0 if options.deterministic else 1 / 3
        own = default_core_hint(network, arch, options, model_bytes,
                                timeout_seconds=max(options.time_limit_seconds * share, 1.0))
        if own is not None and (hint_eval is None or objective_rank(own[1], arch) < objective_rank(hint_eval, arch)):
            hint, hint_eval = own
    # Keep back what the final evaluation, verification and report take after the search (the schedule is also
    # evaluated under every other estimator, for the report), and Vela's compile when one follows (the limit covers
    # the whole run).
    after_search_seconds = (1.5 + len(Estimator) - 1) * evaluation_seconds + 0.2
    compile_seconds = estimated_compile_seconds(network, started_ahead=options.compile_started_ahead) \
        if options.compile_follows else 0.0
    if compile_seconds and log is not None:
        log(f"keeping {compile_seconds:.1f} s of the time limit for Vela's backend compile")
    remaining = options.time_limit_seconds - (time.monotonic() - started) - after_search_seconds - compile_seconds
    try:
        # A deterministic search is sized by the limit less the compile's estimate (inputs only), not by what the
        # clock left, which depends on the machine's load.
        result = solve_cpsat(network, arch, time_limit_seconds=remaining, workers=options.workers,
                             seed=options.seed, deterministic=options.deterministic, hint=hint,
                             hint_evaluation=hint_eval, log=log,
                             work_limit_seconds=options.time_limit_seconds - compile_seconds)
    except ScheduleError as exc:
        # Without time left to find the smallest size that fits, the heuristic's figure still says what is needed.
        if heuristic_error is not None and exc.needed_bytes is None:
            raise heuristic_error from None
        raise
    reason = result.reason
    if reason == NO_TIME_TO_SEARCH and compile_seconds:
        reason += f"; {compile_seconds:.1f} s of the limit kept for Vela's compile (--output-dir)"
    report = SolverReport(
        status=result.status, bound_cycles=result.bound_cycles, gap=result.gap, solve_seconds=result.solve_seconds,
        reason=reason, model_stats=dict(result.model_stats),
        heuristic_cycles=heuristic_eval.total_cycles if heuristic_eval is not None else None,
        heuristic_peak_fast_storage_bytes=heuristic_eval.peak_fast_storage if heuristic_eval is not None else None,
        any_schedule_bound_cycles=result.any_schedule_bound_cycles, strategy=result.strategy,
        peak_bound_bytes=result.peak_bound_bytes, peak_proven_minimal=result.peak_proven_minimal,
    )
    same_as_hint = hint is not None and (result.schedule.ops, result.schedule.tensors) == (hint.ops, hint.tensors)
    return result.schedule, report, hint_eval if same_as_hint else None
