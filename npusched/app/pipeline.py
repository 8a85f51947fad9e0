"""The one-way flow of a run: model file -> pass graph -> schedule -> evaluation -> report.

The CLI and the scripts both call `run`, so every number they print comes from the same evaluator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from npusched.errors import ConfigError, ScheduleError, StagingLimitError
from npusched.frontend.tflite_reader import read_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import Network, lower_model
from npusched.schedule.evaluator import Evaluation, evaluate, staging_limit, verify
from npusched.schedule.schedule import Schedule
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.arch import ArchitectureFeatures, Estimator, load_architecture

# A fast-storage limit no schedule reaches: verifying against it checks everything but the limit.
UNLIMITED = 1 << 62


@dataclass(frozen=True)
class RunOptions:
    """Everything a run depends on; the same options give the same schedule."""

    model_path: Path
    accelerator_config: str = "ethos-u55-256"
    config_files: tuple[str, ...] = ()
    system_config: str | None = None
    memory_mode: str | None = None
    arena_cache_size: int | None = None
    optimise: str = "Performance"
    solver: str | None = "cpsat"
    time_limit_seconds: float = 30.0
    workers: int | None = None
    seed: int = 0
    deterministic: bool = False
    estimator: str = "vela"


@dataclass(frozen=True)
class RunResult:
    """A finished run: its inputs, the lowered network, and (when a solver ran) the verified schedule and its
    evaluation — the only source of the figures a report prints."""

    options: RunOptions
    arch: ArchitectureFeatures
    network: Network
    status: str
    schedule: Schedule | None = None
    evaluation: Evaluation | None = None
    timings_seconds: dict[str, float] = field(default_factory=dict)
    solver_report: SolverReport | None = None
    warnings: tuple[str, ...] = ()
    # The schedule's total under each estimator (the chosen one is ``evaluation.total_cycles``).
    cycles_by_estimator: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SolverReport:
    """What CP-SAT says about its answer, next to the heuristic it started from (both priced by the evaluator)."""

    status: str
    bound_cycles: float
    gap: float
    solve_seconds: float
    reason: str
    model_stats: dict[str, Any]
    heuristic_cycles: float | None
    heuristic_peak_fast_storage_bytes: int | None
    # ``bound_cycles`` holds over the candidate space CP-SAT searched; this one for any schedule at all.
    any_schedule_bound_cycles: float = float("nan")
    # "Performance" or "Size" (least peak fast storage, then fewest cycles); for Size a proven lower bound on the
    # peak over the candidate space (None where none was proven) and whether the schedule's peak meets it.
    strategy: str = "Performance"
    peak_bound_bytes: int | None = None
    peak_proven_minimal: bool = False


def vela_hardware_args(config: dict[str, Any]) -> list[str]:
    """The command-line options (Vela's, which solve-schedule shares) for one entry of golden/configs.json."""
    return ["--accelerator-config", config["accelerator_config"], "--config", "Arm/vela.ini",
            "--system-config", config["system_config"], "--memory-mode", config["memory_mode"],
            *config.get("extra_args", ())]


def run_options_from_vela_args(model_path: Path, config: dict[str, Any], **overrides: Any) -> RunOptions:
    """RunOptions for one entry of golden/configs.json (accelerator, system config, memory mode, Vela extra args)."""
    extra = list(config.get("extra_args", ()))
    values: dict[str, Any] = {}
    for flag, key, convert in (("--optimise", "optimise", str), ("--arena-cache-size", "arena_cache_size", int)):
        if flag in extra:
            values[key] = convert(extra[extra.index(flag) + 1])
    return RunOptions(
        model_path=Path(model_path),
        accelerator_config=config["accelerator_config"],
        config_files=("Arm/vela.ini",),
        system_config=config["system_config"],
        memory_mode=config["memory_mode"],
        **{**values, **overrides},
    )


def architecture(options: RunOptions) -> Any:
    """The hardware description the options name, pricing passes with the options' estimator."""
    arch = load_architecture(
        accelerator_config=options.accelerator_config,
        config_files=list(options.config_files) or None,
        system_config=options.system_config,
        memory_mode=options.memory_mode,
        arena_cache_size=options.arena_cache_size,
        optimise=options.optimise,
    )
    try:
        estimator = Estimator(options.estimator)
    except ValueError:
        raise ConfigError(f"unknown estimator '{options.estimator}' (known: "
                          f"{', '.join(Estimator.names())})") from None
    return arch if estimator is arch.estimator else replace(arch, estimator=estimator)


def load_network(options: RunOptions) -> tuple[Any, Network, dict[str, float]]:
    """Read the model and the hardware description, and lower the model into NPU passes."""
    timings: dict[str, float] = {}
    start = time.monotonic()
    model = read_tflite(options.model_path)
    validate_model(model)
    timings["read"] = time.monotonic() - start
    arch = architecture(options)
    start = time.monotonic()
    network = lower_model(model, arch)
    timings["lower"] = time.monotonic() - start
    return arch, network, timings


def run(options: RunOptions, log: Callable[[str], None] | None = None, started: float | None = None) -> RunResult:
    """Load and lower the model, then schedule it with ``options.solver`` (None: lower only).

    ``log`` receives progress lines of long solves. The time limit counts from ``started`` (a ``time.monotonic``
    reading; default: now), so a command line tool can count its own start-up too.
    """
    started = time.monotonic() if started is None else started
    arch, network, timings = load_network(options)
    if options.solver is None:
        return RunResult(options=options, arch=arch, network=network, status="lowered", timings_seconds=timings)
    start = time.monotonic()
    schedule, report = _solve(network, arch, options, started, log, timings)
    timings["solve"] = time.monotonic() - start
    start = time.monotonic()
    evaluation = evaluate(network, arch, schedule)
    problems = verify(network, arch, schedule, evaluation)
    timings["evaluate"] = time.monotonic() - start
    status = report.status if report is not None else "feasible"
    warnings: tuple[str, ...] = ()
    if problems and options.solver == "heuristic" and not verify(network, arch, schedule, evaluation, UNLIMITED):
        # The reproduction of Vela reproduces Vela also where its legacy scheduler goes over the arena (it only
        # warns): a valid schedule, over the limit.
        limit = staging_limit(arch)
        peak = evaluation.peak_fast_storage
        status, problems = "over_limit", []
        warnings = (f"the heuristic's (Vela legacy's) schedule uses {peak} bytes of fast storage, {peak - limit} "
                    f"bytes ({(peak - limit) / max(limit, 1):.0%}) over the limit of {limit} bytes, as Vela's "
                    "legacy core goes over its arena; --solver cpsat keeps to the limit",)
    if problems:
        raise ScheduleError(f"the {options.solver} schedule fails verification: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    cycles = {arch.estimator.value: evaluation.total_cycles}
    for other in Estimator:
        if other is not arch.estimator:
            cycles[other.value] = evaluate(network, replace(arch, estimator=other), schedule).total_cycles
    cycles["vela"] = cycles[Estimator.VELA_LEGACY.value]  # the legacy total's older key, which documents still read
    return RunResult(options=options, arch=arch, network=network, status=status, schedule=schedule,
                     evaluation=evaluation, timings_seconds=timings, solver_report=report, warnings=warnings,
                     cycles_by_estimator=cycles)


def _solve(network: Network, arch: ArchitectureFeatures, options: RunOptions, started: float,
           log: Callable[[str], None] | None,
           timings: dict[str, float]) -> tuple[Schedule, SolverReport | None]:
    if options.solver == "heuristic":
        try:
            return heuristic_schedule(network, arch, options.optimise), None
        except StagingLimitError as exc:
            raise StagingLimitError(f"{exc} (Vela's legacy scheduler stops here too: 'Allocation exceeds staging "
                                    "limit')", needed_bytes=exc.needed_bytes) from None
    if options.solver == "dp":
        from npusched.solvers.dp import dp_schedule

        return dp_schedule(network, arch, options.optimise), None
    if options.solver != "cpsat":
        raise ScheduleError(f"unknown solver '{options.solver}' (known: cpsat, heuristic, dp)")
    from npusched.solvers.cpsat.model import solve_cpsat

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
    # Keep back what the final evaluation, verification and report take after the search.
    remaining = options.time_limit_seconds - (time.monotonic() - started) - 1.5 * evaluation_seconds - 0.2
    try:
        result = solve_cpsat(network, arch, time_limit_seconds=max(remaining, 0.5), workers=options.workers,
                             seed=options.seed, deterministic=options.deterministic, hint=hint,
                             hint_evaluation=hint_eval, log=log)
    except ScheduleError as exc:
        # Without time left to find the smallest size that fits, the heuristic's figure still says what is needed.
        if heuristic_error is not None and exc.needed_bytes is None:
            raise heuristic_error from None
        raise
    report = SolverReport(
        status=result.status, bound_cycles=result.bound_cycles, gap=result.gap, solve_seconds=result.solve_seconds,
        reason=result.reason, model_stats=dict(result.model_stats),
        heuristic_cycles=hint_eval.total_cycles if hint_eval is not None else None,
        heuristic_peak_fast_storage_bytes=hint_eval.peak_fast_storage if hint_eval is not None else None,
        any_schedule_bound_cycles=result.any_schedule_bound_cycles, strategy=result.strategy,
        peak_bound_bytes=result.peak_bound_bytes, peak_proven_minimal=result.peak_proven_minimal,
    )
    return result.schedule, report
