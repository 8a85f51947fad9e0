"""Sizes of the NPU's combined weight + scale streams, as Vela 5.2.0 lays them out.

The NPU reads, per OFM depth slice and per core, one scale/bias sub-stream (10 bytes per output channel,
zero-padded to a 16-byte boundary) followed by the compressed weight sub-stream that Arm's own codec
(``ethosu.mlw_codec``) produces, itself a multiple of 16 bytes. The scheduler needs the exact sizes: they set
the weight DMA traffic, the size of the SRAM weight buffers and whether double buffering fits.

Only sizes are kept. They do not depend on the scale or bias values, so no quantisation is needed for them;
``quantise_scale`` and ``pack_bias_scale`` give the per-channel values for callers that want the bytes too.

Encoding is memoised at two levels: whole results (same weights, block depth, slices, architecture) and the
codec output of each (core, depth range), which different slicings of the same op share.
"""

from __future__ import annotations

import enum
import hashlib
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np

from npusched.ir import ConstTensor, Kernel, NpuBlockType, NpuOp, round_down, round_up
from npusched.target import codec

# Bytes of one packed bias/scale entry: 40-bit bias, 32-bit multiplier, 6-bit shift (2 bits spare).
SCALE_ENTRY_BYTES = 10
# Every sub-stream of the encoded tensor starts on this boundary.
STREAM_ALIGNMENT = 16
# Largest kernel the hardware walks in one pass (width and height); the codec splits bigger ones.
SUB_KERNEL_MAX = 8
# Depth granule of weight slicing (Vela's ArchitectureFeatures.OFMSplitDepth).
OFM_SPLIT_DEPTH = 16


class _Ublock(Protocol):
    @property
    def depth(self) -> int: ...


class WeightArch(Protocol):
    """What the encoder reads from ``ArchitectureFeatures`` (a protocol, so tests can encode without one)."""

    @property
    def ncores(self) -> int: ...
    @property
    def ofm_ublock(self) -> _Ublock: ...
    @property
    def ifm_ublock(self) -> _Ublock: ...


class BlockTraversal(enum.Enum):
    """Order in which the weights of one OFM block are fed to the MAC array (Vela's NpuBlockTraversal)."""

    DEPTH_FIRST = "DEPTH_FIRST"
    PART_KERNEL_FIRST = "PART_KERNEL_FIRST"


@dataclass(frozen=True)
class EncodedRange:
    """One (core, depth slice) piece of the encoded tensor: its scales first, then its weights."""

    core: int
    slice_index: int
    depth_offset: int  # first OFM channel of the slice (the slice, not this core's share)
    index: int  # order of the piece in the stream
    offset: int  # byte offset of the piece in the whole stream
    scale_bytes: int  # unpadded scale/bias bytes
    weight_offset: int  # byte offset of the weights from ``offset`` (scales padded to 16)
    weight_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.scale_bytes + self.weight_bytes


@dataclass(frozen=True)
class EncodedWeights:
    """Layout and sizes of one op's encoded weight tensor (Vela's NpuWeightTensor).

    ``total_bytes`` is what Vela prints as "Encoded Weights = N bytes". ``double_buffer_sizes[i]`` is the
    largest encoded slice among slices with index parity ``i``: the sizes of the two SRAM weight buffers.
    """

    depth_slices: tuple[int, ...]
    ofm_block_depth: int
    ncores: int
    traversal: BlockTraversal
    ranges: tuple[EncodedRange, ...]
    slice_bytes: tuple[int, ...]  # encoded bytes of each depth slice, all cores, padding included
    total_bytes: int
    double_buffer_sizes: tuple[int, int]
    unencoded_weight_bytes: int  # the codec's brick-padded size before compression, summed over ranges
    weight_elements: int  # elements of the (unpadded) weight volume

    def max_range_bytes(self) -> int:
        """Size of the larger of the two weight buffers."""
        return max(self.double_buffer_sizes)

    def double_buffer_size(self) -> int:
        """SRAM needed to double-buffer the slices."""
        return sum(self.double_buffer_sizes)



def choose_traversal(npu_block_type: NpuBlockType, weight_shape_hwio: tuple[int, ...], ifm_bits: int) -> BlockTraversal:
    """Pick part-kernel-first for convolutions where it keeps the MACs busier than depth-first.

    Depth-first wastes MACs when the IFM depth is not a multiple of 32 (8-bit) / 16 (16-bit); part-kernel-first
    wastes them when the depth is not a multiple of 8 or the kernel area not a multiple of 4 (8-bit) / 2.
    Ties, and IFM depths up to 8, go to part-kernel-first.
    """
    if npu_block_type != NpuBlockType.ConvolutionMxN:
        return BlockTraversal.DEPTH_FIRST
    kh, kw, ifm_depth = weight_shape_hwio[0], weight_shape_hwio[1], weight_shape_hwio[2]
    area = kh * kw
    depth_granule = 32 if ifm_bits == 8 else 16
    area_granule = 4 if ifm_bits == 8 else 2
    depth_first_use = ifm_depth / round_up(ifm_depth, depth_granule)
    part_kernel_use = (ifm_depth / round_up(ifm_depth, 8)) * (area / round_up(area, area_granule))
    if part_kernel_use >= depth_first_use or ifm_depth <= 8:
        return BlockTraversal.PART_KERNEL_FIRST
    return BlockTraversal.DEPTH_FIRST


def core_block_depth(ofm_block_depth: int, ncores: int, core: int) -> int:
    """Share of an OFM block's channels computed by ``core`` (channels are dealt round-robin)."""
    return (ofm_block_depth + ncores - 1 - core) // ncores


def core_scale_channels(depth_offset: int, depth_length: int, ofm_depth: int, core: int, ncores: int) -> int:
    """How many scale entries Vela writes for ``core`` in a depth slice.

    Vela picks them with the stride-``ncores`` slice [offset + core, offset + core + length), which for a
    slice of odd length on a multi-core NPU reaches one channel into the next slice (clipped at the tensor
    end). The weights do not; only the scale count carries the quirk.
    """
    start = depth_offset + core
    stop = min(depth_offset + core + depth_length, ofm_depth)
    return len(range(start, stop, ncores))


# --- weights identity and caches -------------------------------------------------------------------------

_DIGESTS: weakref.WeakKeyDictionary[ConstTensor, bytes] = weakref.WeakKeyDictionary()
_RESULT_CACHE: OrderedDict[tuple, EncodedWeights] = OrderedDict()
_STREAM_CACHE: OrderedDict[tuple, tuple[int, int]] = OrderedDict()
_RESULT_CACHE_LIMIT = 20000
_STREAM_CACHE_LIMIT = 50000
# Sizes encoded since ``take_new_stream_sizes`` last took them (at most the cache's size: older ones are dropped).
_NEW_STREAMS: list[tuple[tuple, tuple[int, int]]] = []


def weights_digest(weights: ConstTensor) -> bytes:
    """Content hash of a weight tensor (values, shape, type, zero points), computed once per object."""
    digest = _DIGESTS.get(weights)
    if digest is None:
        h = hashlib.blake2b(digest_size=16)
        values = np.ascontiguousarray(weights.values)
        h.update(repr((values.shape, str(values.dtype), weights.quantization.zero_point)).encode())
        h.update(values.tobytes())
        digest = h.digest()
        _DIGESTS[weights] = digest
    return digest


def clear_caches() -> None:
    _RESULT_CACHE.clear()
    _STREAM_CACHE.clear()
    _NEW_STREAMS.clear()


def take_new_stream_sizes() -> list[tuple[tuple, tuple[int, int]]]:
    """The encoded sizes this process worked out since the last call: what a process that encoded weights hands
    on (``remember_stream_sizes``), so that another need not encode them again."""
    new = list(_NEW_STREAMS)
    _NEW_STREAMS.clear()
    return new


def remember_stream_sizes(entries: list[tuple[tuple, tuple[int, int]]]) -> None:
    """Take in sizes ``take_new_stream_sizes`` gave (in another process)."""
    for key, sizes in entries:
        _remember(_STREAM_CACHE, key, sizes, _STREAM_CACHE_LIMIT)


def _remember(cache: OrderedDict, key: tuple, value: object, limit: int) -> None:
    cache[key] = value
    if len(cache) > limit:
        cache.popitem(last=False)


def _weights_volume(weights: ConstTensor, flip_hw: bool) -> np.ndarray:
    """HWIO int16 volume with the zero point(s) removed, as the codec wants it."""
    values = np.asarray(weights.values)
    if values.ndim == 2:  # fully connected [in, out]
        values = values.reshape(1, 1, *values.shape)
    if values.ndim != 4:
        raise ValueError(f"weights {weights.name!r} must be HWIO (4-D) or [in, out], got shape {values.shape}")
    volume = values.astype(np.int16)
    zero_points = weights.quantization.zero_point
    if len(zero_points) == 1:
        volume = volume - np.int16(zero_points[0])
    elif len(zero_points) > 1:
        volume = volume - np.asarray(zero_points, dtype=np.int16)  # per output channel, the last axis
    if flip_hw:
        volume = np.flip(volume, axis=(0, 1))
    return volume


def _encode_substream(volume: np.ndarray, start: int, end: int, core: int, ncores: int, ifm_ublock_depth: int,
                      ofm_ublock_depth: int, block_depth: int, depthwise: bool, traversal: BlockTraversal,
                      ifm_bits: int, dilation: tuple[int, int]) -> tuple[int, int]:
    """(encoded bytes, unencoded bytes) of one core's share of OFM channels [start, end), via the real codec."""
    ohwi = np.transpose(volume[:, :, :, start:end], (3, 0, 1, 2))[core::ncores]
    dilation_x, dilation_y = dilation
    stream, unencoded = codec.reorder_encode(
        ifm_ublock_depth,
        ofm_ublock_depth,
        np.ascontiguousarray(ohwi),
        block_depth,
        depthwise,
        traversal == BlockTraversal.PART_KERNEL_FIRST,
        ifm_bits,
        SUB_KERNEL_MAX // dilation_y,
        SUB_KERNEL_MAX // dilation_x,
    )
    return len(stream), int(unencoded)


def encode_weights(
    arch: WeightArch,
    weights: ConstTensor,
    bias: ConstTensor | None,
    npu_block_type: NpuBlockType,
    kernel: Kernel,
    ofm_block_depth: int,
    depth_slices: tuple[int, ...] | list[int],
    ifm_bits: int = 8,
    flip_hw: bool = False,
) -> EncodedWeights:
    """Encode ``weights`` (HWIO, or [in, out] for fully connected) the way Vela does for one block config.

    ``depth_slices`` are the OFM channel boundaries, e.g. (0, 16, 64). ``ifm_bits`` is the IFM element width;
    ``flip_hw`` reverses the kernel (transpose convolution). ``bias`` only fixes the channel count, which must
    match the weights: scale/bias sizes do not depend on their values.
    """
    slices = tuple(int(d) for d in depth_slices)
    if ofm_block_depth <= 0:
        raise ValueError(f"OFM block depth must be positive, got {ofm_block_depth}")
    shape = tuple(int(d) for d in np.shape(weights.values))
    if len(shape) == 2:
        shape = (1, 1, *shape)
    if len(shape) != 4:
        raise ValueError(f"weights {weights.name!r} must be HWIO (4-D) or [in, out], got shape {shape}")
    ofm_depth = shape[3]
    if len(slices) < 2 or slices[0] < 0 or slices[-1] > ofm_depth or any(
            a >= b for a, b in pairwise(slices)):
        raise ValueError(f"depth slices {slices} must rise strictly within [0, {ofm_depth}]")
    if bias is not None and int(np.size(bias.values)) != ofm_depth:
        raise ValueError(f"bias {bias.name!r} has {np.size(bias.values)} values for {ofm_depth} OFM channels")
    if kernel.height != shape[0] or kernel.width != shape[1]:
        raise ValueError(f"kernel {kernel.width}x{kernel.height} does not match weights {shape} (HWIO)")
    dilation = (kernel.dilation_x, kernel.dilation_y)
    if not set(dilation) <= {1, 2}:
        raise ValueError(f"the weight codec supports dilation 1 or 2, got {dilation}")

    ncores = int(arch.ncores)
    ifm_ub, ofm_ub = int(arch.ifm_ublock.depth), int(arch.ofm_ublock.depth)
    traversal = choose_traversal(npu_block_type, shape, ifm_bits)
    digest = weights_digest(weights)
    key = (digest, npu_block_type, ofm_block_depth, slices, dilation, ncores, ifm_ub, ofm_ub, ifm_bits, flip_hw)
    cached = _RESULT_CACHE.get(key)
    if cached is not None:
        _RESULT_CACHE.move_to_end(key)
        return cached

    depthwise = npu_block_type is NpuBlockType.ConvolutionDepthWise
    volume: np.ndarray | None = None
    ranges: list[EncodedRange] = []
    slice_bytes: list[int] = []
    buffers = [0, 0]
    position = 0
    unencoded_total = 0
    for slice_index, (start, end) in enumerate(pairwise(slices)):
        length = end - start
        slice_start = position
        for core in range(min(ncores, length)):
            block_share = core_block_depth(ofm_block_depth, ncores, core)
            if block_share == 0:
                continue
            scale_bytes = SCALE_ENTRY_BYTES * core_scale_channels(start, length, ofm_depth, core, ncores)
            weight_offset = round_up(position + scale_bytes, STREAM_ALIGNMENT) - position
            stream_key = (digest, start, end, core, ncores, ifm_ub, ofm_ub, block_share, depthwise, traversal,
                          ifm_bits, dilation, flip_hw)
            sizes = _STREAM_CACHE.get(stream_key)
            if sizes is None:
                if volume is None:
                    volume = _weights_volume(weights, flip_hw)
                sizes = _encode_substream(volume, start, end, core, ncores, ifm_ub, ofm_ub, block_share, depthwise,
                                          traversal, ifm_bits, dilation)
                _remember(_STREAM_CACHE, stream_key, sizes, _STREAM_CACHE_LIMIT)
                if len(_NEW_STREAMS) >= _STREAM_CACHE_LIMIT:
                    _NEW_STREAMS.clear()
                _NEW_STREAMS.append((stream_key, sizes))
            else:
                _STREAM_CACHE.move_to_end(stream_key)
            weight_bytes, unencoded = sizes
            ranges.append(EncodedRange(core=core, slice_index=slice_index, depth_offset=start, index=len(ranges),
                                       offset=position, scale_bytes=scale_bytes, weight_offset=weight_offset,
                                       weight_bytes=weight_bytes))
            position += weight_offset + weight_bytes
            unencoded_total += unencoded
        slice_bytes.append(position - slice_start)
        buffers[slice_index % 2] = max(buffers[slice_index % 2], position - slice_start)

    result = EncodedWeights(
        depth_slices=slices,
        ofm_block_depth=ofm_block_depth,
        ncores=ncores,
        traversal=traversal,
        ranges=tuple(ranges),
        slice_bytes=tuple(slice_bytes),
        total_bytes=position,
        double_buffer_sizes=(buffers[0], buffers[1]),
        unencoded_weight_bytes=unencoded_total,
        weight_elements=int(np.prod(shape)),
    )
    _remember(_RESULT_CACHE, key, result, _RESULT_CACHE_LIMIT)
    return result


def encode_op_weights(arch: WeightArch, op: NpuOp, ofm_block_depth: int, depth_slices: tuple[int, ...] | list[int]
                      ) -> EncodedWeights:
    """``encode_weights`` for an ``NpuOp``, which must have weights (ValueError otherwise)."""
    if op.weights is None:
        raise ValueError(f"op {op.index} ({op.name}) has no weights to encode")
    ifm_bits = op.ifm.tensor.dtype.size_in_bits
    flip = op.op_type == "Conv2DBackpropInputSwitchedBias"
    return encode_weights(arch, op.weights, op.bias, op.npu_block_type, op.kernel, ofm_block_depth, depth_slices,
                          ifm_bits=ifm_bits, flip_hw=flip)


# --- scale values ------------------------------------------------------------------------------------------


def quantise_scale(scale: float) -> tuple[int, int]:
    """(Q31 multiplier, right shift) of a positive rescale factor; (0, 16) when the shift is out of range."""
    mantissa, exponent = math.frexp(scale)
    scaled = mantissa * (1 << 31)
    multiplier = int(math.floor(abs(scaled) + 0.5)) * (1 if scaled >= 0 else -1)  # rounds half away from 0
    shift = 31 - exponent
    if not 0 <= shift < 64:
        return 0, 16
    return multiplier, shift


def pack_bias_scale(bias: int, multiplier: int, shift: int) -> bytes:
    """One 10-byte little-endian entry: bias in bits 0-39, multiplier in 40-71, shift in 72-77."""
    if not -(1 << 39) <= bias < (1 << 39):
        raise ValueError(f"bias {bias} does not fit in 40 bits")
    if not 0 <= multiplier < (1 << 32):
        raise ValueError(f"scale multiplier {multiplier} does not fit in 32 bits")
    if not 0 <= shift < 64:
        raise ValueError(f"scale shift {shift} does not fit in 6 bits")
    word = (bias & ((1 << 40) - 1)) | (multiplier << 40) | (shift << 72)
    return word.to_bytes(SCALE_ENTRY_BYTES, "little")


# --- weight buffering (Vela's Scheduler.propose_weight_buffering) -------------------------------------------


@dataclass(frozen=True)
class WeightBufferPlan:
    """How an op's weights reach the NPU: from permanent storage in place, or via 1-2 SRAM buffers.

    ``buffer_sizes`` is empty when the weights are not buffered. ``slack_memory_used`` is what Vela takes off
    the op's slack buffering memory (the buffer that stays live after the op); ``tail_cycles`` is the op's cycle
    estimate for its last depth slice (Vela's new slack cycles), set whenever slicing was tried, even when the
    sliced weights then did not fit and the op fell back to its full-depth weights in place. With one buffer
    but several slices, the buffer has the size of the largest even-numbered slice, as in Vela.
    """

    depth_slices: tuple[int, ...]
    encoded: EncodedWeights
    buffer_sizes: tuple[int, ...]
    double_buffered: bool
    pre_buffer: bool
    slack_memory_used: int
    tail_cycles: float | None
    full_transfer_cycles: float | None
    full: EncodedWeights

    @property
    def buffered(self) -> bool:
        return bool(self.buffer_sizes)


def _floor_round_up(value: float, quantum: int) -> float:
    """Vela's round_up applied to a float: floor((value + quantum - 1) / quantum) * quantum, not a ceiling."""
    return ((value + quantum - 1) // quantum) * quantum


def buffering_depth_slices(stripe_depth: int, prebuffer_depth: int, buffering_depth: int) -> tuple[int, ...]:
    """First slice of ``prebuffer_depth`` channels, then slices of ``buffering_depth`` to the stripe's end."""
    inner = range(prebuffer_depth, stripe_depth, buffering_depth) if prebuffer_depth < stripe_depth else ()
    return (0, *inner, stripe_depth)


def plan_weight_buffering(
    encode: Callable[[tuple[int, ...]], EncodedWeights],
    stripe_depth: int,
    block_depth: int,
    *,
    needs_dma: bool,
    is_fully_connected: bool,
    cascaded: bool,
    buffer_limit_bytes: int,
    slack_cycles: float,
    slack_memory: int,
    transfer_cycles: Callable[[int], float],
    op_cycles: Callable[[int], float],
) -> WeightBufferPlan:
    """Vela's choice of depth slices and SRAM weight buffers for one op of a buffered schedule.

    ``encode(slices)`` encodes the op's weights with its block config; ``transfer_cycles(n)`` prices moving n
    bytes from the weights' memory to fast storage (measure_mem2mem_cycles); ``op_cycles(depth)`` is the op's
    cycle estimate when it produces ``depth`` OFM channels. ``slack_*`` come from the previous op's cost (0 when
    there is none). A cascaded op keeps its full weights in one buffer; the caller adds that buffer to the
    schedule's memory snapshot, as Vela does.
    """
    full_slices: tuple[int, ...] = (0, stripe_depth)
    full = encode(full_slices)
    full_bytes = full.total_bytes

    def unbuffered(tail: float | None = None, transfer: float | None = None) -> WeightBufferPlan:
        return WeightBufferPlan(full_slices, full, (), False, False, 0, tail, transfer, full)

    if is_fully_connected or not needs_dma:
        return unbuffered()

    encoded = full
    slices = full_slices
    tail: float | None = None
    full_transfer: float | None = None
    if not cascaded:
        full_transfer = transfer_cycles(full_bytes)
        half_limit = buffer_limit_bytes // 2
        if full_transfer > slack_cycles:
            prebuffer_bytes = min(slack_cycles / full_transfer * full_bytes, half_limit)
        else:
            prebuffer_bytes = min(full_bytes, half_limit)
        if prebuffer_bytes < full_bytes:
            ratio = prebuffer_bytes / full_bytes
            prebuffer_depth = int(max(OFM_SPLIT_DEPTH, round_down(stripe_depth * ratio, OFM_SPLIT_DEPTH)))
            # Size the following slices so that fetching one takes about as long as computing the first.
            depth = stripe_depth * (op_cycles(prebuffer_depth) / full_transfer)
            depth = _floor_round_up(depth, block_depth)
            if depth / stripe_depth * full_bytes > half_limit:
                depth = half_limit / full_bytes * stripe_depth
            while True:
                depth = round_down(depth, block_depth if depth > block_depth else OFM_SPLIT_DEPTH)
                depth = int(max(depth, OFM_SPLIT_DEPTH))
                slices = buffering_depth_slices(stripe_depth, prebuffer_depth, depth)
                encoded = encode(slices)
                if encoded.double_buffer_size() <= buffer_limit_bytes or prebuffer_depth == OFM_SPLIT_DEPTH:
                    break
                # Too big for the buffers: halve the larger of the two slice sizes and try again.
                if depth > prebuffer_depth:
                    depth = round_up(depth // 2, OFM_SPLIT_DEPTH)
                else:
                    prebuffer_depth = round_up(prebuffer_depth // 2, OFM_SPLIT_DEPTH)
            tail = op_cycles(slices[-1] - slices[-2])

    largest_piece = min(encoded.total_bytes, encoded.max_range_bytes())
    if largest_piece > buffer_limit_bytes:
        # Nothing fits: read the full-depth weights in place.
        return unbuffered(tail, full_transfer)
    double = encoded.double_buffer_size() <= buffer_limit_bytes and largest_piece < encoded.total_bytes
    sizes = encoded.double_buffer_sizes if double else encoded.double_buffer_sizes[:1]
    # The buffer left holding the last slice stays live after the op.
    last_buffer = encoded.double_buffer_sizes[len(slices) % len(sizes)]
    pre_buffer = (not cascaded) and encoded.double_buffer_size() < slack_memory
    return WeightBufferPlan(slices, encoded, tuple(sizes), double, pre_buffer, last_buffer, tail, full_transfer, full)
