#!/usr/bin/env python3
"""How long reading, validating and lowering a model takes, in-process: a corpus model's median over runs, or
networks of growing size (``npusched.netgen``) to see that the time grows linearly with the operators.

    python scripts/bench/load.py [MODEL ...] [--runs 7] [--config u55-128_hee_shared] [--cpu-time]
    python scripts/bench/load.py --netgen audio1d [--passes 500 2000 8000] [--runs 1] [--cpu-time]

Per model: its NPU passes and TFLite operators, the median seconds of each step and of the three together, and
microseconds per TFLite operator. ``--cpu-time`` times with process time, so that other load on the machine does
not blur a trend. Targets: mobilenet_v2_224_int8 read and lowered in under 1 s (issue 2); time per operator flat
as the networks grow.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from npusched.app.pipeline import architecture
from npusched.bench import cli, golden, netgen_models, paths, table
from npusched.errors import exit_status
from npusched.frontend.tflite_reader import read_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import lower_model
from npusched.target.estimators import PricedArchitecture

STEPS = ("read", "validate", "lower")


def measure(model: Path, arch: PricedArchitecture, runs: int, cpu_time: bool) -> dict[str, object]:
    """The median seconds of each step over ``runs`` runs, and the model's size."""
    clock = time.process_time if cpu_time else time.perf_counter
    seconds: dict[str, list[float]] = {step: [] for step in STEPS}
    for _ in range(runs):
        start = clock()
        tflite = read_tflite(model)
        read = clock()
        validate_model(tflite)
        validated = clock()
        network = lower_model(tflite, arch)
        lowered = clock()
        for step, spent in zip(STEPS, (read - start, validated - read, lowered - validated), strict=True):
            seconds[step].append(spent)
    medians = {step: statistics.median(values) for step, values in seconds.items()}
    operators = len(tflite.main.operators)
    total = sum(medians.values())
    return {"model": model.stem, "passes": len(network.npu_ops), "operators": operators,
            **{step: round(value, 3) for step, value in medians.items()}, "total": round(total, 3),
            "per_op": round(1e6 * total / max(operators, 1))}


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("models", nargs="*", type=Path, help="default: mobilenet_v2_224_int8 of the corpus")
    parser.add_argument("--netgen", metavar="ARCH", help="generated networks of this architecture instead")
    parser.add_argument("--passes", type=int, nargs="+", default=[500, 2000, 8000], help="with --netgen: sizes")
    parser.add_argument("--runs", type=int, default=None, help="runs per model (default: 7, with --netgen 1)")
    cli.add_config(parser)
    parser.add_argument("--cpu-time", action="store_true", help="process time rather than wall time")
    args = parser.parse_args()
    config = golden.config(args.config)
    runs = args.runs or (1 if args.netgen else 7)
    printer = table.MarkdownPrinter(["model", "passes", "operators", *STEPS, "total", "per_op"],
                                    ["model", "NPU passes", "TFLite operators", *(f"{s} s" for s in STEPS),
                                     "together s", "us / operator"], cell=table.plain, align="lrrrrrrr")
    with tempfile.TemporaryDirectory() as tmp:
        if args.netgen:
            netgen_models.check([args.netgen])
            models = [netgen_models.write_network(Path(tmp), args.netgen, size, 1) for size in args.passes]
        else:
            models = args.models or paths.corpus_models(["mobilenet_v2_224_int8"])
        for model in models:
            arch = architecture(golden.run_options_from_vela_args(model, config, solver=None))
            printer.row(measure(model, arch, runs, args.cpu_time))
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
