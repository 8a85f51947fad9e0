"""Stage 1 of Vela's placement: the semantic rules of the TFLite graph (an operator that breaks TFLite's own rules
stays on the CPU). Each rule returns None when it holds, else what fails; its docstring's first line names it."""

from __future__ import annotations

import numpy as np

from npusched.frontend.op_view import (
    _OPTION_FIELDS,
    _SCALAR_INPUT_OK,
    _SIGNED,
    Constraint,
    OpView,
    _axes,
    _elements,
    _has_quant,
    _is_quantized,
    _names,
    _normalised_axis,
    _same_scaling,
    _scalar_axis,
)
from npusched.ir import DataType

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


def argmax_output_int(v: OpView) -> str | None:
    """The ARG_MAX OFM is int32 or int64"""
    return None if v.ofm.dtype in (DataType.int32, DataType.int64) else f"OFM {v.ofm.dtype.value}"


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
    # Vela's other unary element-wise operators, and SQUARED_DIFFERENCE, which it counts as element-wise too.
    "RSQRT": (one_input_shape_matches_ofm, in_out_types_match),
    "EXP": (one_input_shape_matches_ofm, in_out_types_match, ifm_signed_8_or_16),
    "ABS": (one_input_shape_matches_ofm, in_out_types_match),
    "SQUARED_DIFFERENCE": (one_input_shape_matches_ofm,),
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
    "ARG_MAX": (ifm_8bit, argmax_output_int),
}
