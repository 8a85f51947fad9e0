#!/usr/bin/env python3
"""Issue 19's figures: netgen's Keras-style exports before and after normalisation, with Vela as the oracle.

Usage: python scripts/normalise_figures.py [--archs a,b] [--passes 60] [--seed 0] [--configs c1,c2]
                                           [--cpsat SECONDS] [--default-core] [--keep DIR] [--csv PATH]

For every architecture of npusched.netgen (exported Keras-style: dynamic batch, run-time shape arithmetic,
input rescaling) and every configuration of tests/data/golden/configs.json it prints
- NPU subgraphs and CPU operators of the raw export and of the normalised model (npusched's partition, and
  Vela legacy's CPU operator count on each file);
- Vela legacy's total cycles on the raw file and on the normalised one (the file `--write-model` writes);
- the heuristic on the normalised file against `vela --debug-force-legacy-core` on it (the reference: within 1%),
  and `--no-normalise` on the raw file against Vela legacy on the raw file;
- with --cpsat S: CP-SAT's cycles (time limit S) and whether `--output-dir` compiles its schedule with Vela's
  estimate equal to npusched's; with --default-core: Vela's default core's totals on both files.
Vela failing is data (its reason is printed). The summary line gives the share of cases within 1%.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from npusched.app.pipeline import run
from npusched.errors import NpuschedError
from npusched.frontend.normalise import normalise
from npusched.netgen import ARCHITECTURES, generate
from npusched.vela.backend import compile_schedule
from npusched.vela.command import last_line, run_options_from_vela_args, run_vela
from npusched.vela.fidelity import compare_with_golden
from npusched.vela.golden import run_golden
from npusched.vela.report import read_cpu_operator_count, read_summary, read_verbose_schedule

DEFAULT_CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden" / "configs.json"
WITHIN_PERCENT = 1.0
VELA_TIMEOUT_SECONDS = 900.0


def vela_legacy(model: Path, config: dict[str, Any], golden: Path) -> dict[str, Any]:
    """Vela legacy's total, CPU operators and NPU subgraphs on ``model`` (``error`` when it fails)."""
    golden.mkdir(parents=True, exist_ok=True)
    error = run_golden(model, config, golden, VELA_TIMEOUT_SECONDS)
    if error:
        return {"error": error}
    summary = read_summary(golden / "summary.csv")
    return {"cycles": float(summary["cycles_total"]), "cpu_ops": read_cpu_operator_count(golden / "vela_stdout.txt"),
            "subgraphs": len(read_verbose_schedule(golden / "vela_stdout.txt")), "golden": golden}


def vela_default(model: Path, config: dict[str, Any], out: Path) -> float | str:
    """Vela's default core's total cycles on ``model``, or its reason for failing."""
    done = run_vela(run_options_from_vela_args(model, config), out, core="default",
                    timeout_seconds=VELA_TIMEOUT_SECONDS)
    summaries = sorted(out.glob("*_summary_*.csv"))
    if done.returncode != 0 or not summaries:
        return last_line(done)[:120]
    return float(read_summary(summaries[0])["cycles_total"])


def heuristic_against(model: Path, config: dict[str, Any], golden: dict[str, Any],
                      normalise_model: bool) -> str | float:
    """The heuristic's % difference from Vela legacy's total on the same file (or why there is none)."""
    if "error" in golden:
        return "vela fails"
    try:
        result = run(run_options_from_vela_args(model, config, solver="heuristic", normalise=normalise_model))
        return compare_with_golden(result, golden["golden"]).cycles_error
    except NpuschedError as exc:
        return f"error: {exc}"[:120]


def cpsat_case(model: Path, config: dict[str, Any], seconds: float, out: Path) -> dict[str, Any]:
    try:
        result = run(run_options_from_vela_args(model, config, solver="cpsat", time_limit_seconds=seconds,
                                                deterministic=True, workers=1))
        backend = compile_schedule(result, out)
        return {"cpsat_cycles": result.evaluation.total_cycles, "cpsat_vela_cycles": backend.vela_total_cycles,
                "cpsat_agreed": backend.agreed}
    except NpuschedError as exc:
        return {"cpsat_error": str(exc)[:120]}


def case(arch: str, passes: int, seed: int, name: str, config: dict[str, Any], work: Path,
         cpsat_seconds: float | None, default_core: bool) -> dict[str, Any]:
    raw = work / f"{arch}-{passes}-s{seed}-keras.tflite"
    written = work / f"{arch}-{passes}-s{seed}-normalised.tflite"
    if not raw.exists():
        raw.write_bytes(generate(arch, passes, seed, keras_style=True))
        written.write_bytes(normalise(raw.read_bytes())[0])
    row: dict[str, Any] = {"arch": arch, "config": name}
    lowered = run(run_options_from_vela_args(raw, config, solver=None))
    report = lowered.normalisation
    row["folded"] = report.normalisation.folded_operators if report else 0
    row["subgraphs_before"] = report.subgraphs_before if report else len(lowered.network.subgraphs)
    row["subgraphs_after"] = len(lowered.network.subgraphs)
    row["cpu_before"] = report.cpu_ops_before if report else len(lowered.network.cpu_ops)
    row["cpu_after"] = len(lowered.network.cpu_ops)
    before = vela_legacy(raw, config, work / raw.stem / name)
    after = vela_legacy(written, config, work / written.stem / name)
    row["vela_before"] = before.get("cycles", before.get("error"))
    row["vela_after"] = after.get("cycles", after.get("error"))
    row["vela_cpu_before"], row["vela_cpu_after"] = before.get("cpu_ops"), after.get("cpu_ops")
    row["heuristic_vs_vela_after_percent"] = heuristic_against(written, config, after, True)
    row["as_is_vs_vela_before_percent"] = heuristic_against(raw, config, before, False)
    if cpsat_seconds is not None:
        row.update(cpsat_case(raw, config, cpsat_seconds, work / "cpsat" / raw.stem / name))
    if default_core:
        row["default_before"] = vela_default(raw, config, work / "default" / raw.stem / name)
        row["default_after"] = vela_default(written, config, work / "default" / written.stem / name)
    return row


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:+.2f}%" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table of docs/results.md: partition and both Vela cores' totals before and after, and CP-SAT's."""
    lines = ["| network | configuration | NPU subgraphs | CPU ops | Vela legacy before | Vela legacy after | "
             "heuristic vs legacy on the written model | CP-SAT (compiled) | CP-SAT / legacy after | "
             "Vela default before | Vela default after | CP-SAT / default after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def number(value: Any) -> str:
        return f"{value:,.0f}" if isinstance(value, float) else f"fails ({str(value)[:24]})" if value else "–"

    def ratio(a: Any, b: Any) -> str:
        return f"{a / b:.3f}" if isinstance(a, float) and isinstance(b, float) and b else "–"

    for r in rows:
        heuristic = r["heuristic_vs_vela_after_percent"]
        cpsat = r.get("cpsat_cycles")
        compiled = ("" if "cpsat_agreed" not in r else " ✓" if r["cpsat_agreed"] else " ≠")
        error = str(r.get("cpsat_error", ""))
        cpsat_text = f"{cpsat:,.0f}{compiled}" if isinstance(cpsat, float) else (
            "no fit" if error.startswith("no schedule") else "backend refuses" if error else "–")
        lines.append(
            f"| {r['arch']} | {r['config']} | {r['subgraphs_before']} → {r['subgraphs_after']} | "
            f"{r['cpu_before']} → {r['cpu_after']} | {number(r['vela_before'])} | {number(r['vela_after'])} | "
            f"{f'{heuristic:+.2f}%' if isinstance(heuristic, float) else heuristic} | {cpsat_text} | "
            f"{ratio(cpsat, r['vela_after'])} | {number(r.get('default_before'))} | "
            f"{number(r.get('default_after'))} | {ratio(cpsat, r.get('default_after'))} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHITECTURES), help="comma-separated (default: all)")
    parser.add_argument("--passes", type=int, default=60, help="NPU pass budget of each network (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", help="comma-separated golden configuration names (default: all five)")
    parser.add_argument("--cpsat", type=float, default=None, metavar="SECONDS",
                        help="also run CP-SAT (deterministic, 1 worker) and compile it with --output-dir")
    parser.add_argument("--default-core", action="store_true", help="also run Vela's default core on both files")
    parser.add_argument("--keep", type=Path, help="keep models and Vela output in this folder")
    parser.add_argument("--csv", type=Path, help="write the rows as CSV")
    parser.add_argument("--markdown", type=Path, help="write the table of docs/results.md")
    args = parser.parse_args()
    configs = json.loads(DEFAULT_CONFIGS.read_text())
    names = args.configs.split(",") if args.configs else list(configs)
    archs = args.archs.split(",")
    unknown = [a for a in archs if a not in ARCHITECTURES] + [n for n in names if n not in configs]
    if unknown:
        print(f"error: unknown architecture or configuration {unknown[0]}", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="normalise_figures_"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for arch in archs:
            for name in names:
                row = case(arch, args.passes, args.seed, name, configs[name], work, args.cpsat, args.default_core)
                rows.append(row)
                print("  ".join(f"{k}={_fmt(v)}" for k, v in row.items()), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.csv is not None:
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
            writer.writeheader()
            writer.writerows(rows)
    if args.markdown is not None:
        args.markdown.write_text(markdown(rows) + "\n")
    compared = [r for r in rows if isinstance(r["heuristic_vs_vela_after_percent"], float)]
    within = sum(abs(r["heuristic_vs_vela_after_percent"]) <= WITHIN_PERCENT for r in compared)
    as_is = [r for r in rows if isinstance(r["as_is_vs_vela_before_percent"], float)]
    as_is_within = sum(abs(r["as_is_vs_vela_before_percent"]) <= WITHIN_PERCENT for r in as_is)
    shape_cpu_left = sum(r["cpu_after"] > 0 and r["arch"] != "mixed" for r in rows)
    print(f"SUMMARY heuristic on the normalised model within {WITHIN_PERCENT:g}% of vela --debug-force-legacy-core "
          f"on it in {within}/{len(compared)} cases Vela compiles ({len(rows)} cases); --no-normalise on the raw "
          f"export within {WITHIN_PERCENT:g}% of Vela legacy on it in {as_is_within}/{len(as_is)}; cases with CPU "
          f"operators left (mixed excluded: its CPU operators are by design) {shape_cpu_left}")
    if args.cpsat is not None:
        done = [r for r in rows if "cpsat_agreed" in r]
        print(f"SUMMARY CP-SAT compiled through --output-dir in {len(done)}/{len(rows)} cases, Vela's estimate equal "
              f"to npusched's in {sum(r['cpsat_agreed'] for r in done)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
