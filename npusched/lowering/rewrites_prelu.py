"""PRELU as Vela legacy's graph optimiser rewrites it, and the LEAKY_RELU forms a PRELU can become. A mixin of
``GraphRewriter``.

A constant alpha that is one value makes the PRELU a RELU (alpha 0) or a LEAKY_RELU, which the later rewrites turn
into a lookup table (8-bit) or element-wise passes; a constant alpha below 1 everywhere makes it the maximum of
IFM x alpha and the IFM rescaled; anything else is min(IFM, 0) x alpha added to relu(IFM). The ops, their names,
operand order and tensors are Vela's, so that its pass packing order, and so its schedule, come out the same.
"""

from __future__ import annotations

import numpy as np

from npusched.ir import DataType, Quantization
from npusched.lowering.netgraph import WorkingOp, WorkingTensor, const_tensor
from npusched.lowering.rewrite_helpers import quantise_scale, scaling_equal, zero_point

# The attribute a LEAKY_RELU made from a PRELU carries: (alpha's stored value, alpha's quantisation) and Vela's
# (multiplier, shift) of IFM scale x alpha scale / OFM scale.
PRELU_ALPHA = "prelu_alpha"
ALPHA_SCALING = "alpha_scaling"
_UNSCALED = (False, (0,), (1,))  # Vela's ExplicitScaling(False, shift=[0], multiplier=[1]): the sum is not rescaled


def _f32_ratio(a: float, b: float, out: float) -> tuple[int, int]:
    """(multiplier, shift) of a x b / out computed in float32, as Vela's elementwise_mul_scale does."""
    return quantise_scale(float(np.float32(a) * np.float32(b) / np.float32(out)))


def _scale(t: WorkingTensor) -> float:
    return float(t.quantization.scale[0]) if t.quantization.scale else 1.0


def _unscaled(q: Quantization) -> Quantization:
    """A copy of ``q`` without a scale and with zero point 0 (Vela's constant zero of the min/select passes)."""
    return Quantization(scale=(), zero_point=(0,), quantized_dimension=q.quantized_dimension, min=q.min, max=q.max)


def _binary(kind: str, name: str, first: WorkingTensor, second: WorkingTensor, out: WorkingTensor,
            tflite_op: str) -> WorkingOp:
    op = WorkingOp(kind, name, tflite_op=tflite_op)
    op.add_input(first)
    op.add_input(second)
    op.set_output(out)
    op.set_ifm_ofm_shapes()
    return op


class PreluRewrites:
    """PRELU's rewrite, and the element-wise form of a LEAKY_RELU made from one."""

    def convert_prelu(self, op: WorkingOp) -> WorkingOp:
        if op.type != "Prelu":
            return op
        ifm, alpha, ofm = op.ifm, op.ifm2, op.ofm
        if ifm is None or alpha is None or ofm is None:
            return op
        if alpha.values is not None:
            values = np.asarray(alpha.values).astype(np.int64)
            alpha_zero, alpha_scale = zero_point(alpha), float(np.float32(_scale(alpha)))
            lowest = float(int(values.min()) - alpha_zero) * alpha_scale
            highest = float(int(values.max()) - alpha_zero) * alpha_scale
            if lowest == highest:
                return self._prelu_as_single_alpha(op, ifm, alpha, ofm, int(values.min()), lowest)
            if highest < 1:
                return self._prelu_as_maximum(op, ifm, alpha, ofm)
        return self._prelu_as_sum(op, ifm, alpha, ofm)

    @staticmethod
    def _prelu_as_single_alpha(op: WorkingOp, ifm: WorkingTensor, alpha: WorkingTensor, ofm: WorkingTensor,
                               stored: int, value: float) -> WorkingOp:
        """One alpha everywhere: a RELU (alpha 0) or a LEAKY_RELU keeping the alpha and its exact scaling."""
        new_type = "Relu" if value == 0 else "LeakyRelu"
        if new_type == "LeakyRelu":
            op.attrs["alpha"] = value
            op.attrs[ALPHA_SCALING] = (stored - zero_point(alpha),
                                       *_f32_ratio(_scale(ifm), _scale(alpha), _scale(ofm)))
            op.attrs[PRELU_ALPHA] = (stored, alpha.quantization)
        op.type = new_type
        op.name = op.name.replace("Prelu", new_type)
        del op.inputs[1]
        return op

    @staticmethod
    def _prelu_as_maximum(op: WorkingOp, ifm: WorkingTensor, alpha: WorkingTensor, ofm: WorkingTensor
                          ) -> WorkingOp:
        """Every alpha below 1: max(IFM x alpha, IFM rescaled to the OFM's scale)."""
        tflite_op = op.tflite_op
        times_alpha = ofm.clone(op.name + "_alpha")
        _binary("Mul", op.name + "_mul_alpha", ifm, alpha, times_alpha, tflite_op)
        if scaling_equal(ifm, ofm):
            identity = ifm
        else:
            q = ifm.quantization
            one = const_tensor("one_const", [], ifm.dtype, [1],
                               Quantization(scale=(1.0,), zero_point=(0,), quantized_dimension=q.quantized_dimension,
                                            min=q.min, max=q.max))
            identity = ofm.clone(op.name + "_id")
            _binary("Mul", op.name + "_mul_identity", ifm, one, identity, tflite_op)
        maximum = _binary("Maximum", op.name + "_max", times_alpha, identity, ofm, tflite_op)
        if op in ifm.consumer_list:
            ifm.consumer_list.remove(op)
        return maximum

    @staticmethod
    def _prelu_as_sum(op: WorkingOp, ifm: WorkingTensor, alpha: WorkingTensor, ofm: WorkingTensor) -> WorkingOp:
        """The general case: min(IFM, 0) x alpha + relu(IFM), the sum taken without rescaling."""
        tflite_op = op.tflite_op
        zero = const_tensor("zero_const", [], ifm.dtype, [0], _unscaled(ifm.quantization))
        negative = ifm.clone(op.name + "_negative")
        _binary("Minimum", op.name + "_min", ifm, zero, negative, tflite_op)
        negative_alpha = ofm.clone(op.name + "_negative_alpha")
        _binary("Mul", op.name + "_mul_alpha", negative, alpha, negative_alpha, tflite_op)
        relu = WorkingOp("Relu", op.name + "_relu", tflite_op=tflite_op)
        relu.add_input(ifm)
        positive = ofm.clone(op.name + "_positive_scaled")
        relu.set_output(positive)
        relu.set_ifm_ofm_shapes()
        total = _binary("Add", op.name + "_add", negative_alpha, positive, ofm, tflite_op)
        total.explicit_scaling = _UNSCALED
        if op in ifm.consumer_list:
            ifm.consumer_list.remove(op)
        return total

    @staticmethod
    def leaky_relu_as_maximum(op: WorkingOp) -> WorkingOp:
        """A LEAKY_RELU made from a PRELU that no table can run (not 8-bit): max(IFM x alpha, IFM) for 0 < alpha < 1,
        else min(IFM, 0) x alpha + relu(IFM); alpha is applied by the multiplication's explicit scaling."""
        ifm, ofm = op.ifm, op.ofm
        if ifm is None or ofm is None:
            return op
        alpha = float(np.float32(op.attrs["alpha"]))
        tflite_op = op.tflite_op
        between = 0 < alpha < 1
        if between:
            scaled_input, new_type = ifm, "Maximum"
        else:
            zero = const_tensor("zero_const", [], ifm.dtype, [0], _unscaled(ifm.quantization))
            scaled_input = ifm.clone(op.name + "_negative")
            _binary("Minimum", op.name + "_min", ifm, zero, scaled_input, tflite_op)
            new_type = "Add"
            op.explicit_scaling = _UNSCALED
        stored, shift_multiplier = op.attrs[ALPHA_SCALING][0], op.attrs[ALPHA_SCALING][1:]
        q = ifm.quantization
        factor_quant = Quantization(scale=q.scale, zero_point=(0,), quantized_dimension=q.quantized_dimension,
                                    min=(0.0,), max=(alpha * (65535.0 if ifm.dtype == DataType.int16 else 255.0),))
        factor = const_tensor(op.name + "_alpha_scalar", [1], scaled_input.dtype, [stored], factor_quant)
        times_alpha = ofm.clone(op.name + "_alpha")
        multiply = _binary("Mul", op.name + "_mul_alpha", scaled_input, factor, times_alpha, tflite_op)
        multiplier, shift = shift_multiplier
        multiply.explicit_scaling = (False, (shift,), (multiplier,))
        if not between:
            relu = WorkingOp("Relu", op.name + "_relu", tflite_op=tflite_op)
            relu.add_input(ifm)
            identity = ofm.clone(op.name + "_positive_scaled")
            relu.set_output(identity)
            relu.set_ifm_ofm_shapes()
        elif scaling_equal(ifm, ofm):
            identity = ifm
        else:
            one_quant = Quantization(scale=(1.0,), zero_point=(0,), quantized_dimension=q.quantized_dimension,
                                     min=(0.0,), max=(65535.0 if ifm.dtype == DataType.int16 else 255.0,))
            one = const_tensor(op.name + "_id_scalar", [], ifm.dtype, [1], one_quant)
            identity = ofm.clone(op.name + "_id")
            _binary("Mul", op.name + "_mul_identity", ifm, one, identity, tflite_op)
        op.type = new_type
        op.name = op.name.replace("LeakyRelu", new_type)
        if op in ifm.consumer_list:
            ifm.consumer_list.remove(op)
        op.inputs = []
        op.add_input(times_alpha)
        op.add_input(identity)
        op.set_ifm_ofm_shapes()
        return op
