"""Command line: python -m npusched.netgen ARCH --passes N --seed S -o out.tflite"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from npusched.netgen import ARCHITECTURES, MAX_PASSES, GenerationError, generate


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors are one `error: ...` line and exit status 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see 'python -m npusched.netgen --help')\n")
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="python -m npusched.netgen",
        description="Write a seeded, realistic int8 TFLite network of about N NPU passes (Vela 5.2.0's count), "
                    "plain or exported as Keras (--keras-style) or PyTorch (--torch-style) would write it.")
    parser.add_argument("arch", metavar="ARCH",
                        help=f"architecture: {', '.join(ARCHITECTURES)}")
    parser.add_argument("--passes", type=int, default=50, help=f"approximate NPU passes, 1..{MAX_PASSES} (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0); same arguments, same bytes")
    parser.add_argument("--cpu-splits", type=int, default=None,
                        help="operators Vela leaves to the CPU, placed between blocks (default: 2+ for mixed, 0 else)")
    parser.add_argument("--keras-style", action="store_true",
                        help="export as Keras does: dynamic batch, run-time shape arithmetic, input rescaling")
    parser.add_argument("--torch-style", action="store_true",
                        help="export as PyTorch -> ONNX -> TFLite does: NCHW input and TRANSPOSE, explicit PAD "
                             "before VALID convolutions, MEAN pooling, NCHW 4-D output (excludes --keras-style)")
    parser.add_argument("--segmentation", action="store_true",
                        help="unet only: end in a per-pixel SOFTMAX over 4 classes at the full input side (128 x 128 "
                             "up to 60 passes) instead of LOGISTIC at half")
    parser.add_argument("--int16", action="store_true",
                        help="16x8 quantisation: int16 activations, int8 weights, int64 biases")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .tflite file to write")
    args = parser.parse_args(argv)
    try:
        data = generate(args.arch, args.passes, args.seed, args.cpu_splits, args.keras_style, args.segmentation,
                        args.torch_style, int16=args.int16)
        args.output.write_bytes(data)
    except GenerationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
