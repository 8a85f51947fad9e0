"""Where each feature map of one subgraph is live, in pass positions: the layout every memory reckoning reads.

The evaluator's walk, the DP and CP-SAT each need to know, per buffer, from which pass to which pass it holds
fast storage and how big it is. If each worked that out on its own, a schedule one of them keeps under the limit
could fail the evaluator's check. So it is worked out here, once per subgraph, from ``TensorUse``:

* position ``p`` is the subgraph's ``p``-th pass; a buffer is live from the first pass that reads or writes one
  of its feature maps to the last, and a subgraph output to ``len(ops)`` (past the last pass, where the
  evaluator touches it once more);
* feature maps sharing storage (``TensorUse.storage_key``: an LSTM state and the OFM written into it) are one
  buffer, sized by the member touched first, as the evaluator books it;
* a pass's weight buffers are live at its own step, the pre-buffered one from the step before, and of a double
  buffer only the one holding the last depth slice into the step after (``weight_buffer_bytes``).

Which feature maps take fast storage, and how many bytes, is the caller's to say (``size_of``): the evaluator and
the DP follow a schedule's placements, CP-SAT lays out every map and decides residency itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from npusched.ir import FeatureMap, NpuOp
from npusched.schedule.rules import allocation_bytes
from npusched.schedule.schedule import WeightBuffering
from npusched.schedule.tensor_use import TensorUse, feature_map_label


@dataclass(frozen=True)
class LiveRange:
    """One allocation in fast storage: the tensors sharing it (names, and the feature maps themselves), the span
    it is live over (inclusive; pass positions in a ``MemoryLayout``, execution steps in a ``SubgraphMemory``)
    and its size."""

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
class MemoryLayout:
    """The feature-map buffers of one subgraph in pass positions.

    ``ranges`` holds one ``LiveRange`` per storage key; ``positions`` the first and last position of each feature
    map on its own; ``grouped`` the feature maps that share a buffer with another (their key is not themselves);
    ``touched`` the storage keys each position's pass reads or writes.
    """

    ranges: Mapping[Any, LiveRange]
    positions: Mapping[FeatureMap, tuple[int, int]]
    grouped: frozenset[FeatureMap]
    touched: tuple[frozenset[Any], ...]

    def held_ranges(self, start: int, end: int) -> list[LiveRange]:
        """The buffers live before position ``start`` and after ``end`` that no pass of ``start..end`` touches:
        what such a run still has to share fast storage with, besides its own operands."""
        own = frozenset().union(*self.touched[start:end + 1])
        return [r for key, r in self.ranges.items() if r.start < start and r.end > end and key not in own]

    def held_across(self, start: int, end: int) -> int:
        """Bytes of ``held_ranges``."""
        return sum(r.size for r in self.held_ranges(start, end))


def memory_layout(ops: Sequence[NpuOp], outputs: Iterable[FeatureMap], use: TensorUse,
                  size_of: Callable[[FeatureMap], int | None]) -> MemoryLayout:
    """The layout of the feature maps of a subgraph's passes ``ops`` (in execution order) and its ``outputs``;
    ``size_of`` gives a map's bytes in fast storage, or None for a map that is not there (left out)."""
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    members: dict[Any, list[FeatureMap]] = {}
    sizes: dict[Any, int] = {}
    positions: dict[FeatureMap, list[int]] = {}
    touched: list[frozenset[Any]] = []
    elsewhere: set[FeatureMap] = set()
    outputs = set(outputs)
    end = len(ops)
    for pos, op in enumerate(ops):
        keys: set[Any] = set()
        for access in (op.ifm, op.ifm2, op.ofm):
            if access is None or access.tensor.is_const or access.tensor in elsewhere:
                continue
            fm = access.tensor
            if fm not in positions:
                size = size_of(fm)
                if size is None:
                    elsewhere.add(fm)
                    continue
                key = use.storage_key(fm)
                if key not in members:
                    members[key], sizes[key], first[key] = [], size, pos
                members[key].append(fm)
                positions[fm] = [pos, pos]
            positions[fm][1] = end if fm in outputs else pos
            key = use.storage_key(fm)
            last[key] = max(last.get(key, pos), positions[fm][1])
            keys.add(key)
        touched.append(frozenset(keys))
    ranges = {key: LiveRange(tuple(feature_map_label(fm) for fm in fms), first[key], last[key], sizes[key],
                             feature_maps=tuple(fms))
              for key, fms in members.items()}
    grouped = frozenset(fm for key, fms in members.items() for fm in fms if key is not fm)
    return MemoryLayout(ranges, {fm: (a, b) for fm, (a, b) in positions.items()}, grouped, tuple(touched))


@dataclass(frozen=True)
class WeightBufferBytes:
    """A pass's weight buffers split by step: at the step before it, at its own step and at the step after."""

    before: int
    at: int
    after: int


def weight_buffer_span(index: int, count: int, pre_buffered: bool, last_index: int) -> tuple[int, int]:
    """First and last step of weight buffer ``index`` of a pass's ``count``, relative to the pass's step: the
    pre-buffered first buffer fills during the step before; a buffer stays into the step after unless another
    one of a double buffer holds the last depth slice (``last_index``)."""
    starts = -1 if index == 0 and pre_buffered else 0
    ends = 0 if count > 1 and index != last_index else 1
    return starts, ends


def weight_buffer_bytes(buffering: WeightBuffering) -> WeightBufferBytes:
    """Bytes of a pass's weight buffers at the steps around it, as ``weight_buffer_span`` lays them."""
    before = at = after = 0
    sizes = buffering.buffer_sizes
    for index, size in enumerate(sizes):
        size = allocation_bytes(size)
        starts, ends = weight_buffer_span(index, len(sizes), buffering.pre_buffered, buffering.last_buffer_index)
        at += size
        before += size if starts < 0 else 0
        after += size if ends > 0 else 0
    return WeightBufferBytes(before, at, after)

