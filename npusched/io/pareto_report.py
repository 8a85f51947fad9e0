"""The cycles-vs-fast-storage frontier (``npusched.solvers.pareto``) as CSV and as the table `--pareto` prints.

CSV columns, one row per limit tried, ascending:

* ``limit_bytes``: the fast-storage limit (arena size in Shared_Sram, cache size in Dedicated_Sram);
* ``cycles``: total cycles of the fastest verified schedule found within it (never more than a smaller limit's);
* ``peak_fast_storage_bytes``: that schedule's peak fast-storage use (at most ``limit_bytes``);
* ``bound_cycles``, ``gap``: CP-SAT's lower bound at this limit over its candidate space and the gap
  ``(cycles - bound) / cycles`` (empty when no bound was proven);
* ``on_frontier``: 1 when the point is faster than every smaller limit's, else 0 (more memory bought nothing);
* ``found_at_limit_bytes``: the limit whose solve found the schedule;
* ``vela_cycles``, ``vela_sram_used_bytes``, ``vela_error``: Vela legacy's cycles and the SRAM it used with
  ``--arena-cache-size limit_bytes`` (empty without ``--with-vela``; the error when Vela failed).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from npusched.errors import OutputError
from npusched.solvers.pareto import ParetoRun, VelaPoint

COLUMNS = ("limit_bytes", "cycles", "peak_fast_storage_bytes", "bound_cycles", "gap", "on_frontier",
           "found_at_limit_bytes", "vela_cycles", "vela_sram_used_bytes", "vela_error")


def csv_rows(run: ParetoRun) -> list[dict[str, object]]:
    """The CSV's rows as dicts keyed by ``COLUMNS`` (empty strings for what is unknown)."""
    vela = {v.limit_bytes: v for v in run.vela}
    rows: list[dict[str, object]] = []
    for point in run.frontier.points:
        theirs = vela.get(point.limit_bytes, VelaPoint(point.limit_bytes, error=""))
        rows.append({
            "limit_bytes": point.limit_bytes,
            "cycles": round(point.cycles),
            "peak_fast_storage_bytes": point.peak_fast_storage_bytes,
            "bound_cycles": "" if math.isnan(point.bound_cycles) else round(point.bound_cycles),
            "gap": "" if math.isnan(point.gap) else f"{point.gap:.6f}",
            "on_frontier": int(point.on_frontier),
            "found_at_limit_bytes": point.found_at_limit_bytes,
            "vela_cycles": "" if math.isnan(theirs.cycles) else round(theirs.cycles),
            "vela_sram_used_bytes": "" if theirs.sram_used_bytes < 0 else theirs.sram_used_bytes,
            "vela_error": theirs.error,
        })
    return rows


def write_pareto_csv(run: ParetoRun, path: Path) -> None:
    """Write the CSV (columns as in the module docstring)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_rows(run))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.getvalue(), encoding="utf-8")
    except OSError as exc:
        raise OutputError(f"--pareto {path}: cannot write ({exc.strerror or exc})") from None


def format_pareto(run: ParetoRun) -> str:
    """The frontier as a text table, with how its ends were found and Vela's points when there are any."""
    frontier = run.frontier
    last = frontier.frontier[-1]
    lines = [f"Cycles against fast storage: {run.model_name} on {run.hardware} (CP-SAT, every point verified)",
             f"  smallest fit: {frontier.smallest_fit_bytes} bytes"
             + ("" if frontier.smallest_fit_proven else " (not proven the least)"),
             f"  more memory stops helping at: {last.peak_fast_storage_bytes} bytes ({last.cycles:.0f} cycles)", ""]
    header = f"{'limit (bytes)':>14} {'cycles':>12} {'peak (bytes)':>13} {'bound':>12} {'gap':>7} {'frontier':>8}"
    if run.vela:
        header += f" {'Vela legacy cycles':>19} {'Vela SRAM used':>15}"
    lines.append(header)
    for row in csv_rows(run):
        gap = f"{float(str(row['gap'])):.2%}" if row["gap"] != "" else "-"
        line = (f"{row['limit_bytes']:>14} {row['cycles']:>12} {row['peak_fast_storage_bytes']:>13} "
                f"{row['bound_cycles'] if row['bound_cycles'] != '' else '-':>12} {gap:>7} "
                f"{'yes' if row['on_frontier'] else 'no':>8}")
        if run.vela:
            line += (f" {row['vela_cycles']:>19} {row['vela_sram_used_bytes']:>15}" if not row["vela_error"]
                     else f"  Vela failed: {row['vela_error']}")
        lines.append(line)
    lines.extend(f"note: {note}" for note in frontier.notes)
    return "\n".join(lines)
