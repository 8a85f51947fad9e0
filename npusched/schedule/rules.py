"""The scheduling rules every solver and the evaluator share, each written once.

The heuristic, the DP, CP-SAT's candidates, the options layer and the evaluator must agree on how big a stripe's
input is, how a cascade is striped, which passes may cascade, how much storage a feature map takes, which
options dominate others and which weight stream a pass is priced with: if two of them disagreed, a schedule one
solver keeps under the limit could fail the evaluator's check, or two solvers would be priced on different
terms. So the rules live here, as pure functions, and every caller uses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from npusched.ir import FeatureMap, MemArea, NpuOp, ResamplingMode, Shape4D, TensorFormat, round_up
from npusched.target import performance as perf
from npusched.target.block_config import get_ifm_area_required
from npusched.target.estimators import PricedArchitecture
from npusched.target.weights import SCALE_ENTRY_BYTES, EncodedWeights

# Every allocation is a multiple of this many bytes (Vela's Tensor.AllocationQuantum).
ALLOCATION_QUANTUM = 16
# Brick format (NHCWB16) stores the depth in whole 16-channel bricks.
BRICK_DEPTH = 16


# --------------------------------------------------------------------------------------------------------------
# Storage


def allocation_bytes(size_bytes: int) -> int:
    """Storage of an allocation of ``size_bytes`` (an empty one still takes one quantum)."""
    return round_up(max(size_bytes, 1), ALLOCATION_QUANTUM)


def brick_padded_bytes(shape: Shape4D, element_bytes: int) -> int:
    """Bytes of ``shape`` with its depth padded to whole bricks, not rounded to the quantum (stripe sizes)."""
    return shape.with_depth(round_up(shape.depth, BRICK_DEPTH)).elements() * element_bytes


def rolling_buffer_bytes(shape: Shape4D, element_bytes: int) -> int:
    """Bytes of a cascade's rolling buffer: its shape (depth already in whole bricks) neither padded further nor
    rounded to the quantum, as Vela sizes it."""
    return shape.elements() * element_bytes


def operand_bytes(shape: Shape4D, fmt: TensorFormat, element_bytes: int) -> int:
    """Bytes Vela's scheduler reserves for a whole operand of a pass (its access shape): depth padded in brick
    format, rounded up to the quantum."""
    if fmt == TensorFormat.NHCWB16:
        shape = shape.with_depth(round_up(shape.depth, BRICK_DEPTH))
    return round_up(shape.elements() * element_bytes, ALLOCATION_QUANTUM)


def storage_size(fm: FeatureMap, fmt: TensorFormat) -> int:
    """Bytes a feature map occupies when allocated: depth padded in brick format (tensors of rank 1 to 4 only,
    as Vela pads), rounded up to the quantum."""
    shape = fm.shape
    rank = len(fm.orig_shape) if fm.orig_shape is not None else 4
    if fmt == TensorFormat.NHCWB16 and 0 < rank <= 4:
        shape = shape.with_depth(round_up(shape.depth, BRICK_DEPTH))
    return allocation_bytes(shape.elements() * fm.dtype.size_in_bytes)


# --------------------------------------------------------------------------------------------------------------
# Stripes and cascades


def ifm_stripes(op: NpuOp, ofm_stripe: Shape4D) -> tuple[Shape4D, Shape4D | None]:
    """IFM and IFM2 stripes an OFM stripe reads: the whole inputs for the whole OFM, otherwise the rows and
    columns the kernel needs, clamped to each input."""
    ifm = op.ifm.shape
    ifm2 = op.ifm2.shape if op.ifm2 is not None else None
    if ofm_stripe == op.ofm.shape:
        return ifm, ifm2
    width, height = get_ifm_area_required(ofm_stripe, op.kernel, op.resampling_mode)
    ifm_stripe = ifm.with_hw(min(height, ifm.height), min(width, ifm.width))
    ifm2_stripe = ifm2.with_hw(min(height, ifm2.height), min(width, ifm2.width)) if ifm2 is not None else None
    return ifm_stripe, ifm2_stripe


def producer_stripe_height(op: NpuOp, ofm_stripe_height: int, force_even: bool) -> int:
    """OFM stripe height the producer of ``op``'s IFM must write per step of a cascade: an upscaling pass (or,
    with ``force_even``, any pass of a cascade holding one) needs an even number of rows, times the stride."""
    upscale = 1 if op.resampling_mode == ResamplingMode.NONE else 2
    height = ofm_stripe_height + (ofm_stripe_height % 2 if force_even else ofm_stripe_height % upscale)
    return height * op.kernel.stride_y


def cascade_forces_even(ops: Sequence[NpuOp]) -> bool:
    """Whether a cascade's stripes must have even heights (it holds a nearest-neighbour upscaling pass)."""
    return any(op.resampling_mode == ResamplingMode.NEAREST for op in ops)


def cascade_stripes(ops: Sequence[NpuOp], final_height: int) -> list[Shape4D] | None:
    """OFM stripes of a cascade's passes ``ops`` (in order), derived backwards from ``final_height`` rows of
    the last pass's OFM; None when some pass would not be striped (its stripe would be empty or whole)."""
    force_even = cascade_forces_even(ops)
    stripes: list[Shape4D] = []
    height = final_height
    for op in reversed(ops):
        if height < 1 or height >= op.ofm.shape.height:
            return None
        stripes.append(op.ofm.shape.with_height(height))
        height = producer_stripe_height(op, height, force_even)
    return stripes[::-1]


def minimal_stripe_height(op: NpuOp, next_op: NpuOp | None) -> int:
    """The smallest OFM stripe height of ``op`` in Vela's min schedule: the rows the next pass in execution
    order steps over (1 after the last pass), even for a nearest-neighbour upscaling pass."""
    height = next_op.kernel.stride_y if next_op is not None else 1
    if op.resampling_mode == ResamplingMode.NEAREST:
        height += height % 2
    return height


class CascadePass(Protocol):
    """The facts about a pass that decide whether it may join a cascade (``npusched.schedule.cascades.SchedOp``)."""

    @property
    def pos(self) -> int: ...
    @property
    def op(self) -> NpuOp: ...
    @property
    def dependants(self) -> tuple[int, ...]: ...
    @property
    def cascadable_kind(self) -> bool: ...
    @property
    def requires_full_ifm(self) -> bool: ...
    @property
    def requires_full_ofm(self) -> bool: ...


def may_cascade(producer: CascadePass, consumer: CascadePass, later_readers: bool = False) -> bool:
    """Whether ``consumer`` may follow ``producer`` in a cascade, by Vela's rules that do not depend on the
    stripe: both kinds cascade, the consumer comes next and is the producer's only reader, reading its OFM as
    IFM at the same shape, and neither needs the feature map between them whole.

    ``later_readers`` (npusched's joins) lets passes after the consumer read the OFM too; the cascade must then
    reach them and each must read it lagged (``reads_lagged``), which the caller checks."""
    readers = tuple(producer.dependants)
    only_reader = readers == (consumer.pos,) or (later_readers and readers[:1] == (consumer.pos,)
                                                 and all(r > consumer.pos for r in readers[1:]))
    return (producer.cascadable_kind and consumer.cascadable_kind and only_reader
            and consumer.pos == producer.pos + 1
            and consumer.op.ifm.tensor == producer.op.ofm.tensor
            and producer.op.ofm.shape == consumer.op.ifm.shape and not writes_a_view(producer.op)
            and not consumer.requires_full_ifm and not producer.requires_full_ofm)


def writes_a_view(op: NpuOp) -> bool:
    """Whether ``op`` writes its whole OFM as a view of another shape (the repeat of an up-sampling written on its
    bytes). Vela's command stream steps such a producer in its own shape, whose stripes never cover the rows its
    consumer asks for, so it runs to the end before the consumer starts: no rolling buffer can be between them."""
    written = op.ofm.access_shape
    return written is not None and written != op.ofm.shape and written.elements() == op.ofm.shape.elements()


def reads_lagged(producer: NpuOp, reader: CascadePass, between: Sequence[NpuOp]) -> bool:
    """Whether ``reader``, later in a cascade than the pass after ``producer``, may read ``producer``'s OFM as its
    second operand from the producer's rolling buffer made deep enough for the rows the passes ``between`` them
    run ahead (``lagged_buffer_height``): the skip of a residual block, or the gated map of a swish, taken inside
    the cascade. The reader is a binary elementwise pass that cascades with a feature map as its second operand,
    reading the OFM at its full shape; every pass between keeps the height (no stride, no upscaling), which
    bounds the lag by their kernels."""
    op = reader.op
    height = producer.ofm.shape.height
    return (reader.cascadable_kind and op.ifm2 is not None and not op.reversed_operands
            and op.ifm2.tensor == producer.ofm.tensor and op.ifm.tensor != producer.ofm.tensor
            and op.ifm2.shape == producer.ofm.shape
            and all(p.ofm.shape.height == height and p.kernel.stride_y == 1
                    and p.resampling_mode == ResamplingMode.NONE for p in between))


def pulled_buffer_height(producer_rows: int, consumer_ifm_rows: int, full_height: int, past_rows: int = 0) -> int:
    """Rows a rolling buffer needs in the order Vela's command stream runs a cascade: pull-wise, the producer
    writes whole stripes of ``producer_rows`` only until the rows Vela asks for the consumer's next stripe are
    there (its IFM stripe of ``consumer_ifm_rows`` and the ``past_rows`` of ``rows_past_the_kernel``), so it runs
    at most ``producer_rows - 1`` rows past those. Vela sizes the buffer at the consumer's IFM stripe plus one
    producer stripe in whole consumer stripes (``rolling_buffer_shape``), up to twice this; npusched's own
    cascades (with joins) take this size, which each compilation's replay (``npusched.vela.rolling_check``)
    confirms."""
    return min(consumer_ifm_rows + past_rows + producer_rows - 1, full_height)


def rows_past_the_kernel(op: NpuOp) -> int:
    """Rows past its kernel's last that Vela's command stream asks the producer for, per stripe of ``op``: Vela
    ends an IFM stripe at its bottom skirt, the padding SAME would need, which on a strided pass with VALID
    padding of an input the stride does not divide reaches past the rows the kernel reads (a 2x2 stride-2 pool
    of 11 rows: 3 rows asked for each output row, 2 read)."""
    skirt = op.attr("skirt")
    if not isinstance(skirt, tuple) or op.resampling_mode != ResamplingMode.NONE:
        return 0
    return max(op.kernel.stride_y + skirt[0] + skirt[2] - op.kernel.area_height(), 0)


def cascade_reach(passes: Sequence[CascadePass], k: int, later_readers: bool = False) -> int | None:
    """None when pass ``k + 1`` may not follow pass ``k`` in a cascade (``may_cascade``), else the last position
    a cascade through them must reach: ``k + 1``, or with ``later_readers`` the last pass reading ``k``'s OFM
    lagged (``reads_lagged``; a later reader that may not makes the link None)."""
    producer, later = passes[k], passes[k].dependants[1:]
    if not may_cascade(producer, passes[k + 1], later_readers):
        return None
    if not all(reads_lagged(producer.op, passes[q], [p.op for p in passes[k + 1:q]]) for q in later):
        return None
    return max(later, default=k + 1)


def lagged_buffer_height(stripe_heights: Sequence[int], kernel_heights: Sequence[int], full_height: int) -> int:
    """Rows a rolling buffer must hold when a pass of its cascade reads it as second operand while the passes
    between run ahead: ``stripe_heights`` are the OFM stripe heights of the producer, the passes between and
    the reader, ``kernel_heights`` the dilated kernel heights of the passes between (their padding ignored, so
    the bound holds whatever it is).

    The cascade runs pull-wise from its last pass: before the reader's stripe ending at row ``e`` runs, each pass
    between has written whole stripes up to the rows the next one reads, so the producer has written up to
    ``front(e)`` while the reader still needs row ``e - s`` (its stripe height ``s``). A buffer of
    ``max(front(e) - (e - s))`` rows (addressed modulo its height, as Vela's rolling buffers are) overwrites no
    row before the reader has read it."""
    producer, *between, reader = stripe_heights
    need = 0
    for start in range(0, full_height, reader):
        front = min(start + reader, full_height)
        for stripe, kernel in zip(reversed(between), reversed(kernel_heights), strict=True):
            front = min(min(round_up(front, stripe), full_height) + kernel - 1, full_height)
        need = max(need, min(round_up(front, producer), full_height) - start)
    return min(need, full_height)


# --------------------------------------------------------------------------------------------------------------
# Pareto filter


def pareto_front(table: np.ndarray) -> list[int]:
    """Row indices of ``table`` that no other row beats or equals in every column (lower is better), in
    lexicographic order of the rows; of equal rows only the first stays."""
    if len(table) <= 1:
        return list(range(len(table)))
    order = np.lexsort(table.T[::-1])  # by the first column, ties by the next ...; stable
    front = np.empty_like(table)
    size = 0
    kept: list[int] = []
    for idx in order.tolist():
        row = table[idx]
        if size and bool((front[:size] <= row).all(axis=1).any()):
            continue
        front[size] = row
        size += 1
        kept.append(idx)
    return kept


# --------------------------------------------------------------------------------------------------------------
# Pricing


def weights_need_dma(arch: PricedArchitecture, op: NpuOp) -> bool:
    """Weights are copied to fast storage only when they sit in a slow permanent memory distinct from it."""
    if op.weights is None:
        return False
    return (arch.permanent_storage_mem_area in (MemArea.Dram, MemArea.OffChipFlash)
            and arch.permanent_storage_mem_area != arch.fast_storage_mem_area)


def pricing_weight_stream(arch: PricedArchitecture, op: NpuOp, encoded: EncodedWeights,
                          buffering: perf.BufferKind, full_transfer_cycles: float = 0.0,
                          scale_element_bytes: int = SCALE_ENTRY_BYTES) -> perf.WeightStream:
    """The weight stream a pass is priced with: read in place from permanent storage, or DMA'd into fast-storage
    buffers (the first depth slice before the pass, ``full_transfer_cycles`` the scheduler's whole-stream DMA
    estimate); ``scale_element_bytes`` is what the estimate takes one channel's scale and bias to be."""
    assert op.weights is not None
    if buffering == perf.BufferKind.NONE:
        return perf.WeightStream(encoded_bytes=encoded.total_bytes, original_elements=int(op.weights.values.size),
                                 source_area=arch.permanent_storage_mem_area, scale_element_bytes=scale_element_bytes)
    return perf.WeightStream(
        encoded_bytes=encoded.total_bytes,
        original_elements=int(op.weights.values.size),
        source_area=arch.permanent_storage_mem_area,
        buffering=buffering,
        buffer_area=arch.fast_storage_mem_area,
        first_slice_bytes_per_core=tuple(r.total_bytes for r in encoded.ranges if r.slice_index == 0),
        full_transfer_cycles=full_transfer_cycles,
        scale_element_bytes=scale_element_bytes,
    )
