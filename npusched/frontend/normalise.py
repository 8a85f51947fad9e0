"""Normalise a TFLite model as Keras and PyTorch export it: fold what is static, drop what becomes dead.

Exporters with a dynamic batch dimension compute shapes at run time (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE
in every squeeze-excite block and flatten head, the same for a TRANSPOSE_CONV's output shape). The NPU runs batch
1, so every such shape is a constant: this module fixes the batch dimension at 1, evaluates with numpy every
operator whose inputs are then all known (constants, or the shape of a tensor whose shape is static), stores the
results as constant tensors and removes the operators and tensors nothing reads any more. Only integer arithmetic
without quantisation and pure data movement are folded, so the folded values are exactly what the TFLite kernels
would compute: the normalised model's tensors equal the original's bit for bit (tests/test_normalise.py checks it
with the TFLite reference interpreter).

The rewrite goes through the object API of the TFLite schema (``ai_edge_litert.schema_py_generated``, generated
by flatc from the maintained schema), so every table the file holds (options, metadata, signatures, other
subgraphs) is carried over as it was. A model with nothing to fold is returned as the same bytes.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.errors import ModelError
from npusched.frontend.supported import npu_support
from npusched.frontend.tflite_reader import parse_tflite

FILE_IDENTIFIER = b"TFL3"
# Constant data starts on a 16-byte boundary, as the TFLite converter writes it (the schema's force_align).
_DATA_ALIGNMENT_BYTES = 16
# A folded constant may be larger than its inputs only up to this size: folding is for shapes and small tables,
# not for materialising FILL/TILE results the size of feature maps into the file.
_MAX_GROWTH_BYTES = 4096

_NUMPY_TYPES: dict[int, np.dtype[Any]] = {
    schema.TensorType.FLOAT32: np.dtype("<f4"), schema.TensorType.FLOAT16: np.dtype("<f2"),
    schema.TensorType.FLOAT64: np.dtype("<f8"), schema.TensorType.INT8: np.dtype("i1"),
    schema.TensorType.UINT8: np.dtype("u1"), schema.TensorType.INT16: np.dtype("<i2"),
    schema.TensorType.UINT16: np.dtype("<u2"), schema.TensorType.INT32: np.dtype("<i4"),
    schema.TensorType.UINT32: np.dtype("<u4"), schema.TensorType.INT64: np.dtype("<i8"),
    schema.TensorType.UINT64: np.dtype("<u8"), schema.TensorType.BOOL: np.dtype("?"),
}
_INTEGER_TYPES = frozenset({schema.TensorType.INT32, schema.TensorType.INT64})
_OPCODE_NAMES = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}


def counted(count: int, noun: str, plural_suffix: str = "s") -> str:
    """E.g. "1 input", "3 inputs", "2 element-wise passes" (``plural_suffix`` "es")."""
    return f"{count} {noun}{plural_suffix * (count != 1)}"


@dataclass(frozen=True)
class Normalisation:
    """What normalisation changed: operators folded (by type), inputs whose dynamic batch was fixed at 1, large
    softmaxes split into row bands."""

    folded: tuple[tuple[str, int], ...] = ()
    fixed_batch_inputs: tuple[str, ...] = ()
    removed_tensors: int = 0
    relaid_passes: int = 0  # element-wise operators on channel-poor maps now computed on a 16 (or more) deep view
    widened_convolutions: int = 0  # 1x1 convolutions making a channel-poor output, computed 16 deep
    gates_first: int = 0  # MULs of two feature maps whose operands were swapped, the gate first (``_gates_first``)
    split_grouped_convolutions: int = 0  # grouped CONV_2Ds split into convolutions of whole groups
    staged_inputs: int = 0  # maps the NPU reads from DRAM, copied first in full bursts (``stage``)
    staged_outputs: int = 0  # maps the NPU writes for the CPU, written to fast storage and copied out (``stage``)
    split_softmaxes: int = 0  # SOFTMAX operators on large maps computed in row bands (``_band_softmax``)
    softmax_bands: int = 0  # the bands they became, all together

    @property
    def folded_operators(self) -> int:
        return sum(count for _, count in self.folded)

    @property
    def changed(self) -> bool:
        return bool(self.folded or self.fixed_batch_inputs or self.split_softmaxes or self.relaid_passes
                    or self.widened_convolutions or self.gates_first or self.split_grouped_convolutions
                    or self.staged_inputs or self.staged_outputs)

    def describe(self) -> str:
        """One line: what was folded and which dynamic dimension was fixed (empty when nothing changed)."""
        parts = []
        if self.folded:
            kinds = ", ".join(f"{count} {name}" for name, count in self.folded)
            parts.append(f"folded {counted(self.folded_operators, 'shape operator')} ({kinds})")
        if self.relaid_passes:
            parts.append(f"{counted(self.relaid_passes, 'element-wise pass', 'es')} re-laid out 16 or more deep")
        if self.widened_convolutions:
            parts.append(f"{counted(self.widened_convolutions, '1x1 convolution')} making a channel-poor output "
                         "computed 16 deep")
        if self.gates_first:
            parts.append(f"{counted(self.gates_first, 'MUL')} with the gate first")
        if self.split_grouped_convolutions:
            parts.append(f"{counted(self.split_grouped_convolutions, 'grouped convolution')} split into "
                         "convolutions of whole groups")
        if self.staged_inputs:
            parts.append(f"{counted(self.staged_inputs, 'input')} copied in full bursts before the NPU reads it")
        if self.staged_outputs:
            parts.append(f"{counted(self.staged_outputs, 'output')} copied out in full bursts after the NPU "
                         "writes it")
        if self.split_softmaxes:
            parts.append(self.describe_softmax_bands())
        if self.fixed_batch_inputs:
            names = ", ".join(repr(n) for n in self.fixed_batch_inputs[:3])
            more = f" and {len(self.fixed_batch_inputs) - 3} more" if len(self.fixed_batch_inputs) > 3 else ""
            parts.append(f"dynamic batch dimension fixed to 1 (the NPU runs batch 1) on input {names}{more}")
        return "; ".join(parts)

    def describe_softmax_bands(self) -> str:
        """E.g. "1 SOFTMAX split into 8 row bands"."""
        return f"{self.split_softmaxes} SOFTMAX split into {counted(self.softmax_bands, 'row band')}"

    def as_json(self) -> dict[str, Any]:
        return {"folded_operators": self.folded_operators, "folded_by_type": dict(self.folded),
                "fixed_batch_inputs": list(self.fixed_batch_inputs), "removed_tensors": self.removed_tensors,
                "relaid_passes": self.relaid_passes, "widened_convolutions": self.widened_convolutions,
                "gates_first": self.gates_first, "split_grouped_convolutions": self.split_grouped_convolutions,
                "staged_inputs": self.staged_inputs, "staged_outputs": self.staged_outputs,
                "split_softmaxes": self.split_softmaxes,
                "softmax_bands": self.softmax_bands}


def normalise(data: bytes, source: str = "<bytes>", relayout: bool = True, band_softmax: bool = True,
              stage: bool = False) -> tuple[bytes, Normalisation]:
    """The normalised model's bytes and what changed; ``data`` itself when nothing can be folded or split.

    A dynamic batch dimension is fixed at 1 (and the record says so) only in a model that has something to fold,
    split or re-lay out. ``relayout`` views element-wise chains on channel-poor maps 16 deep (see
    ``_relayout_channel_poor``), in any model (the default core re-lays such work out too), widens a 1x1
    convolution making a channel-poor output (``_widen_pointwise_outputs``) and puts a swish's gate first
    (``_gates_first``).
    ``band_softmax`` computes a SOFTMAX on a large map in row bands (see ``_band_softmax``), in any model, and a
    grouped convolution always becomes convolutions of whole groups (``_split_grouped_convolutions``).
    ``stage`` copies channel-poor maps the NPU would read from DRAM in short bursts, in full bursts first
    (``_stage_channel_poor_inputs``), and those it would write there, after (``_stage_channel_poor_outputs``); for
    schedules that keep feature maps off fast storage. A model with none of
    these is left byte for byte as it is.
    """
    try:
        model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    except Exception as exc:  # noqa: BLE001 - the runtime has no verifier; a corrupt file fails anywhere
        raise ModelError(f"{source}: corrupt or truncated TFLite flatbuffer ({type(exc).__name__}: {exc})") from None
    folded: Counter[str] = Counter()
    fixed: list[str] = []
    removed = relaid = widened = gates = grouped = staged = staged_out = split = bands = 0
    for subgraph in model.subgraphs or []:
        fixed += _fix_batch(subgraph)
        done = _fold(model, subgraph)
        folded.update(done)
        removed += _drop_dead_tensors(model, subgraph)
        grouped += _split_grouped_convolutions(model, subgraph)
    if relayout:
        widened = sum(_widen_pointwise_outputs(model, subgraph) for subgraph in model.subgraphs[:1])
        gates = sum(_gates_first(model, subgraph) for subgraph in model.subgraphs[:1])
        relaid = sum(_relayout_channel_poor(model, subgraph) for subgraph in model.subgraphs[:1])
    if stage and model.subgraphs:
        staged = _stage_channel_poor_inputs(model, model.subgraphs[0])
        staged_out = _stage_channel_poor_outputs(model, model.subgraphs[0])
    if band_softmax and model.subgraphs:
        split, bands = _band_softmax(model, model.subgraphs[0])
    if not folded and not split and not relaid and not widened and not gates and not grouped and not staged \
            and not staged_out:
        # Fixing the batch alone changes nothing the NPU runs (readers take the 1 in the shape): the file stays
        # the user's, so Vela's backend compiles the very file `vela` would.
        return data, Normalisation()
    record = Normalisation(tuple(sorted(folded.items(), key=lambda kv: (-kv[1], kv[0]))), tuple(fixed), removed,
                           relaid, widened, gates, grouped, staged, staged_out, split, bands)
    _release_dead_buffers(model)
    return _pack_model(model), record


def repack(data: bytes) -> bytes:
    """``data`` read and written again by this module's writer, unchanged: what a normalisation writes around
    its edits (the tests check with the reference interpreter that it keeps every table and value)."""
    return _pack_model(schema.ModelT.InitFromPackedBuf(bytearray(data), 0))


# ---------------------------------------------------------------------------------------------------------------
# batch

def _fix_batch(subgraph: Any) -> list[str]:
    """Fix a dynamic batch dimension (-1 in dimension 0 of shape_signature) at 1 on every tensor.

    Only where every dynamic dimension of the subgraph's inputs is the batch: a model dynamic elsewhere (a
    sequence length) keeps its signatures, and shapes derived from those stay unknown, so nothing is folded
    from them.
    """
    tensors = subgraph.tensors or []
    signatures = [_signature(tensors[i]) for i in _ints(subgraph.inputs)]
    if any(-1 in sig[1:] for sig in signatures if sig is not None):
        return []
    fixed = []
    for index, tensor in enumerate(tensors):
        signature = _signature(tensor)
        if signature is None or not signature or signature[0] != -1 or -1 in signature[1:]:
            continue
        tensor.shape = np.asarray([1, *signature[1:]], dtype=np.int32)
        tensor.shapeSignature = None
        if index in set(_ints(subgraph.inputs)):
            fixed.append(_name(tensor))
    return fixed


def _ints(vector: Any) -> list[int]:
    """An int vector of the object API (a numpy array, a list or None) as a list."""
    return [] if vector is None else [int(v) for v in vector]


def _signature(tensor: Any) -> tuple[int, ...] | None:
    sig = tensor.shapeSignature
    return None if sig is None else tuple(int(v) for v in sig)


def _static_shape(tensor: Any) -> tuple[int, ...] | None:
    """The tensor's shape if no dimension of it is dynamic."""
    signature = _signature(tensor)
    if signature is not None and -1 in signature:
        return None
    shape = tuple(int(v) for v in (tensor.shape if tensor.shape is not None else ()))
    return None if any(v < 0 for v in shape) else shape


def _name(tensor: Any) -> str:
    name = tensor.name
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name or "")


# ---------------------------------------------------------------------------------------------------------------
# folding

def _fold(model: Any, subgraph: Any) -> Counter[str]:
    """Fold operators in execution order; each folded output becomes a constant tensor with its own buffer."""
    tensors = subgraph.tensors or []
    values: dict[int, np.ndarray] = {}
    for index, tensor in enumerate(tensors):
        value = _constant(model, tensor)
        if value is not None:
            values[index] = value
    graph_outputs = set(_ints(subgraph.outputs))
    kept, folded = [], Counter[str]()
    for op in subgraph.operators or []:
        opcode = _opcode(model, op)
        results = None
        outputs = list(op.outputs if op.outputs is not None else [])
        if opcode in _FOLDERS and outputs and not graph_outputs & set(outputs):
            results = _evaluate(opcode, op, tensors, values)
        if results is None:
            kept.append(op)
            continue
        for index, result in zip(outputs, results, strict=True):
            values[index] = result
            _make_constant(model, tensors[index], result)
        folded[opcode] += 1
    subgraph.operators = kept
    return folded


def _opcode(model: Any, op: Any) -> str:
    code = model.operatorCodes[op.opcodeIndex]
    builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    return _OPCODE_NAMES.get(builtin, f"UNKNOWN_{builtin}")


def _constant(model: Any, tensor: Any) -> np.ndarray | None:
    """A constant tensor's value (None for activations, variables, external data and unknown types)."""
    if tensor.isVariable or tensor.sparsity is not None or tensor.type not in _NUMPY_TYPES:
        return None
    buffer = model.buffers[tensor.buffer] if 0 < tensor.buffer < len(model.buffers or []) else None
    if buffer is None or buffer.data is None or len(buffer.data) == 0:
        return None
    shape = _static_shape(tensor)
    dtype = _NUMPY_TYPES[tensor.type]
    raw = np.asarray(buffer.data, dtype=np.uint8).tobytes()
    if shape is None or len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _make_constant(model: Any, tensor: Any, value: np.ndarray) -> None:
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor.buffer = len(model.buffers) - 1
    tensor.shape = np.asarray(value.shape, dtype=np.int32)
    tensor.shapeSignature = None


def _evaluate(opcode: str, op: Any, tensors: Sequence[Any], values: dict[int, np.ndarray]) -> list[np.ndarray] | None:
    """The op's outputs if it can be folded exactly, else None."""
    inputs = [i for i in (op.inputs if op.inputs is not None else [])]
    outs = [tensors[i] for i in op.outputs]
    if opcode == "SHAPE":
        shape = _static_shape(tensors[inputs[0]])
        if shape is None:
            return None
        args: list[np.ndarray | None] = [np.asarray(shape, dtype=np.int64)]
    else:
        if any(i < 0 or i not in values for i in inputs):
            return None
        args = [values[i] for i in inputs]
    if opcode not in _MOVES_ANY_TYPE:
        # Arithmetic only on unquantised integers: the kernels compute those exactly as numpy does.
        if any(tensors[i].type not in _INTEGER_TYPES or _quantised(tensors[i]) for i in inputs if opcode != "SHAPE"):
            return None
        if any(t.type not in _INTEGER_TYPES or _quantised(t) for t in outs):
            return None
    elif not _same_quantisation([tensors[i] for i in (inputs if opcode in _ALL_DATA_INPUTS else inputs[:1])] + outs):
        return None
    try:
        with np.errstate(all="ignore"):
            results = _FOLDERS[opcode](op.builtinOptions, args, outs)
    except (ValueError, IndexError, TypeError, ZeroDivisionError, _CannotFold):
        return None
    if results is None or len(results) != len(outs):
        return None
    converted = []
    input_bytes = sum(int(a.nbytes) for a in args if a is not None)
    for result, tensor in zip(results, outs, strict=True):
        if tensor.type not in _NUMPY_TYPES:
            return None
        value = np.asarray(result)
        target = _NUMPY_TYPES[tensor.type]
        if value.dtype != target and not np.can_cast(value.dtype, target, "same_kind"):
            return None
        value = value.astype(target)
        if value.nbytes > max(_MAX_GROWTH_BYTES, input_bytes):
            return None
        declared = _static_shape(tensor)
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
    shape = _static_shape(outs[0])
    if shape is None or int(np.prod(shape, dtype=np.int64)) != args[0].size:
        raise _CannotFold("output shape unknown")
    return [args[0].reshape(shape)]


def _transpose(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    return [np.transpose(args[0], args[1].reshape(-1).astype(np.int64))]


def _cast(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    return [args[0].astype(_NUMPY_TYPES[outs[0].type])]


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
    return [np.full(tuple(int(d) for d in dims.reshape(-1)), value.reshape(()), dtype=value.dtype)]


def _range(options: Any, args: list[np.ndarray], outs: list[Any]) -> list[np.ndarray]:
    start, limit, delta = (int(a.reshape(())) for a in args)
    if delta == 0:
        raise ZeroDivisionError
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
                             "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE"})
_ALL_DATA_INPUTS = frozenset({"PACK", "CONCATENATION"})


# ---------------------------------------------------------------------------------------------------------------
# channel-poor element-wise chains

_UNARY_ELEMENTWISE = frozenset({"RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU",
                                "ABS"})
_BINARY_ELEMENTWISE = frozenset({"ADD", "SUB", "MUL"})
_DEEP_CHANNELS = 16
# Maps smaller than this are not staged (``_stage_channel_poor_inputs``): on the corpus, 3 KiB inputs (32 x 32 x
# 3) staged gained 4-16% on u65-512 but lost 0.15-0.3% on u65-256, where the copy's own pass costs about what it
# saves; from 9 KiB up every one gained (8-60%).
_STAGE_MIN_BYTES = 4096
# Operators that may read a staged map, as their first input.
_STAGED_READERS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D", "PAD"})


def _relayout_channel_poor(model: Any, subgraph: Any) -> int:
    """View chains of element-wise operators on [1, H, W, C<16] maps as [1, H', W', D] (same bytes, same order):
    D = 16, or lcm(C, 16) where an operand is a per-channel constant (a Normalization layer's mean and variance).

    Such maps (an image input's rescaling and normalisation on H x W x 3) move through memory in C-byte bursts;
    D deep, the same bytes move in full bursts. A chain is exact on any view of its bytes when every operator is
    unary element-wise or has a one-element constant as its other operand; on a view D deep when C divides D, a
    per-channel constant tiled D / C times is the same operand (channel d of the view is channel d mod C). So the
    chain gets a RESHAPE to the deep view before it and one back after it, and its intermediate tensors the deep
    shape (renamed with a ``/c16`` suffix; the chain's last output keeps its name, shape and value). Returns the
    operators moved.
    """
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    readers = _readers(operators)
    graph_outputs = set(_ints(subgraph.outputs))

    def operands(op: Any, channels: int) -> tuple[int, dict[int, np.ndarray]] | None:
        """The feature-map input and the per-channel constant inputs (index -> value), if the op may join a
        chain."""
        opcode, inputs = _opcode(model, op), _ints(op.inputs)
        if opcode in _UNARY_ELEMENTWISE and len(inputs) == 1:
            return inputs[0], {}
        if opcode in _BINARY_ELEMENTWISE and len(inputs) == 2:
            values = {i: value for i in inputs if (value := _constant(model, tensors[i])) is not None}
            maps = [i for i in inputs if i not in values]
            per_channel = {i: v for i, v in values.items() if v.size == channels > 1 and v.shape[-1:] == (channels,)
                           and len(tensors[i].quantization.scale if tensors[i].quantization is not None
                                   and tensors[i].quantization.scale is not None else []) <= 1}
            if len(maps) == 1 and all(v.size == 1 or i in per_channel for i, v in values.items()):
                return maps[0], per_channel
        return None

    # (source, shape, positions, each position's per-channel constants, view depth)
    chains: list[tuple[int, tuple[int, ...], list[int], list[dict[int, np.ndarray]], int]] = []
    taken: set[int] = set()
    for position, op in enumerate(operators):
        if position in taken:
            continue
        maps = [i for i in _ints(op.inputs) if i >= 0 and _constant(model, tensors[i]) is None]
        shape = _static_shape(tensors[maps[0]]) if len(maps) == 1 else None
        outputs = _ints(op.outputs)
        if shape is None or len(shape) != 4 or shape[0] != 1 or not 0 < shape[3] < _DEEP_CHANNELS \
                or len(outputs) != 1 or _static_shape(tensors[outputs[0]]) != shape:
            continue
        found = operands(op, shape[3])
        if found is None:
            continue
        source = found[0]
        chain, constants = [position], [found[1]]
        while True:
            out = _ints(operators[chain[-1]].outputs)[0]
            following = readers.get(out, [])
            if out in graph_outputs or len(following) != 1:
                break
            joined = operands(operators[following[0]], shape[3])
            if joined is None or joined[0] != out or len(_ints(operators[following[0]].outputs)) != 1 \
                    or _static_shape(tensors[_ints(operators[following[0]].outputs)[0]]) != shape:
                break
            chain.append(following[0])
            constants.append(joined[1])
        depth = math.lcm(shape[3], _DEEP_CHANNELS) if any(constants) else _DEEP_CHANNELS
        if (shape[1] * shape[2] * shape[3]) % depth:
            continue
        taken.update(chain)
        chains.append((source, shape, chain, constants, depth))
    if not chains:
        return 0
    reshape_code = _operator_code_index(model, schema.BuiltinOperator.RESHAPE)
    before: dict[int, Any] = {}
    after: dict[int, Any] = {}
    for source, shape, chain, constants, depth in chains:
        deep = _deep_view(shape, depth)
        originals = [_ints(operators[p].outputs)[0] for p in chain]
        current = _add_tensor(subgraph, tensors[source], "/c16", deep)
        before[chain[0]] = _reshape(model, subgraph, reshape_code, source, current, deep)
        previous = source
        repeats = depth // shape[3]
        for position, original, per_channel in zip(chain, originals, constants, strict=True):
            op = operators[position]
            op.inputs = np.asarray([current if i == previous else _repeated_constant(
                model, subgraph, i, np.tile(per_channel[i].reshape(-1), repeats), repeats)
                if i in per_channel else i for i in _ints(op.inputs)], dtype=np.int32)
            previous = original
            current = _add_tensor(subgraph, tensors[original], "/c16", deep)
            op.outputs = np.asarray([current], dtype=np.int32)
        after[chain[-1]] = _reshape(model, subgraph, reshape_code, current, originals[-1], shape)
    rewritten = []
    for position, op in enumerate(operators):
        rewritten += [before[position]] if position in before else []
        rewritten.append(op)
        rewritten += [after[position]] if position in after else []
    subgraph.operators = rewritten
    return sum(len(chain) for _, _, chain, _, _ in chains)


def _stage_channel_poor_inputs(model: Any, subgraph: Any) -> int:
    """Copy each map [1, H, W, C] (C not a multiple of 16, 4 KiB or more) that the NPU reads from outside its own
    work, a network input or the CPU's re-layout of one, and that convolutions, pools or a PAD read, with one NPU
    pass over a 16-deep view of its bytes: RESHAPE -> 1x1 MAX_POOL (each byte as it is) -> RESHAPE, the readers
    then reading the copy. (A CPU operator's output deeper in the network is left: on a Keras-style `mixed`
    network on u65-256 staging two of them cost 1.7% more.)

    Where feature maps live off fast storage (Dedicated_Sram), such a map is in DRAM, which a convolution reads
    in bursts of its block's depth, not the map's, once per OFM block column (mobilenet_v2 on the U65: a
    3-channel 128 x 128 input costs its first convolution 270,000 cycles of DRAM access; audio1d's 40-channel
    one 100,000). The copy reads it in full bursts once, and the scheduler may place it in fast storage. Vela's
    default core does the same with an NCHW input, whose TRANSPOSE it runs on the NPU. Returns the maps staged."""
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    readers = _readers(operators)
    produced = {index: position for position, op in enumerate(operators) for index in _ints(op.outputs)}
    inputs = set(_ints(subgraph.inputs))
    parsed = None
    staged: list[tuple[int, tuple[int, ...], list[int]]] = []
    for index in sorted(readers):
        shape = _static_shape(tensors[index])
        following = readers[index]
        size = int(np.prod(shape)) if shape is not None else 0
        if shape is None or len(shape) != 4 or shape[0] != 1 or not shape[3] % _DEEP_CHANNELS \
                or size % _DEEP_CHANNELS or size < _STAGE_MIN_BYTES or _constant(model, tensors[index]) is not None \
                or not all(_opcode(model, operators[p]) in _STAGED_READERS and _ints(operators[p].inputs)[0] == index
                           for p in following):
            continue
        if index in produced:  # only the CPU's re-layout of a network input (a PyTorch export's TRANSPOSE)
            producer = operators[produced[index]]
            if not all(i in inputs or _constant(model, tensors[i]) is not None for i in _ints(producer.inputs)
                       if i >= 0):
                continue
            if parsed is None:
                parsed = _parsed(model, subgraph)
            if npu_support(parsed.operators[produced[index]], parsed) is None:
                continue
        staged.append((index, shape, following))
    if not staged:
        return 0
    first_reader: dict[int, list[Any]] = {}
    for index, shape, following in staged:
        first_reader[min(following)], staged_map = _deep_copy(model, subgraph, index, None, shape, tensors[index])
        for position in following:
            op = operators[position]
            op.inputs = np.asarray([staged_map if i == index else i for i in _ints(op.inputs)], dtype=np.int32)
    subgraph.operators = [new for position, op in enumerate(operators)
                          for new in [*first_reader.get(position, []), op]]
    return len(staged)


def _stage_channel_poor_outputs(model: Any, subgraph: Any) -> int:
    """The mirror of ``_stage_channel_poor_inputs``: a map [1, H, W, C] (C < 16, 4 KiB or more) that the NPU makes
    and only CPU operators read is written to a map of its own, then copied to the original by one NPU pass over a
    16-deep view, so the copy is what writes to DRAM, in full bursts.

    Where feature maps live off fast storage (Dedicated_Sram) the map must end in DRAM, where the CPU reads it,
    and the pass making it would write it in bursts of its depth (a PyTorch-style U-Net's 4-channel 64 x 64
    output, read by the CPU's TRANSPOSE to NCHW: 70,178 cycles on u65-512). The map the pass writes may stay in
    fast storage; the copy writes the DRAM map in 4,369. Vela's default core gets there by running the TRANSPOSE
    on the NPU. The original tensor keeps its index and name. Where the rule stops was measured (CP-SAT, 15 s, both
    U65s, both estimators): a network output (a Keras U-Net's, already written 16 deep by its widened
    convolution) cost 0.5-3% more staged, and so did 24- and 40-channel maps the CPU reads in the `mixed`
    network; neither is staged. Returns the maps staged."""
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    readers = _readers(operators)
    parsed = None
    staged: dict[int, list[Any]] = {}
    for position, op in enumerate(operators):
        out = _ints(op.outputs)
        if len(out) != 1:
            continue
        index = out[0]
        shape = _static_shape(tensors[index])
        size = int(np.prod(shape)) if shape is not None else 0
        following = readers.get(index, [])
        if shape is None or len(shape) != 4 or shape[0] != 1 or shape[3] >= _DEEP_CHANNELS \
                or size % _DEEP_CHANNELS or size < _STAGE_MIN_BYTES or not following:
            continue
        if parsed is None:
            parsed = _parsed(model, subgraph)
        if npu_support(parsed.operators[position], parsed) is not None \
                or any(npu_support(parsed.operators[p], parsed) is None for p in following):
            continue  # made by the CPU, or read by the NPU too
        made = _add_tensor(subgraph, tensors[index], "/unstaged", shape)
        op.outputs = np.asarray([made], dtype=np.int32)
        staged[position] = _deep_copy(model, subgraph, made, index, shape, tensors[index])[0]
    subgraph.operators = [new for position, op in enumerate(operators) for new in [op, *staged.get(position, [])]]
    return len(staged)


def _deep_copy(model: Any, subgraph: Any, source: int, target: int | None, shape: tuple[int, ...],
               like: Any) -> tuple[list[Any], int]:
    """RESHAPE -> 1x1 MAX_POOL -> RESHAPE: ``source`` copied into ``target`` (both ``shape``; None: a new map named
    after ``like``, the map staged, as the views are) by one NPU pass over a 16-deep view of its bytes (each byte
    as it is). The operators, and the target."""
    deep = _deep_view(shape)
    view = _add_tensor(subgraph, like, "/c16", deep)
    copied = _add_tensor(subgraph, like, "/staged/c16", deep)
    if target is None:
        target = _add_tensor(subgraph, like, "/staged", shape)
    pool = schema.OperatorT()
    pool.opcodeIndex = _operator_code_index(model, schema.BuiltinOperator.MAX_POOL_2D)
    pool.inputs = np.asarray([view], dtype=np.int32)
    pool.outputs = np.asarray([copied], dtype=np.int32)
    pool.builtinOptionsType = schema.BuiltinOptions.Pool2DOptions
    pool.builtinOptions = schema.Pool2DOptionsT()
    pool.builtinOptions.padding = schema.Padding.VALID
    pool.builtinOptions.strideW = pool.builtinOptions.strideH = 1
    pool.builtinOptions.filterWidth = pool.builtinOptions.filterHeight = 1
    reshape_code = _operator_code_index(model, schema.BuiltinOperator.RESHAPE)
    return [_reshape(model, subgraph, reshape_code, source, view, deep), pool,
            _reshape(model, subgraph, reshape_code, copied, target, shape)], target


def _gates_first(model: Any, subgraph: Any) -> int:
    """Swap the operands of each MUL of two same-shape feature maps (more than one row: something to cascade)
    whose second is read by nothing else and whose first is read elsewhere too, as in a swish x * logistic(x):
    the gate becomes the first operand, the one a cascade can follow from the pass making it, and x the second,
    held whole (``cascades.elementwise_cascadable``). MUL commutes: the same products, the same rounding.
    Returns the MULs swapped."""
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    readers = _readers(operators)
    made = {index for op in operators for index in _ints(op.outputs)}
    swapped = 0
    for op in operators:
        inputs = _ints(op.inputs)
        if _opcode(model, op) != "MUL" or len(inputs) != 2 or not all(i in made for i in inputs) \
                or inputs[0] == inputs[1]:
            continue
        first, second = (_static_shape(tensors[i]) for i in inputs)
        if first is None or first != second or len(first) != 4 or first[1] < 2 \
                or len(readers.get(inputs[1], [])) != 1 or len(readers.get(inputs[0], [])) < 2:
            continue
        op.inputs = np.asarray([inputs[1], inputs[0]], dtype=np.int32)
        swapped += 1
    return swapped


def _widen_pointwise_outputs(model: Any, subgraph: Any) -> int:
    """Compute each 1x1 convolution making a channel-poor network output ([1, H, W, C], 16 divisible by C) on a
    16-deep view: k = 16 / C neighbouring pixels become one, the IFM viewed [1, H, W/k, k x Cin] and the weights
    block-diagonal, so the OFM [1, H, W/k, 16] holds the output's bytes in their order, exactly (each output
    channel sums the same products; its bias and scales are repeated k times).

    A network output is written to memory the CPU reads, channel by channel: C-byte bursts, where a segmentation
    head's 1x1 convolution (and the LOGISTIC or other unary chain after it, to the output) spends most of its
    time. The MACs grow k-fold, on a layer that has few. Only where the IFM is 16-channel aligned, so its view is
    a plain reshape of bytes its producer writes in whole bricks. Returns the convolutions widened.
    """
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    readers = _readers(operators)
    graph_outputs = set(_ints(subgraph.outputs))

    def reaches_an_output(tensor: int, shape: tuple[int, ...]) -> bool:
        while tensor not in graph_outputs:
            following = readers.get(tensor, [])
            if len(following) != 1 or _opcode(model, operators[following[0]]) not in _UNARY_ELEMENTWISE:
                return False
            outputs = _ints(operators[following[0]].outputs)
            if len(outputs) != 1 or _static_shape(tensors[outputs[0]]) != shape:
                return False
            tensor = outputs[0]
        return True

    reshape_code = _operator_code_index(model, schema.BuiltinOperator.RESHAPE)
    replaced: dict[int, list[Any]] = {}
    for position, op in enumerate(operators):
        conv, options = _convolution(model, tensors, op), op.builtinOptions
        if conv is None or options is None or (options.strideH, options.strideW, options.dilationHFactor,
                                               options.dilationWFactor) != (1, 1, 1, 1) \
                or conv.ifm_shape[0] != 1 or conv.ifm_shape[3] % _DEEP_CHANNELS or conv.weights.shape[1:3] != (1, 1):
            continue
        inputs, output, ifm_shape, ofm_shape = conv.inputs, conv.output, conv.ifm_shape, conv.ofm_shape
        weights, bias = conv.weights, conv.bias
        channels = ofm_shape[3]
        if not 0 < channels < _DEEP_CHANNELS or _DEEP_CHANNELS % channels or ofm_shape[2] % (_DEEP_CHANNELS //
                                                                                                channels):
            continue
        quantization = tensors[inputs[1]].quantization
        zero_points = np.asarray(quantization.zeroPoint if quantization is not None
                                 and quantization.zeroPoint is not None else [])
        if quantization is None or np.any(zero_points != 0) or not reaches_an_output(output, ofm_shape):
            continue
        k = _DEEP_CHANNELS // channels
        wide_weights = np.zeros((k * channels, 1, 1, k * weights.shape[3]), dtype=weights.dtype)
        for block in range(k):
            wide_weights[block * channels:(block + 1) * channels, :, :,
                         block * weights.shape[3]:(block + 1) * weights.shape[3]] = weights
        view_shape = (1, ifm_shape[1], ifm_shape[2] // k, k * ifm_shape[3])
        wide_inputs = [_add_tensor(subgraph, tensors[inputs[0]], "/c16", view_shape),
                       _repeated_constant(model, subgraph, inputs[1], wide_weights, k)]
        if len(inputs) == 3:
            wide_inputs.append(-1 if bias is None else _repeated_constant(model, subgraph, inputs[2],
                                                                            np.tile(bias, k), k))
        deep = (1, ofm_shape[1], ofm_shape[2] // k, _DEEP_CHANNELS)
        wide_output = _add_tensor(subgraph, tensors[output], "/c16", deep)
        view = _reshape(model, subgraph, reshape_code, inputs[0], wide_inputs[0], view_shape)
        op.inputs = np.asarray(wide_inputs, dtype=np.int32)
        op.outputs = np.asarray([wide_output], dtype=np.int32)
        replaced[position] = [view, op, _reshape(model, subgraph, reshape_code, wide_output, output, ofm_shape)]
    subgraph.operators = [new for position, op in enumerate(operators) for new in replaced.get(position, [op])]
    return len(replaced)


def _grouped_convolution_parts(groups: int, group_ifm_depth: int, group_ofm_depth: int) -> int:
    """How many convolutions a grouped one becomes: k neighbouring groups share one (block-diagonal weights), k
    the fewest groups whose IFM and OFM depths are whole 16-channel bricks, so each part reads and writes its
    channels of NHCWB16 maps in whole bricks; every group alone (k = 1) when no k divides the groups so."""
    for k in range(1, groups + 1):
        if groups % k == 0 and (k * group_ifm_depth) % _DEEP_CHANNELS == 0 \
                and (k * group_ofm_depth) % _DEEP_CHANNELS == 0:
            return groups // k
    return groups


def _split_grouped_convolutions(model: Any, subgraph: Any) -> int:
    """Rewrite each grouped CONV_2D (kernel depth a fraction of the IFM's, as Keras exports Conv2D(groups=G):
    RegNet, ResNeXt) as SPLIT -> one CONV_2D per part -> CONCATENATION along channels.

    Vela's legacy core makes the same rewrite but stops on its own split (a TypeError, Vela 5.2.0 with numpy 2),
    and npusched's lowering reads a convolution's weights as covering the whole IFM depth, so the grouped form
    is no pass either can run. A part holds k neighbouring groups (``_grouped_convolution_parts``) with
    block-diagonal weights: each output channel sums the products of its own group only, with its own bias and
    scales, so every part's output is exactly its channels of the grouped convolution's (zero weights add
    nothing). The parts keep the OFM's quantisation and fused activation; Vela reads each part's channels at an
    offset and writes them at one. Returns the convolutions rewritten."""
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    split_code = _operator_code_index(model, schema.BuiltinOperator.SPLIT)
    concat_code = _operator_code_index(model, schema.BuiltinOperator.CONCATENATION)
    replaced: dict[int, list[Any]] = {}
    for position, op in enumerate(operators):
        conv = _convolution(model, tensors, op)
        if conv is None:
            continue
        inputs, output, ifm_shape, ofm_shape = conv.inputs, conv.output, conv.ifm_shape, conv.ofm_shape
        weights, bias = conv.weights, conv.bias
        group_ifm_depth, filters = weights.shape[3], weights.shape[0]
        groups = ifm_shape[3] // group_ifm_depth if group_ifm_depth else 0
        if groups < 2 or ifm_shape[3] % group_ifm_depth or filters % groups or ofm_shape[3] != filters:
            continue
        group_ofm_depth = filters // groups
        parts = _grouped_convolution_parts(groups, group_ifm_depth, group_ofm_depth)
        per_part = groups // parts
        part_ifm_depth, part_ofm_depth = per_part * group_ifm_depth, per_part * group_ofm_depth
        stem = _name(tensors[output])
        if parts > 1:
            split = schema.OperatorT()
            split.opcodeIndex = split_code
            axis = _const_int32(model, subgraph, f"{stem}/group_axis", [3], ())
            part_inputs = [_add_tensor(subgraph, tensors[inputs[0]], f"/group{p}",
                                       (*ifm_shape[:3], part_ifm_depth)) for p in range(parts)]
            split.inputs = np.asarray([axis, inputs[0]], dtype=np.int32)
            split.outputs = np.asarray(part_inputs, dtype=np.int32)
            split.builtinOptionsType = schema.BuiltinOptions.SplitOptions
            split.builtinOptions = schema.SplitOptionsT()
            split.builtinOptions.numSplits = parts
            new_ops = [split]
        else:
            part_inputs, new_ops = [inputs[0]], []
        part_outputs = []
        for p in range(parts):
            channels = slice(p * part_ofm_depth, (p + 1) * part_ofm_depth)
            block = np.zeros((part_ofm_depth, *weights.shape[1:3], part_ifm_depth), dtype=weights.dtype)
            for g in range(per_part):
                rows = slice(g * group_ofm_depth, (g + 1) * group_ofm_depth)
                block[rows, :, :, g * group_ifm_depth:(g + 1) * group_ifm_depth] = weights[channels][rows]
            part_conv = schema.OperatorT()
            part_conv.opcodeIndex, part_conv.builtinOptionsType = op.opcodeIndex, op.builtinOptionsType
            part_conv.builtinOptions = op.builtinOptions
            conv_inputs = [part_inputs[p], _channel_slice(model, subgraph, inputs[1], block, channels, p)]
            if bias is not None:
                conv_inputs.append(_channel_slice(model, subgraph, inputs[2], bias[channels], channels, p))
            part_conv.inputs = np.asarray(conv_inputs, dtype=np.int32)
            if parts > 1:
                part_outputs.append(_add_tensor(subgraph, tensors[output], f"/group{p}",
                                                (*ofm_shape[:3], part_ofm_depth)))
                part_conv.outputs = np.asarray(part_outputs[-1:], dtype=np.int32)
            else:
                part_conv.outputs = np.asarray([output], dtype=np.int32)
            new_ops.append(part_conv)
        if parts > 1:
            new_ops.append(_concatenation_op(concat_code, part_outputs, output, 3))
        replaced[position] = new_ops
    subgraph.operators = [new for position, op in enumerate(operators) for new in replaced.get(position, [op])]
    return len(replaced)


def _channel_slice(model: Any, subgraph: Any, index: int, value: np.ndarray, channels: slice, part: int) -> int:
    """A new constant like tensor ``index`` (weights or bias, output channels first) holding ``value``: output
    ``channels`` of it, with their per-channel scales and zero points."""
    tensor = copy.deepcopy(subgraph.tensors[index])
    tensor.name = f"{_name(tensor)}/group{part}"
    quantization = tensor.quantization
    if quantization is not None:
        for field_name in ("scale", "zeroPoint"):
            values = getattr(quantization, field_name)
            if values is not None and len(values) > 1:
                setattr(quantization, field_name, np.asarray(values)[channels])
    _make_constant(model, tensor, value)
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


@dataclass(frozen=True)
class _Convolution:
    """A CONV_2D the rewrites may change: static 4-D IFM and OFM, constant 4-D (OHWI) weights, and its bias constant
    where it has one."""

    inputs: list[int]
    output: int
    ifm_shape: tuple[int, ...]
    ofm_shape: tuple[int, ...]
    weights: np.ndarray
    bias: np.ndarray | None


def _convolution(model: Any, tensors: Sequence[Any], op: Any) -> _Convolution | None:
    """``op`` (of the subgraph holding ``tensors``) as a ``_Convolution``, or None where it is none (another
    operator, or shapes or constants not known)."""
    inputs, outputs = _ints(op.inputs), _ints(op.outputs)
    if _opcode(model, op) != "CONV_2D" or len(inputs) not in (2, 3) or len(outputs) != 1 or inputs[0] < 0:
        return None
    ifm_shape, ofm_shape = _static_shape(tensors[inputs[0]]), _static_shape(tensors[outputs[0]])
    weights = _constant(model, tensors[inputs[1]])
    has_bias = len(inputs) == 3 and inputs[2] >= 0
    bias = _constant(model, tensors[inputs[2]]) if has_bias else None
    if ifm_shape is None or ofm_shape is None or len(ifm_shape) != 4 or len(ofm_shape) != 4 or weights is None \
            or weights.ndim != 4 or (has_bias and bias is None):
        return None
    return _Convolution(inputs, outputs[0], ifm_shape, ofm_shape, weights, bias)


def _parsed(model: Any, subgraph: Any) -> Any:
    """``subgraph`` as the reader parses it (to ask Vela's placement rules), from the model as it is now."""
    return parse_tflite(_pack_model(copy.deepcopy(model))).subgraphs[model.subgraphs.index(subgraph)]


def _repeated_constant(model: Any, subgraph: Any, index: int, value: np.ndarray, repeats: int) -> int:
    """A new constant like tensor ``index`` holding ``value``, its per-channel quantisation (if any) repeated
    ``repeats`` times."""
    tensor = copy.deepcopy(subgraph.tensors[index])
    tensor.name = _name(tensor) + "/c16"
    quantization = tensor.quantization
    if quantization is not None:
        for field_name in ("scale", "zeroPoint"):
            values = getattr(quantization, field_name)
            if values is not None and len(values) > 1:
                setattr(quantization, field_name, np.tile(np.asarray(values), repeats))
    _make_constant(model, tensor, value)
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _readers(operators: list[Any]) -> dict[int, list[int]]:
    """Tensor index -> positions of the operators reading it."""
    readers: dict[int, list[int]] = {}
    for position, op in enumerate(operators):
        for index in _ints(op.inputs):
            if index >= 0:
                readers.setdefault(index, []).append(position)
    return readers


def _deep_view(shape: tuple[int, ...], depth: int = _DEEP_CHANNELS) -> tuple[int, ...]:
    """[1, H', W', depth] holding the bytes of ``shape``, H' x W' as square as the pixel count allows."""
    pixels = shape[1] * shape[2] * shape[3] // depth
    width = max(w for w in range(1, int(pixels ** 0.5) + 1) if pixels % w == 0)
    return (1, pixels // width, width, depth)


def _add_tensor(subgraph: Any, like: Any, suffix: str, shape: tuple[int, ...]) -> int:
    """A new activation tensor of ``like``'s type and quantisation with ``shape``."""
    tensor = schema.TensorT()
    tensor.name = _name(like) + suffix
    tensor.type, tensor.quantization, tensor.buffer = like.type, like.quantization, 0
    tensor.shape = np.asarray(shape, dtype=np.int32)
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _operator_code_index(model: Any, builtin: int) -> int:
    for index, code in enumerate(model.operatorCodes):
        if max(int(code.builtinCode), int(code.deprecatedBuiltinCode)) == builtin:
            return index
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), 1
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def _reshape(model: Any, subgraph: Any, code: int, source: int, target: int, shape: tuple[int, ...]) -> Any:
    """RESHAPE ``source`` -> ``target`` with a constant shape input, as converters write it."""
    shape_index = _const_int32(model, subgraph, f"{_name(subgraph.tensors[target])}/shape", list(shape),
                               (len(shape),))
    op = schema.OperatorT()
    op.opcodeIndex = code
    op.inputs = np.asarray([source, shape_index], dtype=np.int32)
    op.outputs = np.asarray([target], dtype=np.int32)
    op.builtinOptionsType = schema.BuiltinOptions.ReshapeOptions
    op.builtinOptions = schema.ReshapeOptionsT()
    op.builtinOptions.newShape = list(shape)
    return op


# ---------------------------------------------------------------------------------------------------------------
# softmax on large maps

# A SOFTMAX is split when its decomposition's int32 map (one int32 per IFM element) is over this size: five such
# maps are live at its peak, each stored 16 deep (a 4-class map takes 64 bytes a pixel), so over 1.25 MiB; a
# classifier's or an attention layer's softmax (tens of KiB) is left as Vela compiles it.
SOFTMAX_SPLIT_BYTES = 64 * 1024
# Each band's int32 map is at most this. At 32 KiB a 128 x 128 x 4 segmentation head becomes 8 bands and its peak
# falls from 5 MiB to below its U-Net body's (docs/results.md), for 33 passes a band (the decomposition's 31, a
# slice copy, a concatenation copy); 16 KiB doubles the passes and lowers no peak there.
SOFTMAX_BAND_BYTES = 32 * 1024
_SOFTMAX_TYPES = frozenset({schema.TensorType.INT8, schema.TensorType.UINT8, schema.TensorType.INT16})


@dataclass(frozen=True)
class _SoftmaxBands:
    """One SOFTMAX to split: its position in the operator list and the rows of each band."""

    position: int
    rows: tuple[int, ...]


def softmax_bands(height: int, row_bytes: int, band_bytes: int = SOFTMAX_BAND_BYTES) -> tuple[int, ...]:
    """The rows of each band of a softmax over ``height`` rows whose int32 map holds ``row_bytes`` per row: the
    fewest bands each within ``band_bytes``, as equal as the rows allow (larger ones first); one band (no split)
    when the whole map fits."""
    per_band = max(1, band_bytes // max(1, row_bytes))
    count = min(height, -(-height // per_band))
    return tuple(height // count + (k < height % count) for k in range(count))


def _band_softmax(model: Any, subgraph: Any, band_bytes: int = SOFTMAX_BAND_BYTES,
                  split_bytes: int = SOFTMAX_SPLIT_BYTES) -> tuple[int, int]:
    """Split every SOFTMAX on a large map into row bands: SPLIT_V -> one SOFTMAX per band -> CONCATENATION.

    The NPU has no exp or divide, so Vela's legacy core lowers an 8-bit SOFTMAX into 31 passes whose
    temporaries are int32 maps of the whole input (lowering/softmax.py), five of them live at once and each
    stored 16 deep: a 128 x 128 x 4 segmentation head needs 5 MiB of fast storage at one step, five times its
    U-Net body's peak. Softmax is over the last axis only, so each row is computed alone: a band's SOFTMAX
    gives exactly the rows the whole one gives (tests/test_normalise.py checks every tensor bit for bit under
    the reference kernels). Vela's graph optimiser makes the split a read at an offset and the concatenation a
    write at one (each a cheap int8 copy per band, since SOFTMAX is decomposed), and orders the passes band by
    band, so each band's temporaries die before the next band's are made.

    Applied when the int32 map (elements x 4 bytes) exceeds ``split_bytes``, to [1, H, W, C] and [1, N, C]
    inputs of one batch, splitting the rows (H, or N), and only to a SOFTMAX Vela runs on the NPU (one left to
    the CPU gains nothing, and NPU copies around it would split the NPU work). Returns (softmaxes split, bands).
    """
    tensors = subgraph.tensors or []
    operators = list(subgraph.operators or [])
    plans: list[_SoftmaxBands] = []
    for position, op in enumerate(operators):
        if _opcode(model, op) != "SOFTMAX" or len(_ints(op.inputs)) != 1 or len(_ints(op.outputs)) != 1:
            continue
        source, target = tensors[_ints(op.inputs)[0]], tensors[_ints(op.outputs)[0]]
        shape = _static_shape(source)
        if shape is None or len(shape) not in (3, 4) or shape[0] != 1 or shape[1] < 2 \
                or _static_shape(target) != shape or source.type not in _SOFTMAX_TYPES \
                or _constant(model, source) is not None:
            continue
        row_bytes = int(np.prod(shape[2:], dtype=np.int64)) * 4
        if shape[1] * row_bytes > split_bytes:
            plans.append(_SoftmaxBands(position, softmax_bands(shape[1], row_bytes, band_bytes)))
    if plans:
        # Vela's placement, judged on the model as it is now (folded).
        parsed = _parsed(model, subgraph)
        plans = [p for p in plans if len(p.rows) > 1 and npu_support(parsed.operators[p.position], parsed) is None]
    if not plans:
        return 0, 0
    split_code = _operator_code_index(model, schema.BuiltinOperator.SPLIT_V)
    concat_code = _operator_code_index(model, schema.BuiltinOperator.CONCATENATION)
    replaced: dict[int, list[Any]] = {}
    for plan in plans:
        op = operators[plan.position]
        source_index, target_index = _ints(op.inputs)[0], _ints(op.outputs)[0]
        shape = _static_shape(tensors[source_index])
        assert shape is not None
        split = schema.OperatorT()
        split.opcodeIndex = split_code
        stem = _name(tensors[source_index])
        sizes = _const_int32(model, subgraph, f"{stem}/band_rows", list(plan.rows), (len(plan.rows),))
        axis = _const_int32(model, subgraph, f"{stem}/band_axis", [1], ())
        split.inputs = np.asarray([source_index, sizes, axis], dtype=np.int32)
        split.builtinOptionsType = schema.BuiltinOptions.SplitVOptions
        split.builtinOptions = schema.SplitVOptionsT()
        split.builtinOptions.numSplits = len(plan.rows)
        band_ops, band_outputs, band_inputs = [], [], []
        for band, rows in enumerate(plan.rows):
            band_shape = (1, rows, *shape[2:])
            band_inputs.append(_add_tensor(subgraph, tensors[source_index], f"/band{band}", band_shape))
            band_outputs.append(_add_tensor(subgraph, tensors[target_index], f"/band{band}", band_shape))
            softmax = schema.OperatorT()
            softmax.opcodeIndex, softmax.builtinOptionsType = op.opcodeIndex, op.builtinOptionsType
            softmax.builtinOptions = op.builtinOptions
            softmax.inputs = np.asarray([band_inputs[-1]], dtype=np.int32)
            softmax.outputs = np.asarray([band_outputs[-1]], dtype=np.int32)
            band_ops.append(softmax)
        split.outputs = np.asarray(band_inputs, dtype=np.int32)
        replaced[plan.position] = [split, *band_ops, _concatenation_op(concat_code, band_outputs, target_index, 1)]
    subgraph.operators = [new for position, op in enumerate(operators) for new in replaced.get(position, [op])]
    return len(plans), sum(len(plan.rows) for plan in plans)


def _concatenation_op(code: int, inputs: list[int], output: int, axis: int) -> Any:
    """CONCATENATION of ``inputs`` along ``axis`` into ``output``, no activation (``code``: its operator code)."""
    concat = schema.OperatorT()
    concat.opcodeIndex = code
    concat.inputs = np.asarray(inputs, dtype=np.int32)
    concat.outputs = np.asarray([output], dtype=np.int32)
    concat.builtinOptionsType = schema.BuiltinOptions.ConcatenationOptions
    concat.builtinOptions = schema.ConcatenationOptionsT()
    concat.builtinOptions.axis = axis
    return concat


def _const_int32(model: Any, subgraph: Any, name: str, values: list[int], shape: tuple[int, ...]) -> int:
    """A new constant int32 tensor (with its own buffer); its index."""
    tensor = schema.TensorT()
    tensor.name, tensor.type = name, schema.TensorType.INT32
    tensor.shape = np.asarray(shape, dtype=np.int32)
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.asarray(values, dtype="<i4").tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor.buffer = len(model.buffers) - 1
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


# ---------------------------------------------------------------------------------------------------------------
# dead tensors and buffers

def _drop_dead_tensors(model: Any, subgraph: Any) -> int:
    """Remove the tensors no operator, subgraph input/output or signature refers to; renumber the rest."""
    tensors = subgraph.tensors or []
    used: set[int] = set(_ints(subgraph.inputs)) | set(_ints(subgraph.outputs))
    for op in subgraph.operators or []:
        for vector in (op.inputs, op.outputs, op.intermediates):
            used.update(int(i) for i in (vector if vector is not None else []) if i >= 0)
    subgraph_index = model.subgraphs.index(subgraph)
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex == subgraph_index:
            for entry in (signature.inputs or []) + (signature.outputs or []):
                used.add(int(entry.tensorIndex))
    if len(used) == len(tensors):
        return 0
    renumber = {old: new for new, old in enumerate(sorted(used))}
    subgraph.tensors = [tensors[i] for i in sorted(used)]

    def mapped(vector: Any) -> Any:
        if vector is None:
            return None
        return np.asarray([renumber[int(i)] if i >= 0 else int(i) for i in vector], dtype=np.int32)

    subgraph.inputs, subgraph.outputs = mapped(subgraph.inputs), mapped(subgraph.outputs)
    for op in subgraph.operators or []:
        op.inputs, op.outputs, op.intermediates = mapped(op.inputs), mapped(op.outputs), mapped(op.intermediates)
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex == subgraph_index:
            for entry in (signature.inputs or []) + (signature.outputs or []):
                entry.tensorIndex = renumber[int(entry.tensorIndex)]
    return len(tensors) - len(used)


def _release_dead_buffers(model: Any) -> None:
    """Empty the buffers no tensor or metadata entry refers to (indices stay, so nothing else is renumbered)."""
    used = {int(t.buffer) for sg in model.subgraphs or [] for t in sg.tensors or []}
    used |= {int(m.buffer) for m in model.metadata or []}
    used |= {int(b) for b in (model.metadataBuffer if model.metadataBuffer is not None else [])}
    for index, buffer in enumerate(model.buffers or []):
        if index not in used and buffer.data is not None:
            buffer.data = None


class _AlignedBufferT(schema.BufferT):
    """A buffer whose data is written on a 16-byte boundary, as the converter writes it."""

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 - the generated API's name
        if self.data is None or self.offset:
            return int(super().Pack(builder))
        data = np.asarray(self.data, dtype=np.uint8).tobytes()
        builder.StartVector(1, len(data), _DATA_ALIGNMENT_BYTES)
        builder.head -= len(data)
        builder.Bytes[builder.head:builder.head + len(data)] = data
        builder.vectorNumElems = len(data)
        vector = builder.EndVector()
        schema.BufferStart(builder)
        schema.BufferAddData(builder, vector)
        return int(schema.BufferEnd(builder))


def _pack_model(model: Any) -> bytes:
    buffers = []
    for buffer in model.buffers or []:
        aligned = _AlignedBufferT()
        aligned.data, aligned.offset, aligned.size = buffer.data, buffer.offset, buffer.size
        buffers.append(aligned)
    model.buffers = buffers
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())
