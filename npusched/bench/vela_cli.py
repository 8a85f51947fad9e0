"""A Vela core's own run of a file through the ``vela`` CLI, for the figures it reports about itself: its total
cycles, the SRAM it used, what it left to the CPU and how many NPU subgraphs it wrote.

The command line is ``npusched.vela.command``'s (``run_vela``), the one place Vela's arguments are built, so the
core runs on exactly the hardware npusched's run of the same ``RunOptions`` schedules for.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Literal

from npusched.errors import NpuschedError
from npusched.frontend.tflite_reader import parse_tflite
from npusched.run import RunOptions
from npusched.vela.command import VelaCore, last_line, run_vela, vela_arguments, vela_executable
from npusched.vela.report import read_summary

__all__ = ["CORE_TIMEOUT_SECONDS", "core_run", "vela_command"]

# Vela can take minutes on a large generated network; past this it is reported as failed.
CORE_TIMEOUT_SECONDS = 900.0


def core_run(options: RunOptions, core: VelaCore, timeout_seconds: float = CORE_TIMEOUT_SECONDS) -> dict[str, Any]:
    """The core's own ``cycles`` (its summary total), ``sram`` (bytes used), ``cpu`` (operators left to the CPU)
    and ``subgraphs`` (Ethos-U custom operators in the file it writes) for ``options``' model, or ``error``: why
    it failed (a failing Vela is a result, not a reason to stop)."""
    with tempfile.TemporaryDirectory(prefix="npusched-vela-") as tmp:
        out = Path(tmp)
        try:
            done = run_vela(options, out, core=core, timeout_seconds=timeout_seconds, cwd=out)
        except subprocess.TimeoutExpired:
            return {"error": f"vela {core} took more than {timeout_seconds:g} s"}
        summaries = sorted(out.glob("*_summary_*.csv"))
        if done.returncode != 0 or not summaries:
            return {"error": f"vela {core} failed: {last_line(done)}"}
        summary = read_summary(summaries[0])
        cpu = re.search(r"^CPU operators = (\d+)", done.stdout, re.MULTILINE)
        written = sorted(out.glob("*_vela.tflite"))
        try:
            operators = parse_tflite(written[0].read_bytes()).main.operators
            subgraphs: int | str = sum(op.opcode == "CUSTOM" for op in operators)
        except (IndexError, NpuschedError):  # none written, or a file the reader refuses (the default core's of a
            subgraphs = ""                   # Keras export can hold a buffer longer than its shape)
    return {"cycles": float(summary["cycles_total"]), "sram": round(float(summary["sram_memory_used"]) * 1024),
            "cpu": int(cpu.group(1)) if cpu else "", "subgraphs": subgraphs}


def vela_command(options: RunOptions, output_dir: Path, core: Literal["legacy", "default"] = "legacy") -> list[str]:
    """The ``vela`` command line ``run_vela`` runs (for timing it as a whole process)."""
    return [vela_executable(), *vela_arguments(options, output_dir, core=core)]
