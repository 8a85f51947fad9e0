"""The one-way flow of a run: model file -> pass graph -> schedule -> evaluation -> report.

The CLI and the scripts both call `run`, so every number they print comes from the same evaluator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npusched.errors import ScheduleError
from npusched.io.tflite_reader import read_tflite
from npusched.model.arch import load_architecture
from npusched.model.graph import Network, lower_model
from npusched.solver.evaluator import Evaluation, evaluate, verify
from npusched.solver.heuristic import heuristic_schedule
from npusched.solver.schedule import Schedule


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
    solver: str | None = "heuristic"
    time_limit_seconds: float = 30.0


@dataclass(frozen=True)
class RunResult:
    """A finished run: its inputs, the lowered network, and (when a solver ran) the verified schedule and its
    evaluation — the only source of the figures a report prints."""

    options: RunOptions
    arch: Any
    network: Network
    status: str
    schedule: Schedule | None = None
    evaluation: Evaluation | None = None
    timings_seconds: dict[str, float] = field(default_factory=dict)


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


def load_network(options: RunOptions) -> tuple[Any, Network, dict[str, float]]:
    """Read the model and the hardware description, and lower the model into NPU passes."""
    timings: dict[str, float] = {}
    start = time.monotonic()
    model = read_tflite(options.model_path)
    timings["read"] = time.monotonic() - start
    arch = load_architecture(
        accelerator_config=options.accelerator_config,
        config_files=list(options.config_files) or None,
        system_config=options.system_config,
        memory_mode=options.memory_mode,
        arena_cache_size=options.arena_cache_size,
        optimise=options.optimise,
    )
    start = time.monotonic()
    network = lower_model(model, arch)
    timings["lower"] = time.monotonic() - start
    return arch, network, timings


def run(options: RunOptions) -> RunResult:
    """Load and lower the model, then schedule it with ``options.solver`` (None: lower only)."""
    arch, network, timings = load_network(options)
    if options.solver is None:
        return RunResult(options=options, arch=arch, network=network, status="lowered", timings_seconds=timings)
    start = time.monotonic()
    schedule = _solve(network, arch, options)
    timings["solve"] = time.monotonic() - start
    start = time.monotonic()
    evaluation = evaluate(network, arch, schedule)
    problems = verify(network, arch, schedule, evaluation)
    timings["evaluate"] = time.monotonic() - start
    if problems:
        raise ScheduleError(f"the {options.solver} schedule fails verification: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return RunResult(options=options, arch=arch, network=network, status=schedule.status, schedule=schedule,
                     evaluation=evaluation, timings_seconds=timings)


def _solve(network: Network, arch: Any, options: RunOptions) -> Schedule:
    if options.solver == "heuristic":
        return heuristic_schedule(network, arch, options.optimise)
    raise ScheduleError(f"solver '{options.solver}' is not available yet (available: heuristic)")
