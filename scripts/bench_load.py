#!/usr/bin/env python3
"""Time loading + lowering a model (default: mobilenet_v2_224_int8), in-process, and report the median.

Usage: python scripts/bench_load.py [MODEL] [--runs N]
Target (issue 2): median < 1 s for mobilenet_v2_224_int8 under ethos-u55-128 / Ethos_U55_High_End_Embedded.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from npusched.frontend.tflite_reader import read_tflite
from npusched.lowering.graph import lower_model
from npusched.target.arch import load_architecture

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus" / "mobilenet_v2_224_int8.tflite"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    arch = load_architecture("ethos-u55-128", ["Arm/vela.ini"], "Ethos_U55_High_End_Embedded", "Shared_Sram")
    read_s, lower_s, total_s = [], [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        model = read_tflite(args.model)
        mid = time.perf_counter()
        network = lower_model(model, arch)
        end = time.perf_counter()
        read_s.append(mid - start)
        lower_s.append(end - mid)
        total_s.append(end - start)
    passes = sum(len(sg.ops) for sg in network.subgraphs)
    print(f"{args.model.name}: {passes} NPU passes, {len(network.cpu_ops)} CPU ops, {args.runs} runs")
    for label, values in (("read", read_s), ("lower", lower_s), ("read+lower", total_s)):
        print(f"  {label:<11} median {statistics.median(values):.3f} s  (min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    main()
