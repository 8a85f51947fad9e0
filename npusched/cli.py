"""`solve-schedule`: schedule an int8 TFLite model for an Ethos-U NPU and report the result.

Option names follow Vela's command line so that a Vela user's habits carry over.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from npusched import __version__
from npusched.errors import exit_status

# The time limit counts from here: the user waits for the heavy imports (done lazily, in _run) too.
STARTED = time.monotonic()

SOLVERS = ("heuristic", "cpsat", "dp")
DEFAULT_SOLVER = "cpsat"
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
    sched = parser.add_argument_group("scheduling")
    sched.add_argument("--optimise", choices=("Performance", "Size"), default="Performance",
                       help="Vela's optimisation strategy for the heuristic (default: %(default)s)")
    sched.add_argument("--solver", choices=SOLVERS, default=DEFAULT_SOLVER,
                       help="scheduler to run (default: %(default)s)")
    sched.add_argument("--time-limit", type=_positive_float, default=30.0, metavar="SECONDS",
                       help="wall-clock limit for the whole run, loading included (default: %(default)s)")
    sched.add_argument("--workers", type=_workers, default=None,
                       help=f"CP-SAT search workers, 1-{WORKERS_MAX} (default: the number of CPUs)")
    sched.add_argument("--seed", type=_seed, default=0,
                       help="CP-SAT random seed, a 32-bit signed integer (default: %(default)s)")
    sched.add_argument("--deterministic", action="store_true",
                       help="reproducible CP-SAT search: same inputs, seed and workers give the same schedule")
    out = parser.add_argument_group("output")
    out.add_argument("--json", type=_output_path, metavar="PATH",
                     help="write the schedule document (npusched.schedule/1)")
    out.add_argument("--quiet", action="store_true", help="print only the network totals, not the per-layer table")
    return parser


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text}'") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return exit_status(lambda: _run(args), str(args.model))


def _progress(line: str) -> None:
    """Progress of long solves goes to stdout, ahead of the summary; stderr carries only errors."""
    print(line, flush=True)


def _run(args: argparse.Namespace) -> int:
    from npusched.pipeline import RunOptions, run

    if args.json is not None:  # refuse a bad output path before spending the time limit
        from npusched.io.report_json import check_output_path

        check_output_path(args.json, inputs=(args.model, *(args.config or ())))

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
    )
    result = run(options, log=_progress, started=STARTED)
    for warning in result.warnings:
        sys.stderr.write(f"warning: {warning}\n")

    from npusched.io.report_text import format_summary

    summary = format_summary(result, per_layer=not args.quiet)
    if args.json is not None:  # written before the summary is printed, so a failed write prints only the error
        from npusched.io.report_json import write_json

        write_json(result, args.json, inputs=args.config or ())
    print(summary)
    if args.json is not None:
        print(f"schedule written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
