"""Cycle and bandwidth model of one NPU pass, reproducing Vela 5.2.0's legacy-core estimator.

Vela prices a pass as the larger of its compute time (the DPU and output units working block by block) and the
time each memory needs to move the pass's data. Both the scheduler (to compare block configs, stripes and weight
buffering) and the per-layer report use these numbers, so every formula here follows Vela's arithmetic exactly:
which values are integers and which are floats, where it rounds up, and in which order floats are added. A
difference of one cycle changes which schedule wins a tie, so "close" is not good enough.

Everything is a pure function of its arguments. The architecture is read through the attributes that mirror
Vela's ``ArchitectureFeatures`` (``ncores``, ``ofm_ublock``, ``memory_latency``, ...) and the block config through
``ofm_block``/``ifm_block``/``acc_type``/``is_partkernel``, so any object shaped like those works.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from npusched.ir import HashedEnum, MemArea, NpuBlockType, Shape4D, TensorFormat, ceil_div, round_up
from npusched.target.performance_query import PerformanceQuery

if TYPE_CHECKING:
    from npusched.target.arch import ArchitectureFeatures


class Purpose(HashedEnum):
    """What a transferred byte is for; the report splits bandwidth by it."""

    FeatureMap = "FeatureMap"
    Weights = "Weights"
    FSBias = "FSBias"
    LUT = "LUT"


class Direction(HashedEnum):
    Read = "Read"
    Write = "Write"


class BufferKind(str, enum.Enum):
    """Where a pass's encoded weights are read from while it runs (the ``kind`` of a schedule's
    ``WeightBuffering``, which adds the slices and buffer sizes)."""

    NONE = "none"  # straight from permanent storage (no DMA)
    SINGLE = "single"  # one SRAM buffer, filled before the pass starts
    DOUBLE = "double"  # two SRAM buffers, later slices fetched while earlier ones run

    def __str__(self) -> str:
        return self.value


# The memories whose access time counts towards a pass's cycles (SHRAM never does).
ACCESS_AREAS = (MemArea.Sram, MemArea.Dram, MemArea.OnChipFlash, MemArea.OffChipFlash)

# Block types that run on the MAC array (everything else is elementwise or DMA).
_MAC_BLOCK_TYPES = (
    NpuBlockType.ConvolutionMxN,
    NpuBlockType.ConvolutionDepthWise,
    NpuBlockType.VectorProduct,
    NpuBlockType.Pooling,
    NpuBlockType.ReduceSum,
)
# Block types whose IFM depth is accumulated over (the IFM is re-read per OFM depth block).
_DEPTH_ACCUMULATING = (NpuBlockType.ConvolutionMxN, NpuBlockType.VectorProduct, NpuBlockType.ReduceSum)
# Block types that keep one OFM channel per IFM channel.
_CHANNEL_WISE = (NpuBlockType.ConvolutionDepthWise, NpuBlockType.Pooling)

_LUT_ACTIVATIONS = frozenset({"sigmoid", "tanh", "lut"})
_RELU_ACTIVATIONS = frozenset({"relu", "relu6", "relu0to1", "relun1to1"})


@dataclass(frozen=True)
class CycleCost:
    """MACs and NPU cycles of a pass, ignoring memory bandwidth."""

    op_macs: int = 0
    op_cycles: int = 0


@dataclass(frozen=True)
class ElementAccess:
    """Element counts (not bytes) a pass moves; multiply by the element size for bytes."""

    ifm_read: tuple[int, int] = (0, 0)
    ofm_write: int = 0
    weights_refetch: int = 0
    const_read: tuple[int, int] = (0, 0)  # (weights, scales/biases)


# --------------------------------------------------------------------------------------------------------------
# Reading the architecture (``ArchitectureFeatures`` mirrors Vela's attribute names, keyed by ir enums).


def _accelerator(arch: ArchitectureFeatures) -> str:
    return arch.accelerator_config.lower()


def _bandwidth(arch: ArchitectureFeatures, mem: MemArea) -> float:
    return arch.memory_bandwidths_per_cycle[mem]


def _burst(arch: ArchitectureFeatures, mem: MemArea) -> int:
    return arch.memory_burst_length[mem]


def _latency(arch: ArchitectureFeatures, mem: MemArea, direction: Direction) -> int:
    """Access latency in cycles; ``memory_latency[mem]`` is (read, write) as in Vela."""
    return arch.memory_latency[mem][0 if direction is Direction.Read else 1]


def _rounding(arch: ArchitectureFeatures, fmt: TensorFormat) -> Shape4D:
    return Shape4D(*arch.storage_rounding_quantums[fmt])


def _ofm_ublock(arch: ArchitectureFeatures) -> Shape4D:
    ub = arch.ofm_ublock
    return Shape4D(1, ub.height, ub.width, ub.depth)


def uses_acc40(config) -> bool:
    """True when the block config accumulates in 40 bits (16-bit IFM with scaling)."""
    acc = config.acc_type
    return getattr(acc, "name", acc) in ("Acc40", "acc40", 7, 40)


def _act_kind(activation: str | None) -> str:
    if not activation:
        return "none"
    key = activation.lower().replace("_", "")
    if key in _LUT_ACTIVATIONS:
        return "lut"
    if key in _RELU_ACTIVATIONS:
        return "relu"
    return "none"


def _clip(shape: Shape4D, block: Shape4D) -> Shape4D:
    return shape.min(block)


# --------------------------------------------------------------------------------------------------------------
# Memory transfer efficiency


def _byte_strides(shape: Shape4D, fmt: TensorFormat, bits: int) -> list[float]:
    """Byte distance between neighbours along each axis (innermost last), in Vela's int/float mix."""
    if fmt == TensorFormat.NHCWB16:
        row = (bits * shape.width * shape.depth) / 8
        return [row, row, (bits * 16 * shape.width) / 8, (bits * 16) / 8, bits / 8]
    return [
        (bits * shape.depth * shape.width * shape.height) // 8,
        (bits * shape.depth * shape.width) // 8,
        (bits * shape.depth) // 8,
        bits / 8,
    ]


def memory_transfer_efficiency(
    arch, is_read: bool, mem: MemArea, fmt: TensorFormat, bits: int, block: Shape4D, shape: Shape4D, to_transfer
) -> float:
    """Bytes ``to_transfer`` scaled up by how much of each memory burst a block access wastes.

    The burst a block access can use depends on whether its rows are contiguous in memory: in NHWC that needs the
    block to cover the whole depth; in NHCWB16 a brick row of 16 channels is contiguous per column.
    """
    strides = _byte_strides(shape, fmt, bits)
    burst_bits = 8
    if fmt == TensorFormat.NHCWB16:
        if strides[2] == block.depth:
            burst_bits = bits * block.depth * block.width
        elif is_read:
            burst_bits = 16 * bits * block.width
        else:
            burst_bits = 16 * bits * block.width * arch.ncores
    elif fmt == TensorFormat.NHWC:
        contiguous = strides[3] == block.depth
        if is_read:
            burst_bits = bits * block.depth * (block.width if contiguous else 1)
        elif block.depth <= 16 and contiguous:
            burst_bits = bits * block.depth * block.width
        else:
            burst_bits = min(512, 16 * bits * arch.ncores, block.depth * bits)
    max_burst = _burst(arch, mem)
    burst = min(max_burst, burst_bits // 8)
    return to_transfer * (max_burst / burst)


def _block_access_cycles(arch: ArchitectureFeatures, is_read: bool, mem: MemArea, fmt: TensorFormat, bits: int,
                         block: Shape4D, shape: Shape4D) -> float:
    """Cycles to move one block of a feature map: the memory's latency plus the burst-scaled transfer."""
    transfer = memory_transfer_efficiency(arch, is_read, mem, fmt, bits, block, shape, _clip(shape, block).elements())
    direction = Direction.Read if is_read else Direction.Write
    return _latency(arch, mem, direction) + transfer / _bandwidth(arch, mem)


def minimum_memory_cycles(arch: ArchitectureFeatures, query: PerformanceQuery) -> tuple[float, float]:
    """Cycles to fetch one IFM block and to write one OFM block (latency plus transfer)."""
    cfg = query.config
    return (_block_access_cycles(arch, True, query.ifm_memory_area, query.ifm_format, query.ifm_bits,
                                 cfg.ifm_block, query.ifm_shape),
            _block_access_cycles(arch, False, query.ofm_memory_area, query.ofm_format, query.ofm_bits,
                                 cfg.ofm_block, query.ofm_shape))


# --------------------------------------------------------------------------------------------------------------
# Compute cycles


def output_cycles_per_element(arch: ArchitectureFeatures, op_type: str, activation: str | None,
                              query: PerformanceQuery) -> float:
    """Cycles the output unit spends per OFM element: the slower of the scaling stage and the activation stage."""
    block_type = query.npu_block_type
    if block_type == NpuBlockType.ElementWise and query.ifm_bits == 32:
        out_index = 0 if query.ifm2_shape is not None else 1
    elif op_type == "Mul" and query.ofm_bits == 32:
        out_index = 2
    elif op_type == "Mul" or (block_type in _MAC_BLOCK_TYPES and uses_acc40(query.config)):
        out_index = 3
    elif op_type in ("Add", "Sub"):
        out_index = 5  # Vela always prices the "advanced" add/sub variant
    elif op_type in ("MaxPool", "QuantizedMaxPool"):
        out_index = 6
    else:
        out_index = 7

    act_index = {"lut": 0, "relu": 1, "none": 2}[_act_kind(activation)]
    per_elem = max(arch.output_cycles_per_elem[out_index], arch.activation_cycles_per_elem[act_index])

    if block_type == NpuBlockType.ElementWise:
        # Small elementwise blocks are bound by command overhead and block memory latency instead.
        block_elems = query.config.ofm_block.elements()
        ifm_cycles, ofm_cycles = minimum_memory_cycles(arch, query)
        per_cmd = ((ifm_cycles + ofm_cycles) + per_elem * block_elems) / 4
        per_elem = max(per_elem, per_cmd / block_elems)
    return per_elem


def _dpu_delay(arch: ArchitectureFeatures, acc40: bool, ublk_x: int, ublk_y: int, ublk_z: int,
               kernel_steps: int) -> int:
    """Pipeline stall cycles when an OFM block is a single micro-block in X and Y."""
    accel = _accelerator(arch)
    if accel == "ethos-u55-32":
        delay = 7 if acc40 else 3
        stall = 0
        if ublk_x == 1 and ublk_y == 1:
            if ublk_z == 1:
                stall = delay * kernel_steps
            elif kernel_steps > 1:
                stall = delay * (kernel_steps - 1) * ublk_z
        if (ublk_x == 1 or ublk_y == 1) and ublk_z > 1 and acc40:
            stall += delay * ublk_z
        return stall
    delay = 3 if acc40 and accel in ("ethos-u55-64", "ethos-u55-128") else 2
    if ublk_x == 1 and ublk_y == 1:
        if ublk_z == 1:
            return delay * kernel_steps
        if kernel_steps > 1:
            return delay * (kernel_steps - 1) * ublk_z
    return 0


def _sub_kernel_sizes(arch: ArchitectureFeatures, query: PerformanceQuery) -> list[int]:
    """Element counts of the sub-kernels the hardware splits a large kernel into (row-major over Y then X)."""
    limit_h, limit_w = arch.sub_kernel_limits[query.npu_block_type]
    kh, kw = query.kernel.height, query.kernel.width
    widths = [min(kw - i * limit_w, limit_w) for i in range(ceil_div(kw, limit_w))]
    heights = [min(kh - i * limit_h, limit_h) for i in range(ceil_div(kh, limit_h))]
    return [w * h for h in heights for w in widths]


def estimate_conv_cycles(arch: ArchitectureFeatures, op_type: str, activation: str | None,
                         query: PerformanceQuery) -> float:
    """NPU cycles of a MAC-array pass: per OFM block, DPU and output stages overlap, so the slower one dominates."""
    cfg = query.config
    block_type = query.npu_block_type
    ifm_block = _clip(query.ifm_shape, cfg.ifm_block)
    ofm_block = _clip(query.ofm_shape, cfg.ofm_block)

    ublock = _ofm_ublock(arch)
    one_row_optimisation = (
        ublock.height == 2
        and block_type in (NpuBlockType.ConvolutionMxN, NpuBlockType.ConvolutionDepthWise, NpuBlockType.VectorProduct)
        and query.ofm_shape.height == 1
        and query.ofm_shape.width % 2 == 0
        and query.kernel.height == 1
    )
    if one_row_optimisation:
        # 1-high OFMs on 2x2 micro-block hardware are computed as 1x4 micro-blocks.
        ublock = Shape4D(1, 1, 4, ublock.depth)
        ofm_block = ofm_block.with_height(1)

    ublk_x = ceil_div(ofm_block.width, ublock.width)
    ublk_y = ceil_div(ofm_block.height, ublock.height)
    ublk_xy = ublk_x * ublk_y
    ublk_z = ceil_div(ofm_block.depth, ublock.depth)
    acc40 = uses_acc40(cfg)
    writeback = 32 * ublock.depth // 8
    ifm_depth_steps = ceil_div(ifm_block.depth, 8)

    dpu_cycles: float = 0
    for kernel_elems in _sub_kernel_sizes(arch, query):
        if block_type == NpuBlockType.Pooling:
            kernel_steps = 1
            cycles = max(4, kernel_elems) * ublk_xy * ublk_z
            if query.ifm_bits == 16 and _accelerator(arch) != "ethos-u55-32":
                cycles *= 2
        elif block_type == NpuBlockType.ConvolutionDepthWise:
            per_step = 4 * ublk_xy * (2 if query.ifm_bits == 16 else 1)
            kernel_steps = ceil_div(kernel_elems, 4)
            cycles = max(writeback, per_step) * kernel_steps * ublk_z
        elif block_type == NpuBlockType.ConvolutionMxN and cfg.is_partkernel:
            kernel_steps = ceil_div(kernel_elems, 2 if query.ifm_bits == 16 else 4)
            cycles = max(writeback, 4 * ublk_xy) * (kernel_steps * ifm_depth_steps * ublk_z)
        else:
            # depth-first convolution, vector product and reduce-sum: one kernel element per step
            kernel_steps = kernel_elems
            cycles = max(writeback, 4 * ublk_xy) * kernel_steps * ublk_z

        delay = _dpu_delay(arch, acc40, ublk_x, ublk_y, ublk_z, kernel_steps)
        if block_type == NpuBlockType.ConvolutionMxN and cfg.is_partkernel:
            delay *= ifm_depth_steps
        dpu_cycles += cycles + delay

    if block_type in _DEPTH_ACCUMULATING:
        dpu_cycles *= ceil_div(query.ifm_shape.depth, ifm_block.depth)
    dpu_cycles = dpu_cycles / arch.ncores

    ofm_blocks = query.ofm_shape.div_round_up(ofm_block).elements()
    output_cycles: float = math.ceil(output_cycles_per_element(arch, op_type, activation, query)
                                     * ofm_block.elements())
    if query.has_bias:
        assert query.const_memory_area is not None  # a query with a bias says where it is read from
        bias_cycles = 10 * ofm_block.depth * _latency(arch, query.const_memory_area, Direction.Read) / 256
        output_cycles = max(output_cycles, bias_cycles)

    ifm_cycles, ofm_cycles = minimum_memory_cycles(arch, query)
    cmd_cycles = ((ifm_cycles + ofm_cycles) + output_cycles + dpu_cycles) / 4
    dpu_cycles = max(dpu_cycles, cmd_cycles)
    output_cycles = max(output_cycles, cmd_cycles)

    # Blocks pipeline: the slower stage runs once per block, the faster one adds a single fill/drain.
    if dpu_cycles > output_cycles:
        return dpu_cycles * ofm_blocks + output_cycles
    return output_cycles * ofm_blocks + dpu_cycles


def measure_cycle_cost(arch: ArchitectureFeatures, op_type: str, activation: str | None,
                       query: PerformanceQuery) -> CycleCost:
    """MACs and NPU cycles of a pass (Vela's ``measure_cycle_cost``)."""
    block_type = query.npu_block_type
    if block_type in _MAC_BLOCK_TYPES:
        kernel_elems = int(query.kernel.elements_wh())
        ofm_elems = int(query.ofm_shape.elements())
        if block_type in _CHANNEL_WISE:
            macs = kernel_elems * ofm_elems
        else:
            macs = kernel_elems * int(query.ifm_shape.depth) * ofm_elems
        return CycleCost(macs, int(estimate_conv_cycles(arch, op_type, activation, query)))
    if block_type == NpuBlockType.ElementWise:
        padded_ofm = query.ofm_shape.round_up(_rounding(arch, query.ofm_format))
        per_elem = output_cycles_per_element(arch, op_type, activation, query)
        return CycleCost(0, math.ceil(per_elem * padded_ofm.elements()))
    if block_type == NpuBlockType.Dma:
        return CycleCost(0, 0)  # a DMA pass does not occupy the NPU
    raise ValueError(f"no cycle model for NPU block type {block_type}")


def measure_element_access(arch: ArchitectureFeatures, query: PerformanceQuery) -> ElementAccess:
    """How many elements a pass reads and writes, counting IFM re-reads per OFM block and sub-kernel."""
    block_type = query.npu_block_type
    ifm_rounding = _rounding(arch, query.ifm_format)
    ofm_write = query.ofm_shape.round_up(_rounding(arch, query.ofm_format)).elements()

    if block_type in _MAC_BLOCK_TYPES:
        ifm_block = _clip(query.ifm_shape, query.config.ifm_block)
        ofm_block = _clip(query.ofm_shape, query.config.ofm_block)
        grid = query.ofm_shape.div_round_up(ofm_block)  # OFM blocks along each axis
        block_depth = ofm_block.depth
        channel_wise = block_type in _CHANNEL_WISE
        if channel_wise:
            # one pass over the depth fetches every channel's kernel once
            grid = grid.with_depth(1)
            block_depth = query.ifm_shape.depth

        # Vela pairs the width with the first limit here (the limits are square, so it does not matter).
        limit_a, limit_b = arch.sub_kernel_limits[block_type]
        sub_kernels = ceil_div(query.kernel.width, limit_a) * ceil_div(query.kernel.height, limit_b)
        block_count = grid.elements()
        ifm_fetch = ifm_block.round_up(ifm_rounding).elements_wh() * query.ifm_shape.round_up(ifm_rounding).depth
        weights_per_channel = query.kernel.elements_wh() * (1 if channel_wise else query.ifm_shape.depth)

        ifm_read = ifm_fetch * sub_kernels * block_count
        if block_type in (NpuBlockType.Pooling, NpuBlockType.ReduceSum):
            return ElementAccess((ifm_read, 0), ofm_write)
        return ElementAccess(
            (ifm_read, 0),
            ofm_write,
            weights_refetch=grid.elements_wh(),
            const_read=(weights_per_channel * block_depth * block_count, query.ofm_shape.depth),
        )

    if block_type == NpuBlockType.ElementWise:
        return elementwise_element_access(arch, query, wide_scalar_reads_ifm2=True)

    if block_type == NpuBlockType.Dma:
        return ElementAccess()
    raise ValueError(f"no access model for NPU block type {block_type}")


def elementwise_element_access(arch: ArchitectureFeatures, query: PerformanceQuery, *,
                               wide_scalar_reads_ifm2: bool) -> ElementAccess:
    """Elements an elementwise pass reads and writes, under either core's cost model.

    A tensor IFM is read over the whole OFM; a scalar is read only when wider than 8 bits (an 8-bit scalar
    travels in the command stream). The cores differ in one case only: a first IFM that is a wide scalar. Vela's
    legacy core then also reads the second IFM over the whole OFM (``wide_scalar_reads_ifm2``: its two tests are
    independent), the default core reads the scalar alone (its second test is an else-branch). Each estimator
    must reproduce its own core's figures, so the difference is kept, not fixed.
    """
    ifm_rounding = _rounding(arch, query.ifm_format)
    ofm_write = query.ofm_shape.round_up(_rounding(arch, query.ofm_format)).elements()
    full_ofm = query.ofm_shape.round_up(ifm_rounding).elements()
    ifm_read = ifm2_read = 0
    if query.ifm_shape.elements() == 1:
        wide_scalar = query.ifm_bits > 8
        if wide_scalar:
            ifm_read = query.ifm_shape.round_up(ifm_rounding).elements()
        if query.ifm2_shape is not None and (wide_scalar_reads_ifm2 or not wide_scalar):
            ifm2_read = full_ofm
    else:
        ifm_read = full_ofm
        if query.ifm2_shape is not None:
            if query.ifm2_shape.elements() > 1:
                ifm2_read = full_ofm
            elif query.ifm2_bits > 8:
                ifm2_read = query.ifm2_shape.round_up(ifm_rounding).elements()
    return ElementAccess((ifm_read, ifm2_read), ofm_write)


def measure_mem2mem_cycles(arch: ArchitectureFeatures, from_area: MemArea, to_area: MemArea,
                           to_transfer: int) -> float:
    """DMA cycles to copy ``to_transfer`` bytes: the slower of reading (plus latency) and writing."""
    read_cycles = to_transfer // _bandwidth(arch, from_area) + _latency(arch, from_area, Direction.Read)
    write_cycles = to_transfer // _bandwidth(arch, to_area)
    return max(read_cycles, write_cycles)


# --------------------------------------------------------------------------------------------------------------
# Full pass estimate (compute, weight DMA, LUT/memcpy DMA and memory access time)


@dataclass(frozen=True)
class WeightStream:
    """The encoded weights of a pass, as the full estimate needs them.

    ``encoded_bytes`` is the length of the whole encoded stream (weights and scales of every depth slice and core);
    ``first_slice_bytes_per_core`` the raw encoded size of the first depth slice per core (the first DMA);
    ``original_elements`` the element count of the op's unencoded weight tensor; ``scale_element_bytes`` the
    encoded size of one channel's scale and bias. ``full_transfer_cycles`` is the scheduler's DMA estimate for the
    whole stream (0 when it did not compute one, e.g. for cascaded passes).
    """

    encoded_bytes: int
    original_elements: int
    source_area: MemArea
    buffering: BufferKind = BufferKind.NONE
    buffer_area: MemArea | None = None
    first_slice_bytes_per_core: tuple[int, ...] = ()
    full_transfer_cycles: float = 0
    scale_element_bytes: int = 10

    @property
    def first_dma_bytes(self) -> int:
        return sum(round_up(b, 16) for b in self.first_slice_bytes_per_core)


@dataclass(frozen=True)
class DmaTransfer:
    """A copy the pass needs before it runs: a LUT into SHRAM, or a memcpy pass's data."""

    source_area: MemArea
    dest_area: MemArea
    size_bytes: int


@dataclass(frozen=True)
class OpPerformance:
    """Per-pass result, as Vela's per-layer report shows it.

    ``bandwidth`` holds the bytes moved per (memory, purpose, direction); ``scaled_bandwidth`` the same weighted by
    burst efficiency, which is what ``access_cycles`` (per memory area) are computed from.
    """

    npu_cycles: float
    access_cycles: dict[MemArea, float]
    total_cycles: float
    macs: int
    bandwidth: dict[tuple[MemArea, Purpose, Direction], float] = field(default_factory=dict)
    scaled_bandwidth: dict[tuple[MemArea, Purpose, Direction], float] = field(default_factory=dict)
    op_cycles: float = 0  # compute-only cycles before weight/LUT DMA is added
    # Under npusched's Estimator.BOTH: the weighted legacy-model and default-model totals (they sum to the total).
    parts: tuple[float, float] = (0.0, 0.0)

    def bytes_moved(
        self, mem: MemArea, purpose: Purpose | None = None, direction: Direction | None = None
    ) -> float:
        return sum(
            v for (m, p, d), v in self.bandwidth.items()
            if m == mem and purpose in (None, p) and direction in (None, d)
        )


# The cells of Vela's [purpose][direction] array that can hold bytes, in ``_area_sum``'s order; keyed by identity
# (enum hashing is slow, and this runs for every block config priced).
_AREA_CELLS: dict[tuple[int, int], int] = {
    (id(purpose), id(direction)): cell
    for cell, (purpose, direction) in enumerate((purpose, direction)
                                                 for purpose in (Purpose.Weights, Purpose.FeatureMap, Purpose.LUT,
                                                                 Purpose.FSBias)
                                                 for direction in (Direction.Read, Direction.Write))
}


def _area_sum(cells: list[float]) -> float:
    """Sum one memory's bandwidth in numpy's pairwise order over Vela's [purpose][direction] array.

    Vela's purposes are (Unknown, Weights, FeatureMap, Scratch, ScratchFast, LUT, FSBias) x (Read, Write); numpy
    adds the first eight cells as a balanced tree and the remaining six one by one. Only the fractional weight
    bytes make the order visible, but matching it keeps access cycles bit-identical. ``cells`` are the
    ``_AREA_CELLS`` (0.0 where nothing is moved).
    """
    total = (0.0 + (cells[0] + cells[1])) + ((cells[2] + cells[3]) + 0.0)
    for value in cells[4:]:
        total = total + value
    return total


def _access_cycles(arch: ArchitectureFeatures,
                   scaled: Mapping[tuple[MemArea, Purpose, Direction], float]) -> dict[MemArea, float]:
    """Access cycles per memory of ``ACCESS_AREAS`` from the burst-scaled bandwidth (``_area_sum`` of each)."""
    by_area: dict[int, list[float]] = {}
    for (mem, purpose, direction), value in scaled.items():
        cells = by_area.get(id(mem))
        if cells is None:
            cells = by_area[id(mem)] = [0.0] * len(_AREA_CELLS)
        cells[_AREA_CELLS[id(purpose), id(direction)]] = value
    # A memory that moves nothing sums to exactly 0.0.
    return {mem: (_area_sum(cells) if (cells := by_area.get(id(mem))) is not None else 0.0) / _bandwidth(arch, mem)
            for mem in ACCESS_AREAS}


def estimate_full_op_performance(
    arch,
    op_type: str,
    activation: str | None,
    query: PerformanceQuery,
    *,
    weights: WeightStream | None = None,
    prev_slack_cycles: float = 0,
    slack_buffering_cycles: float = 0,
    lut: DmaTransfer | None = None,
    memcpy: DmaTransfer | None = None,
    ifm_element_bytes: int | None = None,
    ifm2_element_bytes: int | None = None,
    ofm_element_bytes: int | None = None,
    cost: CycleCost | None = None,
) -> OpPerformance:
    """Vela's ``estimate_full_op_performance`` with the schedule's state passed in explicitly.

    ``prev_slack_cycles`` is the previous pass's slack-buffering cycles (the NPU time under which this pass's first
    weight DMA can hide); ``slack_buffering_cycles`` this pass's own (only used when its weights are
    double-buffered). Element sizes default to the query's bit widths. ``cost``: the compute cost
    (``measure_cycle_cost`` of the same query) where the caller has it already.
    """
    return partial_full_op_performance(
        arch, op_type, activation, query, weights=weights, lut=lut, memcpy=memcpy,
        ifm_element_bytes=ifm_element_bytes, ifm2_element_bytes=ifm2_element_bytes,
        ofm_element_bytes=ofm_element_bytes, cost=cost,
    ).finish(prev_slack_cycles, slack_buffering_cycles)


@dataclass(frozen=True)
class PartialOpPerformance:
    """A pass's full estimate short of the slack cycles: everything but the NPU cycles and the total, which the
    slacks change and nothing else does. A caller pricing one pass after many different previous passes (the
    CP-SAT price tables) computes this once and finishes it per slack."""

    cost: CycleCost
    weights: WeightStream | None
    buffered: bool
    dma_cycles: float
    first_dma: float
    access_cycles: dict[MemArea, float]
    bandwidth: dict[tuple[MemArea, Purpose, Direction], float]
    scaled_bandwidth: dict[tuple[MemArea, Purpose, Direction], float]

    def finish(self, prev_slack_cycles: float = 0, slack_buffering_cycles: float = 0) -> OpPerformance:
        """The estimate after a pass that leaves ``prev_slack_cycles`` (see ``estimate_full_op_performance``)."""
        cost, weights, dma_cycles = self.cost, self.weights, self.dma_cycles
        npu_cycles: float = cost.op_cycles
        if weights is not None and self.buffered:
            if weights.buffering == BufferKind.DOUBLE:
                # Later slices stream in behind the compute; only the first one, less the slack, is exposed.
                npu_cycles = max(
                    weights.full_transfer_cycles - prev_slack_cycles + slack_buffering_cycles,
                    cost.op_cycles + max(self.first_dma - prev_slack_cycles, 0),
                )
            else:
                npu_cycles = cost.op_cycles + weights.full_transfer_cycles - min(self.first_dma, prev_slack_cycles)
            npu_cycles += dma_cycles
        else:
            npu_cycles += max(dma_cycles - prev_slack_cycles, 0)
        access_cycles = dict(self.access_cycles)
        total = max([npu_cycles, *access_cycles.values()])
        return OpPerformance(
            npu_cycles=npu_cycles,
            access_cycles=access_cycles,
            total_cycles=total,
            macs=cost.op_macs,
            bandwidth=dict(self.bandwidth),
            scaled_bandwidth=dict(self.scaled_bandwidth),
            op_cycles=cost.op_cycles,
        )


def partial_full_op_performance(
    arch,
    op_type: str,
    activation: str | None,
    query: PerformanceQuery,
    *,
    weights: WeightStream | None = None,
    lut: DmaTransfer | None = None,
    memcpy: DmaTransfer | None = None,
    ifm_element_bytes: int | None = None,
    ifm2_element_bytes: int | None = None,
    ofm_element_bytes: int | None = None,
    cost: CycleCost | None = None,
) -> PartialOpPerformance:
    """``estimate_full_op_performance`` up to the slack cycles (same arguments less the slacks)."""
    bw: dict[tuple[MemArea, Purpose, Direction], float] = {}
    scaled: dict[tuple[MemArea, Purpose, Direction], float] = {}

    def add(table, mem, purpose, direction, value):
        key = (mem, purpose, direction)
        table[key] = table.get(key, 0) + value

    if cost is None:
        cost = measure_cycle_cost(arch, op_type, activation, query)
    access = measure_element_access(arch, query)

    dma_cycles: float = 0
    if lut is not None and lut.source_area != lut.dest_area:
        dma_cycles += measure_mem2mem_cycles(arch, lut.source_area, lut.dest_area, lut.size_bytes)
        add(bw, lut.source_area, Purpose.LUT, Direction.Read, lut.size_bytes)
        add(scaled, lut.dest_area, Purpose.LUT, Direction.Read, lut.size_bytes)
    if memcpy is not None and memcpy.source_area != memcpy.dest_area:
        dma_cycles += measure_mem2mem_cycles(arch, memcpy.source_area, memcpy.dest_area, memcpy.size_bytes)
        add(bw, memcpy.source_area, Purpose.FeatureMap, Direction.Read, memcpy.size_bytes)
        add(bw, memcpy.dest_area, Purpose.FeatureMap, Direction.Write, memcpy.size_bytes)

    buffered = weights is not None and weights.buffering != BufferKind.NONE
    first_dma: float = 0
    if weights is not None and buffered:
        assert weights.buffer_area is not None  # a buffered stream names its buffer's memory
        add(bw, weights.source_area, Purpose.Weights, Direction.Read, weights.encoded_bytes)
        add(bw, weights.buffer_area, Purpose.Weights, Direction.Write, weights.encoded_bytes)
        first_dma = measure_mem2mem_cycles(arch, weights.source_area, weights.buffer_area, weights.first_dma_bytes)

    ofm_bytes = ofm_element_bytes if ofm_element_bytes is not None else query.ofm_bits // 8
    ifm_bytes = ifm_element_bytes if ifm_element_bytes is not None else query.ifm_bits // 8
    cfg = query.config

    volume: float = access.ofm_write * ofm_bytes
    add(bw, query.ofm_memory_area, Purpose.FeatureMap, Direction.Write, volume)
    add(scaled, query.ofm_memory_area, Purpose.FeatureMap, Direction.Write, memory_transfer_efficiency(
        arch, False, query.ofm_memory_area, query.ofm_format, query.ofm_bits, cfg.ofm_block, query.ofm_shape, volume
    ))

    volume = access.ifm_read[0] * ifm_bytes
    add(bw, query.ifm_memory_area, Purpose.FeatureMap, Direction.Read, volume)
    add(scaled, query.ifm_memory_area, Purpose.FeatureMap, Direction.Read, memory_transfer_efficiency(
        arch, True, query.ifm_memory_area, query.ifm_format, query.ifm_bits, cfg.ifm_block, query.ifm_shape, volume
    ))

    if query.ifm2_shape is not None:
        assert query.ifm2_memory_area is not None  # a query with an IFM2 says where it is read from
        ifm2_bytes = ifm2_element_bytes if ifm2_element_bytes is not None else query.ifm2_bits // 8
        volume = access.ifm_read[1] * ifm2_bytes
        add(bw, query.ifm2_memory_area, Purpose.FeatureMap, Direction.Read, volume)
        add(scaled, query.ifm2_memory_area, Purpose.FeatureMap, Direction.Read, memory_transfer_efficiency(
            arch, True, query.ifm2_memory_area, query.ifm2_format, query.ifm2_bits, cfg.ifm_block,
            query.ifm2_shape, volume,
        ))

    if access.const_read[0] > 0 and weights is not None:
        # Weight reads are scaled by the compression ratio; the stream also holds the scales, which are taken out.
        encoded_weights = weights.encoded_bytes - access.const_read[1] * weights.scale_element_bytes
        volume = access.const_read[0] * (encoded_weights / weights.original_elements)
        add(bw, query.const_memory_area, Purpose.Weights, Direction.Read, volume)
        if not buffered:
            add(scaled, query.const_memory_area, Purpose.Weights, Direction.Read, volume)
    if access.const_read[1] > 0 and weights is not None:
        volume = access.const_read[1] * weights.scale_element_bytes
        add(bw, query.const_memory_area, Purpose.FSBias, Direction.Read, volume)
        if not buffered:
            add(scaled, query.const_memory_area, Purpose.FSBias, Direction.Read, volume)

    access_cycles = _access_cycles(arch, scaled)
    return PartialOpPerformance(cost, weights, buffered, dma_cycles, first_dma, access_cycles, bw, scaled)
