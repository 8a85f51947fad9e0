"""The least peak fast storage any schedule Vela's cascade rules allow can have: a floor no scheduler goes below.

CP-SAT proves its least peak over its own candidate space; this floor holds over every schedule whose cascades
obey Vela's rules (``npusched.schedule.rules.may_cascade``), whatever its stripes, block configs or weight buffering,
so where the two meet the smallest schedule is proven smallest outright. It assumes every feature map lives in
fast storage (Shared_Sram, or SRAM-only memory modes), the execution order and tensor layouts fixed as Vela fixes
them before scheduling, and the memory model of ``memory_model``.

At the step where pass ``p`` runs, alone or in a cascade of passes ``a..b``, fast storage holds at least:

* alone: its operands whole (less the OFM written over its IFM, where the memory model allows it);
* in a cascade: the first pass's IFM and the last pass's OFM whole, and between each two passes a rolling buffer
  of no fewer rows than ``rolling_buffer_shape`` gives for a one-row OFM stripe of the consumer (twice the IFM
  rows that row reads), as wide as the producer's OFM and as deep as its depth padded to 16;
* every buffer live from before ``a`` to after ``b`` that the run does not touch: cascades are contiguous and
  do not overlap, so such a map is whole.

Weight buffers and the odd steps between passes are left out (they only add). ``floor(p)`` is the least of
these over every run containing ``p``, and the subgraph's floor the largest ``floor(p)``.

``held_operands`` also lets a MUL whose second operand is a feature map (a swish or squeeze-excite gate) join a
cascade, that operand held whole, as CP-SAT's candidate space does (``cascades.elementwise_cascadable``) and
Vela's rules do not: the floor of npusched's own schedules. ``joins`` (with ``held_operands``) adds what CP-SAT's
candidate space has under ``--optimise Size``: residual ADDs and SUBs held the same way, and maps read again later
in a cascade (``rules.may_cascade`` with later readers): counted with their one-row rolling buffers, a floor still;
and rolling buffers sized in Vela's pull order (``rules.pulled_buffer_height``), half Vela's for one-row stripes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from npusched.ir import FeatureMap, NpuOp, TensorFormat, round_up
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.memory_layout import MemoryLayout, memory_layout
from npusched.schedule.memory_model import network_memory, reusable_ifm
from npusched.schedule.rules import (
    BRICK_DEPTH,
    cascade_reach,
    ifm_stripes,
    pulled_buffer_height,
    rows_past_the_kernel,
    storage_size,
)
from npusched.schedule.tensor_use import TensorUse, feature_map_label, subgraphs_of, tensor_use
from npusched.solvers.heuristic import sched_ops_of
from npusched.solvers.max_schedule import max_schedule, vela_tensor_placements
from npusched.target.estimators import PricedArchitecture


@dataclass(frozen=True)
class PeakFloor:
    """The floor of one subgraph (or network): where it is reached and what makes it up there.

    ``position`` is the pass whose every legal run needs ``floor_bytes``; ``run`` the first and last position of
    the run that needs least there (equal for a lone pass); ``parts`` that run's memory, (what, bytes).
    """

    floor_bytes: int
    subgraph: str
    position: int
    op_name: str
    run: tuple[int, int]
    parts: tuple[tuple[str, int], ...]

    def describe(self) -> str:
        first, last = self.run
        run = "alone" if first == last else f"in a cascade of passes {first}..{last}"
        parts = ", ".join(f"{what} {size:,}" for what, size in self.parts)
        return (f"{self.floor_bytes:,} bytes at pass {self.position} ({self.op_name}) of {self.subgraph}, "
                f"least {run}: {parts}")


def minimal_rolling_bytes(producer: NpuOp, consumer: NpuOp, pulled: bool = False) -> int:
    """The smallest rolling buffer Vela's sizing allows between two cascaded passes (a one-row consumer
    stripe and at least one producer row: twice the rows that one row reads); ``pulled``: the size in Vela's pull
    order, npusched's with joins (``rules.pulled_buffer_height``: the rows that one row reads)."""
    ofm = consumer.ofm.shape
    rows = ifm_stripes(consumer, ofm.with_hw(1, ofm.width))[0].height
    produced = producer.ofm.shape
    height = pulled_buffer_height(1, rows, produced.height, rows_past_the_kernel(consumer)) if pulled else 2 * rows
    return height * produced.width * round_up(produced.depth, BRICK_DEPTH) * producer.ofm.tensor.dtype.size_in_bytes


def subgraph_floor(sg: NpuSubgraph, use: TensorUse, formats: Mapping[FeatureMap, TensorFormat],
                   live_throughout: frozenset[Any] = frozenset(), held_operands: bool = False,
                   joins: bool = False) -> PeakFloor:
    """The floor of one subgraph whose feature maps all live in fast storage, laid out in ``formats``; the
    buffers of ``live_throughout`` (storage keys) are live at every step of it, whatever it touches."""
    def size(fm: FeatureMap) -> int:
        return storage_size(fm, formats[fm])

    ops = sg.ops
    layout = memory_layout(ops, sg.outputs, use, size)
    if live_throughout:
        ranges = {key: replace(r, start=-1, end=len(ops) + 1) if key in live_throughout else r
                  for key, r in layout.ranges.items()}
        layout = replace(layout, ranges=ranges)
    sched_ops = sched_ops_of(sg, use, formats, held_operands=held_operands, joins=joins)
    links = [False] + [cascade_reach(sched_ops, i - 1, joins) is not None for i in range(1, len(ops))]
    floors = [_least_at(pos, ops, links, layout, use, formats, size, joins) for pos in range(len(ops))]
    pos = max(range(len(ops)), key=lambda p: floors[p][0])
    total, run, parts = floors[pos]
    return PeakFloor(total, sg.name, pos, ops[pos].name, run, parts)


def _least_at(pos: int, ops: tuple[NpuOp, ...], links: list[bool], layout: MemoryLayout, use: TensorUse,
              formats: Mapping[FeatureMap, TensorFormat], size: Callable[[FeatureMap], int], pulled: bool
              ) -> tuple[int, tuple[int, int], tuple[tuple[str, int], ...]]:
    """(bytes, run, parts) of the run containing ``pos`` that needs the least fast storage (``pulled``: rolling
    buffers sized in Vela's pull order, as npusched's own with joins)."""
    lo, hi = pos, pos  # the longest chain of passes that may cascade through ``pos``
    while lo > 0 and links[lo]:
        lo -= 1
    while hi + 1 < len(ops) and links[hi + 1]:
        hi += 1
    options = [_alone(pos, ops[pos], layout, use, formats, size)]
    options += [_cascade(first, last, ops, layout, size, pulled)
                for first in range(lo, pos + 1) for last in range(max(pos, first + 1), hi + 1)]
    return min(options, key=lambda o: (o[0], o[1]))


def _held(layout: MemoryLayout, first: int, last: int) -> list[tuple[str, int]]:
    return [(" + ".join(r.tensors), r.size) for r in layout.held_ranges(first, last)]


def _alone(pos: int, op: NpuOp, layout: MemoryLayout, use: TensorUse, formats: Mapping[FeatureMap, TensorFormat],
           size: Callable[[FeatureMap], int]) -> tuple[int, tuple[int, int], tuple[tuple[str, int], ...]]:
    parts: dict[object, tuple[str, int]] = {}
    for access in (op.ifm, op.ifm2, op.ofm):
        if access is not None and not access.tensor.is_const:
            key = use.storage_key(access.tensor)
            parts[key] = (feature_map_label(access.tensor), layout.ranges[key].size)
    listed = list(parts.values()) + _held(layout, pos, pos)
    if reusable_ifm(op, use, lambda fm: formats[fm]) is not None:
        listed.append(("OFM written over its IFM", -size(op.ofm.tensor)))
    return sum(b for _, b in listed), (pos, pos), tuple(listed)


def _cascade(first: int, last: int, ops: tuple[NpuOp, ...], layout: MemoryLayout, size: Callable[[FeatureMap], int],
             pulled: bool) -> tuple[int, tuple[int, int], tuple[tuple[str, int], ...]]:
    listed = [(feature_map_label(ops[first].ifm.tensor), size(ops[first].ifm.tensor)),
              (feature_map_label(ops[last].ofm.tensor), size(ops[last].ofm.tensor))]
    listed += [(f"rolling buffer after pass {i}", minimal_rolling_bytes(ops[i], ops[i + 1], pulled))
               for i in range(first, last)]
    # A second operand that is a feature map from outside the run (held operands only) is held whole.
    produced = {op.ofm.tensor for op in ops[first:last + 1]}
    listed += [(feature_map_label(op.ifm2.tensor), size(op.ifm2.tensor)) for op in ops[first:last + 1]
               if op.ifm2 is not None and not op.ifm2.tensor.is_const and op.ifm2.tensor not in produced]
    listed += _held(layout, first, last)
    return sum(b for _, b in listed), (first, last), tuple(listed)


@dataclass(frozen=True)
class NetworkFloor:
    """The floor of the NPU subgraphs' peak (``npu``) and of the whole inference's (``whole_bytes``: also what
    CPU operators and variables keep in fast storage whatever the NPU schedule)."""

    npu: PeakFloor
    whole_bytes: int


def network_floor(network: Network, arch: PricedArchitecture, held_operands: bool = False,
                  joins: bool = False) -> NetworkFloor:
    """The floors of ``network`` under ``arch``, whose feature-map storage must be its fast storage."""
    if arch.feature_map_storage_mem_area != arch.fast_storage_mem_area:
        raise ValueError("the floor assumes every feature map in fast storage (Shared_Sram or SRAM only)")
    use = tensor_use(network)
    formats = {fm: place.format for fm, place in vela_tensor_placements(network, arch, use)}
    subgraphs = [sg for sg in subgraphs_of(network) if sg.ops]
    npu = max((subgraph_floor(sg, use, formats, held_operands=held_operands, joins=joins) for sg in subgraphs),
              key=lambda f: f.floor_bytes)
    # What the rest of the inference holds does not depend on the NPU schedule: take it from any schedule. At a
    # CPU operator's (even) step no weight or rolling buffer is live; the buffers live from before a subgraph's
    # first step to after its last (variables, maps the CPU side passes around it) are whole at all its steps.
    memory = network_memory(network, arch, max_schedule(network, arch), use)
    npu_steps = set(memory.op_steps.values())
    whole = max((used for step, used in enumerate(memory.usage) if step % 2 == 0 and step not in npu_steps),
                default=0)
    for sg in subgraphs:
        steps = [memory.op_steps[op.index] for op in sg.ops]
        spanning = [r for r in memory.live_ranges
                    if r.kind == "feature_map" and r.start < min(steps) and r.end > max(steps)]
        inside = {access.tensor for op in sg.ops for access in (op.ifm, op.ifm2, op.ofm) if access is not None}
        touched = frozenset(use.storage_key(fm) for r in spanning for fm in r.feature_maps if fm in inside)
        around = sum(r.size for r in spanning if not inside.intersection(r.feature_maps))
        whole = max(whole, subgraph_floor(sg, use, formats, touched, held_operands, joins).floor_bytes + around)
    return NetworkFloor(npu, whole)
