"""Builders for NpuOps in Vela's Operation form, shared by the main lowering and the decompositions.

Every builder returns an NpuOp with ``index=-1``; graph.py numbers the passes once the order is known.
Shapes default the way Vela's operation factories default them (4-D versions of the tensors' shapes).
"""

from __future__ import annotations

from collections.abc import Sequence

from npusched.ir import (
    ConstTensor,
    DataType,
    FeatureMap,
    Kernel,
    NpuBlockType,
    NpuOp,
    OperandAccess,
    Quantization,
    ResamplingMode,
    Shape4D,
)

_UNIT_KERNEL = Kernel()

# Vela's lowered op types and the hardware block each one runs on (Op.npu_block_type).
BLOCK_TYPES: dict[str, NpuBlockType] = {
    "Conv2DBias": NpuBlockType.ConvolutionMxN,
    "Conv2D": NpuBlockType.ConvolutionMxN,
    "Conv2DBackpropInputSwitchedBias": NpuBlockType.ConvolutionMxN,
    "DepthwiseConv2DBias": NpuBlockType.ConvolutionDepthWise,
    "FullyConnected": NpuBlockType.VectorProduct,
    "AvgPool": NpuBlockType.Pooling,
    "MaxPool": NpuBlockType.Pooling,
    "ResizeBilinear": NpuBlockType.Pooling,
    "ResizeNearestNeighbor": NpuBlockType.Pooling,
    "ReduceSum": NpuBlockType.ReduceSum,
    "Memcpy": NpuBlockType.Dma,
    "Transpose": NpuBlockType.Pooling,  # the default core's (lowering.transpose); legacy's is a 1x1 AvgPool
}
BINARY_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Maximum", "Minimum", "SHL", "SHR", "SquaredDifference"})
UNARY_ELEMENTWISE = frozenset({"Abs", "CLZ", "Exp", "LeakyRelu", "Rsqrt"})
for _t in BINARY_ELEMENTWISE | UNARY_ELEMENTWISE:
    BLOCK_TYPES[_t] = NpuBlockType.ElementWise


def block_type_of(op_type: str) -> NpuBlockType:
    return BLOCK_TYPES.get(op_type, NpuBlockType.Default)


def access(fm: FeatureMap, shape: Shape4D | None = None, offset: Shape4D | None = None,
           access_shape: Shape4D | None = None) -> OperandAccess:
    """How a pass sees ``fm``; ``shape`` defaults to the tensor's own 4-D shape."""
    return OperandAccess(tensor=fm, shape=fm.shape if shape is None else shape, offset=offset,
                         access_shape=access_shape)


def _is_scalar(fm: FeatureMap) -> bool:
    return fm.orig_shape == ()


def ifm_ifm2_correct_order(ifm_shape: Shape4D | None, ifm2_shape: Shape4D | None) -> bool:
    """True when the operands are already in the order the hardware wants (scalar/broadcast one second)."""
    if ifm_shape is None:
        return False
    if ifm2_shape is None:
        return True
    return not any(a != b and a == 1 for a, b in zip(ifm_shape.as_list(), ifm2_shape.as_list(), strict=True))


def _activation_attrs(activation_min: float | None, activation_max: float | None,
                      attrs: Sequence[tuple[str, object]]) -> tuple[tuple[str, object], ...]:
    out = list(attrs)
    if activation_min is not None:
        out.append(("activation_min", activation_min))
    if activation_max is not None:
        out.append(("activation_max", activation_max))
    return tuple(out)


def elementwise_op(op_type: str, name: str, ifm: FeatureMap, ifm2: FeatureMap | None, *, tflite_op: str,
                   ofm: FeatureMap | None = None, quantization: Quantization | None = None,
                   dtype: DataType | None = None, ifm_shape: Shape4D | None = None,
                   ifm2_shape: Shape4D | None = None, activation: str | None = None,
                   activation_min: float | None = None, activation_max: float | None = None,
                   activation_lut: ConstTensor | None = None, rounding_mode: str | None = None,
                   has_scaling: bool = True, attrs: Sequence[tuple[str, object]] = (),
                   ofm_shape: Shape4D | None = None) -> NpuOp:
    """A unary or binary elementwise pass (Vela's create_binary_elementwise / create_unary_elementwise).

    Without ``ofm`` a new tensor ``<name>_tens0`` is made with the OFM shape Vela derives: the IFM's shape,
    or IFM2's when IFM is the scalar/broadcast operand. ``ofm_shape`` overrides the shape the pass writes (a
    decomposition's last pass writing a map a RESHAPE was bypassed into is written at that map's shape, as Vela
    sets it from the tensor).
    """
    written = ofm_shape
    ifm_shape = ifm.shape if ifm_shape is None else ifm_shape
    if ifm2 is None:
        ofm_shape = ifm_shape
    else:
        ifm2_shape = ifm2.shape if ifm2_shape is None else ifm2_shape
        in1 = None if _is_scalar(ifm) else ifm_shape
        in2 = None if _is_scalar(ifm2) else ifm2_shape
        ofm_shape = ifm_shape if ifm_ifm2_correct_order(in1, in2) else ifm2_shape
    if written is not None:
        ofm_shape = written
    if ofm is None:
        ofm = FeatureMap(name=f"{name}_tens0", shape=ofm_shape, dtype=dtype or ifm.dtype,
                         quantization=quantization if quantization is not None else Quantization(),
                         orig_shape=tuple(ofm_shape.as_list()))
    else:
        ofm_shape = ofm.shape if ofm_shape is None else ofm_shape
    return NpuOp(
        index=-1, name=name, tflite_op=tflite_op, op_type=op_type, npu_block_type=block_type_of(op_type),
        ifm=access(ifm, ifm_shape), ifm2=None if ifm2 is None else access(ifm2, ifm2_shape),
        ofm=access(ofm, ofm_shape), activation=activation, activation_lut=activation_lut,
        rounding_mode=rounding_mode, has_scaling=has_scaling,
        attrs=_activation_attrs(activation_min, activation_max, attrs),
    )


def pool_op(op_type: str, name: str, ifm: FeatureMap, ofm: FeatureMap, *, tflite_op: str,
            kernel: Kernel = _UNIT_KERNEL, ifm_shape: Shape4D | None = None, ofm_shape: Shape4D | None = None,
            activation: str | None = None, activation_min: float | None = None,
            activation_max: float | None = None, activation_lut: ConstTensor | None = None,
            resampling_mode: ResamplingMode = ResamplingMode.NONE, rounding_mode: str | None = None,
            ifm_offset: Shape4D | None = None, ifm_read_shape: Shape4D | None = None,
            ofm_offset: Shape4D | None = None, ofm_write_shape: Shape4D | None = None,
            has_scaling: bool = True, attrs: Sequence[tuple[str, object]] = ()) -> NpuOp:
    """AvgPool / MaxPool / ReduceSum / Memcpy pass (also Vela's 1x1 AvgPool 'nop')."""
    return NpuOp(
        index=-1, name=name, tflite_op=tflite_op, op_type=op_type, npu_block_type=block_type_of(op_type),
        ifm=access(ifm, ifm_shape, ifm_offset, ifm_read_shape),
        ofm=access(ofm, ofm_shape, ofm_offset, ofm_write_shape),
        kernel=kernel, activation=activation, activation_lut=activation_lut, resampling_mode=resampling_mode,
        rounding_mode=rounding_mode, has_scaling=has_scaling,
        attrs=_activation_attrs(activation_min, activation_max, attrs),
    )


def weighted_op(op_type: str, name: str, ifm: FeatureMap, ofm: FeatureMap, weights: ConstTensor,
                bias: ConstTensor | None, *, tflite_op: str, kernel: Kernel | None = None,
                ifm_shape: Shape4D | None = None, ofm_shape: Shape4D | None = None,
                activation: str | None = None, activation_min: float | None = None,
                activation_max: float | None = None, activation_lut: ConstTensor | None = None,
                resampling_mode: ResamplingMode = ResamplingMode.NONE, rounding_mode: str | None = None,
                ifm_offset: Shape4D | None = None, ifm_read_shape: Shape4D | None = None,
                ofm_offset: Shape4D | None = None, ofm_write_shape: Shape4D | None = None,
                attrs: Sequence[tuple[str, object]] = ()) -> NpuOp:
    """Conv2DBias / DepthwiseConv2DBias / FullyConnected / transpose-conv pass. ``weights`` are HWIO for
    convolutions (Vela's depthwise layout [H, W, C, 1] after reorder_depthwise_weights) and IO for
    FullyConnected; the kernel defaults to the weights' H and W (1x1 for FullyConnected)."""
    if kernel is None:
        if op_type == "FullyConnected" or len(weights.shape) < 4:
            kernel = Kernel()
        else:
            kernel = Kernel(width=int(weights.shape[1]), height=int(weights.shape[0]))
    return NpuOp(
        index=-1, name=name, tflite_op=tflite_op, op_type=op_type, npu_block_type=block_type_of(op_type),
        ifm=access(ifm, ifm_shape, ifm_offset, ifm_read_shape),
        ofm=access(ofm, ofm_shape, ofm_offset, ofm_write_shape),
        kernel=kernel, weights=weights, bias=bias, activation=activation, activation_lut=activation_lut,
        resampling_mode=resampling_mode, rounding_mode=rounding_mode,
        attrs=_activation_attrs(activation_min, activation_max, attrs),
    )


def depthwise_op(name: str, ifm: FeatureMap, ofm: FeatureMap, weights: ConstTensor, bias: ConstTensor | None,
                 **kwargs) -> NpuOp:
    return weighted_op("DepthwiseConv2DBias", name, ifm, ofm, weights, bias, **kwargs)


def memcpy_op(name: str, ifm: FeatureMap, ofm: FeatureMap, *, tflite_op: str,
              ifm_shape: Shape4D | None = None, ofm_shape: Shape4D | None = None) -> NpuOp:
    """A DMA copy (Vela's Memcpy): what a memory-only op becomes when it cannot simply be bypassed."""
    return pool_op("Memcpy", name, ifm, ofm, tflite_op=tflite_op, ifm_shape=ifm_shape, ofm_shape=ofm_shape)
