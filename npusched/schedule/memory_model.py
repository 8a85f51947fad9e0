"""Fast-storage use over time: the one memory model of the project.

Built the way Vela's live-range pass builds it: pass ``i`` of a subgraph runs at step ``2 i``, a tensor is live
from the first step that touches it to one step after the last, an elementwise pass may write its OFM over an IFM
it consumes, a pre-buffered weight buffer starts one step early and the buffer that does not hold the last depth
slice of a double-buffered pass ends one step early; the passes of a cascade share one step and hold their IFMs in
rolling buffers. Which passes each feature map spans comes from ``npusched.schedule.memory_layout`` (the layout the
DP and CP-SAT read), and so do the weight buffers' steps. ``subgraph_memory``/``network_memory`` read it off a
``Schedule``; the heuristic feeds it its candidates through ``PassMemory`` records (``pass_memory_walk``), so the
numbers the scheduler decides on are the numbers the evaluator prints."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from npusched.ir import CpuOp, FeatureMap, NpuBlockType, NpuOp, Shape4D, TensorFormat
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.cascades import rolling_buffer_shape
from npusched.schedule.memory_layout import LiveRange, memory_layout, weight_buffer_span
from npusched.schedule.rules import allocation_bytes, rolling_buffer_bytes, storage_size
from npusched.schedule.schedule import OpSchedule, Schedule, TensorPlacement
from npusched.schedule.tensor_use import (
    TensorUse,
    feature_map_label,
    in_fast_storage,
    placement_of,
    subgraphs_of,
    tensor_use,
)
from npusched.target.estimators import PricedArchitecture


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


def elementwise_reuse_source(op: NpuOp, arch: PricedArchitecture, schedule: Schedule,
                             use: TensorUse) -> FeatureMap | None:
    """``reusable_ifm`` with the layouts and memories ``schedule`` gives the tensors."""
    return reusable_ifm(op, use, lambda fm: placement_of(arch, schedule, fm).format,
                        lambda fm: in_fast_storage(arch, placement_of(arch, schedule, fm)))


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
        assert self.start is not None and self.end is not None, "a range is frozen only once marked"
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
            rng = _Range([key], [feature_map_label(fm)], [fm], self.size_of(fm), "feature_map")
            self.by_key[key] = rng
            self.ranges.append(rng)
        return rng

    def mark(self, fm: FeatureMap, time: int) -> None:
        if not fm.is_const and self.in_fast(fm):
            self.range_of(fm).mark(time)

    def fast_bytes(self, fm: FeatureMap) -> int | None:
        """Bytes ``fm`` takes in fast storage, None when it lives elsewhere."""
        return self.size_of(fm) if not fm.is_const and self.in_fast(fm) else None

    def walk(self, passes: Sequence[PassMemory], outputs: Iterable[FeatureMap], time: int
             ) -> tuple[dict[int, int], int]:
        """Mark the passes' live ranges from step ``time`` on; (step of each op index, end step).

        Pass ``i`` runs at step ``time + 2 i`` except that a cascade's passes share its first pass's step; the
        outputs are touched once more after the last pass. Feature maps span the steps of the positions the
        subgraph's ``MemoryLayout`` gives them.
        """
        outputs = tuple(outputs)
        layout = memory_layout([p.op for p in passes], outputs, self.use, self.fast_bytes)
        step_at: list[int] = []
        cascade_step: dict[Any, int] = {}
        current = time
        for p in passes:
            t = cascade_step.setdefault(p.cascade, current) if p.cascade is not None else current
            step_at.append(t)
            if t == current:
                current += 2
        step_at.append(current)  # where the subgraph's outputs are touched last
        for pos, p in enumerate(passes):
            op, t = p.op, step_at[pos]
            if p.cascade is None:
                source = reusable_ifm(op, self.use, self.fmt_of, self.in_fast)
                if source is not None:
                    rng = self.range_of(source)
                    key = self.use.storage_key(op.ofm.tensor)
                    if key not in self.by_key:
                        rng.keys.append(key)
                        rng.labels.append(feature_map_label(op.ofm.tensor))
                        rng.feature_maps.append(op.ofm.tensor)
                        self.by_key[key] = rng
            for access in (op.ifm, op.ifm2, op.ofm):
                if access is None or access.tensor.is_const:
                    continue
                fm = access.tensor
                if access is op.ifm and p.rolling_ifm is not None:
                    # A rolling buffer sits in fast storage whatever memory holds the whole tensor elsewhere;
                    # its size (unpadded, as Vela sizes it) replaces the feature map's.
                    rng = self.range_of(fm)
                    rng.size = rolling_buffer_bytes(p.rolling_ifm, fm.dtype.size_in_bytes)
                    rng.mark(t)
                elif fm in layout.positions and layout.positions[fm][0] == pos:
                    first, last = layout.positions[fm]
                    rng = self.range_of(fm)
                    rng.mark(step_at[first])
                    rng.mark(step_at[last])
            for idx, size in enumerate(p.weight_buffers):
                rng = _Range([("weights", op.index, idx)], [f"{op.name}_weight_buffer{idx + 1}"], [],
                             allocation_bytes(size), "weight_buffer", op.index)
                self.ranges.append(rng)
                starts, ends = weight_buffer_span(idx, len(p.weight_buffers), p.pre_buffered, p.last_buffer)
                rng.mark(t + starts, ends - starts)
        for fm in outputs:
            self.mark(fm, current)
        return {p.op.index: step_at[pos] for pos, p in enumerate(passes)}, current

    def usage(self, end_time: int) -> tuple[tuple[int, ...], tuple[LiveRange, ...]]:
        usage = [0] * (end_time + 2)
        ranges = []
        for rng in self.ranges:
            if rng.start is None or rng.end is None or rng.end < rng.start:
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


def cascade_rolling_buffers(sg: NpuSubgraph, schedule: Schedule) -> dict[int, Shape4D]:
    """The rolling buffer each cascaded pass (after its cascade's first) reads its IFM from, by op index.

    The schedule's ``rolling_buffer`` when given, else Vela's size for it: the consumer's IFM stripe plus one
    producer stripe, in whole consumer stripes, as wide as the wider of the two, depth padded to 16
    (``npusched.schedule.cascades.rolling_buffer_shape``).
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


def _passes(sg: NpuSubgraph, schedule: Schedule) -> list[PassMemory]:
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


def _book(arch: PricedArchitecture, schedule: Schedule, use: TensorUse) -> _FastStorage:
    def in_fast(fm: FeatureMap) -> bool:
        return in_fast_storage(arch, placement_of(arch, schedule, fm))

    def size_of(fm: FeatureMap) -> int:
        return storage_size(fm, placement_of(arch, schedule, fm).format)

    def fmt_of(fm: FeatureMap) -> TensorFormat:
        return placement_of(arch, schedule, fm).format

    return _FastStorage(use, in_fast, size_of, fmt_of)


def scheduling_view(arch: PricedArchitecture, schedule: Schedule) -> Schedule:
    """The schedule as Vela's scheduler sees it while choosing buffers: every feature map still in feature-map
    storage (moving OFMs into fast storage happens afterwards). Identical to ``schedule`` when nothing moved."""
    area = arch.feature_map_storage_mem_area
    if all(place.mem_area == area for _, place in schedule.tensors):
        return schedule
    return replace(schedule, tensors=tuple((fm, TensorPlacement(area, place.format)) for fm, place in schedule.tensors))


def subgraph_memory(sg: NpuSubgraph, arch: PricedArchitecture, schedule: Schedule,
                    use: TensorUse | None = None) -> SubgraphMemory:
    """Fast-storage use at every step of one NPU subgraph (Vela's per-subgraph memory snapshot): feature maps the
    schedule places in fast storage, the rolling buffers of cascades and the weight buffers. Applied to
    ``scheduling_view(schedule)`` it is what Vela's verbose schedule prints as "SRAM Used"."""
    use = use if use is not None else tensor_use(sg)
    book = _book(arch, schedule, use)
    steps, end = book.walk(_passes(sg, schedule), sg.outputs, 0)
    usage, ranges = book.usage(end)
    return SubgraphMemory(sg.name, usage, ranges, steps)


def network_memory(network: Network | NpuSubgraph, arch: PricedArchitecture, schedule: Schedule,
                   use: TensorUse | None = None) -> SubgraphMemory:
    """Fast-storage use over the whole inference (the snapshot behind Vela's per-layer "SRAM Usage").

    The network's inputs are live from the start-up step, every CPU operator takes two steps with its tensors
    live at the first, each NPU subgraph runs where it falls in execution order, and variables (LSTM and SVDF
    states) live throughout.
    """
    use = use if use is not None else tensor_use(network)
    subgraphs = subgraphs_of(network)
    sg_of_op = {op.index: sg for sg in subgraphs for op in sg.ops}
    ops: tuple[NpuOp | CpuOp, ...] = network.ops
    cpu_ops = [op for op in ops if isinstance(op, CpuOp)]  # every NPU op is in a subgraph
    produced = set(use.producers).union(*(op.outputs for op in cpu_ops))
    cpu_variables = {fm for op in cpu_ops for fm in op.variables}
    book = _book(arch, schedule, use)
    steps: dict[int, int] = {}
    time = 0
    read = [fm for sg in subgraphs for fm in sg.inputs]
    for fm in read + [fm for op in cpu_ops for fm in op.inputs]:  # start-up: graph inputs (tensors no op produces)
        if fm not in produced and fm not in cpu_variables and fm.name not in use.variables:
            book.mark(fm, time)
    time += 2
    done: set[int] = set()
    for op in ops:
        if isinstance(op, CpuOp):
            for fm in op.inputs + op.outputs:
                book.mark(fm, time)
            time += 2
            continue
        sg = sg_of_op[op.index]
        if id(sg) in done:
            continue
        done.add(id(sg))
        for fm in sg.inputs:
            book.mark(fm, time)
        sg_steps, time = book.walk(_passes(sg, schedule), sg.outputs, time)
        steps.update(sg_steps)
    for rng_key, rng in book.by_key.items():
        if rng_key in cpu_variables or (isinstance(rng_key, tuple) and rng_key[:1] == ("variable",)):
            rng.mark(0, time + 1)
    usage, ranges = book.usage(time)
    return SubgraphMemory(network.name, usage, ranges, steps)
