"""Read a TFLite flatbuffer into plain frozen dataclasses.

Decoding goes through the generated schema bindings of the ``tflite`` package on top of the ``flatbuffers``
runtime, so the schema is the maintained one rather than a hand-kept copy. The Python flatbuffers runtime
has no verifier, so this module checks what the rest of npusched relies on (identifier, schema version,
every index, every constant's byte size) and turns anything else that goes wrong while decoding a corrupt
file into a one-line ``ModelError``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import tflite
from tflite.BuiltinOperator import BuiltinOperator
from tflite.BuiltinOptions import BuiltinOptions
from tflite.BuiltinOptions2 import BuiltinOptions2
from tflite.TensorType import TensorType

from npusched.errors import ModelError
from npusched.ir import DataType, Quantization

FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3


@dataclass(frozen=True, eq=False)
class TfliteTensor:
    """One tensor of a subgraph. ``data`` is set only for constants: a read-only little-endian array of the
    tensor's dtype and shape (types numpy cannot express, such as INT4 or STRING, stay raw uint8 bytes)."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: DataType
    quantization: Quantization
    buffer_index: int
    data: np.ndarray | None = field(default=None, repr=False)
    is_variable: bool = False
    shape_signature: tuple[int, ...] | None = None
    tflite_type: str = "INT8"

    @property
    def is_const(self) -> bool:
        return self.data is not None


@dataclass(frozen=True)
class TfliteOperator:
    """One operator. ``inputs``/``outputs`` are tensor indices of the subgraph; -1 marks an absent optional
    operand. ``options`` maps snake_case schema field names to plain values (enums as their names)."""

    index: int
    opcode: str
    custom_code: str | None
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: dict[str, Any] = field(default_factory=dict)
    custom_options: bytes | None = None
    intermediates: tuple[int, ...] = ()


@dataclass(frozen=True)
class TfliteSubgraph:
    name: str
    tensors: tuple[TfliteTensor, ...]
    operators: tuple[TfliteOperator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def tensor(self, index: int) -> TfliteTensor | None:
        """The tensor at ``index``, or None for the optional-operand marker -1."""
        return None if index < 0 else self.tensors[index]

    @functools.cached_property
    def produced(self) -> frozenset[int]:
        """Indices of the tensors some operator writes (kept once per subgraph: checks ask per operator)."""
        return frozenset(i for op in self.operators for i in op.outputs if i >= 0)

    def op_inputs(self, op: TfliteOperator) -> tuple[TfliteTensor | None, ...]:
        return tuple(self.tensor(i) for i in op.inputs)

    def op_outputs(self, op: TfliteOperator) -> tuple[TfliteTensor | None, ...]:
        return tuple(self.tensor(i) for i in op.outputs)


@dataclass(frozen=True)
class TfliteModel:
    path: str
    version: int
    description: str
    subgraphs: tuple[TfliteSubgraph, ...]

    @property
    def main(self) -> TfliteSubgraph:
        """The entry subgraph (TFLite runs subgraph 0)."""
        return self.subgraphs[0]

    def op_counts(self) -> dict[str, int]:
        """How often each operator type occurs in all subgraphs."""
        counts: dict[str, int] = {}
        for sg in self.subgraphs:
            for op in sg.operators:
                counts[op.opcode] = counts.get(op.opcode, 0) + 1
        return counts


def _enum_names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


_OPCODE_NAMES = _enum_names(BuiltinOperator)
_TYPE_NAMES = _enum_names(TensorType)
_OPTIONS_NAMES = _enum_names(BuiltinOptions)
_OPTIONS2_NAMES = _enum_names(BuiltinOptions2)

_DATATYPES = {"UINT8": DataType.uint8, "INT8": DataType.int8, "INT16": DataType.int16, "INT32": DataType.int32,
              "INT64": DataType.int64, "FLOAT32": DataType.float32, "BOOL": DataType.bool}
_NUMPY_DTYPES = {"FLOAT32": "<f4", "FLOAT16": "<f2", "FLOAT64": "<f8", "INT8": "i1", "UINT8": "u1", "INT16": "<i2",
                 "UINT16": "<u2", "INT32": "<i4", "UINT32": "<u4", "INT64": "<i8", "UINT64": "<u8", "BOOL": "?",
                 "COMPLEX64": "<c8", "COMPLEX128": "<c16"}

# Options fields whose integer value is a schema enum: getter name -> enum class of the tflite package.
# The generated Python carries no type information, so this table is the one piece kept by hand.
_ENUM_FIELDS = {
    "Padding": "Padding", "FusedActivationFunction": "ActivationFunctionType",
    "WeightsFormat": "FullyConnectedOptionsWeightsFormat", "KernelType": "LSTMKernelType",
    "Type": "LSHProjectionType", "Combiner": "CombinerType", "Mode": "MirrorPadMode", "Algorithm": "RngAlgorithm",
    "ReduceFunction": "ReduceWindowFunction", "CompositeAttributesFormat": "CustomOptionsFormat",
    "CompareType": "StablehloComparisonType", "ComparisonDirection": "StablehloComparisonDirection",
    "PrecisionConfig": "StablehloPrecisionConfig",
    **{name: "TensorType" for name in ("InDataType", "OutDataType", "OutType", "OutputType", "IdxOutType",
                                        "QuantizedBiasType", "KeyDtype", "ValueDtype")},
}
_NOT_FIELDS = re.compile(r"^(GetRootAs|Init$)|BufferHasIdentifier$|(AsNumpy|Length|IsNone)$")


class _StrictBytes(bytes):
    """File bytes whose slices fail when they run past the end, so a truncated string or vector raises
    instead of silently coming back short (the flatbuffers runtime slices strings without a check)."""

    def __getitem__(self, key):
        if isinstance(key, slice) and key.stop is not None and key.stop > len(self):
            raise IndexError(f"read up to byte {key.stop} past the end of a {len(self)}-byte file")
        return super().__getitem__(key)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@functools.cache
def _tflite_class(name: str) -> type | None:
    """A generated class of the tflite package; each lives in the module of the same name."""
    try:
        return getattr(importlib.import_module(f"tflite.{name}"), name)
    except (ImportError, AttributeError):
        return None


@functools.cache
def _options_fields(cls: type) -> tuple[tuple[str, str, bool, dict[int, str] | None], ...]:
    """(snake_case key, getter name, is_vector, enum names) for every field getter of an options class."""
    fields = []
    for name, member in vars(cls).items():
        if not inspect.isfunction(member) or _NOT_FIELDS.search(name):
            continue
        is_vector = len(inspect.signature(member).parameters) == 2
        enum_cls = _ENUM_FIELDS.get(name)
        # StableHLO ops have int64 vectors named Padding; only scalar Padding is the enum.
        if enum_cls is not None and is_vector and name != "PrecisionConfig":
            enum_cls = None
        enum_type = _tflite_class(enum_cls) if enum_cls else None
        names = _enum_names(enum_type) if enum_type is not None else None
        fields.append((_snake(name), name, is_vector, names))
    return tuple(fields)


def _decode_options(table: Any, union_name: str) -> dict[str, Any]:
    """All fields of a builtin options table as {snake_case: value}; enums become names, vectors tuples."""
    cls = _tflite_class(union_name)
    if cls is None or table is None:
        return {}
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    out: dict[str, Any] = {}
    for key, getter, is_vector, enum in _options_fields(cls):
        if is_vector:
            array = getattr(obj, getter + "AsNumpy")() if hasattr(obj, getter + "AsNumpy") else None
            if isinstance(array, np.ndarray):
                value: Any = array.tobytes() if array.dtype == np.uint8 else tuple(array.tolist())
            else:
                value = tuple(getattr(obj, getter)(j) for j in range(getattr(obj, getter + "Length")()))
                value = tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
            if enum is not None:
                value = tuple(enum.get(v, v) for v in value)
        else:
            value = getattr(obj, getter)()
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            elif enum is not None:
                value = enum.get(value, value)
        out[key] = value
    return out


class _Reader:
    """Decodes one file; holds the bytes and the name used in error messages."""

    def __init__(self, data: bytes, source: str):
        self.buf = _StrictBytes(data)
        self.source = source

    def fail(self, reason: str) -> ModelError:
        return ModelError(f"{self.source}: {reason}")

    def count(self, what: str, n: int, item_bytes: int = 4) -> int:
        """A vector length, refused when it could not fit in the file (corrupt lengths would loop for ages)."""
        if n < 0 or n * item_bytes > len(self.buf):
            raise self.fail(f"{what} claims {n} entries, more than a {len(self.buf)}-byte file can hold")
        return n

    def int_vector(self, obj: Any, getter: str) -> tuple[int, ...]:
        if getattr(obj, getter + "IsNone")():
            return ()
        return tuple(int(v) for v in getattr(obj, getter + "AsNumpy")().tolist())

    def text(self, raw: bytes | None, what: str) -> str:
        if raw is None:
            return ""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def external(self, offset: int, size: int, what: str) -> bytes:
        """Bytes stored after the flatbuffer (models over 2 GB); offsets 0 and 1 mean 'none' in TFLite."""
        if offset + size > len(self.buf):
            raise self.fail(f"{what} lies at bytes {offset}..{offset + size} beyond the end of the file")
        return bytes(memoryview(self.buf)[offset:offset + size])

    def model(self) -> TfliteModel:
        if len(self.buf) == 0:
            raise self.fail("file is empty")
        if len(self.buf) < 8:
            raise self.fail(f"file is only {len(self.buf)} bytes, too short for a TFLite flatbuffer")
        if self.buf[4:8] != FILE_IDENTIFIER:
            raise self.fail(f"not a TFLite model (file identifier {bytes(self.buf[4:8])!r}, expected b'TFL3')")
        m = tflite.Model.GetRootAs(self.buf, 0)
        version = m.Version()
        if version != SCHEMA_VERSION:
            raise self.fail(f"unsupported TFLite schema version {version} (expected {SCHEMA_VERSION})")
        opcodes = [self.opcode(m.OperatorCodes(i), i)
                   for i in range(self.count("operator_codes", m.OperatorCodesLength()))]
        buffers = [self.buffer(m.Buffers(i), i) for i in range(self.count("buffers", m.BuffersLength()))]
        n_subgraphs = self.count("subgraphs", m.SubgraphsLength())
        if n_subgraphs == 0:
            raise self.fail("model has no subgraphs")
        subgraphs = tuple(self.subgraph(m.Subgraphs(i), i, opcodes, buffers) for i in range(n_subgraphs))
        return TfliteModel(self.source, version, self.text(m.Description(), "model description"), subgraphs)

    def opcode(self, code: Any, index: int) -> tuple[str, str | None, int]:
        # Old files only set the int8 deprecated code; newer ones set both (the deprecated one saturated at
        # 127), so the larger of the two is the real code, as the TFLite runtime takes it. The package's
        # BuiltinCode() already falls back to the deprecated field whenever the stored value is below 127,
        # which hides the stored value; read the int32 field (vtable slot 10) itself.
        slot = code._tab.Offset(10)
        stored = code._tab.Get(flatbuffers.number_types.Int32Flags, code._tab.Pos + slot) if slot else 0
        value = max(stored, code.DeprecatedBuiltinCode())
        name = _OPCODE_NAMES.get(value, f"UNKNOWN_BUILTIN_{value}")
        custom = self.text(code.CustomCode(), f"custom code of operator code {index}") if name == "CUSTOM" else None
        return name, custom, code.Version()

    def buffer(self, buffer: Any, index: int) -> bytes | np.ndarray | None:
        if buffer.Offset() > 1:
            return self.external(buffer.Offset(), buffer.Size(), f"buffer {index}") or None
        if buffer.DataIsNone() or buffer.DataLength() == 0:
            return None
        return buffer.DataAsNumpy()

    def subgraph(self, sg: Any, sg_index: int, opcodes: list, buffers: list) -> TfliteSubgraph:
        where = f"subgraph {sg_index}"
        tensors = tuple(self.tensor(sg.Tensors(i), i, where, buffers)
                        for i in range(self.count(f"{where} tensors", sg.TensorsLength())))
        n = len(tensors)
        inputs, outputs = self.int_vector(sg, "Inputs"), self.int_vector(sg, "Outputs")
        for kind, indices in (("input", inputs), ("output", outputs)):
            for i in indices:
                if not 0 <= i < n:
                    raise self.fail(f"{where} {kind} is tensor index {i} but the subgraph has {n} tensors")
        operators = tuple(self.operator(sg.Operators(i), i, where, n, opcodes)
                          for i in range(self.count(f"{where} operators", sg.OperatorsLength())))
        return TfliteSubgraph(self.text(sg.Name(), f"{where} name"), tensors, operators, inputs, outputs)

    def tensor(self, t: Any, index: int, where: str, buffers: list) -> TfliteTensor:
        name = self.text(t.Name(), f"name of tensor {index} of {where}")
        label = f"tensor {index} ({name!r}) of {where}"
        shape = self.int_vector(t, "Shape")
        signature = None if t.ShapeSignatureIsNone() else self.int_vector(t, "ShapeSignature")
        type_name = _TYPE_NAMES.get(t.Type(), f"UNKNOWN_TYPE_{t.Type()}")
        buffer_index = t.Buffer()
        if not 0 <= buffer_index < len(buffers):
            raise self.fail(f"{label} uses buffer index {buffer_index} but the model has {len(buffers)} buffers")
        return TfliteTensor(index=index, name=name, shape=shape, dtype=_DATATYPES.get(type_name, DataType.other),
                            quantization=self.quantization(t.Quantization()), buffer_index=buffer_index,
                            data=self.constant(buffers[buffer_index], shape, type_name, label),
                            is_variable=bool(t.IsVariable()), shape_signature=signature, tflite_type=type_name)

    def constant(self, raw: bytes | np.ndarray | None, shape: tuple[int, ...], type_name: str,
                 label: str) -> np.ndarray | None:
        if raw is None:
            return None
        data = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, bytes) else raw
        dtype = _NUMPY_DTYPES.get(type_name)
        if dtype is None:
            return data
        if any(d < 0 for d in shape):
            raise self.fail(f"{label} is constant but has an unknown dimension in shape {list(shape)}")
        expected = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        if data.size != expected:
            raise self.fail(f"{label} has {data.size} bytes of data but shape {list(shape)} of {type_name} "
                            f"needs {expected}")
        return data.view(dtype).reshape(shape)

    def quantization(self, q: Any) -> Quantization:
        if q is None:
            return Quantization()

        def floats(getter: str) -> tuple[float, ...]:
            return () if getattr(q, getter + "IsNone")() else tuple(getattr(q, getter + "AsNumpy")().tolist())

        return Quantization(scale=floats("Scale"), zero_point=self.int_vector(q, "ZeroPoint"),
                            quantized_dimension=q.QuantizedDimension(), min=floats("Min"), max=floats("Max"))

    def operator(self, op: Any, index: int, where: str, n_tensors: int, opcodes: list) -> TfliteOperator:
        label = f"operator {index} of {where}"
        code_index = op.OpcodeIndex()
        if not 0 <= code_index < len(opcodes):
            raise self.fail(f"{label} uses operator code {code_index} but the model has {len(opcodes)}")
        opcode, custom_code, version = opcodes[code_index]
        inputs, outputs = self.int_vector(op, "Inputs"), self.int_vector(op, "Outputs")
        intermediates = self.int_vector(op, "Intermediates")
        for i in inputs + outputs + intermediates:
            if not -1 <= i < n_tensors:
                raise self.fail(f"{label} uses tensor index {i} but the subgraph has {n_tensors} tensors")
        options = self.options(op.BuiltinOptionsType(), op.BuiltinOptions, _OPTIONS_NAMES, label)
        options.update(self.options(op.BuiltinOptions2Type(), op.BuiltinOptions2, _OPTIONS2_NAMES, label))
        custom_options = None
        if op.LargeCustomOptionsOffset() > 1:
            custom_options = self.external(op.LargeCustomOptionsOffset(), op.LargeCustomOptionsSize(),
                                           f"custom options of {label}")
        elif not op.CustomOptionsIsNone():
            custom_options = op.CustomOptionsAsNumpy().tobytes()
        return TfliteOperator(index, opcode, custom_code, version, inputs, outputs, options, custom_options,
                              intermediates)

    def options(self, kind: int, table_getter: Callable[[], Any], names: dict[int, str], label: str) -> dict:
        if kind == 0:
            return {}
        if kind not in names:
            raise self.fail(f"{label} has unknown builtin options type {kind}")
        return _decode_options(table_getter(), names[kind])


def parse_tflite(data: bytes, source: str = "<bytes>") -> TfliteModel:
    """Decode TFLite flatbuffer bytes; ``source`` names the input in error messages.

    The model is frozen, so the last few decoded are kept and shared: one file is often read again (a second
    graph of it, a replay, a sweep's next configuration), and decoding is most of reading it."""
    return _parse(bytes(data), source)


@functools.lru_cache(maxsize=4)
def _parse(data: bytes, source: str) -> TfliteModel:
    reader = _Reader(data, source)
    try:
        return reader.model()
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - the runtime has no verifier; corrupt offsets fail anywhere
        kind = type(exc).__qualname__
        if type(exc).__module__ != "builtins":
            kind = f"{type(exc).__module__}.{kind}"
        detail = " ".join(f"{kind}: {exc}".split())
        raise reader.fail(f"corrupt or truncated TFLite flatbuffer ({detail[:200]})") from None


def read_tflite(path: str | Path) -> TfliteModel:
    """Read a .tflite file; every problem with the file raises ModelError with a one-line reason."""
    return parse_tflite(read_model_bytes(path), str(path))


def read_model_bytes(path: str | Path) -> bytes:
    """A model file's bytes; a missing or unreadable file raises ModelError with a one-line reason."""
    source = str(path)
    p = Path(path)
    if p.is_dir():
        raise ModelError(f"{source}: is a directory, not a TFLite file")
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"{source}: no such file") from None
    except OSError as exc:
        raise ModelError(f"{source}: cannot read file ({exc.strerror or exc})") from None
