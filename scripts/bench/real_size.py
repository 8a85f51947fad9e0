"""Real networks at real sizes: the default run (``solve-schedule --output-dir``) as a user runs it, timed.

    python scripts/bench/real_size.py MODELS... [--configs all] [--limits 30,10] [--csv real_size.csv]
                                      [--large-limits 10] [--large-passes 300] [--summary-only]
                                      [--cores-csv CORES.csv [--per-model]]

For every model (files or folders of .tflite: the zoo of real exports in tests/data/exports, and the full-size
keras.applications exports ``python scripts/export_zoo.py large --out DIR`` regenerates) x golden configuration x
limit: the whole process's wall time and peak memory (its children's, Vela's compile included), each phase's time
as the run reports it, the answer's search against what the plan may share out (``time_plan``), the status and
gap, whether the written file is the answer or the fallback and whether Vela's estimate agrees, and the answer
against each Vela core's own schedule, each priced by its own model (1.0 = as fast). Networks of
``--large-passes`` or more also run at ``--large-limits``. Rows go to the CSV as they finish; a run resumes from
it. The summary gives, per size band and limit, the median and worst wall, the least search share, answers and
fallbacks, and the cells over the limit by more than a second.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from npusched.bench.golden import load_configs, run_options_from_vela_args, select, vela_hardware_args
from npusched.bench.process import solve_schedule
from npusched.bench.stats import geomean
from npusched.bench.table import markdown, read_csv, write_csv
from npusched.bench.vela_cli import core_run
from npusched.sweep.grid import find_models

COLUMNS = ("model", "config", "limit", "passes", "cpu_ops", "wall", "over", "peak_rss_mb", "spent", "compile",
           "read", "lower", "floors", "search_own", "search_vela", "search_share", "status", "gap", "dropped",
           "written", "agreed", "cycles_legacy_model", "cycles_default_model", "vs_legacy", "vs_default",
           "like_for_like", "error")
CORE_COLUMNS = ("model", "config", "legacy_cycles", "legacy_cpu", "default_cycles", "default_cpu", "error")


def measure(model: Path, config_name: str, config: dict[str, Any], limit: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        run = solve_schedule(model, [*vela_hardware_args(config), "--time-limit", f"{limit:g}",
                                     "--output-dir", str(Path(folder) / "out")], Path(folder))
    row: dict[str, Any] = {"model": model.stem, "config": config_name, "limit": limit,
                           "wall": round(run.wall_seconds, 2), "over": round(run.wall_seconds - limit, 2),
                           "peak_rss_mb": round(run.peak_rss_megabytes), "error": run.error}
    doc = run.doc
    if doc is None:
        return row
    timings, stats = run.timings, run.stats
    plan = stats.get("time_plan") or {}
    # What the plan shares out: the limit less start-up, loading and lowering (as the run measured them when it
    # planned) and the predicted compile.
    available = plan.get("limit_seconds", limit) - plan.get("spent_seconds", 0.0) - plan.get("compile_seconds", 0.0)
    backend = doc.get("vela_backend") or {}
    answer = doc["totals"].get("cycles_by_estimator", {})
    own = {floor["core"]: floor["own_cycles"] or floor["cycles_by_estimator"][floor["core"]]
           for floor in doc.get("floors") or []}
    row.update({
        "passes": doc["totals"]["npu_ops"], "cpu_ops": doc["totals"]["cpu_ops"], "spent": plan.get("spent_seconds"),
        "compile": plan.get("compile_seconds"), "read": timings.get("read"), "lower": timings.get("lower"),
        "floors": timings.get("floors"), "search_own": timings.get("search_own"),
        "search_vela": timings.get("search_vela"),
        "search_share": _share(timings, available),
        "status": doc["status"], "gap": doc.get("gap"),
        "dropped": ",".join(d["phase"] for d in plan.get("dropped", [])),
        "written": backend.get("written"), "agreed": backend.get("agreed"),
        "cycles_legacy_model": answer.get("vela-legacy"), "cycles_default_model": answer.get("vela-default"),
        "vs_legacy": _ratio(answer.get("vela-legacy"), own.get("vela-legacy")),
        "vs_default": _ratio(answer.get("vela-default"), own.get("vela-default"))})
    return row


def _share(timings: dict[str, float], available: float) -> float | None:
    """The answer's search (the longer of the two graphs') over what the plan shares out."""
    searched = max(timings.get("search_own", 0.0), timings.get("search_vela", 0.0))
    return round(searched / available, 3) if available > 0 else None


def core_totals(model: Path, config_name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Each Vela core's own total of the file (the `vela` CLI), and the operators it leaves to the CPU."""
    options = run_options_from_vela_args(model, config)
    row: dict[str, Any] = {"model": model.stem, "config": config_name}
    for core, name in (("legacy", "legacy"), ("default", "default")):
        found = core_run(options, core)  # type: ignore[arg-type]
        row[f"{name}_cycles"], row[f"{name}_cpu"] = found.get("cycles"), found.get("cpu")
        if "error" in found:
            row["error"] = "; ".join(filter(None, (row.get("error"), found["error"])))
    return row


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 4) if ours and theirs else None


def summarise(rows: list[dict[str, Any]]) -> str:
    """Per size band and limit: runs, median and worst wall over the limit, least search share, answers written,
    fallbacks, Vela agreeing, and the geomeans of both ratios."""
    bands = ((0, 100), (100, 300), (300, 10**9))
    for row in rows:  # as measured now, whatever version of this script wrote the row
        if row.get("spent") not in (None, ""):
            available = float(row["limit"]) - float(row["spent"]) - float(row["compile"] or 0.0)
            row["search_share"] = _share({k: float(row[k]) for k in ("search_own", "search_vela")
                                          if row.get(k) not in (None, "")}, available)
    table = []
    for low, high in bands:
        for limit in sorted({row["limit"] for row in rows}):
            cell = [r for r in rows if r["limit"] == limit and r.get("passes") and low <= r["passes"] < high]
            if not cell:
                continue
            overs = sorted(r["over"] for r in cell)
            # A search that closes its gap ends early by design: the share is asked of the others.
            open_gap = [r for r in cell if r.get("status") != "optimal" and _open(_number(r.get("gap")))]
            shares = [r["search_share"] for r in open_gap if isinstance(r.get("search_share"), float)]
            early = [r for r in open_gap if float(r["wall"]) < 0.9 * float(limit)]
            table.append({
                "passes": f"{low}-{high if high < 10**9 else ''}", "limit": limit, "runs": len(cell),
                "median over": overs[len(overs) // 2], "worst over": overs[-1],
                "least share, gap > 1%": min(shares) if shares else None,
                "ended early, gap > 1%": len(early),
                "answer": sum(r.get("written") == "answer" for r in cell),
                "fallback": sum(r.get("written") == "fallback" for r in cell),
                "agreed": sum(r.get("agreed") is True for r in cell),
                "vs legacy": _geomean(r.get("vs_legacy") for r in cell),
                "vs default": _geomean(r.get("vs_default") for r in cell),
                "like: worse of two": _geomean(max(_like_ratios(r), default=None) for r in cell
                                               if not r["config"].endswith("_size")),
                "like: over 0.1%": sum(any(x > 1.001 for x in _like_ratios(r)) for r in cell
                                       if not r["config"].endswith("_size"))})
    failed = [f"{r['model']} {r['config']} {r['limit']:g}: {r['error']}" for r in rows if r.get("error")]
    return markdown(table, list(table[0]) if table else ["passes"]) + \
        ("\n\nfailed:\n" + "\n".join(failed) if failed else "")


def per_model(rows: list[dict[str, Any]], cores: list[dict[str, Any]]) -> str:
    """Per model (docs/results/exporters.md's zoo table): CPU operators of the answer and of each core's file
    ("fails": that core stops on it), the cells whose written file is npusched's answer among those with a schedule,
    the errors, and each core's ratio (geomean, worst) over the Performance cells like for like with it."""
    table = []
    for model in sorted({r["model"] for r in rows}):
        cells = [r for r in rows if r["model"] == model]
        own = [r for r in cores if r["model"] == model]
        cpu = max((int(n) for r in cells if (n := _number(r.get("cpu_ops"))) is not None), default=None)
        found = {name: next((int(n) for r in own if (n := _number(r.get(f"{name}_cpu"))) is not None), "fails")
                 for name in ("legacy", "default")}
        scheduled = [r for r in cells if r.get("written")]
        entry: dict[str, Any] = {
            "model": model, "CPU ops: npusched / legacy / default": f"{cpu} / {found['legacy']} / {found['default']}",
            "answer written": f"{sum(r['written'] == 'answer' for r in scheduled)} of {len(scheduled)}",
            "errors": sum(bool(r.get("error")) for r in cells) or ""}
        for name in ("legacy", "default"):
            like = [x for r in cells if not r["config"].endswith("_size") and name in str(r.get("like_for_like"))
                    and (x := _number(r.get(f"vs_{name}"))) is not None]
            entry[f"vs {'Vela legacy' if name == 'legacy' else 'default core'}, like for like (geomean, worst)"] = \
                f"{geomean(like):.3f}, {max(like):.3f}" if like else "—"
        table.append(entry)
    return markdown(table, list(table[0]) if table else ["model"])


def _open(gap: float | None) -> bool:
    """Whether a run's gap is over 1% (no gap reported: open; a gap of 0 is closed)."""
    return gap is None or gap > 0.01


def _like_ratios(row: dict[str, Any]) -> list[float]:
    """The run's ratios to the cores that leave as many operators to the CPU (like for like)."""
    ratios = (_number(row.get(f"vs_{name}")) for name in str(row.get("like_for_like") or "").split(",") if name)
    return [x for x in ratios if x is not None]


def _geomean(values: Any) -> float | None:
    found = [v for v in values if isinstance(v, float) and v > 0 and math.isfinite(v)]
    return round(geomean(found), 4) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--configs", default="all")
    parser.add_argument("--limits", default="30")
    parser.add_argument("--large-limits", default="10")
    parser.add_argument("--large-passes", type=int, default=300)
    parser.add_argument("--csv", type=Path, default=Path("real_size.csv"))
    parser.add_argument("--cores-csv", type=Path, default=None,
                        help="each Vela core's own totals of every model x configuration (the `vela` CLI, not timed), "
                             "kept here and read back: the ratios are then against them (default: the floors')")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--per-model", action="store_true",
                        help="also the per-model table against both cores (needs --cores-csv)")
    args = parser.parse_args()
    rows = read_csv(args.csv) if args.csv.exists() else []
    if not args.summary_only:
        configs = load_configs()
        done = {(r["model"], r["config"], float(r["limit"])) for r in rows}
        for model in find_models(tuple(args.models)) if args.models else ():
            limits = [float(x) for x in args.limits.split(",")]
            for name in select(configs, None if args.configs == "all" else args.configs.split(",")):
                for limit in limits:
                    if (model.stem, name, limit) in done:
                        continue
                    row = measure(model, name, configs[name], limit)
                    rows.append(row)
                    write_csv(args.csv, rows, COLUMNS)
                    print(", ".join(f"{k} {row.get(k)}" for k in ("model", "config", "limit", "passes", "wall",
                                                                  "search_share", "status", "written", "error")),
                          flush=True)
                    if row.get("passes") and row["passes"] >= args.large_passes and limit == limits[-1]:
                        limits += [float(x) for x in args.large_limits.split(",") if float(x) not in limits]
    if args.cores_csv is not None:
        cores = read_csv(args.cores_csv) if args.cores_csv.exists() else []
        known = {(r["model"], r["config"]) for r in cores}
        configs = load_configs()
        for model in find_models(tuple(args.models)) if args.models else ():
            for name in select(configs, None if args.configs == "all" else args.configs.split(",")):
                if (model.stem, name) not in known:
                    cores.append(core_totals(model, name, configs[name]))
                    write_csv(args.cores_csv, cores, CORE_COLUMNS)
        by_cell = {(r["model"], r["config"]): r for r in cores}
        for row in rows:
            core = by_cell.get((row["model"], row["config"]), {})
            row["vs_legacy"] = _ratio(_number(row.get("cycles_legacy_model")), _number(core.get("legacy_cycles")))
            row["vs_default"] = _ratio(_number(row.get("cycles_default_model")), _number(core.get("default_cycles")))
            # The cores whose file leaves the same number of operators to the CPU as the run's.
            cpu_ops = _number(row.get("cpu_ops"))
            row["like_for_like"] = ",".join(name for name in ("legacy", "default")
                                            if cpu_ops is not None and _number(core.get(f"{name}_cpu")) == cpu_ops)
    print(summarise(rows))
    if args.per_model and args.cores_csv is not None:
        print("\n" + per_model(rows, cores))
    return 0


def _number(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


if __name__ == "__main__":
    sys.exit(main())
