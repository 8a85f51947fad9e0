"""``solve-schedule`` run as a user runs it, a whole process (start-up, loading, pricing, solving, the report and
any compile included), timed, and its ``--json`` document read back; and any command timed the same way.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ProcessRun", "solve_schedule", "wall_seconds"]


@dataclass(frozen=True)
class ProcessRun:
    """One ``solve-schedule`` process: how it ended, its JSON document (None when it wrote none) and its wall time."""

    done: subprocess.CompletedProcess[str]
    doc: dict[str, Any] | None
    wall_seconds: float
    # The process's own peak resident memory (its children's not counted).
    peak_rss_megabytes: float = math.nan

    @property
    def error(self) -> str:
        """The run's ``error:`` line (or its last line on stderr); empty when it succeeded."""
        if self.done.returncode == 0:
            return ""
        lines = self.done.stderr.strip().splitlines()
        return next((line for line in lines if line.startswith("error:")), lines[-1] if lines else "")

    @property
    def stats(self) -> dict[str, Any]:
        return dict((self.doc or {}).get("model_stats") or {})

    @property
    def timings(self) -> dict[str, float]:
        return dict((self.doc or {}).get("timings_seconds") or {})

    @property
    def passes(self) -> int | None:
        """The NPU passes scheduled (the ops with a block config)."""
        return sum(1 for op in self.doc["ops"] if op.get("block_config")) if self.doc else None

    @property
    def solve_seconds(self) -> float:
        """The solver's time as the run reports it (else its searches' timings), NaN when it gives none."""
        searches = [v for k, v in self.timings.items() if k.startswith("search")]
        reported = (self.doc or {}).get("solve_seconds")
        return float(reported) if reported is not None else self.timings.get("solve", sum(searches) or math.nan)

    @property
    def start_seconds(self) -> float:
        """The heuristic's time before the search (with the cores' schedules as floors where the run has them)."""
        return self.timings.get("heuristic", self.timings.get("floors", math.nan))

    @property
    def load_seconds(self) -> float:
        """Reading, normalising and lowering the model."""
        return sum(self.timings.get(step, 0.0) for step in ("read", "normalise", "lower"))

    @property
    def cycles(self) -> float | None:
        return float(self.doc["totals"]["cycles"]) if self.doc else None

    @property
    def heuristic_cycles(self) -> float | None:
        """The heuristic schedule's total the run reports beside its own (CP-SAT's start), if any."""
        value = ((self.doc or {}).get("heuristic") or {}).get("cycles")
        return None if value is None else float(value)


def solve_schedule(model: Path, arguments: Sequence[str], work: Path, cwd: Path | None = None) -> ProcessRun:
    """``solve-schedule MODEL --quiet --json <work>/run.json ARGUMENTS...``, timed."""
    json_path = work / "run.json"
    json_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "npusched.app.cli", str(model), "--quiet", "--json", str(json_path), *arguments]
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, cwd=cwd)
        # Reaped here, so that its own resource use is known: its peak memory, its waited children's included.
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
        stdout.seek(0)
        stderr.seek(0)
        done = subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status), stdout.read(), stderr.read())
    return ProcessRun(done, json.loads(json_path.read_text()) if json_path.exists() else None, wall,
                      usage.ru_maxrss / 1024)


def wall_seconds(command: Sequence[str]) -> float:
    """The wall time of ``command`` run to its end; a ``RuntimeError`` with its last line when it fails."""
    start = time.perf_counter()
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        raise RuntimeError(f"{Path(command[0]).name} failed: {last[0]}")
    return elapsed
