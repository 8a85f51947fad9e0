"""Run Vela 5.2.0's legacy core on a model and keep its output in the layout of ../shared/golden.

The fidelity script and the tests both compare npusched with Vela on generated networks this way, so the
comparison code of ``npusched.vela.fidelity`` reads the output exactly as it reads the golden corpus. Vela runs as
the backend bridge runs it, taught npusched's BATCH_MATMUL and GELU (``taught_vela``; plain Vela legacy on any
network without them), so that attention's operators are placed and scheduled as npusched's heuristic is held to.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from npusched.vela.command import GOLDEN_VERBOSITY, last_line, run_options_from_vela_args, run_vela


def run_golden(model: Path, config: dict[str, Any], golden: Path, timeout_seconds: float) -> str:
    """Run Vela into ``golden`` as vela_stdout.txt, per_layer.csv and summary.csv.

    Returns "" on success, else Vela's reason in one line (Vela failing is a result, not an error here).
    """
    output_dir = golden / "vela-output"
    options = run_options_from_vela_args(model, config)
    try:
        done = run_vela(options, output_dir, core="taught", verbose=GOLDEN_VERBOSITY, timeout_seconds=timeout_seconds)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_seconds:.0f} s"
    (golden / "vela_stdout.txt").write_text(done.stdout)
    if done.returncode != 0:
        return last_line(done)[:200]
    shutil.copy(next(output_dir.glob("*_per-layer.csv")), golden / "per_layer.csv")
    shutil.copy(next(output_dir.glob("*_summary_*.csv")), golden / "summary.csv")
    return ""
