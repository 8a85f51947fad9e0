"""`npusched-sweep`: run a grid of scheduling runs into a resumable store, and report on it.

    npusched-sweep [run] MODELS_OR_DIRS... --store results.sqlite [grid options]   (or --grid grid.yaml)
    npusched-sweep report results.sqlite [--baseline heuristic] [--format md|csv|parquet] [--plot DIR]

Options follow `solve-schedule`'s, but take several values: the sweep runs their product.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from npusched import __version__
from npusched.errors import NpuschedError, exit_status
from npusched.sweep.engine import run_sweep
from npusched.sweep.grid import (
    SOLVERS,
    Grid,
    GridError,
    configurations_from_axes,
    expand,
    find_models,
    parse_size_bytes,
    solver_name,
)
from npusched.sweep.gridfile import load_grid_file
from npusched.sweep.local import run_local, start_fork_server
from npusched.sweep.plots import write_plots
from npusched.sweep.ray_executor import run_ray
from npusched.sweep.report import case_rows, check_baseline, markdown_report, write_table
from npusched.sweep.store import open_store, rows
from npusched.target.estimators import load_architecture

DEFAULTS: dict[str, Any] = {"accelerator_config": ["ethos-u55-256"], "config": [], "system_config": [None],
                            "memory_mode": [None], "arena_cache_size": [None], "optimise": ["Performance"],
                            "solver": ["cpsat"], "time_limit": 30.0, "seeds": 1, "jobs": None, "workers": None,
                            "cell_timeout": None, "store": None, "executor": "local", "ray_address": None,
                            "retry_failed": False, "quiet": False}


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors become one `error: ...` line and exit status 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def run_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="npusched-sweep", description=(
        "Run every combination of models, hardware configurations, arena sizes, strategies, solvers and seeds, "
        "each cell in its own guarded process, into a resumable SQLite store. 'npusched-sweep report STORE' "
        "reads it back."))
    parser.add_argument("models", nargs="*", type=Path, metavar="MODEL_OR_DIR",
                        help=".tflite files, or directories whose *.tflite files to run")
    parser.add_argument("--version", action="version", version=f"npusched {__version__}")
    parser.add_argument("--grid", type=Path, metavar="FILE", help="YAML/TOML grid file (flags override its keys)")
    hw = parser.add_argument_group("hardware (as solve-schedule's; several values run each)")
    hw.add_argument("--accelerator-config", nargs="+", metavar="A", help="default: ethos-u55-256")
    hw.add_argument("--config", action="append", metavar="FILE",
                    help="Vela-format .ini file (default Arm/vela.ini when a system config or memory mode is named)")
    hw.add_argument("--system-config", nargs="+", metavar="S")
    hw.add_argument("--memory-mode", nargs="+", metavar="M")
    hw.add_argument("--arena-cache-size", nargs="+", metavar="SIZE",
                    help="fast-storage limits: bytes, 128k, 1M, or 'default' for the memory mode's")
    sched = parser.add_argument_group("scheduling")
    sched.add_argument("--optimise", nargs="+", choices=("Performance", "Size"))
    sched.add_argument("--solver", nargs="+", type=_solver_list, metavar="S[,S...]",
                       help=f"solvers to run, of {', '.join(SOLVERS)} (default: cpsat)")
    sched.add_argument("--time-limit", type=functools.partial(_positive, float), metavar="SECONDS",
                       help="CP-SAT's time limit per cell (default: 30)")
    sched.add_argument("--seeds", type=functools.partial(_positive, int), metavar="N",
                       help="CP-SAT seeds 0..N-1 per cell (default: 1)")
    run = parser.add_argument_group("running")
    run.add_argument("--store", type=Path, metavar="PATH", help="SQLite results store (created if missing)")
    run.add_argument("--jobs", type=functools.partial(_positive, int), metavar="N",
                     help="cells at once (default: the CPU count, or CPUs / --workers)")
    run.add_argument("--workers", type=functools.partial(_positive, int), metavar="N",
                     help="CP-SAT workers per cell (default: CPUs / jobs, at least 1)")
    run.add_argument("--cell-timeout", type=functools.partial(_positive, float), metavar="SECONDS",
                     help="hard wall-clock guard per cell (default: 2 x time limit + 120)")
    run.add_argument("--executor", choices=("local", "ray"), help="local process pool (default) or Ray")
    run.add_argument("--ray-address", metavar="ADDR", help="Ray cluster to join (default: start a local one)")
    run.add_argument("--retry-failed", action="store_true", default=None, help="run failed cells again")
    run.add_argument("--quiet", action="store_true", default=None, help="no progress bar, only the summary line")
    return parser


def report_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="npusched-sweep report",
                            description="Tables and plots of a sweep store: every solver against a baseline.")
    parser.add_argument("store", type=Path)
    parser.add_argument("--baseline", default="heuristic", help="solver the ratios divide by (default: %(default)s)")
    parser.add_argument("--format", choices=("md", "csv", "parquet"), default="md",
                        help="md: geomeans + per-case table; csv/parquet: the per-case table (default: md)")
    parser.add_argument("--output", type=Path, metavar="PATH", help="write here instead of stdout")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="also write the figures (PNG and SVG) here")
    return parser


def _positive(kind: type, text: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _solver_list(text: str) -> list[str]:
    try:
        return [solver_name(name.strip()) for name in text.split(",") if name.strip()]
    except GridError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def command() -> int:
        if argv[:1] == ["report"]:
            return _report(report_parser().parse_args(argv[1:]))
        sweep_argv = argv[1:] if argv[:1] == ["run"] else argv
        return _sweep(run_parser().parse_args(sweep_argv), sweep_argv)

    return exit_status(command)


def _sweep(args: argparse.Namespace, argv: list[str]) -> int:

    settings = _settings(args)
    if settings["store"] is None:
        raise GridError("--store PATH is required (or 'store' in the grid file)")
    if settings["executor"] == "local":

        start_fork_server()  # loads npusched in the background while the grid is checked and expanded
    grid, jobs = _grid(settings)
    guard = settings["cell_timeout"] or 2 * grid.time_limit_seconds + 120
    if settings["executor"] == "ray":

        execute = functools.partial(run_ray, jobs=settings["jobs"], guard_seconds=guard,
                                    address=settings["ray_address"])
    else:

        execute = functools.partial(run_local, jobs=jobs, guard_seconds=guard)

    cells = expand(grid)
    store = open_store(Path(settings["store"]))
    summary = run_sweep(cells, store, execute, command=" ".join(["npusched-sweep", *argv]),
                        retry_failed=bool(settings["retry_failed"]), quiet=bool(settings["quiet"]))
    print(summary.line(str(settings["store"])), flush=True)
    return 130 if summary.interrupted else 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Flags over the grid file's keys over the defaults."""

    from_file = load_grid_file(args.grid) if args.grid else {}
    settings = {name: from_file.get(name, default) for name, default in DEFAULTS.items()}
    settings["models"] = from_file.get("models", [])
    settings["configurations"] = from_file.get("configurations", ())
    for name, value in vars(args).items():
        if value is not None and value != [] and name != "grid":
            settings[name] = value
    if args.solver:
        settings["solver"] = [name for names in args.solver for name in names]
    if args.accelerator_config or args.system_config or args.memory_mode:
        settings["configurations"] = ()  # flags name the hardware: they replace the file's list
    for name, kind in (("time_limit", float), ("seeds", int), ("jobs", int), ("workers", int),
                       ("cell_timeout", float)):
        if settings[name] is not None:
            settings[name] = _checked(name, settings[name], kind)
    if settings["executor"] not in ("local", "ray"):
        raise GridError(f"executor must be 'local' or 'ray', got '{settings['executor']}'")
    return settings


def _checked(name: str, value: Any, kind: type) -> Any:
    """A grid file's number, held to the same rules as the flag's."""
    try:
        return _positive(kind, str(value))
    except argparse.ArgumentTypeError as exc:
        raise GridError(f"{name.replace('_', '-')}: {exc}") from None


def _grid(settings: dict[str, Any]) -> tuple[Any, int]:
    """The Grid the settings describe, and the local executor's job count."""

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs, workers = settings["jobs"], settings["workers"]
    if jobs and workers and jobs * workers > cpus and settings["executor"] == "local":
        raise GridError(f"--jobs {jobs} x --workers {workers} exceeds the {cpus} CPUs of this machine")
    jobs = jobs or max(1, cpus // (workers or 1))
    workers = workers or max(1, cpus // jobs)
    configurations = settings["configurations"] or configurations_from_axes(
        tuple(settings["accelerator_config"]), tuple(settings["system_config"]), tuple(settings["memory_mode"]),
        tuple(str(c) for c in settings["config"]))
    grid = Grid(
        models=find_models(tuple(Path(m) for m in settings["models"])),
        configurations=tuple(configurations),
        solvers=tuple(dict.fromkeys(settings["solver"])),
        arena_cache_sizes=tuple(dict.fromkeys(parse_size_bytes(s) for s in settings["arena_cache_size"])),
        optimise=tuple(dict.fromkeys(settings["optimise"])),
        time_limit_seconds=settings["time_limit"],
        seeds=settings["seeds"],
        workers=workers,
    )
    _check_hardware(grid)
    return grid, jobs


def _check_hardware(grid: Any) -> None:
    """Fail before running anything if a configuration, arena size or strategy is not a valid architecture."""

    for config in grid.configurations:
        for arena in config.arena_cache_sizes or grid.arena_cache_sizes:
            for optimise in config.optimise or grid.optimise:
                try:
                    load_architecture(accelerator_config=config.accelerator_config,
                                      config_files=list(config.config_files) or None,
                                      system_config=config.system_config, memory_mode=config.memory_mode,
                                      arena_cache_size=arena, optimise=optimise)
                except NpuschedError as exc:
                    raise GridError(f"configuration '{config.name}': {exc}") from None


def _report(args: argparse.Namespace) -> int:

    if args.format == "parquet" and args.output is None:
        raise GridError("--format parquet needs --output PATH")
    store_rows = rows(open_store(args.store, create=False))
    if not store_rows:
        raise GridError(f"store {args.store} holds no cells yet")
    check_baseline(store_rows, args.baseline)
    if args.format == "md":
        text = markdown_report(store_rows, args.baseline, args.store.name)
        if args.output:
            args.output.write_text(text)
        else:
            sys.stdout.write(text)
    else:
        write_table(case_rows(store_rows, args.baseline), args.output, args.format)
    if args.plot:

        for path in write_plots(store_rows, args.baseline, args.plot):
            print(f"plot written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
