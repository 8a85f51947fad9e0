"""Cycle and bandwidth model of one NPU pass as Vela 5.2.0's default (C++, "regor") core estimates it.

``--estimator vela-default``. The legacy model (``npusched.target.performance``) and this one share the shape of
the estimate (compute time against per-memory access time) but differ where it matters for scheduling:

* **Partial blocks.** The default core counts OFM blocks in micro-blocks actually present (a fraction of a block
  at the edges), the legacy core whole blocks; so a block that divides the OFM loses its edge advantage.
* **Block memory time.** Each pass pays one IFM block fetch and one OFM block write (a whole, single pass is
  both first and last); the command-issue limit sees only the difference of the two.
* **Bursts.** An NHWC read is contiguous when the block depth equals the tensor's channel stride in bytes (the
  legacy core compared it with the element size, so practically never).
* **Pooling** is 4 (8-bit) or 8 (16-bit) cycles per kernel step and micro-block outside Ethos-U55-32.
* **Weights** are read as the encoded stream once per OFM block column (``weightsRefetch``), not scaled from the
  raw weight count; buffered weights count their DMA (less a pre-buffered first slice) and their re-reads in
  fast storage; a LUT costs no copy at all (none of its estimates in the golden output charges one).
* **Scalars**: an elementwise pass whose first IFM is a wide scalar reads only that scalar.
* **Integers**: block counts are fractional; cycles are truncated where the C++ stores them in integers.
* **Transposes** are priced by their memory traffic, a TRANSPOSE Vela legacy runs as a 1x1 AvgPool block swap
  included: the default core runs that TRANSPOSE as its own Transpose (pt_kws_cnn's 24x32 swap: 768 cycles, where
  an AvgPool of depth 1 would be 6,258).
* **Matrix products.** A BATCH_MATMUL's column passes (int32 MUL, REDUCE_SUM) are the default core's compound
  MatMul, which counts its int32 product map as scratch: one byte per element written and read, where a pass of
  its own would move four (``PerformanceQuery.matmul_products``).

Pure functions of their arguments, taking the legacy model's ``PerformanceQuery``/``WeightStream``/
``DmaTransfer`` and returning its ``OpPerformance`` so every caller is unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npusched.ir import MemArea, NpuBlockType, Shape4D, TensorFormat, ceil_div
from npusched.target.performance import (
    ACCESS_AREAS,
    BufferKind,
    CycleCost,
    Direction,
    DmaTransfer,
    ElementAccess,
    OpPerformance,
    PerformanceQuery,
    Purpose,
    WeightStream,
    _rounding,
    elementwise_element_access,
    uses_acc40,
)
from npusched.target.performance import (
    measure_element_access as legacy_element_access,
)

if TYPE_CHECKING:
    from npusched.target.arch import ArchitectureFeatures

_POOLING = (NpuBlockType.Pooling,)
_CONVOLUTION = (NpuBlockType.ConvolutionMxN, NpuBlockType.VectorProduct)  # the default core's "Convolution"
_MAC_BLOCK_TYPES = (*_CONVOLUTION, NpuBlockType.ConvolutionDepthWise, NpuBlockType.Pooling, NpuBlockType.ReduceSum)
_LUT_ACTIVATIONS = frozenset({"sigmoid", "tanh", "lut"})
_RELU_ACTIVATIONS = frozenset({"relu", "relu6", "relu0to1", "relun1to1"})


def _latency(arch: ArchitectureFeatures, mem: MemArea, direction: Direction) -> int:
    return arch.memory_latency[mem][0 if direction is Direction.Read else 1]


def _bandwidth(arch: ArchitectureFeatures, mem: MemArea) -> float:
    return arch.memory_bandwidths_per_cycle[mem]


def _ublock(arch: ArchitectureFeatures) -> Shape4D:
    ub = arch.ofm_ublock
    return Shape4D(1, ub.height, ub.width, ub.depth)


def _is_u55_32(arch: ArchitectureFeatures) -> bool:
    return arch.accelerator_config.lower() == "ethos-u55-32"


def ofm_micro_block(arch: ArchitectureFeatures, query: PerformanceQuery) -> Shape4D:
    """The micro-block a convolution's OFM is computed in: 1x4 for a 1-high, even-width OFM with a 1-high kernel
    on 2x2 hardware (only convolutions, unlike the legacy core which also applied it to depthwise)."""
    ub = _ublock(arch)
    if (ub.height == 2 and query.npu_block_type in _CONVOLUTION and query.ofm_shape.height == 1
            and query.ofm_shape.width % 2 == 0 and query.kernel.height == 1):
        return Shape4D(1, 1, 4, ub.depth)
    return ub


def memory_transfer_bytes(arch: ArchitectureFeatures, is_read: bool, mem: MemArea, fmt: TensorFormat, bits: int,
                          block: Shape4D, shape: Shape4D, elements: int) -> int:
    """Bytes of ``elements`` scaled up by the part of each burst a block access wastes (integer, as the C++)."""
    burst_bits = 8
    if fmt == TensorFormat.NHCWB16:
        z_stride = (shape.width * bits * 16) // 8
        if z_stride == block.depth:
            burst_bits = bits * block.width * block.depth
        elif is_read:
            burst_bits = 16 * bits * block.width
        else:
            burst_bits = 16 * bits * block.width * arch.ncores
    elif fmt == TensorFormat.NHWC:
        x_stride = (shape.depth * bits) // 8
        if is_read:
            burst_bits = bits * (block.width * block.depth if x_stride == block.depth else block.depth)
        elif block.depth <= 16 and x_stride == block.depth:
            burst_bits = bits * block.width * block.depth
        else:
            burst_bits = min(64 * 8, 16 * bits * arch.ncores, block.depth * bits)
    max_burst = arch.memory_burst_length[mem]
    burst_bytes = min(max_burst, burst_bits // 8)
    return ((elements * bits) // 8) * max_burst // max(burst_bytes, 1)


def _min_ifm_cycles(arch: ArchitectureFeatures, query: PerformanceQuery) -> int:
    """Cycles to fetch one IFM block (the slower IFM when there are two)."""
    block = query.config.ifm_block
    inputs = [(query.ifm_shape, query.ifm_memory_area, query.ifm_format)]
    if query.ifm2_shape is not None and query.ifm2_memory_area is not None:
        inputs.append((query.ifm2_shape, query.ifm2_memory_area, query.ifm2_format))
    cycles = 0
    for shape, mem, fmt in inputs:
        elements = shape.min(block).elements()
        tx = memory_transfer_bytes(arch, True, mem, fmt, query.ifm_bits, block, shape, elements)
        cycles = max(cycles, _latency(arch, mem, Direction.Read) + int(tx / _bandwidth(arch, mem)))
    return cycles


def _min_ofm_cycles(arch: ArchitectureFeatures, query: PerformanceQuery) -> int:
    """Cycles to write one OFM block."""
    block = query.config.ofm_block
    elements = query.ofm_shape.min(block).elements()
    tx = memory_transfer_bytes(arch, False, query.ofm_memory_area, query.ofm_format, query.ofm_bits, block,
                               query.ofm_shape, elements)
    return _latency(arch, query.ofm_memory_area, Direction.Write) + int(tx / _bandwidth(arch, query.ofm_memory_area))


def _act_index(activation: str | None) -> int:
    key = (activation or "").lower().replace("_", "")
    if key in _LUT_ACTIVATIONS:
        return 0
    if key in _RELU_ACTIVATIONS:
        return 1
    return 2


def ao_cycles_per_element(arch: ArchitectureFeatures, op_type: str, activation: str | None,
                          query: PerformanceQuery) -> float:
    """Output-unit cycles per OFM element: the slower of the scaling stage and the fused activation stage.

    A standalone LUT (the legacy graph's no-op Add carrying the table) is one LUT op to the default core: the
    plain output stage with the LUT as the op itself, not an Add with a LUT activation."""
    block_type = query.npu_block_type
    if op_type == "Add" and _act_index(activation) == 0 and query.ifm2_shape is not None \
            and query.ifm2_shape.elements() == 1:
        return max(arch.output_cycles_per_elem[7], arch.activation_cycles_per_elem[2])
    if block_type == NpuBlockType.ElementWise and query.ifm_bits == 32:
        out_index = 1 if query.ifm2_shape is not None else 0
    elif op_type == "Mul" and query.ofm_bits == 32:
        out_index = 2
    elif op_type == "Mul" or (block_type != NpuBlockType.ElementWise and uses_acc40(query.config)):
        out_index = 3
    elif op_type in ("Add", "Sub"):
        out_index = 5
    elif op_type in ("MaxPool", "QuantizedMaxPool"):
        out_index = 6
    else:
        out_index = 7
    return max(arch.output_cycles_per_elem[out_index], arch.activation_cycles_per_elem[_act_index(activation)])


def _sub_kernels(arch: ArchitectureFeatures, query: PerformanceQuery) -> list[int]:
    limit_h, limit_w = arch.sub_kernel_limits[query.npu_block_type]
    kh, kw = query.kernel.height, query.kernel.width
    return [min(kh - y, limit_h) * min(kw - x, limit_w) for x in range(0, kw, limit_w) for y in range(0, kh, limit_h)]


def mac_cycles_per_block(arch: ArchitectureFeatures, query: PerformanceQuery) -> int:
    """DPU cycles of one OFM block (all sub-kernels, all IFM depth blocks, shared among the cores)."""
    cfg = query.config
    block_type = query.npu_block_type
    ifm_block = query.ifm_shape.min(cfg.ifm_block)
    ofm_block = query.ofm_shape.min(cfg.ofm_block)
    ublocks = ofm_block.div_round_up(ofm_micro_block(arch, query))
    ublk_wh = ublocks.elements_wh()
    acc40 = uses_acc40(cfg)
    writeback = 32 * ofm_micro_block(arch, query).depth // 8
    partkernel = block_type == NpuBlockType.ConvolutionMxN and cfg.is_partkernel
    depth_steps = ceil_div(ifm_block.depth, 8)
    cycles_total = 0
    for kernel_elems in _sub_kernels(arch, query):
        if block_type == NpuBlockType.Pooling:
            steps = 1
            cycles = max(4, kernel_elems) * ublocks.elements()
            if not _is_u55_32(arch):
                cycles *= query.ifm_bits // 2
        elif block_type == NpuBlockType.ConvolutionDepthWise:
            steps = ceil_div(kernel_elems, 4)
            cycles = max(writeback, 4 * ublk_wh * (query.ifm_bits // 8)) * steps * ublocks.depth
        elif partkernel:
            steps = ceil_div(kernel_elems, 2 if query.ifm_bits == 16 else 4)
            cycles = max(writeback, 4 * ublk_wh) * steps * ublocks.depth * depth_steps
        else:
            steps = kernel_elems
            cycles = max(writeback, 4 * ublk_wh) * steps * ublocks.depth
        delay = 0
        if _is_u55_32(arch):
            unit = 7 if acc40 else 3
            if ublk_wh == 1:
                if ublocks.depth == 1:
                    delay = unit * steps
                elif steps > 1:
                    delay = unit * (steps - 1) * ublocks.depth
            if (ublocks.width == 1 or ublocks.height == 1) and ublocks.depth > 1 and acc40:
                delay += unit * ublocks.depth
        else:
            unit = 3 if acc40 and arch.num_macs_per_cycle <= 128 else 2
            if ublk_wh == 1:
                if ublocks.depth == 1:
                    delay = unit * steps
                elif steps > 1:
                    delay = unit * (steps - 1) * ublocks.depth
        if partkernel:
            delay *= depth_steps
        cycles_total += cycles + delay
    if block_type in (*_CONVOLUTION, NpuBlockType.ReduceSum):
        cycles_total *= ceil_div(query.ifm_shape.depth, ifm_block.depth)
    return cycles_total // arch.ncores


def mac_op_cycles(arch: ArchitectureFeatures, op_type: str, activation: str | None, query: PerformanceQuery,
                  *, first: bool = True, last: bool = True) -> int:
    """NPU cycles of a MAC pass. ``first``/``last``: the pass starts/ends a run (Vela's OpScheduling), paying the
    first IFM block fetch / the last OFM block write and pipeline drain; a whole op is both."""
    cfg = query.config
    ofm_block = query.ofm_shape.min(cfg.ofm_block)
    ublock = ofm_micro_block(arch, query)
    ublocks_per_block = ofm_block.div_round_up(ublock).elements()
    blocks = query.ofm_shape.div_round_up(ublock).elements() / ublocks_per_block
    ao_per_elem = ao_cycles_per_element(arch, op_type, activation, query)
    ao_block = float(math.ceil(ao_per_elem * ofm_block.elements()))
    if query.npu_block_type in (*_CONVOLUTION, NpuBlockType.ConvolutionDepthWise) and query.has_bias:
        assert query.const_memory_area is not None  # a query with a bias says where it is read from
        ao_block = max(ao_block, 10 * ofm_block.depth * _latency(arch, query.const_memory_area, Direction.Read) / 256)
    mac_block = mac_cycles_per_block(arch, query)
    ifm_cycles = _min_ifm_cycles(arch, query)
    ofm_cycles = _min_ofm_cycles(arch, query)
    mem_cycles = abs(ofm_cycles - ifm_cycles) if blocks > 1 else 0
    cmd = (mem_cycles + mac_block + ao_block) / 4
    mac_balanced = max(mac_block, cmd)
    ao_balanced = max(ao_block, cmd)
    if mac_balanced > ao_balanced:
        total = int(mac_balanced * blocks)
        if last:
            total = int(total + ao_balanced)
    else:
        total = int(ao_balanced * blocks + mac_balanced)
    if last:
        total += ofm_cycles
    if first:
        total += ifm_cycles
    return total


def elementwise_cycles(arch: ArchitectureFeatures, op_type: str, activation: str | None,
                       query: PerformanceQuery) -> int:
    """NPU cycles of an elementwise pass: output-unit time, or the command-issue limit of small blocks."""
    ofm = query.ofm_shape
    if query.ofm_format == TensorFormat.NHCWB16:
        ofm = ofm.round_up(Shape4D(1, 1, 1, 16))
    elements = ofm.elements()
    per_elem = ao_cycles_per_element(arch, op_type, activation, query)
    ao = math.ceil(per_elem * elements)
    block_cycles = max(_min_ofm_cycles(arch, query), _min_ifm_cycles(arch, query))
    cmd = math.ceil((block_cycles / query.config.ofm_block.elements() + per_elem) / 4.0 * elements)
    return int(max(cmd, ao))


def measure_cycle_cost(arch: ArchitectureFeatures, op_type: str, activation: str | None, query: PerformanceQuery,
                       *, first: bool = True, last: bool = True) -> CycleCost:
    """MACs and NPU cycles of a pass (the default core's ``MeasureCycleCost``)."""
    if _is_transpose(op_type, query):
        return CycleCost(0, _transpose_cycles(arch, query))
    block_type = query.npu_block_type
    if block_type in _MAC_BLOCK_TYPES:
        macs = query.kernel.elements_wh() * query.ofm_shape.elements()
        if block_type not in (NpuBlockType.ConvolutionDepthWise, NpuBlockType.Pooling):
            macs *= query.ifm_shape.depth
        return CycleCost(int(macs), mac_op_cycles(arch, op_type, activation, query, first=first, last=last))
    if block_type == NpuBlockType.ElementWise:
        return CycleCost(0, elementwise_cycles(arch, op_type, activation, query))
    if block_type == NpuBlockType.Dma:
        return CycleCost(0, 0)
    raise ValueError(f"no cycle model for NPU block type {block_type}")


def _is_transpose(op_type: str, query: PerformanceQuery) -> bool:
    """Whether the default core runs the pass as its Transpose: its own (``npusched.lowering.transpose``), or a
    TRANSPOSE Vela legacy runs as a 1x1 AvgPool block swap, which the default core runs as a Transpose of the same
    tensors (the swap's OFM view has the IFM's shape and element count)."""
    return op_type == "Transpose" or query.block_swap


def _transpose_cycles(arch: ArchitectureFeatures, query: PerformanceQuery) -> int:
    """A transpose is priced by its memory traffic alone: the slower of reading the IFM and writing the OFM, each
    with its memory's latency (the default core has no measured model for it yet)."""
    access = _transpose_access(arch, query)
    read = memory_transfer_bytes(arch, True, query.ifm_memory_area, query.ifm_format, query.ifm_bits,
                                 query.config.ifm_block, query.ifm_shape, access.ifm_read[0])
    write = memory_transfer_bytes(arch, False, query.ofm_memory_area, query.ofm_format, query.ofm_bits,
                                  query.config.ofm_block, query.ofm_shape, access.ofm_write)

    def cycles(size_bytes: int, mem: MemArea, direction: Direction) -> int:
        return int(size_bytes / _bandwidth(arch, mem)) + _latency(arch, mem, direction)

    return max(cycles(read, query.ifm_memory_area, Direction.Read),
               cycles(write, query.ofm_memory_area, Direction.Write))


def _transpose_access(arch: ArchitectureFeatures, query: PerformanceQuery) -> ElementAccess:
    """A transpose reads every IFM element once and writes the OFM (rounded to its format's storage)."""
    ofm_write = query.ofm_shape.round_up(_rounding(arch, query.ofm_format)).elements()
    return ElementAccess((query.ifm_shape.elements(), 0), ofm_write)


def measure_element_access(arch: ArchitectureFeatures, query: PerformanceQuery) -> ElementAccess:
    """Elements a pass reads and writes. MAC passes count as in the legacy model; an elementwise pass whose first
    IFM is a wider-than-8-bit scalar reads only that scalar (the legacy model also read the second IFM)."""
    if query.npu_block_type != NpuBlockType.ElementWise:
        return legacy_element_access(arch, query)
    return elementwise_element_access(arch, query, wide_scalar_reads_ifm2=False)


def mem2mem_cycles(arch: ArchitectureFeatures, source: MemArea, dest: MemArea, size_bytes: int) -> int:
    """DMA cycles of a copy: the slower of reading (plus read latency) and writing (plus write latency)."""
    read = int(size_bytes / _bandwidth(arch, source)) + _latency(arch, source, Direction.Read)
    write = int(size_bytes / _bandwidth(arch, dest)) + _latency(arch, dest, Direction.Write)
    return max(read, write)


def estimate_full_op_performance(
    arch: ArchitectureFeatures,
    op_type: str,
    activation: str | None,
    query: PerformanceQuery,
    *,
    weights: WeightStream | None = None,
    weight_bytes: int = 0,
    pre_buffered: bool = False,
    prev_slack_cycles: float = 0,
    slack_buffering_cycles: float = 0,
    lut: DmaTransfer | None = None,
    memcpy: DmaTransfer | None = None,
    cost: CycleCost | None = None,
) -> OpPerformance:
    """The default core's ``EstimateFullOpPerformance`` for one whole pass.

    ``weight_bytes`` is the encoded weights without their scales (the stream's remainder is scales);
    ``weights.full_transfer_cycles`` the DMA time of the whole unsliced stream, charged when it is buffered;
    ``pre_buffered``: the first slice is fetched under the previous pass, so only the rest is this pass's traffic.
    ``cost``: the compute cost (``measure_cycle_cost`` of the same query) where the caller has it already.
    """
    return partial_full_op_performance(
        arch, op_type, activation, query, weights=weights, weight_bytes=weight_bytes, pre_buffered=pre_buffered,
        lut=lut, memcpy=memcpy, cost=cost,
    ).finish(prev_slack_cycles, slack_buffering_cycles)


@dataclass(frozen=True)
class PartialOpPerformance:
    """The default core's estimate of a pass short of the slack cycles, which change only its NPU cycles and
    total: computed once and finished per slack by callers that price a pass after many previous passes."""

    cost: CycleCost
    weights: WeightStream | None
    # The first slice's DMA cycles when the buffered weights are read per OFM block (None: no weight DMA term).
    first_dma: float | None
    buffered: bool
    lut_cycles: float
    access_cycles: dict[MemArea, float]
    bandwidth: dict[tuple[MemArea, Purpose, Direction], float]

    def finish(self, prev_slack_cycles: float = 0, slack_buffering_cycles: float = 0) -> OpPerformance:
        """The estimate after a pass that leaves ``prev_slack_cycles`` (see ``estimate_full_op_performance``)."""
        cost, weights = self.cost, self.weights
        npu_cycles: float = cost.op_cycles
        if weights is not None and self.first_dma is not None:
            first_dma = max(self.first_dma - prev_slack_cycles, 0)
            npu_cycles = max(weights.full_transfer_cycles - prev_slack_cycles + slack_buffering_cycles,
                             cost.op_cycles + first_dma)
        if self.buffered:
            npu_cycles += self.lut_cycles
        else:
            npu_cycles += max(self.lut_cycles - prev_slack_cycles, 0)
        access_cycles = dict(self.access_cycles)
        total = max([npu_cycles, *access_cycles.values()])
        return OpPerformance(npu_cycles=npu_cycles, access_cycles=access_cycles, total_cycles=total,
                             macs=cost.op_macs, bandwidth=dict(self.bandwidth), scaled_bandwidth={},
                             op_cycles=cost.op_cycles)


def partial_full_op_performance(
    arch: ArchitectureFeatures,
    op_type: str,
    activation: str | None,
    query: PerformanceQuery,
    *,
    weights: WeightStream | None = None,
    weight_bytes: int = 0,
    pre_buffered: bool = False,
    lut: DmaTransfer | None = None,
    memcpy: DmaTransfer | None = None,
    cost: CycleCost | None = None,
) -> PartialOpPerformance:
    """``estimate_full_op_performance`` up to the slack cycles (same arguments less the slacks)."""
    if cost is None:
        cost = measure_cycle_cost(arch, op_type, activation, query)
    access = _transpose_access(arch, query) if _is_transpose(op_type, query) else measure_element_access(arch, query)
    cfg = query.config
    bw: dict[tuple[MemArea, Purpose, Direction], float] = {}
    transfer: dict[MemArea, int] = {}

    def add(mem: MemArea, purpose: Purpose, direction: Direction, value: float, counted: int | None = None) -> None:
        bw[(mem, purpose, direction)] = bw.get((mem, purpose, direction), 0) + value
        if counted is not None:
            transfer[mem] = transfer.get(mem, 0) + counted

    products = query.matmul_products  # the compound MatMul's scratch: elements, not bytes
    ifm_bytes = access.ifm_read[0] if products == "ifm" else memory_transfer_bytes(
        arch, True, query.ifm_memory_area, query.ifm_format, query.ifm_bits, cfg.ifm_block, query.ifm_shape,
        access.ifm_read[0])
    add(query.ifm_memory_area, Purpose.FeatureMap, Direction.Read, ifm_bytes, ifm_bytes)
    if query.ifm2_shape is not None and query.ifm2_memory_area is not None:
        ifm2_bytes = memory_transfer_bytes(arch, True, query.ifm2_memory_area, query.ifm2_format, query.ifm2_bits,
                                           cfg.ifm_block, query.ifm2_shape, access.ifm_read[1])
        add(query.ifm2_memory_area, Purpose.FeatureMap, Direction.Read, ifm2_bytes, ifm2_bytes)
    ofm_bytes = access.ofm_write if products == "ofm" else memory_transfer_bytes(
        arch, False, query.ofm_memory_area, query.ofm_format, query.ofm_bits, cfg.ofm_block, query.ofm_shape,
        access.ofm_write)
    add(query.ofm_memory_area, Purpose.FeatureMap, Direction.Write, ofm_bytes, ofm_bytes)

    lut_cycles = 0
    del lut  # the default core keeps LUTs where the NPU reads them: no golden estimate charges a LUT copy
    if memcpy is not None and memcpy.source_area != memcpy.dest_area:
        lut_cycles += mem2mem_cycles(arch, memcpy.source_area, memcpy.dest_area, memcpy.size_bytes)
        add(memcpy.source_area, Purpose.FeatureMap, Direction.Read, memcpy.size_bytes, memcpy.size_bytes)
        add(memcpy.dest_area, Purpose.FeatureMap, Direction.Write, memcpy.size_bytes, memcpy.size_bytes)

    buffered = weights is not None and weights.buffering != BufferKind.NONE
    first_dma = None
    if weights is not None and access.weights_refetch:
        ofm_depth_ratio = 1.0
        scale_bytes = weights.encoded_bytes - weight_bytes
        weight_read = access.weights_refetch * int(weight_bytes * ofm_depth_ratio)
        scale_read = access.weights_refetch * int(scale_bytes * ofm_depth_ratio)
        if buffered:
            assert weights.buffer_area is not None  # a buffered stream names its buffer's memory
            first = sum(weights.first_slice_bytes_per_core)
            streamed = max(weight_bytes - (first if pre_buffered else 0), 0)
            add(weights.source_area, Purpose.Weights, Direction.Read, weights.encoded_bytes, streamed)
            add(weights.buffer_area, Purpose.Weights, Direction.Write, weights.encoded_bytes, streamed)
            add(weights.buffer_area, Purpose.Weights, Direction.Read, weight_read, weight_read)
            first_dma = mem2mem_cycles(arch, weights.source_area, weights.buffer_area, first)
        else:
            add(weights.source_area, Purpose.Weights, Direction.Read, weight_read, weight_read)
        add(weights.source_area, Purpose.FSBias, Direction.Read, scale_read, scale_read)

    access_cycles = {mem: float(int(transfer.get(mem, 0) / _bandwidth(arch, mem))) for mem in ACCESS_AREAS}
    return PartialOpPerformance(cost, weights, first_dma, buffered, lut_cycles, access_cycles, bw)
