"""Addresses in fast storage: every buffer the evaluator's walk finds live there gets an offset.

The memory model's peak (the most bytes live at any step) is only a lower bound on the address space a schedule
needs: buffers keep their address for their whole life, so the free bytes at a step may be scattered in holes
too small for the buffer that starts there. Vela allocates addresses after scheduling and a schedule at its
limit may not fit (``Address offset out of range``). So the addresses are part of the schedule here: this
module places the live ranges of the whole inference (``Evaluation.network_memory``, the ranges Vela's
allocator sees: feature maps, cascades' rolling buffers, weight buffers; tensors sharing a buffer are one range)
and the allocation's size, its highest end address, is the figure that must fit the limit.

The allocator works as Vela's does in spirit (offsets aligned to ``ALLOCATION_QUANTUM``; two ranges conflict
when they share any step, ends inclusive; a range is placed at the lowest address free over its whole life) and
searches harder: several greedy orders, then a hill climb that moves the ranges around the highest one, and
for small problems CP-SAT (``NoOverlap2D``) seeded by the best order, stopping as soon as the peak is reached
(no allocation is smaller). It is a pure function of the ranges: a fixed seed and a fixed amount of work, never
the clock.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.memory_layout import LiveRange
from npusched.schedule.rules import ALLOCATION_QUANTUM
from npusched.schedule.schedule import Schedule
from npusched.target.estimators import PricedArchitecture

if TYPE_CHECKING:  # the evaluation holds its allocation, so this module is below it
    from npusched.schedule.pass_costs import Evaluation

# Work the hill climbs may spend: neighbour visits over all their re-placements (deterministic, not timed), in
# climbs of at most CLIMB_WORK_PER_START from each of the CLIMB_ORDERS best greedy orders in turn.
CLIMB_WORK = 2_000_000
CLIMB_WORK_PER_START = 250_000
CLIMB_ORDERS = 2
# Re-placements without a smaller allocation after which the climb gives up, and after which it widens its moves.
CLIMB_PATIENCE = 600
CLIMB_STUCK = 50
# CP-SAT refines allocations of at most this many ranges that the climb left above the peak.
CPSAT_MAX_RANGES = 80
CPSAT_SECONDS = 1.0


@dataclass(frozen=True)
class PlacedBuffer:
    """One fast-storage buffer with its address: ``range`` (steps inclusive, size) at ``offset_bytes``."""

    range: LiveRange
    offset_bytes: int

    @property
    def end_bytes(self) -> int:
        return self.offset_bytes + self.range.size


@dataclass(frozen=True)
class Allocation:
    """Addresses of every fast-storage buffer of one inference.

    ``size_bytes`` is the highest end address (what the fast storage must hold); ``live_peak_bytes`` the most
    bytes live at any one step (the memory model's peak, a lower bound on ``size_bytes``); ``method`` which
    stage found it ("greedy", "hill-climb", "cp-sat").
    """

    buffers: tuple[PlacedBuffer, ...]
    size_bytes: int
    live_peak_bytes: int
    method: str = "greedy"

    @property
    def overhead_bytes(self) -> int:
        """Bytes lost to fragmentation: the allocation's size above the peak."""
        return self.size_bytes - self.live_peak_bytes


def live_peak(ranges: Sequence[LiveRange]) -> int:
    """The most bytes of ``ranges`` live at one step (ends inclusive)."""
    events: dict[int, int] = {}
    for r in ranges:
        events[r.start] = events.get(r.start, 0) + r.size
        events[r.end + 1] = events.get(r.end + 1, 0) - r.size
    peak = live = 0
    for step in sorted(events):
        live += events[step]
        peak = max(peak, live)
    return peak


def overlapping_buffers(buffers: Sequence[PlacedBuffer]) -> list[tuple[PlacedBuffer, PlacedBuffer]]:
    """Every pair of buffers live at a common step whose addresses overlap (empty for a valid allocation)."""
    order = sorted(buffers, key=lambda b: (b.range.start, b.range.end))
    clashes = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if b.range.start > a.range.end:
                break
            if a.range.size and b.range.size and a.offset_bytes < b.end_bytes and b.offset_bytes < a.end_bytes:
                clashes.append((a, b))
    return clashes


def allocate(network: Network | NpuSubgraph, arch: PricedArchitecture, schedule: Schedule,
             evaluation: Evaluation, target_bytes: int = 0) -> Allocation:
    """Addresses for every fast-storage buffer of ``schedule`` over the whole inference (one arena, as Vela
    allocates its fast-storage memory for the network from the root subgraph). The search stops once the
    allocation is no larger than ``target_bytes`` (default: only at the peak, or when its work is done)."""
    if not target_bytes:
        return evaluation.allocation
    return allocate_ranges(fast_storage_ranges(evaluation), target_bytes=target_bytes)


def fast_storage_ranges(evaluation: Evaluation) -> tuple[LiveRange, ...]:
    """The buffers an allocator places: the whole inference's live ranges (per subgraph when there is none)."""
    memory = evaluation.network_memory
    if memory is not None:
        return memory.live_ranges
    return tuple(r for m in evaluation.memory for r in m.live_ranges)


def allocate_ranges(ranges: Sequence[LiveRange], alignment_bytes: int = ALLOCATION_QUANTUM,
                    seed: int = 1, target_bytes: int = 0) -> Allocation:
    """Offsets (multiples of ``alignment_bytes``) for ``ranges`` such that no two live at a common step overlap,
    the highest end address as low as the search gets it (the peak when it can, or ``target_bytes`` when that is
    larger; a target below the peak cannot be met, so then the first greedy order is the answer)."""
    ranges = tuple(ranges)
    if not ranges:
        return Allocation((), 0, 0)
    offsets, method = _offsets(tuple((r.start, r.end, r.size) for r in ranges), alignment_bytes, seed, target_bytes)
    buffers = tuple(PlacedBuffer(r, o) for r, o in zip(ranges, offsets, strict=True))
    return Allocation(buffers, max(b.end_bytes for b in buffers), live_peak(ranges), method)


@functools.lru_cache(maxsize=16)
def _offsets(spans: tuple[tuple[int, int, int], ...], alignment_bytes: int, seed: int,
             target_bytes: int) -> tuple[tuple[int, ...], str]:
    """``allocate_ranges``' offsets and method for ranges of these (start, end, size): its search sees nothing
    else, so a run asking again of one schedule (its report, and Vela's compile of it, each a second on a
    500-pass network) gets the answer once."""
    ranges = tuple(LiveRange((), start, end, size) for start, end, size in spans)
    peak = live_peak(ranges)
    # The search stops at ``enough``: the peak (nothing is smaller), a reachable larger target, or at once.
    enough = peak if target_bytes <= 0 else target_bytes if target_bytes >= peak else 1 << 62
    packer = _Packer(ranges, alignment_bytes)
    best_order: list[int] = []
    best_size = -1
    orders, sizes = packer.greedy_orders(), []
    for order in orders:
        size = packer.place(order)
        sizes.append(size)
        if best_size < 0 or size < best_size:
            best_order, best_size = order, size
        if best_size <= enough:
            break
    method = "greedy"
    # Climbs from the best orders by turns, each with a share of the work: where one gets stuck another start
    # often does not (a single long climb is at the mercy of its start).
    starts = sorted(range(len(sizes)), key=lambda k: (sizes[k], k))[:CLIMB_ORDERS]
    spent, attempt = 0, 0
    while best_size > enough and spent < CLIMB_WORK:
        k = starts[attempt % len(starts)]
        order = orders[k]
        climbed_order, climbed_size = packer.climb(order, packer.place(order), enough, random.Random(seed + attempt),
                                                   min(CLIMB_WORK_PER_START, CLIMB_WORK - spent))
        spent += max(packer.work, 1)
        attempt += 1
        if climbed_size < best_size:
            best_order, best_size, method = climbed_order, climbed_size, "hill-climb"
    packer.place(best_order)
    offsets = list(packer.offsets)
    if best_size > enough and len(ranges) <= CPSAT_MAX_RANGES:
        improved = _cpsat_offsets(ranges, offsets, best_size, peak, alignment_bytes, seed)
        if improved is not None:
            offsets, method = improved, "cp-sat"
    return tuple(offsets), method


class _Packer:
    """First-fit placement of ranges in a given order, and the searches over orders built on it."""

    def __init__(self, ranges: tuple[LiveRange, ...], alignment_bytes: int) -> None:
        self.ranges = ranges
        self.sizes = [r.size for r in ranges]
        self.alignment = max(alignment_bytes, 1)
        self.neighbours = _neighbours(ranges)
        self.offsets = [-1] * len(ranges)
        self.blocker = [-1] * len(ranges)  # the neighbour whose end decided each range's offset
        self.work = 0

    def greedy_orders(self) -> list[list[int]]:
        """Orders worth trying first: the most crowded, longest ranges first (the urgency order Vela starts from),
        largest first, longest-lived first and by start step."""
        ranges, n = self.ranges, len(self.ranges)
        urgency = _crowding(ranges)
        keys = [
            lambda i: (-urgency[i], -(ranges[i].end - ranges[i].start), ranges[i].start, -ranges[i].size, i),
            lambda i: (-ranges[i].size, -(ranges[i].end - ranges[i].start), ranges[i].start, i),
            lambda i: (-(ranges[i].end - ranges[i].start) * ranges[i].size, ranges[i].start, i),
            lambda i: (-urgency[i], -ranges[i].size, ranges[i].start, i),
            lambda i: (ranges[i].start, -ranges[i].end, -ranges[i].size, i),
        ]
        return [sorted(range(n), key=key) for key in keys]

    def place(self, order: Sequence[int], give_up_above: int = -1, first: int = 0) -> int:
        """Place ``order[first:]`` (earlier ones keep their offsets) each at its lowest free address; the highest
        end address, or a value above ``give_up_above`` as soon as one is known (when that is not negative)."""
        offsets, sizes, alignment = self.offsets, self.sizes, self.alignment
        for i in order[first:]:
            offsets[i] = -1
        size = max((offsets[i] + sizes[i] for i in order[:first]), default=0)
        for i in order[first:]:
            need = sizes[i]
            taken = sorted((offsets[j], j) for j in self.neighbours[i] if offsets[j] >= 0)
            self.work += len(taken) + 1
            address, blocker = 0, -1
            for low, j in taken:
                if low >= address + need:
                    break
                high = low + sizes[j]
                if high > address and need:
                    address = -(-high // alignment) * alignment
                    blocker = j
            offsets[i], self.blocker[i] = address, blocker
            size = max(size, address + need)
            if 0 <= give_up_above < size:
                return size
        return size

    def climb(self, order: list[int], size: int, peak: int, rng: random.Random,
              work_budget: int = CLIMB_WORK) -> tuple[list[int], int]:
        """Reorder the ranges that decide the highest one's address (swap two, or move one before another) while
        that does not make the allocation larger; once stuck, widen the choice to the neighbours of the deciders
        not live with the highest range and make two moves at a time. The best order found and its size."""
        best_order, best_size = list(order), size
        position = {i: p for p, i in enumerate(best_order)}
        self.place(best_order)
        stale = 0
        self.work = 0
        while best_size > peak and stale < CLIMB_PATIENCE and self.work < work_budget:
            self.work += 4 * len(self.ranges)  # finding the top, copying the order, the positions
            top = max(range(len(self.ranges)), key=lambda i: (self.offsets[i] + self.sizes[i], -position[i]))
            chain = self._deciders(top)
            stuck = stale > CLIMB_STUCK
            if stuck:  # widen: the neighbours of the deciders that are not live with the top range
                chain = list(dict.fromkeys(chain + [j for i in chain if not self._live_with(i, top)
                                                    for j in self.neighbours[i]]))
            if len(chain) < 2:
                break
            trial = list(best_order)
            first = len(trial)
            # The deciders not live with the top range leave the holes below it: picked more often.
            far = [i for i in chain if not self._live_with(i, top)]
            for move in range(2 if stuck else 1):
                a = far[rng.randrange(len(far))] if far and move == 0 and rng.random() < 0.3 else \
                    chain[rng.randrange(len(chain))]
                b = chain[rng.randrange(len(chain))]
                if a == b:
                    continue
                pa, pb = sorted((position[a], position[b]))
                trial[pa], trial[pb] = trial[pb], trial[pa]
                first = min(first, pa)
            if first == len(trial):
                stale += 1
                continue
            trial_size = self.place(trial, best_size, first)
            if trial_size <= best_size:
                stale = stale + 1 if trial_size == best_size else 0
                best_order, best_size = trial, trial_size
                position = {i: p for p, i in enumerate(best_order)}
            else:
                stale += 1
                self.place(best_order, -1, first)
        return best_order, best_size

    def _live_with(self, i: int, j: int) -> bool:
        return self.ranges[i].start <= self.ranges[j].end and self.ranges[j].start <= self.ranges[i].end

    def _deciders(self, top: int) -> list[int]:
        """The highest range, its neighbours and the chains of ranges that pushed each of them up."""
        seen: dict[int, None] = {}
        for start in (top, *self.neighbours[top]):
            i = start
            while i >= 0 and i not in seen:
                seen[i] = None
                i = self.blocker[i]
        return list(seen)


def _neighbours(ranges: Sequence[LiveRange]) -> list[list[int]]:
    """For each range, the others live at a common step (ends inclusive), by a sweep over start steps."""
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i].start, ranges[i].end))
    result: list[list[int]] = [[] for _ in ranges]
    active: list[int] = []
    for i in order:
        start = ranges[i].start
        active = [j for j in active if ranges[j].end >= start]
        for j in active:
            result[i].append(j)
            result[j].append(i)
        active.append(i)
    return result


def _crowding(ranges: Sequence[LiveRange]) -> list[int]:
    """For each range, the most bytes live at any step of its life."""
    steps = max(r.end for r in ranges) + 2
    delta = [0] * steps
    for r in ranges:
        delta[r.start] += r.size
        delta[r.end + 1] -= r.size
    live, level = 0, []
    for d in delta:
        live += d
        level.append(live)
    # A sparse table would be faster; lives are short, so the plain maximum is cheap enough.
    return [max(level[r.start:r.end + 1]) for r in ranges]


def _cpsat_offsets(ranges: Sequence[LiveRange], hint: Sequence[int],
                   size: int, peak: int, alignment_bytes: int, seed: int) -> list[int] | None:
    """Offsets from CP-SAT (rectangles of life x size in a strip, no two overlapping) below ``size``, seeded with
    ``hint``; None when it finds nothing smaller in its fixed amount of work."""
    from ortools.sat.python import cp_model

    quantum = max(alignment_bytes, 1)
    model = cp_model.CpModel()
    top = size // quantum + 1
    slots = []
    for r, offset in zip(ranges, hint, strict=True):
        length = -(-r.size // quantum)
        slot = model.new_int_var(0, max(top - length, 0), "")
        model.add_hint(slot, offset // quantum)
        slots.append((slot, length))
    height = model.new_int_var(-(-peak // quantum), top, "height")
    lives, places = [], []
    for r, (slot, length) in zip(ranges, slots, strict=True):
        model.add(slot * quantum + r.size <= height * quantum)
        if length:
            lives.append(model.new_fixed_size_interval_var(r.start, r.end + 1 - r.start, ""))
            places.append(model.new_fixed_size_interval_var(slot, length, ""))
    model.add_no_overlap_2d(lives, places)
    model.add(height * quantum < size)
    model.minimize(height)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = CPSAT_SECONDS
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [solver.value(slot) * quantum for slot, _ in slots]
