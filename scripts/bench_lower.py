"""Validation and lowering time against model size: both should grow linearly with the number of operators.

Generates seeded networks with npusched.netgen at growing pass counts and reports CPU seconds (process time, so
other load on the machine does not blur the trend) and microseconds per TFLite operator.

    python scripts/bench_lower.py [--arch audio1d] [--passes 500 2000 8000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from npusched.app.pipeline import architecture
from npusched.frontend.tflite_reader import read_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import lower_model
from npusched.netgen import generate
from npusched.run import RunOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="audio1d", help="netgen architecture (default: %(default)s)")
    parser.add_argument("--passes", type=int, nargs="+", default=[500, 2000, 8000])
    args = parser.parse_args()
    arch = architecture(RunOptions(model_path=Path("unused")))
    print(f"{'passes':>7} {'tflite ops':>10} {'lowered':>8} {'validate s':>10} {'lower s':>8} {'us/op':>7}")
    with tempfile.TemporaryDirectory() as directory:
        for passes in args.passes:
            path = Path(directory) / f"{args.arch}_{passes}.tflite"
            path.write_bytes(generate(args.arch, passes, 1, None))
            model = read_tflite(path)
            start = time.process_time()
            validate_model(model)
            validated = time.process_time()
            network = lower_model(model, arch)
            lowered = time.process_time()
            operators = len(model.main.operators)
            per_op = 1e6 * (lowered - start) / operators
            print(f"{passes:>7} {operators:>10} {len(network.ops):>8} {validated - start:>10.2f} "
                  f"{lowered - validated:>8.2f} {per_op:>7.0f}")


if __name__ == "__main__":
    main()
