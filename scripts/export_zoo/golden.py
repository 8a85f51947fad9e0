"""Vela 5.2.0's output for every zoo model under the five configurations of tests/data/golden/configs.json,
both cores, kept gzip-compressed (no timestamps, so regenerating gives the same bytes), and partition.csv: how many
operators each core leaves on the CPU and how many NPU subgraphs it makes.

Runs in the project's venv (the one with ``vela``); one Vela process at a time.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from export_zoo.common import GOLDEN, GOLDEN_CONFIGS, gzip_bytes
from npusched.vela.report import read_partition

VELA_VERSION = "5.2.0"
CORES = {"legacy": ["--debug-force-legacy-core", "--verbose-schedule", "--verbose-performance"],
         "regor": ["--verbose-performance"]}
# Which of Vela's outputs each core keeps (the default core's stdout is the first thing to drop if over budget).
KEEP = {"legacy": ("vela_stdout.txt", "per_layer.csv", "summary.csv"), "regor": ("summary.csv", "vela_stdout.txt")}


def vela_command(model: Path, config: dict[str, Any], core: str, output_dir: Path) -> list[str]:
    """The Vela command line for one model, configuration and core (as in tests/data/golden/*/command.txt)."""
    vela = Path(sys.executable).parent / "vela"
    return [str(vela if vela.exists() else "vela"), str(model), "--accelerator-config", config["accelerator_config"],
            "--config", "Arm/vela.ini", "--system-config", config["system_config"],
            "--memory-mode", config["memory_mode"], *config.get("extra_args", ()), *CORES[core],
            "--output-dir", str(output_dir)]


def _last_lines(done: subprocess.CompletedProcess[str], count: int = 15) -> str:
    """The end of Vela's stdout and stderr: why it failed."""
    return "".join(f"--- {name} ---\n" + "\n".join(text.splitlines()[-count:]) + "\n"
                   for name, text in (("stdout", done.stdout), ("stderr", done.stderr)))


def _strip_paths(text: str, scratch: Path) -> str:
    """Vela's output names the scratch folder it wrote to; drop that so the golden files do not change from run
    to run."""
    return text.replace(str(scratch) + "/", "").replace(str(scratch), ".")


def run_one(model: Path, config_name: str, config: dict[str, Any], core: str, root: Path) -> tuple[int, int] | None:
    """Run Vela once and keep its outputs under ``root/vela-5.2.0-<core>/<config>/<model>/``; returns the
    partition, or None when Vela failed (then ``error.txt`` says why)."""
    dest = root / f"vela-{VELA_VERSION}-{core}" / config_name / model.stem
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    scratch = Path(tempfile.mkdtemp(prefix="zoo_vela_"))
    try:
        # Vela runs in the scratch folder, given the model's bare name, so no absolute path reaches its output.
        local = scratch / model.name
        shutil.copyfile(model, local)
        out = scratch / "out"
        done = subprocess.run(vela_command(Path(model.name), config, core, Path("out")), cwd=scratch,
                              capture_output=True, text=True, check=False, timeout=900)
        produced = out / f"{model.stem}_vela.tflite"
        if done.returncode != 0 or not produced.exists():
            (dest / "error.txt").write_text(_strip_paths(_last_lines(done), scratch))
            return None
        sources = {"vela_stdout.txt": done.stdout,
                   "per_layer.csv": _read(out / f"{model.stem}_per-layer.csv"),
                   "summary.csv": _read(out / f"{model.stem}_summary_{config['system_config']}.csv")}
        for name in KEEP[core]:
            if sources[name] is not None:
                (dest / f"{name}.gz").write_bytes(gzip_bytes(_strip_paths(sources[name], scratch).encode()))
        return read_partition(produced)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def run(models: list[Path], root: Path = GOLDEN) -> list[dict[str, Any]]:
    """Golden output of every model under every configuration and both cores; writes partition.csv."""
    configs = json.loads(GOLDEN_CONFIGS.read_text())
    rows: list[dict[str, Any]] = []
    for model in models:
        for config_name, config in configs.items():
            row: dict[str, Any] = {"model": model.stem, "config": config_name}
            for core in CORES:
                result = run_one(model, config_name, config, core, root)
                row[f"{core}_cpu_ops"], row[f"{core}_npu_subgraphs"] = result if result else ("error", "error")
            rows.append(row)
            print(model.stem, config_name, row, flush=True)
    write_partition(rows, root)
    return rows


def write_partition(rows: list[dict[str, Any]], root: Path) -> None:
    """partition.csv: one row per model and configuration, merged with the rows of models not re-run."""
    path = root / "partition.csv"
    fields = ["model", "config", "legacy_cpu_ops", "legacy_npu_subgraphs", "regor_cpu_ops", "regor_npu_subgraphs"]
    kept: dict[tuple[str, str], dict[str, Any]] = {}
    if path.exists():
        for row in csv.DictReader(io.StringIO(path.read_text())):
            kept[(row["model"], row["config"])] = row
    for row in rows:
        kept[(row["model"], row["config"])] = row
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for key in sorted(kept):
        writer.writerow({f: kept[key][f] for f in fields})
    path.write_text(buffer.getvalue())


def prune(models: set[str], root: Path = GOLDEN) -> None:
    """Remove golden folders of models no longer in the zoo."""
    for core_dir in root.glob("vela-*"):
        for model_dir in core_dir.glob("*/*"):
            if model_dir.is_dir() and model_dir.name not in models:
                shutil.rmtree(model_dir)
