"""Reject a structurally invalid model once, right after reading, so no later stage meets one.

The reader guarantees that every index points into its table and every constant holds as many bytes as its
shape needs. This module checks what that leaves open and what lowering, pricing and the solvers rely on: a
subgraph computes its outputs from its inputs without cycles, each tensor has one writer, operators have the
operands their type needs, option values are in range, shapes and weights agree with each other, and the NPU
operators carry usable quantisation. Operators that are well formed but outside the NPU's rules are not this
module's business: ``npusched.frontend.supported`` places them on the CPU, as Vela does.

Every failure is a ``ModelError`` whose one line names the subgraph, operator, tensor or option at fault.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

import numpy as np

from npusched.errors import ModelError
from npusched.frontend.supported import NPU_OPERATORS, OpView, npu_support
from npusched.frontend.tflite_reader import TfliteModel, TfliteOperator, TfliteSubgraph, TfliteTensor
from npusched.ir import DataType

# Input positions an operator cannot work without (TFLite's own arity; optional operands are left out).
_REQUIRED_INPUTS: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"), (0, 1)),
    "TRANSPOSE_CONV": (0, 1, 2),
    **dict.fromkeys(("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "PAD", "MEAN", "RESIZE_BILINEAR",
                     "RESIZE_NEAREST_NEIGHBOR", "SPLIT", "PRELU", "MIRROR_PAD", "ARG_MAX"), (0, 1)),
    **dict.fromkeys(("SPLIT_V", "SLICE"), (0, 1, 2)),
    "STRIDED_SLICE": (0, 1, 2, 3),
    **dict.fromkeys(("AVERAGE_POOL_2D", "MAX_POOL_2D", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC",
                     "HARD_SWISH", "LEAKY_RELU", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "QUANTIZE", "SOFTMAX",
                     "CONCATENATION", "UNIDIRECTIONAL_SEQUENCE_LSTM", "ABS", "EXP", "RELU_0_TO_1", "PACK",
                     "UNPACK"), (0,)),
}
# Integer options that must be at least this much wherever they appear (0 depth_multiplier means "derive it").
_OPTION_MINIMUM = {"stride_w": 1, "stride_h": 1, "dilation_w_factor": 1, "dilation_h_factor": 1,
                   "filter_width": 1, "filter_height": 1, "depth_multiplier": 0, "num_splits": 1}
# Zero points must be representable in the tensor's own type.
_ZERO_POINT_RANGE = {DataType.int8: (-128, 127), DataType.uint8: (0, 255), DataType.int16: (-32768, 32767)}
# An LSTM is unrolled into about 36 NPU passes per batch row and time step. Vela 5.2.0 at its default
# --recursion-limit already fails on a 128-step sequence of the corpus' dtln; npusched lowers up to this many
# steps (about 9,200 passes) in a few seconds.
MAX_LSTM_STEPS = 256
_CONVOLUTIONS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV"})
# NPU operators whose output has exactly the input's shape.
_SAME_SHAPE = frozenset({"RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC", "HARD_SWISH", "LEAKY_RELU", "QUANTIZE",
                         "ABS", "EXP", "RELU_0_TO_1", "PRELU"})
_RESIZES = frozenset({"RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"})
_WINDOWED = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D"})


def validate_model(model: TfliteModel) -> None:
    """Raise ModelError for the first structural problem found in any subgraph; return None for a sound model."""
    for index, subgraph in enumerate(model.subgraphs):
        problem = next(_subgraph_problems(subgraph), None)
        if problem is not None:
            name = f" ({subgraph.name!r})" if subgraph.name else ""
            raise ModelError(f"{model.path}: subgraph {index}{name}: {problem}")


def _subgraph_problems(sg: TfliteSubgraph) -> Iterator[str]:
    """Problems in the order the checks build on each other: graph shape first, then what each operator uses."""
    if not sg.operators:
        yield "has no operators"
    if not sg.outputs:
        yield "has no outputs"
    referenced = sorted({i for op in sg.operators for i in op.inputs + op.outputs if i >= 0}
                        | set(sg.inputs) | set(sg.outputs))
    for index in referenced:
        yield from _tensor_problems(sg.tensors[index])
    for op in sg.operators:
        yield from _operator_problems(op, sg)
    yield from _graph_problems(sg)
    for op in sg.operators:
        if op.opcode in NPU_OPERATORS and npu_support(op, sg) is None:
            yield from _npu_operator_problems(OpView(op, sg))


# ---------------------------------------------------------------------------------------------------------------
# tensors

def _tensor_label(t: TfliteTensor) -> str:
    return f"tensor {t.index} ({t.name!r})"


def _tensor_problems(t: TfliteTensor) -> Iterator[str]:
    label = _tensor_label(t)
    if t.tflite_type.startswith("UNKNOWN_TYPE_"):
        yield f"{label} has an unknown element type ({t.tflite_type})"
    if any(d < 0 for d in t.shape):
        yield f"{label} has a negative dimension in shape {list(t.shape)}"
    q = t.quantization
    if q.scale and q.zero_point and len(q.zero_point) not in (1, len(q.scale)):
        yield f"{label} has {len(q.scale)} quantisation scales but {len(q.zero_point)} zero points"
    low, high = _ZERO_POINT_RANGE.get(t.dtype, (-(2 ** 63), 2 ** 63 - 1))
    bad = [z for z in q.zero_point if not low <= z <= high]
    if bad:
        yield f"{label} has zero point {bad[0]} outside the {t.dtype.value} range [{low}, {high}]"


# ---------------------------------------------------------------------------------------------------------------
# operators

def _op_label(op: TfliteOperator, sg: TfliteSubgraph) -> str:
    first = op.outputs[0] if op.outputs and op.outputs[0] >= 0 else None
    name = f" {sg.tensors[first].name!r}" if first is not None else ""
    return f"operator {op.index} ({op.opcode}{name})"


def _operator_problems(op: TfliteOperator, sg: TfliteSubgraph) -> Iterator[str]:
    label = _op_label(op, sg)
    if op.opcode in _REQUIRED_INPUTS:
        missing = [p for p in _REQUIRED_INPUTS[op.opcode] if p >= len(op.inputs) or op.inputs[p] < 0]
        if missing:
            yield f"{label} lacks input {missing[0]} (it has {len(op.inputs)} inputs: {list(op.inputs)})"
        if not op.outputs:
            yield f"{label} has no outputs"
    if any(i < 0 for i in op.outputs):
        yield f"{label} has an absent (-1) output"
    if op.opcode in _CONVOLUTIONS | {"FULLY_CONNECTED"} and len(op.inputs) > 1 and op.inputs[1] >= 0:
        # Constant weights are reordered on import, wherever the operator runs.
        w = sg.tensors[op.inputs[1]]
        rank = 2 if op.opcode == "FULLY_CONNECTED" else 4
        if w.is_const and w.data.ndim != rank:
            yield f"{label}: weights {_tensor_label(w)} have shape {list(w.data.shape)} (must be {rank}-D)"
    if op.opcode in ("SPLIT", "SPLIT_V") and op.options.get("num_splits", len(op.outputs)) != len(op.outputs):
        yield f"{label} has num_splits={op.options['num_splits']} but {len(op.outputs)} outputs"
    for key, value in op.options.items():
        if key.endswith("_mask") and isinstance(value, int) and value < 0:
            yield f"{label} has option {key}={value} (a bit mask, must not be negative)"
        if key in _OPTION_MINIMUM and isinstance(value, int) and value < _OPTION_MINIMUM[key]:
            yield f"{label} has option {key}={value} (must be at least {_OPTION_MINIMUM[key]})"
        elif isinstance(value, float) and not math.isfinite(value):
            yield f"{label} has option {key}={value} (must be finite)"
        elif key in ("padding", "fused_activation_function") and isinstance(value, int):
            yield f"{label} has option {key}={value}, which is not a value the TFLite schema defines"


def _graph_problems(sg: TfliteSubgraph) -> Iterator[str]:
    """Each tensor has at most one writer; the operators form no cycle; every output is computed or given."""
    writer: dict[int, TfliteOperator] = {}
    for op in sg.operators:
        for index in op.outputs:
            if index < 0:
                continue
            tensor = sg.tensors[index]
            if index in writer:
                yield (f"{_tensor_label(tensor)} is written by both {_op_label(writer[index], sg)} and "
                       f"{_op_label(op, sg)}")
            if index in sg.inputs:
                yield f"{_tensor_label(tensor)} is a subgraph input but {_op_label(op, sg)} writes it"
            if tensor.data is not None:
                yield f"{_tensor_label(tensor)} is a constant but {_op_label(op, sg)} writes it"
            writer[index] = op
    for index in sg.outputs:
        t = sg.tensors[index]
        if index not in writer and index not in sg.inputs and t.data is None and not t.is_variable:
            yield f"output {_tensor_label(t)} is neither computed by an operator nor given"
    cycle = _operator_in_cycle(sg, writer)
    if cycle is not None:
        yield f"{_op_label(cycle, sg)} depends on its own output (the operators form a cycle)"


def _operator_in_cycle(sg: TfliteSubgraph, writer: dict[int, TfliteOperator]) -> TfliteOperator | None:
    """An operator on a cycle, or None: Kahn's topological sort, linear in operators plus operands."""
    readers: dict[int, list[int]] = {}
    waiting = [0] * len(sg.operators)
    for position, op in enumerate(sg.operators):
        producers = {id(writer[i]) for i in op.inputs if i in writer}
        waiting[position] = len(producers)
        for i in set(op.inputs):
            if i in writer:
                readers.setdefault(i, []).append(position)
    ready = deque(p for p, n in enumerate(waiting) if n == 0)
    done = 0
    while ready:
        op = sg.operators[ready.popleft()]
        done += 1
        released: set[int] = set()
        for index in op.outputs:
            released.update(readers.get(index, ()))
        for reader in released:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                ready.append(reader)
    if done == len(sg.operators):
        return None
    return next(op for position, op in enumerate(sg.operators) if waiting[position] > 0)


# ---------------------------------------------------------------------------------------------------------------
# operators that will run on the NPU

def _npu_operator_problems(v: OpView) -> Iterator[str]:
    label = _op_label(v.op, v.subgraph)
    for t in v.main_tensors():
        if not t.is_const and 0 in t.shape:
            yield f"{label}: feature map {_tensor_label(t)} has an empty dimension in shape {list(t.shape)}"
    yield from _quantisation_problems(v, label)
    if v.opcode in _CONVOLUTIONS or v.opcode == "FULLY_CONNECTED":
        yield from _weight_problems(v, label)
    if v.opcode in _WINDOWED:
        yield from _window_problems(v, label)
    if v.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM":
        yield from _lstm_problems(v, label)
    if v.opcode in _SAME_SHAPE and v.ifm.shape != v.ofm.shape:
        yield f"{label}: IFM {list(v.ifm.shape)} and OFM {list(v.ofm.shape)} differ (the operator keeps the shape)"
    if v.opcode in _RESIZES:
        ifm, ofm = _shape4(v.ifm.shape), _shape4(v.ofm.shape)
        if (ifm[0], ifm[3]) != (ofm[0], ofm[3]):
            yield f"{label}: IFM {list(v.ifm.shape)} and OFM {list(v.ofm.shape)} differ in batch or depth"
    if v.opcode in ("SLICE", "STRIDED_SLICE"):
        yield from _slice_problems(v, label)
    if v.opcode == "MEAN":
        yield from _mean_problems(v, label)
    if v.opcode in ("SPLIT", "SPLIT_V"):
        yield from _split_problems(v, label)
    if v.opcode in _STACKING:
        yield from _stacking_problems(v, label)
    if v.opcode == "MIRROR_PAD":
        yield from _mirror_pad_problems(v, label)
    if v.opcode == "ARG_MAX" and tuple(v.ofm.shape) != tuple(v.ifm.shape[:-1]):
        yield f"{label}: OFM {list(v.ofm.shape)} is not IFM {list(v.ifm.shape)} without its depth"
    if v.opcode == "PRELU" and not _broadcasts(tuple(v.inputs[1].shape), tuple(v.ifm.shape)):
        yield f"{label}: alpha {list(v.inputs[1].shape)} does not broadcast to IFM {list(v.ifm.shape)}"


def _quantisation_problems(v: OpView, label: str) -> Iterator[str]:
    """The NPU rescales its IFM, IFM2, weights and OFM (and an LSTM its states): each needs a scale. Every scale
    an operand has must be a positive finite number (weights may be 0 for a channel of all-zero weights)."""
    required = v.main_tensors()
    # Vela counts TRANSPOSE's permutation and MIRROR_PAD's paddings (int32) as an IFM2: read, never rescaled.
    if v.opcode in ("TRANSPOSE", "MIRROR_PAD"):
        required = [t for t in required if t is not v.ifm2]
    if v.opcode == "ARG_MAX":  # the OFM holds indices
        required = [t for t in required if t is not v.ofm]
    if v.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM":
        required += [t for t in v.inputs[18:20] if t is not None]
    for t in v.all_tensors():
        scales = np.asarray(t.quantization.scale, dtype=np.float64)
        if scales.size == 0:
            if any(t is r for r in required):
                yield f"{label}: {_tensor_label(t)} has no quantisation scale"
            continue
        lowest = 0.0 if t is v.weights else np.finfo(np.float32).tiny
        bad = scales[~(np.isfinite(scales) & (scales >= lowest))]
        if bad.size:
            yield f"{label}: {_tensor_label(t)} has quantisation scale {bad[0]} (must be positive and finite)"


def _weight_problems(v: OpView, label: str) -> Iterator[str]:
    """Weights (constant and of the right rank: the NPU rules and ``_operator_problems`` saw to that) have as
    many output channels as the OFM and the bias."""
    w, ofm = v.weights, v.ofm
    # TFLite stores convolution and fully-connected weights output channel first; depthwise ones last.
    channels = w.shape[-1] if v.opcode == "DEPTHWISE_CONV_2D" else w.shape[0]
    if ofm.shape and ofm.shape[-1] != channels:
        yield (f"{label}: weights {_tensor_label(w)} {list(w.shape)} give {channels} output channels but the OFM "
               f"has shape {list(ofm.shape)}")
    scales = len(w.quantization.scale)
    if scales not in (0, 1, channels):
        yield f"{label}: weights {_tensor_label(w)} have {scales} scales for {channels} output channels"
    b = v.bias
    if b is not None and int(np.prod(b.shape, dtype=np.int64)) != channels:
        yield f"{label}: bias {_tensor_label(b)} has shape {list(b.shape)} for {channels} output channels"
    if v.opcode == "DEPTHWISE_CONV_2D" and v.ifm.shape:
        multiplier = v.depth_multiplier
        if multiplier > 0 and v.ifm.shape[-1] * multiplier != channels:
            yield (f"{label}: IFM depth {v.ifm.shape[-1]} times depth_multiplier {multiplier} is not the "
                   f"{channels} weight channels")


def _window_problems(v: OpView, label: str) -> Iterator[str]:
    """The OFM height and width are what the kernel, stride, dilation and padding make of the IFM's."""
    ifm, ofm = (_shape4(t.shape) for t in (v.ifm, v.ofm))
    (kw, kh), (sw, sh) = v.dilated_kernel(), v.stride
    expected = []
    for size, kernel, stride in ((ifm[1], kh, sh), (ifm[2], kw, sw)):
        span = size if v.padding != "VALID" else size - kernel + 1
        expected.append(-(-span // stride))
    if v.padding == "VALID" and min(expected) < 1:
        yield f"{label}: kernel {kw}x{kh} (dilated) is larger than the IFM {list(v.ifm.shape)} with VALID padding"
    elif [ofm[1], ofm[2]] != expected or ofm[0] != ifm[0]:
        yield (f"{label}: OFM {list(v.ofm.shape)} does not follow from IFM {list(v.ifm.shape)}, kernel {kw}x{kh}, "
               f"stride {sw}x{sh}, {v.padding} padding (expected height, width {expected})")
    if v.opcode in ("AVERAGE_POOL_2D", "MAX_POOL_2D") and ifm[3] != ofm[3]:
        yield f"{label}: pooling changes the depth from {ifm[3]} to {ofm[3]}"


def _lstm_problems(v: OpView, label: str) -> Iterator[str]:
    """[batch, time, features] in and out with the same batch and time, features matching the weights."""
    ifm, ofm = v.ifm.shape, v.ofm.shape
    if ifm[:2] != ofm[:2]:
        yield f"{label}: IFM {list(ifm)} and OFM {list(ofm)} differ in batch or time steps"
    elif len(ifm) == 3 and ifm[0] * ifm[1] > MAX_LSTM_STEPS:
        yield (f"{label}: IFM {list(ifm)} unrolls into {ifm[0] * ifm[1]} batch x time steps, more than the "
               f"{MAX_LSTM_STEPS} npusched lowers")
    weights = [t for t in v.inputs[1:9] if t is not None]
    if any(w.dtype != DataType.int8 or w.data is None or w.data.ndim != 2 for w in weights):
        described = [f"{w.tflite_type} {list(w.shape)}" for w in weights]
        yield f"{label}: gate weights must be 2-D int8 constants, got {described}"
        return
    cells = {w.shape[0] for w in weights}
    inputs = {w.shape[1] for w in v.inputs[1:5] if w is not None}
    recurrent = {w.shape[1] for w in v.inputs[5:9] if w is not None}
    if len(cells) != 1 or inputs != {ifm[-1]} or recurrent != {ofm[-1]}:
        yield (f"{label}: gate weights {[list(w.shape) for w in weights]} do not fit IFM {list(ifm)} and "
               f"OFM {list(ofm)}")
    cell_count = weights[0].shape[0]
    for bias in v.inputs[12:16]:
        if bias is not None and (bias.data is None or bias.data.size != cell_count):
            yield f"{label}: gate bias {_tensor_label(bias)} must be a constant of {cell_count} values"


def _slice_problems(v: OpView, label: str) -> Iterator[str]:
    """Begin, size, end and strides hold one value per IFM dimension."""
    rank = len(v.ifm.shape)
    for t in v.inputs[1:]:
        if t is not None and t.data is not None and np.asarray(t.data).size != rank:
            yield f"{label}: {_tensor_label(t)} has {np.asarray(t.data).size} values for a rank-{rank} IFM"


def _split_problems(v: OpView, label: str) -> Iterator[str]:
    """The outputs are the IFM cut along the split axis: same rank, same size elsewhere, sizes adding up."""
    shape = v.ifm.shape
    axis_tensor = v.inputs[0] if v.opcode == "SPLIT" else v.inputs[2] if len(v.inputs) > 2 else None
    if axis_tensor is None or axis_tensor.data is None or np.asarray(axis_tensor.data).size != 1 or not shape:
        return
    axis = int(np.asarray(axis_tensor.data).reshape(-1)[0]) % len(shape)
    outputs = [t for t in v.outputs if t is not None]
    uncut = [d for d in range(len(shape)) if d != axis]
    if any(len(t.shape) != len(shape) or [t.shape[d] for d in uncut] != [shape[d] for d in uncut] for t in outputs):
        yield (f"{label}: outputs {[list(t.shape) for t in outputs]} are not IFM {list(shape)} cut along "
               f"axis {axis}")
    elif sum(t.shape[axis] for t in outputs) != shape[axis]:
        yield f"{label}: outputs along axis {axis} add up to {sum(t.shape[axis] for t in outputs)}, not {shape[axis]}"


_STACKING = frozenset({"PACK", "UNPACK"})


def _stacking_problems(v: OpView, label: str) -> Iterator[str]:
    """The stacked map is every part with one more axis, as long as the number of parts, where the axis says."""
    pack = v.opcode == "PACK"
    parts = [t for t in (v.inputs if pack else v.outputs) if t is not None]
    stacked = v.ofm if pack else v.inputs[0]
    rank = len(stacked.shape)
    axis = int(v.options.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        yield f"{label}: axis {v.options.get('axis')} for a rank-{rank} stacked map"
        return
    expected = tuple(stacked.shape[:axis]) + tuple(stacked.shape[axis + 1:])
    if stacked.shape[axis] != len(parts) or any(tuple(t.shape) != expected for t in parts):
        yield (f"{label}: parts {[list(t.shape) for t in parts]} do not stack into {list(stacked.shape)} along "
               f"axis {axis}")


def _mirror_pad_problems(v: OpView, label: str) -> Iterator[str]:
    """Constant, non-negative paddings, one pair per IFM dimension, that make the OFM's shape."""
    pads = v.inputs[1]
    values = None if pads.data is None else np.asarray(pads.data)
    rank = len(v.ifm.shape)
    if values is None or values.shape != (rank, 2) or (values < 0).any():
        yield f"{label}: paddings {None if values is None else values.tolist()} for a rank-{rank} IFM"
    elif tuple(v.ofm.shape) != tuple(int(s + a + b) for s, (a, b) in zip(v.ifm.shape, values, strict=True)):
        yield f"{label}: OFM {list(v.ofm.shape)} is not IFM {list(v.ifm.shape)} padded by {values.tolist()}"


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """``shape`` stretches to ``target`` by numpy's rules without growing it."""
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(target),
                                                                            strict=False))


def _mean_problems(v: OpView, label: str) -> Iterator[str]:
    """The OFM is the IFM with the reduced axes kept as 1 or dropped."""
    shape, axes_tensor = v.ifm.shape, v.inputs[1]
    if axes_tensor.data is None:
        return
    axes = {int(a) % len(shape) for a in np.asarray(axes_tensor.data).reshape(-1)} if shape else set()
    kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
    dropped = tuple(n for d, n in enumerate(shape) if d not in axes)
    if tuple(v.ofm.shape) not in (kept, dropped):
        yield f"{label}: OFM {list(v.ofm.shape)} is not IFM {list(shape)} reduced over axes {sorted(axes)}"


def _shape4(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (1,) * (4 - len(shape)) + tuple(shape[-4:])
