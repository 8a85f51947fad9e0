"""SQUARED_DIFFERENCE as the NPU passes Vela 5.2.0's legacy core makes of it (seven passes).

The NPU has no squared-difference instruction, so Vela computes it the way TFLite's reference kernel does, in
int32: each input is widened by a 1x1 depthwise "cast" (ones as weights) that also shifts it left by 7 bits
(int16: 0), then multiplied by its own input multiplier (the inputs' scales relative to twice the larger one),
the two are subtracted, the difference is squared, and a last Mul rescales to the output. Every int32 step uses
explicit scaling (multiplier, shift) instead of the tensors' quantisation, which is why the intermediates carry
unit quantisation or none.

Names follow Vela: ``<name>_ifm2_32bit_shifted``, ``<name>_scaled_input2``, ``<name>_ifm_32bit_shifted``,
``<name>_scaled_input1``, ``<name>_raw_diff``, ``<name>_squared_raw``; the last pass keeps the operator's name.
"""

from __future__ import annotations

import numpy as np

from npusched.ir import DataType, FeatureMap, Kernel, NpuOp, Quantization
from npusched.lowering.common import depthwise_op, elementwise_op
from npusched.lowering.context import LoweringContext
from npusched.lowering.softmax import quantise_scale

TFLITE_OP = "SQUARED_DIFFERENCE"
_UNIT = Quantization(scale=(1.0,), zero_point=(0,))


def _scaling(shift: int, multiplier: int) -> tuple[str, object]:
    return ("explicit_scaling", (False, (shift,), (multiplier,)))


def _widen(name: str, fm: FeatureMap, suffix: str, multiplier: int, shift: int, left_shift: int,
           ctx: LoweringContext) -> tuple[list[NpuOp], FeatureMap]:
    """The cast to int32 (shifted left) and the Mul by the input multiplier, for one input."""
    depth = fm.shape.depth
    shifted = ctx.new_feature_map(f"{fm.name}_{suffix}_32bit_shifted", fm.shape, DataType.int32, _UNIT)
    cast_name = f"{name}_{suffix}_32bit_shifted"
    weights = ctx.const_tensor(f"{cast_name}_weights", np.ones((1, 1, 1, depth)), DataType.uint8, _UNIT,
                               shape=(1, 1, 1, depth))
    bias_dtype = DataType.int64 if fm.dtype == DataType.int16 else DataType.int32
    bias = ctx.const_tensor(f"{cast_name}_bias", np.zeros(depth), bias_dtype, shape=(depth,))
    cast = depthwise_op(cast_name, fm, shifted, weights, bias, tflite_op=TFLITE_OP,
                        kernel=Kernel(width=1, height=1, valid_padding=True),
                        attrs=(_scaling(0, 1 << left_shift),))
    scaled = ctx.new_feature_map(f"{fm.name}_scaled", fm.shape, DataType.int32, _UNIT)
    const = ctx.const_operand(f"{name}_{'input2' if suffix == 'ifm2' else 'input1'}_multiplier", [multiplier],
                              DataType.int32, _UNIT, shape=(1,))
    mul_name = f"{name}_scaled_{'input2' if suffix == 'ifm2' else 'input1'}"
    mul = elementwise_op("Mul", mul_name, shifted, const, tflite_op=TFLITE_OP, ofm=scaled,
                         attrs=(_scaling(shift, multiplier),))
    return [cast, mul], scaled


def lower_squared_difference(op, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]:
    """The seven NPU passes of one SQUARED_DIFFERENCE, in Vela's creation order."""
    name = ctx.tensor(op.outputs[0]).name
    ifm2 = ctx.feature_map(op.inputs[1])
    scale1, scale2 = (np.double(fm.quantization.scale[0]) for fm in (ifm, ifm2))
    twice_max = np.double(2.0 * max(scale1, scale2))
    left_shift = 0 if ifm.dtype == DataType.int16 else 7
    multiplier1, shift1 = quantise_scale(float(scale1 / twice_max))
    multiplier2, shift2 = quantise_scale(float(scale2 / twice_max))
    out_scale = np.double(ofm.quantization.scale[0])
    out_multiplier, out_shift = quantise_scale(float(twice_max * twice_max / (np.double(1 << (2 * left_shift))
                                                                              * out_scale)))
    first, scaled1 = _widen(name, ifm, "ifm", multiplier1, shift1, left_shift, ctx)
    second, scaled2 = _widen(name, ifm2, "ifm2", multiplier2, shift2, left_shift, ctx)
    raw = ctx.new_feature_map(f"{ifm.name}_raw_diff", scaled1.shape, DataType.int32, Quantization())
    sub = elementwise_op("Sub", f"{name}_raw_diff", scaled1, scaled2, tflite_op=TFLITE_OP, ofm=raw)
    squared = ctx.new_feature_map(f"{ifm.name}_squared_raw", raw.shape, DataType.int32, Quantization())
    square = elementwise_op("Mul", f"{name}_squared_raw", raw, raw, tflite_op=TFLITE_OP, ofm=squared)
    const = ctx.const_operand(f"{name}_output_multiplier", [out_multiplier], DataType.int32, _UNIT, shape=(1,))
    # Written at the OFM's own shape: where a RESHAPE after it was bypassed, Vela's last Mul writes the reshaped map
    # at its shape (its shapes are set from the tensors once the rewrite is made).
    final = elementwise_op("Mul", name, squared, const, tflite_op=TFLITE_OP, ofm=ofm,
                           attrs=(_scaling(out_shift, out_multiplier),), ofm_shape=ofm.shape)
    return [*first, *second, sub, square, final]
