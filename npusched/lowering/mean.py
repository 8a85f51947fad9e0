"""MEAN as the NPU passes Vela 5.2.0's legacy core makes of it.

The NPU sums a window with a depthwise convolution whose weights are all ones (int32 result, unit scaling), then
a Mul by a precomputed int32 scalar with an explicit shift does the division and the requantisation in one go.
A kernel may cover at most 4096 elements and 64 rows, so a tall reduction is split into several convolutions
over bands of rows, whose int32 partial sums are then added pairwise before the Mul.

Names follow Vela: the convolutions are ``<name><name>_conv_<i>`` (Vela clones the op with the op name as the
suffix, so the name appears twice), their outputs ``<ofm>_conv_sum_<i>``; the adds ``<name>_add_<i>`` with
outputs ``<ofm>_add_sum_<i>``; the final pass ``<name>_mul`` writes the operator's OFM.
"""

from __future__ import annotations

import math

import numpy as np

from npusched.ir import DataType, FeatureMap, Kernel, NpuOp, Quantization, Shape4D
from npusched.lowering.common import depthwise_op, elementwise_op, memcpy_op
from npusched.lowering.context import LoweringContext
from npusched.lowering.softmax import quantise_scale

TFLITE_OP = "MEAN"
MAX_KERNEL_ELEMENTS = 4096
MAX_KERNEL_HEIGHT = 64
UNIT_SCALING = ("explicit_scaling", (False, (0,), (1,)))


def _pad_front(values: list, length: int, fill) -> list:
    return [fill] * (length - len(values)) + list(values)


def lower_mean(op, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]:
    """The NPU passes of one MEAN operator, in Vela's creation order (convolutions, adds, Mul)."""
    name = ctx.tensor(op.outputs[0]).name
    in_tensor = ctx.tensor(op.inputs[0])
    axis_tensor = ctx.tensor(op.inputs[1])
    out_tensor = ctx.tensor(op.outputs[0])
    rank = len(in_tensor.shape)
    axes = np.asarray(axis_tensor.data).reshape(-1).tolist()
    reduced = [i in axes for i in range(rank)]

    in_shape = list(in_tensor.shape)
    mid_shape = list(out_tensor.shape)
    if len(out_tensor.shape) < rank:
        # keep_dims=False dropped the reduced axes; put them back as ones.
        for i in range(rank):
            if reduced[i]:
                mid_shape.insert(i, 1)
    reduced = _pad_front(reduced, 4, False)
    in_shape = _pad_front(in_shape, 4, 1)
    mid_shape = _pad_front(mid_shape, 4, 1)

    if not any(reduced[i] and in_shape[i] > 1 for i in range(4)):
        # Nothing to average: Vela turns the op into a Memcpy pass (DMA), which it keeps.
        return [memcpy_op(name, ifm, ofm, tflite_op=TFLITE_OP)]

    if reduced[3] and in_shape[3] > 1:
        # Averaging over depth: drop a unit H or W axis and move C into W, so the kernel runs along it.
        drop = 2 if in_shape[2] == 1 else 1
        for lst in (reduced, in_shape, mid_shape):
            del lst[drop]
        reduced.append(False)
        in_shape.append(1)
        mid_shape.append(1)

    kernel_h = in_shape[1] if reduced[1] else 1
    kernel_w = in_shape[2] if reduced[2] else 1
    count = kernel_h * kernel_w
    if kernel_h > MAX_KERNEL_HEIGHT and count <= MAX_KERNEL_ELEMENTS and reduced[1] and reduced[2]:
        # One kernel can hold everything but not that many rows: read the window as a single row.
        in_shape = [in_shape[0], 1, count, in_shape[3]]
        kernel_w, kernel_h = count, 1

    rows_per_conv = min(MAX_KERNEL_ELEMENTS // kernel_w, kernel_h, MAX_KERNEL_HEIGHT)
    n_convs = math.ceil(kernel_h / rows_per_conv)
    batch, depth = in_shape[0], in_shape[3]
    in_shape4 = Shape4D(*in_shape)
    ofm_q = ofm.quantization
    bias_dtype = DataType.int64 if ifm.dtype == DataType.int16 else DataType.int32

    ops: list[NpuOp] = []
    sums: list[FeatureMap] = []
    for i in range(n_convs):
        last = i == n_convs - 1
        rows = kernel_h % rows_per_conv if last and kernel_h % rows_per_conv else rows_per_conv
        conv_name = f"{name}{name}_conv_{i}"
        partial = ctx.new_feature_map(f"{out_tensor.name}_conv_sum_{i}", tuple(mid_shape), DataType.int32, ofm_q)
        # All-ones weights in the layout Vela holds after reorder_depthwise_weights: [H, W, 1, C] (OFM depth last,
        # as the weight encoder reads it). Vela creates them as [H, W, C, batch] with batch 1.
        weight_shape = (rows, kernel_w, batch, depth)
        weights = ctx.const_tensor(f"{conv_name}_weights", np.ones(weight_shape), DataType.uint8,
                                   Quantization(scale=(1.0,), zero_point=(0,), min=(0.0,), max=(255.0,)),
                                   shape=weight_shape)
        bias = ctx.const_tensor(f"{conv_name}_bias", np.zeros(depth), bias_dtype, shape=(depth,))
        read_shape = in_shape4.with_hw(rows if reduced[1] else in_shape[1], kernel_w if reduced[2] else in_shape[2])
        ops.append(depthwise_op(
            conv_name, ifm, partial, weights, bias, tflite_op=TFLITE_OP,
            kernel=Kernel(width=kernel_w, height=rows, valid_padding=True),
            ifm_shape=in_shape4, ofm_shape=partial.shape,
            ifm_offset=Shape4D(0, i * rows_per_conv, 0, 0), ifm_read_shape=read_shape,
            attrs=(UNIT_SCALING,)))
        sums.append(partial)

    total = sums[-1]
    if len(sums) > 1:
        # Accumulate the partial sums from the last one backwards: (last + second last), then + each earlier.
        idx = 0
        pending = list(sums)
        running: FeatureMap | None = None
        while pending:
            first = pending.pop()
            second = pending.pop() if running is None else running
            out = ctx.new_feature_map(f"{out_tensor.name}_add_sum_{idx}", tuple(mid_shape), DataType.int32, ofm_q)
            add = elementwise_op("Add", f"{name}_add_{idx}", first, second, tflite_op=TFLITE_OP, ofm=out,
                                 attrs=(UNIT_SCALING,))
            ops.append(add)
            total = running = out
            idx += 1

    # The Mul divides by the element count and requantises, as TFLite's reference does (shift clamped).
    in_scale = ifm.quantization.scale[0] if ifm.quantization.scale else 1.0
    out_scale = ofm_q.scale[0] if ofm_q.scale else 1.0
    multiplier, vela_shift = quantise_scale(float(np.double(in_scale) / np.double(out_scale)))
    ref_shift = 31 - vela_shift
    extra = min(int(math.floor(np.log2(count))), 32, 31 + ref_shift)
    multiplier = int(np.int32((np.int64(multiplier) << extra) // count))
    vela_shift = 31 - (ref_shift - extra)
    mul_name = f"{name}_mul"
    scalar = ctx.const_operand(f"{mul_name}_scalar", [multiplier], DataType.int32,
                               Quantization(scale=(1.0,), zero_point=(0,)), shape=(1, 1, 1, 1))
    ops.append(elementwise_op(
        "Mul", mul_name, total, scalar, tflite_op=TFLITE_OP, ofm=ofm, ifm_shape=total.shape, ifm2_shape=scalar.shape,
        rounding_mode="TFLite", attrs=(("explicit_scaling", (False, (vela_shift,), (1,))),)))
    # (Vela's Mul sees its OFM with the 4-D shape of the keep-dims sum, which is the IFM shape used here.)
    return ops
