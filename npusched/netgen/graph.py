"""A small graph builder for int8 TFLite networks: layers in, frozen ``NetworkDef`` out.

Quantisation follows what the TFLite converter emits for int8 models: per-tensor int8 activations (zero point
-128 after a ReLU, near zero otherwise), symmetric per-channel int8 weights, int32 biases scaled by input scale x
weight scale, and the fixed output scales TFLite requires (LOGISTIC and SOFTMAX 1/256 with zero point -128,
L2_NORMALIZATION 1/128 with 0). Ops TFLite requires to keep their input's quantisation (pooling, resizing,
reshapes, concatenation) get it. The builder also keeps a running estimate of the NPU passes Vela will make,
which the architectures use as their size knob.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from npusched.netgen.flatbuffer import NetworkDef, OperatorDef, TensorDef

# Estimated NPU passes per operator in Vela 5.2.0 where it is not one (measured with `vela --verbose-schedule`):
# reshapes vanish, MEAN becomes a depthwise convolution and a MUL, int8 SOFTMAX a fixed chain of 31 passes, and a
# concatenation writes each input in its own pass (counted in ``concat``).
# A PAD (PyTorch-style exports) folds into the following convolution's hardware padding: no pass of its own.
_PASS_ESTIMATE = {"RESHAPE": 0, "EXPAND_DIMS": 0, "SQUEEZE": 0, "PAD": 0, "FILL": 0, "MEAN": 2, "SOFTMAX": 31,
                  "SQUARED_DIFFERENCE": 7}
# Lookup-table activations Vela fuses into the op producing their input when nothing else reads that input.
_LUT_OPERATORS = frozenset({"HARD_SWISH", "LOGISTIC", "RSQRT", "TANH"})
_LUT_FUSERS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "MUL",
                         "AVERAGE_POOL_2D", "MAX_POOL_2D"})
# Operators Vela 5.2.0 has no NPU implementation for: they run on the CPU and split the NPU work.
CPU_OPERATORS = frozenset({"L2_NORMALIZATION", "SPACE_TO_DEPTH", "DEPTH_TO_SPACE", "BATCH_MATMUL", "GELU",
                           "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "TILE"})
_ACTIVATIONS = {None: 0, "RELU": 1, "RELU6": 3}  # tflite.ActivationFunctionType values
_PADDING = {"SAME": 0, "VALID": 1}


@dataclass(frozen=True)
class Quant:
    """Per-tensor quantisation; ``bits`` 16 once it is an int16 activation's (16x8 networks: zero point 0)."""

    scale: float
    zero_point: int
    bits: int = 8

    def as_int16(self) -> Quant:
        """The int16 quantisation of the same real range (256 times finer, symmetric)."""
        return self if self.bits == 16 else Quant(float(np.float32(self.scale / 256)), 0, 16)


# The output quantisation TFLite fixes for int16 LOGISTIC, TANH and SOFTMAX.
INT16_UNIT = Quant(1 / 32768, 0, 16)


@dataclass(frozen=True)
class Act:
    """An int8 activation tensor of the graph being built; ``shape`` includes the batch of 1."""

    index: int
    shape: tuple[int, ...]
    quant: Quant

    @property
    def height(self) -> int:
        return self.shape[1]

    @property
    def width(self) -> int:
        return self.shape[2]

    @property
    def channels(self) -> int:
        return self.shape[-1]


def _same_out(size: int, stride: int) -> int:
    return -(-size // stride)


def torch_padding(shape: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int],
                  dilation: tuple[int, int]) -> tuple[int, int] | None:
    """PyTorch's symmetric ``padding`` per spatial axis (height, width) for a SAME convolution of a [1, H, W, C]
    map: dilation * (k - 1) // 2 on both sides, or None where the padded VALID output would not have the SAME
    output's shape (some even kernels)."""
    pads = tuple(d * (k - 1) // 2 for k, d in zip(kernel, dilation, strict=True))
    for size, k, s, d, pad in zip(shape[1:3], kernel, stride, dilation, pads, strict=True):
        if (size + 2 * pad - d * (k - 1) - 1) // s + 1 != _same_out(size, s):
            return None
    return pads[0], pads[1]


def _dilations(dilation: int | tuple[int, int]) -> tuple[int, int]:
    """(height, width) dilation factors from one factor for both or a pair."""
    return (dilation, dilation) if isinstance(dilation, int) else dilation


class GraphBuilder:
    """Accumulates tensors and operators; every layer method returns the new activation.

    All random choices come from the one seeded ``rng``, so the same calls give the same network.
    """

    def __init__(self, rng: np.random.Generator, keras_style: bool = False, torch_style: bool = False,
                 int16: bool = False) -> None:
        self.rng = rng
        # 16x8 quantisation (TFLite's int16 activations with int8 weights and int64 biases): every activation and
        # element-wise constant int16 with zero point 0, 256 times finer than the int8 variant's, whose random
        # numbers it draws.
        self.int16 = int16
        # Export as Keras does: a dynamic batch (-1 in every activation's shape signature), so reshapes and
        # transposed convolutions take shapes computed at run time, and image inputs rescaled by a MUL and an ADD.
        self.keras_style = keras_style
        # Export as PyTorch -> ONNX -> TensorFlow -> TFLite does: NCHW inputs transposed to NHWC, every convolution
        # VALID after an explicit PAD of PyTorch's symmetric padding, global average pooling as MEAN, 4-D outputs
        # transposed back to NCHW. None of it draws a random number: the layers are the plain variant's.
        self.torch_style = torch_style
        self.tensors: list[TensorDef] = []
        self.operators: list[OperatorDef] = []
        self.inputs: list[int] = []
        self.npu_passes = 0
        self._producer: dict[int, str] = {}
        self._readers: dict[int, int] = {}
        self._fused_lut_inputs: set[int] = set()
        self._count = 0

    # --- bookkeeping -------------------------------------------------------------------------------------------

    def _name(self, what: str) -> str:
        self._count += 1
        return f"net/{what}_{self._count}"

    def _add_tensor(self, tensor: TensorDef) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def _stored(self, quant: Quant) -> Quant:
        return quant.as_int16() if self.int16 else quant

    def _act(self, what: str, shape: Sequence[int], quant: Quant) -> Act:
        shape, quant = tuple(int(v) for v in shape), self._stored(quant)
        index = self._add_tensor(TensorDef(self._name(what), shape, "INT16" if self.int16 else "INT8", (quant.scale,),
                                           (quant.zero_point,), shape_signature=self._signature(shape)))
        return Act(index, shape, quant)

    def _activation_constant(self, what: str, values: np.ndarray, quant: Quant) -> int:
        """An int8 constant operand of an element-wise layer, or its int16 form (the same real values)."""
        if self.int16:
            values = np.clip(values.astype(np.int64) * 256 - quant.zero_point * 256, -32767, 32767).astype("<i2")
            quant = quant.as_int16()
        return self._add_tensor(TensorDef(self._name(what), values.shape, "INT16" if self.int16 else "INT8",
                                          (quant.scale,), (quant.zero_point,), data=values.tobytes()))

    def _signature(self, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        return (-1, *shape[1:]) if self.keras_style and shape else None

    def _const_int32(self, what: str, values: Sequence[int] | Sequence[Sequence[int]] | int) -> int:
        data = np.asarray(values, dtype="<i4")
        return self._add_tensor(TensorDef(self._name(what), data.shape, "INT32", data=data.tobytes()))

    def _const_int8(self, what: str, value: int, quant: Quant) -> int:
        """A scalar int8 constant (rank 0, as Keras writes the operands of element-wise layers)."""
        return self._activation_constant(what, np.asarray(value, dtype=np.int8), quant)

    # --- shape arithmetic as Keras exports it (batch dimension dynamic) ----------------------------------------

    def _shape_op(self, opcode: str, inputs: Sequence[int], what: str, shape: tuple[int, ...],
                  options: str | None = None, **fields: object) -> int:
        """An int32 operator of the run-time shape arithmetic; it is no NPU pass and reads no feature map's data,
        so the pass estimate and the LUT-fusion bookkeeping ignore it."""
        output = self._add_tensor(TensorDef(self._name(what), shape, "INT32"))
        self.operators.append(OperatorDef(opcode, tuple(inputs), (output,), options, tuple(fields.items())))
        return output

    def _runtime_dims(self, x: Act, axes: Sequence[int]) -> list[int]:
        """SHAPE of ``x``, then one STRIDED_SLICE (shrinking to a scalar) per axis: Keras's tf.shape(x)[axis]."""
        shape = self._shape_op("SHAPE", (x.index,), "shape", (len(x.shape),), "ShapeOptions", OutType=2)
        dims = []
        for axis in axes:
            begin, end, stride = (self._const_int32("strided_slice", (v,)) for v in (axis, axis + 1, 1))
            dims.append(self._shape_op("STRIDED_SLICE", (shape, begin, end, stride), "strided_slice", (),
                                       "StridedSliceOptions", BeginMask=0, EndMask=0, EllipsisMask=0,
                                       NewAxisMask=0, ShrinkAxisMask=1, Offset=False))
        return dims

    def _runtime_shape(self, parts: Sequence[int]) -> int:
        """PACK of scalar int32 tensors into the shape vector."""
        return self._shape_op("PACK", parts, "packed_shape", (len(parts),), "PackOptions", ValuesCount=len(parts),
                              Axis=0)

    def _op(self, opcode: str, inputs: Sequence[int], output: Act, options: str | None = None,
            **fields: object) -> Act:
        self.operators.append(OperatorDef(opcode, tuple(inputs), (output.index,), options, tuple(fields.items())))
        for index in inputs:
            self._readers[index] = self._readers.get(index, 0) + 1
            if index in self._fused_lut_inputs:  # a second reader: the activation can no longer be fused
                self._fused_lut_inputs.discard(index)
                self.npu_passes += 1
        self._producer[output.index] = opcode
        if opcode in _LUT_OPERATORS and self._readers[inputs[0]] == 1 and self._producer.get(inputs[0]) in _LUT_FUSERS:
            self._fused_lut_inputs.add(inputs[0])
        elif opcode not in CPU_OPERATORS:
            self.npu_passes += _PASS_ESTIMATE.get(opcode, 1)
        return output

    def output_quant(self, activation: str | None) -> Quant:
        """A plausible output quantisation: ReLU outputs start at zero (zero point -128), others straddle it."""
        scale = float(np.float32(self.rng.uniform(0.015, 0.09)))
        if activation is not None:
            return Quant(scale, -128)
        return Quant(scale, int(self.rng.integers(-24, 25)))

    def _weights(self, what: str, shape: tuple[int, ...], channel_axis: int) -> int:
        """Symmetric int8 weights with one scale per output channel (as TFLite's per-channel quantisation)."""
        values = self.rng.integers(-127, 128, size=shape, dtype=np.int8)
        channels = shape[channel_axis]
        scales = tuple(self.rng.uniform(0.002, 0.012, size=channels).astype(np.float32).tolist())
        return self._add_tensor(TensorDef(self._name(what), shape, "INT8", scales, (0,) * channels, channel_axis,
                                          values.tobytes()))

    def _bias(self, what: str, x: Act, weights: int) -> int:
        """int32 (int64 for int16 inputs, scaled so the real values are the int8 variant's), scale = input x
        weight scale."""
        scales = tuple((np.asarray(self.tensors[weights].scales) * x.quant.scale).astype(np.float32).tolist())
        values = self.rng.integers(-4096, 4097, size=len(scales))
        data = (values * 256).astype("<i8") if x.quant.bits == 16 else values.astype("<i4")
        return self._add_tensor(TensorDef(self._name(what), (len(scales),), "INT64" if x.quant.bits == 16 else "INT32",
                                          scales, (0,) * len(scales), 0, data.tobytes()))

    # --- graph ends ----------------------------------------------------------------------------------------------

    def input(self, shape: Sequence[int]) -> Act:
        """The network input; Keras-style image inputs (3 channels) are then rescaled as a Rescaling layer does:
        x * scale + offset, a MUL and an ADD on the channel-poor map (constants fixed, so the rest of the network
        draws the same numbers as the plain variant). A torch-style 4-D input [1, H, W, C] is [1, C, H, W] (NCHW,
        as PyTorch takes it; audio's [1, 1, T, F] is [1, F, 1, T]) followed by a TRANSPOSE to NHWC, which Vela
        leaves to the CPU (not an NPU pass); other ranks (the transformer's [1, T, F] sequence) are as they are."""
        quant = Quant(float(np.float32(1 / 128)), 0)
        if self.torch_style and len(shape) == 4:
            nchw = self._act("input", (shape[0], shape[3], shape[1], shape[2]), quant)
            self.inputs.append(nchw.index)
            x = self.transpose(nchw, (0, 2, 3, 1))
            self.npu_passes -= 1  # on the CPU, and so the stages are sized as in the plain variant
            return x
        x = self._act("input", shape, quant)
        self.inputs.append(x.index)
        if self.keras_style and x.channels == 3:
            scale = self._const_int8("rescale_scale", 127, Quant(float(np.float32(1 / 127)), 0))
            offset = self._const_int8("rescale_offset", -64, Quant(float(np.float32(1 / 64)), 0))
            scaled = self._op("MUL", (x.index, scale), self._act("rescale_mul", x.shape, x.quant), "MulOptions",
                              FusedActivationFunction=0)
            y = self._op("ADD", (scaled.index, offset), self._act("rescale_add", x.shape,
                                                                Quant(float(np.float32(1 / 64)), 0)),
                         "AddOptions", FusedActivationFunction=0)
            self.npu_passes -= 2  # not counted, so the stages are sized (and drawn) as in the plain variant
            return y
        return x

    def output(self, x: Act) -> Act:
        """The network output: a torch-style 4-D map (a U-Net's) goes back to NCHW by TRANSPOSE, as PyTorch
        returns it (on the CPU in Vela); other outputs as they are."""
        if self.torch_style and len(x.shape) == 4:
            x = self.transpose(x, (0, 3, 1, 2))
            self.npu_passes -= 1
        return x

    def network(self, outputs: Sequence[Act], description: str) -> NetworkDef:
        return NetworkDef(tuple(self.tensors), tuple(self.operators), tuple(self.inputs),
                          tuple(o.index for o in outputs), description)

    # --- layers with weights -----------------------------------------------------------------------------------

    def conv(self, x: Act, filters: int, kernel: tuple[int, int] = (1, 1), stride: tuple[int, int] = (1, 1),
             activation: str | None = "RELU", padding: str = "SAME", dilation: int | tuple[int, int] = 1,
             quant: Quant | None = None, groups: int = 1) -> Act:
        """CONV_2D with OHWI weights; ``kernel``, ``stride`` and ``dilation`` are (height, width). With ``groups``
        > 1 the kernel covers IFM depth / groups, as the converter exports Keras's Conv2D(groups=G); Vela splits it
        into a convolution per group (counted so, with a copy each into their concatenation). A dilated one is
        exported Keras-style as TF writes it (``_space_to_batch_form``)."""
        kh, kw = kernel
        weights = self._weights("weights", (filters, kh, kw, x.channels // groups), 0)
        bias = self._bias("bias", x, weights)
        quant = quant or self.output_quant(activation)

        def make(x: Act, padding: str, dilation: tuple[int, int]) -> Act:
            out_h, out_w = self._spatial(x, kernel, stride, padding, dilation)
            x, padding = self._torch_pad(x, kernel, stride, padding, dilation)
            y = self._act("conv", (x.shape[0], out_h, out_w, filters), quant)
            return self._op("CONV_2D", (x.index, weights, bias), y, "Conv2DOptions", Padding=_PADDING[padding],
                            StrideW=stride[1], StrideH=stride[0], FusedActivationFunction=_ACTIVATIONS[activation],
                            DilationWFactor=dilation[1], DilationHFactor=dilation[0])

        y = self._space_to_batch_form(x, kernel, padding, _dilations(dilation), make)
        self.npu_passes += 2 * (groups - 1)
        return y

    def depthwise(self, x: Act, kernel: tuple[int, int] = (3, 3), stride: tuple[int, int] = (1, 1),
                  activation: str | None = "RELU", padding: str = "SAME", multiplier: int = 1,
                  dilation: int | tuple[int, int] = 1) -> Act:
        """DEPTHWISE_CONV_2D with 1HWC weights (per-channel scales along the last axis)."""
        kh, kw = kernel
        channels = x.channels * multiplier
        weights = self._weights("dw_weights", (1, kh, kw, channels), 3)
        bias = self._bias("dw_bias", x, weights)
        quant = self.output_quant(activation)

        def make(x: Act, padding: str, dilation: tuple[int, int]) -> Act:
            out_h, out_w = self._spatial(x, kernel, stride, padding, dilation)
            x, padding = self._torch_pad(x, kernel, stride, padding, dilation)
            y = self._act("depthwise", (x.shape[0], out_h, out_w, channels), quant)
            return self._op("DEPTHWISE_CONV_2D", (x.index, weights, bias), y, "DepthwiseConv2DOptions",
                            Padding=_PADDING[padding], StrideW=stride[1], StrideH=stride[0],
                            DepthMultiplier=multiplier, FusedActivationFunction=_ACTIVATIONS[activation],
                            DilationWFactor=dilation[1], DilationHFactor=dilation[0])

        return self._space_to_batch_form(x, kernel, padding, _dilations(dilation), make)

    def _space_to_batch_form(self, x: Act, kernel: tuple[int, int], padding: str, dilation: tuple[int, int],
                             make: Callable[[Act, str, tuple[int, int]], Act]) -> Act:
        """``make(x, padding, dilation)``, the convolution; Keras-style and dilated, as TF writes a dilated
        convolution the converter does not fuse: SPACE_TO_BATCH_ND by the dilation (paddings: the SAME padding
        of the dilated kernel, or none for VALID, plus what makes each side a multiple of the block), the
        undilated convolution VALID on the d x d phases, BATCH_TO_SPACE_ND cropping the extra."""
        if not self.keras_style or dilation == (1, 1):
            return make(x, padding, dilation)
        paddings, crops = [], []
        for size, k, d in zip(x.shape[1:3], kernel, dilation, strict=True):
            total = d * (k - 1) if padding == "SAME" else 0
            extra = -(size + total) % d
            paddings.append((total // 2, total - total // 2 + extra))
            crops.append((0, extra))
        phases = make(self.space_to_batch(x, dilation, paddings), "VALID", (1, 1))
        return self.batch_to_space(phases, dilation, crops)

    def transpose_conv(self, x: Act, filters: int, kernel: int = 3, stride: int = 2) -> Act:
        """TRANSPOSE_CONV with SAME padding (output = input x stride), with its optional bias."""
        weights = self._weights("tconv_weights", (filters, kernel, kernel, x.channels), 0)
        bias = self._bias("tconv_bias", x, weights)
        out_shape = (1, x.height * stride, x.width * stride, filters)
        if self.keras_style:  # Conv2DTranspose: (batch, height * stride, width * stride, filters) at run time
            batch, height, width = self._runtime_dims(x, (0, 1, 2))
            factor = self._const_int32("stride", stride)
            scaled = [self._shape_op("MUL", (d, factor), "mul", (), "MulOptions", FusedActivationFunction=0)
                      for d in (height, width)]
            shape = self._runtime_shape((batch, *scaled, self._const_int32("filters", filters)))
        else:
            shape = self._const_int32("output_shape", out_shape)
        y = self._act("tconv", out_shape, self.output_quant(None))
        return self._op("TRANSPOSE_CONV", (shape, weights, x.index, bias), y, "TransposeConvOptions",
                        Padding=_PADDING["SAME"], StrideW=stride, StrideH=stride)

    def fc_params(self, x: Act, units: int) -> tuple[int, int]:
        """Weights and bias of a FULLY_CONNECTED layer reading ``x`` (shared by the steps of an unrolled one)."""
        weights = self._weights("fc_weights", (units, x.channels), 0)
        return weights, self._bias("fc_bias", x, weights)

    def fully_connected(self, x: Act, units: int, activation: str | None = None,
                        params: tuple[int, int] | None = None, quant: Quant | None = None) -> Act:
        """FULLY_CONNECTED on a [1, N] input, giving [1, units]; ``params`` its weights and bias if shared."""
        weights, bias = params or self.fc_params(x, units)
        y = self._act("fc", (1, units), quant or self.output_quant(activation))
        return self._op("FULLY_CONNECTED", (x.index, weights, bias), y, "FullyConnectedOptions",
                        FusedActivationFunction=_ACTIVATIONS[activation])

    def _torch_pad(self, x: Act, kernel: tuple[int, int], stride: tuple[int, int], padding: str,
                   dilation: tuple[int, int]) -> tuple[Act, str]:
        """The convolution's input and padding as a PyTorch export writes them: a SAME convolution becomes VALID,
        after a PAD of PyTorch's symmetric padding where there is any (1 x 1 kernels need none). Kept SAME where
        that padding would not give the SAME output's shape; plain and Keras-style exports are unchanged."""
        if not self.torch_style or padding != "SAME":
            return x, padding
        pads = torch_padding(x.shape, kernel, stride, dilation)
        if pads is None:
            return x, padding
        if pads != (0, 0):
            x = self.pad(x, ((0, 0), (pads[0], pads[0]), (pads[1], pads[1]), (0, 0)))
        return x, "VALID"

    @staticmethod
    def _spatial(x: Act, kernel: tuple[int, int], stride: tuple[int, int], padding: str,
                 dilation: tuple[int, int]) -> tuple[int, int]:
        if padding == "SAME":
            return _same_out(x.height, stride[0]), _same_out(x.width, stride[1])
        extent_h, extent_w = ((k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True))
        return (x.height - extent_h) // stride[0] + 1, (x.width - extent_w) // stride[1] + 1

    # --- layers without weights --------------------------------------------------------------------------------

    def pool(self, x: Act, kind: str, kernel: tuple[int, int], stride: tuple[int, int],
             padding: str = "SAME") -> Act:
        """AVERAGE_POOL_2D or MAX_POOL_2D (``kind`` "AVERAGE" / "MAX"); the output keeps the input's quantisation."""
        out_h, out_w = self._spatial(x, kernel, stride, padding, (1, 1))
        y = self._act(f"{kind.lower()}_pool", (1, out_h, out_w, x.channels), x.quant)
        return self._op(f"{kind}_POOL_2D", (x.index,), y, "Pool2DOptions", Padding=_PADDING[padding],
                        StrideW=stride[1], StrideH=stride[0], FilterWidth=kernel[1], FilterHeight=kernel[0])

    def global_pool(self, x: Act) -> Act:
        """Global average pooling keeping its input's quantisation: AVERAGE_POOL_2D over the whole map, or, torch
        style, MEAN over height and width with keep_dims (what adaptive_avg_pool2d exports as)."""
        if self.torch_style:
            axes = self._const_int32("mean_axes", (1, 2))
            return self._op("MEAN", (x.index, axes), self._act("mean", (1, 1, 1, x.channels), x.quant),
                            "ReducerOptions", KeepDims=True)
        return self.pool(x, "AVERAGE", (x.height, x.width), (1, 1), "VALID")

    def pad(self, x: Act, paddings: Sequence[tuple[int, int]]) -> Act:
        """PAD by constant [before, after] pairs per axis (an INT32 [rank, 2] tensor); the output keeps the input's
        quantisation (as TFLite requires), so it pads with the zero point. Folded into the following convolution's
        hardware padding by Vela: no NPU pass."""
        data = np.asarray(paddings, dtype="<i4")
        constant = self._add_tensor(TensorDef(self._name("paddings"), data.shape, "INT32", data=data.tobytes()))
        shape = tuple(s + int(before) + int(after) for s, (before, after) in zip(x.shape, paddings, strict=True))
        return self._op("PAD", (x.index, constant), self._act("pad", shape, x.quant))

    def mean(self, x: Act) -> Act:
        """MEAN over height and width with keep_dims: [1, 1, 1, C]."""
        axes = self._const_int32("mean_axes", (1, 2))
        y = self._act("mean", (1, 1, 1, x.channels), self.output_quant(None))
        return self._op("MEAN", (x.index, axes), y, "ReducerOptions", KeepDims=True)

    def add(self, a: Act, b: Act, activation: str | None = None, quant: Quant | None = None) -> Act:
        y = self._act("add", a.shape, quant or self.output_quant(activation))
        return self._op("ADD", (a.index, b.index), y, "AddOptions", FusedActivationFunction=_ACTIVATIONS[activation])

    def mul(self, a: Act, b: Act) -> Act:
        """Elementwise MUL; ``b`` may broadcast (e.g. a [1, 1, 1, C] gate over a feature map)."""
        y = self._act("mul", a.shape, self.output_quant(None))
        return self._op("MUL", (a.index, b.index), y, "MulOptions", FusedActivationFunction=0)

    def concat(self, parts: Sequence[Act], quant: Quant | None = None) -> Act:
        """CONCATENATION along channels. TFLite's int8 kernels want every input quantised as the output, so the
        callers make the parts with ``quant`` (default: the first part's)."""
        shape = (*parts[0].shape[:-1], sum(p.channels for p in parts))
        y = self._act("concat", shape, quant or parts[0].quant)
        self._op("CONCATENATION", [p.index for p in parts], y, "ConcatenationOptions", Axis=len(shape) - 1,
                 FusedActivationFunction=0)
        self.npu_passes += len(parts) - 1
        return y

    def resize(self, x: Act, factor: int, kind: str, half_pixel_centers: bool = False) -> Act:
        """RESIZE_NEAREST_NEIGHBOR or RESIZE_BILINEAR (``kind`` "NEAREST" / "BILINEAR") by an integer factor."""
        size = self._const_int32("size", (x.height * factor, x.width * factor))
        y = self._act("resize", (1, x.height * factor, x.width * factor, x.channels), x.quant)
        if kind == "NEAREST":
            return self._op("RESIZE_NEAREST_NEIGHBOR", (x.index, size), y, "ResizeNearestNeighborOptions",
                            AlignCorners=False, HalfPixelCenters=half_pixel_centers)
        return self._op("RESIZE_BILINEAR", (x.index, size), y, "ResizeBilinearOptions", AlignCorners=False,
                        HalfPixelCenters=half_pixel_centers)

    def hard_swish(self, x: Act) -> Act:
        return self._op("HARD_SWISH", (x.index,), self._act("hard_swish", x.shape, self.output_quant(None)))

    def logistic(self, x: Act) -> Act:
        y = self._act("logistic", x.shape, INT16_UNIT if self.int16 else Quant(1 / 256, -128))
        return self._op("LOGISTIC", (x.index,), y)

    def reshape(self, x: Act, shape: Sequence[int]) -> Act:
        if self.keras_style:  # Reshape layer: tf.reshape(x, (tf.shape(x)[0], *target)) at run time
            batch = self._runtime_dims(x, (0,))
            new_shape = self._runtime_shape(batch + [self._const_int32("dim", d) for d in shape[1:]])
        else:
            new_shape = self._const_int32("new_shape", shape)
        return self._op("RESHAPE", (x.index, new_shape), self._act("reshape", shape, x.quant))

    def softmax(self, x: Act) -> Act:
        y = self._act("softmax", x.shape, INT16_UNIT if self.int16 else Quant(1 / 256, -128))
        return self._op("SOFTMAX", (x.index,), y, "SoftmaxOptions", Beta=1.0)

    # --- transformer layers: activations of any rank (Keras's [1, T, D] sequences, [1, H, T, d] heads) -------

    def _const_vector_int8(self, what: str, length: int, quant: Quant) -> int:
        """A 1-D int8 constant (a layer norm's gamma or beta), broadcast along the last axis."""
        return self._activation_constant(what, self.rng.integers(-127, 128, size=length).astype(np.int8), quant)

    def scalar(self, what: str, value: float) -> tuple[int, Quant]:
        """A rank-0 int8 constant holding ``value`` (as Keras writes the operands of element-wise layers)."""
        quant = Quant(float(np.float32(max(abs(value), 1e-6) / 127)), 0)
        return self._const_int8(what, int(np.sign(value)) * 127, quant), quant

    def dense(self, x: Act, units: int, activation: str | None = None) -> Act:
        """Keras Dense on a [1, T, D] sequence: FULLY_CONNECTED with keep_num_dims, giving [1, T, units]."""
        weights = self._weights("dense_weights", (units, x.channels), 0)
        bias = self._bias("dense_bias", x, weights)
        y = self._act("dense", (*x.shape[:-1], units), self.output_quant(activation))
        return self._op("FULLY_CONNECTED", (x.index, weights, bias), y, "FullyConnectedOptions",
                        FusedActivationFunction=_ACTIVATIONS[activation], KeepNumDims=True)

    def mean_axis(self, x: Act, axis: int, keep_dims: bool, quant: Quant | None = None) -> Act:
        """MEAN over one axis (negative counts from the end), as Keras's reductions export."""
        rank = len(x.shape)
        axis %= rank
        shape = tuple(1 if d == axis else s for d, s in enumerate(x.shape)) if keep_dims else \
            tuple(s for d, s in enumerate(x.shape) if d != axis)
        axes = self._const_int32("mean_axes", (axis,))
        y = self._act("mean", shape, quant or self.output_quant(None))
        return self._op("MEAN", (x.index, axes), y, "ReducerOptions", KeepDims=keep_dims)

    def binary(self, opcode: str, a: int | Act, b: int | Act, shape: tuple[int, ...],
               quant: Quant | None = None) -> Act:
        """ADD, SUB, MUL or SQUARED_DIFFERENCE of two tensors (activations or constant indices) giving ``shape``."""
        y = self._act(opcode.lower(), shape, quant or self.output_quant(None))
        inputs = tuple(t.index if isinstance(t, Act) else t for t in (a, b))
        if opcode == "SQUARED_DIFFERENCE":
            return self._op(opcode, inputs, y, "SquaredDifferenceOptions")
        options = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[opcode]
        return self._op(opcode, inputs, y, options, FusedActivationFunction=0)

    def layer_norm_constants(self, channels: int) -> tuple[int, int, Quant]:
        """Gamma and beta of a layer norm (int8 vectors, as the converter quantises them) and beta's quant."""
        gamma = self._const_vector_int8("gamma", channels, Quant(float(np.float32(1 / 127)), 0))
        beta_quant = Quant(float(np.float32(0.5 / 127)), 0)
        return gamma, self._const_vector_int8("beta", channels, beta_quant), beta_quant

    def rsqrt(self, x: Act) -> Act:
        return self._op("RSQRT", (x.index,), self._act("rsqrt", x.shape, self.output_quant(None)))

    def tanh(self, x: Act) -> Act:
        """TANH; TFLite fixes its int8 output at scale 1/128, zero point 0."""
        return self._op("TANH", (x.index,), self._act("tanh", x.shape, INT16_UNIT if self.int16 else Quant(1 / 128, 0)))

    def gelu(self, x: Act, approximate: bool) -> Act:
        """The TFLite GELU operator (what the converter fuses Keras's gelu into)."""
        y = self._act("gelu", x.shape, self.output_quant(None))
        return self._op("GELU", (x.index,), y, "GeluOptions", Approximate=approximate)

    def transpose(self, x: Act, perm: Sequence[int]) -> Act:
        """TRANSPOSE by a constant permutation; the output keeps the input's quantisation, as TFLite requires."""
        permutation = self._const_int32("perm", tuple(perm))
        y = self._act("transpose", tuple(x.shape[p] for p in perm), x.quant)
        return self._op("TRANSPOSE", (x.index, permutation), y, "TransposeOptions")

    def batch_matmul(self, a: Act, b: Act, adj_y: bool = False) -> Act:
        """BATCH_MATMUL of [..., M, K] by [..., K, N] (or [..., N, K] with ``adj_y``)."""
        n = b.shape[-2] if adj_y else b.shape[-1]
        y = self._act("batch_matmul", (*a.shape[:-1], n), self.output_quant(None))
        return self._op("BATCH_MATMUL", (a.index, b.index), y, "BatchMatMulOptions", AdjX=False, AdjY=adj_y,
                        AsymmetricQuantizeInputs=False)

    # --- operators Vela leaves to the CPU ---------------------------------------------------------------------

    def l2_normalization(self, x: Act) -> Act:
        y = self._act("l2_norm", x.shape, Quant(1 / 128, 0))
        return self._op("L2_NORMALIZATION", (x.index,), y, "L2NormOptions", FusedActivationFunction=0)

    def space_to_depth(self, x: Act, block: int = 2) -> Act:
        y = self._act("space_to_depth", (1, x.height // block, x.width // block, x.channels * block * block), x.quant)
        return self._op("SPACE_TO_DEPTH", (x.index,), y, "SpaceToDepthOptions", BlockSize=block)

    def depth_to_space(self, x: Act, block: int = 2) -> Act:
        y = self._act("depth_to_space", (1, x.height * block, x.width * block, x.channels // (block * block)),
                      x.quant)
        return self._op("DEPTH_TO_SPACE", (x.index,), y, "DepthToSpaceOptions", BlockSize=block)

    def space_to_batch(self, x: Act, block: Sequence[int], paddings: Sequence[tuple[int, int]]) -> Act:
        """SPACE_TO_BATCH_ND of a 3-D [B, T, C] or 4-D [B, H, W, C] map by ``block`` over its spatial axes, after
        zero-point ``paddings``; the output keeps the input's quantisation."""
        spatial = tuple((s + p0 + p1) // b for s, b, (p0, p1) in zip(x.shape[1:], block, paddings, strict=False))
        shape = (x.shape[0] * int(np.prod(block)), *spatial, *x.shape[1 + len(block):])
        inputs = (x.index, self._const_int32("block_shape", tuple(block)),
                  self._const_int32("paddings", tuple(tuple(p) for p in paddings)))
        return self._op("SPACE_TO_BATCH_ND", inputs, self._act("space_to_batch", shape, x.quant),
                        "SpaceToBatchNDOptions")

    def batch_to_space(self, x: Act, block: Sequence[int], crops: Sequence[tuple[int, int]]) -> Act:
        """BATCH_TO_SPACE_ND: the inverse of ``space_to_batch``, then ``crops`` cut from each spatial axis."""
        spatial = tuple(s * b - c0 - c1 for s, b, (c0, c1) in zip(x.shape[1:], block, crops, strict=False))
        shape = (x.shape[0] // int(np.prod(block)), *spatial, *x.shape[1 + len(block):])
        inputs = (x.index, self._const_int32("block_shape", tuple(block)),
                  self._const_int32("crops", tuple(tuple(c) for c in crops)))
        return self._op("BATCH_TO_SPACE_ND", inputs, self._act("batch_to_space", shape, x.quant),
                        "BatchToSpaceNDOptions")

    def tile(self, x: Act, multiples: Sequence[int]) -> Act:
        shape = tuple(s * m for s, m in zip(x.shape, multiples, strict=True))
        return self._op("TILE", (x.index, self._const_int32("multiples", tuple(multiples))),
                        self._act("tile", shape, x.quant), "TileOptions")

    # --- Keras 3 / TF 2.x export forms: reshapes by one axis, Conv1D, UpSampling2D -----------------------------

    def expand_dims(self, x: Act, axis: int) -> Act:
        shape = (*x.shape[:axis], 1, *x.shape[axis:])
        return self._op("EXPAND_DIMS", (x.index, self._const_int32("axis", axis)),
                        self._act("expand_dims", shape, x.quant), "ExpandDimsOptions")

    def squeeze(self, x: Act, axis: int) -> Act:
        shape = x.shape[:axis] + x.shape[axis + 1:]
        return self._op("SQUEEZE", (x.index,), self._act("squeeze", shape, x.quant), "SqueezeOptions",
                        SqueezeDims=(axis,))

    def causal_conv1d(self, x: Act, filters: int, kernel: int, dilation: int = 1,
                      activation: str | None = "RELU") -> Act:
        """Keras's Conv1D(padding="causal"): a PAD of (kernel - 1) x dilation steps before the sequence, then a
        VALID convolution along time. A plain (and PyTorch-style) export is 4-D [1, 1, T, C] with a dilated
        CONV_2D; a Keras-style one is 3-D [1, T, C], as TF writes Conv1D: EXPAND_DIMS to [B, 1, T, C], CONV_2D,
        SQUEEZE, and a dilated one inside SPACE_TO_BATCH_ND ... BATCH_TO_SPACE_ND over time (block = the
        dilation) when TF cannot use the dilation itself. Same weights in every form."""
        pad = (kernel - 1) * dilation
        if len(x.shape) == 4:
            if pad:
                x = self.pad(x, ((0, 0), (0, 0), (pad, 0), (0, 0)))
            return self.conv(x, filters, (1, kernel), activation=activation, padding="VALID", dilation=(1, dilation))
        if pad:
            x = self.pad(x, ((0, 0), (pad, 0), (0, 0)))
        extra = -x.shape[1] % dilation
        inner = self.space_to_batch(x, (dilation,), ((0, extra),)) if dilation > 1 else x
        y = self.squeeze(self.conv(self.expand_dims(inner, 1), filters, (1, kernel), activation=activation,
                                   padding="VALID"), 1)
        return self.batch_to_space(y, (dilation,), ((0, extra),)) if dilation > 1 else y

    def upsample_nearest(self, x: Act, factor: int) -> Act:
        """Nearest up-sampling by ``factor``: RESIZE_NEAREST_NEIGHBOR; Keras-style, UpSampling2D as Keras 3 writes
        it (``ops.repeat`` along the height, then the width: EXPAND_DIMS -> TILE -> RESHAPE each)."""
        if not self.keras_style:
            return self.resize(x, factor, "NEAREST")
        for axis in (1, 2):
            multiples = [1] * (len(x.shape) + 1)
            multiples[axis + 1] = factor
            shape = list(x.shape)
            shape[axis] *= factor
            x = self.reshape(self.tile(self.expand_dims(x, axis + 1), multiples), shape)
        self.npu_passes += 1  # one RESIZE in the plain variant, so the stages are sized as there
        return x

    # --- recurrent layers unrolled, as Keras writes GRU(unroll=True) ------------------------------------------

    def _multi_op(self, opcode: str, inputs: Sequence[int], outputs: Sequence[Act], options: str,
                  **fields: object) -> list[Act]:
        """An operator with several outputs (SPLIT, UNPACK): reads of slices, no NPU pass of its own."""
        self.operators.append(OperatorDef(opcode, tuple(inputs), tuple(o.index for o in outputs), options,
                                          tuple(fields.items())))
        for index in inputs:
            self._readers[index] = self._readers.get(index, 0) + 1
        for output in outputs:
            self._producer[output.index] = opcode
        return list(outputs)

    def unpack(self, x: Act, axis: int) -> list[Act]:
        """UNPACK along ``axis``: its length of tensors without that axis, each keeping the quantisation."""
        shape = x.shape[:axis] + x.shape[axis + 1:]
        parts = [self._act("unpack", shape, x.quant) for _ in range(x.shape[axis])]
        return self._multi_op("UNPACK", (x.index,), parts, "UnpackOptions", Num=len(parts), Axis=axis)

    def split(self, x: Act, parts: int, axis: int = -1) -> list[Act]:
        """SPLIT into ``parts`` equal slices along ``axis`` (a constant axis input first, as TFLite has it)."""
        axis %= len(x.shape)
        shape = tuple(s // parts if d == axis else s for d, s in enumerate(x.shape))
        outputs = [self._act("split", shape, x.quant) for _ in range(parts)]
        return self._multi_op("SPLIT", (self._const_int32("split_axis", axis), x.index), outputs, "SplitOptions",
                              NumSplits=parts)

    def pack(self, parts: Sequence[Act], axis: int) -> Act:
        """PACK along a new ``axis``; TFLite's int8 kernel wants every part quantised as the output (the first's)."""
        shape = (*parts[0].shape[:axis], len(parts), *parts[0].shape[axis:])
        y = self._act("pack", shape, parts[0].quant)
        self._op("PACK", [p.index for p in parts], y, "PackOptions", ValuesCount=len(parts), Axis=axis)
        self.npu_passes += len(parts) - 1  # each part written in its own pass, as a concatenation's
        return y

    def zeros(self, shape: tuple[int, ...], quant: Quant) -> Act:
        """A zero state: a constant of the zero point, or, Keras-style (the batch known at run time only), FILL of a
        run-time [batch, ...] shape with a rank-0 zero, as tf.zeros((tf.shape(x)[0], units)) exports."""
        if not self.keras_style:
            zeros = self._activation_constant("zeros", np.full(shape, quant.zero_point, dtype=np.int8), quant)
            return Act(zeros, shape, self._stored(quant))
        batch = self._runtime_dims(Act(self.inputs[0], self.tensors[self.inputs[0]].shape, quant), (0,))
        dims = self._runtime_shape(batch + [self._const_int32("dim", d) for d in shape[1:]])
        value = self._const_int8("zero", quant.zero_point, quant)
        return self._op("FILL", (dims, value), self._act("fill", shape, quant), "FillOptions")
