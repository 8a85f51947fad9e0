"""Compare the CP-SAT scheduler with the heuristic (Vela's legacy scheduler re-implemented) and with Vela itself.

    python scripts/compare_baseline.py MODEL_DIR [--configs NAME ...] [--time-limit 30] [--vela]
        [--csv out.csv] [--markdown out.md]

Every model x configuration (golden/configs.json) goes through the heuristic and CP-SAT; both schedules are
priced by the evaluator. Vela's legacy-core totals come from the golden summaries when present; with --vela the
``vela`` CLI is run (legacy core and default core) and its summary CSV parsed. Writes a CSV and a Markdown
table with geometric means per configuration.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched.errors import ScheduleError  # noqa: E402
from npusched.model.ir import MemArea  # noqa: E402
from npusched.pipeline import load_network, run_options_from_vela_args  # noqa: E402
from npusched.solver.cpsat import solve_cpsat  # noqa: E402
from npusched.solver.evaluator import evaluate, verify  # noqa: E402
from npusched.solver.heuristic import heuristic_schedule  # noqa: E402

GOLDEN = Path("/work/shared/golden")
CONSTRAINED = ("u55-128_hee_shared_size", "u55-256_hee_shared_arena128k", "u65-256_mid_dedicated256k",
               "u65-512_high_dedicated384k")


def vela_cycles(model: Path, config: dict[str, Any], legacy: bool) -> float | None:
    """Total cycles from the ``vela`` CLI's summary CSV (None when it fails)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["vela", str(model), "--accelerator-config", config["accelerator_config"], "--config", "Arm/vela.ini",
               "--system-config", config["system_config"], "--memory-mode", config["memory_mode"],
               "--output-dir", tmp, *config.get("extra_args", [])]
        if legacy:
            cmd.append("--debug-force-legacy-core")
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, check=False)
        if done.returncode != 0:
            return None
        for path in Path(tmp).glob("*_summary_*.csv"):
            rows = list(csv.DictReader(path.open()))
            if rows and rows[0].get("cycles_total"):
                return float(rows[0]["cycles_total"])
    return None


def golden_legacy(config_name: str, model: str) -> float | None:
    path = GOLDEN / "vela-5.2.0-legacy" / config_name / model / "summary.csv"
    if not path.exists():
        return None
    rows = list(csv.DictReader(path.open()))
    return float(rows[0]["cycles_total"]) if rows else None


def run_one(model: Path, config_name: str, config: dict[str, Any], time_limit: float, with_vela: bool
            ) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model.stem, "config": config_name}
    start = time.monotonic()
    options = run_options_from_vela_args(model, config)
    arch, network, _ = load_network(options)
    heuristic = None
    try:
        heuristic = heuristic_schedule(network, arch)
        h_eval = evaluate(network, arch, heuristic)
        row["heuristic_cycles"] = h_eval.total_cycles
        row["heuristic_peak"] = h_eval.peak_fast_storage
        row["heuristic_valid"] = not verify(network, arch, heuristic, h_eval)
    except ScheduleError as exc:
        row["heuristic_error"] = str(exc)
    row["heuristic_seconds"] = round(time.monotonic() - start, 2)
    start = time.monotonic()
    arch, network, _ = load_network(options)
    try:
        result = solve_cpsat(network, arch, time_limit_seconds=time_limit - (time.monotonic() - start), workers=2,
                             hint=heuristic)
        ev = evaluate(network, arch, result.schedule)
        row.update(cpsat_cycles=ev.total_cycles, cpsat_status=result.status, bound=result.bound_cycles,
                   gap=result.gap, cpsat_peak=ev.peak_fast_storage,
                   cpsat_valid=not verify(network, arch, result.schedule, ev),
                   variables=result.model_stats.get("variables"), constraints=result.model_stats.get("constraints"),
                   build_seconds=result.model_stats.get("build_seconds"))
        for mem in (MemArea.Sram, MemArea.Dram, MemArea.OffChipFlash):
            row[f"bytes_{mem.name.lower()}"] = round(ev.bytes_moved(mem))
    except ScheduleError as exc:
        row["cpsat_error"] = str(exc)
    row["cpsat_seconds"] = round(time.monotonic() - start, 2)
    row["vela_legacy_cycles"] = golden_legacy(config_name, model.stem)
    if with_vela:
        row["vela_legacy_cycles"] = vela_cycles(model, config, True) or row["vela_legacy_cycles"]
        row["vela_default_cycles"] = vela_cycles(model, config, False)
    if row.get("cpsat_cycles") and row.get("heuristic_cycles"):
        row["cpsat_vs_heuristic"] = row["cpsat_cycles"] / row["heuristic_cycles"]
    if row.get("cpsat_cycles") and row.get("vela_legacy_cycles"):
        row["cpsat_vs_vela"] = row["cpsat_cycles"] / row["vela_legacy_cycles"]
    if row.get("cpsat_cycles") and row.get("vela_default_cycles"):
        row["cpsat_vs_vela_default"] = row["cpsat_cycles"] / row["vela_default_cycles"]
    return row


def geomean(values: list[float]) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


COLUMNS = ["model", "config", "vela_legacy_cycles", "vela_default_cycles", "heuristic_cycles", "cpsat_cycles",
           "cpsat_vs_heuristic", "cpsat_vs_vela", "cpsat_vs_vela_default", "cpsat_status", "bound", "gap",
           "heuristic_peak", "cpsat_peak", "heuristic_valid", "cpsat_valid", "bytes_sram", "bytes_dram",
           "bytes_offchipflash", "variables", "constraints", "build_seconds", "heuristic_seconds", "cpsat_seconds",
           "heuristic_error", "cpsat_error"]


def fmt(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def markdown(rows: list[dict[str, Any]], time_limit: float) -> str:
    cols = ["model", "config", "vela_legacy_cycles", "heuristic_cycles", "cpsat_cycles", "cpsat_vs_heuristic",
            "cpsat_vs_vela", "cpsat_status", "bound", "gap", "heuristic_peak", "cpsat_peak", "bytes_sram",
            "bytes_dram", "bytes_offchipflash", "cpsat_seconds"]
    if any(r.get("vela_default_cycles") for r in rows):
        cols.insert(3, "vela_default_cycles")
    lines = [f"CP-SAT time limit {time_limit:g} s, 2 workers.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c)) for c in cols) + " |")
    lines += ["", "Geometric means per configuration:", "",
              "| config | CP-SAT / heuristic | CP-SAT / Vela legacy | proven optimal |", "|---|---|---|---|"]
    for config in dict.fromkeys(r["config"] for r in rows):
        sub = [r for r in rows if r["config"] == config]
        optimal = sum(1 for r in sub if r.get("cpsat_status") == "optimal")
        lines.append(f"| {config} | {geomean([r.get('cpsat_vs_heuristic') for r in sub]):.3f} | "
                     f"{geomean([r.get('cpsat_vs_vela') for r in sub]):.3f} | {optimal}/{len(sub)} |")
    constrained = [r for r in rows if r["config"] in CONSTRAINED]
    lines.append(f"| SRAM-constrained (all but u55-128_hee_shared) | "
                 f"{geomean([r.get('cpsat_vs_heuristic') for r in constrained]):.3f} | "
                 f"{geomean([r.get('cpsat_vs_vela') for r in constrained]):.3f} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--configs", nargs="*", default=None)
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--vela", action="store_true")
    parser.add_argument("--csv", type=Path, default=Path("compare_baseline.csv"))
    parser.add_argument("--markdown", type=Path, default=Path("compare_baseline.md"))
    args = parser.parse_args(argv)
    configs = json.loads((GOLDEN / "configs.json").read_text())
    names = args.configs or list(configs)
    models = sorted(args.model_dir.glob("*.tflite"))
    if args.models:
        models = [m for m in models if m.stem in args.models]
    rows = []
    for config_name in names:
        for model in models:
            row = run_one(model, config_name, configs[config_name], args.time_limit, args.vela)
            rows.append(row)
            print(json.dumps({k: fmt(v) for k, v in row.items()}), flush=True)
            with args.csv.open("w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
            args.markdown.write_text(markdown(rows, args.time_limit))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
