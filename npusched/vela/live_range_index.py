"""Vela's live-range lookup made constant-time for the length of one compilation.

Vela's ``LiveRangeGraph.get_or_create_range`` finds a tensor's live range by scanning every range made so far for
one with an equal equivalence id: quadratic in the tensors. On a 700-pass network that scan is about a third of
the compile (Vela scans three times: memory snapshot, allocation, allocation check). The patched lookup keeps an
index from equivalence id to the range of the first tensor inserted with it, which is the range the scan finds,
so every range, address and output file is the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_INDEX = "_npusched_range_of_equivalence_id"
_INDEXED = "_npusched_indexed_tensors"


def _index(graph: Any) -> dict[Any, Any]:
    """The graph's index, brought up to date with every tensor inserted since (by any code path)."""
    index: dict[Any, Any] = graph.__dict__.setdefault(_INDEX, {})
    indexed = graph.__dict__.get(_INDEXED, 0)
    if indexed != len(graph.ranges):  # tensors were added without the patched methods: index them in order
        for tens, rng in list(graph.ranges.items())[indexed:]:
            index.setdefault(tens.equivalence_id, rng)
        graph.__dict__[_INDEXED] = len(graph.ranges)
    return index


def _insert(graph: Any, tens: Any, rng: Any) -> None:
    index = _index(graph)
    graph.ranges[tens] = rng
    index.setdefault(tens.equivalence_id, rng)
    graph.__dict__[_INDEXED] = len(graph.ranges)


@contextlib.contextmanager
def indexed_live_ranges() -> Iterator[None]:
    """Vela's ``get_or_create_range`` and ``fuse_ranges`` with the index, restored afterwards."""
    from ethosu.vela.live_range import LiveRange, LiveRangeGraph
    from ethosu.vela.tensor import Tensor

    original_get, original_fuse = LiveRangeGraph.get_or_create_range, LiveRangeGraph.fuse_ranges

    def get_or_create_range(self: Any, tens: Any, alignment: int = Tensor.AllocationQuantum) -> Any:
        rng = _index(self).get(tens.equivalence_id)
        if rng is not None:
            rng.set_alignment(alignment)
            return rng
        rng = LiveRange(tens, alignment)
        _insert(self, tens, rng)
        self.lrs.append(rng)
        return rng

    def fuse_ranges(self: Any, in_tens: Any, out_tens: Any) -> Any:
        rng = get_or_create_range(self, in_tens)
        assert out_tens not in self.ranges, out_tens
        rng.add_tensor(out_tens)
        _insert(self, out_tens, rng)
        return rng

    LiveRangeGraph.get_or_create_range, LiveRangeGraph.fuse_ranges = get_or_create_range, fuse_ranges
    try:
        yield
    finally:
        LiveRangeGraph.get_or_create_range, LiveRangeGraph.fuse_ranges = original_get, original_fuse
