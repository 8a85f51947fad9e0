"""Shape folding: fix a dynamic batch at 1, then evaluate every operator whose inputs are all known.

Exporters with a dynamic batch dimension compute shapes at run time (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE
in every squeeze-excite block and flatten head, the same for a TRANSPOSE_CONV's output shape). The NPU runs batch
1, so every such shape is a constant: the batch dimension is fixed at 1, every operator whose inputs are then all
known (constants, or the shape of a tensor whose shape is static) is evaluated with numpy and its outputs stored as
constant tensors. Only integer arithmetic without quantisation and pure data movement are folded, so the folded
values are exactly what the TFLite kernels would compute. Not priced: folding changes what the NPU runs at all
(Vela's legacy core leaves run-time shape arithmetic to the CPU, splitting the NPU work).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    NUMPY_TYPES,
    ModelT,
    SubGraphT,
    TensorT,
    constant,
    ints,
    make_constant,
    name,
    opcode,
    signature,
    static_shape,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# A folded constant may be larger than its inputs only up to this size: folding is for shapes and small tables,
# not for materialising FILL/TILE results the size of feature maps into the file.
MAX_GROWTH_BYTES = 4096
_INTEGER_TYPES = frozenset({schema.TensorType.INT32, schema.TensorType.INT64})


def fix_batch(subgraph: SubGraphT) -> list[str]:
    """Fix a dynamic batch at 1 on every tensor; the names of the subgraph inputs fixed.

    The batch is the one -1 of a shape signature: in dimension 0 (the tensor's dimension 0 becomes 1, as before), or
    in any other dimension where the static shape holds 1, which is where the converter leaves the batch once a
    TRANSPOSE has moved it (a time-major recurrent layer's [T, 1, F] with signature [T, -1, F]): that signature is
    dropped and the static shape kept. Only where every subgraph input's dynamic dimension is such a batch: a model
    dynamic elsewhere (a sequence length, two dynamic dimensions) keeps its signatures, and shapes derived from those
    stay unknown, so nothing is folded from them.
    """
    tensors = subgraph.tensors or []
    inputs = {i for i in ints(subgraph.inputs) if 0 <= i < len(tensors)}
    if not all(_batch_position(tensors[i]) is not None for i in inputs if _dynamic(tensors[i])):
        return []
    fixed = []
    for index, tensor in enumerate(tensors):
        position = _batch_position(tensor) if _dynamic(tensor) else None
        if position is None:
            continue
        sig = signature(tensor) or ()
        tensor.shape = np.asarray([1 if d == position else v for d, v in enumerate(sig)], dtype=np.int32)
        tensor.shapeSignature = None
        if index in inputs:
            fixed.append(name(tensor))
    return fixed


def _dynamic(tensor: TensorT) -> bool:
    sig = signature(tensor)
    return sig is not None and -1 in sig


def _batch_position(tensor: TensorT) -> int | None:
    """Where the tensor's only dynamic dimension is a batch fixed at 1 (``fix_batch``), or None."""
    sig = signature(tensor) or ()
    dynamic = [d for d, v in enumerate(sig) if v == -1]
    if len(dynamic) != 1:
        return None
    position = dynamic[0]
    if position == 0:
        return 0
    shape = [int(v) for v in tensor.shape] if tensor.shape is not None else []
    return position if len(shape) == len(sig) and shape[position] == 1 else None


@dataclass(frozen=True)
class FoldPlan:
    """An operator to fold: its position and the values of its outputs."""

    site: Site
    position: int
    outputs: tuple[int, ...]
    values: tuple[np.ndarray, ...]
    opcode: str
    operators: int = 1


def find_folds(model: ModelT, subgraph: SubGraphT) -> list[FoldPlan]:
    """Every operator that can be folded, in execution order (a fold's values feed the ones after it)."""
    tensors = subgraph.tensors or []
    values: dict[int, np.ndarray] = {}
    for index, tensor in enumerate(tensors):
        value = constant(model, tensor)
        if value is not None:
            values[index] = value
    graph_outputs = set(ints(subgraph.outputs))
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        code = opcode(model, op)
        outputs = ints(op.outputs)
        if code not in _FOLDERS or not outputs or graph_outputs & set(outputs) or not well_formed(subgraph, op):
            continue
        results = _evaluate(code, op, tensors, values)
        if results is None:
            continue
        values.update(zip(outputs, results, strict=True))
        plans.append(FoldPlan(Site("fold", name(tensors[outputs[0]])), position, tuple(outputs), tuple(results),
                              code))
    return plans


def apply_folds(model: ModelT, subgraph: SubGraphT, plans: Sequence[FoldPlan]) -> None:
    """Each planned operator's outputs become constants and the operator goes."""
    for plan in plans:
        for index, value in zip(plan.outputs, plan.values, strict=True):
            make_constant(model, subgraph.tensors[index], value)
    folded = {plan.position for plan in plans}
    subgraph.operators = [op for position, op in enumerate(subgraph.operators or []) if position not in folded]


def _describe(sites: int, operators: int) -> str:
    return f"folded {counted(operators, 'shape operator')}"


FOLDING = Rewrite("fold", priced=False, find=find_folds, apply=apply_folds, describe=_describe)


def _evaluate(code: str, op: Any, tensors: Sequence[TensorT], values: dict[int, np.ndarray]) -> list[np.ndarray] | None:
    """The op's outputs if it can be folded exactly, else None."""
    inputs = ints(op.inputs)
    outs = [tensors[i] for i in ints(op.outputs)]
    expected = _OPTIONS.get(code)
    if not inputs or (op.builtinOptions is not None and (expected is None
                                                          or not isinstance(op.builtinOptions, expected))):
        return None  # another operator's options table: the folder would misread it
    if code == "SHAPE":
        shape = static_shape(tensors[inputs[0]]) if inputs[0] >= 0 else None
        if shape is None:
            return None
        args: list[np.ndarray | None] = [np.asarray(shape, dtype=np.int64)]
    else:
        if any(i < 0 or i not in values for i in inputs):
            return None
        args = [values[i] for i in inputs]
    if code not in _MOVES_ANY_TYPE:
        # Arithmetic only on unquantised integers: the kernels compute those exactly as numpy does.
        if any(tensors[i].type not in _INTEGER_TYPES or _quantised(tensors[i]) for i in inputs if code != "SHAPE"):
            return None
        if any(t.type not in _INTEGER_TYPES or _quantised(t) for t in outs):
            return None
    elif not _same_quantisation([tensors[i] for i in inputs[_DATA_INPUTS.get(code, slice(0, 1))]] + outs):
        return None
    try:
        with np.errstate(all="ignore"):
            results = _FOLDERS[code](op.builtinOptions, args, outs)
    except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError, _CannotFold):
        return None
    if results is None or len(results) != len(outs):
        return None
    converted = []
    input_bytes = sum(int(a.nbytes) for a in args if a is not None)
    for result, tensor in zip(results, outs, strict=True):
        if tensor.type not in NUMPY_TYPES:
            return None
        value = np.asarray(result)
        target = NUMPY_TYPES[tensor.type]
        if value.dtype != target and not np.can_cast(value.dtype, target, "same_kind"):
            return None
        value = value.astype(target)
        if value.nbytes > max(MAX_GROWTH_BYTES, input_bytes):
            return None
        declared = static_shape(tensor)
        if declared and declared != value.shape:
            return None
        converted.append(value)
    return converted


class _CannotFold(Exception):
    """An operand or option this folder does not handle exactly."""


def _quantised(tensor: Any) -> bool:
    q = tensor.quantization
    return q is not None and ((q.scale is not None and len(q.scale) > 0) or q.details is not None)


def _quant_key(tensor: Any) -> tuple[Any, ...]:
    q = tensor.quantization
    if q is None:
        return ()
    return (tuple(np.asarray(q.scale if q.scale is not None else []).tolist()),
            tuple(np.asarray(q.zeroPoint if q.zeroPoint is not None else []).tolist()), int(q.quantizedDimension))


def _same_quantisation(tensors: Sequence[Any]) -> bool:
    keys = {_quant_key(t) if _quantised(t) else () for t in tensors}
    types = {t.type for t in tensors}
    return len(keys) == 1 and len(types) == 1


def _no_activation(options: Any) -> None:
    if options is not None and getattr(options, "fusedActivationFunction", None):
        raise _CannotFold("fused activation")


def _at_most_growth(size_bytes: int) -> None:
    """Refuse before allocating a result that could not be kept (a FILL or RANGE the size of a feature map)."""
    if size_bytes > MAX_GROWTH_BYTES:
        raise _CannotFold("result too large")


def _shape(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    return [args[0]]


def _strided_slice(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    x, begin, end, strides = args[0], args[1].reshape(-1), args[2].reshape(-1), args[3].reshape(-1)
    if options is None:
        options = schema.StridedSliceOptionsT()
    if options.ellipsisMask or options.newAxisMask:
        raise _CannotFold("ellipsis or new axis")
    index: list[Any] = []
    for axis in range(x.ndim):
        if axis >= len(begin):
            index.append(slice(None))
            continue
        b, e, s = int(begin[axis]), int(end[axis]), int(strides[axis])
        if s == 0:
            raise _CannotFold("zero stride")
        if options.offset:
            e = b + e
        if options.shrinkAxisMask >> axis & 1:
            position = b + x.shape[axis] if b < 0 else b
            if not 0 <= position < x.shape[axis]:
                raise _CannotFold("shrink index out of range")
            index.append(position)
            continue
        start = None if options.beginMask >> axis & 1 else b
        stop = None if options.endMask >> axis & 1 else e
        index.append(slice(start, stop, s))
    return [x[tuple(index)]]


def _slice(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    x, begin, size = args[0], args[1].reshape(-1), args[2].reshape(-1)
    index = []
    for axis in range(x.ndim):
        b = int(begin[axis])
        n = int(size[axis])
        stop = x.shape[axis] if n == -1 else b + n
        if b < 0 or stop > x.shape[axis]:
            raise _CannotFold("slice out of range")
        index.append(slice(b, stop))
    return [x[tuple(index)]]


def _gather(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    params, indices = args
    axis = int(options.axis) if options is not None else 0
    if options is not None and options.batchDims:
        raise _CannotFold("batch_dims")
    axis = axis + params.ndim if axis < 0 else axis
    if indices.size and (indices.min() < 0 or indices.max() >= params.shape[axis]):
        raise _CannotFold("index out of range")
    return [np.take(params, indices.astype(np.int64), axis=axis)]


def _pack_op(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    axis = int(options.axis) if options is not None else 0
    return [np.stack(args, axis=axis)]


def _unpack(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    axis = int(options.axis) if options is not None else 0
    x = args[0]
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


def _concatenation(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    _no_activation(options)
    axis = int(options.axis) if options is not None else 0
    return [np.concatenate(args, axis=axis)]


def _reshape_like_output(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    shape = static_shape(outs[0])
    if shape is None or int(np.prod(shape, dtype=np.int64)) != args[0].size:
        raise _CannotFold("output shape unknown")
    return [args[0].reshape(shape)]


def _transpose(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    return [np.transpose(args[0], args[1].reshape(-1).astype(np.int64))]


def _cast(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    return [args[0].astype(NUMPY_TYPES[outs[0].type])]


def _binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., list[np.ndarray]]:
    def fold(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
        _no_activation(options)
        a, b = args
        return [function(a, b).astype(a.dtype)]

    return fold


def _truncating_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite's integer DIV truncates towards zero (C division), numpy's // floors."""
    if np.any(b == 0):
        raise ZeroDivisionError
    quotient = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -quotient, quotient)


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise ZeroDivisionError
    return np.floor_divide(a, b)


def _reduce(function: Callable[..., np.ndarray]) -> Callable[..., list[np.ndarray]]:
    def fold(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
        x, axes = args
        keep = bool(options.keepDims) if options is not None else False
        axes_tuple = tuple(sorted({int(a) + x.ndim if a < 0 else int(a) for a in axes.reshape(-1)}))
        return [function(x, axis=axes_tuple, keepdims=keep).astype(x.dtype)]

    return fold


def _fill(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    dims, value = args
    _at_most_growth(int(np.prod(dims.astype(np.int64), dtype=np.int64)) * value.itemsize)
    return [np.full(tuple(int(d) for d in dims.reshape(-1)), value.reshape(()), dtype=value.dtype)]


def _range(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    start, limit, delta = (int(a.reshape(())) for a in args)
    if delta == 0:
        raise ZeroDivisionError
    _at_most_growth((limit - start) // delta * args[0].itemsize)
    return [np.arange(start, limit, delta, dtype=args[0].dtype)]


_FOLDERS: dict[str, Callable[..., list[np.ndarray] | None]] = {
    "SHAPE": _shape, "STRIDED_SLICE": _strided_slice, "SLICE": _slice, "GATHER": _gather, "PACK": _pack_op,
    "UNPACK": _unpack, "CONCATENATION": _concatenation, "RESHAPE": _reshape_like_output,
    "SQUEEZE": _reshape_like_output, "EXPAND_DIMS": _reshape_like_output, "TRANSPOSE": _transpose, "CAST": _cast,
    "ADD": _binary(np.add), "SUB": _binary(np.subtract), "MUL": _binary(np.multiply), "DIV": _binary(_truncating_div),
    "FLOOR_DIV": _binary(_floor_div), "MAXIMUM": _binary(np.maximum), "MINIMUM": _binary(np.minimum),
    "REDUCE_PROD": _reduce(np.prod), "SUM": _reduce(np.sum), "REDUCE_MAX": _reduce(np.max),
    "REDUCE_MIN": _reduce(np.min), "FILL": _fill, "RANGE": _range,
}
# Operators that only move elements: folded on constants of any type whose quantisation the output keeps.
# (SHAPE is listed because its input may be any activation; its own output is checked to be an integer.)
_MOVES_ANY_TYPE = frozenset({"STRIDED_SLICE", "SLICE", "GATHER", "PACK", "UNPACK", "CONCATENATION", "RESHAPE",
                             "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "FILL"})
# The inputs holding the elements they move (the first, elsewhere): a FILL's value (a zero state Keras makes at
# the run-time batch, tf.zeros((batch, units)), quantised as the state).
_DATA_INPUTS = {"PACK": slice(None), "CONCATENATION": slice(None), "FILL": slice(1, 2)}
# The options table each folder reads (an operator may carry none; one of another type is not folded).
_OPTIONS: dict[str, type] = {
    "SHAPE": schema.ShapeOptionsT, "STRIDED_SLICE": schema.StridedSliceOptionsT, "SLICE": schema.SliceOptionsT,
    "GATHER": schema.GatherOptionsT, "PACK": schema.PackOptionsT, "UNPACK": schema.UnpackOptionsT,
    "CONCATENATION": schema.ConcatenationOptionsT, "RESHAPE": schema.ReshapeOptionsT,
    "SQUEEZE": schema.SqueezeOptionsT, "EXPAND_DIMS": schema.ExpandDimsOptionsT,
    "TRANSPOSE": schema.TransposeOptionsT, "CAST": schema.CastOptionsT, "ADD": schema.AddOptionsT,
    "SUB": schema.SubOptionsT, "MUL": schema.MulOptionsT, "DIV": schema.DivOptionsT,
    "FLOOR_DIV": schema.FloorDivOptionsT, "MAXIMUM": schema.MaximumMinimumOptionsT,
    "MINIMUM": schema.MaximumMinimumOptionsT, "REDUCE_PROD": schema.ReducerOptionsT, "SUM": schema.ReducerOptionsT,
    "REDUCE_MAX": schema.ReducerOptionsT, "REDUCE_MIN": schema.ReducerOptionsT, "FILL": schema.FillOptionsT,
    "RANGE": schema.RangeOptionsT,
}


