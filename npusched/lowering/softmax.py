"""SOFTMAX as the chain of NPU passes Vela 5.2.0's legacy core builds for it.

The NPU has no exponent or divide, so Vela computes softmax with integer passes: a max over each row, an exp
table (LUT) applied while subtracting the max, a reduce-sum, then a Newton-Raphson reciprocal of the sum made of
CLZ/shift/multiply/add passes on 1-element tensors, and a final multiply and rounding shift. The 8-bit path is
31 passes; the int16 path is 14 with two interpolating 512-entry LUTs. Pass names are ``<ofm><kind><n>`` where
``<ofm>`` is the TFLite output tensor name (Vela's op name) and ``n`` counts passes from 0, exactly as Vela
prints them; intermediates are int32 (which matters for the cost model: 32-bit elementwise passes are slower).

In npusched's own graph (``LoweringContext.deep_views``) the same passes see the per-row maps, and the exp map
where a scalar is its only other operand, at a deeper view of the same linear bytes (``deep_view``), as the
default core does: a fraction of the cycles at depth 1, the same values (each such pass is per element).

In Vela's default core's graph (``LoweringContext.default_core``, what ``--solver vela-default`` reads that core's
schedule onto) the 8-bit chain is 28 passes, and it also runs an int8 -> int16 softmax (29): the passes its debug
databases list, priced and never compiled.

The fixed-point helpers at the bottom (gemmlowp-style arithmetic and the scale quantiser) are shared with the
MEAN and LSTM decompositions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from npusched.ir import ConstTensor, DataType, FeatureMap, Kernel, NpuOp, Quantization, Shape4D
from npusched.lowering.common import elementwise_op, pool_op
from npusched.lowering.context import LoweringContext

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
TFLITE_OP = "SOFTMAX"
# Marks a pass computed on a ``deep_view`` of its maps: Vela's backend is given the same views
# (``npusched.vela.forced_scheduler``).
DEEP_VIEW = "deep_view"


def lower_softmax(op, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]:
    """The NPU passes Vela makes of one SOFTMAX operator, in Vela's creation order."""
    name = ctx.tensor(op.outputs[0]).name
    beta = float(op.options.get("beta", 1.0))
    # Vela views a softmax IFM with get_full_shape: a 2-D [N, C] tensor is [N, 1, 1, C], not [1, 1, N, C].
    dims = list(ifm.orig_shape) if ifm.orig_shape is not None else list(ctx.tensor(op.inputs[0]).shape)
    if len(dims) == 2:
        dims = [dims[0], 1, 1, dims[1]]
    shape = Shape4D.from_list(dims)
    if shape.batch > 1:
        # Vela folds the batch into the height so each row is still one softmax.
        shape = Shape4D(1, shape.batch * shape.height, shape.width, shape.depth)
    builder = _SoftmaxBuilder(name, ifm, ofm, shape, ctx)
    if ifm.dtype in (DataType.int8, DataType.uint8) and ofm.dtype == ifm.dtype or \
            (ifm.dtype, ofm.dtype) == (DataType.int8, DataType.int16):
        return builder.eight_bit(beta)
    if ifm.dtype == DataType.int16 and ofm.dtype == DataType.int16:
        return builder.sixteen_bit(beta)
    raise ValueError(f"SOFTMAX {name}: {ifm.dtype.value} -> {ofm.dtype.value} has no NPU decomposition")


def deep_view(shape: Shape4D) -> Shape4D | None:
    """The deepest view of the linear bytes of a map of ``shape`` at most 16 deep (as Vela's default core sees a
    softmax's per-row maps), None where none fills the NPU's 16-deep bricks better than the map's own depth.

    A softmax's per-row arithmetic ([1, H, W, 1] int32 maps: 25 of the 8-bit decomposition's 31 passes) and its
    shift of the whole exp map by a constant are per element, so any view of the same linear bytes computes the
    same values; at depth 1 (or 4) an elementwise pass fills a sixteenth (a quarter) of the NPU's 16-deep blocks
    and bricks. On a 128 x 128 segmentation head those passes cost more than all the U-Net's convolutions."""
    size = shape.elements()
    depth = next(d for d in (16, 8, 4, 2, 1) if size % d == 0)
    if _brick_fill(depth) <= _brick_fill(shape.depth):
        return None
    cells = size // depth
    width = max(d for d in range(1, math.isqrt(cells) + 1) if cells % d == 0)
    return Shape4D(1, cells // width, width, depth)


def _brick_fill(depth: int) -> float:
    """The part of its 16-deep bricks a map of ``depth`` fills."""
    return depth / (16 * math.ceil(depth / 16))


def _quant_limits(dtype: DataType) -> tuple[int, int]:
    """The integer range Vela's reader records for a tensor type (used as clip bounds)."""
    bits = dtype.size_in_bits
    if dtype == DataType.uint8:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


class _SoftmaxBuilder:
    """Accumulates the passes; ``tag(kind)`` gives the next Vela pass name (the counter moves on ``add``)."""

    def __init__(self, name: str, ifm: FeatureMap, ofm: FeatureMap, shape: Shape4D, ctx: LoweringContext):
        self.name = name
        self.ifm = ifm
        self.ofm = ofm
        self.shape = shape
        self.ctx = ctx
        self.ops: list[NpuOp] = []
        zero_point = ifm.quantization.zero_point
        # Vela clones the IFM quantisation and drops the scale ("no scale") for most intermediates.
        self.q_none = Quantization(scale=(), zero_point=tuple(zero_point))
        self.q_one = Quantization(scale=(1.0,), zero_point=(0,))
        self.q_two = Quantization(scale=(2.0,), zero_point=(0,))
        self.per_row = Shape4D(1, shape.height, shape.width, 1)
        # the deeper views of the per-row maps and of the whole map, where the context asks for them (a softmax
        # over one value has nothing to gain)
        deep = ctx.deep_views and shape.depth > 1
        self.per_row_view = deep_view(self.per_row) if deep else None
        self.map_view = deep_view(shape) if deep else None

    def seen(self, fm: FeatureMap) -> Shape4D:
        """How a pass sees ``fm`` by default: a per-row map at its deeper view, when there is one."""
        return self.per_row_view if self.per_row_view is not None and fm.shape == self.per_row else fm.shape

    def deep_attrs(self, *views: Shape4D | None) -> tuple[tuple[str, object], ...]:
        """The mark of a pass that sees a map at a deeper view."""
        deeper = {self.per_row_view, self.map_view} - {None}
        return ((DEEP_VIEW, True),) if deeper & set(views) else ()

    def tag(self, kind: str) -> str:
        return f"{self.name}_{kind}{len(self.ops)}"

    def add(self, npu_op: NpuOp) -> FeatureMap:
        self.ops.append(npu_op)
        return npu_op.ofm.tensor

    def const(self, name: str, value: int, quantization: Quantization | None = None) -> FeatureMap:
        return self.ctx.const_operand(name, [value], DataType.int32,
                                      self.q_none if quantization is None else quantization, shape=(1, 1, 1, 1))

    def binary(self, kind: str, op_type: str, a: FeatureMap, b: FeatureMap, quantization: Quantization,
               clip: tuple[int, int] | None = None, **kwargs) -> FeatureMap:
        kwargs.setdefault("ifm_shape", self.seen(a))
        kwargs.setdefault("ifm2_shape", self.seen(b))
        kwargs["attrs"] = (*kwargs.get("attrs", ()), *self.deep_attrs(kwargs["ifm_shape"], kwargs["ifm2_shape"]))
        return self.add(elementwise_op(
            op_type, self.tag(kind), a, b, tflite_op=TFLITE_OP, quantization=quantization,
            activation=None if clip is None else "Clip",
            activation_min=None if clip is None else clip[0], activation_max=None if clip is None else clip[1],
            **kwargs))

    def row_max(self) -> FeatureMap:
        """Pass 0: a max-pool whose kernel spans the depth of each (row, column) position."""
        rows = self.shape.height * self.shape.width
        depth = self.shape.depth
        name = self.tag("maxpool")
        out = self.ctx.new_feature_map(f"{name}_tens0", (1, rows, 1, 1), self.ifm.dtype, self.q_none)
        return self.add(pool_op(
            "MaxPool", name, self.ifm, out, tflite_op=TFLITE_OP,
            kernel=Kernel(width=depth, height=1, valid_padding=True),
            ifm_shape=Shape4D(1, rows, depth, 1), ofm_shape=out.shape))

    def reduce_sum(self, src: FeatureMap, clip: tuple[int, int] | None) -> FeatureMap:
        name = self.tag("reduce_sum")
        out = self.ctx.new_feature_map(f"{name}_tens0", self.per_row, DataType.int32, self.q_none)
        return self.add(pool_op(
            "ReduceSum", name, src, out, tflite_op=TFLITE_OP, kernel=Kernel(valid_padding=True), ifm_shape=self.shape,
            activation=None if clip is None else "Clip", activation_min=None if clip is None else clip[0],
            activation_max=None if clip is None else clip[1]))

    def clz(self, src: FeatureMap, clip: tuple[int, int] | None) -> FeatureMap:
        return self.add(elementwise_op(
            "CLZ", self.tag("clz"), src, None, tflite_op=TFLITE_OP, quantization=self.q_none, ifm_shape=self.seen(src),
            attrs=self.deep_attrs(self.seen(src)),
            activation=None if clip is None else "Clip", activation_min=None if clip is None else clip[0],
            activation_max=None if clip is None else clip[1]))

    def final_shift(self, src: FeatureMap, shift: FeatureMap, rounding_mode: str | None) -> None:
        """The last pass writes the operator's own OFM, seen with the shape of the scaled tensor."""
        self.add(elementwise_op(
            "SHR", self.tag("shr"), src, shift, tflite_op=TFLITE_OP, ofm=self.ofm, ifm_shape=src.shape,
            ifm2_shape=self.per_row, rounding_mode=rounding_mode))

    def eight_bit(self, beta: float) -> list[NpuOp]:
        ifm = self.ifm
        scale = ifm.quantization.scale[0] if ifm.quantization.scale else 1.0
        lut_values = exp_lut_8bit(beta, scale)
        qmin, qmax = _quant_limits(ifm.dtype)
        clip = (qmin, qmax)
        clip2 = (2 * qmin, 2 * qmax)

        row_max = self.row_max()

        # Pass 1: x - max, looked up in the exp table; the result stays int32.
        name = self.tag("sub")
        lut = self.ctx.const_tensor(f"{name}_exp_lut", _as_int32_bits(lut_values), DataType.int32,
                                    shape=(1, 1, 1, 256))
        lut_zero_point = 127
        exps = self.binary("sub", "Sub", ifm, row_max, Quantization(scale=(1.0,), zero_point=(lut_zero_point,)),
                           dtype=DataType.int32, ifm_shape=self.shape,
                           ifm2_shape=self.per_row)
        self.ops[-1] = _with_lut(self.ops[-1], lut, -128 - lut_zero_point, 127 - lut_zero_point)

        name = self.tag("shr")
        rescaled = self.binary("shr", "SHR", exps, self.const(f"{name}_const", 12), self.q_none, clip,
                               rounding_mode="HalfUp", ifm_shape=self.map_view or exps.shape)
        total = self.reduce_sum(rescaled, clip)
        headroom_plus_one = self.clz(total, clip)
        # 8 (int8 OFM) or 16 (int16 OFM) fraction bits are left after the final shift
        fraction_bits = self.ofm.dtype.size_in_bits
        right_shift = self.binary("sub", "Sub", self.const("headroom_offset_const", 12 + 31 - fraction_bits),
                                  headroom_plus_one, self.q_none, clip)
        one = self.const("one_const", 1)
        headroom = self.binary("sub", "Sub", headroom_plus_one, one, self.q_none, clip)
        shifted_sum = self.binary("shl", "SHL", total, headroom, self.q_none, clip)
        if self.ctx.default_core:
            half_denominator = shifted_sum  # the default core has no passes for the halving below
        else:
            shifted_sum_minus_one = self.binary("sub", "Sub", shifted_sum, self.const("shifted_one_const", 1 << 30),
                                                self.q_none, clip)
            shifted_sum_minus_one = self.binary("shl", "SHL", shifted_sum_minus_one, one, self.q_none, clip)
            half_denominator = self.binary("add", "Add", shifted_sum_minus_one,
                                           self.const("F0_one_const", INT32_MAX), self.q_one, clip,
                                           attrs=(("explicit_scaling", (False, (1,), (1,))),))
        # Newton-Raphson reciprocal: start from 48/17 - 32/17 * d, then three refinement steps.
        rescaled = self.binary("mul", "Mul", half_denominator,
                               self.const("neg_32_over_17_const", -1010580540, self.q_one), self.q_two, clip2)
        estimate = self.binary("add", "Add", rescaled, self.const("48_over_17_const", 1515870810), self.q_one, clip)
        f2_one = self.const("F2_one_const", 1 << 29)
        four = self.const("four_const", 4)
        for _ in range(3):
            product = self.binary("mul", "Mul", estimate, half_denominator, self.q_two, clip2)
            residual = self.binary("sub", "Sub", f2_one, product, self.q_one, clip)
            correction = self.binary("mul", "Mul", estimate, residual, self.q_two, clip2)
            correction = self.binary("mul", "Mul", correction, four, self.q_none, clip)
            estimate = self.binary("add", "Add", estimate, correction, self.q_one, clip)
        if self.ctx.default_core:
            self.default_core_tail(self.binary("mul", "Mul", exps, estimate, self.q_two, clip2,
                                               ifm2_shape=self.per_row), right_shift)
            return self.ops
        scale_factor = self.binary("mul", "Mul", estimate, self.const("two_const", 2), self.q_one, clip)
        scaled = self.binary("mul", "Mul", exps, scale_factor, self.q_two, clip2, ifm2_shape=self.per_row)
        self.final_shift(scaled, right_shift, "HalfUp")
        return self.ops

    def default_core_tail(self, scaled: FeatureMap, right_shift: FeatureMap) -> None:
        """How Vela's default core ends an 8-bit SOFTMAX: an Add of a constant row next to the final shift, before
        it for an 8-bit OFM, after it for the int16 OFM only that core supports (then one more Add writes the
        OFM). Its debug databases list these passes. npusched prices the default core's graph but never compiles
        it (Vela legacy's backend has neither the int16 softmax nor these passes), so where this graph leaves the
        legacy arithmetic (here and the halving before the reciprocal) the constants only hold the shapes and types
        the passes are priced with."""
        name = self.tag("add")
        row = self.ctx.const_operand(f"{name}_const", np.zeros(scaled.shape.elements(), dtype=np.int32),
                                     DataType.int32, self.q_none, shape=scaled.shape.as_list())
        if self.ofm.dtype != DataType.int16:
            self.final_shift(self.binary("add", "Add", row, scaled, self.q_none), right_shift, "HalfUp")
            return
        shifted = self.binary("shr", "SHR", scaled, right_shift, self.q_none, rounding_mode="HalfUp",
                              ifm2_shape=self.per_row)
        biased = self.binary("add", "Add", row, shifted, self.q_none)
        self.add(elementwise_op("Add", self.tag("add"), biased, self.const("zero_const", 0), tflite_op=TFLITE_OP,
                                ofm=self.ofm, ifm_shape=biased.shape, ifm2_shape=Shape4D(1, 1, 1, 1)))

    def sixteen_bit(self, beta: float) -> list[NpuOp]:
        ifm = self.ifm
        q_none = self.q_none
        row_max = self.row_max()
        diff = self.binary("sub", "Sub", ifm, row_max, ifm.quantization, dtype=DataType.int32,
                           ifm_shape=self.shape, ifm2_shape=self.per_row)

        # Scale the differences into the exp table's input range [-10, 0].
        name = self.tag("mul")
        out_range = 10.0 / 65535.0
        diff_scale = ifm.quantization.scale[0] if ifm.quantization.scale else 1.0
        multiplier, _ = elementwise_mul_scale(diff_scale, beta, out_range, double=True)
        beta_q = Quantization(scale=(beta,), zero_point=tuple(ifm.quantization.zero_point))
        out_q = Quantization(scale=(out_range,), zero_point=tuple(self.ofm.quantization.zero_point))
        scaled = self.binary("mul", "Mul", diff, self.const(f"{name}_scale_const", multiplier, beta_q), out_q,
                             ifm_shape=self.map_view or diff.shape)

        name = self.tag("add")
        exp_words = _as_int32_bits(interpolation_lut_int16(math.exp, -10.0, 0.0))
        exp_table = self.ctx.const_tensor(f"{name}_exp_lut", exp_words, DataType.int32, shape=(1, 1, 1, 512))
        exps = self.binary("add", "Add", scaled, self.const(f"{name}_const", 32767, q_none), out_q,
                           dtype=DataType.int16)
        self.ops[-1] = _with_lut(self.ops[-1], exp_table, None, None)

        total = self.reduce_sum(exps, None)
        headroom_plus_one = self.clz(total, None)
        name = self.tag("sub")
        right_shift = self.binary("sub", "Sub", self.const(f"{name}_const", 31), headroom_plus_one, q_none)
        shifted_one = self.binary("shl", "SHL", self.const("one_const", 1), right_shift, q_none)
        sum_minus_one = self.binary("sub", "Sub", total, shifted_one, q_none)
        shifted = self.binary("shl", "SHL", sum_minus_one, headroom_plus_one, q_none)
        name = self.tag("shr")
        shifted16 = self.binary("shr", "SHR", shifted, self.const(f"{name}_const", 15, q_none), q_none)

        name = self.tag("sub")
        recip_words = _as_int32_bits(interpolation_lut_int16(lambda x: 1.0 / (1.0 + x), 0.0, 1.0))
        recip_table = self.ctx.const_tensor(f"{name}_one_over_one_plus_x_lut", recip_words, DataType.int32,
                                            shape=(1, 1, 1, 512))
        reciprocal = self.binary("sub", "Sub", shifted16, self.const(f"{name}_const", 32768, q_none), q_none,
                                 dtype=DataType.int16)
        self.ops[-1] = _with_lut(self.ops[-1], recip_table, None, None)

        product = self.binary("mul", "Mul", exps, reciprocal, q_none, dtype=DataType.int32, ifm_shape=self.shape,
                              ifm2_shape=self.per_row)
        self.final_shift(product, right_shift, None)
        return self.ops


def _with_lut(npu_op: NpuOp, lut: ConstTensor, act_min: int | None, act_max: int | None) -> NpuOp:
    """Vela's set_activation_lut: the pass's activation becomes a table lookup."""
    attrs = [(k, v) for k, v in npu_op.attrs if k not in ("activation_min", "activation_max")]
    if act_min is not None:
        attrs.append(("activation_min", act_min))
    if act_max is not None:
        attrs.append(("activation_max", act_max))
    return replace(npu_op, activation="LUT", activation_lut=lut, attrs=tuple(attrs))


def _as_int32_bits(values: Sequence[int]) -> np.ndarray:
    """LUT words as int32 with the same bits (Vela stores them as uint32; the size, 4 bytes each, is what
    the DMA into SHRAM costs)."""
    return np.array([int(v) & 0xFFFFFFFF for v in values], dtype=np.uint32).view(np.int32)


# ---------------------------------------------------------------------------------------------------------------
# Fixed-point arithmetic (gemmlowp semantics on Python ints) and scale quantisation.


def quantise_scale(scale: float) -> tuple[int, int]:
    """A real scale as (Q31 multiplier, right shift) the way Vela encodes it; out-of-range shifts give (0, 16)."""
    mantissa, exponent = math.frexp(scale)
    scaled = mantissa * (1 << 31)
    multiplier = int(math.trunc(scaled + (0.5 if scaled >= 0 else -0.5)))
    shift = 31 - exponent
    if shift < 0 or shift >= 64:
        return 0, 16
    return multiplier, shift


def elementwise_mul_scale(scale_a: float, scale_b: float, scale_out: float, double: bool = False) -> tuple[int, int]:
    """(multiplier, shift) of an elementwise multiply's output rescale. Like Vela, the ratio is computed in
    float32 unless ``double`` is asked for (its LSTM passes use the float32 default)."""
    if double:
        ratio = float(np.double(scale_a) * np.double(scale_b) / np.double(scale_out))
    else:
        ratio = float(np.float32(scale_a) * np.float32(scale_b) / np.float32(scale_out))
    return quantise_scale(ratio)


def _round_toward_zero_div(num: int, den: int) -> int:
    q = abs(num) // abs(den)
    return q if (num >= 0) == (den > 0) else -q


def saturating_rounding_doubling_high_mul(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul for int32 operands."""
    if a == INT32_MIN and b == INT32_MIN:
        return INT32_MAX
    product = a * b
    nudge = (1 << 30) if product >= 0 else 1 - (1 << 30)
    return _round_toward_zero_div(product + nudge, 1 << 31)


def rounding_divide_by_pot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def _saturating_shift_left(x: int, exponent: int) -> int:
    limit = (1 << (31 - exponent)) - 1
    if x > limit:
        return INT32_MAX
    if x < -limit:
        return INT32_MIN
    return x << exponent


def _exp_on_small_interval(a: int) -> int:
    """exp(a) for a in [-1/4, 0) given and returned in Q0.31: Taylor series around -1/8."""
    exp_minus_one_eighth = 1895147668
    one_third = 715827883
    x = a + (1 << 28)
    x2 = saturating_rounding_doubling_high_mul(x, x)
    x3 = saturating_rounding_doubling_high_mul(x2, x)
    x4 = saturating_rounding_doubling_high_mul(x2, x2)
    tail = saturating_rounding_doubling_high_mul(rounding_divide_by_pot(x4, 2) + x3, one_third) + x2
    series = x + rounding_divide_by_pot(tail, 1)
    return exp_minus_one_eighth + saturating_rounding_doubling_high_mul(exp_minus_one_eighth, series)


# exp(-2^k) in Q0.31 for k = -2..4, used to apply the whole quarters of the argument one bit at a time.
_EXP_OF_NEGATIVE_POWERS = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
                           (3, 720401), (4, 242))


def exp_on_negative_values(a: int) -> int:
    """gemmlowp exp for a <= 0: argument in Q5.26, result in Q0.31."""
    quarter = 1 << 24
    offset_in_quarter = (a & (quarter - 1)) - quarter
    result = _exp_on_small_interval(_saturating_shift_left(offset_in_quarter, 5))
    whole = offset_in_quarter - a
    for power, factor in _EXP_OF_NEGATIVE_POWERS:
        if whole & (1 << (26 + power)):
            result = saturating_rounding_doubling_high_mul(result, factor)
    return INT32_MAX if a == 0 else result


def exp_lut_8bit(beta: float, input_scale: float) -> list[int]:
    """The 256-word exp table of the 8-bit path: entry x holds exp((x - 255) * beta * scale) in Q0.31."""
    integer_bits = 5
    real_beta = min(float(np.double(beta) * np.double(input_scale) * (1 << (31 - integer_bits))),
                    float((1 << 31) - 1.0))
    multiplier, shift = quantise_scale(real_beta)
    left_shift = 31 - shift
    lowest = -1.0 * math.floor(1.0 * ((1 << integer_bits) - 1) * (1 << (31 - integer_bits)) / (1 << left_shift))
    table = []
    for x in range(256):
        diff = x - 255
        if diff < lowest:
            table.append(0)
        else:
            table.append(exp_on_negative_values(saturating_rounding_doubling_high_mul(diff << left_shift,
                                                                                      multiplier)))
    return table


def _round_half_away(value: float) -> float:
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


def interpolation_lut_int16(func: Callable[[float], float], low: float, high: float) -> list[int]:
    """A 512-entry int16 interpolation table as the NPU reads it: each word packs the sample (low half) and the
    slope to the next sample (high half). Samples follow TFLite's int16 table generator (output range [-1, 1],
    each sample nudged by half the midpoint interpolation error)."""
    steps = 512
    step = (high - low) / steps
    scale = 32768.0

    def clamp(v: float) -> int:
        return int(min(max(v, -32768.0), 32767.0))

    samples = []
    for i in range(steps):
        here = func(low + i * step)
        nxt = func(low + (i + 1) * step)
        mid = func(low + i * step + step / 2)
        sample = _round_half_away(here * scale)
        interpolated_mid = _round_half_away((nxt * scale + sample) / 2)
        bias = _round_half_away((interpolated_mid - _round_half_away(mid * scale)) / 2)
        samples.append(clamp(sample - bias))
    samples.append(clamp(_round_half_away(func(high) * scale)))
    return [((samples[i + 1] - samples[i]) << 16) | (samples[i] & 0xFFFF) for i in range(steps)]
