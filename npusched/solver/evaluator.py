"""The single judge of a schedule: what it costs and whether it is valid.

Every solver hands its ``Schedule`` here, and every number a report prints comes from here, so schedules from
different solvers are always compared on the same terms. The prices are Vela 5.2.0's legacy-core estimates:

* per pass, the full-op estimate of ``npusched.model.performance`` (compute, weight DMA, memory access time),
  fed with the schedule's block config, tensor placements and weight buffering;
* memory over time, built the way Vela's live-range pass builds it: pass ``i`` of a subgraph runs at step
  ``2 i``, a tensor is live from the first step that touches it to one step after the last, an elementwise
  pass may write its OFM over an IFM it consumes, a pre-buffered weight buffer starts one step early and the
  buffer that does not hold the last depth slice of a double-buffered pass ends one step early; the passes of a
  cascade share one step and hold their IFMs in rolling buffers. Two views are kept: per subgraph as Vela's
  scheduler sees it (its "SRAM Used"), and over the whole inference (its per-layer "SRAM Usage").

``verify`` then checks the schedule against the network and the evaluation: every pass has its choices, stripes,
cascades and weight slices are consistent, and fast storage never exceeds its limit.

The memory model is the only one in the project: the heuristic scheduler runs its candidates through it
(``pass_memory_walk``), so what it decides on is what is judged here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from npusched.model import performance as perf
from npusched.model import weights as wts
from npusched.model.arch import Estimator
from npusched.model.contention import contention_slack
from npusched.model.ir import FeatureMap, MemArea, NpuBlockType, NpuOp, Shape4D, TensorFormat
from npusched.model.performance import Direction, Purpose
from npusched.model.rules import (
    ALLOCATION_QUANTUM,  # noqa: F401  (re-exported)
    allocation_bytes,
    ifm_stripes,
    pricing_weight_stream,
    storage_size,
    weights_need_dma,
)
from npusched.solver.cascades import rolling_buffer_shape
from npusched.solver.schedule import OpSchedule, Schedule, TensorPlacement

BandwidthKey = tuple[MemArea, Purpose, Direction]


# --------------------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class LiveRange:
    """One allocation in fast storage: the tensors sharing it (names, and the feature maps themselves), the steps
    it spans (inclusive) and its size."""

    tensors: tuple[str, ...]
    start: int
    end: int
    size: int
    kind: str = "feature_map"  # or "weight_buffer"
    feature_maps: tuple[FeatureMap, ...] = ()
    weight_of: int | None = None  # op index of the pass whose weight buffer this is

    def overlaps(self, other: LiveRange) -> bool:
        """Whether the two ranges are live together for more than a shared boundary step."""
        return max(self.start, other.start) < min(self.end, other.end)


@dataclass(frozen=True)
class OpCost:
    """Cost of one NPU pass under a schedule (one row of Vela's per-layer table).

    ``total_cycles`` is the larger of ``npu_cycles`` and each memory's ``access_cycles``; ``op_cycles`` is the
    compute-only estimate before weight and LUT DMA are added. ``sram_used`` is the fast storage in use at the
    pass's step of its subgraph as Vela's scheduler sees it, feature maps still in feature-map storage (its
    "SRAM Used" of --verbose-schedule; the actual use when feature-map storage is the fast storage);
    ``network_sram_used`` is the actual use over the whole inference (Vela's per-layer "SRAM Usage", which also
    counts CPU-side tensors and variables).
    """

    op_index: int
    name: str
    subgraph: str
    time_index: int
    npu_cycles: float
    op_cycles: float
    total_cycles: float
    access_cycles: dict[MemArea, float]
    bandwidth: dict[BandwidthKey, float]
    macs: int
    sram_used: int
    slack_buffering_cycles: float = 0.0
    full_weight_transfer_cycles: float = 0.0
    network_sram_used: int = 0

    def bytes_moved(self, mem: MemArea, purpose: Purpose | None = None,
                    direction: Direction | None = None) -> float:
        return sum(v for (m, p, d), v in self.bandwidth.items()
                   if m == mem and purpose in (None, p) and direction in (None, d))


@dataclass(frozen=True)
class SubgraphMemory:
    """Fast-storage use over the steps of one NPU subgraph."""

    name: str
    usage: tuple[int, ...]
    live_ranges: tuple[LiveRange, ...]
    op_steps: dict[int, int]

    @property
    def peak(self) -> int:
        return max(self.usage, default=0)


@dataclass(frozen=True)
class Evaluation:
    """Costs of a whole schedule. Totals are sums over passes in execution order, as Vela adds them."""

    ops: tuple[OpCost, ...]
    memory: tuple[SubgraphMemory, ...]
    total_cycles: float
    npu_cycles: float
    access_cycles: dict[MemArea, float]
    bandwidth: dict[BandwidthKey, float]
    macs: int
    peak_fast_storage: int
    staging_limit: int
    encoded_weight_bytes: int = 0
    original_weight_bytes: int = 0
    notes: tuple[str, ...] = field(default=())
    network_memory: SubgraphMemory | None = None

    @property
    def sram_used_peaks(self) -> tuple[int, ...]:
        """Per subgraph, the most fast storage in use at any of its passes' steps as Vela's scheduler sees it (the
        largest "SRAM Used" of its verbose schedule). ``peak_fast_storage`` is the real requirement: it also
        counts the steps between passes and the feature maps the schedule moved into fast storage (Vela's
        "sram_memory_used" when its allocation leaves no gaps)."""
        return tuple(max((c.sram_used for c in self.ops if c.subgraph == m.name), default=0) for m in self.memory)

    @property
    def network_peak_fast_storage(self) -> int:
        """Peak of the whole-inference snapshot (a lower bound of what an allocator needs; Vela's equals it
        whenever its allocation leaves no gaps)."""
        return self.network_memory.peak if self.network_memory is not None else self.peak_fast_storage

    def op(self, index: int) -> OpCost:
        for cost in self.ops:
            if cost.op_index == index:
                return cost
        raise KeyError(index)

    def bytes_moved(self, mem: MemArea, purpose: Purpose | None = None,
                    direction: Direction | None = None) -> float:
        return sum(v for (m, p, d), v in self.bandwidth.items()
                   if m == mem and purpose in (None, p) and direction in (None, d))


# --------------------------------------------------------------------------------------------------------------
# Network access (a Network or a single NpuSubgraph)


def subgraphs_of(network_or_subgraph: Any) -> tuple[Any, ...]:
    """The NPU subgraphs to evaluate: all of a Network's, or the one given."""
    if hasattr(network_or_subgraph, "subgraphs"):
        return tuple(network_or_subgraph.subgraphs)
    return (network_or_subgraph,)


def _fm_label(fm: FeatureMap) -> str:
    return fm.name if fm.name else f"<tensor {fm.uid}>"


@dataclass(frozen=True)
class TensorUse:
    """Producers and consumers of every feature map of the evaluated subgraphs (by op index)."""

    producers: dict[FeatureMap, tuple[int, ...]]
    consumers: dict[FeatureMap, tuple[int, ...]]
    subgraph_outputs: frozenset[FeatureMap]
    subgraph_inputs: frozenset[FeatureMap]
    variables: frozenset[str] = frozenset()
    variable_writes: dict[FeatureMap, str] = field(default_factory=dict)

    def consumer_count(self, fm: FeatureMap) -> int:
        """Consumers as Vela counts them: a subgraph output has one more (the CPU side or the network output)."""
        return len(self.consumers.get(fm, ())) + (1 if fm in self.subgraph_outputs else 0)

    def storage_key(self, fm: FeatureMap) -> Any:
        """Identity of the buffer holding ``fm``: a pass that writes a variable (LSTM state) writes into the
        variable's own buffer, so its OFM and the variable share one allocation."""
        name = self.variable_writes.get(fm)
        if name is not None:
            return ("variable", name)
        if fm.name in self.variables:
            return ("variable", fm.name)
        return fm


def tensor_use(network_or_subgraph: Any) -> TensorUse:
    producers: dict[FeatureMap, list[int]] = {}
    consumers: dict[FeatureMap, list[int]] = {}
    outputs: set[FeatureMap] = set()
    inputs: set[FeatureMap] = set()
    writes: dict[FeatureMap, str] = {}
    for sg in subgraphs_of(network_or_subgraph):
        outputs.update(getattr(sg, "outputs", ()) or ())
        inputs.update(getattr(sg, "inputs", ()) or ())
        for op in sg.ops:
            for access in (op.ifm, op.ifm2):
                if access is not None and not access.tensor.is_const:
                    users = consumers.setdefault(access.tensor, [])
                    if op.index not in users:
                        users.append(op.index)
            producers.setdefault(op.ofm.tensor, []).append(op.index)
            if op.attr("memory_function") == "VariableTensorWrite" and op.attr("variable_tensor") is not None:
                var = op.attr("variable_tensor")
                writes[op.ofm.tensor] = var.name if isinstance(var, FeatureMap) else str(var)
    return TensorUse({k: tuple(v) for k, v in producers.items()}, {k: tuple(v) for k, v in consumers.items()},
                     frozenset(outputs), frozenset(inputs), frozenset(writes.values()), writes)


# --------------------------------------------------------------------------------------------------------------
# Storage


def default_placement(arch: Any, fm: FeatureMap) -> TensorPlacement:
    """Where a feature map lives before any schedule moves it: constants in permanent storage, the rest in
    feature-map storage, both NHWC."""
    if fm.is_const:
        return TensorPlacement(arch.permanent_storage_mem_area, TensorFormat.NHWC)
    return TensorPlacement(arch.feature_map_storage_mem_area, TensorFormat.NHWC)


def placement_of(arch: Any, schedule: Schedule, fm: FeatureMap) -> TensorPlacement:
    if fm.is_const:
        return default_placement(arch, fm)
    return schedule.placement(fm) or default_placement(arch, fm)


def _in_fast_storage(arch: Any, placement: TensorPlacement) -> bool:
    return placement.mem_area == arch.fast_storage_mem_area


# --------------------------------------------------------------------------------------------------------------
# Memory over time
#
# One model serves every caller: ``subgraph_memory``/``network_memory`` read it off a ``Schedule``, and the
# heuristic's scheduler (``npusched.solver.fast_storage.live_ranges``) feeds it its candidate schedules through
# ``PassMemory`` records, so the numbers the scheduler decides on are the numbers the judge prints.


def reusable_ifm(op: NpuOp, use: TensorUse, fmt_of: Callable[[FeatureMap], TensorFormat],
                 in_fast: Callable[[FeatureMap], bool] | None = None) -> FeatureMap | None:
    """The IFM whose buffer a pass may overwrite with its OFM, or None (elementwise passes and DMA copies).

    For an elementwise pass the input must have the pass's OFM shape, be a real (non-scalar, non-constant) tensor
    with the OFM's layout and type and no other consumer, and the OFM must have no other producer; operands are
    tried in the order the pass reads them. A DMA copy reuses its input when nothing else reads it. With
    ``in_fast`` given both tensors must also be in fast storage (the live-range rule); without it only shapes,
    layouts and consumers count (the scheduler's early estimate).
    """

    def ignored(fm: FeatureMap) -> bool:
        return fm.is_const or (in_fast is not None and not in_fast(fm))

    if op.npu_block_type == NpuBlockType.ElementWise and op.attr("memory_function") != "VariableTensorWrite":
        ofm = op.ofm.tensor
        if ignored(ofm) or op.attr("ifm_write_protected"):
            return None
        for access in ((op.ifm2, op.ifm) if op.reversed_operands else (op.ifm, op.ifm2)):
            if access is None:
                continue
            fm = access.tensor
            if access.shape != op.ofm.shape or fm.orig_shape == () or ignored(fm):
                continue
            if fmt_of(fm) != fmt_of(ofm) or fm.dtype != ofm.dtype:
                continue
            if use.consumer_count(fm) != 1 or len(use.producers.get(ofm, ())) != 1:
                continue
            return fm
        return None
    if op.op_type == "Memcpy":
        ifm, ofm = op.ifm.tensor, op.ofm.tensor
        if ignored(ifm) or ignored(ofm) or use.consumer_count(ifm) > 1:
            return None
        return ifm
    return None


def elementwise_reuse_source(op: NpuOp, arch: Any, schedule: Schedule, use: TensorUse) -> FeatureMap | None:
    """``reusable_ifm`` with the layouts and memories ``schedule`` gives the tensors."""
    return reusable_ifm(op, use, lambda fm: placement_of(arch, schedule, fm).format,
                        lambda fm: _in_fast_storage(arch, placement_of(arch, schedule, fm)))


@dataclass(frozen=True)
class PassMemory:
    """What the memory model needs of one pass under some schedule.

    ``cascade`` is any key naming the pass's cascade (None outside one); ``rolling_ifm`` the shape of the rolling
    buffer its IFM occupies (cascaded passes after the first); ``weight_buffers`` the sizes in bytes of its
    fast-storage weight buffers, ``pre_buffered`` whether the first is filled during the previous pass, and
    ``last_buffer`` which buffer holds the final depth slice (it stays live to the end of the pass).
    """

    op: NpuOp
    cascade: Any = None
    rolling_ifm: Shape4D | None = None
    weight_buffers: tuple[int, ...] = ()
    pre_buffered: bool = False
    last_buffer: int = 0


@dataclass
class _Range:
    """A live range under construction (mutable while the steps are walked)."""

    keys: list[Any]
    labels: list[str]
    feature_maps: list[FeatureMap]
    size: int
    kind: str
    weight_of: int | None = None
    start: int | None = None
    end: int | None = None

    def mark(self, time: int, length: int = 1) -> None:
        first = max(time, 0)
        last = time + length
        if last < first:
            return
        self.start = first if self.start is None else min(self.start, first)
        self.end = last if self.end is None else max(self.end, last)

    def frozen(self) -> LiveRange:
        return LiveRange(tuple(self.labels), self.start, self.end, self.size, self.kind,
                         tuple(self.feature_maps), self.weight_of)


@dataclass
class _FastStorage:
    """How one memory walk sees the tensors: which are in fast storage, their sizes and layouts."""

    use: TensorUse
    in_fast: Callable[[FeatureMap], bool]
    size_of: Callable[[FeatureMap], int]
    fmt_of: Callable[[FeatureMap], TensorFormat]
    ranges: list[_Range] = field(default_factory=list)
    by_key: dict[Any, _Range] = field(default_factory=dict)

    def range_of(self, fm: FeatureMap) -> _Range:
        key = self.use.storage_key(fm)
        rng = self.by_key.get(key)
        if rng is None:
            rng = _Range([key], [_fm_label(fm)], [fm], self.size_of(fm), "feature_map")
            self.by_key[key] = rng
            self.ranges.append(rng)
        return rng

    def mark(self, fm: FeatureMap, time: int) -> None:
        if not fm.is_const and self.in_fast(fm):
            self.range_of(fm).mark(time)

    def walk(self, passes: Iterable[PassMemory], outputs: Iterable[FeatureMap], time: int
             ) -> tuple[dict[int, int], int]:
        """Mark the passes' live ranges from step ``time`` on; (step of each op index, end step).

        Pass ``i`` runs at step ``time + 2 i`` except that a cascade's passes share its first pass's step; the
        outputs are touched once more after the last pass.
        """
        steps: dict[int, int] = {}
        cascade_step: dict[Any, int] = {}
        current = time
        for p in passes:
            op = p.op
            if p.cascade is None:
                source = reusable_ifm(op, self.use, self.fmt_of, self.in_fast)
                if source is not None:
                    rng = self.range_of(source)
                    key = self.use.storage_key(op.ofm.tensor)
                    if key not in self.by_key:
                        rng.keys.append(key)
                        rng.labels.append(_fm_label(op.ofm.tensor))
                        rng.feature_maps.append(op.ofm.tensor)
                        self.by_key[key] = rng
            t = cascade_step.get(p.cascade, current) if p.cascade is not None else current
            steps[op.index] = t
            for access in (op.ifm, op.ifm2, op.ofm):
                if access is None or access.tensor.is_const:
                    continue
                fm = access.tensor
                if access is op.ifm and p.rolling_ifm is not None:
                    # A rolling buffer sits in fast storage whatever memory holds the whole tensor elsewhere;
                    # its size (unpadded, as Vela sizes it) replaces the feature map's.
                    rng = self.range_of(fm)
                    rng.size = p.rolling_ifm.elements() * fm.dtype.size_in_bytes
                    rng.mark(t)
                else:
                    self.mark(fm, t)
            several = len(p.weight_buffers) > 1
            for idx, size in enumerate(p.weight_buffers):
                rng = _Range([("weights", op.index, idx)], [f"{op.name}_weight_buffer{idx + 1}"], [],
                             allocation_bytes(size), "weight_buffer", op.index)
                self.ranges.append(rng)
                start, length = t, 1
                if idx == 0 and p.pre_buffered:
                    start, length = t - 1, 2
                if several and idx != p.last_buffer:
                    length -= 1
                rng.mark(start, length)
            if t == current:
                current += 2
            if p.cascade is not None:
                cascade_step[p.cascade] = t
        for fm in outputs:
            self.mark(fm, current)
        return steps, current

    def usage(self, end_time: int) -> tuple[tuple[int, ...], tuple[LiveRange, ...]]:
        usage = [0] * (end_time + 2)
        ranges = []
        for rng in self.ranges:
            if rng.start is None or rng.end < rng.start:
                continue
            for t in range(rng.start, rng.end + 1):
                usage[t] += rng.size
            ranges.append(rng.frozen())
        return tuple(usage), tuple(ranges)


def pass_memory_walk(passes: Sequence[PassMemory], use: TensorUse, in_fast: Callable[[FeatureMap], bool],
                     size_of: Callable[[FeatureMap], int], fmt_of: Callable[[FeatureMap], TensorFormat],
                     outputs: Iterable[FeatureMap] = (), name: str = "") -> SubgraphMemory:
    """Fast-storage use at every step of one subgraph given as ``PassMemory`` records (the memory model itself,
    for schedulers that keep their candidates in their own terms). ``in_fast``/``size_of``/``fmt_of`` say which
    feature maps are in fast storage, how many bytes they take there and in which layout."""
    book = _FastStorage(use, in_fast, size_of, fmt_of)
    steps, end = book.walk(passes, outputs, 0)
    usage, ranges = book.usage(end)
    return SubgraphMemory(name, usage, ranges, steps)


def cascade_rolling_buffers(sg: Any, schedule: Schedule) -> dict[int, Shape4D]:
    """The rolling buffer each cascaded pass (after its cascade's first) reads its IFM from, by op index.

    The schedule's ``rolling_buffer`` when given, else Vela's size for it: the consumer's IFM stripe plus one
    producer stripe, in whole consumer stripes, as wide as the wider of the two, depth padded to 16
    (``npusched.solver.cascades.rolling_buffer_shape``).
    """
    result: dict[int, Shape4D] = {}
    prev: OpSchedule | None = None
    for op in sg.ops:
        op_sched = schedule.op(op.index) if schedule.has_op(op.index) else None
        if op_sched is None or op_sched.cascade is None:
            prev = op_sched
            continue
        if op_sched.rolling_buffer is not None:
            result[op.index] = op_sched.rolling_buffer
        elif prev is not None and prev.cascade == op_sched.cascade:
            result[op.index] = rolling_buffer_shape(prev.ofm_stripe, op_sched.ifm_stripe)
        prev = op_sched
    return result


def _passes(sg: Any, schedule: Schedule) -> list[PassMemory]:
    rolling = cascade_rolling_buffers(sg, schedule)
    passes = []
    for op in sg.ops:
        if not schedule.has_op(op.index):
            passes.append(PassMemory(op))
            continue
        op_sched = schedule.op(op.index)
        buffering = op_sched.weight_buffering
        passes.append(PassMemory(op, op_sched.cascade, rolling.get(op.index), tuple(buffering.buffer_sizes),
                                 buffering.pre_buffered, buffering.last_buffer_index))
    return passes


def _book(arch: Any, schedule: Schedule, use: TensorUse) -> _FastStorage:
    def in_fast(fm: FeatureMap) -> bool:
        return _in_fast_storage(arch, placement_of(arch, schedule, fm))

    def size_of(fm: FeatureMap) -> int:
        return storage_size(fm, placement_of(arch, schedule, fm).format)

    def fmt_of(fm: FeatureMap) -> TensorFormat:
        return placement_of(arch, schedule, fm).format

    return _FastStorage(use, in_fast, size_of, fmt_of)


def scheduling_view(arch: Any, schedule: Schedule) -> Schedule:
    """The schedule as Vela's scheduler sees it while choosing buffers: every feature map still in feature-map
    storage (moving OFMs into fast storage happens afterwards). Identical to ``schedule`` when nothing moved."""
    area = arch.feature_map_storage_mem_area
    if all(place.mem_area == area for _, place in schedule.tensors):
        return schedule
    return replace(schedule, tensors=tuple((fm, TensorPlacement(area, place.format)) for fm, place in schedule.tensors))


def subgraph_memory(sg: Any, arch: Any, schedule: Schedule, use: TensorUse | None = None) -> SubgraphMemory:
    """Fast-storage use at every step of one NPU subgraph (Vela's per-subgraph memory snapshot): feature maps the
    schedule places in fast storage, the rolling buffers of cascades and the weight buffers. Applied to
    ``scheduling_view(schedule)`` it is what Vela's verbose schedule prints as "SRAM Used"."""
    use = use if use is not None else tensor_use(sg)
    book = _book(arch, schedule, use)
    steps, end = book.walk(_passes(sg, schedule), getattr(sg, "outputs", ()) or (), 0)
    usage, ranges = book.usage(end)
    return SubgraphMemory(getattr(sg, "name", ""), usage, ranges, steps)


def network_memory(network: Any, arch: Any, schedule: Schedule, use: TensorUse | None = None) -> SubgraphMemory:
    """Fast-storage use over the whole inference (the snapshot behind Vela's per-layer "SRAM Usage").

    The network's inputs are live from the start-up step, every CPU operator takes two steps with its tensors
    live at the first, each NPU subgraph runs where it falls in execution order, and variables (LSTM and SVDF
    states) live throughout.
    """
    use = use if use is not None else tensor_use(network)
    subgraphs = subgraphs_of(network)
    sg_of_op = {op.index: sg for sg in subgraphs for op in sg.ops}
    ops = getattr(network, "ops", ()) or tuple(o for sg in subgraphs for o in sg.ops)
    cpu_ops = [op for op in ops if op.index not in sg_of_op]
    produced = set(use.producers).union(*(op.outputs for op in cpu_ops))
    cpu_variables = {fm for op in cpu_ops for fm in op.variables}
    book = _book(arch, schedule, use)
    steps: dict[int, int] = {}
    time = 0
    read = [fm for sg in subgraphs for fm in getattr(sg, "inputs", ()) or ()]
    for fm in read + [fm for op in cpu_ops for fm in op.inputs]:  # start-up: graph inputs (tensors no op produces)
        if fm not in produced and fm not in cpu_variables and fm.name not in use.variables:
            book.mark(fm, time)
    time += 2
    done: set[int] = set()
    for op in ops:
        sg = sg_of_op.get(op.index)
        if sg is None:
            for fm in op.inputs + op.outputs:
                book.mark(fm, time)
            time += 2
            continue
        if id(sg) in done:
            continue
        done.add(id(sg))
        for fm in getattr(sg, "inputs", ()) or ():
            book.mark(fm, time)
        sg_steps, time = book.walk(_passes(sg, schedule), getattr(sg, "outputs", ()) or (), time)
        steps.update(sg_steps)
    for rng_key, rng in book.by_key.items():
        if rng_key in cpu_variables or (isinstance(rng_key, tuple) and rng_key[:1] == ("variable",)):
            rng.mark(0, time + 1)
    usage, ranges = book.usage(time)
    return SubgraphMemory(getattr(network, "name", ""), usage, ranges, steps)

# --------------------------------------------------------------------------------------------------------------
# Pricing one pass


def op_query(arch: Any, op: NpuOp, op_sched: OpSchedule, schedule: Schedule, *, ofm_depth: int | None = None,
             const_area: MemArea | None = None, scheduling_areas: bool = False) -> perf.PerformanceQuery:
    """The performance query of a pass under a schedule.

    With ``scheduling_areas`` the feature maps are priced where they sit while Vela schedules (feature-map
    storage), which is what its buffering decisions are based on; otherwise where the schedule puts them.
    ``ofm_depth`` prices only part of the OFM depth (a weight slice).
    """

    def area(fm: FeatureMap) -> MemArea:
        if scheduling_areas and not fm.is_const:
            return arch.feature_map_storage_mem_area
        return placement_of(arch, schedule, fm).mem_area

    def fmt(fm: FeatureMap) -> TensorFormat:
        return placement_of(arch, schedule, fm).format

    ofm_shape = op.ofm.effective_shape
    if ofm_depth is not None:
        ofm_shape = ofm_shape.with_depth(ofm_depth)
    ifm2 = op.ifm2
    const_shape = Shape4D(1, 1, 1, op.ofm.shape.depth) if op.bias is not None else None
    return perf.PerformanceQuery(
        npu_block_type=op.npu_block_type,
        ifm_shape=op.ifm.effective_shape,
        ofm_shape=ofm_shape,
        config=op_sched.block_config,
        ifm_bits=op.ifm.tensor.dtype.size_in_bits,
        ofm_bits=op.ofm.tensor.dtype.size_in_bits,
        ifm_format=fmt(op.ifm.tensor),
        ofm_format=fmt(op.ofm.tensor),
        ifm_memory_area=area(op.ifm.tensor),
        ofm_memory_area=area(op.ofm.tensor),
        ifm2_shape=ifm2.effective_shape if ifm2 is not None else None,
        ifm2_bits=ifm2.tensor.dtype.size_in_bits if ifm2 is not None else 0,
        ifm2_format=fmt(ifm2.tensor) if ifm2 is not None else TensorFormat.NHWC,
        ifm2_memory_area=area(ifm2.tensor) if ifm2 is not None else None,
        const_shape=const_shape,
        const_memory_area=const_area if const_shape is not None else None,
        kernel=op.kernel,
    )


def scheduler_op_cycles(arch: Any, op: NpuOp, op_sched: OpSchedule, schedule: Schedule,
                        ofm_depth: int | None = None) -> float:
    """The compute estimate Vela's scheduler uses while buffering weights: constants assumed in fast storage and,
    by default, the op's full OFM depth (even when the op writes only a depth slice of its OFM)."""
    if ofm_depth is None:
        ofm_depth = op.ofm.shape.depth
    query = op_query(arch, op, op_sched, schedule, ofm_depth=ofm_depth, const_area=arch.fast_storage_mem_area,
                     scheduling_areas=True)
    return perf.measure_cycle_cost(arch, op.op_type, op.activation, query).op_cycles


def encoded_weights_for(arch: Any, op: NpuOp, op_sched: OpSchedule) -> wts.EncodedWeights | None:
    """The weight stream the schedule's op reads (encoded for its block depth and depth slices)."""
    if op.weights is None:
        return None
    return wts.encode_op_weights(arch, op, op_sched.block_config.ofm_block.depth, op_sched.depth_slices)


def full_weight_transfer_cycles(arch: Any, op: NpuOp, op_sched: OpSchedule) -> float:
    """DMA time of the op's whole, unsliced weight stream (what Vela compares slack against)."""
    full = wts.encode_op_weights(arch, op, op_sched.block_config.ofm_block.depth, (0, op_sched.ofm_stripe.depth))
    return perf.measure_mem2mem_cycles(arch, arch.permanent_storage_mem_area, arch.fast_storage_mem_area,
                                       full.total_bytes)


def slack_buffering_cycles(arch: Any, op: NpuOp, op_sched: OpSchedule, schedule: Schedule) -> float:
    """NPU time under which the next pass may prefetch its first weights: the compute time of the schedule's
    ``slack_ofm_depth`` when given, else of this pass's last weight slice (or the whole pass when its weights are
    not sliced)."""
    if op_sched.slack_ofm_depth is not None:
        return scheduler_op_cycles(arch, op, op_sched, schedule, op_sched.slack_ofm_depth)
    if op_sched.tail_slack_cycles is not None:
        return op_sched.tail_slack_cycles
    slices = op_sched.depth_slices
    depth = slices[-1] - slices[-2] if len(slices) > 2 else None
    return scheduler_op_cycles(arch, op, op_sched, schedule, depth)


def _lut_transfer(arch: Any, op: NpuOp) -> perf.DmaTransfer | None:
    if op.activation_lut is None:
        return None
    return perf.DmaTransfer(arch.permanent_storage_mem_area, MemArea.Shram,
                            allocation_bytes(op.activation_lut.size_in_bytes))


def _memcpy_transfer(arch: Any, op: NpuOp, schedule: Schedule) -> perf.DmaTransfer | None:
    if op.npu_block_type != NpuBlockType.Dma:
        return None
    src = placement_of(arch, schedule, op.ifm.tensor)
    dst = placement_of(arch, schedule, op.ofm.tensor)
    return perf.DmaTransfer(src.mem_area, dst.mem_area, storage_size(op.ifm.tensor, src.format))


def price_op(arch: Any, op: NpuOp, op_sched: OpSchedule, schedule: Schedule, prev_slack_cycles: float
             ) -> tuple[perf.OpPerformance, float, float]:
    """(estimate, own slack-buffering cycles, full weight transfer cycles) of one pass."""
    buffering = op_sched.weight_buffering
    encoded = encoded_weights_for(arch, op, op_sched)
    stream = None
    full_transfer = 0.0
    const_area = None
    if encoded is not None:
        if buffering.is_buffered:
            # Vela prices the whole-stream DMA only for ops outside cascades (a cascaded op keeps 0).
            if op_sched.cascade is None:
                full_transfer = full_weight_transfer_cycles(arch, op, op_sched)
            kind = perf.WeightBuffering.DOUBLE if buffering.kind == "double" else perf.WeightBuffering.SINGLE
            const_area = arch.fast_storage_mem_area
            stream = pricing_weight_stream(arch, op, encoded, kind, full_transfer)
        else:
            const_area = arch.permanent_storage_mem_area
            stream = pricing_weight_stream(arch, op, encoded, perf.WeightBuffering.NONE)
    query = op_query(arch, op, op_sched, schedule, const_area=const_area)
    slack = slack_buffering_cycles(arch, op, op_sched, schedule)
    result = perf.estimate_full_op_performance(
        arch, op.op_type, op.activation, query,
        weights=stream,
        prev_slack_cycles=prev_slack_cycles,
        slack_buffering_cycles=slack,
        lut=_lut_transfer(arch, op),
        memcpy=_memcpy_transfer(arch, op, schedule),
    )
    if arch.estimator is Estimator.CONTENTION:
        buffered_bytes = encoded.total_bytes if encoded is not None and buffering.is_buffered else 0
        slack = contention_slack(arch, result, slack, buffered_bytes)
    return result, slack, full_transfer


# --------------------------------------------------------------------------------------------------------------
# Whole schedule


def staging_limit(arch: Any) -> int:
    """The fast-storage budget the scheduler works to (Vela's optimisation SRAM limit: the arena cache size)."""
    return int(arch.arena_cache_size)


def evaluate(network_or_subgraph: Any, arch: Any, schedule: Schedule) -> Evaluation:
    """Price every pass of the network (or of one subgraph) under ``schedule``."""
    use = tensor_use(network_or_subgraph)
    costs: list[OpCost] = []
    memories: list[SubgraphMemory] = []
    total_cycles = 0.0
    npu_cycles = 0.0
    access: dict[MemArea, float] = {m: 0.0 for m in perf.ACCESS_AREAS}
    bandwidth: dict[BandwidthKey, float] = {}
    macs = 0
    encoded_total = 0
    original_total = 0
    seen_encodings: set[tuple] = set()
    seen_weights: set[int] = set()
    notes: list[str] = []
    whole = network_memory(network_or_subgraph, arch, schedule, use)
    view = scheduling_view(arch, schedule)
    for sg in subgraphs_of(network_or_subgraph):
        memory = subgraph_memory(sg, arch, schedule, use)
        memories.append(memory)
        seen = memory if view is schedule else subgraph_memory(sg, arch, view, use)
        prev_slack = 0.0
        for op in sg.ops:
            if not schedule.has_op(op.index):
                notes.append(f"op {op.index} ({op.name}) has no schedule entry and was not priced")
                prev_slack = 0.0
                continue
            op_sched = schedule.op(op.index)
            if op_sched.block_config is None:
                notes.append(f"op {op.index} ({op.name}) has no block config and was not priced")
                prev_slack = 0.0
                continue
            result, slack, full_transfer = price_op(arch, op, op_sched, schedule, prev_slack)
            step = memory.op_steps[op.index]
            used = seen.usage[step] if step < len(seen.usage) else 0
            costs.append(OpCost(
                op_index=op.index, name=op.name, subgraph=memory.name, time_index=step,
                npu_cycles=result.npu_cycles, op_cycles=result.op_cycles, total_cycles=result.total_cycles,
                access_cycles=dict(result.access_cycles), bandwidth=dict(result.bandwidth), macs=result.macs,
                sram_used=used, slack_buffering_cycles=slack, full_weight_transfer_cycles=full_transfer,
                network_sram_used=whole.usage[whole.op_steps[op.index]],
            ))
            total_cycles += result.total_cycles
            npu_cycles += result.npu_cycles
            for mem, value in result.access_cycles.items():
                access[mem] = access.get(mem, 0.0) + value
            for key, value in result.bandwidth.items():
                bandwidth[key] = bandwidth.get(key, 0.0) + value
            macs += result.macs
            if op.weights is not None:
                if id(op.weights) not in seen_weights:
                    seen_weights.add(id(op.weights))
                    original_total += int(op.weights.values.size) * int(op.weights.values.itemsize)
                key = (wts.weights_digest(op.weights), op_sched.block_config.ofm_block.depth, op_sched.depth_slices)
                if key not in seen_encodings:
                    seen_encodings.add(key)
                    encoded = encoded_weights_for(arch, op, op_sched)
                    encoded_total += sum(r.weight_bytes for r in encoded.ranges)
            prev_slack = slack
    peak = max((m.peak for m in memories), default=0)
    return Evaluation(
        ops=tuple(costs), memory=tuple(memories), total_cycles=total_cycles, npu_cycles=npu_cycles,
        access_cycles=access, bandwidth=bandwidth, macs=macs, peak_fast_storage=peak,
        staging_limit=staging_limit(arch), encoded_weight_bytes=encoded_total, original_weight_bytes=original_total,
        notes=tuple(notes), network_memory=whole,
    )


# --------------------------------------------------------------------------------------------------------------
# Validity


def _stripe_problems(op: NpuOp, op_sched: OpSchedule) -> Iterable[str]:
    ofm = op.ofm.shape
    stripe = op_sched.ofm_stripe
    label = f"op {op.index} ({op.name})"
    if any(s <= 0 or s > f for s, f in zip(stripe.as_list(), ofm.as_list(), strict=True)):
        yield f"{label}: OFM stripe {stripe} is empty or exceeds the OFM {ofm}"
    if op_sched.cascade is None and stripe != ofm:
        yield f"{label}: OFM stripe {stripe} is partial but the op is in no cascade"
    if stripe == ofm and op_sched.ifm_stripe != op.ifm.shape:
        yield f"{label}: IFM stripe {op_sched.ifm_stripe} does not match the full IFM {op.ifm.shape}"
    if (op.ifm2 is None) != (op_sched.ifm2_stripe is None):
        yield f"{label}: IFM2 stripe {op_sched.ifm2_stripe} does not match the op's IFM2"


def _cascade_problems(sg: Any, schedule: Schedule) -> Iterable[str]:
    """A cascade is a run of consecutive passes, each reading the previous one's OFM; every cascaded pass's IFM
    stripe covers the rows its OFM stripe needs, and the rolling buffer between two passes holds at least the
    consumer's IFM stripe and the producer's OFM stripe."""
    ops = [op for op in sg.ops if schedule.has_op(op.index)]
    rolling = cascade_rolling_buffers(sg, schedule)
    seen: set[Any] = set()
    prev: NpuOp | None = None
    prev_sched: OpSchedule | None = None
    for op in ops:
        op_sched = schedule.op(op.index)
        cascade = op_sched.cascade
        label = f"op {op.index} ({op.name})"
        continues = cascade is not None and prev_sched is not None and prev_sched.cascade == cascade
        if cascade is not None and not continues:
            if cascade in seen:
                yield f"{label}: cascade {cascade} is not a run of consecutive passes"
            seen.add(cascade)
        if cascade is not None:
            need = ifm_stripes(op, op_sched.ofm_stripe)[0]
            stripe = op_sched.ifm_stripe
            if stripe.height < need.height or stripe.width < need.width:
                yield (f"{label}: IFM stripe {stripe} is smaller than the {need.height} rows x {need.width} columns "
                       f"its OFM stripe {op_sched.ofm_stripe} reads")
        if continues and prev is not None and prev_sched is not None:
            if op.ifm.tensor != prev.ofm.tensor:
                yield f"{label}: cascaded after op {prev.index} but does not read its OFM as IFM"
            buffer = rolling.get(op.index)
            stripe = op_sched.ifm_stripe
            if buffer is not None and (buffer.height < max(stripe.height, prev_sched.ofm_stripe.height)
                                       or buffer.width < stripe.width
                                       or buffer.depth < prev_sched.ofm_stripe.depth):
                yield (f"{label}: rolling buffer {buffer} cannot hold its IFM stripe {stripe} and the producer's "
                       f"OFM stripe {prev_sched.ofm_stripe}")
        prev, prev_sched = op, op_sched


def _weight_problems(arch: Any, op: NpuOp, op_sched: OpSchedule) -> Iterable[str]:
    label = f"op {op.index} ({op.name})"
    buffering = op_sched.weight_buffering
    if op.weights is None:
        if buffering.is_buffered or op_sched.encoded_weights is not None:
            yield f"{label}: has no weights but the schedule buffers or encodes some"
        return
    slices = op_sched.depth_slices
    if len(slices) < 2 or slices[0] != 0 or slices[-1] != op_sched.ofm_stripe.depth or any(
            a >= b for a, b in zip(slices, slices[1:], strict=False)):
        yield f"{label}: depth slices {list(slices)} do not rise from 0 to the stripe depth"
        return
    encoded = encoded_weights_for(arch, op, op_sched)
    ref = op_sched.encoded_weights
    if ref is not None and tuple(ref.depth_slices) != tuple(slices):
        yield f"{label}: buffered depth slices {list(slices)} differ from the encoded {list(ref.depth_slices)}"
    elif ref is not None and (ref.total_bytes != encoded.total_bytes
                            or tuple(ref.double_buffer_sizes) != tuple(encoded.double_buffer_sizes)):
        yield f"{label}: recorded encoded weight sizes disagree with the encoder"
    expected = {"none": 0, "single": 1, "double": 2}[buffering.kind]
    if len(buffering.buffer_sizes) != expected:
        yield f"{label}: {buffering.kind} buffering needs {expected} buffers, has {len(buffering.buffer_sizes)}"
    elif buffering.kind == "single" and buffering.buffer_sizes[0] < encoded.double_buffer_sizes[0]:
        yield f"{label}: weight buffer of {buffering.buffer_sizes[0]} bytes is smaller than its slice"
    elif buffering.kind == "double" and any(
            b < e for b, e in zip(buffering.buffer_sizes, encoded.double_buffer_sizes, strict=False)):
        yield f"{label}: weight buffers {list(buffering.buffer_sizes)} are smaller than their slices"
    if buffering.is_buffered and not weights_need_dma(arch, op):
        yield f"{label}: weights are buffered although they need no DMA"


def verify(network: Any, arch: Any, schedule: Schedule, evaluation: Evaluation | None = None,
           limit: int | None = None) -> list[str]:
    """Every way ``schedule`` is invalid for ``network``; empty when it is valid.

    Checked: every pass has its choices; stripes, weight slices and buffers agree with the op; cascades are runs
    of consecutive passes each reading the previous one's OFM, with IFM stripes covering what their OFM stripes
    read and rolling buffers holding both stripes around them; and fast storage (feature maps the schedule puts
    there, rolling and weight buffers) never exceeds ``limit`` (default: the architecture's arena cache size) —
    every subgraph's first step above it is reported.
    """
    problems: list[str] = []
    for sg in subgraphs_of(network):
        for op in sg.ops:
            if not schedule.has_op(op.index):
                problems.append(f"op {op.index} ({op.name}): no schedule entry")
                continue
            op_sched = schedule.op(op.index)
            if op_sched.block_config is None:
                problems.append(f"op {op.index} ({op.name}): no block config")
                continue
            problems.extend(_stripe_problems(op, op_sched))
            problems.extend(_weight_problems(arch, op, op_sched))
            depth = op_sched.slack_ofm_depth
            if depth is not None and not 0 < depth <= op_sched.ofm_stripe.depth:
                problems.append(f"op {op.index} ({op.name}): slack depth {depth} is outside its OFM stripe depth "
                                f"{op_sched.ofm_stripe.depth}")
        problems.extend(_cascade_problems(sg, schedule))
    evaluation = evaluation if evaluation is not None else evaluate(network, arch, schedule)
    budget = staging_limit(arch) if limit is None else int(limit)
    for memory in evaluation.memory:
        over = [t for t, used in enumerate(memory.usage) if used > budget]
        if over:
            t = over[0]
            problems.append(f"subgraph {memory.name}: fast storage use {memory.usage[t]} bytes at step {t} "
                            f"exceeds the limit of {budget} bytes")
    return problems


def per_op_table(evaluation: Evaluation, ops: Sequence[NpuOp] = ()) -> list[dict[str, Any]]:
    """Rows shaped like Vela's per-layer CSV (for reports and tests)."""
    by_index = {op.index: op for op in ops}
    rows = []
    for cost in evaluation.ops:
        op = by_index.get(cost.op_index)
        rows.append({
            "op_index": cost.op_index,
            "name": cost.name,
            "nng_operator": op.op_type if op is not None else "",
            "sram_used": cost.sram_used,
            "op_cycles": cost.total_cycles,
            "npu_cycles": cost.npu_cycles,
            "sram_access_cycles": cost.access_cycles.get(MemArea.Sram, 0.0),
            "dram_access_cycles": cost.access_cycles.get(MemArea.Dram, 0.0),
            "on_chip_flash_access_cycles": cost.access_cycles.get(MemArea.OnChipFlash, 0.0),
            "off_chip_flash_access_cycles": cost.access_cycles.get(MemArea.OffChipFlash, 0.0),
            "macs": cost.macs,
        })
    return rows
