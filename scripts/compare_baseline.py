"""Compare the CP-SAT scheduler with the heuristic (Vela's legacy scheduler re-implemented) and with Vela itself.

    python scripts/compare_baseline.py MODEL_DIR [--configs NAME ...] [--models NAME ...] [--time-limit 30]
        [--vela] [--jobs 1] [--workers 2] [--store compare_baseline.sqlite] [--csv out.csv] [--markdown out.md]

A sweep (npusched.sweep) over every model x configuration of golden/configs.json with the heuristic and CP-SAT
(and, with --vela, the ``vela`` CLI's legacy and default cores) into a resumable store: rerun it and only the
missing cells run. Vela's legacy-core totals come from the golden summaries unless --vela ran the CLI. Writes a
CSV and a Markdown table with geometric means per configuration (the tables of docs/results.md).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched.sweep import store as sweep_store  # noqa: E402
from npusched.sweep.engine import run_sweep  # noqa: E402
from npusched.sweep.grid import Grid, HardwareConfig, expand, find_models  # noqa: E402
from npusched.sweep.local import run_local  # noqa: E402
from npusched.sweep.report import case_rows, fmt, geomean  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GOLDEN = next((p for p in (REPO / "tests" / "data" / "golden", REPO.parent / "shared" / "golden") if p.is_dir()),
              REPO / "tests" / "data" / "golden")
CONSTRAINED = ("u55-128_hee_shared_size", "u55-256_hee_shared_arena128k", "u65-256_mid_dedicated256k",
               "u65-512_high_dedicated384k")
COLUMNS = ["model", "config", "vela_legacy_cycles", "vela_default_cycles", "heuristic_cycles", "cpsat_cycles",
           "cpsat_vs_heuristic", "cpsat_vs_vela", "cpsat_vs_vela_default", "cpsat_status", "bound", "gap",
           "heuristic_peak", "cpsat_peak", "heuristic_valid", "cpsat_valid", "bytes_sram", "bytes_dram",
           "bytes_offchipflash", "variables", "constraints", "build_seconds", "heuristic_seconds", "cpsat_seconds",
           "heuristic_error", "cpsat_error"]


def hardware_config(name: str, config: dict[str, Any]) -> HardwareConfig:
    """A configs.json entry as a sweep configuration, its --optimise / --arena-cache-size pinned."""
    extra = list(config.get("extra_args", ()))

    def flag(name: str) -> str | None:
        return extra[extra.index(name) + 1] if name in extra else None

    arena, optimise = flag("--arena-cache-size"), flag("--optimise")
    return HardwareConfig(name=name, accelerator_config=config["accelerator_config"],
                          system_config=config["system_config"], memory_mode=config["memory_mode"],
                          config_files=("Arm/vela.ini",), arena_cache_sizes=(int(arena) if arena else None,),
                          optimise=(optimise or "Performance",))


def golden_legacy(config_name: str, model: str) -> float | None:
    path = GOLDEN / "vela-5.2.0-legacy" / config_name / model / "summary.csv"
    if not path.exists():
        return None
    rows = list(csv.DictReader(path.open()))
    return float(rows[0]["cycles_total"]) if rows else None


def comparison_rows(store_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The store's cells as this script's rows (one per model x configuration)."""
    rows = []
    for case in case_rows(store_rows, "heuristic"):
        details = json.loads(case.get("cpsat_details") or "{}").get("model_stats", {})
        row = {name: case.get(name) for name in COLUMNS}
        row.update(bound=case.get("cpsat_bound"), gap=case.get("cpsat_gap"),
                   heuristic_valid="heuristic_cycles" in case or None, cpsat_valid="cpsat_cycles" in case or None,
                   variables=details.get("variables"), constraints=details.get("constraints"),
                   build_seconds=details.get("build_seconds"))
        for area in ("sram", "dram", "offchipflash"):
            moved = case.get(f"cpsat_bytes_{area}")
            row[f"bytes_{area}"] = round(moved) if moved is not None else None
        row["vela_legacy_cycles"] = row["vela_legacy_cycles"] or golden_legacy(row["config"], row["model"])
        for vela, column in (("vela_legacy_cycles", "cpsat_vs_vela"), ("vela_default_cycles", "cpsat_vs_vela_default")):
            if row.get("cpsat_cycles") and row.get(vela):
                row[column] = row["cpsat_cycles"] / row[vela]
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], time_limit: float, workers: int) -> str:
    cols = ["model", "config", "vela_legacy_cycles", "heuristic_cycles", "cpsat_cycles", "cpsat_vs_heuristic",
            "cpsat_vs_vela", "cpsat_status", "bound", "gap", "heuristic_peak", "cpsat_peak", "bytes_sram",
            "bytes_dram", "bytes_offchipflash", "cpsat_seconds"]
    if any(r.get("vela_default_cycles") for r in rows):
        cols.insert(3, "vela_default_cycles")
    lines = [f"CP-SAT time limit {time_limit:g} s, {workers} workers.", "",
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
    parser.add_argument("--vela", action="store_true", help="also run the vela CLI (legacy and default cores)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers per cell")
    parser.add_argument("--store", type=Path, default=Path("compare_baseline.sqlite"))
    parser.add_argument("--csv", type=Path, default=Path("compare_baseline.csv"))
    parser.add_argument("--markdown", type=Path, default=Path("compare_baseline.md"))
    args = parser.parse_args(argv)
    configs = json.loads((GOLDEN / "configs.json").read_text())
    models = find_models((args.model_dir,))
    if args.models:
        models = tuple(m for m in models if m.stem in args.models)
    solvers = ("heuristic", "cpsat", *(("vela-legacy", "vela-default") if args.vela else ()))
    grid = Grid(models=models, configurations=tuple(hardware_config(n, configs[n]) for n in args.configs or configs),
                solvers=solvers, time_limit_seconds=args.time_limit, workers=args.workers)
    # Configuration-major, as the tables are laid out.
    cells = tuple(sorted(expand(grid), key=lambda c: (list(configs).index(c.configuration), c.model)))
    store = sweep_store.open_store(args.store)
    execute = functools.partial(run_local, jobs=args.jobs, guard_seconds=2 * args.time_limit + 300)
    print(run_sweep(cells, store, execute, command=" ".join(sys.argv)).line(str(args.store)), flush=True)
    wanted = {cell.cell_id for cell in cells}
    rows = comparison_rows([r for r in sweep_store.rows(store) if r["cell_id"] in wanted])
    order = {(c.configuration, c.model): i for i, c in enumerate(cells)}
    rows.sort(key=lambda r: order[(r["config"], r["model"])])
    with args.csv.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    args.markdown.write_text(markdown(rows, args.time_limit, args.workers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
