"""ARG_MAX over the depth as Vela legacy's graph optimiser rewrites it. A mixin of ``GraphRewriter``.

The NPU has no arg-max, so Vela computes one with a maximum: a 1x1 depthwise convolution widens every value to
int16 and shifts it 7 bits left, its bias adding the channel's index counted from the end (so the lowest index wins
a tie); MaxPools over the channels (the map read as [1, H*W, C, 1], in chunks of at most 65536 rows) keep the
largest, and their 16-bit table turns the low 7 bits back into the index; a 1x1 depthwise convolution widens that
to int32 (an int64 OFM takes two more: the int32 pairs copied as int16, widened again, copied out). Ops, names and
tensors are Vela's, so the passes and their order are the ones its scheduler sees.
"""

from __future__ import annotations

import numpy as np

from npusched.ir import ConstTensor, DataType, Quantization, Shape4D
from npusched.lowering.netgraph import Activation, WorkingOp, WorkingTensor, const_tensor

_IDENTITY = Quantization(scale=(1.0,), zero_point=(0,))
# A 1x1 depthwise convolution with unit stride, no padding and no dilation.
_POINTWISE = {"padding": "VALID", "stride_h": 1, "stride_w": 1, "strides": (1, 1, 1, 1), "depth_multiplier": 1,
              "channel_multiplier": 1, "dilation_h_factor": 1, "dilation_w_factor": 1, "dilation": (1, 1, 1, 1),
              "explicit_padding": None}
# The MaxPool's height is H*W rows of the IFM: a chunk reads at most this many.
_MAX_ROWS = 2 ** 16
# The index sits in the low 7 bits of the maximum (channels are at most 127).
_INDEX_BITS = 7


def _index_table(channels: int) -> ConstTensor:
    """The MaxPool's 16-bit table: every one of the 512 words has base channels - 1 and slope -128, which maps a
    maximum (value << 7) + (channels - 1 - index) to the index."""
    word = ((-(1 << _INDEX_BITS) & 0xFFFF) << 16) + channels - 1
    values = np.full((1, 1, 1, 512), word, dtype=np.int64).astype(np.uint32).view(np.int32)
    values.setflags(write=False)
    return ConstTensor(name="maxpool_LUT_extract_7_LSB", shape=(1, 1, 1, 512), dtype=DataType.int32,
                       quantization=Quantization(), values=values)


def _widening(name: str, ifm: WorkingTensor, ofm: WorkingTensor, tflite_op: str) -> WorkingOp:
    """A 1x1 depthwise convolution by 1 that copies ``ifm`` into the wider type of ``ofm`` (Vela's cast op)."""
    op = WorkingOp("DepthwiseConv2DBias", name, attrs=dict(_POINTWISE), tflite_op=tflite_op)
    op.add_input(ifm)
    channels = ifm.shape[-1]
    weights = const_tensor(name + "_weights", [1, 1, 1, channels], DataType.uint8, np.ones(channels), _IDENTITY)
    weights._dw_reordered = True  # type: ignore[attr-defined]  # already in the reordered layout
    op.add_input(weights)
    bias_type = DataType.int64 if ifm.dtype == DataType.int16 else DataType.int32
    op.add_input(const_tensor(name + "_bias", [channels], bias_type, [0] * channels))
    op.set_output(ofm)
    op.set_ifm_ofm_shapes()
    return op


def _memcpy(name: str, ifm: WorkingTensor, ofm: WorkingTensor, tflite_op: str) -> WorkingOp:
    op = WorkingOp("Memcpy", name, tflite_op=tflite_op)
    op.add_input(ifm)
    op.set_output(ofm)
    op.set_ifm_ofm_shapes()
    return op


class ArgMaxRewrites:
    """ARG_MAX's rewrite."""

    @staticmethod
    def convert_argmax(op: WorkingOp) -> WorkingOp:
        if op.type != "ArgMax":
            return op
        ifm, ofm = op.inputs[0], op.outputs[0]
        if ifm is None:
            return op
        tflite_op, name = op.tflite_op, op.name
        ofm.shape = [*ofm.shape, 1]
        ofm.ops = []
        n, h, w, c = Shape4D.from_list(ifm.shape).as_list()
        # The ArgMax itself becomes the shifting depthwise convolution.
        op.name, op.type = f"{name}_depthwise_conv_SHL_7", "DepthwiseConv2DBias"
        op.attrs.update(_POINTWISE)
        op.inputs = []
        op.add_input(ifm)
        op.add_input(const_tensor("weights", [1, 1, 1, c], DataType.uint8, np.full(c, 1 << _INDEX_BITS), _IDENTITY))
        op.add_input(const_tensor(op.name + "_bias", [c], DataType.int64, list(reversed(range(c)))))
        shifted = WorkingTensor(name="int16_and_shifted_7_bits_left", shape=[n, h, w, c], dtype=DataType.int16,
                                quantization=ifm.quantization)
        op.set_output(shifted)
        op.set_ifm_ofm_shapes()
        ifm_shape = op.ifm_shapes[0]
        assert ifm_shape is not None  # set_ifm_ofm_shapes gave the IFM its shape
        rows = _MAX_ROWS // ifm_shape.width
        heights = [rows] * (ifm_shape.height // rows)
        if ifm_shape.height % rows:
            heights.append(ifm_shape.height % rows)
        maxima = WorkingTensor(name="argmax_maxpool", shape=[1, ifm_shape.height * ifm_shape.width, 1, 1],
                               dtype=DataType.int16, quantization=_IDENTITY)
        table = _index_table(ifm_shape.depth)
        for index, height in enumerate(heights):
            _chunk_maxpool(index, height, sum(heights[:index]), shifted, maxima, ifm_shape, table, tflite_op)
        maxima.shape = [1, h, w, 1]
        if ofm.dtype != DataType.int64:
            _widening(f"{name}_cast_to_32bit_1", maxima, ofm, tflite_op)
            return op
        widened = WorkingTensor(name=f"{name}_32bit", shape=[1, h, w, 1], dtype=DataType.int32)
        _widening(f"{name}_cast_to_32bit_1", maxima, widened, tflite_op)
        halves = WorkingTensor(name=f"{name}_16bit_2x_size", shape=[1, h, w, 2], dtype=DataType.int16)
        _memcpy(f"{name}_memcpy_1", widened, halves, tflite_op)
        pairs = WorkingTensor(name=f"{name}_32bit_2x_size", shape=[1, h, w, 2], dtype=DataType.int32)
        _widening(f"{name}_cast_to_32bit_2", halves, pairs, tflite_op)
        _memcpy("f{orig_name}_memcpy_2", pairs, ofm, tflite_op)  # sic: Vela's name, an f-string it forgot to mark
        return op


def _chunk_maxpool(index: int, height: int, start: int, shifted: WorkingTensor, maxima: WorkingTensor,
                   ifm_shape: Shape4D, table: ConstTensor, tflite_op: str) -> WorkingOp:
    """The MaxPool of rows [start, start + height) of the IFM, each row's C channels read as a 1 x C window."""
    width, depth = ifm_shape.width, ifm_shape.depth
    pool = WorkingOp("MaxPool", f"dw_maxpool_{index}", tflite_op=tflite_op,
                     attrs={"padding": "VALID", "stride_w": 1, "stride_h": 1, "filter_width": depth,
                            "filter_height": 1, "strides": (1, 1, 1, 1), "ksize": (1, 1, depth, 1)})
    pool.inputs = [shifted]  # set directly, as Vela does: the consumer lists are rebuilt after the pass
    pool.ifm_shapes.append(Shape4D(1, ifm_shape.height * width, depth, 1))
    pool.outputs = [maxima]
    maxima.ops.append(pool)
    pool.ofm_shapes = [Shape4D.from_list(maxima.shape)]
    pool.activation = Activation("LUT")
    pool.activation_lut = table
    pool.read_shapes[0] = Shape4D(1, height * width, depth, 1)
    pool.read_offsets[0] = Shape4D(0, start * width, 0, 0)
    pool.write_shape = Shape4D(1, height * width, 1, 1)
    pool.write_offset = Shape4D(0, start * width, 0, 0)
    return pool
