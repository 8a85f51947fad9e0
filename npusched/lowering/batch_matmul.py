"""BATCH_MATMUL of two activations as NPU passes: per output column, an int32 multiply and a rescaling reduce-sum.

The NPU has no matrix product of two feature maps. Vela's default core runs one column of the output at a time
(its compound MatMul): an element-wise MUL of the left operand [1, H, M, K] by one row of the transposed right
operand, broadcast along the M rows, gives the int32 products (a - za)(b - zb) with the shared axis K in depth,
and a REDUCE_SUM over the depth adds them in int32 and rescales to the output, written as depth slice n of the
OFM [1, H, M, N]. This module makes the same 2N passes for Vela legacy's backend (``npusched.vela.lessons``
teaches Vela's graph optimiser the same rewrite), for an operator whose right operand is transposed (``adj_y``;
normalisation writes attention's scores·V that way, ``npusched.frontend.normalise.matmul_operands``).

Each MUL reads its row of the right operand [1, H, N, K] through a view of the same linear bytes, [1, H, 1, N * K],
at depth offset n * K: the broadcast runs along the width and the offset along the depth, which is how Vela's
command stream addresses an operand it broadcasts. The MUL keeps the products exact (unit explicit scaling, int32
output); the REDUCE_SUM applies TFLite's output multiplier (``quantise_scale`` of lhs scale x rhs scale / output
scale, double rounding) and the output zero point, as TFLite's kernel does after its int32 accumulation.
Pass names are ``<ofm>_mul<n>`` and ``<ofm>_sum<n>``, ``<ofm>`` the TFLite output tensor.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from npusched.ir import DataType, FeatureMap, NpuOp, Quantization, Shape4D
from npusched.lowering.common import access, elementwise_op, pool_op
from npusched.lowering.context import LoweringContext
from npusched.lowering.softmax import quantise_scale
from npusched.target.performance_query import MATMUL_PRODUCTS

TFLITE_OP = "BATCH_MATMUL"
_UNIT = Quantization(scale=(1.0,), zero_point=(0,))


def matmul_shape(dims: tuple[int, ...] | list[int]) -> Shape4D:
    """An operand [..., rows, columns] as Vela sees it: the leading dimensions (one batch of 1 at most) in the
    height, rows in the width, columns in the depth."""
    *lead, rows, columns = (int(d) for d in dims)
    return Shape4D(1, int(np.prod(lead, dtype=np.int64)), rows, columns)


def output_scaling(lhs: Quantization, rhs: Quantization, out: Quantization) -> tuple[int, int]:
    """TFLite's output multiplier of an int8 BATCH_MATMUL, as the NPU's (multiplier, shift). TFLite multiplies the
    two input scales in float32 before dividing in double (GetQuantizedConvolutionMultipler); in double throughout,
    2 of the 9,604 outputs of a 60-pass transformer's Q·Kᵀ round the other way."""
    real = np.double(np.float32(lhs.scale[0]) * np.float32(rhs.scale[0])) / np.double(np.float32(out.scale[0]))
    return quantise_scale(float(real))


def lower_batch_matmul(op, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]:
    """The 2N passes of one BATCH_MATMUL [.., M, K] x [.., N, K]^T (``adj_y``), column by column."""
    name = ctx.tensor(op.outputs[0]).name
    rhs = ctx.feature_map(op.inputs[1])
    lhs_shape = matmul_shape(ctx.tensor(op.inputs[0]).shape)
    rhs_shape = matmul_shape(ctx.tensor(op.inputs[1]).shape)
    heads, rows, depth = lhs_shape.height, lhs_shape.width, lhs_shape.depth
    columns = rhs_shape.width
    rhs_rows = Shape4D(1, heads, 1, columns * depth)
    row = Shape4D(1, heads, 1, depth)
    out_shape = Shape4D(1, heads, rows, columns)
    multiplier, shift = output_scaling(ifm.quantization, rhs.quantization, ofm.quantization)
    passes: list[NpuOp] = []
    for column in range(columns):
        products = ctx.new_feature_map(f"{name}_mul{column}", lhs_shape.as_list(), DataType.int32, _UNIT)
        mul = elementwise_op("Mul", f"{name}_mul{column}", ifm, rhs, tflite_op=TFLITE_OP, ofm=products,
                             ifm_shape=lhs_shape, ifm2_shape=rhs_rows,
                             attrs=(("explicit_scaling", (False, (0,), (1,))), (MATMUL_PRODUCTS, "ofm")))
        mul = replace(mul, ifm2=access(rhs, rhs_rows, Shape4D(0, 0, 0, column * depth), row))
        total = pool_op("ReduceSum", f"{name}_sum{column}", products, ofm, tflite_op=TFLITE_OP,
                        ifm_shape=lhs_shape, ofm_shape=out_shape, ofm_offset=Shape4D(0, 0, 0, column),
                        ofm_write_shape=Shape4D(1, heads, rows, 1),
                        attrs=(("explicit_scaling", (False, (shift,), (multiplier,))), (MATMUL_PRODUCTS, "ifm")))
        passes += [mul, total]
    return passes
