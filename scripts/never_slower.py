#!/usr/bin/env python3
"""Issue 31's grid: npusched's default run against both Vela cores' own schedules, each priced by its own model.

Usage: python scripts/never_slower.py [--archs a,b] [--styles plain,keras,torch] [--configs c1,c2] [--passes 60]
           [--seed 0] [--time-limit 30] [--workers N] [--deterministic] [--objective O] [--estimator E]
           [--int16] [--segmentation] [--without REWRITES] [--size] [--compile] [--cores-from CSV] [--csv PATH]
           [--resume] [--summary-only]
           [--table LABEL=CSV ...]

For every netgen architecture x export style (plain, Keras-style, PyTorch-style) x golden configuration (the grid
of scripts/normalise_figures.py), or with --corpus every corpus model x configuration, it runs, on the same file:
- ``vela --debug-force-legacy-core`` and ``vela`` (the default core): each core's own summary total, SRAM used and
  CPU operators;
- ``solve-schedule`` as a user runs it (CP-SAT, ``--time-limit``; ``--deterministic --workers 1`` makes the grid
  reproducible on a loaded machine), and prices its schedule under both cost models (the run's
  ``cycles_by_estimator``).

A cell's ``ratio_legacy`` is npusched under the legacy model / the legacy core's own total, ``ratio_default``
npusched under the default core's model / the default core's own total, ``ratio_max`` the worse of the two. For
Size configurations ``peak_vs_min`` is npusched's fast storage (its allocation, or the network's peak where CPU
operators keep more live) against the smaller of the two cores' SRAM. A cell where the default core leaves fewer
operators on the CPU than npusched's graph is marked ``excluded`` (it runs work npusched cannot yet express; the
coverage issue's cases): its ratios are printed but not counted. Failures are rows with their reason.
``--size`` runs each configuration's Size variant (arena limit dropped); ``--cores-from`` reuses both cores'
columns of an earlier grid, so that a change to npusched is measured without running Vela again.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched.app.pipeline import run  # noqa: E402
from npusched.errors import NpuschedError  # noqa: E402
from npusched.frontend import normalise as normalisation  # noqa: E402
from npusched.frontend.tflite_reader import parse_tflite  # noqa: E402
from npusched.netgen import ARCHITECTURES, generate  # noqa: E402
from npusched.vela.backend import compile_schedule  # noqa: E402
from npusched.vela.command import last_line, run_options_from_vela_args, run_vela  # noqa: E402
from npusched.vela.report import read_summary  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden" / "configs.json"
CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus"
STYLES = ("plain", "keras", "torch")
TOLERANCE = 1.001
VELA_TIMEOUT_SECONDS = 900.0
COLUMNS = ["arch", "style", "config", "legacy_cycles", "legacy_sram", "legacy_cpu", "default_cycles",
           "default_sram", "default_cpu", "status", "note", "ns_legacy_cycles", "ns_default_cycles", "ns_sram",
           "ns_cpu", "ns_subgraphs", "ratio_legacy", "ratio_default", "ratio_max", "peak_vs_min", "excluded",
           "seconds", "legacy_subgraphs", "default_subgraphs", "compiled"]


def core_run(model: Path, config: dict[str, Any], core: str) -> dict[str, Any]:
    """The core's own total cycles, SRAM used (bytes), CPU operators and NPU subgraphs (the Ethos-U custom
    operators of the file it writes) on ``model``, or why it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        done = run_vela(run_options_from_vela_args(model, config), Path(tmp), core=core,  # type: ignore[arg-type]
                        timeout_seconds=VELA_TIMEOUT_SECONDS)
        summaries = list(Path(tmp).glob("*_summary_*.csv"))
        if done.returncode != 0 or not summaries:
            return {"error": f"vela {core} failed: {last_line(done)}"}
        summary = read_summary(summaries[0])
        cpu = re.search(r"^CPU operators = (\d+)", done.stdout, re.MULTILINE)
        written = list(Path(tmp).glob("*_vela.tflite"))
        try:
            subgraphs: int | str = sum(op.opcode == "CUSTOM"
                                       for op in parse_tflite(written[0].read_bytes()).main.operators)
        except (IndexError, NpuschedError):  # none written, or a file the reader refuses (the default core's
            subgraphs = ""                   # of a Keras export can hold a buffer longer than its shape)
        return {"cycles": float(summary["cycles_total"]), "sram": round(float(summary["sram_memory_used"]) * 1024),
                "cpu": int(cpu.group(1)) if cpu else "", "subgraphs": subgraphs}


def npusched_run(model: Path, config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    options = run_options_from_vela_args(model, config, solver="cpsat", time_limit_seconds=args.time_limit,
                                         workers=args.workers, deterministic=args.deterministic,
                                         **({"objective": args.objective} if args.objective else {}),
                                         **({"estimator": args.estimator} if args.estimator else {}))
    try:
        result = run(options)
    except NpuschedError as exc:
        return {"status": "error", "note": str(exc)[:200]}
    _, evaluation = result.solved()
    note = result.solver_report.reason if result.solver_report is not None else ""
    compiled = compile_verdict(result)[0] if args.compile else ""
    return {"status": result.status, "note": note[:200], "compiled": compiled,
            "ns_legacy_cycles": result.cycles_by_estimator["vela-legacy"],
            "ns_default_cycles": result.cycles_by_estimator["vela-default"],
            "ns_sram": max(evaluation.allocation.size_bytes, evaluation.network_peak_fast_storage),
            "ns_cpu": len(result.network.cpu_ops), "ns_subgraphs": len(result.network.subgraphs)}


def compile_verdict(result: Any) -> tuple[str, int | None]:
    """Vela's backend compiling ``result`` (``--output-dir``, into a scratch directory): "yes" when Vela's estimate
    agrees and its allocation is within the limit, else why not; and the fast storage Vela's allocator used."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = compile_schedule(result, Path(tmp))
        except NpuschedError as exc:
            return f"refused: {exc}"[:200], None
    verdict = "yes" if done.agreed and done.allocation_fits else \
        "; ".join(done.warnings())[:200] or "allocation over the limit"
    return verdict, done.vela_allocation_bytes


def without_arena(config: dict[str, Any]) -> list[str]:
    """``config``'s extra Vela arguments without its arena limit."""
    extra = list(config.get("extra_args", ()))
    if "--arena-cache-size" in extra:
        at = extra.index("--arena-cache-size")
        del extra[at:at + 2]
    return extra


def size_variant(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` under ``--optimise Size``, without its arena limit (so that every core reports its peak)."""
    return {**config, "extra_args": without_arena(config) + ["--optimise", "Size"]}


def cell(arch: str, style: str, name: str, config: dict[str, Any], model: Path, args: argparse.Namespace,
         cores: dict[str, str] | None = None) -> dict[str, Any]:
    """One cell; ``cores``: both cores' columns from an earlier grid (not run again)."""
    start = time.monotonic()
    row: dict[str, Any] = {"arch": arch, "style": style, "config": name}
    if cores is not None:
        row.update({k: _number(v) for k, v in cores.items() if v not in (None, "")})
    for core in ("legacy", "default") if cores is None else ():
        done = core_run(model, config, core)
        if "error" in done:
            row[f"{core}_cycles"] = done["error"][:120]
            continue
        row.update({f"{core}_{key}": value for key, value in done.items()})
    row.update(npusched_run(model, config, args))
    for ratio, ours, theirs in (("ratio_legacy", "ns_legacy_cycles", "legacy_cycles"),
                                ("ratio_default", "ns_default_cycles", "default_cycles")):
        if isinstance(row.get(ours), float) and isinstance(row.get(theirs), float):
            row[ratio] = round(row[ours] / row[theirs], 4)
    known = [row[r] for r in ("ratio_legacy", "ratio_default") if r in row]
    row["ratio_max"] = max(known) if len(known) == 2 else ""
    cores_sram = [row[k] for k in ("legacy_sram", "default_sram") if isinstance(row.get(k), int)]
    if "--optimise" in config.get("extra_args", ()) and cores_sram and isinstance(row.get("ns_sram"), int):
        row["peak_vs_min"] = round(row["ns_sram"] / min(cores_sram), 4)
    if isinstance(row.get("default_cpu"), int) and isinstance(row.get("ns_cpu"), int) \
            and row["default_cpu"] < row["ns_cpu"]:
        row["excluded"] = f"default core runs {row['ns_cpu'] - row['default_cpu']} more operators on the NPU"
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def _number(text: str) -> float | int | str:
    """A CSV cell as the grid wrote it: cycles are floats, bytes and counts ints, failures text."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _more_on_npu(row: dict[str, Any], key: str) -> str:
    """Where npusched runs operators on the NPU that a core leaves to the CPU, that core's total leaves their time
    out: said beside a ratio over 1 against it."""
    said = []
    for core, name, ratios in (("legacy", "Vela legacy", ("ratio_legacy", "ratio_max")),
                               ("default", "the default core", ("ratio_default", "ratio_max"))):
        theirs, ours = row.get(f"{core}_cpu"), row.get("ns_cpu")
        if key in ratios and isinstance(theirs, int) and isinstance(ours, int) and theirs > ours:
            said.append(f"{theirs - ours} more on the NPU than {name}")
    return f" ({', '.join(said)}, whose total leaves them out)" if said else ""


def summarise(rows: list[dict[str, Any]]) -> list[str]:
    counted = [r for r in rows if not r.get("excluded")]
    lines = []
    for key in ("ratio_legacy", "ratio_default", "ratio_max", "peak_vs_min"):
        values = [float(r[key]) for r in counted if r.get(key) not in (None, "")]
        every = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
        over = [f"{r['arch']}/{r['style']}/{r['config']} {float(r[key]):.3f}{_more_on_npu(r, key)}" for r in counted
                if r.get(key) not in (None, "") and float(r[key]) > TOLERANCE]
        lines.append(f"{key}: {len(values)} cells, geomean {geomean(values):.3f}, max "
                     f"{max(values, default=math.nan):.3f} (with the excluded: {len(every)} cells, geomean "
                     f"{geomean(every):.3f}, max {max(every, default=math.nan):.3f}); over {TOLERANCE}: {len(over)}"
                     + (f" ({'; '.join(over)})" if over else ""))
    excluded = [f"{r['arch']}/{r['style']}/{r['config']} ({r['excluded']})" for r in rows if r.get("excluded")]
    failed = [f"{r['arch']}/{r['style']}/{r['config']}" for r in counted if r.get("ratio_max") in (None, "")]
    lines.append(f"excluded: {len(excluded)}" + (f" ({'; '.join(excluded)})" if excluded else ""))
    lines.append(f"without both ratios: {len(failed)}" + (f" ({'; '.join(failed)})" if failed else ""))
    return lines


def _models(args: argparse.Namespace, archs: list[str], styles: list[str], tmp: Path
            ) -> Iterator[tuple[str, str, Path]]:
    """(name, style, file) of every model of the grid: netgen's, generated into ``tmp``, or the corpus's."""
    if args.corpus:
        for path in sorted(CORPUS.glob("*.tflite")):
            yield path.stem, "corpus", path
        return
    for arch in archs:
        for style in styles:
            model = tmp / f"{arch}-{args.passes}-s{args.seed}-{style}.tflite"
            model.write_bytes(generate(arch, args.passes, args.seed, keras_style=style == "keras",
                                       torch_style=style == "torch", int16=args.int16,
                                       segmentation=args.segmentation and arch == "unet"))
            yield arch, style, model


def table(grids: dict[str, str]) -> str:
    """Markdown: per grid, each ratio's geometric mean, worst cell and cells over the tolerance, over the cells
    every grid has both ratios for (the excluded ones too: a paired comparison)."""
    rows = {label: {(r["arch"], r["style"], r["config"]): r for r in csv.DictReader(open(path))}
            for label, path in grids.items()}
    common = set.intersection(*({k for k, r in cells.items() if r.get("ratio_max")} for cells in rows.values()))
    lines = [f"{len(common)} cells | priced by vela-legacy, against the legacy core | priced by vela-default, "
             "against the default core | the worse of the two", "|---|---|---|---|"]
    for label, cells in rows.items():
        parts = []
        for key in ("ratio_legacy", "ratio_default", "ratio_max"):
            values = [float(cells[k][key]) for k in common]
            parts.append(f"{geomean(values):.3f} (worst {max(values):.3f}; {sum(v > TOLERANCE for v in values)} "
                         "over 1)")
        lines.append(f"| {label} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHITECTURES))
    parser.add_argument("--styles", default=",".join(STYLES))
    parser.add_argument("--configs", help="comma-separated golden configuration names (default: all five)")
    parser.add_argument("--passes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--objective", choices=("both", "estimator"), help="--objective (default: the run's)")
    parser.add_argument("--estimator", help="--estimator (default: the run's)")
    parser.add_argument("--corpus", action="store_true",
                        help="the corpus models (tests/data/corpus) instead of netgen's architectures and styles")
    parser.add_argument("--int16", action="store_true", help="16x8-quantised netgen networks")
    parser.add_argument("--segmentation", action="store_true",
                        help="the U-Net ends in a per-pixel SOFTMAX (netgen's --segmentation)")
    parser.add_argument("--without", default="",
                        help="comma-separated always-applied rewrites left out of normalisation (e.g. "
                             "dilated_convolution,nearest_upsampling: npusched as it was before them)")
    parser.add_argument("--size", action="store_true",
                        help="each configuration's --optimise Size variant, its arena limit dropped (named NAME_size): "
                             "the peaks against both cores'")
    parser.add_argument("--compile", action="store_true",
                        help="compile each schedule with Vela's backend (--output-dir): 'compiled' is yes when Vela's "
                             "estimate agrees and its allocation is within the limit, else why not")
    parser.add_argument("--cores-from", type=Path, metavar="CSV",
                        help="take both cores' columns from an earlier grid's CSV (same cells), running npusched only")
    parser.add_argument("--csv", type=Path, help="write the rows here (and read them back with --resume)")
    parser.add_argument("--resume", action="store_true", help="keep the cells --csv already holds")
    parser.add_argument("--summary-only", action="store_true", help="summarise --csv without running anything")
    parser.add_argument("--table", nargs="+", metavar="LABEL=CSV",
                        help="print a markdown table of the ratios of several grids' CSVs (the cells all of them "
                             "have both ratios for) and exit")
    args = parser.parse_args()
    configs = json.loads(CONFIGS.read_text())
    names = args.configs.split(",") if args.configs else list(configs)
    if args.size:
        configs.update({f"{name}_size": size_variant(configs[name]) for name in names
                        if name in configs and not name.endswith("_size")})
        names = [name if name.endswith("_size") else f"{name}_size" for name in names]
    styles = args.styles.split(",")
    archs = args.archs.split(",")
    unknown = [a for a in archs if a not in ARCHITECTURES] + [n for n in names if n not in configs] \
        + [s for s in styles if s not in STYLES]
    without = {name for name in args.without.split(",") if name}
    unknown += sorted(without - {rewrite.name for rewrite in normalisation.ALWAYS_REWRITES})
    if unknown:
        print(f"error: unknown architecture, configuration, style or rewrite '{unknown[0]}'", file=sys.stderr)
        return 2
    # Read by normalise() at each call: the runs of this process normalise without them.
    normalisation.ALWAYS_REWRITES = tuple(r for r in normalisation.ALWAYS_REWRITES if r.name not in without)
    done: list[dict[str, Any]] = []
    if (args.resume or args.summary_only) and args.csv is not None and args.csv.exists():
        done = [{key: _number(value) for key, value in r.items()} for r in csv.DictReader(args.csv.open())]
    if args.summary_only:
        print("\n".join(summarise(done)))
        return 0
    if args.table:
        print(table(dict(item.split("=", 1) for item in args.table)))
        return 0
    cores = {(r["arch"], r["style"], r["config"]): {k: v for k, v in r.items() if k.startswith(("legacy_", "default_"))}
             for r in csv.DictReader(args.cores_from.open())} if args.cores_from else {}
    keys = {(r["arch"], r["style"], r["config"]) for r in done}
    rows = list(done)
    handle = args.csv.open("w", newline="") if args.csv is not None else None
    writer = csv.DictWriter(handle, COLUMNS, extrasaction="ignore") if handle is not None else None
    if writer is not None:
        writer.writeheader()
        writer.writerows(done)
    with tempfile.TemporaryDirectory() as tmp:
        for arch, style, model in _models(args, archs, styles, Path(tmp)):
            for name in names:
                if (arch, style, name) in keys:
                    continue
                row = cell(arch, style, name, configs[name], model, args, cores.get((arch, style, name)))
                rows.append(row)
                print("  ".join(f"{k}={row[k]}" for k in COLUMNS if k in row), flush=True)
                if writer is not None and handle is not None:
                    writer.writerow(row)
                    handle.flush()
    if handle is not None:
        handle.close()
    print("\n".join(summarise(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
