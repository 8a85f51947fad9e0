"""Helpers of the graph rewrites: Vela's padding and scaling arithmetic, and small graph utilities."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from npusched.ir import (
    DataType,
    FeatureMap,
    NpuOp,
    Shape4D,
)
from npusched.lowering import luts
from npusched.lowering.netgraph import (
    BINARY_ELEMENTWISE,
    INDICES,
    WorkingOp,
    WorkingTensor,
)


def needed_total_padding(input_size: int, stride: int, filter_size: int) -> int:
    if input_size % stride == 0:
        return max(filter_size - stride, 0)
    return max(0, filter_size - input_size % stride)


def explicit_hw_padding(input_size: int, stride: int, filter_size: int, before: int, after: int) -> tuple[int, int]:
    """Hardware padding equivalent to an explicit PAD: the trailing side may shrink to match the stride."""
    total = needed_total_padding(input_size, stride, filter_size)
    rest = total - before
    out_after = after
    while out_after > 0 and out_after % stride != rest % stride:
        out_after -= 1
    return before, out_after


def padding_and_skirt(padding: str, kernel_wh: tuple[int, int], stride_xy: tuple[int, int],
                      dilation_xy: tuple[int, int], ifm: Shape4D,
                      explicit: tuple[int, ...] | None) -> tuple[tuple[int, int, int, int], tuple[int, ...]]:
    k_w = dilation_xy[0] * (kernel_wh[0] - 1) + 1
    k_h = dilation_xy[1] * (kernel_wh[1] - 1) + 1
    s_x, s_y = stride_xy
    ypad = needed_total_padding(ifm.height, s_y, k_h)
    xpad = needed_total_padding(ifm.width, s_x, k_w)
    if padding == "SAME":
        top, left, bottom, right = ypad // 2, xpad // 2, (ypad + 1) // 2, (xpad + 1) // 2
    elif padding == "VALID":
        top = left = bottom = right = 0
    elif padding == "EXPLICIT":
        t, lf, b, r = explicit
        top, bottom = explicit_hw_padding(ifm.height, s_y, k_h, t, b)
        left, right = explicit_hw_padding(ifm.width, s_x, k_w, lf, r)
    elif padding == "TILE":
        top, left, bottom, right = explicit
    else:
        raise ValueError(f"unsupported padding {padding}")
    return (top, left, bottom, right), (top, left, ypad - top, xpad - left)


def without_padding_only_taps(weights: np.ndarray, zero_point: Any, stride_xy: tuple[int, int],
                              dilation_xy: tuple[int, int], padding: tuple[int, int, int, int]
                              ) -> tuple[np.ndarray, tuple[int, int, int, int]] | None:
    """A convolution's kernel (``weights`` H and W first; ``padding`` top, left, bottom, right) without the taps at
    its edges that are zero in every filter and read only padding on their side, and the padding left; None where
    there are none.

    Such taps add nothing to any output, so the kernel can lose them with the padding they read and every output
    stays the same. ``npusched.frontend.normalise.padded_convolutions`` gives a convolution after a long PAD zero taps
    and a longer PAD (Vela legacy then folds it into hardware padding), which this drops again: what is left pads
    as the PAD did, in hardware. Not along a strided axis (its hardware padding is rounded to the stride)."""
    values = np.asarray(weights)
    zero = np.asarray(zero_point if zero_point is not None else 0).reshape(-1)
    if values.ndim != 4 or not np.all(zero == zero[0]):
        return None
    is_zero = np.all(values == zero[0], axis=(2, 3))  # per (row, column) tap

    def edges(taps: np.ndarray, stride: int, dilation: int, before: int, after: int) -> tuple[int, int]:
        if stride != 1 or taps.all():
            return 0, 0
        return min(int(np.argmin(taps)), before // dilation), min(int(np.argmin(taps[::-1])), after // dilation)

    (s_x, s_y), (d_x, d_y), (top, left, bottom, right) = stride_xy, dilation_xy, padding
    cut_top, cut_bottom = edges(is_zero.all(axis=1), s_y, d_y, top, bottom)
    cut_left, cut_right = edges(is_zero.all(axis=0), s_x, d_x, left, right)
    if not (cut_top or cut_bottom or cut_left or cut_right):
        return None
    kept = values[cut_top:values.shape[0] - cut_bottom, cut_left:values.shape[1] - cut_right]
    return kept, (top - cut_top * d_y, left - cut_left * d_x, bottom - cut_bottom * d_y, right - cut_right * d_x)


def upscaled_padding(padding: str, kernel_hw: tuple[int, int], strides: tuple[int, ...], ifm: Shape4D,
                     up_y: int, up_x: int) -> tuple[int, int, int, int]:
    """Padding of a transpose convolution that upscales its IFM."""
    k_h, k_w = kernel_hw
    if padding == "SAME":
        ypad = needed_total_padding(ifm.height * up_y, int(strides[1]), k_h)
        xpad = needed_total_padding(ifm.width * up_x, int(strides[2]), k_w)
        right = max(((xpad + 1) // up_x) - 1, 0)
        bottom = max(((ypad + 1) // up_y) - 1, 0)
        left = max(k_w - 1 - right, 0)
        top = max(k_h - 1 - bottom, 0)
    else:
        right = max(k_w - 2, 0)
        bottom = max(k_h - 2, 0)
        left = k_w - 1
        top = k_h - 1
    return top, left, bottom, right


def quantise_scale(scale: float) -> tuple[int, int]:
    significand, exponent = math.frexp(scale)
    mult = int(luts.round_away_from_zero(significand * (1 << 31)))
    shift = 31 - exponent
    if not 0 <= shift < 64:
        return 0, 16
    return mult, shift


def is_quantized(t: WorkingTensor) -> bool:
    return t.dtype in (DataType.int8, DataType.uint8, DataType.int16, DataType.int32, DataType.int64) and \
        bool(t.quantization.scale) and bool(t.quantization.zero_point)


def scaling_equal(a: WorkingTensor, b: WorkingTensor) -> bool:
    return is_quantized(a) and is_quantized(b) and a.quantization.scale == b.quantization.scale and \
        a.quantization.zero_point == b.quantization.zero_point


def avgpool_nop(name: str) -> WorkingOp:
    """Vela's 1x1 AvgPool that copies (and rescales/activates) its input."""
    return WorkingOp("AvgPool", name, attrs={"padding": "VALID", "stride_w": 1, "stride_h": 1, "filter_width": 1,
                                       "filter_height": 1, "strides": (1, 1, 1, 1), "ksize": (1, 1, 1, 1),
                                       "skirt": (0, 0, 0, 0), "explicit_padding": (0, 0, 0, 0)})


def calc_resize_factor(ifm_w: int, stride_x: int) -> tuple[int, int]:
    """How far a strided convolution's IFM can be folded into depth (Vela's calc_resize_factor)."""
    factor = stride_x
    if ifm_w % factor != 0:
        candidates = [s for s in (2, 3) if factor % s == 0 and ifm_w % (stride_x // s) == 0]
        new_factor = factor // (candidates[0] if candidates else 1)
        factor = new_factor if factor != new_factor else 1
    return factor, stride_x // factor


def zero_point(t: WorkingTensor) -> int:
    return int(t.quantization.zero_point[0]) if t.quantization.zero_point else 0


def ifm_index(op: WorkingOp, which: int) -> int:
    return INDICES[op.type][0][which]


def leading_pad_ok(pad: int, stride: int, kernel: int) -> bool:
    half = kernel // 2
    return pad == half or half <= stride or pad % stride == 0


def pad_values(padding: Any) -> tuple[int, int, int, int, int, int]:
    """(top, left, bottom, right, near, far) from a PAD's [[before, after], ...] constant."""
    p = np.asarray(padding)
    return (int(p[-3][0]), int(p[-2][0]), int(p[-3][1]), int(p[-2][1]), int(p[-1][0]), int(p[-1][1]))


def filter_padding(padding_type: str, cur_pad_x: int, post_stride: int, factor: int, filter_w: int,
                    ifm_w: int) -> tuple[int, int]:
    """Zero columns added to a strided convolution's filter so that folding width into depth is exact."""
    size = 0
    left, right = 0, 0
    if padding_type and padding_type != "VALID":
        pre_stride = post_stride * factor
        post_ifm_w = ifm_w // factor
        if ifm_w % pre_stride == 0:
            expected = cur_pad_x + post_stride
        else:
            expected = cur_pad_x + (post_ifm_w % post_stride)
        size = expected * factor - filter_w
        if cur_pad_x == 0:
            left = size // 2
        else:
            left = size // cur_pad_x * (cur_pad_x // 2)
        right = size - left
    if filter_w % factor != 0 and (size == 0 or cur_pad_x == 0):
        left, right = 0, factor - (filter_w % factor)
    return left, right


def bilinear_phase_kernels(in_h: int, in_w: int, out_h: int, out_w: int) -> list[np.ndarray]:
    """2x2 interpolation weights (scaled by 16) for the four output phases of a half-pixel x2 resize."""
    def sample(index: int, in_size: int, out_size: int) -> tuple[float, float]:
        pos = (index + 0.5) * (in_size / out_size) - 0.5
        return pos, max(np.floor(pos), 0)

    kernels = []
    for y in (1, 2):
        for x in (1, 2):
            sy, ly = sample(y, in_h, out_h)
            sx, lx = sample(x, in_w, out_w)
            fy, fx = sy - ly, sx - lx
            k = np.zeros((2, 2))
            k[1, 1] = (1 - fy) * (1 - fx)
            k[0, 1] = fy * (1 - fx)
            k[1, 0] = (1 - fy) * fx
            k[0, 0] = fy * fx
            kernels.append(k * 16)
    return kernels


def clone_op(op: WorkingOp, suffix: str) -> WorkingOp:
    res = WorkingOp(op.type, op.name + suffix, inputs=list(op.inputs), outputs=list(op.outputs), attrs=dict(op.attrs),
              run_on_npu=op.run_on_npu, original_type=op.original_type, tflite_op=op.tflite_op,
              activation=op.activation, resampling_mode=op.resampling_mode, rounding_mode=op.rounding_mode,
              read_offsets=list(op.read_offsets), read_shapes=list(op.read_shapes),
              write_offset=op.write_offset, write_shape=op.write_shape, memory_function=op.memory_function)
    return res


def strided_slice_bounds(op: WorkingOp) -> tuple[list[int], list[int]]:
    """Begin/end of a STRIDED_SLICE after applying its begin/end masks (no ellipsis/new-axis support)."""
    inp = op.inputs[0]
    begin = [int(v) for v in np.asarray(op.inputs[1].values).reshape(-1)]
    end = [int(v) for v in np.asarray(op.inputs[2].values).reshape(-1)]
    strides = [int(v) for v in np.asarray(op.inputs[3].values).reshape(-1)]
    begin_mask = int(op.attrs.get("begin_mask", 0))
    end_mask = int(op.attrs.get("end_mask", 0))
    shrink = int(op.attrs.get("offset_shrink_mask", op.attrs.get("shrink_axis_mask", 0)))
    out_b, out_e = [], []
    for i, dim in enumerate(inp.shape):
        b = begin[i] if i < len(begin) else 0
        e = end[i] if i < len(end) else dim
        s = strides[i] if i < len(strides) else 1
        if begin_mask & (1 << i):
            b = 0 if s > 0 else dim - 1
        if end_mask & (1 << i):
            e = dim if s > 0 else -1
        if b < 0:
            b += dim
        if e < 0 and not (end_mask & (1 << i)):
            e += dim
        if shrink & (1 << i):
            e = b + 1
        out_b.append(max(0, min(b, dim)))
        out_e.append(max(0, min(e, dim)))
    return out_b, out_e


def splice_prebuilt(op: WorkingOp, npu_ops: list[NpuOp]) -> WorkingOp:
    """Replace ``op`` by already-lowered NpuOps, linking their feature maps to the working graph's tensors.

    Feature maps equal to the op's own (current) inputs/outputs map to those tensors; any other non-constant
    feature map is an intermediate created by the decomposition; constants get a Const producer.
    """
    known: dict[FeatureMap, WorkingTensor] = {}
    for t in list(op.inputs) + list(op.outputs):
        if t is not None:
            known.setdefault(t.feature_map(), t)
    made: dict[FeatureMap, WorkingTensor] = {}

    def tensor_for(fm: FeatureMap) -> WorkingTensor:
        if fm in known:
            return known[fm]
        if fm in made:
            return made[fm]
        t = WorkingTensor(name=fm.name, shape=list(fm.orig_shape) if fm.orig_shape is not None else fm.shape.as_list(),
                    dtype=fm.dtype, quantization=fm.quantization, uid=fm.uid, fm_override=fm)
        if fm.constant is not None:
            t.values = np.asarray(fm.constant.values)
            t.const_override = fm.constant
            WorkingOp("Const", fm.name).set_output(t)
        made[fm] = t
        return t

    ofm_tensor = op.ofm
    last: WorkingOp | None = None
    for nop in npu_ops:
        inputs = [tensor_for(nop.ifm.tensor)]
        if nop.ifm2 is not None:
            inputs.append(tensor_for(nop.ifm2.tensor))
        out = tensor_for(nop.ofm.tensor)
        vop = WorkingOp(nop.op_type, nop.name, inputs=inputs, outputs=[out], run_on_npu=True,
                  original_type=op.original_type, tflite_op=op.tflite_op, prebuilt=nop)
        if nop.op_type in BINARY_ELEMENTWISE or nop.ifm2 is not None:
            vop.ifm_shapes = [nop.ifm.shape] + ([nop.ifm2.shape] if nop.ifm2 is not None else [])
        else:
            vop.ifm_shapes = [nop.ifm.shape]
        vop.ofm_shapes = [nop.ofm.shape]
        vop.read_offsets = [nop.ifm.offset, nop.ifm2.offset if nop.ifm2 is not None else None]
        vop.read_shapes = [nop.ifm.access_shape, nop.ifm2.access_shape if nop.ifm2 is not None else None]
        vop.write_offset, vop.write_shape = nop.ofm.offset, nop.ofm.access_shape
        if out is ofm_tensor:
            # Several ops may write slices of the final OFM; keep them all as its producers.
            out.ops = [o for o in out.ops if o.prebuilt is not None] + [vop]
        else:
            out.ops = [vop]
        for t in inputs:
            t.consumer_list.append(vop)
        if out is ofm_tensor:
            last = vop
    if last is None:
        raise ValueError(f"decomposition of {op.name!r} does not write its output")
    return last


def concat_slice_writer(concat: WorkingOp, ofm: WorkingTensor, name: str, ifm: WorkingTensor, ifm_shape: Shape4D,
                        write_offset: Shape4D) -> WorkingOp:
    """One AvgPool writing ``ifm`` into a slice of the concatenation's OFM."""
    pool = avgpool_nop(name)
    pool.original_type = concat.type if concat.type != "Pad" else "ConcatTFLite"
    pool.tflite_op = concat.tflite_op
    pool.op_index = None
    pool.inputs = [ifm]
    pool.outputs = [ofm]
    pool.write_offset = write_offset
    pool.write_shape = ifm_shape
    ofm.ops.append(pool)
    pool.ifm_shapes.append(ifm_shape)
    pool.ofm_shapes.append(concat.ofm_shapes[0])
    pool.memory_function = "ConcatSliceWrite"
    return pool
