"""Reading and editing a TFLite model through the schema's object API, for the rewrites of this package.

Every reader here is defensive: a tensor index out of range, an options table of another operator, a buffer that
is not there or a shape that is not static reads as None, so a rewrite that finds None leaves the site alone
instead of failing on a malformed file. The writer (``pack_model``) stores constant data on 16-byte boundaries,
as the TFLite converter does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.tflite_reader import TfliteModel, TfliteSubgraph, parse_tflite

ModelT: TypeAlias = schema.ModelT
SubGraphT: TypeAlias = schema.SubGraphT
OperatorT: TypeAlias = schema.OperatorT
TensorT: TypeAlias = schema.TensorT
Options = TypeVar("Options")

FILE_IDENTIFIER = b"TFL3"
# Constant data starts on a 16-byte boundary, as the TFLite converter writes it (the schema's force_align).
_DATA_ALIGNMENT_BYTES = 16
# The depth of the NPU's storage bricks (NHCWB16): a view this deep moves in full bursts.
DEEP_CHANNELS = 16

NUMPY_TYPES: dict[int, np.dtype[Any]] = {
    schema.TensorType.FLOAT32: np.dtype("<f4"), schema.TensorType.FLOAT16: np.dtype("<f2"),
    schema.TensorType.FLOAT64: np.dtype("<f8"), schema.TensorType.INT8: np.dtype("i1"),
    schema.TensorType.UINT8: np.dtype("u1"), schema.TensorType.INT16: np.dtype("<i2"),
    schema.TensorType.UINT16: np.dtype("<u2"), schema.TensorType.INT32: np.dtype("<i4"),
    schema.TensorType.UINT32: np.dtype("<u4"), schema.TensorType.INT64: np.dtype("<i8"),
    schema.TensorType.UINT64: np.dtype("<u8"), schema.TensorType.BOOL: np.dtype("?"),
}
_OPCODE_NAMES = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}


# ---------------------------------------------------------------------------------------------------------------
# reading

def ints(vector: Any) -> list[int]:
    """An int vector of the object API (a numpy array, a list or None) as a list."""
    return [] if vector is None else [int(v) for v in vector]


def tensor_at(subgraph: SubGraphT, index: int) -> TensorT | None:
    """Tensor ``index`` of ``subgraph``, None where the index is out of range (or -1, an omitted input)."""
    tensors = subgraph.tensors or []
    return tensors[index] if 0 <= index < len(tensors) else None


def well_formed(subgraph: SubGraphT, op: OperatorT) -> bool:
    """Whether every input and output of ``op`` names a tensor of the subgraph (-1 allowed for an omitted input)."""
    count = len(subgraph.tensors or [])
    return all(-1 <= i < count for i in ints(op.inputs)) and all(0 <= i < count for i in ints(op.outputs))


def options(op: OperatorT, kind: type[Options]) -> Options | None:
    """``op``'s options table when it is a ``kind`` (a file may give an operator another operator's table)."""
    return op.builtinOptions if isinstance(op.builtinOptions, kind) else None


def opcode(model: ModelT, op: OperatorT) -> str:
    """The operator's builtin name ("UNKNOWN_n" for a code this schema does not know or an index out of range)."""
    codes = model.operatorCodes or []
    index = op.opcodeIndex if isinstance(op.opcodeIndex, int) else -1
    if not 0 <= index < len(codes):
        return "UNKNOWN_INDEX"
    builtin = max(int(codes[index].builtinCode), int(codes[index].deprecatedBuiltinCode))
    return _OPCODE_NAMES.get(builtin, f"UNKNOWN_{builtin}")


def signature(tensor: TensorT) -> tuple[int, ...] | None:
    sig = tensor.shapeSignature
    return None if sig is None else tuple(int(v) for v in sig)


def static_shape(tensor: TensorT | None) -> tuple[int, ...] | None:
    """The tensor's shape if no dimension of it is dynamic (None for a missing tensor)."""
    if tensor is None:
        return None
    sig = signature(tensor)
    if sig is not None and -1 in sig:
        return None
    shape = tuple(int(v) for v in (tensor.shape if tensor.shape is not None else ()))
    return None if any(v < 0 for v in shape) else shape


def name(tensor: TensorT) -> str:
    raw = tensor.name
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")


def constant(model: ModelT, tensor: TensorT | None) -> np.ndarray | None:
    """A constant tensor's value (None for activations, variables, external data, unknown types, missing
    buffers)."""
    if tensor is None or tensor.isVariable or tensor.sparsity is not None or tensor.type not in NUMPY_TYPES:
        return None
    buffers = model.buffers or []
    index = tensor.buffer if isinstance(tensor.buffer, int) else -1
    buffer = buffers[index] if 0 < index < len(buffers) else None
    if buffer is None or buffer.data is None or len(buffer.data) == 0:
        return None
    shape = static_shape(tensor)
    dtype = NUMPY_TYPES[tensor.type]
    raw = np.asarray(buffer.data, dtype=np.uint8).tobytes()
    if shape is None or len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def int_input(model: ModelT, subgraph: SubGraphT, op: OperatorT, number: int) -> np.ndarray | None:
    """The value of ``op``'s input ``number`` where it is an integer constant (an axis, a block shape, paddings),
    else None."""
    inputs = ints(op.inputs)
    value = constant(model, tensor_at(subgraph, inputs[number])) if len(inputs) > number else None
    return value if value is not None and value.dtype.kind == "i" else None


def per_channel_scales(tensor: TensorT) -> int:
    """How many scales the tensor's quantisation holds (0 without one)."""
    q = tensor.quantization
    return 0 if q is None or q.scale is None else len(q.scale)


def zero_points(tensor: TensorT) -> np.ndarray:
    """The tensor's zero points (empty where it has none)."""
    q = tensor.quantization
    return np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [])


def same_quantisation(subgraph: SubGraphT, a: int, b: int) -> bool:
    """Whether tensors ``a`` and ``b`` hold values alike (type, scales, zero points): an operator that only moves
    elements between them (a reshape, a slice, a resize) keeps every value (False for a missing tensor)."""
    ta, tb = tensor_at(subgraph, a), tensor_at(subgraph, b)

    def values(tensor: TensorT) -> tuple[list[float], list[int]]:
        q = tensor.quantization
        return ([] if q is None or q.scale is None else [float(v) for v in q.scale],
                [] if q is None or q.zeroPoint is None else [int(v) for v in q.zeroPoint])

    return ta is not None and tb is not None and ta.type == tb.type and values(ta) == values(tb)


def readers(operators: Sequence[OperatorT]) -> dict[int, list[int]]:
    """Tensor index -> positions of the operators reading it."""
    read: dict[int, list[int]] = {}
    for position, op in enumerate(operators):
        for index in ints(op.inputs):
            if index >= 0:
                read.setdefault(index, []).append(position)
    return read


def sole_reader(operators: Sequence[OperatorT], read: dict[int, list[int]], kept: set[int], index: int
                ) -> tuple[int, OperatorT] | None:
    """(position, operator) of the one operator reading tensor ``index`` as its first input: None where another
    operator reads it too, or it reads it otherwise, or ``kept`` (the subgraph's outputs) holds it. A chain of
    operators a rewrite replaces follows such readers, so nothing else sees what it removes."""
    following = read.get(index, [])
    if len(following) != 1 or index in kept or ints(operators[following[0]].inputs)[:1] != [index]:
        return None
    return following[0], operators[following[0]]


def chains_from(model: ModelT, subgraph: SubGraphT, first: str,
                plan: Callable[[list[OperatorT], dict[int, list[int]], set[int], int], Any]) -> list[Any]:
    """Every plan ``plan(operators, readers, subgraph outputs, position)`` makes of a chain starting at a
    well-formed ``first`` operator (None: no chain there)."""
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    found = (plan(operators, read, kept, position) for position, op in enumerate(operators)
             if opcode(model, op) == first and well_formed(subgraph, op))
    return [each for each in found if each is not None]


# The convolutions the chain rewrites change, and the options table each must carry.
CONVOLUTION_OPTIONS: dict[str, type] = {"CONV_2D": schema.Conv2DOptionsT,
                                        "DEPTHWISE_CONV_2D": schema.DepthwiseConv2DOptionsT}


def parsed_subgraph(model: ModelT, subgraph: SubGraphT) -> TfliteSubgraph:
    """``subgraph`` as the reader parses it (to ask Vela's placement rules), from the model as it is now."""
    parsed: TfliteModel = parse_tflite(pack_model(copy.deepcopy(model)))
    return parsed.subgraphs[model.subgraphs.index(subgraph)]


@dataclass(frozen=True)
class Convolution:
    """A CONV_2D a rewrite may change: static 4-D IFM and OFM, constant 4-D (OHWI) weights, its options, and its
    bias constant where it has one."""

    inputs: list[int]
    output: int
    ifm_shape: tuple[int, ...]
    ofm_shape: tuple[int, ...]
    weights: np.ndarray
    bias: np.ndarray | None
    options: Any


def convolution(model: ModelT, subgraph: SubGraphT, op: OperatorT) -> Convolution | None:
    """``op`` as a ``Convolution``, or None where it is none (another operator, another options table, or shapes
    or constants not known)."""
    inputs, outputs = ints(op.inputs), ints(op.outputs)
    conv_options = options(op, schema.Conv2DOptionsT)
    if opcode(model, op) != "CONV_2D" or conv_options is None or len(inputs) not in (2, 3) or len(outputs) != 1 \
            or inputs[0] < 0 or not well_formed(subgraph, op):
        return None
    ifm_shape = static_shape(tensor_at(subgraph, inputs[0]))
    ofm_shape = static_shape(tensor_at(subgraph, outputs[0]))
    weights = constant(model, tensor_at(subgraph, inputs[1]))
    has_bias = len(inputs) == 3 and inputs[2] >= 0
    bias = constant(model, tensor_at(subgraph, inputs[2])) if has_bias else None
    if ifm_shape is None or ofm_shape is None or len(ifm_shape) != 4 or len(ofm_shape) != 4 or weights is None \
            or weights.ndim != 4 or (has_bias and (bias is None or bias.shape != (weights.shape[0],))):
        return None
    return Convolution(inputs, outputs[0], ifm_shape, ofm_shape, weights, bias, conv_options)


def deep_view(shape: tuple[int, ...], depth: int = DEEP_CHANNELS) -> tuple[int, ...]:
    """[1, H', W', depth] holding the bytes of ``shape``, H' x W' as square as the pixel count allows."""
    pixels = shape[1] * shape[2] * shape[3] // depth
    width = max(w for w in range(1, int(pixels ** 0.5) + 1) if pixels % w == 0)
    return (1, pixels // width, width, depth)


# ---------------------------------------------------------------------------------------------------------------
# editing

def make_constant(model: ModelT, tensor: TensorT, value: np.ndarray) -> None:
    """Give ``tensor`` ``value`` in a buffer of its own (and its static shape)."""
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor.buffer = len(model.buffers) - 1
    tensor.shape = np.asarray(value.shape, dtype=np.int32)
    tensor.shapeSignature = None


def add_tensor(subgraph: SubGraphT, like: TensorT, suffix: str, shape: tuple[int, ...]) -> int:
    """A new activation tensor of ``like``'s type and quantisation with ``shape``; its index."""
    tensor = schema.TensorT()
    tensor.name = name(like) + suffix
    tensor.type, tensor.quantization, tensor.buffer = like.type, like.quantization, 0
    tensor.shape = np.asarray(shape, dtype=np.int32)
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def derived_constant(model: ModelT, subgraph: SubGraphT, index: int, value: np.ndarray, suffix: str,
                     per_channel: Callable[[np.ndarray], np.ndarray] | None = None) -> int:
    """A new constant like tensor ``index`` holding ``value``, named with ``suffix``; ``per_channel`` maps its
    per-channel scales and zero points (a numpy array each) to the new tensor's (None: they stay as they are)."""
    tensor = copy.deepcopy(subgraph.tensors[index])
    tensor.name = name(tensor) + suffix
    quantization = tensor.quantization
    if quantization is not None and per_channel is not None:
        for field_name in ("scale", "zeroPoint"):
            values = getattr(quantization, field_name)
            if values is not None and len(values) > 1:
                setattr(quantization, field_name, per_channel(np.asarray(values)))
    make_constant(model, tensor, value)
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def repeated_constant(model: ModelT, subgraph: SubGraphT, index: int, value: np.ndarray, repeats: int) -> int:
    """A new constant like tensor ``index`` holding ``value``, its per-channel quantisation repeated ``repeats``
    times."""
    return derived_constant(model, subgraph, index, value, "/c16", lambda values: np.tile(values, repeats))


def const_int32(model: ModelT, subgraph: SubGraphT, tensor_name: str, values: list[int],
                shape: tuple[int, ...]) -> int:
    """A new constant int32 tensor (with its own buffer); its index."""
    tensor = schema.TensorT()
    tensor.name, tensor.type = tensor_name, schema.TensorType.INT32
    tensor.shape = np.asarray(shape, dtype=np.int32)
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.asarray(values, dtype="<i4").tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor.buffer = len(model.buffers) - 1
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def operator_code_index(model: ModelT, builtin: int) -> int:
    """The index of ``builtin``'s operator code, added when the model has none."""
    for index, code in enumerate(model.operatorCodes):
        if max(int(code.builtinCode), int(code.deprecatedBuiltinCode)) == builtin:
            return index
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), 1
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def new_operator(model: ModelT, builtin: int, inputs: Sequence[int], outputs: Sequence[int],
                 options_type: int = schema.BuiltinOptions.NONE, builtin_options: Any = None) -> OperatorT:
    op = schema.OperatorT()
    op.opcodeIndex = operator_code_index(model, builtin)
    op.inputs = np.asarray(inputs, dtype=np.int32)
    op.outputs = np.asarray(outputs, dtype=np.int32)
    op.builtinOptionsType, op.builtinOptions = options_type, builtin_options
    return op


def copied_operator(op: OperatorT, inputs: Sequence[int], outputs: Sequence[int], **changed: Any) -> OperatorT:
    """``op`` (its operator code and a copy of its options, with the ``changed`` fields) on other tensors."""
    copied = schema.OperatorT()
    copied.opcodeIndex, copied.builtinOptionsType = op.opcodeIndex, op.builtinOptionsType
    copied.builtinOptions = copy.copy(op.builtinOptions)
    for field_name, value in changed.items():
        setattr(copied.builtinOptions, field_name, value)
    copied.inputs = np.asarray(inputs, dtype=np.int32)
    copied.outputs = np.asarray(outputs, dtype=np.int32)
    return copied


def reshape_op(model: ModelT, subgraph: SubGraphT, source: int, target: int, shape: tuple[int, ...]) -> OperatorT:
    """RESHAPE ``source`` -> ``target`` with a constant shape input, as converters write it."""
    shape_index = const_int32(model, subgraph, f"{name(subgraph.tensors[target])}/shape", list(shape), (len(shape),))
    reshape_options = schema.ReshapeOptionsT()
    reshape_options.newShape = list(shape)
    return new_operator(model, schema.BuiltinOperator.RESHAPE, [source, shape_index], [target],
                        schema.BuiltinOptions.ReshapeOptions, reshape_options)


def concatenation_op(model: ModelT, inputs: list[int], output: int, axis: int) -> OperatorT:
    """CONCATENATION of ``inputs`` along ``axis`` into ``output``, no activation."""
    concat_options = schema.ConcatenationOptionsT()
    concat_options.axis = axis
    return new_operator(model, schema.BuiltinOperator.CONCATENATION, inputs, [output],
                        schema.BuiltinOptions.ConcatenationOptions, concat_options)


def deep_copy(model: ModelT, subgraph: SubGraphT, source: int, target: int | None, shape: tuple[int, ...],
              like: TensorT) -> tuple[list[OperatorT], int]:
    """RESHAPE -> 1x1 MAX_POOL -> RESHAPE: ``source`` copied into ``target`` (both ``shape``; None: a new map named
    after ``like``, as the views are) by one NPU pass over a 16-deep view of its bytes (each byte as it is). The
    operators, and the target."""
    deep = deep_view(shape)
    view = add_tensor(subgraph, like, "/c16", deep)
    copied = add_tensor(subgraph, like, "/staged/c16", deep)
    if target is None:
        target = add_tensor(subgraph, like, "/staged", shape)
    pool_options = schema.Pool2DOptionsT()
    pool_options.padding = schema.Padding.VALID
    pool_options.strideW = pool_options.strideH = 1
    pool_options.filterWidth = pool_options.filterHeight = 1
    pool = new_operator(model, schema.BuiltinOperator.MAX_POOL_2D, [view], [copied],
                        schema.BuiltinOptions.Pool2DOptions, pool_options)
    return [reshape_op(model, subgraph, source, view, deep), pool,
            reshape_op(model, subgraph, copied, target, shape)], target


def replace_operators(subgraph: SubGraphT, replaced: dict[int, list[OperatorT]]) -> None:
    """The subgraph's operators with each position in ``replaced`` replaced by its list (in order)."""
    subgraph.operators = [new for position, op in enumerate(subgraph.operators or [])
                          for new in replaced.get(position, [op])]


def replace_chains(subgraph: SubGraphT, plans: Sequence[Any], build: Callable[[Any], list[OperatorT]]) -> None:
    """Each plan's chain of operators (``plan.positions``) replaced by what ``build(plan)`` makes, at its last."""
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        replaced.update((p, []) for p in plan.positions[:-1])
        replaced[plan.positions[-1]] = build(plan)
    replace_operators(subgraph, replaced)


# ---------------------------------------------------------------------------------------------------------------
# dead tensors and buffers, and writing

def drop_dead_tensors(model: ModelT, subgraph: SubGraphT) -> int:
    """Remove the tensors no operator, subgraph input/output or signature refers to; renumber the rest."""
    tensors = subgraph.tensors or []
    used: set[int] = set(ints(subgraph.inputs)) | set(ints(subgraph.outputs))
    for op in subgraph.operators or []:
        for vector in (op.inputs, op.outputs, op.intermediates):
            used.update(int(i) for i in (vector if vector is not None else []) if i >= 0)
    subgraph_index = model.subgraphs.index(subgraph)
    for sig in model.signatureDefs or []:
        if sig.subgraphIndex == subgraph_index:
            for entry in (sig.inputs or []) + (sig.outputs or []):
                used.add(int(entry.tensorIndex))
    if len(used) == len(tensors) or any(not 0 <= i < len(tensors) for i in used):
        return 0  # nothing dead, or a reference out of range: the file is left as it is (the reader says why)
    renumber = {old: new for new, old in enumerate(sorted(used))}
    subgraph.tensors = [tensors[i] for i in sorted(used)]

    def mapped(vector: Any) -> Any:
        if vector is None:
            return None
        return np.asarray([renumber[int(i)] if i >= 0 else int(i) for i in vector], dtype=np.int32)

    subgraph.inputs, subgraph.outputs = mapped(subgraph.inputs), mapped(subgraph.outputs)
    for op in subgraph.operators or []:
        op.inputs, op.outputs, op.intermediates = mapped(op.inputs), mapped(op.outputs), mapped(op.intermediates)
    for sig in model.signatureDefs or []:
        if sig.subgraphIndex == subgraph_index:
            for entry in (sig.inputs or []) + (sig.outputs or []):
                entry.tensorIndex = renumber[int(entry.tensorIndex)]
    return len(tensors) - len(used)


def release_dead_buffers(model: ModelT) -> None:
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


def pack_model(model: ModelT) -> bytes:
    """The model as a .tflite file."""
    buffers = []
    for buffer in model.buffers or []:
        aligned = _AlignedBufferT()
        aligned.data, aligned.offset, aligned.size = buffer.data, buffer.offset, buffer.size
        buffers.append(aligned)
    model.buffers = buffers
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def unpack_model(data: bytes) -> ModelT:
    """The model's object tree (raises whatever the generated reader raises on a corrupt file)."""
    return schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
