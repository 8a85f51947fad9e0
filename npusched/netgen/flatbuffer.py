"""Serialise a network description into a TFLite flatbuffer (schema version 3).

The generator builds plain frozen descriptions first and writes them here in one pass with the ``flatbuffers``
Builder and the ``tflite`` package's generated functions, so the bytes depend only on the description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np
import tflite
from tflite.BuiltinOperator import BuiltinOperator
from tflite.BuiltinOptions import BuiltinOptions
from tflite.TensorType import TensorType

SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"
# Constant data starts on a 16-byte boundary, as the TFLite converter writes it, so readers may map it directly.
_DATA_ALIGNMENT_BYTES = 16
# OperatorCode.deprecated_builtin_code is an int8: codes above 127 are stored as 127 (PLACEHOLDER_FOR_...).
_DEPRECATED_CODE_MAX = 127


@dataclass(frozen=True)
class TensorDef:
    """One tensor: per-tensor quantisation has one scale, per-channel one per slice of ``quantized_dimension``."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # a tflite.TensorType member name: "INT8", "INT32"
    scales: tuple[float, ...] = ()
    zero_points: tuple[int, ...] = ()
    quantized_dimension: int = 0
    data: bytes | None = None
    # As exporters with a dynamic batch write it (-1 first); None writes no signature (the default's bytes).
    shape_signature: tuple[int, ...] | None = None


@dataclass(frozen=True)
class OperatorDef:
    """One operator; ``options`` names a BuiltinOptions table and ``fields`` its (CamelCase field, value) pairs."""

    opcode: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: str | None = None
    fields: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class NetworkDef:
    tensors: tuple[TensorDef, ...]
    operators: tuple[OperatorDef, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    description: str = ""


def serialise(network: NetworkDef) -> bytes:
    """The TFLite file of ``network``: one subgraph, buffer 0 empty, one buffer per constant tensor."""
    b = flatbuffers.Builder(1 << 16)
    buffers = [_buffer(b, None)]
    tensors = []
    for tensor in network.tensors:
        buffer_index = 0
        if tensor.data is not None:
            buffers.append(_buffer(b, tensor.data))
            buffer_index = len(buffers) - 1
        tensors.append(_tensor(b, tensor, buffer_index))
    opcodes: dict[str, int] = {}
    operators = []
    for op in network.operators:
        opcode_index = opcodes.setdefault(op.opcode, len(opcodes))
        operators.append(_operator(b, op, opcode_index))
    codes = [_operator_code(b, name) for name in opcodes]
    name = b.CreateString("main")
    tensor_vector = _offsets(b, tensors)
    operator_vector = _offsets(b, operators)
    inputs, outputs = _int32s(b, network.inputs), _int32s(b, network.outputs)
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensor_vector)
    tflite.SubGraphAddInputs(b, inputs)
    tflite.SubGraphAddOutputs(b, outputs)
    tflite.SubGraphAddOperators(b, operator_vector)
    tflite.SubGraphAddName(b, name)
    subgraph = tflite.SubGraphEnd(b)
    description = b.CreateString(network.description)
    code_vector, subgraph_vector, buffer_vector = _offsets(b, codes), _offsets(b, [subgraph]), _offsets(b, buffers)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, SCHEMA_VERSION)
    tflite.ModelAddOperatorCodes(b, code_vector)
    tflite.ModelAddSubgraphs(b, subgraph_vector)
    tflite.ModelAddDescription(b, description)
    tflite.ModelAddBuffers(b, buffer_vector)
    b.Finish(tflite.ModelEnd(b), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


def _offsets(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        b.PrependUOffsetTRelative(offset)
    return b.EndVector()


def _int32s(b: flatbuffers.Builder, values: tuple[int, ...]) -> int:
    return b.CreateNumpyVector(np.asarray(values, dtype="<i4"))


def _buffer(b: flatbuffers.Builder, data: bytes | None) -> int:
    vector = None
    if data is not None:
        # StartVector's alignment argument places the payload; the bytes are then copied in as CreateNumpyVector does.
        b.StartVector(1, len(data), _DATA_ALIGNMENT_BYTES)
        b.head -= len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        b.vectorNumElems = len(data)
        vector = b.EndVector()
    tflite.BufferStart(b)
    if vector is not None:
        tflite.BufferAddData(b, vector)
    return tflite.BufferEnd(b)


def _tensor(b: flatbuffers.Builder, tensor: TensorDef, buffer_index: int) -> int:
    name = b.CreateString(tensor.name)
    shape = _int32s(b, tensor.shape)
    signature = _int32s(b, tensor.shape_signature) if tensor.shape_signature is not None else None
    quantization = None
    if tensor.scales:
        scales = b.CreateNumpyVector(np.asarray(tensor.scales, dtype="<f4"))
        zero_points = b.CreateNumpyVector(np.asarray(tensor.zero_points, dtype="<i8"))
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scales)
        tflite.QuantizationParametersAddZeroPoint(b, zero_points)
        tflite.QuantizationParametersAddQuantizedDimension(b, tensor.quantized_dimension)
        quantization = tflite.QuantizationParametersEnd(b)
    tflite.TensorStart(b)
    tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, getattr(TensorType, tensor.dtype))
    tflite.TensorAddBuffer(b, buffer_index)
    tflite.TensorAddName(b, name)
    if quantization is not None:
        tflite.TensorAddQuantization(b, quantization)
    if signature is not None:
        tflite.TensorAddShapeSignature(b, signature)
    return tflite.TensorEnd(b)


def _operator(b: flatbuffers.Builder, op: OperatorDef, opcode_index: int) -> int:
    options = None
    if op.options is not None:
        # A tuple is an int32 vector field (SQUEEZE's squeeze_dims): built before its table starts.
        values = [(field, _int32s(b, value) if isinstance(value, tuple) else value) for field, value in op.fields]
        getattr(tflite, f"{op.options}Start")(b)
        for field, value in values:
            getattr(tflite, f"{op.options}Add{field}")(b, value)
        options = getattr(tflite, f"{op.options}End")(b)
    inputs, outputs = _int32s(b, op.inputs), _int32s(b, op.outputs)
    tflite.OperatorStart(b)
    tflite.OperatorAddOpcodeIndex(b, opcode_index)
    tflite.OperatorAddInputs(b, inputs)
    tflite.OperatorAddOutputs(b, outputs)
    if options is not None and op.options is not None:
        tflite.OperatorAddBuiltinOptionsType(b, getattr(BuiltinOptions, op.options))
        tflite.OperatorAddBuiltinOptions(b, options)
    return tflite.OperatorEnd(b)


def _operator_code(b: flatbuffers.Builder, opcode: str) -> int:
    code = getattr(BuiltinOperator, opcode)
    tflite.OperatorCodeStart(b)
    tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, _DEPRECATED_CODE_MAX))
    tflite.OperatorCodeAddBuiltinCode(b, code)
    tflite.OperatorCodeAddVersion(b, 1)
    return tflite.OperatorCodeEnd(b)
