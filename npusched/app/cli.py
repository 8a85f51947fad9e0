"""`solve-schedule`: schedule an int8 TFLite model for an Ethos-U NPU and report the result.

Option names follow Vela's command line so that a Vela user's habits carry over.
"""

# ruff: noqa: E402 (STARTED is taken before the imports it must count)

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

# Run as the command, the time limit counts from here, before the imports below (the user waits for them too).
# Called from Python with arguments, it counts from the call (a process may run many).
STARTED = time.monotonic()

from npusched import __version__
from npusched.app.pareto import run_pareto
from npusched.app.pipeline import run, write_model
from npusched.app.replay import compile_as_deployed, replay
from npusched.errors import NpuschedError, OutputError, ScheduleError, exit_status
from npusched.frontend.normalise import REWRITE_NAMES
from npusched.io.pareto_report import format_pareto, write_pareto_csv
from npusched.io.plots import plot_memory, plot_pareto
from npusched.io.report_json import check_output_path, write_json
from npusched.io.report_text import format_summary
from npusched.run import OBJECTIVES, RunOptions, RunResult, Solver
from npusched.schedule.memory_breakdown import memory_breakdown
from npusched.solvers.interruption import handling_ctrl_c
from npusched.solvers.pareto import DEFAULT_INNER_POINTS
from npusched.target.estimators import Estimator
from npusched.vela.backend import Compilation, VelaRefusal
from npusched.vela.command import LONGEST_WAIT_SECONDS

SOLVERS = tuple(solver.value for solver in Solver)
DEFAULT_SOLVER = Solver.CPSAT.value
SEED_RANGE = (-(2 ** 31), 2 ** 31 - 1)  # CP-SAT's random_seed is an int32
WORKERS_MAX = 256  # more search threads than this only thrash; a typo like 10000 should not start them


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors become one `error: ...` line and exit status 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see 'solve-schedule --help')\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="solve-schedule",
        description=(
            "Choose block configs, stripes, cascades and fast-storage residency for every NPU operator of "
            "an int8 TFLite model on an Arm Ethos-U55/U65, and report the estimated cycles."
        ),
    )
    parser.add_argument("model", type=Path, help="the .tflite model to schedule")
    parser.add_argument("--version", action="version", version=f"npusched {__version__}")
    _hardware_options(parser)
    _scheduling_options(parser)
    _output_options(parser)
    _curve_options(parser)
    return parser


def _hardware_options(parser: argparse.ArgumentParser) -> None:
    hw = parser.add_argument_group("hardware (as Vela's options)")
    hw.add_argument("--accelerator-config", default="ethos-u55-256",
                    help="ethos-u55-32/64/128/256 or ethos-u65-256/512 (default: %(default)s)")
    hw.add_argument("--config", action="append", metavar="FILE",
                    help="Vela-format .ini file; 'Arm/vela.ini' is the one shipped with ethos-u-vela (repeatable)")
    hw.add_argument("--system-config", default=None,
                    help="[System_Config.NAME] section to use (default: Vela's internal default)")
    hw.add_argument("--memory-mode", default=None,
                    help="[Memory_Mode.NAME] section to use (default: Vela's internal default)")
    hw.add_argument("--arena-cache-size", type=_non_negative_int, default=None, metavar="BYTES",
                    help="override the memory mode's arena cache size (fast-storage limit)")


def _scheduling_options(parser: argparse.ArgumentParser) -> None:
    sched = parser.add_argument_group("scheduling")
    sched.add_argument("--optimise", choices=("Performance", "Size"), default="Performance",
                       help="Performance: fewest cycles within the fast-storage limit; Size: least peak fast "
                            "storage first, then fewest cycles at that peak (CP-SAT; the heuristic follows Vela's "
                            "strategy of that name) (default: %(default)s)")
    sched.add_argument("--solver", choices=SOLVERS, default=DEFAULT_SOLVER,
                       help="scheduler to run (default: %(default)s)")
    sched.add_argument("--time-limit", type=_time_limit, default=30.0, metavar="SECONDS",
                       help="wall-clock limit for the whole run, loading included; a limit over a week is a week "
                            "(default: %(default)s)")
    sched.add_argument("--workers", type=_workers, default=None,
                       help=f"CP-SAT search workers, 1-{WORKERS_MAX} (default: the number of CPUs)")
    sched.add_argument("--seed", type=_seed, default=0,
                       help="CP-SAT random seed, a 32-bit signed integer (default: %(default)s)")
    sched.add_argument("--estimator", choices=Estimator.names(), default=Estimator.VELA_LEGACY.value,
                       help="how passes are priced: 'vela-legacy' (alias 'vela') as Vela's legacy core estimates "
                            "(its figures, its backend's), 'vela-default' as Vela's default (C++) core does, "
                            "'contention' the legacy estimate with prefetched weights sharing the memory bandwidth "
                            "of the pass they hide under; the summary shows all (default: vela-legacy)")
    sched.add_argument("--objective", choices=OBJECTIVES, default=RunOptions.objective,
                       help="what CP-SAT minimises: 'both' Vela cores' models, each relative to that core's own "
                            "schedule, so the answer is faster than either core by both (docs/guide/estimator.md), or "
                            "'estimator', --estimator's model alone; the figures printed are --estimator's "
                            "(default: %(default)s)")
    sched.add_argument("--no-normalise", action="store_true",
                       help="schedule the model as it is: do not fold its static shape arithmetic (SHAPE -> "
                            "STRIDED_SLICE -> PACK -> RESHAPE of Keras-style exports) first")
    sched.add_argument("--disable-rewrite", action="append", default=[], metavar="NAME",
                       type=_rewrite_name,
                       help="switch off one rewrite of the graph by name (repeatable): "
                            f"{', '.join(REWRITE_NAMES)}")
    sched.add_argument("--verify-rewrites", action="store_true",
                       help="check every normalisation rewrite against the TFLite reference interpreter as it runs "
                            "(every tensor the model before and after it share, on random inputs); slow")
    sched.add_argument("--deterministic", action="store_true",
                       help="reproducible CP-SAT search: same inputs, seed and workers give the same schedule "
                            "(a note says where the time limit ended the search first)")


def _output_options(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=_output_path, metavar="PATH",
                     help="write the schedule document (npusched.schedule/2)")
    out.add_argument("--quiet", action="store_true", help="print only the network totals, not the per-layer table")
    out.add_argument("--output-dir", type=_output_path, metavar="DIR",
                     help="compile the schedule with Vela 5.2.0's backend (legacy core) into DIR: <model>_vela.tflite, "
                          "<model>_summary_<system config>.csv and <model>_per-layer.csv, and check Vela's estimate "
                          "against npusched's (Vela's option; Vela writes to output/ by default)")
    out.add_argument("--write-model", type=_output_path, metavar="PATH",
                     help="write the model that was scheduled (the normalised one) as a .tflite file, so `vela` "
                          "can be run on it")
    out.add_argument("--schedule", type=_output_path, metavar="JSON",
                     help="take the schedule from a document --json wrote (same model and hardware options) "
                          "instead of solving")
    out.add_argument("--plot-memory", type=_output_path, metavar="PATH",
                     help="draw the schedule's fast-storage use per step, stacked by what holds it (.png or .svg)")


def _curve_options(parser: argparse.ArgumentParser) -> None:
    curve = parser.add_argument_group("cycles against fast storage (instead of one schedule)")
    curve.add_argument("--pareto", type=_output_path, metavar="CSV",
                       help="CP-SAT's fewest cycles at fast-storage limits from the smallest fit up to where more "
                            "memory stops helping, each schedule verified; written to CSV and drawn beside it (same "
                            "name, .png and .svg). --time-limit is split across the points; --arena-cache-size is "
                            "ignored")
    curve.add_argument("--pareto-points", type=_pareto_points, default=None, metavar="N",
                       help="limits between the smallest fit and the top of the curve (default: 5)")
    curve.add_argument("--with-vela", action="store_true",
                       help="with --pareto: also run Vela's legacy core (the vela CLI) at each limit")


def _rewrite_name(text: str) -> str:
    if text not in REWRITE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown rewrite '{text}' (known: {', '.join(REWRITE_NAMES)})")
    return text


def _pareto_points(text: str) -> int:
    return _int_in_range(text, 0, 50)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _int_in_range(text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
    return value


def _workers(text: str) -> int:
    return _int_in_range(text, 1, WORKERS_MAX)


def _seed(text: str) -> int:
    return _int_in_range(text, *SEED_RANGE)


def _output_path(text: str) -> Path:
    if not text.strip():  # Path("") would silently mean the current directory
        raise argparse.ArgumentTypeError("expected a file path, got an empty one")
    return Path(text)


def _time_limit(text: str) -> float:
    """A positive finite number of seconds; over a week (``LONGEST_WAIT_SECONDS``) it is a week: no run takes that
    long, and the system's timers overflow on, say, 1e308."""
    return min(_positive_float(text), LONGEST_WAIT_SECONDS)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text}'") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


# The command's garbage-collection thresholds: its heap (the candidate space's prices, a network's block configs)
# grows to millions of objects, which each full collection walks; at the interpreter's defaults (700, 10, 10) a
# 600-pass network's run spent 2.8 s of --time-limit 30 collecting, at these 0.6 s.
GC_THRESHOLDS = (5000, 20, 20)


def main(argv: Sequence[str] | None = None) -> int:
    started = STARTED if argv is None else time.monotonic()
    if argv is None:
        gc.set_threshold(*GC_THRESHOLDS)
    args = build_parser().parse_args(argv)
    status = exit_status(lambda: _run(args, started), str(args.model))
    if argv is None:
        # The command is done: the interpreter's last garbage collection, at exit, would walk the whole run's heap
        # (0.7 s of a 500-pass network's run, past its time limit); frozen, it is left out.
        gc.freeze()
    return status


def _progress(line: str) -> None:
    """Progress of long solves goes to stdout, ahead of the summary; stderr carries only errors."""
    print(line, flush=True)


def _run(args: argparse.Namespace, started: float) -> int:

    _check_plot_options(args)
    if args.json is not None:  # refuse a bad output path before spending the time limit
        check_output_path(args.json, inputs=(args.model, *(args.config or ())))
    if args.write_model is not None:
        check_output_path(args.write_model, inputs=(args.model, *(args.config or ())))

    options = RunOptions(
        model_path=args.model,
        accelerator_config=args.accelerator_config,
        config_files=tuple(args.config or ()),
        system_config=args.system_config,
        memory_mode=args.memory_mode,
        arena_cache_size=args.arena_cache_size,
        optimise=args.optimise,
        solver=args.solver,
        time_limit_seconds=args.time_limit,
        workers=args.workers,
        seed=args.seed,
        deterministic=args.deterministic,
        estimator=args.estimator,
        objective=args.objective,
        normalise=not args.no_normalise,
        disabled_rewrites=frozenset(args.disable_rewrite),
        verify_rewrites=args.verify_rewrites,
        compile_follows=args.output_dir is not None,  # the time limit covers Vela's compile too
        compile_started_ahead=args.output_dir is not None,
    )
    if args.pareto is not None:
        return _pareto(args, options, started)
    if args.output_dir is None:
        return _report(args, options, started, None)
    # Vela's compile starts now, beside the scheduling, and finishes when the schedule is known.
    with Compilation(options, args.output_dir, ahead=True) as compilation:
        return _report(args, options, started, compilation)


def _report(args: argparse.Namespace, options: RunOptions, started: float, compilation: Compilation | None) -> int:
    """Schedule, write and print what was asked for; then finish ``compilation`` (--output-dir), if any."""
    if args.schedule is not None:
        result = replay(options, args.schedule)
    else:
        with handling_ctrl_c():  # Ctrl-C ends the search, and the best schedule so far is reported (and compiled)
            result = run(options, log=_progress, started=started, compilation=compilation)
    for warning in result.warnings:
        sys.stderr.write(f"warning: {warning}\n")

    # The schedule is kept whatever Vela's backend makes of it: everything else is written, and the summary
    # printed, before the compile (--output-dir, last), so a refused deployment costs only the deployment.
    summary = format_summary(result, per_layer=not args.quiet)
    if args.json is not None:  # written before the summary is printed, so a failed write prints only the error
        write_json(result, args.json, inputs=args.config or ())
    if args.write_model is not None:
        write_model(result, args.write_model)
    if args.plot_memory is not None:
        schedule, evaluation = result.solved()
        plot_memory(memory_breakdown(result.network, schedule, evaluation), evaluation.staging_limit,
                    f"{args.model.stem}: fast storage per step ({args.solver})", args.plot_memory)
    print(summary)
    if args.json is not None:
        print(f"schedule written to {args.json}")
    if args.write_model is not None:
        print(f"scheduled model written to {args.write_model}")
    if args.plot_memory is not None:
        print(f"memory plot written to {args.plot_memory}")
    if compilation is not None:
        _deploy(args, result, compilation)
    return 0


def _deploy(args: argparse.Namespace, result: RunResult, compilation: Compilation) -> None:
    """Compile the schedule with Vela's backend into --output-dir. A decision Vela refuses is one error line
    naming the op and Vela's reason (exit status 2); the summary and the JSON, written already, stay."""
    kept = f"; the schedule is in {args.json}" if args.json is not None else ""
    try:
        backend = compile_as_deployed(result, compilation.finish)
    except VelaRefusal as exc:
        reason = str(exc) if str(exc).startswith("Vela's backend") else f"Vela's backend refuses {exc}"
        raise VelaRefusal(f"{reason} (--output-dir {args.output_dir}: nothing written{kept})") from None
    except ScheduleError as exc:
        raise ScheduleError(f"{exc} (--output-dir {args.output_dir}: nothing written{kept})") from None
    for warning in backend.warnings():
        sys.stderr.write(f"warning: {warning}\n")
    if args.json is not None:  # again, now with what Vela made of the schedule
        write_json(result, args.json, inputs=args.config or (), vela_backend=backend.as_json())
    verdict = "agrees with npusched's" if backend.agreed else "DISAGREES with npusched's (see the warnings)"
    what = "" if backend.written == "answer" else \
        f" of the fallback, Vela legacy's own schedule ({backend.fallback_reason})"
    print(f"Vela's backend wrote {backend.tflite_path}, {backend.summary_csv_path.name} and "
          f"{backend.per_layer_csv_path.name}{what}; Vela's estimate, {backend.vela_total_cycles:,.0f} cycles, "
          f"{verdict}")


def _check_plot_options(args: argparse.Namespace) -> None:
    """Refuse option combinations that make no sense, and plot paths that cannot be drawn, before any work."""
    if args.output_dir is not None and args.solver == Solver.VELA_DEFAULT:
        raise NpuschedError("--output-dir compiles with Vela legacy's backend, and --solver vela-default's schedule "
                            "is of the default core's graph (passes legacy does not make): `vela` itself deploys it")
    if args.pareto is None:
        if args.pareto_points is not None or args.with_vela:
            raise NpuschedError("--pareto-points and --with-vela apply only with --pareto")
    else:
        if args.pareto.suffix.lower() != ".csv":
            raise OutputError(f"--pareto {args.pareto}: give a .csv path (the plots are written beside it)")
        if args.json is not None or args.plot_memory is not None or args.output_dir is not None \
                or args.schedule is not None:
            raise NpuschedError("--pareto makes many schedules: it cannot be combined with --json, --plot-memory, "
                                "--output-dir or --schedule")
        if args.solver != "cpsat":
            raise NpuschedError(f"--pareto is CP-SAT's curve: --solver {args.solver} does not apply")
        if args.optimise != "Performance":
            raise NpuschedError(f"--pareto finds the fewest cycles at each size: --optimise {args.optimise} does "
                                "not apply (the curve's first point is the smallest fit)")
        if args.with_vela and Estimator(args.estimator) is not Estimator.VELA_LEGACY:
            raise NpuschedError(f"--with-vela draws Vela's own estimates: with --estimator {args.estimator} the two "
                                "curves would be priced differently (use --estimator vela)")
    if args.plot_memory is not None and args.plot_memory.suffix.lower() not in (".png", ".svg"):
        raise OutputError(f"--plot-memory {args.plot_memory}: the suffix must be .png or .svg")


def _pareto(args: argparse.Namespace, options: RunOptions, started: float) -> int:
    points = DEFAULT_INNER_POINTS if args.pareto_points is None else args.pareto_points
    result = run_pareto(options, inner_points=points, with_vela=args.with_vela, log=_progress, started=started)
    figures = [args.pareto.with_suffix(".png"), args.pareto.with_suffix(".svg")]
    write_pareto_csv(result, args.pareto)
    plot_pareto(result, figures)
    print(format_pareto(result))
    print(f"frontier written to {args.pareto} ({', '.join(map(str, figures))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
