"""The default run of several releases on the same files and configurations: their answers by each Vela core's
model, their gaps and bounds, and each answer priced by the first release's objective.

    python scripts/bench/releases.py MODELS... --tree head=. --tree cd5763c=/work/base --tree e9146ec=/work/old
                                     [--configs all] [--limit 30] [--output-dir-for head] [--csv releases.csv]
                                     [--summary-only]

Each ``--tree NAME=PATH`` is a checkout of a release (``git worktree add PATH COMMIT``); its ``solve-schedule`` runs
from it (``python -m npusched.app.cli`` with the checkout as the working directory, the current environment's
dependencies). ``--output-dir-for`` names the releases run with ``--output-dir`` (as a user deploys; the others
without, which leaves them more of the limit to search). Rows go to the CSV as they finish; a run resumes from it.

The summary gives, per file and configuration, the first release's status and gap, and its answer over each other
release's by Vela legacy's model, by the default core's, and weighed as the first release's objective weighs the two
(its JSON's ``objective``, "both: vela-legacy x a + vela-default x b, ...": a x legacy + b x default cycles), and
whether it is no worse by that objective, its over-cap penalty included (what the run minimises). The releases'
cycles are each release's own figures: compare only releases whose cost models price alike.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from npusched.bench.golden import load_configs, select, vela_hardware_args
from npusched.bench.process import solve_schedule
from npusched.bench.stats import TOLERANCE, number, ratio
from npusched.bench.table import markdown, read_csv, write_csv
from npusched.sweep.grid import find_models

COLUMNS = ("model", "config", "release", "limit", "wall", "status", "gap", "objective", "any_bound", "bound",
           "legacy_cycles", "default_cycles", "written", "error")
_BOTH = re.compile(r"both: vela-legacy x ([0-9.e+-]+) \+ vela-default x ([0-9.e+-]+)(?:, each over ([0-9,.]+) x "
                   r"([0-9.]+))?")


def measure(model: Path, config_name: str, config: dict[str, Any], release: str, tree: Path, limit: float,
            output_dir: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        extra = ["--output-dir", str(Path(folder) / "out")] if output_dir else []
        run = solve_schedule(model, [*vela_hardware_args(config), "--time-limit", f"{limit:g}", *extra],
                             Path(folder), cwd=tree.resolve())
    row: dict[str, Any] = {"model": model.stem, "config": config_name, "release": release, "limit": limit,
                           "wall": round(run.wall_seconds, 2), "error": run.error}
    doc = run.doc
    if doc is not None:
        by_model = doc["totals"].get("cycles_by_estimator") or {}
        row.update(status=doc.get("status"), gap=doc.get("gap"), objective=doc.get("objective"),
                   any_bound=doc.get("any_schedule_bound_cycles"), bound=doc.get("bound_cycles"),
                   legacy_cycles=by_model.get("vela-legacy"), default_cycles=by_model.get("vela-default"),
                   written=(doc.get("vela_backend") or {}).get("written"))
    return row


def weighted(objective: str, legacy: float, default: float, *, penalised: bool = False) -> float | None:
    """``legacy`` and ``default`` cycles weighed as ``objective`` (a JSON's ``objective`` field, "both: ...") weighs
    them; ``penalised``: plus its over-cap penalty (what the run minimises: an answer slower than a core by that
    core's model costs ``P`` times its excess), else without it (a ratio of penalised sums says little). None for
    an objective of one model."""
    found = _BOTH.match(objective or "")
    if found is None:
        return None
    parts = (float(found[1]) * legacy, float(found[2]) * default)
    cap = float(found[3].replace(",", "")) if found[3] else 0.0
    excess = sum(max(0.0, part - cap) for part in parts) if penalised and cap > 0 else 0.0
    return sum(parts) + float(found[4] or 0.0) * excess


def summarise(rows: list[dict[str, Any]], releases: list[str]) -> str:
    """Per file and configuration: the first release's status and gap (against its own bound), and its answer over
    each other release's by each core's model and by the first release's weights. Releases weigh the two models
    alike only where both cores' own schedules come out alike, so their bounds are not compared."""
    first, others = releases[0], releases[1:]
    by_cell: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_cell.setdefault((row["model"], row["config"]), {})[row["release"]] = row
    table = []
    for (model, config), cell in sorted(by_cell.items()):
        ours = cell.get(first) or {}
        legacy, default = number(ours.get("legacy_cycles")), number(ours.get("default_cycles"))
        entry: dict[str, Any] = {"model": model, "config": config, "status": ours.get("status") or ours.get("error"),
                                 "gap": _rounded(number(ours.get("gap")))}
        objective = str(ours.get("objective") or "")
        own = weighted(objective, legacy, default) if legacy and default else None
        for release in others:
            other = cell.get(release) or {}
            their_legacy, their_default = number(other.get("legacy_cycles")), number(other.get("default_cycles"))
            known = bool(their_legacy and their_default and legacy and default)
            theirs = weighted(objective, their_legacy, their_default) if known else None
            entry[f"/ {release}: legacy, default, weighted"] = ", ".join(
                "—" if x is None else f"{x:.3f}" for x in (ratio(legacy, their_legacy), ratio(default, their_default),
                                                         ratio(own, theirs)))
            entry[f"no worse than {release} (0.1%), objective"] = \
                weighted(objective, legacy, default, penalised=True) <= TOLERANCE * weighted(  # type: ignore[operator]
                    objective, their_legacy, their_default, penalised=True) if known else None
        table.append(entry)
    return markdown(table, list(table[0]) if table else ["model"])


def _rounded(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a release's checkout (the first is the one compared)")
    parser.add_argument("--configs", default="all")
    parser.add_argument("--limit", type=float, default=30.0)
    parser.add_argument("--output-dir-for", default="", help="releases run with --output-dir (comma-separated)")
    parser.add_argument("--csv", type=Path, default=Path("releases.csv"))
    parser.add_argument("--summary-only", action="store_true")
    args = parser.parse_args()
    trees = dict(tree.split("=", 1) for tree in args.tree)
    if not trees:
        parser.error("give at least one --tree NAME=PATH")
    rows = read_csv(args.csv) if args.csv.exists() else []
    if not args.summary_only:
        configs = load_configs()
        done = {(r["model"], r["config"], r["release"]) for r in rows}
        deployed = set(args.output_dir_for.split(","))
        for model in find_models(tuple(args.models)):
            for name in select(configs, None if args.configs == "all" else args.configs.split(",")):
                for release, tree in trees.items():
                    if (model.stem, name, release) in done:
                        continue
                    row = measure(model, name, configs[name], release, Path(tree), args.limit, release in deployed)
                    rows.append(row)
                    write_csv(args.csv, rows, COLUMNS)
                    print(", ".join(f"{k} {row.get(k)}" for k in ("model", "config", "release", "wall", "status",
                                                                  "gap", "error")), flush=True)
    print(summarise(rows, list(trees)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
