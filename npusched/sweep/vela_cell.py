"""A Vela cell: run the `vela` CLI (legacy or default core) with the cell's options and read its summary CSV."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from npusched.errors import NpuschedError
from npusched.sweep.lifetime import die_with_parent
from npusched.sweep.runner import AREA_COLUMNS

# Summary CSV columns (bytes read + written per memory) for the store's bytes_* columns.
_VELA_AREA_COLUMNS = {"Sram": "sram_total_bytes", "Dram": "dram_total_bytes",
                      "OnChipFlash": "on_chip_flash_total_bytes", "OffChipFlash": "off_chip_flash_total_bytes"}


class VelaError(NpuschedError):
    """The `vela` CLI failed on the cell (its last output line says why)."""


def vela_command(cell: Any, output_dir: Path) -> list[str]:
    """The `vela` invocation with the cell's options, as a user would type it."""
    cmd = [_vela_executable(), cell.model_path, "--accelerator-config", cell.accelerator_config,
           "--output-dir", str(output_dir), "--optimise", cell.optimise]
    for name in cell.config_files:
        cmd += ["--config", name]
    if cell.system_config:
        cmd += ["--system-config", cell.system_config]
    if cell.memory_mode:
        cmd += ["--memory-mode", cell.memory_mode]
    if cell.arena_cache_size is not None:
        cmd += ["--arena-cache-size", str(cell.arena_cache_size)]
    if cell.solver == "vela-legacy":
        cmd.append("--debug-force-legacy-core")
    return cmd


def run_vela_cell(cell: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="npusched-vela-") as tmp:
        done = subprocess.run(vela_command(cell, Path(tmp)), capture_output=True, text=True, cwd=tmp, check=False,
                              preexec_fn=die_with_parent)
        summaries = sorted(Path(tmp).glob("*_summary_*.csv"))
        if done.returncode != 0 or not summaries:
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            raise VelaError(f"vela exited with status {done.returncode}: {lines[-1] if lines else 'no output'}")
        with summaries[0].open(newline="") as handle:
            summary = next(csv.DictReader(handle))
    row: dict[str, Any] = {
        "outcome": "done",
        "status": "vela",
        "cycles": float(summary["cycles_total"]),
        "npu_cycles": float(summary["cycles_npu"]),
        # Vela reports the SRAM it allocated in KiB.
        "peak_fast_storage_bytes": round(float(summary["sram_memory_used"]) * 1024),
        "fast_storage_limit_bytes": round(float(summary["arena_cache_size"])),
    }
    for area, column in AREA_COLUMNS.items():
        row[column] = float(summary[_VELA_AREA_COLUMNS[area]])
    return row


def _vela_executable() -> str:
    """The `vela` beside this interpreter (a venv need not be on PATH), else the one on PATH."""
    beside = Path(sys.executable).parent / "vela"
    found = str(beside) if beside.exists() else shutil.which("vela")
    if found is None:
        raise VelaError("the vela CLI is not installed (pip install ethos-u-vela)")
    return found
