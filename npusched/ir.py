"""The intermediate representation shared by lowering, pricing and the solvers.

Everything here is immutable: a solver tries a plan by building a new value, never by editing the graph.
Names follow Vela's legacy core where a user of Vela would look for them (op types such as ``Conv2DBias``,
NPU block types, memory areas), so that reports read the same.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, field
from typing import overload

import numpy as np

# The NPU dilates a kernel by at most this much; a larger dilation is spread with zero taps (Vela legacy's form).
NPU_MAX_DILATION = 2


class HashedEnum(enum.Enum):
    """An enum hashed once per member, by a checksum of its name: enums key the cost model's dicts (memories,
    purposes, directions), where ``Enum.__hash__`` hashed the name on every lookup, and with str's hash, which
    differs per process (PYTHONHASHSEED), so a set of members iterated in another order in each run."""

    _hash_: int

    def __init__(self, *args: object) -> None:
        self._hash_ = zlib.crc32(self._name_.encode())

    def __hash__(self) -> int:
        return self._hash_


class MemArea(HashedEnum):
    """A physical memory of the system, as Vela's configuration files name them."""

    Sram = "Sram"
    Dram = "Dram"
    OnChipFlash = "OnChipFlash"
    OffChipFlash = "OffChipFlash"
    Shram = "Shram"

    def display_name(self) -> str:
        return {"Sram": "SRAM", "Dram": "DRAM", "OnChipFlash": "On-chip Flash",
                "OffChipFlash": "Off-chip Flash", "Shram": "SHRAM"}[self.value]


class TensorFormat(HashedEnum):
    """Layout of a feature map in memory: plain NHWC or the NPU's 16-channel brick format."""

    NHWC = "NHWC"
    NHCWB16 = "NHCWB16"


class NpuBlockType(HashedEnum):
    """The NPU hardware unit that executes a pass (Vela's ``NpuBlockType``)."""

    Default = "Default"
    ConvolutionMxN = "ConvolutionMxN"
    VectorProduct = "VectorProduct"
    Pooling = "Pooling"
    ConvolutionDepthWise = "ConvolutionDepthWise"
    ElementWise = "ElementWise"
    ReduceSum = "ReduceSum"
    Dma = "Dma"


class ResamplingMode(HashedEnum):
    """How the IFM is upscaled on read (resize ops and transpose convolution)."""

    NONE = "none"
    NEAREST = "nearest"
    TRANSPOSE = "transpose"


class DataType(HashedEnum):
    """Element types of feature maps and constants."""

    uint8 = "uint8"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    float32 = "float32"
    bool = "bool"
    other = "other"

    @property
    def size_in_bits(self) -> int:
        return {"uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "float32": 32, "bool": 8,
                "other": 8}[self.value]

    @property
    def size_in_bytes(self) -> int:
        return self.size_in_bits // 8


@dataclass(frozen=True, order=True)
class Shape4D:
    """An NHWC shape. Lower-rank shapes are padded at the front with ones, as Vela does."""

    batch: int = 1
    height: int = 1
    width: int = 1
    depth: int = 1

    @staticmethod
    def from_list(shape: list[int] | tuple[int, ...]) -> Shape4D:
        dims = [1] * (4 - len(shape)) + [int(d) for d in shape[-4:]]
        return Shape4D(*dims)

    def as_list(self) -> list[int]:
        return [self.batch, self.height, self.width, self.depth]

    def elements(self) -> int:
        return self.batch * self.height * self.width * self.depth

    def elements_wh(self) -> int:
        return self.height * self.width

    # Constructed, not ``dataclasses.replace``d (which inspects the fields on every call): the cost model and the
    # candidate search call these hundreds of thousands of times.
    def with_height(self, height: int) -> Shape4D:
        return Shape4D(self.batch, height, self.width, self.depth)

    def with_width(self, width: int) -> Shape4D:
        return Shape4D(self.batch, self.height, width, self.depth)

    def with_hw(self, height: int, width: int) -> Shape4D:
        return Shape4D(self.batch, height, width, self.depth)

    def with_depth(self, depth: int) -> Shape4D:
        return Shape4D(self.batch, self.height, self.width, depth)

    # Spelt out per axis (not zipped lists): the cost model calls these a million times per CP-SAT model.
    def min(self, other: Shape4D) -> Shape4D:
        return Shape4D(min(self.batch, other.batch), min(self.height, other.height), min(self.width, other.width),
                       min(self.depth, other.depth))

    def max(self, other: Shape4D) -> Shape4D:
        return Shape4D(max(self.batch, other.batch), max(self.height, other.height), max(self.width, other.width),
                       max(self.depth, other.depth))

    def round_up(self, quantum: Shape4D) -> Shape4D:
        q = quantum
        return Shape4D(-(-self.batch // q.batch) * q.batch, -(-self.height // q.height) * q.height,
                       -(-self.width // q.width) * q.width, -(-self.depth // q.depth) * q.depth)

    def div_round_up(self, other: Shape4D) -> Shape4D:
        return Shape4D(-(-self.batch // other.batch), -(-self.height // other.height), -(-self.width // other.width),
                       -(-self.depth // other.depth))

    def __str__(self) -> str:
        return f"[{self.batch}, {self.height}, {self.width}, {self.depth}]"


@dataclass(frozen=True)
class Kernel:
    """Kernel geometry of a pass. Padding is (top, left, bottom, right) in IFM elements."""

    width: int = 1
    height: int = 1
    stride_x: int = 1
    stride_y: int = 1
    dilation_x: int = 1
    dilation_y: int = 1
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    valid_padding: bool = False

    def elements_wh(self) -> int:
        return self.width * self.height

    def area_width(self) -> int:
        return (self.width - 1) * self.dilation_x + 1

    def area_height(self) -> int:
        return (self.height - 1) * self.dilation_y + 1


@dataclass(frozen=True)
class Quantization:
    """Per-tensor or per-axis affine quantisation; empty tuples mean unquantised."""

    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    quantized_dimension: int = 0
    min: tuple[float, ...] = ()
    max: tuple[float, ...] = ()


@dataclass(frozen=True, eq=False)
class ConstTensor:
    """A constant input (weights, bias, LUT). ``values`` holds the data in the layout the NPU pass uses:
    weights as HWIO (Vela's internal layout), bias as a 1-D int32/int64 vector."""

    name: str
    shape: tuple[int, ...]
    dtype: DataType
    quantization: Quantization
    values: np.ndarray = field(repr=False)

    @property
    def size_in_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.size_in_bytes


@dataclass(frozen=True)
class FeatureMap:
    """A non-constant tensor that flows between passes (an edge of the pass graph).

    ``name`` is the TFLite tensor name (or a name Vela would give a tensor it synthesises).
    ``shape`` is the full 4-D shape of the tensor as stored in memory.
    """

    name: str
    shape: Shape4D
    dtype: DataType
    quantization: Quantization = Quantization()
    # Set when the operand is a constant (e.g. the scalar or LUT-free IFM2 of an elementwise pass): it then
    # lives in permanent storage and is never produced by a pass. Not part of equality/hash.
    constant: ConstTensor | None = field(default=None, compare=False, repr=False)
    # The tensor's shape as TFLite/Vela declares it (may be lower rank than 4, e.g. [] for a scalar).
    orig_shape: tuple[int, ...] | None = field(default=None, compare=False)
    # Distinguishes tensors that share a name (some models leave every tensor name empty): the TFLite tensor
    # index for model tensors, -1 for tensors the lowering synthesises (whose names Vela makes unique).
    uid: int = -1
    # The layout Vela gives the tensor before scheduling: NHCWB16 for NPU-internal pass outputs unless a reader,
    # writer or shape forbids it (graph lowering decides, as Vela's graph optimiser + scheduler setup do).
    format: TensorFormat = field(default=TensorFormat.NHWC, compare=False)

    def __hash__(self) -> int:
        # Feature maps key most of the solvers' dicts; hashing the nested fields every time dominated pricing. Of
        # the name a checksum, not str's hash, which differs per process (PYTHONHASHSEED): a set of maps then
        # iterates in one order in every run, and so does what is built from it (the CP-SAT model, its tie-breaks).
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((zlib.crc32(self.name.encode()), self.shape, self.uid))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        # String hashes differ between processes: a pickled copy must hash afresh.
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def size_in_bytes(self) -> int:
        return self.shape.elements() * self.dtype.size_in_bytes

    @property
    def is_const(self) -> bool:
        return self.constant is not None


@dataclass(frozen=True)
class OperandAccess:
    """How a pass reads or writes a feature map: the full tensor, or a slice of it (concat, split, slice).

    ``shape`` is the 4-D shape the pass sees (Vela's ``ifm_shapes``/``ofm_shapes``); ``read_shape`` /
    ``write_shape`` and ``offset`` are set only when the pass touches part of the tensor.
    """

    tensor: FeatureMap
    shape: Shape4D
    offset: Shape4D | None = None
    access_shape: Shape4D | None = None

    @property
    def effective_shape(self) -> Shape4D:
        return self.access_shape if self.access_shape is not None else self.shape


@dataclass(frozen=True)
class NpuOp:
    """One NPU pass as the scheduler sees it (Vela's ``SchedulerOperation``).

    ``name`` is the pass's OFM tensor name (how Vela's per-layer table names it). ``tflite_op`` is the builtin
    operator it comes from (``CONV_2D``, ...); ``op_type`` is Vela's lowered op type (``Conv2DBias``, ...).
    """

    index: int
    name: str
    tflite_op: str
    op_type: str
    npu_block_type: NpuBlockType
    ifm: OperandAccess
    ofm: OperandAccess
    ifm2: OperandAccess | None = None
    kernel: Kernel = Kernel()
    activation: str | None = None
    activation_lut: ConstTensor | None = None
    resampling_mode: ResamplingMode = ResamplingMode.NONE
    weights: ConstTensor | None = None
    bias: ConstTensor | None = None
    reversed_operands: bool = False
    uses_scalar: bool = False
    has_scaling: bool = True
    rounding_mode: str | None = None
    attrs: tuple[tuple[str, object], ...] = ()

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the whole op, as Vela counts them."""
        ofm = self.ofm.effective_shape
        if self.npu_block_type in (NpuBlockType.ConvolutionDepthWise, NpuBlockType.Pooling):
            return self.kernel.elements_wh() * ofm.elements()
        if self.npu_block_type in (NpuBlockType.ConvolutionMxN, NpuBlockType.VectorProduct,
                                   NpuBlockType.ReduceSum):
            return self.kernel.elements_wh() * self.ifm.effective_shape.depth * ofm.elements()
        return 0

    def attr(self, key: str, default: object = None) -> object:
        return dict(self.attrs).get(key, default)

    @property
    def reported_activation(self) -> str | None:
        """The activation Vela legacy's estimate of the compiled pass reads: ``activation`` (what its scheduler
        reads), or else a standalone activation packed into the pass (``pass_activation``), which Vela's command
        stream makes the pass's own after scheduling (an int16 SIGMOID or TANH run as an AvgPool)."""
        if self.activation is not None:
            return self.activation
        packed = self.attr("pass_activation")
        return packed[0] if isinstance(packed, tuple) else None


@dataclass(frozen=True)
class CpuOp:
    """An operator the NPU cannot run; it stays on the CPU and splits the NPU work.

    It carries its tensors because the CPU's feature maps share fast storage with the NPU's: whole-inference
    memory counts them, as Vela's does. ``variables`` are the inputs that are TFLite variable tensors (state
    kept from one inference to the next, e.g. an SVDF's activation history), live for the whole inference.
    """

    index: int
    name: str
    tflite_op: str
    reason: str
    inputs: tuple[FeatureMap, ...] = ()
    outputs: tuple[FeatureMap, ...] = ()
    variables: tuple[FeatureMap, ...] = ()

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(_declared_shape(fm) for fm in self.inputs)

    @property
    def output_shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(_declared_shape(fm) for fm in self.outputs)


def _declared_shape(fm: FeatureMap) -> tuple[int, ...]:
    return fm.orig_shape if fm.orig_shape is not None else tuple(fm.shape.as_list())


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, quantum: int) -> int:
    return ceil_div(a, quantum) * quantum


@overload
def round_down(a: int, quantum: int) -> int: ...
@overload
def round_down(a: float, quantum: int) -> float: ...
def round_down(a: float, quantum: int) -> float:
    return (a // quantum) * quantum

