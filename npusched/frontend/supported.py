"""Which TFLite operators the NPU runs and which stay on the CPU, following Vela 5.2.0's placement rules.

Vela decides placement in four stages, and the first failing rule wins:

1. semantic checks of the TFLite graph (an op that breaks TFLite's own rules is left to the CPU);
2. a first graph-optimisation pass: constant QUANTIZE ops fold into constants, convolutions with asymmetric int8
   weights go to the CPU, and pooling whose kernel, stride and IFM size are all equal gets stride 1 / VALID;
3. the NPU support checks: the operator must be in Vela's supported set, then generic rules (data types,
   dimensions, batch, fused activation) and per-operator rules (strides, kernel sizes, broadcasts, ...);
4. lowering steps that can still give up (SOFTMAX with an unsupported data-type pair).

On top of Vela's verdict npusched only lowers the operators in ``NPU_OPERATORS``; anything else goes to the CPU
even when Vela would run it on the NPU (the reason says so).

Operand roles follow Vela's internal view of each operator (``_ROLES``), including its quirks, because the
generic rules only look at the IFM, IFM2, weights and OFM: CONCATENATION's "IFM" is its second input, SPLIT's is
its second input, TRANSPOSE's permutation counts as an IFM2, and the weights of convolutions are seen in HWIO
order (fully connected: IO) when they are constant.

Known gap: the LSTM "5 intermediate tensors" rule is only checked when the reader exposes
``TfliteOperator.intermediates``; until then a well-formed LSTM is assumed.
"""

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
})

# TFLite builtins Vela 5.2.0 has an NPU implementation for (anything else is "CPU only" there).
VELA_NPU_OPERATORS = NPU_OPERATORS | frozenset({
    "ABS", "ARG_MAX", "EXP", "MIRROR_PAD", "PACK", "PRELU", "RELU_0_TO_1", "RSQRT", "SHAPE", "SQUARED_DIFFERENCE",
    "TRANSPOSE", "UNPACK",
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
    "MINIMUM": _BINARY_ROLES, "TRANSPOSE": _BINARY_ROLES,
    "CONCATENATION": _Roles((1, 2)), "SPLIT": _Roles((1,)),
}
_SINGLE_IFM_OPS = frozenset({
    "AVERAGE_POOL_2D", "MAX_POOL_2D", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "TANH", "LOGISTIC",
    "HARD_SWISH", "LEAKY_RELU", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "PAD", "QUANTIZE", "MEAN", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "SOFTMAX", "SPLIT_V", "SLICE", "STRIDED_SLICE",
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
        return self.outputs[0] if self.outputs else None

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


# ---------------------------------------------------------------------------------------------------------------
# Stage 1: semantic rules of the TFLite graph

def attributes_present(v: OpView) -> str | None:
    """The operator carries its builtin options"""
    fields = _OPTION_FIELDS.get(v.opcode, ())
    if v.opcode == "RESHAPE" and len(v.inputs) > 1:
        return None  # the shape may come from the second input instead
    missing = [f for f in fields if f not in v.options]
    return f"missing options: {', '.join(missing)}" if missing else None


def no_dynamic_tensors(v: OpView) -> str | None:
    """No input or output is a rank-0 tensor without data (a dynamic tensor)"""
    bad = [t for t in v.all_tensors() if len(t.shape) == 0 and t.data is None]
    return f"dynamic tensors {_names(bad)}" if bad else None


def output_not_scalar(v: OpView) -> str | None:
    """The output is not a scalar"""
    return f"output '{v.ofm.name}' is a scalar" if v.ofm is not None and len(v.ofm.shape) == 0 else None


def scalar_inputs_allowed(v: OpView) -> str | None:
    """Scalar inputs only for ADD, SUB, MUL, MAXIMUM, MINIMUM, SPLIT, SPLIT_V, MEAN, EXPAND_DIMS, QUANTIZE, ARG_MAX"""
    if v.opcode in _SCALAR_INPUT_OK:
        return None
    bad = [t for t in v.inputs if t is not None and len(t.shape) == 0]
    return f"scalar inputs {_names(bad)}" if bad else None


def rank_at_most_4(v: OpView) -> str | None:
    """Inputs and outputs have at most 4 dimensions"""
    bad = [t for t in v.all_tensors() if len(t.shape) > 4]
    return ", ".join(f"'{t.name}' has shape {list(t.shape)}" for t in bad) if bad else None


def quantization_present(v: OpView) -> str | None:
    """IFM, IFM2, weights and OFM are quantised"""
    bad = [t for t in v.main_tensors() if not _has_quant(t)]
    return f"no quantisation on {_names(bad)}" if bad else None


def quantization_scales_finite(v: OpView) -> str | None:
    """Quantisation scales of IFM, IFM2, weights and OFM are finite"""
    bad = [t for t in v.main_tensors() if np.isinf(np.asarray(t.quantization.scale, dtype=np.float32)).any()]
    return f"infinite scale on {_names(bad)}" if bad else None


def scale_ratio_representable(v: OpView) -> str | None:
    """The OFM scale is a normal float32 and IFM scale / OFM scale stays finite in float32"""
    if v.ofm is None or not _is_quantized(v.ofm):
        return None
    ofm_scale = np.asarray(v.ofm.quantization.scale, dtype=np.float32)
    smallest_normal = np.finfo(np.float32).tiny
    if (ofm_scale < smallest_normal).any():
        return f"OFM scale {ofm_scale.tolist()} is below the smallest normal float32"
    if v.ifm is not None and _is_quantized(v.ifm):
        ifm_scale = np.asarray(v.ifm.quantization.scale, dtype=np.float32)
        with np.errstate(over="ignore", divide="ignore"):
            if np.any(np.isinf(ifm_scale / ofm_scale)):
                return f"IFM scale {ifm_scale.tolist()} / OFM scale {ofm_scale.tolist()} overflows"
    return None


def constants_have_data(v: OpView) -> str | None:
    """Constant inputs (not produced, not graph inputs, not variables) have data"""
    bad = [t for t in v.inputs if t is not None and v.is_constant(t) and t.data is None]
    return f"constant without data {_names(bad)}" if bad else None


def conv_groups_divide_ifm_depth(v: OpView) -> str | None:
    """The IFM depth is a whole multiple of the kernel's input depth (grouped convolution)"""
    ifm_depth, kernel_depth = v.ifm.shape[-1], v.weight_shape[-2]
    return None if ifm_depth % kernel_depth == 0 else f"IFM depth {ifm_depth}, kernel depth {kernel_depth}"


def conv_groups_divide_filters(v: OpView) -> str | None:
    """The number of filters is a multiple of the number of convolution groups"""
    groups = v.ifm.shape[-1] // v.weight_shape[-2]
    filters = v.weight_shape[-1]
    return None if groups and filters % groups == 0 else f"{filters} filters, {groups} groups"


def in_out_types_match(v: OpView) -> str | None:
    """IFM and OFM have the same data type"""
    ifm, ofm = v.ifm.dtype, v.ofm.dtype
    return None if ifm == ofm else f"IFM {ifm.value}, OFM {ofm.value}"


def concat_axis_present(v: OpView) -> str | None:
    """CONCATENATION has an axis"""
    return None if v.options.get("axis") is not None else "no axis"


def concat_axis_in_range(v: OpView) -> str | None:
    """The concatenation axis lies within the OFM's rank"""
    rank = len(v.ofm.shape)
    axis = _normalised_axis(int(v.options["axis"]), rank)
    return None if 0 <= axis < rank else f"axis {axis} for a rank-{rank} OFM"


def concat_ranks_match(v: OpView) -> str | None:
    """Every input has the OFM's rank"""
    rank = len(v.ofm.shape)
    bad = [t for t in v.inputs if t is not None and len(t.shape) != rank]
    return ", ".join(f"'{t.name}' has rank {len(t.shape)} (OFM {rank})" for t in bad) if bad else None


def concat_other_dims_match(v: OpView) -> str | None:
    """Inputs match the OFM in every dimension except the concatenation axis"""
    shape = v.ofm.shape
    axis = _normalised_axis(int(v.options["axis"]), len(shape))
    bad = [t for t in v.inputs if t is not None
           and any(t.shape[d] != shape[d] for d in range(len(shape)) if d != axis)]
    return ", ".join(f"'{t.name}' {list(t.shape)} vs OFM {list(shape)}" for t in bad) if bad else None


def concat_axis_sum(v: OpView) -> str | None:
    """The inputs' sizes along the axis add up to the OFM's"""
    shape = v.ofm.shape
    axis = _normalised_axis(int(v.options["axis"]), len(shape))
    total = sum(t.shape[axis] for t in v.inputs if t is not None)
    return None if total == shape[axis] else f"inputs add up to {total} along axis {axis}, OFM has {shape[axis]}"


def one_input_shape_matches_ofm(v: OpView) -> str | None:
    """At least one input has the OFM's shape"""
    ifm2 = v.ifm2.shape if v.ifm2 is not None else None
    if v.ifm.shape == v.ofm.shape or ifm2 == v.ofm.shape:
        return None
    return f"IFM {list(v.ifm.shape)}, IFM2 {list(ifm2) if ifm2 is not None else None}, OFM {list(v.ofm.shape)}"


def input_types_match(v: OpView) -> str | None:
    """Both inputs have the same data type"""
    a, b = v.ifm.dtype, v.ifm2.dtype
    return None if a == b else f"IFM {a.value}, IFM2 {b.value}"


def signed_stays_signed(v: OpView) -> str | None:
    """A signed IFM gives a signed OFM"""
    if v.ifm.dtype in _SIGNED and v.ofm.dtype not in _SIGNED:
        return f"IFM {v.ifm.dtype.value}, OFM {v.ofm.dtype.value}"
    return None


def unsigned_output_type(v: OpView) -> str | None:
    """An unsigned IFM gives an OFM of the same type or int32"""
    if v.ifm.dtype == DataType.uint8 and v.ofm.dtype not in (DataType.uint8, DataType.int32):
        return f"IFM {v.ifm.dtype.value}, OFM {v.ofm.dtype.value}"
    return None


def reshape_keeps_quantization(v: OpView) -> str | None:
    """IFM and OFM share quantisation (a reshape only moves data)"""
    return None if _same_scaling(v.ifm, v.ofm) else "IFM and OFM quantisation differ"


def reshape_keeps_elements(v: OpView) -> str | None:
    """IFM and OFM hold the same number of elements"""
    a, b = _elements(v.ifm.shape), _elements(v.ofm.shape)
    return None if a == b else f"IFM {list(v.ifm.shape)} has {a} elements, OFM {list(v.ofm.shape)} has {b}"


def shapes_match(v: OpView) -> str | None:
    """IFM and OFM have the same shape"""
    return None if v.ifm.shape == v.ofm.shape else f"IFM {list(v.ifm.shape)}, OFM {list(v.ofm.shape)}"


def beta_non_negative(v: OpView) -> str | None:
    """SOFTMAX beta is not negative"""
    beta = v.options.get("beta", 1.0)
    return None if beta >= 0 else f"beta {beta}"


def split_axis_in_range(v: OpView) -> str | None:
    """The split axis lies within [-rank, rank) of the input"""
    rank = len(v.ifm.shape)
    axis = _normalised_axis(_scalar_axis(v.inputs[0]), rank)
    return None if 0 <= axis < rank else f"axis {axis} for a rank-{rank} input"


def split_evenly(v: OpView) -> str | None:
    """The split axis divides evenly into num_splits parts"""
    rank = len(v.ifm.shape)
    axis = _normalised_axis(_scalar_axis(v.inputs[0]), rank)
    parts = int(v.options.get("num_splits", 1))
    size = v.ifm.shape[axis]
    return None if parts and size % parts == 0 else f"size {size} along axis {axis} in {parts} parts"


def split_v_one_inferred(v: OpView) -> str | None:
    """SPLIT_V infers at most one size (-1)"""
    sizes = np.asarray(v.inputs[1].data)
    return None if np.count_nonzero(sizes == -1) <= 1 else f"sizes {sizes.tolist()}"


def four_inputs(v: OpView) -> str | None:
    """STRIDED_SLICE has exactly 4 inputs"""
    return None if len(v.inputs) == 4 else f"{len(v.inputs)} inputs"


def slice_params_constant(v: OpView) -> str | None:
    """Begin, end and strides are constant"""
    bad = [t for t in v.inputs[1:4] if t is None or t.data is None]
    return f"non-constant {_names([t for t in bad if t is not None]) or 'operands'}" if bad else None


def no_ellipsis(v: OpView) -> str | None:
    """ellipsis_mask is 0"""
    mask = int(v.options.get("ellipsis_mask", 0))
    return None if mask == 0 else f"ellipsis_mask {mask}"


def new_axis_or_shrink(v: OpView) -> str | None:
    """new_axis_mask and shrink_axis_mask are not both set"""
    new, shrink = int(v.options.get("new_axis_mask", 0)), int(v.options.get("shrink_axis_mask", 0))
    return None if new == 0 or shrink == 0 else f"new_axis_mask {new}, shrink_axis_mask {shrink}"


def _slice_bound(shape: tuple[int, ...], values: np.ndarray, mask: int, begin: bool) -> list[int]:
    out = [0] * len(shape) if begin else list(shape)
    for d in range(len(shape)):
        if not mask & (1 << d):
            out[d] = int(values[d]) + (shape[d] if values[d] < 0 else 0)
    return out


def slice_not_empty(v: OpView) -> str | None:
    """Every sliced (not shrunk) axis ends after it begins"""
    shape = v.ifm.shape
    begin = _slice_bound(shape, np.asarray(v.inputs[1].data).reshape(-1), int(v.options.get("begin_mask", 0)), True)
    end = _slice_bound(shape, np.asarray(v.inputs[2].data).reshape(-1), int(v.options.get("end_mask", 0)), False)
    shrink = int(v.options.get("shrink_axis_mask", 0))
    empty = [d for d in range(len(shape)) if not shrink & (1 << d) and end[d] <= begin[d]]
    return f"begin {begin}, end {end}" if empty else None


def fc_output_2d(v: OpView) -> str | None:
    """The IFM folds into a 2-D [batch, weights input depth] shape"""
    depth = v.weight_shape[-2]
    elements = _elements(v.ifm.shape)
    if depth and (elements // depth) * depth == elements and len(v.ifm.shape) != 1:
        return None
    return f"IFM {list(v.ifm.shape)} does not fold to rows of {depth}"


def keep_num_dims_rank(v: OpView) -> str | None:
    """With keep_num_dims, IFM and OFM have the same rank"""
    if v.options.get("keep_num_dims") and len(v.ifm.shape) != len(v.ofm.shape):
        return f"IFM {list(v.ifm.shape)}, OFM {list(v.ofm.shape)}"
    return None


def two_inputs(v: OpView) -> str | None:
    """PAD has exactly 2 inputs"""
    return None if len(v.inputs) == 2 else f"{len(v.inputs)} inputs"


def paddings_constant(v: OpView) -> str | None:
    """The paddings are constant"""
    return None if v.inputs[1] is not None and v.inputs[1].data is not None else "non-constant paddings"


def pad_output_shape(v: OpView) -> str | None:
    """The OFM shape is the IFM shape plus the paddings"""
    pads = np.asarray(v.inputs[1].data)
    if pads.ndim != 2 or pads.shape[0] != len(v.ifm.shape):
        return f"paddings of shape {list(pads.shape)} for a rank-{len(v.ifm.shape)} IFM"
    expected = np.asarray(v.ifm.shape) + pads[:, 0] + pads[:, 1]
    return None if np.array_equal(expected, v.ofm.shape) else f"OFM {list(v.ofm.shape)}, expected {expected.tolist()}"


def ifm_8bit(v: OpView) -> str | None:
    """The IFM is int8 or uint8"""
    return None if v.ifm.dtype in (DataType.int8, DataType.uint8) else f"IFM {v.ifm.dtype.value}"


def ifm_signed_8_or_16(v: OpView) -> str | None:
    """The IFM is int8 or int16"""
    return None if v.ifm.dtype in (DataType.int8, DataType.int16) else f"IFM {v.ifm.dtype.value}"


def mean_rank(v: OpView) -> str | None:
    """The MEAN input has 2 to 4 dimensions"""
    rank = len(v.inputs[0].shape)
    return None if 2 <= rank <= 4 else f"rank {rank}"


def mean_axes_reducible(v: OpView) -> str | None:
    """MEAN axes are in range and non-negative; batch is reduced only when 1, depth only when H, W or C is 1"""
    shape, axes = v.inputs[0].shape, _axes(v.inputs[1])
    rank = len(shape)
    for ax in axes:
        if ax < 0 or ax >= rank:
            return f"axis {ax} out of range for shape {list(shape)}"
        if rank == 4 and ax == 0 and shape[0] != 1:
            return f"reduces batch {shape[0]}"
        if (rank == 3 and ax == 2 and 1 not in shape) or (rank == 4 and ax == 3 and 1 not in shape[1:]):
            return f"reduces depth of {list(shape)} where no other dimension is 1"
    return None


def lstm_rank_3(v: OpView) -> str | None:
    """LSTM IFM and OFM are 3-D"""
    ok = len(v.ifm.shape) == len(v.ofm.shape) == 3
    return None if ok else f"IFM {list(v.ifm.shape)}, OFM {list(v.ofm.shape)}"


def lstm_24_inputs(v: OpView) -> str | None:
    """The LSTM has 24 inputs"""
    return None if len(v.inputs) == 24 else f"{len(v.inputs)} inputs"


def lstm_5_intermediates(v: OpView) -> str | None:
    """The LSTM has 5 intermediate tensors"""
    intermediates = getattr(v.op, "intermediates", None)
    if intermediates is None:
        return None  # TODO: the reader does not expose intermediates yet; assume a well-formed LSTM
    n = len([i for i in intermediates if i >= 0])
    return None if n == 5 else f"{n} intermediates"


def lstm_state_variable(v: OpView) -> str | None:
    """The LSTM state inputs (18, 19) are variable tensors"""
    bad = [t for t in v.inputs[18:20] if t is None or not t.is_variable]
    return f"non-variable state {_names([t for t in bad if t is not None]) or 'missing'}" if bad else None


def permutation_size(v: OpView) -> str | None:
    """The permutation is a 1-D tensor with one entry per IFM dimension"""
    rank, perm = len(v.inputs[0].shape), v.inputs[1]
    return None if len(perm.shape) == 1 and perm.shape[0] == rank else f"rank {rank}, permutation {list(perm.shape)}"


def permutation_values(v: OpView) -> str | None:
    """The permutation is constant with values in [0, rank)"""
    rank, perm = len(v.inputs[0].shape), v.inputs[1]
    if perm.data is not None and all(0 <= int(p) < rank for p in np.asarray(perm.data).reshape(-1)):
        return None
    return f"rank {rank}, permutation {None if perm.data is None else np.asarray(perm.data).tolist()}"


_SEMANTIC_GENERIC: tuple[Constraint, ...] = (
    attributes_present, no_dynamic_tensors, output_not_scalar, scalar_inputs_allowed, rank_at_most_4,
    quantization_present, quantization_scales_finite, scale_ratio_representable, constants_have_data,
)
_SEMANTIC_EXEMPT: dict[str, tuple[Constraint, ...]] = {
    "QUANTIZE": (no_dynamic_tensors, output_not_scalar),
    "TRANSPOSE": (quantization_present,), "ARG_MAX": (quantization_present,), "SHAPE": (quantization_present,),
    "MIRROR_PAD": (quantization_present,),
}
_RESHAPE_SEMANTIC = (reshape_keeps_quantization, reshape_keeps_elements)
_CONCAT_SEMANTIC = (concat_axis_present, concat_axis_in_range, concat_ranks_match, concat_other_dims_match,
                    concat_axis_sum)
_ADD_MUL_SUB_SEMANTIC = (one_input_shape_matches_ofm, input_types_match, signed_stays_signed, unsigned_output_type)
_SEMANTIC_SPECIFIC: dict[str, tuple[Constraint, ...]] = {
    "CONV_2D": (conv_groups_divide_ifm_depth, conv_groups_divide_filters),
    "AVERAGE_POOL_2D": (in_out_types_match,), "MAX_POOL_2D": (in_out_types_match,),
    "CONCATENATION": _CONCAT_SEMANTIC,
    "ADD": _ADD_MUL_SUB_SEMANTIC, "SUB": _ADD_MUL_SUB_SEMANTIC, "MUL": _ADD_MUL_SUB_SEMANTIC,
    "MAXIMUM": (one_input_shape_matches_ofm, in_out_types_match),
    "MINIMUM": (one_input_shape_matches_ofm, in_out_types_match),
    "LEAKY_RELU": (one_input_shape_matches_ofm, in_out_types_match),
    "RESHAPE": _RESHAPE_SEMANTIC, "SQUEEZE": _RESHAPE_SEMANTIC, "EXPAND_DIMS": _RESHAPE_SEMANTIC,
    "SOFTMAX": (shapes_match, in_out_types_match, beta_non_negative),
    "SPLIT": (split_axis_in_range, split_evenly),
    "SPLIT_V": (split_v_one_inferred,),
    "STRIDED_SLICE": (four_inputs, slice_params_constant, no_ellipsis, new_axis_or_shrink, slice_not_empty),
    "FULLY_CONNECTED": (fc_output_2d, keep_num_dims_rank),
    "PAD": (two_inputs, paddings_constant, pad_output_shape),
    "HARD_SWISH": (ifm_8bit, in_out_types_match),
    "MEAN": (mean_rank, mean_axes_reducible),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (ifm_signed_8_or_16, in_out_types_match, lstm_rank_3, lstm_24_inputs,
                                     lstm_5_intermediates, lstm_state_variable),
    "TRANSPOSE": (permutation_size, permutation_values),
}


# ---------------------------------------------------------------------------------------------------------------
# Stage 2: the first graph-optimisation pass

def symmetric_weights(v: OpView) -> str | None:
    """Convolutions with an int8/int16 IFM have zero weight zero points (unless --force-symmetric-int-weights)"""
    if v.opcode not in _CONV_OPS or v.ifm is None or v.weights is None:
        return None
    if v.ifm.dtype not in (DataType.int8, DataType.int16):
        return None
    zero_points = v.weights.quantization.zero_point
    if zero_points and all(z == 0 for z in zero_points):
        return None
    return f"weight zero points {list(zero_points)[:4]}{'...' if len(zero_points) > 4 else ''}"


def folds_to_constant(op: TfliteOperator, subgraph: TfliteSubgraph) -> bool:
    """A QUANTIZE of a constant (int8->int8, int16->int16 or float->int) is evaluated at compile time by Vela."""
    if op.opcode != "QUANTIZE" or not op.inputs or not op.outputs:
        return False
    v = OpView(op, subgraph)
    ifm, ofm = v.inputs[0], v.ofm
    if ifm is None or ofm is None or ifm.data is None or not v.is_constant(ifm):
        return False
    same_int = ifm.dtype == ofm.dtype and ifm.dtype in (DataType.int8, DataType.int16)
    return same_int or ifm.dtype == DataType.float32


def _pool_stride_folds(v: OpView) -> bool:
    """Pooling whose kernel equals both its stride and the IFM's H and W runs as stride 1, VALID padding."""
    if v.opcode not in _POOL_OPS or v.ifm is None or len(v.ifm.shape) < 3:
        return False
    (kw, kh), (sw, sh) = v.kernel, v.stride
    return kw == sw == v.ifm.shape[2] and kh == sh == v.ifm.shape[1]


# ---------------------------------------------------------------------------------------------------------------
# Stage 3: NPU support rules

def supported_dtypes(v: OpView) -> str | None:
    """IFM, IFM2, weights and OFM are uint8, int8, int16 or int32"""
    bad = [t for t in v.main_or_input_tensors() if t.dtype not in _SUPPORTED_DTYPES]
    return ", ".join(f"'{t.name}' is {t.dtype.value}" for t in bad) if bad else None


def int32_only_where_allowed(v: OpView) -> str | None:
    """int32 IFM/IFM2/weights/OFM only for ADD, SUB, MUL, ARG_MAX, MIRROR_PAD, SHAPE, TRANSPOSE"""
    if v.opcode in _INT32_OK:
        return None
    bad = [t for t in v.main_or_input_tensors() if t.dtype == DataType.int32]
    return f"int32 tensors {_names(bad)}" if bad else None


def dims_in_range(v: OpView) -> str | None:
    """Every dimension of IFM, IFM2, weights and OFM is in [1, 65535]"""
    bad = [t for t in v.main_or_input_tensors() if not all(1 <= d <= TENSOR_DIM_MAX for d in t.shape)]
    return ", ".join(f"'{t.name}' has shape {list(t.shape)}" for t in bad) if bad else None


def per_axis_only_for_conv_fc(v: OpView) -> str | None:
    """Per-channel quantisation only on convolutions and fully connected"""
    if v.opcode in _PER_AXIS_OK:
        return None
    bad = [t for t in v.main_tensors() if _is_per_axis(t)]
    return f"per-channel quantisation on {_names(bad)}" if bad else None


def batch_is_1(v: OpView) -> str | None:
    """The IFM (and IFM2) batch is 1"""
    bad = [t for t in (v.ifm, v.ifm2) if t is not None and _shape4(t.shape)[0] != 1]
    return ", ".join(f"'{t.name}' has batch {_shape4(t.shape)[0]}" for t in bad) if bad else None


def fused_activation_supported(v: OpView) -> str | None:
    """A fused activation is RELU, RELU6, RELU_N1_TO_1 or TANH"""
    act = v.activation
    return None if act is None or act in _FUSABLE_ACTIVATIONS else f"fused {act}"


def fused_activation_output_type(v: OpView) -> str | None:
    """With a fused activation the OFM is uint8, int8 or int16"""
    if v.activation is None or v.ofm.dtype in (DataType.uint8, DataType.int8, DataType.int16):
        return None
    return f"fused {v.activation} with a {v.ofm.dtype.value} OFM"


def stride_folds_to_hw(v: OpView) -> str | None:
    """Stride H is 1-3 (unless OFM H is 1); stride W is >= 1 and reduces to 1-3 by folding it into the IFM width"""
    sw, sh = v.stride
    ifm_w, ofm_h, ofm_w = v.ifm.shape[2], v.ofm.shape[1], v.ofm.shape[2]
    h_ok = ofm_h == 1 or 1 <= sh <= STRIDE_MAX
    w_ok = ofm_w == 1 or (sw >= 1 and _optimised_stride_w(ifm_w, sw) <= STRIDE_MAX)
    return None if h_ok and w_ok else f"stride {sw}x{sh} (WxH), IFM {list(v.ifm.shape)}, OFM {list(v.ofm.shape)}"


def stride_in_range(v: OpView) -> str | None:
    """Stride W and H are both 1-3"""
    sw, sh = v.stride
    return None if 1 <= sw <= STRIDE_MAX and 1 <= sh <= STRIDE_MAX else f"stride {sw}x{sh} (WxH)"


def large_pool_stride_valid(v: OpView) -> str | None:
    """Average pooling with a stride W above 3 (folded into the IFM width) uses VALID padding"""
    detail = stride_folds_to_hw(v)
    if detail is not None:
        return detail
    sw, _ = v.stride
    return None if v.padding in (None, "VALID") or sw <= STRIDE_MAX else f"stride W {sw} with {v.padding} padding"


def dilated_height_in_range(v: OpView) -> str | None:
    """The dilated kernel height is 1-64"""
    _, h = v.dilated_kernel()
    return None if 1 <= h <= DILATED_HEIGHT_MAX else f"dilated kernel height {h}"


def dilated_area_in_range(v: OpView) -> str | None:
    """The dilated kernel area (W x H) is at most 4096"""
    w, h = v.dilated_kernel()
    return None if 1 <= w * h <= DILATED_AREA_MAX else f"dilated kernel {w}x{h}"


def weights_8bit(v: OpView) -> str | None:
    """Weights are 8-bit"""
    return None if v.weights.dtype in (DataType.int8, DataType.uint8) else f"weights are {v.weights.dtype.value}"


def weights_constant(v: OpView) -> str | None:
    """Weights are constant"""
    return None if v.weights.data is not None else f"weights '{v.weights.name}' are not constant"


def weight_sum_in_range(v: OpView) -> str | None:
    """Per output channel, the sum of |weight - zero point| is at most 127 * 65536"""
    zp = v.weights.quantization.zero_point
    # Per-channel zero points broadcast against the last axis, as in Vela (for depthwise weights, HWC1, that pairs
    # every zero point with every channel); identical zero points give the same sums as a scalar.
    offset = np.asarray(zp, dtype=np.int64) if len(set(zp)) > 1 else (zp[0] if zp else 0)
    values = np.asarray(v.weight_values, dtype=np.int64) - offset
    worst = int(np.amax(np.sum(np.absolute(values), axis=(0, 1, 2))))
    return None if worst <= WEIGHT_SUM_MAX else f"weight sum {worst}"


def bias_1d(v: OpView) -> str | None:
    """A bias is 1-D"""
    return None if v.bias is None or len(v.bias_shape) == 1 else f"bias shape {list(v.bias_shape)}"


def bias_type(v: OpView) -> str | None:
    """A bias is int32 or int64"""
    b = v.bias
    return None if b is None or b.dtype in (DataType.int32, DataType.int64) else f"bias is {b.dtype.value}"


def bias_fits_40_bits(v: OpView) -> str | None:
    """An int64 bias fits in 40 bits (a negative value needs one more)"""
    b = v.bias
    if b is None or b.dtype != DataType.int64 or b.data is None:
        return None
    widest = max((abs(int(x)).bit_length() + (1 if x < 0 else 0) for x in np.asarray(b.data).reshape(-1)), default=0)
    return None if widest <= 40 else f"bias needs {widest} bits"


def depthwise_stride_in_range(v: OpView) -> str | None:
    """Depthwise stride W and H are both 1-3"""
    return stride_in_range(v)


def depth_multiplier_shape(v: OpView) -> str | None:
    """With a depth multiplier above 1 the IFM has 1 channel and the OFM has depth-multiplier channels"""
    dm = v.depth_multiplier
    if dm <= 1:
        return None
    ifm_c, ofm_c = v.ifm.shape[3], v.ofm.shape[3]
    return None if ifm_c == 1 and ofm_c == dm else f"IFM depth {ifm_c}, OFM depth {ofm_c}, multiplier {dm}"


def tconv_stride(v: OpView) -> str | None:
    """TRANSPOSE_CONV stride is 1x1 or 2x2, or 2x1 (WxH) with IFM height and kernel height 1"""
    (sw, sh), (_, kh), ifm_h = v.stride, v.kernel, v.ifm.shape[1]
    if (sw, sh) in ((1, 1), (2, 2)) or ((sw, sh) == (2, 1) and ifm_h == 1 and kh == 1):
        return None
    return f"stride {sw}x{sh} (WxH), IFM height {ifm_h}, kernel height {kh}"


def tconv_same_shape(v: OpView) -> str | None:
    """SAME TRANSPOSE_CONV: OFM H, W are IFM H, W times the stride"""
    if v.padding != "SAME":
        return None
    sw, sh = v.stride
    ifm, ofm = v.ifm.shape, v.ofm.shape
    return None if ofm[1] == ifm[1] * sh and ofm[2] == ifm[2] * sw else f"IFM {list(ifm)}, OFM {list(ofm)}"


def tconv_valid_shape(v: OpView) -> str | None:
    """VALID TRANSPOSE_CONV: OFM H, W are IFM H, W times the stride plus max(kernel - stride, 0)"""
    if v.padding != "VALID":
        return None
    (sw, sh), (kw, kh) = v.stride, v.kernel
    ifm, ofm = v.ifm.shape, v.ofm.shape
    ok = ofm[1] == ifm[1] * sh + max(kh - sh, 0) and ofm[2] == ifm[2] * sw + max(kw - sw, 0)
    return None if ok else f"IFM {list(ifm)}, OFM {list(ofm)}, kernel {kw}x{kh}, stride {sw}x{sh}"


def same_pool_kernel_in_range(v: OpView) -> str | None:
    """SAME average pooling: kernel H is 1-8 and kernel W is 1-8 or equal to stride W"""
    if v.padding != "SAME":
        return None
    (kw, kh), (sw, _) = v.kernel, v.stride
    ok = (1 <= kw <= SAME_POOL_KERNEL_MAX or sw == kw) and 1 <= kh <= SAME_POOL_KERNEL_MAX
    return None if ok else f"kernel {kw}x{kh}"


def pool_height_in_range(v: OpView) -> str | None:
    """Kernel height is 1-256"""
    _, kh = v.kernel
    return None if 1 <= kh <= POOL_HEIGHT_MAX else f"kernel height {kh}"


def pool_area_in_range(v: OpView) -> str | None:
    """Kernel area (W x H) is at most 65536"""
    kw, kh = v.kernel
    return None if 1 <= kw * kh <= POOL_AREA_MAX else f"kernel {kw}x{kh}"


def valid_pool_height_in_range(v: OpView) -> str | None:
    """VALID average pooling: kernel height is 1-256"""
    return pool_height_in_range(v) if v.padding == "VALID" else None


def valid_pool_area_in_range(v: OpView) -> str | None:
    """VALID average pooling: kernel area (W x H) is at most 65536"""
    return pool_area_in_range(v) if v.padding == "VALID" else None


def _upscale(ofm: int, ifm: int, align_corners: bool) -> float:
    if align_corners:
        return (ofm - 1) / (ifm - 1) if ifm != 1 else 1.0
    return ofm / ifm


def resize_ratio(v: OpView) -> str | None:
    """Resize from 1x1, to the same shape, or by an equal 1/2/4/8x factor in H and W (1x allowed in a size-1 axis)"""
    ifm, ofm = v.ifm.shape, v.ofm.shape
    detail = f"IFM {list(ifm)}, OFM {list(ofm)}"
    if len(ifm) != 4:
        return detail
    if (ifm[1] == 1 and ifm[2] == 1) or ifm == ofm:
        return None
    align = bool(v.options.get("align_corners", False))
    fh, fw = _upscale(ofm[1], ifm[1], align), _upscale(ofm[2], ifm[2], align)
    factors = (1.0, 2.0, 4.0, 8.0)
    if fh not in factors or fw not in factors:
        return detail
    if ofm[1] != 1 and ofm[2] != 1:
        return None if fh == fw else detail
    return None if fh == ifm[1] == 1 or fw == ifm[2] == 1 else detail


def resize_size_matches(v: OpView) -> str | None:
    """The constant size input holds the OFM's H and W"""
    size = v.inputs[1] if len(v.inputs) > 1 else None
    if size is None or size.data is None:
        return "no constant size input"
    values = np.asarray(size.data).reshape(-1)
    if len(values) != 2:
        return f"size has {len(values)} values"
    h, w = int(values[0]), int(values[1])
    return None if (h, w) == tuple(v.ofm.shape[1:3]) else f"size {h}x{w}, OFM {list(v.ofm.shape)}"


def resize_corner_modes(v: OpView) -> str | None:
    """align_corners and half_pixel_centers are not both set"""
    both = v.options.get("align_corners", False) and v.options.get("half_pixel_centers", False)
    return "both align_corners and half_pixel_centers" if both else None


def bilinear_half_pixel_2x(v: OpView) -> str | None:
    """Bilinear resize with half_pixel_centers scales exactly 2x (or from 1x1)"""
    if not v.options.get("half_pixel_centers", False):
        return None
    ifm, ofm = v.ifm.shape, v.ofm.shape
    if len(ifm) < 3:
        return f"IFM {list(ifm)}"
    (ih, iw), (oh, ow) = ifm[-3:-1], ofm[-3:-1]
    if (ih == 1 and iw == 1) or (oh / ih == 2 and ow / iw == 2):
        return None
    return f"IFM {list(ifm)}, OFM {list(ofm)}"


def same_quantization_as_ofm(v: OpView) -> str | None:
    """Both inputs share the OFM's quantisation"""
    bad = [t for t in (v.ifm, v.ifm2) if t is not None and not _same_scaling(v.ofm, t)]
    return f"quantisation of {_names(bad)} differs from the OFM" if bad else None


def broadcast_compatible(v: OpView) -> str | None:
    """Broadcasting only stretches size-1 dimensions, and the OFM takes the larger size"""
    if v.ifm2 is None:
        return None
    a, b, o = v.ifm.shape, v.ifm2.shape, v.ofm.shape
    n = min(len(a), len(b))
    # Trailing dimensions are aligned; zip stops at the shortest, as numpy-style broadcasting checks do.
    for i, i2, out in zip(a[len(a) - n:], b[len(b) - n:], o[len(o) - n:] if n else (), strict=False):
        if not (i == i2 or i == 1 or i2 == 1) or out != max(i, i2):
            return f"IFM {list(a)}, IFM2 {list(b)}, OFM {list(o)}"
    return None


def slice_strides_unit_batch_depth(v: OpView) -> str | None:
    """STRIDED_SLICE strides are 1 in batch and depth"""
    strides = np.asarray(v.inputs[3].data).reshape(-1)
    batch = strides[0] if len(strides) > 3 else 1
    return None if batch == strides[-1] == 1 else f"strides {strides.tolist()}"


def slice_offset_off(v: OpView) -> str | None:
    """STRIDED_SLICE offset is false"""
    return None if v.options.get("offset", False) is False else "offset is set"


def paddings_rank(v: OpView) -> str | None:
    """The paddings have shape [3, 2] or [4, 2]"""
    shape = tuple(v.inputs[1].shape)
    return None if shape in ((3, 2), (4, 2)) else f"paddings shape {list(shape)}"


def paddings_type(v: OpView) -> str | None:
    """The paddings are int32 or int64"""
    t = v.inputs[1]
    return None if t.dtype in (DataType.int32, DataType.int64) else f"paddings are {t.dtype.value}"


def no_batch_padding(v: OpView) -> str | None:
    """PAD pads only height, width and depth"""
    pads = np.asarray(v.inputs[1].data)
    return None if len(pads) <= 3 or int(np.sum(pads[0, :])) == 0 else f"batch padding {pads[0, :].tolist()}"


def mean_reduced_product(v: OpView) -> str | None:
    """The product of MEAN's reduced axes is at most 2^24 (int8), 2^23 (uint8) or 2^16 (int16)"""
    shape = v.inputs[0].shape
    product = _elements(tuple(shape[ax] for ax in _axes(v.inputs[1])))
    limit = MEAN_PRODUCT_MAX.get(v.ifm.dtype, MEAN_PRODUCT_MAX_DEFAULT)
    return None if product <= limit else f"{v.ifm.dtype.value} reduction over {product} elements"


def mean_width_limit(v: OpView) -> str | None:
    """The MEAN input width is at most 4096"""
    shape = v.inputs[0].shape
    width = shape[1] if len(shape) < 4 else shape[2]
    return None if width <= MEAN_AXIS_MAX else f"width {width}"


def mean_depth_limit(v: OpView) -> str | None:
    """A MEAN over the depth axis has depth at most 4096"""
    shape = v.inputs[0].shape
    reduces_depth = len(shape) - 1 in _axes(v.inputs[1])
    return None if not reduces_depth or shape[-1] <= MEAN_AXIS_MAX else f"depth {shape[-1]}"


def reshape_shape_constant(v: OpView) -> str | None:
    """A RESHAPE shape input is constant"""
    shape = v.inputs[1] if len(v.inputs) > 1 else None
    return None if shape is None or v.is_constant(shape) else f"shape input '{shape.name}' is not constant"


def lstm_not_cifg(v: OpView) -> str | None:
    """The LSTM does not couple input and forget gates (CIFG)"""
    ins = v.inputs
    cifg = all(t is not None for t in ins[2:5] + ins[6:9]) and ins[1] is None and ins[5] is None
    return "uses CIFG" if cifg else None


def lstm_no_peephole(v: OpView) -> str | None:
    """The LSTM has no peephole weights"""
    return None if all(t is None for t in v.inputs[9:12]) else "uses peephole"


def lstm_no_projection(v: OpView) -> str | None:
    """The LSTM has no projection"""
    return None if all(t is None for t in v.inputs[16:18]) else "uses projection"


def lstm_no_layer_norm(v: OpView) -> str | None:
    """The LSTM has no layer normalisation"""
    return None if all(t is None for t in v.inputs[20:24]) else "uses layer normalisation"


def lstm_all_weights(v: OpView) -> str | None:
    """The LSTM has every input and recurrent weight"""
    return None if all(t is not None for t in v.inputs[1:9]) else "missing weights"


def lstm_recurrent_2d(v: OpView) -> str | None:
    """The LSTM recurrent weights are 2-D"""
    return None if all(t is not None and len(t.shape) == 2 for t in v.inputs[5:9]) else "recurrent weights not 2-D"


def slice_inputs_constant(v: OpView) -> str | None:
    """SLICE begin and size are constant"""
    _, begin, size = v.inputs
    bad = [t for t in (begin, size) if t is None or t.data is None]
    return "non-constant begin or size" if bad else None


def transpose_permutation_supported(v: OpView) -> str | None:
    """TRANSPOSE swaps H and W (or W and C with a unit dimension), or is 2-D"""
    shape = v.inputs[0].shape
    perm_t = v.inputs[1]
    perm = [int(p) for p in np.asarray(perm_t.data).reshape(-1)] if perm_t.data is not None else []
    rank3, rank4 = tuple(perm_t.shape) == (3,), tuple(perm_t.shape) == (4,)
    ok = (len(shape) == 2
          or (rank3 and perm[0] == 1 and perm[1] == 0)
          or (rank3 and shape[0] == 1 and perm[1] == 2 and perm[2] == 1)
          or (rank3 and shape[1] == 1 and perm[0] == 2 and perm[2] == 0)
          or (rank4 and perm[0] == 0 and perm[1] == 2 and perm[2] == 1)
          or (rank4 and shape[1] == 1 and perm[0] == 0 and perm[2] == 3 and perm[3] == 2)
          or (rank4 and shape[2] == 1 and perm[0] == 0 and perm[1] == 3 and perm[3] == 1))
    return None if ok else f"IFM {list(shape)}, permutation {perm}"


def softmax_area(v: OpView) -> str | None:
    """SOFTMAX IFM width x height is at most 65535"""
    _, h, w, _ = _shape4(v.inputs[0].shape)
    return None if h * w <= TENSOR_DIM_MAX else f"IFM {list(v.inputs[0].shape)}"


_SUPPORT_GENERIC: tuple[Constraint, ...] = (
    supported_dtypes, int32_only_where_allowed, dims_in_range, per_axis_only_for_conv_fc, batch_is_1,
    fused_activation_supported, fused_activation_output_type,
)
_CONV_SUPPORT = (dilated_height_in_range, dilated_area_in_range, weights_8bit, weights_constant, weight_sum_in_range,
                 bias_1d, bias_type, bias_fits_40_bits)
_FC_SUPPORT = (weights_8bit, weights_constant, bias_1d, bias_type, bias_fits_40_bits)
_RESIZE_SUPPORT = (resize_ratio, resize_size_matches, resize_corner_modes)
_MEAN_SUPPORT = (mean_reduced_product, mean_width_limit, mean_depth_limit)
_LSTM_SUPPORT = (lstm_not_cifg, lstm_no_peephole, lstm_no_projection, lstm_no_layer_norm, lstm_all_weights,
                 lstm_recurrent_2d)
_SUPPORT_SPECIFIC: dict[str, tuple[Constraint, ...]] = {
    "CONV_2D": (stride_folds_to_hw, *_CONV_SUPPORT),
    "DEPTHWISE_CONV_2D": (*_CONV_SUPPORT, depthwise_stride_in_range, depth_multiplier_shape),
    "TRANSPOSE_CONV": (*_CONV_SUPPORT, tconv_stride, tconv_same_shape, tconv_valid_shape),
    "FULLY_CONNECTED": _FC_SUPPORT,
    "MAX_POOL_2D": (stride_in_range, pool_height_in_range, pool_area_in_range),
    "AVERAGE_POOL_2D": (stride_folds_to_hw, large_pool_stride_valid, same_pool_kernel_in_range,
                        valid_pool_height_in_range, valid_pool_area_in_range),
    "RESIZE_NEAREST_NEIGHBOR": _RESIZE_SUPPORT,
    "RESIZE_BILINEAR": (*_RESIZE_SUPPORT, bilinear_half_pixel_2x),
    "MAXIMUM": (same_quantization_as_ofm, broadcast_compatible),
    "MINIMUM": (same_quantization_as_ofm, broadcast_compatible),
    "ADD": (broadcast_compatible,), "SUB": (broadcast_compatible,), "MUL": (broadcast_compatible,),
    "STRIDED_SLICE": (slice_strides_unit_batch_depth, slice_offset_off),
    "PAD": (paddings_rank, paddings_type, no_batch_padding),
    "MEAN": _MEAN_SUPPORT,
    "RESHAPE": (reshape_shape_constant,),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _LSTM_SUPPORT,
    "SLICE": (slice_inputs_constant,),
    "TRANSPOSE": (transpose_permutation_supported,),
    "SOFTMAX": (softmax_area,),
}


# ---------------------------------------------------------------------------------------------------------------
# Stage 4: lowering steps that can still hand an operator back to the CPU

def softmax_type_pair(v: OpView) -> str | None:
    """SOFTMAX maps 8-bit to the same 8-bit type, or int16 to int16"""
    ifm, ofm = v.ifm.dtype, v.ofm.dtype
    ok = (ifm in (DataType.uint8, DataType.int8) and ofm == ifm) or ifm == ofm == DataType.int16
    return None if ok else f"IFM {ifm.value}, OFM {ofm.value}"


_LOWERING_SPECIFIC: dict[str, tuple[Constraint, ...]] = {"SOFTMAX": (softmax_type_pair,)}


# ---------------------------------------------------------------------------------------------------------------

def _rule(constraint: Constraint) -> str:
    return (constraint.__doc__ or constraint.__name__).strip().splitlines()[0]


def _first_failure(v: OpView, constraints: tuple[Constraint, ...]) -> str | None:
    for constraint in constraints:
        detail = constraint(v)
        if detail is not None:
            return f"{_rule(constraint)} ({detail})" if detail else _rule(constraint)
    return None


def _semantic_failure(v: OpView) -> str | None:
    exempt = _SEMANTIC_EXEMPT.get(v.opcode, ())
    semantic = tuple(c for c in _SEMANTIC_GENERIC if c not in exempt) + _SEMANTIC_SPECIFIC.get(v.opcode, ())
    return _first_failure(v, semantic)


def _vela_verdict(v: OpView) -> str | None:
    """Why Vela 5.2.0 would place the operator on the CPU, or None if Vela runs it on the NPU."""
    failure = _semantic_failure(v)
    if failure is not None:
        return f"fails the TFLite semantic rule: {failure}"
    failure = _first_failure(v, (symmetric_weights,))
    if failure is not None:
        return failure
    if v.opcode not in VELA_NPU_OPERATORS:
        return f"{v.opcode} is a CPU-only operator (Vela has no NPU implementation)"
    generic = tuple(c for c in _SUPPORT_GENERIC if not (c is batch_is_1 and v.opcode in _BATCH_ANY))
    failure = _first_failure(v, generic + _SUPPORT_SPECIFIC.get(v.opcode, ()))
    if failure is None:
        failure = _first_failure(v, _LOWERING_SPECIFIC.get(v.opcode, ()))
    return f"fails the NPU rule: {failure}" if failure is not None else None


def vela_cpu_reason(op: TfliteOperator, subgraph: TfliteSubgraph) -> str | None:
    """Why Vela 5.2.0 would leave ``op`` on the CPU, or None when Vela runs it on the NPU (or folds it away)."""
    view = OpView(op, subgraph)
    if _pool_stride_folds(view):
        view = OpView(op, subgraph, pool_stride_fixed=True)
    try:
        if folds_to_constant(op, subgraph) and _semantic_failure(view) is None:
            return None
        return _vela_verdict(view)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
        return f"malformed operator ({type(exc).__name__}: {exc})"


def npu_support(op: TfliteOperator, subgraph: TfliteSubgraph) -> str | None:
    """None if npusched runs ``op`` on the NPU (or it folds into a constant), else a one-line reason for the CPU."""
    reason = vela_cpu_reason(op, subgraph)
    if reason is None and op.opcode not in NPU_OPERATORS:
        reason = f"npusched does not lower {op.opcode} to the NPU"
    return None if reason is None else f"{op.opcode} '{OpView(op, subgraph).name}' runs on the CPU: {reason}"


def cpu_operators(subgraph: TfliteSubgraph) -> dict[int, str]:
    """Operator index -> reason, for every operator of ``subgraph`` that stays on the CPU."""
    reasons = {op.index: npu_support(op, subgraph) for op in subgraph.operators}
    return {index: reason for index, reason in reasons.items() if reason is not None}
