#!/usr/bin/env python3
"""Time pricing every (block config x OFM stripe height) option of every NPU op of a model.

Usage: python scripts/bench_pricing.py [--model PATH] [--accelerator-config ...] [--repeats N] [--warm] [--profile]

Each repeat starts cold: the option memo, the block-config search caches and the weight-encoding caches are
emptied first, so every block search, weight encoding and price is computed again (``--warm`` keeps the block
search and weight caches and only empties the option memo). Loading and lowering the model are not timed.
Target (issue): >= 20,000 options/s on one core for mobilenet_v2_224_int8 under u55-128_hee_shared
(ethos-u55-128, Arm/vela.ini, Ethos_U55_High_End_Embedded, Shared_Sram).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

from npusched.frontend.tflite_reader import read_tflite
from npusched.lowering.graph import lower_model
from npusched.schedule import options
from npusched.solvers.max_schedule import vela_tensor_placements
from npusched.target import block_config, weights
from npusched.target.arch import load_architecture

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus" / "mobilenet_v2_224_int8.tflite"


def clear_all_caches(keep_lower_levels: bool = False) -> None:
    """Forget every memoised result the pricing depends on."""
    options.clear_caches()
    if keep_lower_levels:
        return
    weights.clear_caches()
    for name in dir(block_config):
        cached = getattr(block_config, name)
        if callable(getattr(cached, "cache_clear", None)):
            cached.cache_clear()


def price_everything(arch, ops, placements) -> int:
    return sum(len(options.price_options(arch, op, placements=placements)) for op in ops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--accelerator-config", default="ethos-u55-128")
    parser.add_argument("--config", action="append", metavar="FILE", help="Vela .ini file (default Arm/vela.ini)")
    parser.add_argument("--system-config", default="Ethos_U55_High_End_Embedded")
    parser.add_argument("--memory-mode", default="Shared_Sram")
    parser.add_argument("--arena-cache-size", type=int, default=None)
    parser.add_argument("--optimise", choices=("Performance", "Size"), default="Performance")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="keep block-search and weight-encoding caches")
    parser.add_argument("--profile", action="store_true", help="cProfile one more cold run and print the top")
    args = parser.parse_args()

    arch = load_architecture(args.accelerator_config, args.config or ["Arm/vela.ini"], args.system_config,
                             args.memory_mode, args.arena_cache_size, args.optimise)
    network = lower_model(read_tflite(args.model), arch)
    ops = [op for sg in network.subgraphs for op in sg.ops]
    placements = dict(vela_tensor_placements(network, arch))

    if args.warm:
        price_everything(arch, ops, placements)
    seconds = []
    count = 0
    for _ in range(args.repeats):
        clear_all_caches(keep_lower_levels=args.warm)
        start = time.perf_counter()
        count = price_everything(arch, ops, placements)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    mode = "warm block/weight caches" if args.warm else "cold caches"
    print(f"{args.model.name} ({args.accelerator_config}, {args.system_config}, {args.memory_mode}), {mode}")
    print(f"  ops:          {len(ops)}")
    print(f"  options:      {count}")
    print(f"  seconds:      {median:.3f} median of {args.repeats} (min {min(seconds):.3f}, max {max(seconds):.3f})")
    print(f"  options/s:    {count / median:,.0f}")

    if args.profile:
        clear_all_caches(keep_lower_levels=args.warm)
        profiler = cProfile.Profile()
        profiler.runcall(price_everything, arch, ops, placements)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
