#!/usr/bin/env python3
"""What patch-based inference (MCUNetV2) of a network's first stage would save over npusched's `--optimise Size`
answer: issue 34, item 3, measured where Vela's backend cannot compile it.

Usage: python scripts/patch_savings.py [--archs a,b] [--style plain] [--corpus m1,m2] [--config NAME]
           [--patches 2,3,4] [--time-limit 20] [--csv PATH]

Per network: npusched's Size answer (CP-SAT, deterministic, one worker) gives the fast storage in use at every
step and each pass's cycles. A *cut* after the first k passes of the first NPU subgraph is where exactly one map
made before it is read after it (the stage's output) and every pass before it is spatial (a convolution, depthwise
convolution, pool or element-wise pass: no reshape, resampling, reduction or write into a slice). The stage then
runs patch by patch, P x P patches of its output, each computed from its own region of the stage's input (the
receptive field, halo included, found back through every pass's kernel, stride, dilation and padding). Its fast
storage at a pass is the stage's input and output, whole, plus the patch-sized regions of the maps live there
(16-deep bricks, as Vela stores them; the network's input as given), the largest over every patch and pass.
After the cut the network runs as npusched's answer does (its use at those steps; the stage output whole where
the answer had cascaded it). The halo is recomputed: each pass of the stage computes the sum of its patches'
regions, and its cycles grow by that over its output's size.

Each row gives the best cut and patch grid (least peak, then fewest recomputed cycles) against the Size peak, and
the best recomputing at most ``--max-recompute`` per cent of the network's cycles (``*_cheap``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched.app.pipeline import run  # noqa: E402
from npusched.ir import FeatureMap, NpuBlockType, NpuOp, ResamplingMode  # noqa: E402
from npusched.lowering.graph import NpuSubgraph  # noqa: E402
from npusched.netgen import ARCHITECTURES, generate  # noqa: E402
from npusched.vela.command import run_options_from_vela_args  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = json.loads((ROOT / "tests" / "data" / "golden" / "configs.json").read_text())
CORPUS = ROOT / "tests" / "data" / "corpus"
SPATIAL = frozenset({NpuBlockType.ConvolutionMxN, NpuBlockType.ConvolutionDepthWise, NpuBlockType.Pooling,
                     NpuBlockType.ElementWise})
Region = tuple[int, int, int, int]  # rows [r0, r1), columns [c0, c1)


@dataclass(frozen=True)
class PatchPlan:
    cut: int  # the stage is the first ``cut`` passes
    patches: int  # P: P x P patches of the stage output
    stage_peak_bytes: int
    rest_peak_bytes: int
    recomputed_cycles: float

    @property
    def peak_bytes(self) -> int:
        return max(self.stage_peak_bytes, self.rest_peak_bytes)


def _bytes(fm: FeatureMap, rows: int, cols: int, bricks: bool = True) -> int:
    depth = -(-fm.shape.depth // 16) * 16 if bricks else fm.shape.depth
    return rows * cols * depth * fm.dtype.size_in_bytes


def _whole(fm: FeatureMap) -> Region:
    return (0, fm.shape.height, 0, fm.shape.width)


def _patchable(op: NpuOp) -> bool:
    same_map = op.ifm.tensor.shape.height == op.ifm.shape.height and op.ofm.tensor.shape == op.ofm.shape
    return (op.npu_block_type in SPATIAL and op.resampling_mode is ResamplingMode.NONE and op.ofm.offset is None
            and op.ifm.offset is None and same_map and op.ofm.shape.batch == 1)


def _input_region(op: NpuOp, out: Region, fm: FeatureMap) -> Region:
    """The region of ``fm`` (an input of ``op``) that ``op`` reads to compute ``out`` of its output."""
    if op.npu_block_type is NpuBlockType.ElementWise:
        if (fm.shape.height, fm.shape.width) != (op.ofm.shape.height, op.ofm.shape.width):
            return _whole(fm)  # a broadcast operand
        return out
    k = op.kernel
    top, left = k.padding[0], k.padding[1]
    r0 = max(0, out[0] * k.stride_y - top)
    r1 = min(fm.shape.height, (out[1] - 1) * k.stride_y - top + k.area_height())
    c0 = max(0, out[2] * k.stride_x - left)
    c1 = min(fm.shape.width, (out[3] - 1) * k.stride_x - left + k.area_width())
    return (r0, max(r0, r1), c0, max(c0, c1))


def _union(a: Region | None, b: Region) -> Region:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3]))


def cuts(sg: NpuSubgraph) -> list[tuple[int, FeatureMap, FeatureMap]]:
    """(k, stage input, stage output) for every cut of ``sg`` (module docstring)."""
    ops = list(sg.ops)
    found = []
    stage_input = ops[0].ifm.tensor
    for k in range(2, len(ops)):
        if not _patchable(ops[k - 1]):
            break
        made = {op.ofm.tensor for op in ops[:k]}
        later = [fm for op in ops[k:] for fm in _inputs(op)]
        crossing = {fm for fm in later if fm in made}
        outside = {fm for op in ops[:k] for fm in _inputs(op) if fm not in made and fm.constant is None}
        if len(crossing) == 1 and outside == {stage_input} and stage_input not in later:
            found.append((k, stage_input, crossing.pop()))
    return found


def stage_peak(ops: list[NpuOp], stage_in: FeatureMap, stage_out: FeatureMap, patches: int
               ) -> tuple[int, list[float]]:
    """The stage's largest fast-storage use over every patch and pass, and the factor by which each pass's output
    is computed (the sum of its patches' regions over its size), per pass."""
    height, width = stage_out.shape.height, stage_out.shape.width
    rows = [(height * i // patches, height * (i + 1) // patches) for i in range(patches)]
    cols = [(width * j // patches, width * (j + 1) // patches) for j in range(patches)]
    made_at: dict[FeatureMap, int] = {}
    last_read: dict[FeatureMap, int] = {}
    for position, op in enumerate(ops):
        made_at.setdefault(op.ofm.tensor, position)
        last_read.update((fm, position) for fm in _inputs(op))
    # The network's input is stored as it is given (NHWC), every other map in 16-deep bricks.
    whole = _bytes(stage_in, stage_in.shape.height, stage_in.shape.width, bricks=False) \
        + _bytes(stage_out, height, width)
    peak = 0
    computed = [0] * len(ops)
    for r in rows:
        for c in cols:
            region: dict[FeatureMap, Region] = {stage_out: (r[0], r[1], c[0], c[1])}
            for op in reversed(ops):
                out = region.get(op.ofm.tensor)
                if out is None:
                    continue
                for fm in _inputs(op):
                    if fm.constant is None:
                        region[fm] = _union(region.get(fm), _input_region(op, out, fm))
            for position, op in enumerate(ops):
                out = region.get(op.ofm.tensor, (0, 0, 0, 0))
                computed[position] += (out[1] - out[0]) * (out[3] - out[2])
                tiles = sum(_bytes(fm, reg[1] - reg[0], reg[3] - reg[2]) for fm, reg in region.items()
                            if fm not in (stage_in, stage_out)
                            and made_at.get(fm, -1) <= position <= last_read.get(fm, -1))
                peak = max(peak, whole + tiles)
    factors = [computed[p] / max(1, op.ofm.shape.height * op.ofm.shape.width) for p, op in enumerate(ops)]
    return peak, factors


def _inputs(op: NpuOp) -> list[FeatureMap]:
    return [op.ifm.tensor] + ([op.ifm2.tensor] if op.ifm2 is not None else [])


def plans(result, patch_counts: list[int]) -> list[PatchPlan]:
    sg = result.network.subgraphs[0]
    memory = result.evaluation.memory[0]
    ops = list(sg.ops)
    cycles = {cost.op_index: cost.total_cycles for cost in result.evaluation.ops}
    out = []
    for k, stage_in, stage_out in cuts(sg):
        after = memory.op_steps[ops[k].index]
        rest = max(memory.usage[after:], default=0)
        whole_after = any(stage_out in rng.feature_maps and rng.start <= after <= rng.end
                          and rng.size >= _bytes(stage_out, stage_out.shape.height, stage_out.shape.width)
                          for rng in memory.live_ranges)
        if not whole_after:
            rest = max(rest, memory.usage[after] + _bytes(stage_out, stage_out.shape.height, stage_out.shape.width))
        for patches in patch_counts:
            peak, factors = stage_peak(ops[:k], stage_in, stage_out, patches)
            extra = sum((f - 1) * cycles.get(op.index, 0.0) for f, op in zip(factors, ops[:k], strict=True))
            out.append(PatchPlan(k, patches, peak, rest, extra))
    return out


def _models(args: argparse.Namespace) -> list[tuple[str, bytes]]:
    if args.corpus:
        return [(name, (CORPUS / f"{name}.tflite").read_bytes()) for name in args.corpus.split(",")]
    archs = args.archs.split(",") if args.archs else list(ARCHITECTURES)
    return [(arch, generate(arch, args.passes, args.seed, keras_style=args.style == "keras")) for arch in archs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default="")
    parser.add_argument("--style", default="plain", choices=("plain", "keras"))
    parser.add_argument("--corpus", default="", help="comma-separated corpus models instead of netgen's")
    parser.add_argument("--passes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="u55-128_hee_shared_size")
    parser.add_argument("--patches", default="2,3,4")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--max-recompute", type=float, default=20.0,
                        help="the *_cheap columns: the best plan recomputing at most this %% of the cycles")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    patch_counts = [int(p) for p in args.patches.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in _models(args):
            path = Path(tmp) / f"{name}.tflite"
            path.write_bytes(data)
            options = run_options_from_vela_args(path, CONFIGS[args.config], solver="cpsat",
                                                 time_limit_seconds=args.time_limit, workers=1, deterministic=True)
            result = run(options)
            size_peak = result.evaluation.peak_fast_storage
            total = result.evaluation.total_cycles
            found = plans(result, patch_counts)
            row = {"network": name, "size_peak": size_peak, "cuts": len({p.cut for p in found})}
            cheap = [p for p in found if p.recomputed_cycles <= args.max_recompute / 100 * total]
            for suffix, among in (("", found), ("_cheap", cheap)):
                best = min(among, key=lambda p: (p.peak_bytes, p.recomputed_cycles), default=None)
                if best is not None:
                    row.update({f"cut{suffix}": best.cut, f"patches{suffix}": best.patches,
                                f"stage_peak{suffix}": best.stage_peak_bytes,
                                f"rest_peak{suffix}": best.rest_peak_bytes, f"patch_peak{suffix}": best.peak_bytes,
                                f"ratio{suffix}": round(best.peak_bytes / size_peak, 3),
                                f"recomputed_pct{suffix}": round(100 * best.recomputed_cycles / total, 1)})
            rows.append(row)
            print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    for suffix in ("", "_cheap"):
        ratios = [min(1.0, r[f"ratio{suffix}"]) for r in rows if f"ratio{suffix}" in r]
        if ratios:
            geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            print(f"patch peak{suffix} / Size peak (1 where no plan is smaller): {len(ratios)} networks, "
                  f"geomean {geomean:.3f}, least {min(ratios):.3f}")
    if args.csv:
        plan = ["cut", "patches", "stage_peak", "rest_peak", "patch_peak", "ratio", "recomputed_pct"]
        columns = ["network", "size_peak", "cuts", *plan, *(f"{c}_cheap" for c in plan)]
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
