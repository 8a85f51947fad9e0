"""Run Vela 5.2.0's legacy core on a model and keep its output in the layout of ../shared/golden.

The fidelity script and the tests both compare npusched with Vela on generated networks this way, so the
comparison code of ``npusched.vela.fidelity`` reads the output exactly as it reads the golden corpus.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from npusched.app.pipeline import vela_hardware_args


def vela_command(model: Path, config: dict[str, Any], output_dir: Path) -> list[str]:
    """The golden command line (as in golden/*/command.txt) for ``model`` under a configs.json entry."""
    return [shutil.which("vela") or str(Path(sys.executable).with_name("vela")), str(model),
            *vela_hardware_args(config), "--debug-force-legacy-core", "--verbose-schedule",
            "--verbose-performance", "--output-dir", str(output_dir)]


def run_vela(model: Path, config: dict[str, Any], golden: Path, timeout_seconds: float) -> str:
    """Run Vela into ``golden`` as vela_stdout.txt, per_layer.csv and summary.csv.

    Returns "" on success, else Vela's reason in one line (Vela failing is a result, not an error here).
    """
    output_dir = golden / "vela-output"
    try:
        done = subprocess.run(vela_command(model, config, output_dir), capture_output=True, text=True,
                              timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_seconds:.0f} s"
    (golden / "vela_stdout.txt").write_text(done.stdout)
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line or "error" in line]
        return (errors or lines or [f"exit status {done.returncode}"])[-1][:200]
    shutil.copy(next(output_dir.glob("*_per-layer.csv")), golden / "per_layer.csv")
    shutil.copy(next(output_dir.glob("*_summary_*.csv")), golden / "summary.csv")
    return ""
