#!/usr/bin/env python3
"""npusched against Vela's two cores on the same files, each schedule priced by each cost model.

    python scripts/bench/vs_vela.py [--corpus | --zoo [--models a,b] | --archs a,b --styles plain,keras,torch
        --passes 60 --seed 0 [--int16] [--segmentation]] [--configs c1,c2] [--size]
        [--run SOLVER[@ESTIMATOR] ...] [--no-cores | --cores-from CSV]
        [--time-limit 30] [--workers N] [--deterministic] [--objective both|estimator] [--without R1,R2] [--compile]
        [--csv PATH [--resume]] [--summary-only] [--table LABEL=CSV ...]

A cell is a model (netgen's architectures in each export style, --corpus the corpus, --zoo the real exports) under
a golden configuration (--size: each one's --optimise Size variant without its arena limit). In each cell it runs the
``vela`` CLI's legacy and default cores (their own totals, SRAM, CPU operators and subgraphs; --no-cores skips
them, --cores-from takes them from an earlier grid's CSV) and every --run (default: ``cpsat``, as
``solve-schedule`` runs it), and keeps each run's total under every cost model. It prints one line per cell, then
each run against each core's own total (``vs_legacy``: priced by vela-legacy / the legacy core's total;
``vs_default``; ``vs_worse``; under Size ``peak_vs_min``, the fast storage against the smaller core's SRAM; a cell
where the default core runs more on the NPU is excluded from the counts), then with several runs every CP-SAT run
against every other run, per configuration, priced by each model in play. Failures are rows, never dropped.

The comparisons of docs/results/ (never-slower.md, default-core.md, honest-estimator.md) and
docs/guide/estimator.md, as presets (the scripts they replace in brackets):
- never slower than either core [never_slower.py]: ``--deterministic --workers 1``; the corpus: ``--corpus``
- each core on its own graph [netgen_vs_vela.py]: ``--styles keras --passes 40 --seed 1 --time-limit 15
  --workers 2 --objective estimator --run cpsat@vela-default cpsat@vela-legacy``
- like for like, both cost models [estimator_matrix.py]: ``--corpus --no-cores --time-limit 15 --workers 1
  --deterministic --objective estimator --run heuristic@vela-legacy heuristic@vela-default
  vela-default@vela-legacy vela-default@vela-default cpsat@vela-legacy cpsat@vela-default``
- under an honest estimator [compare_estimators.py]: ``--corpus --no-cores --time-limit 30 --workers 2
  --deterministic --objective estimator --run heuristic cpsat@vela-legacy cpsat@contention``
- the default core's cost model [compare_default_core.py]: ``--corpus --no-cores --workers 1 --deterministic
  --objective estimator --run vela-default@vela-default cpsat@vela-default``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from npusched.bench import cli, golden, netgen_models, paths, table, versus, versus_summary
from npusched.errors import ConfigError, exit_status
from npusched.frontend import normalise


def models(args: argparse.Namespace, folder: Path) -> Iterator[tuple[dict[str, Any], Path]]:
    """(identity, file) of every model of the grid: the corpus's, or netgen's written into ``folder``."""
    if args.corpus or args.zoo:
        source = "corpus" if args.corpus else "zoo"
        folder = paths.corpus_dir() if args.corpus else paths.zoo_dir()
        for path in paths.corpus_models(paths.split_names(args.models), folder):
            yield {"source": source, "model": path.stem, "style": source}, path
        return
    for arch in args.archs:
        for style in args.styles:
            path = netgen_models.write_network(folder, arch, args.passes, args.seed, style, int16=args.int16,
                                               segmentation=args.segmentation and arch == "unet")
            yield {"source": "netgen", "model": arch, "style": style}, path


def configurations(args: argparse.Namespace) -> dict[str, golden.Config]:
    """The grid's configurations by name (``NAME_size`` for a Size variant)."""
    configs = golden.load_configs()
    names = golden.select(configs, paths.split_names(args.configs))
    if args.size:
        return {name if name.endswith("_size") else f"{name}_size": golden.size_variant(configs[name])
                for name in names}
    return {name: configs[name] for name in names}


def summary(rows: list[dict[str, Any]], specs: list[versus.RunSpec], cores: bool) -> list[str]:
    lines = versus_summary.core_summary(rows, specs) if cores else []
    return [*lines, *versus_summary.pair_summary(rows, specs, cores), *versus_summary.failures(rows, specs)]


def parser() -> argparse.ArgumentParser:
    parser = cli.parser(__doc__)
    models_ = parser.add_argument_group("models (default: netgen's)")
    models_.add_argument("--corpus", action="store_true", help="the corpus models instead of generated ones")
    models_.add_argument("--zoo", action="store_true", help="the zoo of real exports (tests/data/exports)")
    models_.add_argument("--models", help="with --corpus or --zoo: comma-separated model names (default: all)")
    models_.add_argument("--archs", help="comma-separated netgen architectures (default: all)")
    models_.add_argument("--styles", default=",".join(netgen_models.STYLES),
                         help="comma-separated export styles (default: %(default)s)")
    models_.add_argument("--passes", type=int, default=60)
    models_.add_argument("--seed", type=int, default=0)
    models_.add_argument("--int16", action="store_true", help="16x8-quantised networks")
    models_.add_argument("--segmentation", action="store_true", help="the U-Net ends in a per-pixel SOFTMAX")
    grid = parser.add_argument_group("configurations and runs")
    cli.add_configs(grid)
    grid.add_argument("--size", action="store_true",
                      help="each configuration's --optimise Size variant, its arena limit dropped (NAME_size)")
    grid.add_argument("--run", nargs="+", type=versus.RunSpec.parse, metavar="SOLVER[@ESTIMATOR]",
                      help="npusched's runs of each cell (default: cpsat, or with --resume/--summary-only the CSV's)")
    grid.add_argument("--no-cores", action="store_true", help="do not run Vela's cores (their totals)")
    grid.add_argument("--cores-from", type=Path, metavar="CSV", help="both cores' columns from an earlier grid")
    runs = parser.add_argument_group("each run (as solve-schedule's flags)")
    cli.add_budget(runs)
    runs.add_argument("--objective", choices=("both", "estimator"), help="CP-SAT's (default: the run's)")
    runs.add_argument("--without", default="", help="comma-separated rewrites switched off (--disable-rewrite)")
    runs.add_argument("--compile", action="store_true",
                      help="compile each schedule with Vela's backend: 'compiled' yes when Vela agrees and fits")
    out = parser.add_argument_group("output")
    out.add_argument("--csv", type=Path, help="write the rows here, a row at a time")
    out.add_argument("--resume", action="store_true", help="keep the cells --csv already holds")
    out.add_argument("--summary-only", action="store_true", help="summarise --csv without running anything")
    out.add_argument("--table", nargs="+", metavar="LABEL=CSV",
                     help="print the ratios of several grids' CSVs, paired over their common cells, and exit")
    return parser


def main(args: argparse.Namespace) -> int:
    if args.table:
        grids = {label: table.read_csv(Path(path)) for label, path in (item.split("=", 1) for item in args.table)}
        print(versus_summary.grids_table(grids))
        return 0
    kept = table.read_csv(args.csv) if (args.resume or args.summary_only) and args.csv and args.csv.exists() else []
    specs: list[versus.RunSpec] = args.run or versus.specs_in(list(kept[0]) if kept else []) \
        or [versus.RunSpec("cpsat")]
    cores = not args.no_cores
    kept = [versus.derive(row, specs) for row in kept]
    if args.summary_only:
        print("\n".join(summary(kept, specs, cores)))
        return 0
    args.archs, args.styles = netgen_models.check(paths.split_names(args.archs), args.styles.split(","))
    without = frozenset(name for name in args.without.split(",") if name)
    if without - set(normalise.REWRITE_NAMES):
        raise ConfigError(f"unknown rewrite '{sorted(without - set(normalise.REWRITE_NAMES))[0]}'")
    settings = versus.settings_from({**vars(args), "time_limit_seconds": args.time_limit, "disabled_rewrites": without})
    configs = configurations(args)
    earlier = versus.with_cores_from(table.read_csv(args.cores_from)) if args.cores_from else {}
    done = {(r["model"], r["style"], r["config"]) for r in kept}
    rows = list(kept)
    with tempfile.TemporaryDirectory() as tmp, table.CsvLog(args.csv, versus.columns(specs, cores), kept) as log:
        for identity, model in models(args, Path(tmp)):
            for name, config in configs.items():
                key = (identity["model"], identity["style"], name)
                if key in done:
                    continue
                row = versus.cell({**identity, "config": name}, model, config, specs, settings,
                                  earlier.get(key) if args.cores_from else None, run_cores=cores)
                rows.append(row)
                log.add(row)
                print(table.key_values(row), flush=True)
    print("\n".join(summary(rows, specs, cores)))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(lambda: main(parser().parse_args())))
