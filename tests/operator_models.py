"""One small int8 model per TFLite operator Vela 5.2.0's legacy core runs on the NPU (its own supported set), for
tests/test_vela_operators.py, and variants of the operators npusched lowers as Vela's graph optimiser does.

Each maker returns the bytes of a model whose named operator Vela legacy places on the NPU (the test checks that with
Vela's own graph optimiser and pass packing). Shapes are small so that Vela and npusched lower them in milliseconds;
weights and quantisation are drawn from a seeded generator, so the same maker always gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from conftest import model_path

from npusched.netgen.flatbuffer import NetworkDef, OperatorDef, TensorDef, serialise

_NUMPY = {"INT8": "<i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8", "UINT8": "<u1"}


class Net:
    """Tensors and operators of one model, added in order."""

    def __init__(self, seed: int = 0, int16: bool = False) -> None:
        self.rng = np.random.default_rng(seed)
        self.int16 = int16
        self.tensors: list[TensorDef] = []
        self.operators: list[OperatorDef] = []
        self.inputs: list[int] = []

    def _add(self, tensor: TensorDef) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def act(self, shape: Sequence[int], scale: float | None = None, zero: int | None = None, dtype: str | None = None,
            signature: Sequence[int] | None = None, name: str | None = None) -> int:
        """An activation: a random per-tensor quantisation unless given (int16 activations: zero point 0)."""
        dtype = dtype or ("INT16" if self.int16 else "INT8")
        if scale is None:
            scale = float(np.float32(self.rng.uniform(0.01, 0.08) / (256 if dtype == "INT16" else 1)))
        if zero is None:
            zero = 0 if dtype == "INT16" else int(self.rng.integers(-20, 21))
        quant = ((scale,), (zero,)) if dtype in ("INT8", "INT16", "UINT8") else ((), ())
        return self._add(TensorDef(name or f"t{len(self.tensors)}", tuple(shape), dtype, *quant,
                                   shape_signature=None if signature is None else tuple(signature)))

    def input(self, shape: Sequence[int], *args: Any, **kwargs: Any) -> int:
        index = self.act(shape, *args, **kwargs)
        self.inputs.append(index)
        return index

    def const(self, values: Any, dtype: str = "INT32", scale: Sequence[float] = (), zero: Sequence[int] = (),
              axis: int = 0) -> int:
        data = np.asarray(values).astype(_NUMPY[dtype])
        return self._add(TensorDef(f"c{len(self.tensors)}", data.shape, dtype, tuple(scale), tuple(zero), axis,
                                   data.tobytes()))

    def like(self, index: int, shape: Sequence[int] | None = None, dtype: str | None = None) -> int:
        """An activation with ``index``'s quantisation (and its shape unless given)."""
        t = self.tensors[index]
        return self._add(TensorDef(f"t{len(self.tensors)}", tuple(t.shape if shape is None else shape),
                                   dtype or t.dtype, t.scales, t.zero_points))

    def weights(self, shape: Sequence[int], axis: int) -> int:
        values = self.rng.integers(-127, 128, size=tuple(shape))
        scales = self.rng.uniform(0.002, 0.01, size=shape[axis]).astype(np.float32).tolist()
        return self.const(values, "INT8", scales, [0] * shape[axis], axis)

    def bias(self, channels: int) -> int:
        return self.const(self.rng.integers(-512, 512, size=channels), "INT64" if self.int16 else "INT32",
                          [1e-4] * channels, [0] * channels)

    def op(self, opcode: str, inputs: Sequence[int], outputs: Sequence[int], options: str | None = None,
           **fields: Any) -> None:
        self.operators.append(OperatorDef(opcode, tuple(inputs), tuple(outputs), options, tuple(fields.items())))

    def model(self, outputs: Sequence[int], description: str = "") -> bytes:
        return serialise(NetworkDef(tuple(self.tensors), tuple(self.operators), tuple(self.inputs), tuple(outputs),
                                    description))


def unary(opcode: str, shape: Sequence[int] = (1, 8, 8, 16), out_scale: float | None = None,
          out_zero: int | None = None, options: str | None = None, int16: bool = False, seed: int = 0,
          **fields: Any) -> bytes:
    """input -> OPCODE -> output, same shape."""
    net = Net(seed, int16)
    x = net.input(shape)
    y = net.act(shape, out_scale, out_zero)
    net.op(opcode, (x,), (y,), options, **fields)
    return net.model([y], opcode)


def binary(opcode: str, options: str | None = None, same_quant: bool = False, **fields: Any) -> bytes:
    """Two inputs -> OPCODE -> output (all the same quantisation where the operator needs it)."""
    net = Net(1)
    a = net.input((1, 8, 8, 16))
    b = net.like(a) if same_quant else net.act((1, 8, 8, 16))
    net.inputs.append(b)
    y = net.like(a) if same_quant else net.act((1, 8, 8, 16))
    net.op(opcode, (a, b), (y,), options, **fields)
    return net.model([y], opcode)


def conv(opcode: str = "CONV_2D", groups: int = 1) -> bytes:
    net = Net(2)
    x = net.input((1, 8, 8, 16))
    y = net.act((1, 8, 8, 16))
    if opcode == "DEPTHWISE_CONV_2D":
        net.op(opcode, (x, net.weights((1, 3, 3, 16), 3), net.bias(16)), (y,), "DepthwiseConv2DOptions", Padding=0,
               StrideW=1, StrideH=1, DepthMultiplier=1, FusedActivationFunction=1, DilationWFactor=1,
               DilationHFactor=1)
    else:
        net.op(opcode, (x, net.weights((16, 3, 3, 16 // groups), 0), net.bias(16)), (y,), "Conv2DOptions", Padding=0,
               StrideW=1, StrideH=1, FusedActivationFunction=1, DilationWFactor=1, DilationHFactor=1)
    return net.model([y], opcode)


def transpose_conv() -> bytes:
    net = Net(3)
    x = net.input((1, 4, 4, 8))
    y = net.act((1, 8, 8, 8))
    net.op("TRANSPOSE_CONV", (net.const([1, 8, 8, 8]), net.weights((8, 3, 3, 8), 0), x, net.bias(8)), (y,),
           "TransposeConvOptions", Padding=0, StrideW=2, StrideH=2)
    return net.model([y], "TRANSPOSE_CONV")


def fully_connected() -> bytes:
    net = Net(4)
    x = net.input((1, 32))
    y = net.act((1, 8))
    net.op("FULLY_CONNECTED", (x, net.weights((8, 32), 0), net.bias(8)), (y,), "FullyConnectedOptions",
           FusedActivationFunction=0, KeepNumDims=False)
    return net.model([y], "FULLY_CONNECTED")


def pool(opcode: str) -> bytes:
    net = Net(5)
    x = net.input((1, 8, 8, 16))
    y = net.like(x, (1, 4, 4, 16))
    net.op(opcode, (x,), (y,), "Pool2DOptions", Padding=1, StrideW=2, StrideH=2, FilterWidth=2, FilterHeight=2,
           FusedActivationFunction=0)
    return net.model([y], opcode)


def shaped(opcode: str, out_shape: Sequence[int], extra: Sequence[Any] = (), options: str | None = None,
           in_shape: Sequence[int] = (1, 8, 8, 16), **fields: Any) -> bytes:
    """A data-movement operator: its output keeps the input's quantisation; ``extra`` constant int32 inputs."""
    net = Net(6)
    x = net.input(in_shape)
    y = net.like(x, out_shape)
    net.op(opcode, (x, *(net.const(v) for v in extra)), (y,), options, **fields)
    return net.model([y], opcode)


def concatenation() -> bytes:
    net = Net(7)
    a = net.input((1, 8, 8, 8))
    b = net.like(a)
    net.inputs.append(b)
    y = net.like(a, (1, 8, 8, 16))
    net.op("CONCATENATION", (a, b), (y,), "ConcatenationOptions", Axis=3, FusedActivationFunction=0)
    return net.model([y], "CONCATENATION")


def split(opcode: str) -> bytes:
    net = Net(8)
    x = net.input((1, 8, 8, 16))
    parts = [net.like(x, (1, 8, 8, 8)) for _ in range(2)]
    if opcode == "SPLIT":
        net.op("SPLIT", (net.const(3), x), parts, "SplitOptions", NumSplits=2)
    else:
        net.op("SPLIT_V", (x, net.const([8, 8]), net.const(3)), parts, "SplitVOptions", NumSplits=2)
    return net.model(parts, opcode)


def mean() -> bytes:
    net = Net(9)
    x = net.input((1, 8, 8, 16))
    y = net.act((1, 1, 1, 16))
    net.op("MEAN", (x, net.const([1, 2])), (y,), "ReducerOptions", KeepDims=True)
    return net.model([y], "MEAN")


def resize(opcode: str) -> bytes:
    net = Net(10)
    x = net.input((1, 4, 4, 8))
    y = net.like(x, (1, 8, 8, 8))
    options = "ResizeBilinearOptions" if opcode == "RESIZE_BILINEAR" else "ResizeNearestNeighborOptions"
    net.op(opcode, (x, net.const([8, 8])), (y,), options, AlignCorners=False, HalfPixelCenters=False)
    return net.model([y], opcode)


def shape_reshape() -> bytes:
    """SHAPE of the input feeding a RESHAPE of it (Vela folds the SHAPE into a constant)."""
    net = Net(11)
    x = net.input((1, 8, 8, 16))
    shape = net.act((4,), dtype="INT32")
    y = net.like(x)
    net.op("SHAPE", (x,), (shape,), "ShapeOptions", OutType=2)
    net.op("RESHAPE", (x, shape), (y,))
    return net.model([y], "SHAPE")


def strided_slice() -> bytes:
    net = Net(12)
    x = net.input((1, 8, 8, 16))
    y = net.like(x, (1, 4, 8, 16))
    net.op("STRIDED_SLICE", (x, net.const([0, 2, 0, 0]), net.const([1, 6, 8, 16]), net.const([1, 1, 1, 1])),
           (y,), "StridedSliceOptions", BeginMask=0, EndMask=0, EllipsisMask=0, NewAxisMask=0, ShrinkAxisMask=0,
           Offset=False)
    return net.model([y], "STRIDED_SLICE")


def quantize() -> bytes:
    return unary("QUANTIZE", out_scale=0.05, out_zero=3)


def softmax() -> bytes:
    return unary("SOFTMAX", (1, 16), 1 / 256, -128, "SoftmaxOptions", Beta=1.0)


def prelu(alphas: Sequence[int], alpha_scale: float = 0.01, shape: Sequence[int] = (1, 8, 8, 16),
          int16: bool = False, seed: int = 13) -> bytes:
    """PRELU with a constant alpha of ``alphas`` (one per channel, or one for all) broadcast over [1, 1, C]."""
    net = Net(seed, int16)
    x = net.input(shape)
    alpha = net.const(np.asarray(alphas).reshape(1, 1, -1), "INT16" if int16 else "INT8", [alpha_scale], [0])
    y = net.act(shape)
    net.op("PRELU", (x, alpha), (y,))
    return net.model([y], "PRELU")


def prelu_of_activation(seed: int = 14) -> bytes:
    """PRELU whose alpha is an activation (a learned alpha computed elsewhere): Vela's general form."""
    net = Net(seed)
    x = net.input((1, 8, 8, 16))
    alpha = net.input((1, 8, 8, 16))
    y = net.act((1, 8, 8, 16))
    net.op("PRELU", (x, alpha), (y,))
    return net.model([y], "PRELU")


def mirror_pad(paddings: Sequence[Sequence[int]], mode: int, shape: Sequence[int] = (1, 8, 8, 16),
               int16: bool = False) -> bytes:
    net = Net(15, int16)
    x = net.input(shape)
    out = [s + a + b for s, (a, b) in zip(shape, paddings, strict=True)]
    y = net.like(x, out)
    net.op("MIRROR_PAD", (x, net.const(paddings)), (y,), "MirrorPadOptions", Mode=mode)
    return net.model([y], "MIRROR_PAD")


def arg_max(shape: Sequence[int] = (1, 8, 8, 16), output: str = "INT32", seed: int = 16) -> bytes:
    """ARG_MAX over the depth after a convolution (a segmentation head; an ADD for other ranks)."""
    net = Net(seed)
    x = net.input(shape)
    y = net.act(shape)
    if len(shape) == 4:
        net.op("CONV_2D", (x, net.weights((shape[-1], 1, 1, shape[-1]), 0), net.bias(shape[-1])), (y,),
               "Conv2DOptions", Padding=0, StrideW=1, StrideH=1, FusedActivationFunction=0, DilationWFactor=1,
               DilationHFactor=1)
    else:
        net.op("ADD", (x, net.const(3, "INT8", [0.05], [0])), (y,), "AddOptions", FusedActivationFunction=0)
    index = net.act(shape[:-1], dtype=output)
    net.op("ARG_MAX", (y, net.const(-1)), (index,), "ArgMaxOptions", OutputType=2 if output == "INT32" else 4)
    return net.model([index], "ARG_MAX")


def pack(parts: int = 3, part_shape: Sequence[int] = (1, 8, 16), axis: int = 1, signature_axis: int | None = None
         ) -> bytes:
    """PACK of ``parts`` maps, each an ADD of the input and a constant (so a pass writes each)."""
    net = Net(17)
    sig = None if signature_axis is None else [-1 if d == signature_axis else s for d, s in enumerate(part_shape)]
    x = net.input(part_shape, signature=sig)
    steps = []
    for k in range(parts):
        step = net.like(x)
        net.op("ADD", (x, net.const(k, "INT8", [0.05], [0])), (step,), "AddOptions", FusedActivationFunction=0)
        steps.append(step)
    rank = len(part_shape) + 1
    shape = [*part_shape[:axis % rank], parts, *part_shape[axis % rank:]]
    y = net.like(x, shape)
    net.op("PACK", steps, (y,), "PackOptions", ValuesCount=parts, Axis=axis)
    return net.model([y], "PACK")


def unpack(shape: Sequence[int] = (1, 4, 16), axis: int = 1, signature: Sequence[int] | None = None) -> bytes:
    """UNPACK of the input; each slice then goes through an ADD (as an unrolled recurrent layer's steps do)."""
    net = Net(18)
    x = net.input(shape, signature=signature)
    rank = len(shape)
    part = [s for d, s in enumerate(shape) if d != axis % rank]
    slices = [net.like(x, part) for _ in range(shape[axis % rank])]
    net.op("UNPACK", (x,), slices, "UnpackOptions", Num=len(slices), Axis=axis)
    outputs = []
    for k, piece in enumerate(slices):
        out = net.like(x, part)
        net.op("ADD", (piece, net.const(k, "INT8", [0.05], [0])), (out,), "AddOptions", FusedActivationFunction=0)
        outputs.append(out)
    return net.model(outputs, "UNPACK")


def recurrent_stack(steps: int = 6, features: int = 10) -> bytes:
    """A time-major unrolled recurrent layer as Keras exports it: the [1, T, F] input TRANSPOSEd to [T, 1, F] (the
    batch dynamic in dimension 1 of the shape signature), UNPACKed over time, each step through a FULLY_CONNECTED,
    the steps PACKed back to [T, 1, 8] and TRANSPOSEd to [1, T, 8]."""
    net = Net(19)
    x = net.input((1, steps, features), signature=(-1, steps, features))
    time_major = net.like(x, (steps, 1, features))
    net.tensors[time_major] = with_signature(net.tensors[time_major], (steps, -1, features))
    net.op("TRANSPOSE", (x, net.const([1, 0, 2])), (time_major,))
    slices = [net.like(x, (1, features)) for _ in range(steps)]
    for s in slices:
        net.tensors[s] = with_signature(net.tensors[s], (-1, features))
    net.op("UNPACK", (time_major,), slices, "UnpackOptions", Num=steps, Axis=0)
    weights, bias = net.weights((8, features), 0), net.bias(8)
    first = net.act((1, 8), signature=(-1, 8))
    states = [first] + [net.like(first) for _ in slices[1:]]
    for s, state in zip(slices, states, strict=True):
        net.tensors[state] = with_signature(net.tensors[state], (-1, 8))
        net.op("FULLY_CONNECTED", (s, weights, bias), (state,), "FullyConnectedOptions", FusedActivationFunction=1,
               KeepNumDims=False)
    packed = net.like(first, (steps, 1, 8))
    net.tensors[packed] = with_signature(net.tensors[packed], (steps, -1, 8))
    net.op("PACK", states, (packed,), "PackOptions", ValuesCount=steps, Axis=0)
    y = net.like(packed, (1, steps, 8))
    net.tensors[y] = with_signature(net.tensors[y], (-1, steps, 8))
    net.op("TRANSPOSE", (packed, net.const([1, 0, 2])), (y,))
    return net.model([y], "time-major unrolled recurrent layer")


def with_signature(tensor: TensorDef, signature: Sequence[int]) -> TensorDef:
    return TensorDef(tensor.name, tensor.shape, tensor.dtype, tensor.scales, tensor.zero_points,
                     tensor.quantized_dimension, tensor.data, tuple(signature))


def corpus(model: str) -> Callable[[], bytes]:
    return lambda: Path(model_path(model)).read_bytes()


# Every builtin Vela 5.2.0's legacy core has an NPU implementation for -> a model where Vela runs it on the NPU.
VELA_OPERATOR_MODELS: dict[str, Callable[[], bytes]] = {
    "ABS": lambda: unary("ABS"),
    "ADD": lambda: binary("ADD", "AddOptions", FusedActivationFunction=0),
    "ARG_MAX": arg_max,
    "AVERAGE_POOL_2D": lambda: pool("AVERAGE_POOL_2D"),
    "CONCATENATION": concatenation,
    "CONV_2D": conv,
    "DEPTHWISE_CONV_2D": lambda: conv("DEPTHWISE_CONV_2D"),
    "EXP": lambda: unary("EXP"),
    "EXPAND_DIMS": lambda: shaped("EXPAND_DIMS", (1, 8, 1, 16), [2], in_shape=(1, 8, 16)),
    "FULLY_CONNECTED": fully_connected,
    "HARD_SWISH": lambda: unary("HARD_SWISH"),
    "LEAKY_RELU": lambda: unary("LEAKY_RELU", options="LeakyReluOptions", Alpha=0.2),
    "LOGISTIC": lambda: unary("LOGISTIC", out_scale=1 / 256, out_zero=-128),
    "MAXIMUM": lambda: binary("MAXIMUM", same_quant=True),
    "MAX_POOL_2D": lambda: pool("MAX_POOL_2D"),
    "MEAN": mean,
    "MINIMUM": lambda: binary("MINIMUM", same_quant=True),
    "MIRROR_PAD": lambda: mirror_pad([[0, 0], [1, 2], [2, 1], [0, 0]], 0),
    "MUL": lambda: binary("MUL", "MulOptions", FusedActivationFunction=0),
    "PACK": pack,
    "PAD": lambda: shaped("PAD", (1, 10, 10, 16), [[[0, 0], [1, 1], [1, 1], [0, 0]]]),
    "PRELU": lambda: prelu(np.arange(-8, 8)),
    "QUANTIZE": quantize,
    "RELU": lambda: unary("RELU"),
    "RELU6": lambda: unary("RELU6"),
    "RELU_0_TO_1": lambda: unary("RELU_0_TO_1"),
    "RELU_N1_TO_1": lambda: unary("RELU_N1_TO_1"),
    "RESHAPE": lambda: shaped("RESHAPE", (1, 64, 16), [[1, 64, 16]]),
    "RESIZE_BILINEAR": lambda: resize("RESIZE_BILINEAR"),
    "RESIZE_NEAREST_NEIGHBOR": lambda: resize("RESIZE_NEAREST_NEIGHBOR"),
    "RSQRT": lambda: unary("RSQRT"),
    "SHAPE": shape_reshape,
    "SLICE": lambda: shaped("SLICE", (1, 4, 8, 16), [[0, 2, 0, 0], [1, 4, 8, 16]]),
    "SOFTMAX": softmax,
    "SPLIT": lambda: split("SPLIT"),
    "SPLIT_V": lambda: split("SPLIT_V"),
    "SQUARED_DIFFERENCE": lambda: binary("SQUARED_DIFFERENCE"),
    "SQUEEZE": lambda: shaped("SQUEEZE", (1, 8, 16), (), "SqueezeOptions", in_shape=(1, 8, 1, 16),
                              SqueezeDims=(2,)),
    "STRIDED_SLICE": strided_slice,
    "SUB": lambda: binary("SUB", "SubOptions", FusedActivationFunction=0),
    "TANH": lambda: unary("TANH", out_scale=1 / 128, out_zero=0),
    "TRANSPOSE": lambda: shaped("TRANSPOSE", (1, 8, 8, 16), [[0, 2, 1, 3]]),
    "TRANSPOSE_CONV": transpose_conv,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": corpus("dtln"),
    "UNPACK": unpack,
}


# The forms each newly lowered operator takes in Vela's graph optimiser, one model each.
VARIANTS: dict[str, Callable[[], bytes]] = {
    "abs_int16": lambda: unary("ABS", int16=True),
    "exp_int16": lambda: unary("EXP", int16=True),
    "exp_rank2": lambda: unary("EXP", (1, 40), seed=3),
    "relu_0_to_1_int16": lambda: unary("RELU_0_TO_1", int16=True),
    "relu_0_to_1_rescaled": lambda: unary("RELU_0_TO_1", out_scale=1 / 255, out_zero=-128),
    "prelu_zero_alpha": lambda: prelu([0] * 16),
    "prelu_one_alpha": lambda: prelu([25] * 16),
    "prelu_one_alpha_int16": lambda: prelu([25] * 16, int16=True),
    "prelu_one_negative_alpha_int16": lambda: prelu([-25] * 16, int16=True),
    "prelu_alpha_above_one": lambda: prelu(np.arange(-8, 8) * 12, alpha_scale=0.02),
    "prelu_alpha_activation": prelu_of_activation,
    "prelu_rank3": lambda: prelu(np.arange(16), shape=(1, 12, 16)),
    "mirror_pad_symmetric": lambda: mirror_pad([[0, 0], [2, 1], [1, 2], [0, 0]], 1),
    "mirror_pad_rows": lambda: mirror_pad([[0, 0], [1, 1], [0, 0], [0, 0]], 0),
    "mirror_pad_columns": lambda: mirror_pad([[0, 0], [0, 0], [3, 0], [0, 0]], 1),
    "mirror_pad_int16_rank3": lambda: mirror_pad([[1, 1], [2, 2], [0, 0]], 0, (6, 6, 8), int16=True),
    "arg_max_int64": lambda: arg_max(output="INT64"),
    "arg_max_rank2": lambda: arg_max((1, 100)),
    "arg_max_chunked": lambda: arg_max((1, 300, 240, 2)),
    "pack_axis0": lambda: pack(4, (8, 16), 0),
    "pack_last_axis": lambda: pack(2, (1, 8, 16), -1),
    "pack_vectors": lambda: pack(5, (16,), 0),
    "unpack_axis0": lambda: unpack((4, 1, 16), 0),
    "unpack_rank4": lambda: unpack((1, 2, 4, 8), 2),
    "unpack_dynamic_batch": lambda: unpack((4, 1, 16), 0, signature=(4, -1, 16)),
    "recurrent_stack": recurrent_stack,
}
