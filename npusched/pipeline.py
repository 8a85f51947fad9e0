"""The one-way flow of a run: model file -> pass graph -> schedule -> evaluation -> report.

The CLI and the scripts both call `run`, so every number they print comes from the same evaluator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from npusched.io.tflite_reader import read_tflite
from npusched.model.arch import load_architecture
from npusched.model.graph import Network, lower_model


@dataclass(frozen=True)
class RunOptions:
    """Everything a run depends on; the same options give the same schedule."""

    model_path: Path
    accelerator_config: str = "ethos-u55-256"
    config_files: tuple[str, ...] = ()
    system_config: Optional[str] = None
    memory_mode: Optional[str] = None
    arena_cache_size: Optional[int] = None
    optimise: str = "Performance"
    solver: Optional[str] = "heuristic"
    time_limit_seconds: float = 30.0


@dataclass(frozen=True)
class RunResult:
    """A finished run: its inputs, the lowered network, and (when a solver ran) the verified schedules."""

    options: RunOptions
    arch: Any
    network: Network
    status: str
    schedules: tuple[Any, ...] = ()
    evaluations: tuple[Any, ...] = ()
    timings_seconds: dict[str, float] = field(default_factory=dict)


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


def run(options: RunOptions, started: Optional[float] = None) -> RunResult:
    arch, network, timings = load_network(options)
    return RunResult(options=options, arch=arch, network=network, status="lowered", timings_seconds=timings)
