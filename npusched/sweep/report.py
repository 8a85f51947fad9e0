"""Tables from a store: per model x configuration one row with every solver's figures, and per configuration the
geometric mean of each solver's cycles over a baseline solver's.

Only cells with a schedule count; several seeds of a cell are combined by their geometric mean (the seeds of a
deterministic solve usually agree, and a ratio of geomeans is a geomean of ratios).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from npusched.sweep.grid import SOLVERS, GridError

# Per solver in a case row: store column -> suffix of the case column ("cpsat_cycles", "cpsat_peak", ...).
_SOLVER_FIELDS = {"cycles": "cycles", "status": "status", "bound_cycles": "bound", "gap": "gap",
                  "peak_fast_storage_bytes": "peak", "bytes_sram": "bytes_sram", "bytes_dram": "bytes_dram",
                  "bytes_onchipflash": "bytes_onchipflash", "bytes_offchipflash": "bytes_offchipflash",
                  "wall_seconds": "seconds", "details": "details"}


def key(solver: str) -> str:
    """The column prefix of a solver ('vela-cli-legacy' -> 'vela_cli_legacy')."""
    return solver.replace("-", "_")


def geomean(values: Iterable[float | None]) -> float:
    """Geometric mean of the positive values (NaN when there are none)."""
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def solvers_in(rows: list[dict[str, Any]]) -> list[str]:
    """The solvers present, in the canonical order."""
    present = {row["solver"] for row in rows}
    return [s for s in SOLVERS if s in present]


def check_baseline(rows: list[dict[str, Any]], baseline: str) -> list[str]:
    """The solvers in the rows; raises if the baseline is not among them."""
    solvers = solvers_in(rows)
    if baseline not in solvers:
        raise GridError(f"baseline solver '{baseline}' is not in the store (it has: {', '.join(solvers) or 'none'})")
    return solvers


def case_rows(rows: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """One dict per (model, configuration) in store order: ``<solver>_<field>`` for every solver with a schedule
    there, and ``<solver>_vs_<baseline>`` cycle ratios."""
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        groups[(row["model"], row["configuration"])][row["solver"]].append(row)
    cases = []
    for (model, configuration), by_solver in groups.items():
        case: dict[str, Any] = {"model": model, "config": configuration}
        for solver, cells in by_solver.items():
            done = [c for c in cells if c["outcome"] == "done"]
            if not done:
                case[f"{key(solver)}_error"] = cells[0]["error"]
                continue
            for column, suffix in _SOLVER_FIELDS.items():
                case[f"{key(solver)}_{suffix}"] = _combine([c[column] for c in done], column)
            case[f"{key(solver)}_optimal"] = sum(c["status"] == "optimal" for c in done)
        base = case.get(f"{key(baseline)}_cycles")
        for solver in by_solver:
            cycles = case.get(f"{key(solver)}_cycles")
            if solver != baseline and cycles and base:
                case[f"{key(solver)}_vs_{key(baseline)}"] = cycles / base
        cases.append(case)
    return cases


def _combine(values: list[Any], column: str) -> Any:
    """Several seeds of one cell: geomean of cycles, mean of other numbers, the first seed's text."""
    numbers = [v for v in values if isinstance(v, int | float)]
    if len(values) == 1 or len(numbers) != len(values):
        return values[0]
    return geomean(numbers) if column == "cycles" else sum(numbers) / len(numbers)


def geomean_rows(cases: list[dict[str, Any]], baseline: str, solvers: list[str]) -> list[dict[str, Any]]:
    """Per configuration (and over all of them): the number of cases, each solver's geomean ratio to the
    baseline, and how many CP-SAT cases are proven optimal."""
    others = [s for s in solvers if s != baseline]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        groups[case["config"]].append(case)
    table = []
    for config, members in [*groups.items(), ("all", cases)]:
        row: dict[str, Any] = {"config": config, "cases": len(members)}
        for solver in others:
            row[f"{key(solver)}_vs_{key(baseline)}"] = geomean(c.get(f"{key(solver)}_vs_{key(baseline)}")
                                                              for c in members)
        if "cpsat" in solvers:
            row["cpsat_optimal"] = sum(1 for c in members if c.get("cpsat_optimal"))
        table.append(row)
    return table


def fmt(value: Any) -> str:
    """Cells of the Markdown tables: ratios to 3 decimals, cycles and bytes as whole numbers."""
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def markdown_table(rows: list[dict[str, Any]], columns: list[str], headers: list[str] | None = None) -> list[str]:
    lines = ["| " + " | ".join(headers or columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(fmt(row.get(c)) for c in columns) + " |" for row in rows]


def markdown_report(rows: list[dict[str, Any]], baseline: str, title: str) -> str:
    """The whole report: counts, the geomean table, the per-case table and the failed cells."""
    others = [s for s in check_baseline(rows, baseline) if s != baseline]
    solvers = [baseline, *others]
    cases = case_rows(rows, baseline)
    failed = [r for r in rows if r["outcome"] != "done"]
    lines = [f"# Sweep report: {title}", "",
             f"{len(rows)} cells: {len(rows) - len(failed)} with a schedule, {len(failed)} failed. "
             f"Ratios are cycles / {baseline} cycles (geometric means over the models with both).", "",
             f"## Geometric mean per configuration, against {baseline}", ""]
    columns = ["config", "cases", *(f"{key(s)}_vs_{key(baseline)}" for s in others)]
    headers = ["configuration", "cases", *(f"{s} / {baseline}" for s in others)]
    if "cpsat" in solvers:
        columns.append("cpsat_optimal")
        headers.append("cpsat proven optimal")
    lines += markdown_table(geomean_rows(cases, baseline, solvers), columns, headers)
    lines += ["", "## Per model and configuration", ""]
    columns = ["model", "config", *(f"{key(s)}_cycles" for s in solvers),
               *(f"{key(s)}_vs_{key(baseline)}" for s in others), *(f"{key(s)}_peak" for s in solvers)]
    if "cpsat" in solvers:
        columns += ["cpsat_status", "cpsat_bound", "cpsat_gap"]
    lines += markdown_table(cases, columns)
    if failed:
        lines += ["", "## Failed cells", ""]
        lines += markdown_table([{**r, "error": (r["error"] or "").replace("|", "/")} for r in failed],
                                ["model", "configuration", "solver", "seed", "status", "error"])
    return "\n".join(lines) + "\n"


def write_table(cases: list[dict[str, Any]], output: Path | None, fmt_name: str) -> None:
    """The per-case table as CSV (to stdout without ``output``) or Parquet (columns: the union over rows, in
    first-seen order)."""
    columns = list(dict.fromkeys(name for case in cases for name in case))
    if fmt_name == "csv":
        import csv

        with contextlib.ExitStack() as stack:
            handle = stack.enter_context(output.open("w", newline="")) if output else sys.stdout
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(cases)
        return
    try:
        import pandas
        import pyarrow  # noqa: F401  (pandas needs it for Parquet; fail with the fix, not deep inside pandas)
    except ImportError:
        raise GridError("--format parquet needs pandas and pyarrow: pip install 'npusched[parquet]'") from None
    pandas.DataFrame(cases, columns=columns).to_parquet(output, index=False)
