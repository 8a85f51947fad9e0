"""The `vela` command: where its executable is, and the one place its command lines are built.

The backend bridge calls Vela in-process with the same arguments; the sweep, the Pareto runs and the golden
oracle run the executable. All of them describe the hardware with a ``RunOptions``, so a run and the Vela run it
is compared with cannot be given different hardware.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from npusched.errors import NpuschedError
from npusched.run import RunOptions

# "taught": the legacy core as the backend bridge runs it, taught npusched's BATCH_MATMUL and GELU (``taught_vela``).
VelaCore = Literal["legacy", "default", "taught"]
# Vela's --verbose-* flags the golden output is made with.
GOLDEN_VERBOSITY = ("--verbose-schedule", "--verbose-performance")


class VelaError(NpuschedError):
    """The `vela` CLI is missing or failed (its last output line says why)."""


def vela_executable() -> str:
    """The `vela` beside this interpreter (a venv need not be on PATH), else the one on PATH."""
    beside = Path(sys.executable).parent / "vela"
    found = str(beside) if beside.exists() else shutil.which("vela")
    if found is None:
        raise VelaError("the vela CLI is not installed (pip install ethos-u-vela)")
    return found


def vela_arguments(options: RunOptions, output_dir: Path, *, core: VelaCore = "legacy",
                   verbose: Sequence[str] = ()) -> list[str]:
    """Vela's arguments (without the executable) for ``options``' model and hardware, writing into
    ``output_dir``."""
    args = [str(options.model_path), "--accelerator-config", options.accelerator_config,
            "--optimise", options.optimise, "--output-dir", str(output_dir)]
    for config in options.config_files:
        args += ["--config", str(config)]
    if options.system_config is not None:
        args += ["--system-config", options.system_config]
    if options.memory_mode is not None:
        args += ["--memory-mode", options.memory_mode]
    if options.arena_cache_size is not None:
        args += ["--arena-cache-size", str(options.arena_cache_size)]
    if core in ("legacy", "taught"):
        args.append("--debug-force-legacy-core")
    return args + list(verbose)


def run_vela(options: RunOptions, output_dir: Path, *, core: VelaCore = "legacy", verbose: Sequence[str] = (),
             timeout_seconds: float | None = None, cwd: Path | None = None,
             preexec_fn: Callable[[], Any] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `vela` executable; the caller judges its exit status (a failing Vela is often a result)."""
    executable = [sys.executable, "-m", "npusched.vela.taught_vela"] if core == "taught" else [vela_executable()]
    command = [*executable, *vela_arguments(options, output_dir, core=core, verbose=verbose)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False,
                          timeout=waitable(timeout_seconds), preexec_fn=preexec_fn)


# The longest wait handed to the operating system: a longer one (``--time-limit 1e308``) is no limit at all, and
# the system's own timers overflow on it (poll() takes at most 2^31 ms, 24.8 days).
LONGEST_WAIT_SECONDS = 7 * 24 * 3600.0


def waitable(seconds: float | None) -> float | None:
    """``seconds`` as a timeout a wait accepts: None (no limit) for one beyond ``LONGEST_WAIT_SECONDS``."""
    return None if seconds is None or not seconds < LONGEST_WAIT_SECONDS else seconds


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The line of Vela's output that says why it stopped."""
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [f"exit status {done.returncode}"])[-1][:300]


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
