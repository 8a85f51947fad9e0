"""What a grid of ``versus`` rows sums up to: each run against each core's own total (geometric mean, worst, the
cells over 1 and why), each CP-SAT run against every other run priced by each cost model (the "like for like"
tables: both schedules of the same graph, priced the same way), the failures, and several grids side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from npusched.bench.stats import TOLERANCE, number, ratio, spread
from npusched.bench.table import markdown
from npusched.bench.versus import CORES, ESTIMATOR_KEYS, RunSpec

__all__ = ["core_summary", "failures", "grids_table", "pair_summary"]

Row = dict[str, Any]
_CORE_NAMES = {"legacy": "Vela legacy", "default": "the default core"}


def _name(row: Row) -> str:
    return f"{row['model']}/{row['style']}/{row['config']}"


def _more_on_npu(row: Row, spec: RunSpec, column: str) -> str:
    """Where the run puts operators on the NPU that a core leaves to the CPU, that core's total leaves their time
    out: said beside a ratio over 1 against it."""
    said = []
    for core, name in _CORE_NAMES.items():
        theirs, ours = number(row.get(f"{core}_cpu")), number(row.get(f"{spec.key}_cpu"))
        if column in (f"vs_{core}", "vs_worse") and theirs is not None and ours is not None and theirs > ours:
            said.append(f"{theirs - ours:.0f} more on the NPU than {name}")
    return f" ({', '.join(said)}, whose total leaves them out)" if said else ""


def core_summary(rows: Sequence[Row], specs: Sequence[RunSpec]) -> list[str]:
    """Per run: each ratio's spread over the counted cells (and over all of them), the cells over the tolerance,
    the excluded cells and those without both ratios."""
    lines = []
    for spec in specs:
        counted = [r for r in rows if not r.get(f"{spec.key}_excluded")]
        lines.append(f"== {spec.label} against each core's own total, priced by that core's model ==")
        for column in ("vs_legacy", "vs_default", "vs_worse", "peak_vs_min"):
            key = f"{spec.key}_{column}"
            if column == "peak_vs_min" and not any(r.get("optimise") == "Size" for r in rows):
                continue
            over = [f"{_name(r)} {number(r[key]):.3f}{_more_on_npu(r, spec, column)}" for r in counted
                    if (number(r.get(key)) or 0) > TOLERANCE]
            every = f" (with the excluded: {spread(number(r.get(key)) for r in rows)})" if len(counted) < len(rows) \
                else ""
            lines.append(f"{column}: {spread(number(r.get(key)) for r in counted)}{every}"
                         + (f"; over {TOLERANCE}: {'; '.join(over)}" if over else ""))
        excluded = [f"{_name(r)} ({r[f'{spec.key}_excluded']})" for r in rows if r.get(f"{spec.key}_excluded")]
        missing = [_name(r) for r in counted if r.get(f"{spec.key}_vs_worse") in (None, "")]
        lines.append(f"excluded: {len(excluded)}" + (f" ({'; '.join(excluded)})" if excluded else ""))
        lines.append(f"without both ratios: {len(missing)}" + (f" ({'; '.join(missing)})" if missing else ""))
    return lines


def _priced(specs: Sequence[RunSpec], cores: bool) -> list[str]:
    """The cost models worth a column: those the runs optimise under, and both cores' with the cores."""
    wanted = {s.estimator or CORES["legacy"] for s in specs} | (set(CORES.values()) if cores else set())
    return [name for name in ESTIMATOR_KEYS if name in wanted]


def pair_summary(rows: Sequence[Row], specs: Sequence[RunSpec], cores: bool = False) -> list[str]:
    """Per configuration and over all: every CP-SAT run / every other run, each priced by each cost model in
    play (Markdown, one table per group)."""
    pairs = [(a, b) for a in specs if a.solver == "cpsat" for b in specs if b != a]
    if not pairs:
        return []
    priced = _priced(specs, cores)
    lines = []
    groups = [*dict.fromkeys(r["config"] for r in rows), "all"]
    for group in groups:
        members = [r for r in rows if group in ("all", r["config"])]
        table = []
        for a, b in pairs:
            line: Row = {"pair": f"{a.label} / {b.label}"}
            for name in priced:
                by = f"by_{ESTIMATOR_KEYS[name]}"
                line[name] = str(spread(ratio(r.get(f"{a.key}_{by}"), r.get(f"{b.key}_{by}")) for r in members))
            table.append(line)
        lines += ["", f"{group} ({len(members)} cells):", "",
                  markdown(table, ["pair", *priced], ["ours / theirs", *(f"priced by {p}" for p in priced)],
                           cell=lambda _, value: str(value))]
    return lines


def failures(rows: Sequence[Row], specs: Sequence[RunSpec]) -> list[str]:
    """One line per failed run or core, never dropped."""
    failed = [f"{_name(r)} vela {core}: {r[f'{core}_error']}" for r in rows for core in CORES if r.get(f"{core}_error")]
    failed += [f"{_name(r)} {s.label}: {r.get(f'{s.key}_note', '')}" for r in rows for s in specs
               if r.get(f"{s.key}_status") == "error"]
    return [f"{len(failed)} failed runs" + (":" if failed else ""), *failed]


def grids_table(grids: Mapping[str, Sequence[Row]]) -> str:
    """Several grids' first run against both cores, paired over the cells every grid has both ratios for (the
    excluded ones too): per grid, each ratio's spread."""
    def first_run(rows: Sequence[Row]) -> str:
        keys = [k[: -len("_vs_worse")] for k in (rows[0] if rows else {}) if k.endswith("_vs_worse")]
        if not keys:
            raise ValueError("a grid without ratios against both cores")
        return next((k for k in keys if k.startswith("cpsat")), keys[0])

    keyed = {label: (first_run(rows), {(r["model"], r["style"], r["config"]): r for r in rows})
             for label, rows in grids.items()}
    common = set.intersection(*({c for c, r in cells.items() if r.get(f"{k}_vs_worse") not in (None, "")}
                                for k, cells in keyed.values()))
    table = [{"grid": label, **{column: str(spread(number(cells[c][f"{k}_{column}"]) for c in common))
                                for column in ("vs_legacy", "vs_default", "vs_worse")}}
             for label, (k, cells) in keyed.items()]
    return markdown(table, ["grid", "vs_legacy", "vs_default", "vs_worse"],
                    [f"{len(common)} cells", "priced by vela-legacy, against the legacy core",
                     "priced by vela-default, against the default core", "the worse of the two"],
                    cell=lambda _, value: str(value))
