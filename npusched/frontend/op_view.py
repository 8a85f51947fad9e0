"""The view of one TFLite operator that Vela's placement rules read (operand roles as Vela sees them, options,
shapes), the operator sets and limits the rules share, and the ``Constraint`` type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from npusched.frontend.tflite_reader import TfliteOperator, TfliteSubgraph, TfliteTensor
from npusched.ir import DataType

# Operators npusched can lower to NPU passes.
NPU_OPERATORS = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "AVERAGE_POOL_2D", "MAX_POOL_2D", "ADD",
    "SUB", "MUL", "MAXIMUM", "MINIMUM", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC", "HARD_SWISH",
    "LEAKY_RELU", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION", "PAD", "QUANTIZE", "MEAN", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "SOFTMAX", "SPLIT", "SPLIT_V", "SLICE", "STRIDED_SLICE", "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "RSQRT", "SQUARED_DIFFERENCE", "TRANSPOSE", "BATCH_MATMUL", "GELU",
    # Lowered as Vela legacy's graph optimiser lowers them (docs/guide/operator_support.md).
    "ABS", "ARG_MAX", "EXP", "MIRROR_PAD", "PACK", "PRELU", "RELU_0_TO_1", "UNPACK",
})

# Operators Vela legacy leaves to the CPU that npusched runs on the NPU: its backend bridge teaches Vela legacy's
# graph optimiser the same passes (``npusched.vela.lessons``).
TAUGHT_OPERATORS = frozenset({"BATCH_MATMUL", "GELU"})
# TFLite builtins Vela 5.2.0 has an NPU implementation for (anything else is "CPU only" there), and the taught ones.
VELA_NPU_OPERATORS = NPU_OPERATORS | frozenset({
    "ABS", "ARG_MAX", "EXP", "MIRROR_PAD", "PACK", "PRELU", "RELU_0_TO_1", "SHAPE", "UNPACK",
})

_CONV_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV"})
_POOL_OPS = frozenset({"AVERAGE_POOL_2D", "MAX_POOL_2D"})
_ADD_MUL_SUB = frozenset({"ADD", "SUB", "MUL"})
_MIN_MAX = frozenset({"MAXIMUM", "MINIMUM"})
_RESHAPES = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})
_SUPPORTED_DTYPES = frozenset({DataType.uint8, DataType.int8, DataType.int16, DataType.int32})
_SIGNED = frozenset({DataType.int8, DataType.int16, DataType.int32, DataType.int64})
_INTEGER = _SIGNED | {DataType.uint8}
# Ops whose inputs may be rank-0 tensors.
_SCALAR_INPUT_OK = _ADD_MUL_SUB | _MIN_MAX | {"SPLIT", "SPLIT_V", "MEAN", "EXPAND_DIMS", "QUANTIZE", "ARG_MAX"}
# Ops allowed to have int32 IFM/IFM2/weights/OFM.
_INT32_OK = _ADD_MUL_SUB | {"ARG_MAX", "MIRROR_PAD", "SHAPE", "TRANSPOSE"}
# Ops allowed per-channel quantisation.
_PER_AXIS_OK = _CONV_OPS | {"FULLY_CONNECTED"}
# Ops whose IFM batch may exceed 1 (Vela reshapes or handles the batch itself).
_BATCH_ANY = frozenset({"FULLY_CONNECTED", "SOFTMAX", "RESHAPE", "SHAPE", "SQUEEZE", "SPLIT", "SPLIT_V",
                        "STRIDED_SLICE", "SLICE", "UNPACK"})
_FUSABLE_ACTIVATIONS = frozenset({"RELU", "RELU6", "RELU_N1_TO_1", "TANH"})

TENSOR_DIM_MAX = 65535
STRIDE_MAX = 3
DILATED_HEIGHT_MAX = 64
DILATED_AREA_MAX = 64 * 64
WEIGHT_SUM_MAX = 127 * 65536
SAME_POOL_KERNEL_MAX = 8
POOL_HEIGHT_MAX = 256
POOL_AREA_MAX = 256 * 256
MEAN_AXIS_MAX = 64 * 64
MEAN_PRODUCT_MAX = {DataType.int16: 2 ** 16, DataType.uint8: 2 ** 23}
MEAN_PRODUCT_MAX_DEFAULT = 2 ** 24
ARGMAX_DEPTH_MAX = 127
# Generic NPU rules an operator is exempt from (besides the batch rule, ``_BATCH_ANY``): an ARG_MAX may write int64.
DTYPE_RULE_EXEMPT = frozenset({"ARG_MAX"})


@dataclass(frozen=True)
class _Roles:
    """Positions of the operands Vela's generic rules look at (IFM, IFM2, weights, bias) in the input list."""

    ifms: tuple[int, ...] = (0,)
    weights: int | None = None
    bias: int | None = None


_CONV_ROLES = _Roles((0,), 1, 2)
_BINARY_ROLES = _Roles((0, 1))
_ROLES: dict[str, _Roles] = {
    "CONV_2D": _CONV_ROLES, "DEPTHWISE_CONV_2D": _CONV_ROLES, "FULLY_CONNECTED": _CONV_ROLES,
    "TRANSPOSE_CONV": _Roles((2,), 1, 3), "UNIDIRECTIONAL_SEQUENCE_LSTM": _Roles((0,), 1),
    "ADD": _BINARY_ROLES, "SUB": _BINARY_ROLES, "MUL": _BINARY_ROLES, "MAXIMUM": _BINARY_ROLES,
    "MINIMUM": _BINARY_ROLES, "TRANSPOSE": _BINARY_ROLES, "SQUARED_DIFFERENCE": _BINARY_ROLES,
    "BATCH_MATMUL": _BINARY_ROLES, "PRELU": _BINARY_ROLES, "MIRROR_PAD": _BINARY_ROLES,
    "CONCATENATION": _Roles((1, 2)), "SPLIT": _Roles((1,)),
}
_SINGLE_IFM_OPS = frozenset({
    "AVERAGE_POOL_2D", "MAX_POOL_2D", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "TANH", "LOGISTIC",
    "HARD_SWISH", "LEAKY_RELU", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "PAD", "QUANTIZE", "MEAN", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "SOFTMAX", "SPLIT_V", "SLICE", "STRIDED_SLICE", "RSQRT", "EXP", "ABS", "GELU",
    "ARG_MAX", "PACK", "UNPACK",
})
# Unknown operators have no IFM in Vela's eyes: only their OFM is seen by the generic rules.
_NO_ROLES = _Roles(())

# Builtin options each operator must carry (Vela refuses an operator whose options table is missing).
_OPTION_FIELDS = {
    "CONV_2D": ("padding", "stride_w", "stride_h", "dilation_w_factor", "dilation_h_factor"),
    "DEPTHWISE_CONV_2D": ("padding", "stride_w", "stride_h", "depth_multiplier"),
    "TRANSPOSE_CONV": ("padding", "stride_w", "stride_h"),
    "FULLY_CONNECTED": ("fused_activation_function", "keep_num_dims"),
    "AVERAGE_POOL_2D": ("padding", "stride_w", "stride_h", "filter_width", "filter_height"),
    "MAX_POOL_2D": ("padding", "stride_w", "stride_h", "filter_width", "filter_height"),
    "ADD": ("fused_activation_function",), "SUB": ("fused_activation_function",),
    "MUL": ("fused_activation_function",), "CONCATENATION": ("axis",), "SOFTMAX": ("beta",),
    "RESHAPE": ("new_shape",), "SQUEEZE": ("squeeze_dims",), "MEAN": ("keep_dims",), "LEAKY_RELU": ("alpha",),
    "RESIZE_BILINEAR": ("align_corners", "half_pixel_centers"),
    "RESIZE_NEAREST_NEIGHBOR": ("align_corners", "half_pixel_centers"),
    "SPLIT": ("num_splits",), "SPLIT_V": ("num_splits",),
    "STRIDED_SLICE": ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("fused_activation_function", "time_major"),
    "PACK": ("axis", "values_count"), "UNPACK": ("axis", "num"), "ARG_MAX": ("output_type",),
    "MIRROR_PAD": ("mode",),
}


@dataclass(frozen=True, eq=False)
class OpView:
    """An operator with its tensors resolved, seen the way Vela's rules see it."""

    op: TfliteOperator
    subgraph: TfliteSubgraph
    pool_stride_fixed: bool = False

    @property
    def opcode(self) -> str:
        return self.op.opcode

    @property
    def options(self) -> dict:
        return self.op.options

    @cached_property
    def name(self) -> str:
        return self.outputs[0].name if self.outputs and self.outputs[0] is not None else f"#{self.op.index}"

    @cached_property
    def inputs(self) -> tuple[TfliteTensor | None, ...]:
        return tuple(self.subgraph.tensor(i) for i in self.op.inputs)

    @cached_property
    def outputs(self) -> tuple[TfliteTensor | None, ...]:
        return tuple(self.subgraph.tensor(i) for i in self.op.outputs)

    @cached_property
    def roles(self) -> _Roles:
        if self.opcode in _ROLES:
            return _ROLES[self.opcode]
        return _Roles() if self.opcode in _SINGLE_IFM_OPS else _NO_ROLES

    def _input(self, position: int | None) -> TfliteTensor | None:
        return self.inputs[position] if position is not None and position < len(self.inputs) else None

    @property
    def ifm(self) -> TfliteTensor | None:
        return self._input(self.roles.ifms[0]) if self.roles.ifms else None

    @property
    def ifm2(self) -> TfliteTensor | None:
        return self._input(self.roles.ifms[1]) if len(self.roles.ifms) > 1 else None

    @property
    def weights(self) -> TfliteTensor | None:
        return self._input(self.roles.weights)

    @property
    def bias(self) -> TfliteTensor | None:
        return self._input(self.roles.bias)

    @property
    def ofm(self) -> TfliteTensor | None:
        return next(iter(self.outputs), None)

    def main_tensors(self) -> list[TfliteTensor]:
        """IFM, IFM2, weights and OFM that exist: the tensors the generic rules check."""
        return [t for t in (self.ifm, self.ifm2, self.weights, self.ofm) if t is not None]

    def main_or_input_tensors(self) -> list[TfliteTensor]:
        return self.main_tensors() or [t for t in self.inputs if t is not None]

    def all_tensors(self) -> list[TfliteTensor]:
        return [t for t in self.inputs + self.outputs if t is not None]

    @cached_property
    def weight_values(self) -> np.ndarray | None:
        """Constant weights in Vela's internal layout: HWIO for convolutions, IO for fully connected."""
        w = self.weights
        if w is None or w.data is None:
            return None
        if self.opcode in _CONV_OPS:
            return np.transpose(w.data, (1, 2, 3, 0)) if w.data.ndim == 4 else w.data
        if self.opcode == "FULLY_CONNECTED" and w.data.ndim == 2:
            return w.data.T
        return w.data

    @property
    def weight_shape(self) -> tuple[int, ...]:
        if self.weight_values is not None:
            return tuple(self.weight_values.shape)
        return tuple(self.weights.shape) if self.weights is not None else ()

    @property
    def bias_shape(self) -> tuple[int, ...]:
        """A constant bias next to constant weights is flattened to 1-D when Vela reads the model."""
        b, last = self.bias, self.inputs[-1] if self.inputs else None
        if b is not None and self.weight_values is not None and last is not None and last.data is not None:
            return (_elements(b.shape),)
        return tuple(b.shape) if b is not None else ()

    @property
    def stride(self) -> tuple[int, int]:
        """(width, height)."""
        if self.pool_stride_fixed:
            return 1, 1
        return int(self.options.get("stride_w", 1)), int(self.options.get("stride_h", 1))

    @property
    def dilation(self) -> tuple[int, int]:
        return int(self.options.get("dilation_w_factor", 1)), int(self.options.get("dilation_h_factor", 1))

    @property
    def padding(self) -> str | None:
        return "VALID" if self.pool_stride_fixed else self.options.get("padding")

    @property
    def kernel(self) -> tuple[int, int]:
        """(width, height): from the weights for convolutions, from the options otherwise."""
        if self.opcode in _CONV_OPS and self.weights is not None:
            shape = (1,) * (4 - len(self.weight_shape)) + self.weight_shape
            return shape[-3], shape[-4]
        return int(self.options.get("filter_width", 1)), int(self.options.get("filter_height", 1))

    def dilated_kernel(self) -> tuple[int, int]:
        (kw, kh), (dw, dh) = self.kernel, self.dilation
        return (kw - 1) * dw + 1, (kh - 1) * dh + 1

    @property
    def activation(self) -> str | None:
        faf = self.options.get("fused_activation_function")
        return None if faf in (None, "NONE") else str(faf)

    @property
    def depth_multiplier(self) -> int:
        """The option, or weights depth / IFM depth when the file leaves it 0 (as Vela derives it)."""
        dm = int(self.options.get("depth_multiplier", 1))
        if dm == 0 and self.ifm is not None and self.ifm.shape and len(self.weight_shape) == 4:
            dm = self.weight_shape[2] // self.ifm.shape[-1]
        return dm

    @property
    def _produced(self) -> frozenset[int]:
        return self.subgraph.produced  # computed once per subgraph, not once per operator

    def is_constant(self, t: TfliteTensor) -> bool:
        """Vela turns an unproduced tensor into a constant unless it is a variable, or a data-less graph input."""
        if t.index in self._produced:
            return False
        if t.index in self.subgraph.inputs:
            return t.data is not None
        return not t.is_variable


# ---------------------------------------------------------------------------------------------------------------
# Small helpers on tensors

def _has_quant(t: TfliteTensor) -> bool:
    """Vela drops quantisation that has neither a scale nor a zero point."""
    return bool(t.quantization.scale) or bool(t.quantization.zero_point)


def _is_quantized(t: TfliteTensor) -> bool:
    return t.dtype in _INTEGER and bool(t.quantization.scale) and bool(t.quantization.zero_point)


def _same_scaling(a: TfliteTensor, b: TfliteTensor) -> bool:
    return (_is_quantized(a) and _is_quantized(b) and a.quantization.scale == b.quantization.scale
            and a.quantization.zero_point == b.quantization.zero_point)


def _is_per_axis(t: TfliteTensor) -> bool:
    q = t.quantization
    return any(len(v) > 1 for v in (q.scale, q.zero_point, q.min, q.max))


def _elements(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _shape4(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (1,) * (4 - len(shape)) + tuple(shape)


def _axes(t: TfliteTensor) -> list[int]:
    values = np.asarray(t.data)
    return [int(values)] if len(t.shape) == 0 else [int(a) for a in values.reshape(-1)]


def _scalar_axis(t: TfliteTensor) -> int:
    values = np.asarray(t.data)
    return int(values) if values.ndim == 0 else int(values.reshape(-1)[0])


def _normalised_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _names(tensors: list[TfliteTensor]) -> str:
    return ", ".join(f"'{t.name}'" for t in tensors)


def _optimised_stride_w(ifm_width: int, stride_w: int) -> int:
    """Width stride a conv/avg-pool ends up with after Vela folds a large stride into an IFM reshape.

    A stride dividing the IFM width folds away entirely (stride 1); otherwise a stride that is a multiple of 2 or 3
    can keep 2 or 3 if the rest of it divides the width; otherwise the stride stays as it is.
    """
    if stride_w <= 1:
        return stride_w
    if ifm_width % stride_w == 0:
        return 1
    for hw_stride in (2, 3):
        if stride_w % hw_stride == 0 and ifm_width % (stride_w // hw_stride) == 0:
            return hw_stride
    return stride_w


Constraint = Callable[[OpView], str | None]
