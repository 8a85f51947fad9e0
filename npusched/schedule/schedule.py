"""A schedule: every choice a solver makes for a network, as one immutable value.

A solver never edits the pass graph. It returns a ``Schedule`` that says, per NPU pass (keyed by the pass's op
index), which block config and stripes it runs with, how its weights are streamed into fast storage, and, per
feature map, which memory holds it and in which layout. The evaluator prices a ``Schedule`` and checks it;
nothing else judges one, so two solvers can always be compared on the same terms.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from npusched.ir import FeatureMap, MemArea, Shape4D, TensorFormat
from npusched.target.block_config import BlockConfig
from npusched.target.performance import BufferKind


@dataclass(frozen=True)
class EncodedWeightsRef:
    """The weight stream an op reads: encoded for one block depth and one list of OFM depth slices.

    Only the sizes the cost model and the memory model need are kept, so a schedule stays small and printable.
    ``first_slice_bytes_per_core`` are the encoded bytes of slice 0 per core (the first weight DMA);
    ``weight_bytes`` counts compressed weights without scales (Vela's "NPU encoded weights" total).
    """

    block_depth: int
    depth_slices: tuple[int, ...]
    total_bytes: int
    double_buffer_sizes: tuple[int, int]
    first_slice_bytes_per_core: tuple[int, ...]
    weight_bytes: int

    @classmethod
    def of(cls, encoded: Any, block_depth: int) -> EncodedWeightsRef:
        """The sizes of a ``npusched.target.weights.EncodedWeights`` encoded for ``block_depth``."""
        return cls(
            block_depth=block_depth,
            depth_slices=tuple(encoded.depth_slices),
            total_bytes=encoded.total_bytes,
            double_buffer_sizes=tuple(encoded.double_buffer_sizes),
            first_slice_bytes_per_core=tuple(r.total_bytes for r in encoded.ranges if r.slice_index == 0),
            weight_bytes=sum(r.weight_bytes for r in encoded.ranges),
        )

    @property
    def max_range_bytes(self) -> int:
        return max(self.double_buffer_sizes)


@dataclass(frozen=True)
class WeightBuffering:
    """How an op's weights reach the NPU.

    ``kind`` "none" reads them straight from permanent storage; "single" copies them whole into one fast-storage
    buffer before the op runs; "double" streams ``depth_slices`` through two alternating buffers while the op
    runs. ``pre_buffered`` means the first buffer is filled while the previous op still runs.
    """

    kind: BufferKind = BufferKind.NONE
    depth_slices: tuple[int, ...] = ()
    buffer_sizes: tuple[int, ...] = ()
    pre_buffered: bool = False

    def __post_init__(self) -> None:
        # A kind read from a schedule document arrives as its name.
        object.__setattr__(self, "kind", BufferKind(self.kind))

    @property
    def is_buffered(self) -> bool:
        return self.kind is not BufferKind.NONE

    @property
    def last_buffer_index(self) -> int:
        """Which buffer holds the final slice: Vela counts the depth-slice boundaries, not the slices."""
        if len(self.buffer_sizes) < 2:
            return 0
        return len(self.depth_slices) % len(self.buffer_sizes)


NO_BUFFERING = WeightBuffering()


@dataclass(frozen=True)
class TensorPlacement:
    """Where a feature map lives and how it is laid out there."""

    mem_area: MemArea
    format: TensorFormat = TensorFormat.NHWC


@dataclass(frozen=True)
class OpSchedule:
    """The choices for one NPU pass.

    ``block_config`` is a ``npusched.target.block_config.BlockConfig`` (typed loosely so this module does not
    depend on the block-config search). ``cascade`` names the cascade the op belongs to (Vela uses the index of
    the cascade's last op), None when it runs on its own. ``rolling_buffer`` is the shape of the buffer that holds
    this op's IFM inside a cascade (None for the first op of a cascade and for ops outside one).
    ``slack_ofm_depth`` is the OFM depth whose compute time the next op may hide its first weight DMA under
    (None: the last depth slice, or the whole op when its weights are not sliced). It keeps a quirk of Vela's
    weight buffering: when Vela slices an op's weights but the slices then do not fit, it reads the full weights
    in place yet still gives the next op only the planned last slice's time. The evaluator prices that depth
    itself. ``tail_slack_cycles`` is the older form of the same thing as a cycle count, honoured only when
    ``slack_ofm_depth`` is None; prefer the depth, which the judge can price and check.
    """

    op_index: int
    block_config: BlockConfig | None  # None only where no block fits (the op is then reported, not priced)
    ofm_stripe: Shape4D
    ifm_stripe: Shape4D
    ifm2_stripe: Shape4D | None = None
    cascade: int | None = None
    weight_buffering: WeightBuffering = NO_BUFFERING
    encoded_weights: EncodedWeightsRef | None = None
    rolling_buffer: Shape4D | None = None
    tail_slack_cycles: float | None = None
    slack_ofm_depth: int | None = None

    @property
    def depth_slices(self) -> tuple[int, ...]:
        """OFM depth slices the weights are encoded for ([0, depth] when not split)."""
        if self.weight_buffering.is_buffered and self.weight_buffering.depth_slices:
            return self.weight_buffering.depth_slices
        if self.encoded_weights is not None:
            return self.encoded_weights.depth_slices
        return (0, self.ofm_stripe.depth)


@dataclass(frozen=True)
class Schedule:
    """A complete schedule of a network (or of one NPU subgraph).

    ``ops`` is ordered by op index; ``tensors`` gives the placement of every feature map the schedule touches
    (a feature map not listed lives in the architecture's feature-map storage, NHWC). ``label`` names the
    strategy ("MAX_BUFFERED", ...) the way Vela names its schedules; ``status`` is the solver's verdict
    ("fits", "over_limit", "optimal", ...).
    """

    ops: tuple[OpSchedule, ...]
    tensors: tuple[tuple[FeatureMap, TensorPlacement], ...] = ()
    label: str = ""
    status: str = ""
    solver: str = ""
    notes: tuple[str, ...] = field(default=())

    @cached_property
    def _op_map(self) -> dict[int, OpSchedule]:
        return {op.op_index: op for op in self.ops}

    @cached_property
    def _tensor_map(self) -> dict[FeatureMap, TensorPlacement]:
        return dict(self.tensors)

    def op(self, index: int) -> OpSchedule:
        """The choices for the op with this index (KeyError when the schedule has none)."""
        return self._op_map[index]

    def has_op(self, index: int) -> bool:
        return index in self._op_map

    def placement(self, fm: FeatureMap, default: TensorPlacement | None = None) -> TensorPlacement | None:
        return self._tensor_map.get(fm, default)

    def name_for(self, subgraph_name: str) -> str:
        """Vela's schedule name for one subgraph, e.g. ``main_split_1_MAX_BUFFERED``."""
        return f"{subgraph_name}_{self.label}" if self.label else subgraph_name

    def with_ops(self, ops: Iterable[OpSchedule]) -> Schedule:
        """A copy whose op choices are replaced by ``ops`` (others kept)."""
        merged = dict(self._op_map)
        for op in ops:
            merged[op.op_index] = op
        return replace(self, ops=tuple(merged[i] for i in sorted(merged)))

    def with_status(self, status: str, *notes: str) -> Schedule:
        return replace(self, status=status, notes=self.notes + tuple(notes))
