#!/usr/bin/env python3
"""How fast every (block config x OFM stripe height) option of every NPU pass of a model is priced.

    python scripts/bench/pricing.py [MODEL] [--config u55-128_hee_shared] [--optimise Performance|Size]
        [--repeats 3] [--warm] [--profile]

Each repeat starts cold: the option memo, the block-config search caches and the weight-encoding caches are
emptied first, so every block search, weight encoding and price is computed again (``--warm`` keeps the block
search and weight caches and only empties the option memo). Loading and lowering the model are not timed.
Target (issue): >= 20,000 options/s on one core for mobilenet_v2_224_int8 (the default) under
u55-128_hee_shared (ethos-u55-128, Ethos_U55_High_End_Embedded, Shared_Sram).
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npusched.app.pipeline import architecture
from npusched.bench import cli, golden, paths
from npusched.errors import exit_status
from npusched.frontend.tflite_reader import read_tflite
from npusched.lowering.graph import lower_model
from npusched.schedule import options
from npusched.solvers.max_schedule import vela_tensor_placements
from npusched.target import block_config, weights
from npusched.target.estimators import PricedArchitecture


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


def price_everything(arch: PricedArchitecture, ops: Sequence[Any], placements: dict[Any, Any]) -> int:
    return sum(len(options.price_options(arch, op, placements=placements)) for op in ops)


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("model", type=Path, nargs="?", help="default: mobilenet_v2_224_int8 of the corpus")
    cli.add_config(parser)
    parser.add_argument("--optimise", choices=("Performance", "Size"), default="Performance")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="keep block-search and weight-encoding caches")
    parser.add_argument("--profile", action="store_true", help="cProfile one more cold run and print the top")
    args = parser.parse_args()
    config = golden.config(args.config)
    model = args.model or paths.corpus_models(["mobilenet_v2_224_int8"])[0]
    arch = architecture(golden.run_options_from_vela_args(model, config, solver=None, optimise=args.optimise))
    network = lower_model(read_tflite(model), arch)
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
    print(f"{model.name} ({args.config}, {args.optimise}), {'warm block/weight' if args.warm else 'cold'} caches")
    print(f"  ops:          {len(ops)}")
    print(f"  options:      {count}")
    print(f"  seconds:      {median:.3f} median of {args.repeats} (min {min(seconds):.3f}, max {max(seconds):.3f})")
    print(f"  options/s:    {count / median:,.0f}")

    if args.profile:
        clear_all_caches(keep_lower_levels=args.warm)
        profiler = cProfile.Profile()
        profiler.runcall(price_everything, arch, ops, placements)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
