"""The working graph the lowering rewrites: Vela-style operations and tensors with producer/consumer links.

Vela's legacy optimiser is a sequence of local rewrites on a linked graph, and the pass order it ends up
with is a function of that graph's final shape (a depth-first walk from the outputs). Reproducing that order
needs the same linked structure, so the lowering builds one here. It is private to the lowering: it is
created per call, rewritten forward only (never restored), and converted into the frozen IR at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from npusched.ir import (
    ConstTensor,
    DataType,
    FeatureMap,
    NpuOp,
    Quantization,
    ResamplingMode,
    Shape4D,
    TensorFormat,
)

# TFLite builtin -> Vela's internal op type name.
BUILTIN_TO_VELA = {
    "ADD": "Add", "AVERAGE_POOL_2D": "AvgPool", "ATAN2": "Atan2", "CONCATENATION": "ConcatTFLite",
    "CONV_2D": "Conv2DBias", "DEPTHWISE_CONV_2D": "DepthwiseConv2DBias", "DEQUANTIZE": "Dequantize",
    "FULLY_CONNECTED": "FullyConnected", "LOGISTIC": "Sigmoid", "MAX_POOL_2D": "MaxPool", "MUL": "Mul",
    "RELU": "Relu", "RELU_0_TO_1": "Relu0To1", "RELU_N1_TO_1": "ReluN1To1", "RELU6": "Relu6", "RESHAPE": "Reshape",
    "RESIZE_BILINEAR": "ResizeBilinear", "SOFTMAX": "Softmax", "SVDF": "Svdf", "TANH": "Tanh", "PAD": "Pad",
    "TRANSPOSE": "Transpose", "MEAN": "Mean", "SUB": "Sub", "SQUEEZE": "Squeeze",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLstm", "STRIDED_SLICE": "StridedSlice",
    "EXP": "Exp", "SPLIT": "Split", "PRELU": "Prelu", "MAXIMUM": "Maximum", "ARG_MAX": "ArgMax",
    "MINIMUM": "Minimum", "SLICE": "Slice", "TRANSPOSE_CONV": "Conv2DBackpropInput", "EXPAND_DIMS": "ExpandDims",
    "RSQRT": "Rsqrt", "SHAPE": "Shape", "PACK": "Pack", "UNPACK": "Unpack", "RESIZE_NEAREST_NEIGHBOR":
    "ResizeNearestNeighbor", "LEAKY_RELU": "LeakyRelu", "SQUARED_DIFFERENCE": "SquaredDifference",
    "MIRROR_PAD": "MirrorPad", "ABS": "Abs", "SPLIT_V": "SplitV", "QUANTIZE": "Quantize", "HARD_SWISH": "HardSwish",
    "LSTM": "Lstm", "RNN": "Rnn", "UNIDIRECTIONAL_SEQUENCE_RNN": "UnidirectionalSequenceRnn",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLstm", "BIDIRECTIONAL_SEQUENCE_RNN":
    "BidirectionalSequenceRnn", "MATMUL": "MatMul", "SIGN": "Sign", "CALL_ONCE": "CallOnce",
    "ASSIGN_VARIABLE": "AssignVariable", "VAR_HANDLE": "VarHandle", "READ_VARIABLE": "ReadVariable",
    "LOCAL_RESPONSE_NORMALIZATION": "LRN", "ADD_N": "AddN", "REDUCE_MAX": "Max", "REDUCE_MIN": "Min",
    "GATHER": "GatherV2", "CUSTOM": "Custom", "BATCH_MATMUL": "BatchMatMul", "GELU": "Gelu",
}

# Tensor roles per op type (Vela's TensorIndices): (ifm indices, weight indices, bias indices).
_IFM = ((0,), (), ())
_IFM_IFM2 = ((0, 1), (), ())
_IFM_W = ((0,), (1,), ())
_IFM_W_B = ((0,), (1,), (2,))
INDICES: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    **{t: _IFM for t in (
        "Abs", "ArgMax", "AvgPool", "CLZ", "Clamp", "ConcatSliceWrite", "Dequantize", "Memcpy", "Exp", "ExpandDims",
        "Gelu", "HardSwish", "Identity", "LeakyRelu", "MaxPool", "Mean", "Pack", "PackReshaped", "Pad", "Quantize",
        "QuantizedAvgPool", "QuantizedMaxPool", "QuantizedReshape", "ReduceSum", "Relu", "Relu0To1", "Relu6",
        "ReluN1To1", "ReluN", "Rescale", "Reshape", "ResizeBilinear", "ResizeNearestNeighbor", "Rsqrt", "Shape",
        "Sigmoid", "Sign", "Slice", "Softmax", "SplitSliceRead", "SplitV", "Squeeze", "StridedSlice", "Table",
        "Tanh", "Unpack", "UnpackReshaped")},
    **{t: _IFM_IFM2 for t in (
        "Add", "Atan2", "BatchMatMul", "Maximum", "Minimum", "MirrorPad", "Mul", "Prelu", "SHL", "SHR",
        "SquaredDifference", "Sub", "Transpose")},
    **{t: _IFM_W for t in (
        "BidirectionalSequenceLstm", "BidirectionalSequenceRnn", "Conv2D", "Lstm", "MatMul", "QuantizedConv2D",
        "QuantizedMatMul", "Rnn", "UnidirectionalSequenceLstm", "UnidirectionalSequenceRnn")},
    **{t: _IFM_W_B for t in ("Conv2DBias", "DepthwiseConv2DBias", "FullyConnected")},
    "Concat": ((1, 2), (), ()),
    "ConcatTFLite": ((1, 2), (), ()),
    "Conv2DBackpropInput": ((2,), (1,), (3,)),
    "Conv2DBackpropInputSwitchedBias": ((0,), (1,), (3,)),
    "Split": ((1,), (), ()),
}
_NO_INDICES: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] = ((), (), ())

CONV_TYPES = frozenset({"Conv2D", "Conv2DBias", "Conv2DBackpropInput", "Conv2DBackpropInputSwitchedBias",
                        "QuantizedConv2D"})
DEPTHWISE_TYPES = frozenset({"DepthwiseConv2DBias"})
POOL_TYPES = frozenset({"AvgPool", "MaxPool", "QuantizedAvgPool", "QuantizedMaxPool", "ResizeBilinear",
                        "ResizeNearestNeighbor"})
BINARY_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Maximum", "Minimum", "SHL", "SHR", "SquaredDifference"})
UNARY_ELEMENTWISE = frozenset({"Abs", "CLZ", "Exp", "LeakyRelu", "Rsqrt"})
RELU_TYPES = frozenset({"Relu", "Relu6", "Relu0To1", "ReluN1To1", "ReluN", "Clip", "Clamp"})
MEMORY_ONLY_TYPES = frozenset({"Reshape", "QuantizedReshape", "Squeeze", "ExpandDims", "Identity"})
SPLIT_TYPES = frozenset({"Split", "SplitV", "StridedSlice", "Slice", "UnpackReshaped", "Unpack"})
CONCAT_TYPES = frozenset({"Concat", "ConcatTFLite", "PackReshaped", "Pack"})
STARTUP_TYPES = frozenset({"Const", "Placeholder", "SubgraphInput"})


def block_kind(op_type: str) -> str:
    """Vela's NpuBlockType name for an op type ("Default" when the op has no NPU block)."""
    if op_type in CONV_TYPES:
        return "ConvolutionMxN"
    if op_type in DEPTHWISE_TYPES:
        return "ConvolutionDepthWise"
    if op_type in ("FullyConnected", "QuantizedMatMul"):
        return "VectorProduct"
    if op_type in POOL_TYPES or op_type == "Transpose":  # a Transpose left to the NPU: lowering.transpose's
        return "Pooling"
    if op_type == "ReduceSum":
        return "ReduceSum"
    if op_type in BINARY_ELEMENTWISE or op_type in UNARY_ELEMENTWISE:
        return "ElementWise"
    if op_type == "Memcpy":
        return "Dma"
    return "Default"


@dataclass(frozen=True)
class Activation:
    """A fused activation: Vela's ActivationFunction (op type name plus unquantised min/max)."""

    op_type: str
    min: float | None = None
    max: float | None = None


def activation_for(op_type: str) -> Activation:
    """The min/max Vela attaches to each activation op type."""
    bounds = {"Relu": (0.0, None), "Relu6": (0.0, 6.0), "Relu0To1": (0.0, 1.0), "ReluN1To1": (-1.0, 1.0),
              "Tanh": (-1.0, 1.0), "Sigmoid": (0.0, 1.0)}
    lo, hi = bounds.get(op_type, (None, None))
    return Activation(op_type, lo, hi)


FUSED_ACTIVATION = {"RELU": "Relu", "RELU6": "Relu6", "RELU_N1_TO_1": "ReluN1To1", "TANH": "Tanh",
                    "SIGN_BIT": "SignBit", "RELU_0_TO_1": "Relu0To1"}


@dataclass(eq=False)
class WorkingTensor:
    """A tensor of the working graph (identity matters: two tensors may share a name)."""

    name: str
    shape: list[int]
    dtype: DataType
    quantization: Quantization = Quantization()
    values: np.ndarray | None = None
    is_variable: bool = False
    uid: int = -1
    purpose: str = "FeatureMap"
    ops: list[WorkingOp] = field(default_factory=list)
    consumer_list: list[WorkingOp | None] = field(default_factory=list)
    fm_override: FeatureMap | None = None
    format: TensorFormat = TensorFormat.NHWC
    const_override: ConstTensor | None = None
    # Written with swapped strides (a TRANSPOSE run as a 1x1 AvgPool): only the linear format can do that.
    force_linear: bool = False

    def consumers(self) -> list[WorkingOp | None]:
        return self.consumer_list

    @property
    def is_const(self) -> bool:
        return bool(self.ops) and self.ops[0].type == "Const"

    @property
    def is_scalar(self) -> bool:
        return not self.shape and self.elements() == 1

    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def full_shape(self) -> list[int]:
        """Vela's get_full_shape: 2-D [N, C] becomes [N, 1, 1, C]; 1-D and 3-D are padded in front."""
        d = len(self.shape)
        if d in (1, 3):
            return [1] * (4 - d) + list(self.shape)
        if d == 2:
            return [self.shape[0], 1, 1, self.shape[1]]
        return list(self.shape)

    def shape4d(self) -> Shape4D:
        return Shape4D.from_list(self.shape)

    def clone(self, suffix: str = "_clone") -> WorkingTensor:
        return WorkingTensor(name=self.name + suffix, shape=list(self.shape), dtype=self.dtype,
                       quantization=self.quantization, values=self.values, is_variable=self.is_variable,
                       purpose=self.purpose)

    def feature_map(self) -> FeatureMap:
        if self.fm_override is not None:
            if self.fm_override.format != self.format:
                return replace(self.fm_override, format=self.format)
            return self.fm_override
        return FeatureMap(name=self.name, shape=Shape4D.from_list(self.shape) if len(self.shape) <= 4
                          else Shape4D.from_list(self.shape[-4:]), dtype=self.dtype,
                          quantization=self.quantization, constant=self.const_tensor() if self.is_const else None,
                          orig_shape=tuple(self.shape), uid=self.uid, format=self.format)

    def const_tensor(self) -> ConstTensor | None:
        if self.const_override is not None:
            return self.const_override
        if self.values is None:
            return None
        vals = np.asarray(self.values)
        return ConstTensor(name=self.name, shape=tuple(int(d) for d in vals.shape), dtype=self.dtype,
                           quantization=self.quantization, values=vals)


@dataclass(eq=False)
class WorkingOp:
    """An operation of the working graph: Vela's Operation with the attributes the lowering reads."""

    type: str
    name: str
    inputs: list[WorkingTensor | None] = field(default_factory=list)
    outputs: list[WorkingTensor] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    run_on_npu: bool = True
    cpu_reason: str | None = None
    original_type: str = ""
    tflite_op: str = ""
    op_index: int | None = None
    activation: Activation | None = None
    activation_lut: ConstTensor | None = None
    ifm_shapes: list[Shape4D | None] = field(default_factory=list)
    ofm_shapes: list[Shape4D | None] = field(default_factory=list)
    read_offsets: list[Shape4D | None] = field(default_factory=lambda: [None, None])
    read_shapes: list[Shape4D | None] = field(default_factory=lambda: [None, None])
    write_offset: Shape4D | None = None
    write_shape: Shape4D | None = None
    resampling_mode: ResamplingMode = ResamplingMode.NONE
    rounding_mode: str | None = None
    explicit_scaling: tuple | None = None
    forced_output_quantization: Quantization | None = None
    memory_function: str | None = None
    ifm_stride_multiplier: list[list[int]] = field(default_factory=lambda: [[1, 1, 1], [1, 1, 1]])
    prebuilt: NpuOp | None = None
    scheduled_pass: Any = None

    def __post_init__(self) -> None:
        if not self.original_type:
            self.original_type = self.type

    # --- operand roles -------------------------------------------------------------------------------------
    def _indices(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return INDICES.get(self.type, _NO_INDICES)

    def _get(self, which: int, ix: int) -> WorkingTensor | None:
        lst = self._indices()[which]
        if ix >= len(lst) or lst[ix] >= len(self.inputs):
            return None
        return self.inputs[lst[ix]]

    @property
    def ifm(self) -> WorkingTensor | None:
        return self._get(0, 0)

    @property
    def ifm2(self) -> WorkingTensor | None:
        return self._get(0, 1)

    @property
    def weights(self) -> WorkingTensor | None:
        return self._get(1, 0)

    @property
    def bias(self) -> WorkingTensor | None:
        return self._get(2, 0)

    @property
    def ofm(self) -> WorkingTensor | None:
        return None if not self.outputs else self.outputs[0]

    # --- graph editing (Vela's Operation helpers) ----------------------------------------------------------
    def add_input(self, tens: WorkingTensor) -> None:
        self.inputs.append(tens)
        if self not in tens.consumer_list:
            tens.consumer_list.append(self)

    def set_input(self, tens: WorkingTensor, idx: int) -> None:
        self.inputs[idx] = tens
        if self not in tens.consumer_list:
            tens.consumer_list.append(self)

    def set_output(self, tens: WorkingTensor) -> None:
        tens.ops = [self]
        self.outputs = [tens]

    def kernel_size(self) -> tuple[int, int]:
        """(width, height) as Vela's get_kernel_size computes it."""
        w = self.weights
        if w is not None and self.type in CONV_TYPES | DEPTHWISE_TYPES:
            shape = [1] * (4 - len(w.shape)) + list(w.shape)
            return int(shape[-3]), int(shape[-4])
        if block_kind(self.type) in ("Pooling", "ReduceSum") and "ksize" in self.attrs:
            return int(self.attrs["ksize"][2]), int(self.attrs["ksize"][1])
        return int(self.attrs.get("filter_width", 1)), int(self.attrs.get("filter_height", 1))

    def stride(self) -> tuple[int, int]:
        if "strides" in self.attrs:
            _, h, w, _ = self.attrs["strides"]
            return int(w), int(h)
        return int(self.attrs.get("stride_w", 1)), int(self.attrs.get("stride_h", 1))

    def dilation(self) -> tuple[int, int]:
        if "dilation" in self.attrs:
            _, h, w, _ = self.attrs["dilation"]
            return int(w), int(h)
        return int(self.attrs.get("dilation_w_factor", 1)), int(self.attrs.get("dilation_h_factor", 1))

    def set_ifm_ofm_shapes(self) -> None:
        """Vela's set_ifm_ofm_shapes: the 4-D shapes the op works on, from its tensors."""
        self.ifm_shapes, self.ofm_shapes = [], []
        ifm, ifm2, ofm = self.ifm, self.ifm2, self.ofm
        if self.type == "FullyConnected":
            assert ifm is not None and ofm is not None  # reads one tensor, writes one
            if len(ifm.shape) == 2:
                self.ifm_shapes.append(Shape4D(ifm.shape[0], 1, 1, ifm.shape[1]))
            else:
                self.ifm_shapes.append(Shape4D.from_list(ifm.full_shape()))
            self.ofm_shapes.append(Shape4D.from_list(ofm.full_shape()))
        elif self.type == "Softmax":
            assert ifm is not None and ofm is not None  # reads one tensor, writes one
            self.ifm_shapes.append(Shape4D.from_list(ifm.full_shape()))
            self.ofm_shapes.append(Shape4D.from_list(ofm.full_shape()))
        elif self.type in SPLIT_TYPES or self.type in CONCAT_TYPES:
            self.ifm_shapes = [None if t is None else Shape4D.from_list(t.shape) for t in self.inputs]
            self.ofm_shapes = [None if t is None else Shape4D.from_list(t.shape) for t in self.outputs]
        else:
            if ifm is not None:
                self.ifm_shapes.append(Shape4D.from_list(ifm.shape))
            if ifm2 is not None:
                self.ifm_shapes.append(Shape4D.from_list(ifm2.shape))
            if ofm is not None:
                self.ofm_shapes.append(Shape4D.from_list(ofm.shape))

    def needs_shapes(self) -> bool:
        return bool(self._indices()[0])

    def needs_bias(self) -> bool:
        return bool(self._indices()[2])


@dataclass
class WorkingGraph:
    """One TFLite subgraph in working form."""

    name: str
    output_tensors: list[WorkingTensor]
    input_tensors: list[WorkingTensor] = field(default_factory=list)
    original_inputs: list[WorkingTensor] = field(default_factory=list)


_NO_QUANT = Quantization()


def const_tensor(name: str, shape: list[int], dtype: DataType, values: Any,
                 quantization: Quantization = _NO_QUANT, purpose: str = "FeatureMap") -> WorkingTensor:
    """A constant tensor driven by its own Const op (Vela's create_const_tensor)."""
    np_dtype = {DataType.uint8: np.uint8, DataType.int8: np.int8, DataType.int16: np.int16,
                DataType.int32: np.int32, DataType.int64: np.int64, DataType.float32: np.float32}.get(dtype, np.int64)
    arr = np.array(values, dtype=np_dtype).reshape(shape)
    tens = WorkingTensor(name=name, shape=list(shape), dtype=dtype, quantization=quantization, values=arr,
                   purpose=purpose)
    WorkingOp("Const", name, outputs=[tens]).set_output(tens)
    return tens


def update_consumers(sg: WorkingGraph) -> None:
    """Recompute every reachable tensor's consumer list by a depth-first walk from the outputs (Vela's
    Subgraph.update_consumers for a graph without passes). Subgraph outputs get a ``None`` consumer."""
    seen_ops: set[int] = set()
    seen_tens: set[int] = set()
    sg.input_tensors = []

    def visit_op(op: WorkingOp) -> None:
        if id(op) in seen_ops:
            return
        seen_ops.add(id(op))
        for inp in op.inputs:
            if inp is None:
                continue
            visit_tensor(inp)
            inp.consumer_list.append(op)
        if op.type in ("Placeholder", "SubgraphInput") and not op.outputs[0].is_variable:
            sg.input_tensors.append(op.outputs[0])
        for out in op.outputs:
            if id(out) not in seen_tens:
                out.consumer_list = []

    def visit_tensor(tens: WorkingTensor) -> None:
        if id(tens) in seen_tens:
            return
        seen_tens.add(id(tens))
        tens.consumer_list = []
        for op in tens.ops:
            visit_op(op)

    for tens in sg.output_tensors:
        visit_tensor(tens)
        tens.consumer_list.append(None)


def all_ops(sg: WorkingGraph) -> list[WorkingOp]:
    """Every op reachable from the outputs, inputs before consumers (Vela's get_all_ops order)."""
    result: list[WorkingOp] = []
    seen_ops: set[int] = set()
    seen_tens: set[int] = set()

    def visit_op(op: WorkingOp) -> None:
        if id(op) in seen_ops:
            return
        seen_ops.add(id(op))
        for inp in op.inputs:
            visit_tensor(inp)
        result.append(op)

    def visit_tensor(tens: WorkingTensor | None) -> None:
        if tens is None or id(tens) in seen_tens:
            return
        seen_tens.add(id(tens))
        for op in tens.ops:
            visit_op(op)

    for tens in sg.output_tensors:
        visit_tensor(tens)
    return result


def rewrite_pre_order(sg: WorkingGraph, op_rewrites: Sequence[Callable], tensor_rewrites: Sequence[Callable] = (),
                      rewrite_unsupported: bool = True) -> None:
    """Vela's rewrite_graph_pre_order: visit from the outputs; each op is rewritten (repeatedly, until a
    fixpoint) before its inputs are visited, so consumers see their producers un-rewritten."""
    op_done: dict[int, WorkingOp] = {}
    tens_done: dict[int, WorkingTensor | None] = {}

    def visit_op(op: WorkingOp) -> WorkingOp:
        if id(op) in op_done:
            return op_done[id(op)]
        res = op
        prev = None
        while prev is not res:
            prev = res
            for fn in op_rewrites:
                if res.run_on_npu or rewrite_unsupported:
                    res = fn(res)
        op_done[id(op)] = res
        op_done[id(res)] = res
        # Like Vela, collect into the list object installed before visiting: if a rewrite further down
        # installs a new list on this node, the new list wins and these results are dropped.
        old_inputs, new_inputs = res.inputs, list[WorkingTensor | None]()
        res.inputs = new_inputs
        for t in old_inputs:
            visited = visit_tensor(t)
            new_inputs.append(visited)
        old_outputs, new_outputs = res.outputs, list[WorkingTensor]()
        res.outputs = new_outputs
        for t in old_outputs:
            visited = visit_tensor(t)
            assert visited is not None  # a rewrite replaces a tensor, never removes it
            new_outputs.append(visited)
        return res

    def visit_tensor(tens: WorkingTensor | None) -> WorkingTensor | None:
        if tens is None:
            return None
        if id(tens) in tens_done:
            return tens_done[id(tens)]
        res = tens
        prev = None
        while prev is not res:
            prev = res
            for fn in tensor_rewrites:
                res = fn(res)
        tens_done[id(tens)] = res
        tens_done[id(res)] = res
        if res is not None:
            old_ops, new_ops = res.ops, list[WorkingOp]()
            res.ops = new_ops
            for o in old_ops:
                visited = visit_op(o)
                new_ops.append(visited)
        return res

    outputs = [visit_tensor(t) for t in sg.output_tensors]
    sg.output_tensors = [t for t in outputs if t is not None]
    assert len(sg.output_tensors) == len(outputs)  # a rewrite replaces a tensor, never removes it
    update_consumers(sg)


def visit_post_order(sg: WorkingGraph, op_visits: Sequence[Callable], tensor_visits: Sequence[Callable] = ()) -> None:
    """Vela's visit_graph_post_order: producers before consumers; visitors must not replace nodes."""
    seen_ops: set[int] = set()
    seen_tens: set[int] = set()

    def visit_op(op: WorkingOp) -> None:
        if id(op) in seen_ops:
            return
        seen_ops.add(id(op))
        for t in list(op.inputs):
            visit_tensor(t)
        for fn in op_visits:
            fn(op)
        for t in list(op.outputs):
            visit_tensor(t)

    def visit_tensor(tens: WorkingTensor | None) -> None:
        if tens is None or id(tens) in seen_tens:
            return
        seen_tens.add(id(tens))
        for op in list(tens.ops):
            visit_op(op)
        for fn in tensor_visits:
            fn(tens)

    for tens in list(sg.output_tensors):
        visit_tensor(tens)
