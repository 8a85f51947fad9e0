"""Lookup tables for activations the NPU evaluates through its LUT (sigmoid, tanh, exp, hard-swish, ...).

Only the table's size and type matter to the cost model (it is DMA'd into SHRAM); the values follow the
TFLite reference semantics so that the table is also right for a command-stream generator. EXP, GELU and a
single-alpha PRELU follow TFLite's own kernels exactly (float32 tables; PRELU's fixed-point rescaling); sigmoid
and tanh use the same real-valued evaluation and away-from-zero rounding as Vela; hard-swish and leaky ReLU are
evaluated in floating point (Vela mirrors TFLite's fixed-point kernels there, so a few entries may differ by one
LSB).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from npusched.ir import ConstTensor, DataType, Quantization


def round_away_from_zero(x: float) -> float:
    return float(np.trunc(x + (-0.5 if x < 0 else 0.5)))


def sigmoid_clamped(x: float) -> float:
    """Logistic with the saturation TFLite applies outside [-8, 8]."""
    if x <= -8:
        return 0.0
    if x >= 8:
        return 1.0
    return 1.0 / (1.0 + math.exp(-x))


def hard_swish(x: float) -> float:
    return x * min(max(x + 3.0, 0.0), 6.0) / 6.0


def _scale(q: Quantization) -> float:
    return float(q.scale[0]) if q.scale else 1.0


def _zp(q: Quantization) -> int:
    return int(q.zero_point[0]) if q.zero_point else 0


def lut8_values(fn: Callable[[float], float], ifm_q: Quantization, ofm_q: Quantization, dtype: DataType,
                zero_point_after_rounding: bool = False) -> list[int]:
    """256 entries: each possible 8-bit input dequantised, mapped by ``fn``, requantised and clamped.

    Vela rounds ``zp + y/scale`` for the activation tables but adds the zero point after rounding for the
    exp table; ``zero_point_after_rounding`` selects the latter.
    """
    qrange = range(256) if dtype == DataType.uint8 else range(-128, 128)
    lo, hi = min(qrange), max(qrange)
    in_scale, out_scale = _scale(ifm_q), _scale(ofm_q)
    zp_in, zp_out = _zp(ifm_q), _zp(ofm_q)
    values = []
    for x in qrange:
        y = fn(in_scale * (x - zp_in))
        if zero_point_after_rounding:
            q = round_away_from_zero(y / out_scale) + zp_out
        else:
            q = round_away_from_zero(zp_out + y / out_scale)
        values.append(int(min(hi, max(lo, q))))
    return values


def lut16_values(fn: Callable[[float], float], ifm_q: Quantization, ofm_q: Quantization) -> list[int]:
    """512 base/slope entries for a 16-bit input, interpolated by the hardware (Vela's int16 table layout:
    the base in the low half-word, the slope to the next sample in the high half-word)."""
    in_scale, out_scale = _scale(ifm_q), _scale(ofm_q)
    zp_in, zp_out = _zp(ifm_q), _zp(ofm_q)
    in_min, in_max = in_scale * (-32768 - zp_in), in_scale * (32767 - zp_in)
    out_min, out_max = out_scale * (-32768 - zp_out), out_scale * (32767 - zp_out)
    step = (in_max - in_min) / 512
    inv = 65536.0 / (out_max - out_min)
    samples = []
    for i in range(513):
        y = fn(in_min + i * step)
        samples.append(int(min(32767, max(-32768, round_away_from_zero(y * inv)))))
    values = []
    for i in range(512):
        base = samples[i]
        slope = samples[i + 1] - base
        values.append(((slope & 0xFFFF) << 16) | (base & 0xFFFF))
    return values


def lut_tensor(name: str, values: list[int], dtype: DataType) -> ConstTensor:
    """A LUT constant shaped [1, 1, 1, N] as Vela makes it; 16-bit tables are 32-bit words."""
    if dtype == DataType.int16:
        arr = np.array(values, dtype=np.int64).astype(np.uint32).view(np.int32)
        dt = DataType.int32
    else:
        arr = np.array(values, dtype=np.int64)
        arr = arr.astype(np.uint8 if dtype == DataType.uint8 else np.int8)
        dt = dtype
    arr = arr.reshape(1, 1, 1, len(values))
    arr.setflags(write=False)
    return ConstTensor(name=name, shape=(1, 1, 1, len(values)), dtype=dt, quantization=Quantization(),
                       values=arr)


def rsqrt_lut8_values(ifm_q: Quantization, ofm_q: Quantization) -> list[int]:
    """256 int8 entries of 1/sqrt for an int8 RSQRT (the only RSQRT the NPU runs): an 8-bit table, like Vela's,
    not a 16-bit one, whose 2 KiB DMA into SHRAM would be priced eight times as long. An input at or below
    the zero point (no square root) maps to the largest output, as the reference does. Vela evaluates the
    reference's fixed-point 1/sqrt, so an entry may differ from this floating-point one by one LSB."""

    def rsqrt(x: float) -> float:
        return 1.0 / math.sqrt(x) if x > 0 else math.inf

    return lut8_values(rsqrt, ifm_q, ofm_q, DataType.int8, zero_point_after_rounding=True)


# The end of a GELU's table's name (``rewrites._to_lut`` names a table ``<ofm>_lut_<function>_values``).
GELU_TABLE = "_lut_gelu_values"


def gelu_lut8_values(ifm_q: Quantization, ofm_q: Quantization, approximate: bool) -> list[int]:
    """256 int8 entries of GELU exactly as TFLite's int8 kernel tabulates them (its LUTPopulate): dequantise, GELU
    (erf, or the tanh form when ``approximate``) and rescale in float32, round half away from zero, add the zero
    point. A GELU the NPU runs through this table is bit-exact (tests/test_attention_on_npu.py checks it against
    the reference interpreter)."""
    f32 = np.float32
    sqrt_half, sqrt_two_over_pi = f32(math.sqrt(0.5)), f32(math.sqrt(2.0 / math.pi))
    in_scale, out_inverse = f32(_scale(ifm_q)), f32(1) / f32(_scale(ofm_q))
    in_zero, out_zero = int(ifm_q.zero_point[0]), f32(ofm_q.zero_point[0])
    values = []
    for q in range(-128, 128):
        x = in_scale * f32(q - in_zero)
        if approximate:
            inner = f32(math.tanh(float(sqrt_two_over_pi * (x + f32(0.044715) * x * x * x))))
        else:
            inner = f32(math.erf(float(x * sqrt_half)))
        rescaled = round_away_from_zero(float(f32(0.5) * x * (f32(1) + inner) * out_inverse))
        values.append(max(-128, min(127, int(f32(rescaled) + out_zero))))
    return values


# TFLite's int8 kernels that build a table do the arithmetic in float32 (its LUTPopulate): the tables below follow it.
_F32 = np.float32
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1
_F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103  # doubles from here up round to float32 infinity


def _expf(x: np.float32) -> np.float32:
    """expf of a float32: the double result rounded to float32 (what a correctly rounded expf returns), inf above
    float32's range."""
    y = math.exp(float(x)) if x < 709 else math.inf
    return _F32(y) if y < _F32_OVERFLOW else _F32(np.inf)


def exp_lut8_values(ifm_q: Quantization, ofm_q: Quantization) -> list[int]:
    """256 int8 entries of exp as TFLite's int8 EXP kernel tabulates them: dequantise in float32, expf (the double
    result rounded to float32, which is what a correctly rounded expf returns), scale by the float32 inverse of the
    output scale, round half away from zero, add the zero point, clamp. An EXP run through it is bit-exact
    (tests/test_vela_operators.py checks every entry against the reference interpreter)."""
    in_scale, out_inverse = _F32(_scale(ifm_q)), _F32(1) / _F32(_scale(ofm_q))
    in_zero, out_zero = _zp(ifm_q), _F32(_zp(ofm_q))
    values = []
    for q in range(-128, 128):
        x = in_scale * _F32(q - in_zero)
        y = _expf(x)
        rescaled = _F32(round_away_from_zero(float(y * out_inverse))) if np.isfinite(y) else _F32(np.inf)
        quantised = rescaled + out_zero
        values.append(127 if not np.isfinite(quantised) or quantised > 127 else max(-128, int(quantised)))
    return values


def exp_lut16_values(ifm_q: Quantization, ofm_q: Quantization) -> list[int]:
    """512 base/slope words of exp for an int16 EXP, from the 513 samples TFLite's int16 kernel interpolates
    between (float32; each sample nudged by half the error its linear interpolation makes at the step's midpoint)."""
    in_scale, out_scale = _F32(_scale(ifm_q)), _F32(_scale(ofm_q))
    in_zero, out_zero = _zp(ifm_q), _zp(ofm_q)
    in_min, in_max = in_scale * _F32(-32768 - in_zero), in_scale * _F32(32767 - in_zero)
    out_min, out_max = out_scale * _F32(-32768 - out_zero), out_scale * _F32(32767 - out_zero)
    step = (in_max - in_min) / _F32(512)
    half = step / _F32(2)
    inverse = _F32(65536) / (out_max - out_min)

    f = _expf

    def rounded(x: np.float32) -> np.float32:
        return _F32(round_away_from_zero(float(x))) if np.isfinite(x) else x

    samples = []
    for i in range(512):
        at = in_min + _F32(i) * step
        sample = rounded(f(at) * inverse)
        interpolated = rounded((f(in_min + _F32(i + 1) * step) * inverse + sample) / _F32(2))
        error = interpolated - rounded(f(at + half) * inverse)
        samples.append(float(np.clip(sample - rounded(error / _F32(2)), -32768, 32767)))
    samples.append(float(np.clip(rounded(f(in_max) * inverse), -32768, 32767)))
    words = []
    for base, following in zip(samples, samples[1:], strict=False):
        slope = int(following) - int(base)
        words.append(((slope & 0xFFFF) << 16) | (int(base) & 0xFFFF))
    return words


def _tflite_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: a real multiplier as (Q31 mantissa, power of two), the mantissa rounded half away
    from zero."""
    if real == 0:
        return 0, 0
    mantissa, exponent = math.frexp(real)
    fixed = int(round_away_from_zero(mantissa * (1 << 31)))
    if fixed == 1 << 31:
        fixed, exponent = fixed // 2, exponent + 1
    if exponent < -31:
        return 0, 0
    return (_INT32_MAX, 30) if exponent > 30 else (fixed, exponent)


def _tflite_rescaled(x: int, multiplier: int, exponent: int) -> int:
    """TFLite's MultiplyByQuantizedMultiplier: a doubling high multiply that rounds half away from zero, then a
    rounding right shift (half up)."""
    a = x * (1 << max(exponent, 0))
    if a == multiplier == _INT32_MIN:
        high = _INT32_MAX
    else:
        product = a * multiplier
        nudged = product + ((1 << 30) if product >= 0 else 1 - (1 << 30))
        high = abs(nudged) >> 31 if nudged >= 0 else -(abs(nudged) >> 31)
    shift = max(-exponent, 0)
    mask = (1 << shift) - 1
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> shift) + (1 if (high & mask) > threshold else 0)


def prelu_lut8_values(ifm_q: Quantization, alpha_q: Quantization, alpha: int, ofm_q: Quantization,
                      dtype: DataType) -> list[int]:
    """256 entries of a PRELU whose alpha is one value (``alpha``, its zero point not yet subtracted), computed as
    TFLite's 8-bit PRELU kernel computes each element: inputs at or above the zero point rescaled by IFM scale / OFM
    scale, the others multiplied by alpha and rescaled by IFM scale x alpha scale / OFM scale (float32 ratios,
    fixed-point rescaling), plus the output zero point, clamped."""
    in_scale, out_scale = _F32(_scale(ifm_q)), _F32(_scale(ofm_q))
    identity = _tflite_multiplier(float(in_scale / out_scale))
    scaled = _tflite_multiplier(float(in_scale * _F32(_scale(alpha_q)) / out_scale))
    factor = alpha - _zp(alpha_q)
    qrange = range(256) if dtype == DataType.uint8 else range(-128, 128)
    lo, hi = min(qrange), max(qrange)
    values = []
    for q in qrange:
        x = q - _zp(ifm_q)
        y = _tflite_rescaled(x, *identity) if x >= 0 else _tflite_rescaled(x * factor, *scaled)
        values.append(min(hi, max(lo, y + _zp(ofm_q))))
    return values


def activation_lut(kind: str, ifm_q: Quantization, ofm_q: Quantization, dtype: DataType,
                   alpha: float = 0.0) -> list[int]:
    """Table values for ``kind`` in {"sigmoid", "tanh", "exp", "hardswish", "lrelu"}."""
    fns: dict[str, Callable[[float], float]] = {
        "sigmoid": sigmoid_clamped,
        "tanh": math.tanh,
        "exp": math.exp,
        "hardswish": hard_swish,
        "lrelu": lambda x: x if x >= 0 else alpha * x,
    }
    fn = fns[kind]
    if dtype == DataType.int16:
        return lut16_values(fn, ifm_q, ofm_q)
    return lut8_values(fn, ifm_q, ofm_q, dtype, zero_point_after_rounding=(kind == "exp"))
