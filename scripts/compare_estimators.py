"""CP-SAT against Vela legacy's schedule under both estimators, so nobody mistakes an artefact for a gain.

    python scripts/compare_estimators.py [--configs NAME ...] [--models NAME ...] [--time-limit 10]
        [--workers 2] [--csv out.csv] [--markdown out.md]

For every corpus model x golden configuration: Vela legacy's schedule (the heuristic, equal to Vela's on the
corpus) and CP-SAT's schedule optimised under each estimator, each priced under both. Prints per configuration
the geometric means of

* ``vela``: CP-SAT optimised for Vela's estimate / Vela legacy, both priced by Vela's estimate (the usual figure);
* ``vela-opt, contention-priced``: that same schedule priced with contention / Vela legacy priced with contention
  (how much of the gain survives when prefetches must share bandwidth);
* ``contention``: CP-SAT optimised for the contention estimate / Vela legacy, both priced with contention.

CP-SAT runs with --deterministic, so a rerun gives the same table.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import CONFIGS, MODELS, VELA_FAILED, model_path  # noqa: E402

from npusched import solve_options  # noqa: E402
from npusched.errors import NpuschedError  # noqa: E402
from npusched.vela.command import run_options_from_vela_args  # noqa: E402

COLUMNS = ["config", "model", "vela_legacy_vela", "vela_legacy_contention", "cpsat_vela_vela",
           "cpsat_vela_contention", "cpsat_contention_contention", "cpsat_contention_vela", "status_vela",
           "status_contention"]


def run_cell(config: str, model: str, time_limit: float, workers: int) -> dict[str, object]:
    """One model under one configuration: the heuristic once, CP-SAT under each estimator."""
    def options(**overrides: object):
        return run_options_from_vela_args(model_path(model), CONFIGS[config], **overrides)

    heuristic = solve_options(options(solver="heuristic")).run
    row: dict[str, object] = {"config": config, "model": model,
                              "vela_legacy_vela": heuristic.cycles_by_estimator["vela"],
                              "vela_legacy_contention": heuristic.cycles_by_estimator["contention"]}
    for estimator in ("vela", "contention"):
        result = solve_options(options(solver="cpsat", estimator=estimator, deterministic=True, workers=workers,
                                       time_limit_seconds=time_limit)).run
        for priced in ("vela", "contention"):
            row[f"cpsat_{estimator}_{priced}"] = result.cycles_by_estimator[priced]
        row[f"status_{estimator}"] = result.status
    if row["cpsat_contention_contention"] > row["vela_legacy_contention"]:
        raise AssertionError(f"{config}/{model}: CP-SAT under contention is worse than the heuristic")
    return row


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def markdown(rows: list[dict[str, object]]) -> str:
    lines = ["| configuration | cells | vela | vela-opt, contention-priced | contention "
             "| optimal (vela / contention) |", "|---|---|---|---|---|---|"]
    for config in dict.fromkeys(r["config"] for r in rows):
        cell = [r for r in rows if r["config"] == config]
        ratio = {name: geomean([float(r[num]) / float(r[den]) for r in cell]) for name, num, den in (
            ("vela", "cpsat_vela_vela", "vela_legacy_vela"),
            ("mixed", "cpsat_vela_contention", "vela_legacy_contention"),
            ("contention", "cpsat_contention_contention", "vela_legacy_contention"))}
        optimal = (sum(r["status_vela"] == "optimal" for r in cell), sum(r["status_contention"] == "optimal"
                                                                        for r in cell))
        lines.append(f"| {config} | {len(cell)} | {ratio['vela']:.3f} | {ratio['mixed']:.3f} | "
                     f"{ratio['contention']:.3f} | {optimal[0]} / {optimal[1]} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for config in args.configs:
        for model in args.models:
            if (config, model) in VELA_FAILED:
                continue
            try:
                rows.append(run_cell(config, model, args.time_limit, args.workers))
            except NpuschedError as exc:
                print(f"{config}/{model}: error: {exc}", file=sys.stderr)
                continue
            r = rows[-1]
            print(f"{config:30} {model:24} legacy {r['vela_legacy_vela']:>11.0f}/{r['vela_legacy_contention']:>11.0f}"
                  f"  cpsat(vela) {r['cpsat_vela_vela']:>11.0f}/{r['cpsat_vela_contention']:>11.0f}"
                  f"  cpsat(contention) {r['cpsat_contention_contention']:>11.0f}", flush=True)
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    table = markdown(rows)
    print(table)
    if args.markdown is not None:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
