"""A Vela cell: run the `vela` CLI (legacy or default core) with the cell's options and read its summary CSV."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from typing import Any

from npusched.sweep.grid import AREA_COLUMNS, Cell
from npusched.sweep.lifetime import die_with_parent
from npusched.vela.command import VelaCore, VelaError, last_line, run_vela

# Summary CSV columns (bytes read + written per memory) for the store's bytes_* columns.
_VELA_AREA_COLUMNS = {"Sram": "sram_total_bytes", "Dram": "dram_total_bytes",
                      "OnChipFlash": "on_chip_flash_total_bytes", "OffChipFlash": "off_chip_flash_total_bytes"}


def run_vela_cell(cell: Cell) -> dict[str, Any]:
    """The store's row for a Vela cell (``cell.solver`` 'vela-cli-legacy' or 'vela-cli-default')."""
    core: VelaCore = "legacy" if cell.solver == "vela-cli-legacy" else "default"
    with tempfile.TemporaryDirectory(prefix="npusched-vela-") as tmp:
        done = run_vela(cell.run_options(), Path(tmp), core=core, cwd=Path(tmp), preexec_fn=die_with_parent)
        summaries = sorted(Path(tmp).glob("*_summary_*.csv"))
        if done.returncode != 0 or not summaries:
            raise VelaError(f"vela exited with status {done.returncode}: {last_line(done)}")
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
