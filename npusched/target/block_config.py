"""OFM/IFM block configurations and their SHRAM layout, chosen the way Vela 5.2.0's legacy allocator chooses.

The NPU computes an OFM in blocks; each block needs its IFM footprint (double-buffered) and its accumulators
(double-buffered, for non-elementwise ops) in the 1 KiB banks of SHRAM. For one op and stripe the search walks
OFM block depths (16-aligned unless the whole OFM depth fits), heights and widths in micro-block steps, keeps
the blocks whose buffers fit, scores each by IFM+weight re-fetch per OFM element and keeps the cheapest, with
Vela's tie-break on equal cost. :func:`enumerate_block_configs` exposes every fitting block with its score so a
solver can choose differently; :func:`find_block_config` is Vela's own choice.

All functions are pure; the search is memoised on its (hashable) inputs.
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from npusched.ir import Kernel, NpuBlockType, ResamplingMode, Shape4D
from npusched.target.arch import ArchitectureFeatures, ShramConfig, ShramElement

if TYPE_CHECKING:
    from npusched.ir import NpuOp

__all__ = [
    "BlockCandidate",
    "BlockConfig",
    "ElementwiseUsage",
    "ShramLayout",
    "accumulator_type",
    "choose_part_kernel",
    "elementwise_usage",
    "enumerate_block_configs",
    "find_block_config",
    "find_block_config_for_op",
    "fit_block_for_ofm",
    "get_ifm_area_required",
    "ifm_block_depth",
    "ifm_block_size",
    "op_block_inputs",
    "shram_layout",
    "try_block_config",
    "vela_choice",
]


class ElementwiseUsage(enum.IntEnum):
    """How an op uses the IFM2 SHRAM area: not at all, a full second IFM, or a scalar (no buffer)."""

    No = 0
    Full = 1
    Scalar = 2


@dataclass(frozen=True)
class ShramLayout:
    """Bank boundaries in SHRAM: IFM buffer [ib_start, ib_end), IFM2 from ib_start2, accumulators from
    ab_start, LUT from lut_start."""

    ib_start: int
    ib_end: int
    ib_start2: int
    ab_start: int
    lut_start: int


@dataclass(frozen=True)
class BlockConfig:
    """One block configuration of an op (Vela's ``ArchitectureBlockConfig``)."""

    ofm_block: Shape4D
    ifm_block: Shape4D
    acc_type: ShramElement
    is_partkernel: bool
    bank_size: int
    layout: ShramLayout

    def old_style(self) -> list[int]:
        """``[ofm height, ofm width, ifm depth, ofm depth]`` as Vela prints "Block Config"."""
        ofm = self.ofm_block
        return [ofm.height, ofm.width, self.ifm_block.depth, ofm.depth]

    def __str__(self) -> str:
        return str(self.old_style())


@dataclass(frozen=True)
class BlockCandidate:
    """A fitting block with the score Vela ranks it by (lower ``cost`` is better).

    ``order`` is its position in Vela's search; ``searched`` is False for blocks Vela never tries because their
    height/width transpose already failed to fit at the same depth. ``coverage`` is the IFM area divided by the
    part of it one IFM block covers (Vela's tie-break among equal-cost blocks of at most 4x4).
    """

    config: BlockConfig
    cost: float
    coverage: float
    order: int
    searched: bool = True


_ACC_BITS = {ShramElement.Acc16: 16, ShramElement.Acc32: 32, ShramElement.Acc40: 40}


def _round_up(value: int, quantum: int) -> int:
    return -(-value // quantum) * quantum


def _ceil_div(value: int, divisor: int) -> int:
    return -(-value // divisor)


# ----------------------------------------------------------------------------------------------------------------
# Building blocks (each one of Vela's allocator helpers)


def elementwise_usage(npu_block_type: NpuBlockType, uses_scalar: bool) -> ElementwiseUsage:
    if npu_block_type is not NpuBlockType.ElementWise:
        return ElementwiseUsage.No
    return ElementwiseUsage.Scalar if uses_scalar else ElementwiseUsage.Full


def accumulator_type(npu_block_type: NpuBlockType, ifm_bits: int, scaled: bool) -> ShramElement:
    """40-bit accumulators only for scaled 16-bit non-pooling ops; 32-bit otherwise."""
    if ifm_bits == 16 and npu_block_type is not NpuBlockType.Pooling and scaled:
        return ShramElement.Acc40
    return ShramElement.Acc32


def choose_part_kernel(ifm_shape: Shape4D, ifm_bits: int, kernel: Kernel) -> bool:
    """Part-kernel-first traversal when it wastes fewer MAC slots than depth-first (always for depth <= 8)."""
    depth = ifm_shape.depth
    if depth <= 8:
        return True
    elements = kernel.width * kernel.height
    depth_use = depth / _round_up(depth, 32 if ifm_bits == 8 else 16)
    part_use = depth * elements / (_round_up(depth, 8) * _round_up(elements, 4 if ifm_bits == 8 else 2))
    return part_use > depth_use


def ifm_block_depth(arch: ArchitectureFeatures, ifm_shape: Shape4D, ifm_bits: int, is_partkernel: bool) -> int:
    """IFM block depth of a depth-reducing op (convolution, fully connected, reduce sum)."""
    return _ifm_block_depth_hw(_hw_of(arch), ifm_shape, ifm_bits, is_partkernel)


def _upscale(mode: ResamplingMode) -> int:
    return 1 if mode is ResamplingMode.NONE else 2


def _needed(value: int, stride: int, border: int, upscale: int, nearest: int) -> int:
    span = (value - 1) * stride + border + nearest
    return int(math.ceil(span / upscale))


def get_ifm_area_required(ofm_shape: Shape4D, kernel: Kernel, resampling_mode: ResamplingMode) -> tuple[int, int]:
    """(width, height) of IFM an OFM stripe of ``ofm_shape`` reads (unclamped, before upscaling)."""
    up = _upscale(resampling_mode)
    near = 1 if resampling_mode is ResamplingMode.NEAREST else 0
    height = _needed(ofm_shape.height, kernel.stride_y, kernel.area_height(), up, near)
    width = _needed(ofm_shape.width, kernel.stride_x, kernel.area_width(), up, near)
    return (width, height)


def ifm_block_size(ofm_block: Shape4D, kernel: Kernel, ublock: Shape4D, subkernel_limit: Shape4D,
                   resampling_mode: ResamplingMode) -> Shape4D:
    """IFM block feeding one OFM block; depth is the OFM block's (depth-reducing ops override it).

    Vela rounds to the *OFM* micro-block here, which is what the caller passes as ``ublock``.
    """
    up = _upscale(resampling_mode)
    near = 1 if resampling_mode is ResamplingMode.NEAREST else 0
    height = _needed(ofm_block.height, kernel.stride_y, min(kernel.area_height(), subkernel_limit.height), up, near)
    width = _needed(ofm_block.width, kernel.stride_x, min(kernel.area_width(), subkernel_limit.width), up, near)
    return Shape4D(1, _round_up(height, ublock.height), _round_up(width, ublock.width), ofm_block.depth)


def fit_block_for_ofm(arch: ArchitectureFeatures, ofm_shape: Shape4D, kernel: Kernel, block: Shape4D) -> Shape4D:
    """On 2-high micro-block accelerators a 1-high OFM with a 1-high kernel uses a 1-high accumulator block."""
    if ofm_shape.height == 1 and kernel.height == 1 and arch.ofm_ublock.height == 2:
        height = min(block.height, ofm_shape.height)
        return Shape4D(1, height, block.width, block.depth)
    return block


def shram_layout(shram: ShramConfig, ew_usage: ElementwiseUsage, ofm_block: Shape4D, ifm_block: Shape4D,
                 ifm_bits: int, ifm_granule: int, acc_bits: int, acc_granule: int,
                 lut_banks: int) -> ShramLayout | None:
    """SHRAM layout for the blocks, or None when they do not fit."""
    fit = _layout_banks(shram.bank_size_bytes, shram.reserved_output_banks, shram.total_banks, int(ew_usage),
                        ofm_block.height * ofm_block.width, ofm_block.depth,
                        ifm_block.height * ifm_block.width, ifm_block.depth,
                        ifm_bits, ifm_granule, acc_bits, acc_granule, lut_banks)
    return None if fit is None else ShramLayout(*fit)


def _layout_banks(bank_bytes: int, reserved_out: int, total_banks: int, ew: int, ofm_wh: int, ofm_depth: int,
                  ifm_wh: int, ifm_depth: int, ifm_bits: int, ifm_granule: int, acc_bits: int, acc_granule: int,
                  lut_banks: int) -> tuple[int, int, int, int, int] | None:
    # Every op double-buffers its IFM block; each IFM element row is padded to 8 bytes.
    ifm_bytes = ifm_wh * _round_up(ifm_depth * ifm_bits // 8, 8)
    ifm_banks = _round_up(_ceil_div(ifm_bytes, bank_bytes) * 2, ifm_granule)
    lut_start = total_banks - lut_banks
    ifm_end = reserved_out + ifm_banks
    ifm2_start = ifm_end
    acc_start = lut_start
    if ew == 0:
        acc_bytes = ofm_wh * _round_up(ofm_depth, 8) * acc_bits // 8
        acc_start -= _round_up(_ceil_div(acc_bytes, bank_bytes) * 2, acc_granule)
    else:
        # Elementwise: no accumulators; a full IFM2 needs as many banks as the IFM, and the IFM may then
        # extend up to the LUT.
        if ifm2_start + (ifm_banks if ew == 1 else 0) > acc_start:
            return None
        ifm_end = acc_start
    if ifm_end > acc_start:
        return None
    return (reserved_out, ifm_end, ifm2_start, acc_start, lut_start)


# ----------------------------------------------------------------------------------------------------------------
# The search


@dataclass(frozen=True)
class _Hw:
    """The accelerator figures the search depends on (so its cache is shared across memory systems)."""

    ofm_ublock: Shape4D
    ifm_ublock: Shape4D
    ofm_block_max: Shape4D
    sub_kernel_max: Shape4D
    split_depth: int
    shram: ShramConfig
    bank_size: int
    acc_granules: tuple[tuple[ShramElement, int], ...]
    ifm_granules: tuple[tuple[int, int], ...]
    ifm_ew_granules: tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=64)
def _hw_of(arch: ArchitectureFeatures) -> _Hw:
    return _Hw(arch.ofm_ublock, arch.ifm_ublock, arch.ofm_block_max, arch.sub_kernel_max, arch.ofm_split_depth,
               arch.shram, arch.shram_bank_size, tuple(arch.accumulator_granules.items()),
               tuple(arch.ifm_bank_granules.items()), tuple(arch.ifm_ew_bank_granules.items()))


def _plain_kernel(kernel: Kernel) -> Kernel:
    """Drop padding so calls that differ only in padding share cache entries."""
    return Kernel(kernel.width, kernel.height, kernel.stride_x, kernel.stride_y, kernel.dilation_x,
                  kernel.dilation_y)


@dataclass(frozen=True)
class _Setup:
    ew: ElementwiseUsage
    is_depthwise: bool
    equal_depth: bool
    is_convolution: bool
    acc_type: ShramElement
    acc_bits: int
    acc_granule: int
    ifm_granule: int
    lut_banks: int
    ifm_shape: Shape4D


def _setup(hw: _Hw, npu_block_type: NpuBlockType, ifm_shape: Shape4D, ifm2_shape: Shape4D | None,
           uses_scalar: bool, ifm_bits: int, lut_banks: int, scaled: bool) -> _Setup:
    if ifm_bits not in (8, 16, 32):
        raise ValueError(f"the NPU reads 8, 16 or 32-bit IFMs, not {ifm_bits}-bit")
    # A broadcasting elementwise op is sized by its larger input.
    if ifm2_shape is not None and ifm_shape.elements() < ifm2_shape.elements():
        ifm_shape = ifm2_shape
    ew = elementwise_usage(npu_block_type, uses_scalar)
    is_depthwise = npu_block_type is NpuBlockType.ConvolutionDepthWise
    equal_depth = ew is not ElementwiseUsage.No or npu_block_type is NpuBlockType.Pooling or is_depthwise
    is_convolution = npu_block_type is NpuBlockType.ConvolutionMxN or is_depthwise
    acc = accumulator_type(npu_block_type, ifm_bits, scaled)
    granules = dict(hw.ifm_ew_granules if ew is not ElementwiseUsage.No else hw.ifm_granules)
    return _Setup(ew, is_depthwise, equal_depth, is_convolution, acc, _ACC_BITS[acc], dict(hw.acc_granules)[acc],
                  granules[ifm_bits], max(lut_banks, hw.shram.reserved_end_banks), ifm_shape)


def _scan(hw: _Hw, npu_block_type: NpuBlockType, ofm_shape: Shape4D, ifm_shape: Shape4D,
          ifm2_shape: Shape4D | None, uses_scalar: bool, ifm_bits: int, kernel: Kernel, lut_banks: int,
          scaled: bool, resampling_mode: ResamplingMode, everything: bool) -> tuple:
    """Walk Vela's search space. Returns (setup, is_partkernel, choice, candidates).

    ``choice`` is the raw tuple Vela keeps; ``candidates`` (only when ``everything``) lists every fitting block,
    including the transposes Vela skips, as raw tuples
    ``(order, searched, cost, coverage, (h, w, d), (ifm h, ifm w, ifm d), layout)``.
    """
    s = _setup(hw, npu_block_type, ifm_shape, ifm2_shape, uses_scalar, ifm_bits, lut_banks, scaled)
    ifm = s.ifm_shape
    part = s.is_convolution and choose_part_kernel(ifm, ifm_bits, kernel)
    ub = hw.ofm_ublock
    up = _upscale(resampling_mode)
    near = 1 if resampling_mode is ResamplingMode.NEAREST else 0
    area_h, area_w = kernel.area_height(), kernel.area_width()
    ifm_repeats = _ceil_div(area_w, hw.sub_kernel_max.width) * _ceil_div(area_h, hw.sub_kernel_max.height)
    reduced_depth = _ifm_block_depth_hw(hw, ifm, ifm_bits, part)
    weight_fetch_wh = area_w * area_h if s.is_convolution else 0
    sub_h = min(area_h, hw.sub_kernel_max.height)
    sub_w = min(area_w, hw.sub_kernel_max.width)
    one_high = ofm_shape.height == 1 and kernel.height == 1 and ub.height == 2

    space_h = _round_up(min(ofm_shape.height, hw.ofm_block_max.height), ub.height)
    space_w = _round_up(min(ofm_shape.width, hw.ofm_block_max.width), ub.width)
    space_d = _round_up(min(ofm_shape.depth, hw.ofm_block_max.depth), ub.depth)

    ofm_elements = ofm_shape.elements()
    ifm_elements = ifm.elements()
    ifm_wh = ifm.height * ifm.width
    ifm_depth = ifm.depth
    o_h, o_w, o_d = ofm_shape.height, ofm_shape.width, ofm_shape.depth
    is_ew = npu_block_type is NpuBlockType.ElementWise
    shram = hw.shram
    bank_bytes, reserved_out, total_banks = shram.bank_size_bytes, shram.reserved_output_banks, shram.total_banks
    ew = int(s.ew)

    # IFM block height/width per OFM block height/width (independent of depth).
    ifm_h_of = {h: _round_up(_needed(h, kernel.stride_y, sub_h, up, near), ub.height)
                for h in range(ub.height, space_h + 1, ub.height)}
    ifm_w_of = {w: _round_up(_needed(w, kernel.stride_x, sub_w, up, near), ub.width)
                for w in range(ub.width, space_w + 1, ub.width)}

    best_cost = math.inf
    best_coverage = math.inf
    choice = None
    candidates = []
    order = 0
    depth = max(ub.depth, min(space_d, hw.split_depth))
    if depth < o_d:
        depth = _round_up(depth, hw.split_depth)
    while depth <= space_d:
        failed: set[tuple[int, int]] = set()
        ifm_d = depth if s.equal_depth else reduced_depth
        for height in range(ub.height, space_h + 1, ub.height):
            ifm_h = ifm_h_of[height]
            acc_h = min(height, o_h) if one_high else height
            for width in range(ub.width, space_w + 1, ub.width):
                order += 1
                searched = (height, width) not in failed
                if not searched and not everything:
                    continue
                ifm_w = ifm_w_of[width]
                fit = _layout_banks(bank_bytes, reserved_out, total_banks, ew, acc_h * width, depth, ifm_h * ifm_w,
                                    ifm_d, ifm_bits, s.ifm_granule, s.acc_bits, s.acc_granule, s.lut_banks)
                if fit is None:
                    if searched:
                        # Vela records the miss under the transposed key, so the transpose is never tried.
                        failed.add((width, height))
                    continue
                # Fetch counts per OFM element: weights re-read per OFM block column, IFM re-read per block
                # (and per OFM depth block for depth-reducing ops).
                full_h, full_w, full_d = _ceil_div(o_h, acc_h), _ceil_div(o_w, width), _ceil_div(o_d, depth)
                blocks_wh = (o_w / width) * (o_h / acc_h)
                weight_fetch: float = weight_fetch_wh * ifm_depth * (full_w * full_h)
                if not s.is_depthwise:
                    weight_fetch *= depth * (o_d / depth)
                ifm_fetch = ifm_w * ifm_h * ifm_depth * ifm_repeats * blocks_wh
                if not s.equal_depth:
                    ifm_fetch *= full_d
                if is_ew:
                    cost = max(ofm_elements / (height * width * depth), 1)
                else:
                    cost = (ifm_fetch + weight_fetch) / ofm_elements
                if ifm_elements < ifm_h * ifm_w * ifm_d * 2:
                    cost = cost / 2
                coverage = ifm_wh / (min(ifm.height, ifm_h) * min(ifm.width, ifm_w))
                raw = (order, searched, cost, coverage, (height, width, depth), (ifm_h, ifm_w, ifm_d), fit)
                if everything:
                    candidates.append(raw)
                if searched and cost <= best_cost:
                    take = False
                    if cost == best_cost:
                        if coverage <= best_coverage and height <= 4 and width <= 4:
                            best_coverage = coverage
                            take = True
                    else:
                        best_coverage = math.inf
                        take = True
                    if take:
                        best_cost = cost
                        choice = raw
        depth += ub.depth
        if depth < o_d:
            depth = _round_up(depth, hw.split_depth)
    return s, part, choice, tuple(candidates)


def _ifm_block_depth_hw(hw: _Hw, ifm_shape: Shape4D, ifm_bits: int, is_partkernel: bool) -> int:
    if ifm_bits == 16:
        return _round_up(min(ifm_shape.depth, 16), 4)
    return _round_up(min(ifm_shape.depth, 16 if is_partkernel else 32), hw.ifm_ublock.depth)


def _config_of(hw: _Hw, s: _Setup, part: bool, raw: tuple) -> BlockConfig:
    h, w, d = raw[4]
    ih, iw, idp = raw[5]
    return BlockConfig(ofm_block=Shape4D(1, h, w, d), ifm_block=Shape4D(1, ih, iw, idp), acc_type=s.acc_type,
                       is_partkernel=part, bank_size=hw.bank_size, layout=ShramLayout(*raw[6]))


def _norm_args(ofm_shape: Shape4D, ifm_shape: Shape4D, ifm2_shape: Shape4D | None, kernel: Kernel,
               resampling_mode: ResamplingMode | None) -> tuple:
    return (ofm_shape, ifm_shape, ifm2_shape, _plain_kernel(kernel),
            ResamplingMode.NONE if resampling_mode is None else resampling_mode)


def find_block_config(arch: ArchitectureFeatures, npu_block_type: NpuBlockType, ofm_shape: Shape4D,
                      ifm_shape: Shape4D, ifm2_shape: Shape4D | None, uses_scalar: bool, ifm_bits: int,
                      kernel: Kernel, lut_banks: int = 0, scaled: bool = True,
                      resampling_mode: ResamplingMode = ResamplingMode.NONE) -> BlockConfig | None:
    """Vela's block config for an op producing ``ofm_shape`` from ``ifm_shape`` (stripes, not whole tensors,
    when the op is striped); None when no block fits in SHRAM."""
    ofm, ifm, ifm2, kern, mode = _norm_args(ofm_shape, ifm_shape, ifm2_shape, kernel, resampling_mode)
    return _find(_hw_of(arch), npu_block_type, ofm, ifm, ifm2, bool(uses_scalar), int(ifm_bits), kern,
                 int(lut_banks), bool(scaled), mode)


@functools.lru_cache(maxsize=65536)
def _find(hw: _Hw, npu_block_type: NpuBlockType, ofm: Shape4D, ifm: Shape4D, ifm2: Shape4D | None,
          uses_scalar: bool, ifm_bits: int, kernel: Kernel, lut_banks: int, scaled: bool,
          mode: ResamplingMode) -> BlockConfig | None:
    s, part, choice, _ = _scan(hw, npu_block_type, ofm, ifm, ifm2, uses_scalar, ifm_bits, kernel, lut_banks, scaled,
                               mode, False)
    return None if choice is None else _config_of(hw, s, part, choice)


def enumerate_block_configs(arch: ArchitectureFeatures, npu_block_type: NpuBlockType, ofm_shape: Shape4D,
                            ifm_shape: Shape4D, ifm2_shape: Shape4D | None, uses_scalar: bool, ifm_bits: int,
                            kernel: Kernel, lut_banks: int = 0, scaled: bool = True,
                            resampling_mode: ResamplingMode = ResamplingMode.NONE,
                            include_unsearched: bool = True) -> tuple[BlockCandidate, ...]:
    """Every OFM block that fits in SHRAM for this op, in Vela's search order, with Vela's score.

    Vela's choice (:func:`find_block_config`) is the lowest-cost searched candidate, ties broken as
    :func:`vela_choice` does. With ``include_unsearched`` False only the blocks Vela itself tries are listed.
    """
    ofm, ifm, ifm2, kern, mode = _norm_args(ofm_shape, ifm_shape, ifm2_shape, kernel, resampling_mode)
    found = _enumerate(_hw_of(arch), npu_block_type, ofm, ifm, ifm2, bool(uses_scalar), int(ifm_bits), kern,
                       int(lut_banks), bool(scaled), mode)
    return found if include_unsearched else tuple(c for c in found if c.searched)


@functools.lru_cache(maxsize=4096)
def _enumerate(hw: _Hw, npu_block_type: NpuBlockType, ofm: Shape4D, ifm: Shape4D, ifm2: Shape4D | None,
               uses_scalar: bool, ifm_bits: int, kernel: Kernel, lut_banks: int, scaled: bool,
               mode: ResamplingMode) -> tuple[BlockCandidate, ...]:
    s, part, _, raws = _scan(hw, npu_block_type, ofm, ifm, ifm2, uses_scalar, ifm_bits, kernel, lut_banks, scaled,
                             mode, True)
    return tuple(BlockCandidate(_config_of(hw, s, part, raw), raw[2], raw[3], raw[0], raw[1]) for raw in raws)


def vela_choice(candidates: tuple[BlockCandidate, ...]) -> BlockCandidate | None:
    """Pick among candidates (in search order) the way Vela does: strictly lower cost wins; on an equal cost a
    block of at most 4x4 with no worse IFM coverage than the last such pick replaces the current one."""
    best_cost = math.inf
    best_coverage = math.inf
    chosen = None
    for cand in sorted(candidates, key=lambda c: c.order):
        if not cand.searched or cand.cost > best_cost:
            continue
        if cand.cost == best_cost:
            blk = cand.config.ofm_block
            if not (cand.coverage <= best_coverage and blk.height <= 4 and blk.width <= 4):
                continue
            best_coverage = cand.coverage
        else:
            best_coverage = math.inf
        best_cost = cand.cost
        chosen = cand
    return chosen


def try_block_config(block: Shape4D, arch: ArchitectureFeatures, npu_block_type: NpuBlockType, ofm_shape: Shape4D,
                     ifm_shape: Shape4D, ifm2_shape: Shape4D | None, uses_scalar: bool, ifm_bits: int,
                     is_partkernel: bool, kernel: Kernel, lut_banks: int = 0, scaled: bool = True,
                     resampling_mode: ResamplingMode = ResamplingMode.NONE) -> BlockConfig | None:
    """The config for a given OFM block (h, w, d of ``block``), or None if it is invalid or does not fit."""
    hw = _hw_of(arch)
    limits = (hw.ofm_block_max.height, hw.ofm_block_max.width, hw.ofm_block_max.depth)
    steps = (hw.ofm_ublock.height, hw.ofm_ublock.width, hw.ofm_ublock.depth)
    dims = (block.height, block.width, block.depth)
    if not all(0 < v <= top and v % step == 0 for v, top, step in zip(dims, limits, steps, strict=True)):
        return None
    s = _setup(hw, npu_block_type, ifm_shape, ifm2_shape, uses_scalar, ifm_bits, lut_banks, scaled)
    block = Shape4D(1, block.height, block.width, block.depth)
    ifm_block = ifm_block_size(block, kernel, hw.ofm_ublock, hw.sub_kernel_max, resampling_mode)
    if not s.equal_depth:
        ifm_block = ifm_block.with_depth(_ifm_block_depth_hw(hw, s.ifm_shape, ifm_bits, is_partkernel))
    acc_block = fit_block_for_ofm(arch, ofm_shape, kernel, block)
    fit = _layout_banks(hw.shram.bank_size_bytes, hw.shram.reserved_output_banks, hw.shram.total_banks, int(s.ew),
                        acc_block.height * acc_block.width, acc_block.depth, ifm_block.height * ifm_block.width,
                        ifm_block.depth, ifm_bits, s.ifm_granule, s.acc_bits, s.acc_granule, s.lut_banks)
    if fit is None:
        return None
    return BlockConfig(ofm_block=block, ifm_block=ifm_block, acc_type=s.acc_type, is_partkernel=is_partkernel,
                       bank_size=hw.bank_size, layout=ShramLayout(*fit))


# ----------------------------------------------------------------------------------------------------------------
# Convenience for NpuOps


class BlockInputs(TypedDict):
    """The op-level keyword arguments of ``find_block_config``/``enumerate_block_configs``."""

    npu_block_type: NpuBlockType
    uses_scalar: bool
    ifm_bits: int
    kernel: Kernel
    lut_banks: int
    scaled: bool
    resampling_mode: ResamplingMode


def op_block_inputs(op: NpuOp) -> BlockInputs:
    """The op-level inputs of the block search that do not depend on the stripe."""
    return {
        "npu_block_type": op.npu_block_type,
        "uses_scalar": op.uses_scalar,
        "ifm_bits": op.ifm.tensor.dtype.size_in_bits,
        "kernel": op.kernel,
        "lut_banks": 2 if op.activation_lut is not None else 0,
        "scaled": op.has_scaling,
        "resampling_mode": op.resampling_mode,
    }


def find_block_config_for_op(arch: ArchitectureFeatures, op: NpuOp, ofm_stripe: Shape4D | None = None,
                             ifm_stripe: Shape4D | None = None,
                             ifm2_stripe: Shape4D | None = None) -> BlockConfig | None:
    """Vela's block config for ``op`` producing ``ofm_stripe`` (default: the whole OFM).

    ``op.ifm`` is taken as the primary (post-swap) input, as in Vela's SchedulerOperation. Stripes default to the
    op's full shapes; pass the stripe-clamped IFM shapes when the op is striped, as Vela's scheduler does.
    """
    ofm = op.ofm.shape if ofm_stripe is None else ofm_stripe
    ifm = op.ifm.shape if ifm_stripe is None else ifm_stripe
    ifm2 = ifm2_stripe
    if ifm2 is None and op.ifm2 is not None:
        ifm2 = op.ifm2.shape
    return find_block_config(arch, ofm_shape=ofm, ifm_shape=ifm, ifm2_shape=ifm2, **op_block_inputs(op))
