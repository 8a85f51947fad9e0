"""Stages 2 to 4 of Vela's placement: the first graph-optimisation pass (constant QUANTIZE folds, asymmetric
weights, pooling strides), the NPU support rules (generic, then per operator), and the lowering steps that can
still give an operator back to the CPU. Rules as in ``semantic_rules``."""

from __future__ import annotations

import numpy as np

from npusched.frontend.op_view import (
    _CONV_OPS,
    _FUSABLE_ACTIVATIONS,
    _INT32_OK,
    _PER_AXIS_OK,
    _POOL_OPS,
    _SUPPORTED_DTYPES,
    ARGMAX_DEPTH_MAX,
    DILATED_AREA_MAX,
    DILATED_HEIGHT_MAX,
    MEAN_AXIS_MAX,
    MEAN_PRODUCT_MAX,
    MEAN_PRODUCT_MAX_DEFAULT,
    POOL_AREA_MAX,
    POOL_HEIGHT_MAX,
    SAME_POOL_KERNEL_MAX,
    STRIDE_MAX,
    TENSOR_DIM_MAX,
    WEIGHT_SUM_MAX,
    Constraint,
    OpView,
    _axes,
    _elements,
    _is_per_axis,
    _names,
    _optimised_stride_w,
    _same_scaling,
    _shape4,
)
from npusched.frontend.tflite_reader import TfliteOperator, TfliteSubgraph, TfliteTensor
from npusched.ir import DataType

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


def mirror_pad_spatial_only(v: OpView) -> str | None:
    """MIRROR_PAD pads only height and width"""
    pads = np.asarray(v.inputs[1].data)
    depth, batch = int(np.sum(pads[-1, :])), int(np.sum(pads[0, :])) if len(pads) > 3 else 0
    return None if depth == 0 and batch == 0 else f"paddings {pads.tolist()}"


def mirror_pad_within_ifm(v: OpView) -> str | None:
    """No MIRROR_PAD padding is larger than the IFM along its axis"""
    pads, shape = np.asarray(v.inputs[1].data), v.inputs[0].shape
    bad = any(int(p) > size for row, size in zip(pads, shape, strict=False) for p in row)
    return f"paddings {pads.tolist()} for IFM {list(shape)}" if bad else None


def argmax_along_depth(v: OpView) -> str | None:
    """ARG_MAX reduces the depth (last) axis"""
    if v.inputs[1].data is None:
        return "the axis is not constant"
    rank, axes = len(v.inputs[0].shape), _axes(v.inputs[1])
    return None if len(axes) == 1 and axes[0] in (rank - 1, -1) else f"axis {axes} of a rank-{rank} IFM"


def argmax_depth_in_range(v: OpView) -> str | None:
    """The ARG_MAX IFM depth is at most 127 (the index is kept in the low 7 bits of a 16-bit value)"""
    depth = v.inputs[0].shape[-1]
    return None if depth <= ARGMAX_DEPTH_MAX else f"depth {depth}"


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
    if shape is None or v.is_constant(shape) or _folded_before_placement(shape, v.subgraph):
        return None
    return f"shape input '{shape.name}' is not constant"


def _folded_before_placement(t: TfliteTensor, subgraph: TfliteSubgraph) -> bool:
    """``t`` is the output of a SHAPE of a map whose rank it holds, or of a QUANTIZE of a constant: stage 2 makes it
    a constant before any NPU rule is checked."""
    producer = next((op for op in subgraph.operators if t.index in op.outputs), None)
    if producer is None:
        return False
    if producer.opcode == "QUANTIZE":
        return folds_to_constant(producer, subgraph)
    if producer.opcode != "SHAPE" or not producer.inputs or producer.inputs[0] < 0:
        return False
    source = subgraph.tensor(producer.inputs[0])
    return source is not None and len(t.shape) == 1 and t.shape[0] == len(source.shape)


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
    return None if legacy_transpose(tuple(shape), tuple(perm)) else f"IFM {list(shape)}, permutation {perm}"


def legacy_transpose(shape: tuple[int, ...], perm: tuple[int, ...]) -> bool:
    """Whether Vela legacy runs a TRANSPOSE of a ``shape`` map by ``perm`` on the NPU."""
    rank3, rank4 = len(perm) == 3, len(perm) == 4
    return (len(shape) == 2
            or (rank3 and perm[0] == 1 and perm[1] == 0)
            or (rank3 and shape[0] == 1 and perm[1] == 2 and perm[2] == 1)
            or (rank3 and shape[1] == 1 and perm[0] == 2 and perm[2] == 0)
            or (rank4 and perm[0] == 0 and perm[1] == 2 and perm[2] == 1)
            or (rank4 and shape[1] == 1 and perm[0] == 0 and perm[2] == 3 and perm[3] == 2)
            or (rank4 and shape[2] == 1 and perm[0] == 0 and perm[1] == 3 and perm[3] == 1))


def rsqrt_ifm_int8(v: OpView) -> str | None:
    """The RSQRT IFM is int8 (its lookup table is built for int8 inputs only)"""
    return None if v.ifm.dtype == DataType.int8 else f"IFM {v.ifm.dtype.value}"


def gelu_int8(v: OpView) -> str | None:
    """GELU maps int8 to int8 (a 256-entry table, TFLite's own)"""
    return gelu_form(v.ifm.dtype, v.ofm.dtype)


def gelu_form(ifm: DataType | None, ofm: DataType | None) -> str | None:
    """Why npusched cannot run a GELU as a table (``npusched.lowering.luts.gelu_lut8_values``), or None; shared with
    the backend bridge, as ``batch_matmul_form`` is."""
    ok = ifm == ofm == DataType.int8
    return None if ok else f"IFM {ifm.value if ifm else ifm}, OFM {ofm.value if ofm else ofm}"


def softmax_area(v: OpView) -> str | None:
    """SOFTMAX IFM width x height is at most 65535"""
    _, h, w, _ = _shape4(v.inputs[0].shape)
    return None if h * w <= TENSOR_DIM_MAX else f"IFM {list(v.inputs[0].shape)}"


def batch_matmul_form(lhs_shape: tuple[int, ...], rhs_shape: tuple[int, ...], dtypes: tuple[DataType, ...],
                      adj_x: bool, adj_y: bool, constant: bool, one_map: bool = False) -> str | None:
    """Why npusched cannot run a BATCH_MATMUL as per-column NPU passes (``npusched.lowering.batch_matmul``), or
    None. Shared with the backend bridge, which teaches Vela legacy the same rewrite: both must agree. ``one_map``:
    both operands are the same map, which the passes would read at two shapes (its layout is decided by the first)."""
    if constant:
        return "an operand is a constant"
    if one_map:
        return "both operands are one map"
    if any(dtype != DataType.int8 for dtype in dtypes):
        return f"types {[dtype.value for dtype in dtypes]} (int8 operands and output only)"
    if adj_x or not adj_y:
        return f"adj_x {adj_x}, adj_y {adj_y} (the right operand must be transposed, the left not)"
    if not 2 <= len(lhs_shape) <= 4 or len(lhs_shape) != len(rhs_shape) or lhs_shape[:-2] != rhs_shape[:-2] \
            or (len(lhs_shape) == 4 and lhs_shape[0] != 1) or lhs_shape[-1] != rhs_shape[-1]:
        return f"operands {list(lhs_shape)} x {list(rhs_shape)} (same leading dimensions, batch 1, no broadcast)"
    if lhs_shape[-1] == 1:
        return "a shared axis of 1 (an outer product: the row read would be broadcast both ways)"
    if rhs_shape[-2] * rhs_shape[-1] > TENSOR_DIM_MAX:
        return f"right operand {list(rhs_shape)}: its rows read as one row of {rhs_shape[-2] * rhs_shape[-1]}"
    return None


def batch_matmul_supported(v: OpView) -> str | None:
    """BATCH_MATMUL of two int8 activations, the right one transposed, same leading dimensions"""
    lhs, rhs = v.inputs[0], v.inputs[1]
    per_axis = any(len(t.quantization.scale) > 1 for t in (lhs, rhs, v.ofm))
    if per_axis:
        return "per-axis quantisation"
    return batch_matmul_form(tuple(lhs.shape), tuple(rhs.shape), (lhs.dtype, rhs.dtype, v.ofm.dtype),
                             bool(v.options.get("adj_x")), bool(v.options.get("adj_y")),
                             lhs.data is not None or rhs.data is not None, lhs.index == rhs.index)


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
    "MIRROR_PAD": (paddings_rank, paddings_type, mirror_pad_spatial_only, mirror_pad_within_ifm),
    "ARG_MAX": (argmax_along_depth, argmax_depth_in_range),
    "MEAN": _MEAN_SUPPORT,
    "RESHAPE": (reshape_shape_constant,),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _LSTM_SUPPORT,
    "SLICE": (slice_inputs_constant,),
    "TRANSPOSE": (transpose_permutation_supported,),
    "SOFTMAX": (softmax_area,),
    "RSQRT": (rsqrt_ifm_int8,),
    "BATCH_MATMUL": (batch_matmul_supported,),
    "GELU": (gelu_int8,),
}


# ---------------------------------------------------------------------------------------------------------------
# Stage 4: lowering steps that can still hand an operator back to the CPU

def softmax_type_pair(v: OpView) -> str | None:
    """SOFTMAX maps 8-bit to the same 8-bit type, or int16 to int16"""
    ifm, ofm = v.ifm.dtype, v.ofm.dtype
    ok = (ifm in (DataType.uint8, DataType.int8) and ofm == ifm) or ifm == ofm == DataType.int16
    return None if ok else f"IFM {ifm.value}, OFM {ofm.value}"


_LOWERING_SPECIFIC: dict[str, tuple[Constraint, ...]] = {"SOFTMAX": (softmax_type_pair,)}
