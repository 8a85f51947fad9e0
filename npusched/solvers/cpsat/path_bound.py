"""A lower bound over the candidate space on every network: shortest paths over the execution order.

A schedule of one subgraph is a path through its positions: each chosen candidate covers ``start..end`` and the
next starts at ``end + 1``. The CP-SAT model (``npusched.solvers.cpsat.model``) couples the choices three ways,
and this module follows each:

* the slack a candidate leaves changes the next one's price: the state of a path at a boundary is that slack,
  so the dynamic programme keeps, per boundary and slack, the cheapest path that ends there;
* fast storage at a candidate's step and at the odd step after it (where the next candidate's pre-buffered
  weights arrive). With shared fast storage every feature map is there unless a chosen cascade holds it in
  rolling buffers, so a step's use depends on the candidate alone, or on it and the next: the programme checks
  both exactly, and its shortest path is the optimum of the candidate space (``exact``);
* with dedicated fast storage, which maps are resident couples candidates far apart (a map's producer, its
  consumers, and every step it is live over). The programme counts each candidate's steps with no map resident
  (a relaxation: residency only adds), and the per-position limits of the model are relaxed with Lagrangian
  multipliers: a resident map costs its bytes times the multipliers of the positions it is live over, shared
  among the passes whose price it changes (so a solution that keeps a map resident pays it in full, and the
  relaxation never more). The multipliers follow subgradient steps towards a known schedule's cost (Polyak's
  rule); every dual value is a lower bound, and the best is kept.

The objective is the model's: the evaluator's prices scaled by ``SCALE`` and rounded per pass; under
``Estimator.BOTH`` with a cap, each model's excess over it penalised, which two more multipliers relax (an excess
``max(0, part - cap)`` is at least ``alpha x (part - cap)`` for every ``alpha`` up to the penalty).

``least_peak`` is the bottleneck version: the least fast storage a schedule of the candidate space needs, exact in
both memory modes (keeping no map resident never needs more).
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.ir import FeatureMap
from npusched.schedule.pricing import Slack
from npusched.schedule.schedule import OpSchedule, Schedule, TensorPlacement
from npusched.solvers.cpsat.model import SCALE, NetworkFacts, RegionData
from npusched.target.estimators import OVER_CAP_PENALTY, Estimator

# Subgradient steps at most, and the step factor's start and floor (halved after STALL steps without progress).
MAX_ITERATIONS = 300
STEP_FACTOR = 2.0
MIN_STEP_FACTOR = 1e-3
STALL = 8

INFINITE = math.inf


@dataclass(frozen=True)
class PathBound:
    """A lower bound on the scaled objective over the candidate space, and a solution of the relaxation: per
    region, the candidates (indices into its ``RegionData.candidates``) of its path. ``exact``: shared fast
    storage, where every path is a schedule of the candidate space (the one with the least objective found) and,
    without an over-cap penalty, the bound is its optimum; ``None`` paths: no schedule of the candidate space
    fits."""

    scaled: float
    exact: bool
    paths: tuple[tuple[int, ...], ...] | None
    iterations: int
    seconds: float
    timed_out: bool = False  # the deadline, not the iterations' own stopping rules, ended the steps

    @property
    def feasible(self) -> bool:
        return self.paths is not None


@dataclass
class _Region:
    """One region's data as the programme reads it (candidates that may run, ordered by start)."""

    data: RegionData
    order: list[int]  # candidate indices, by start position
    at_load: dict[int, int]  # bytes at the candidate's step, no map resident
    after_load: dict[int, int]  # bytes at the odd step after it, before the next candidate's pre-buffer
    # Price rows: candidate, slack group, scaled price; and the maps each row keeps resident.
    row_candidate: np.ndarray
    row_group: np.ndarray
    row_price: np.ndarray
    row_legacy: np.ndarray  # the legacy model's part of the price (Estimator.BOTH)
    row_maps: list[tuple[int, ...]]
    group_of: dict[int, dict[Slack, int]]  # candidate -> slack -> its table's group
    # Lagrangian terms (dedicated fast storage only): per candidate, (position, family, bytes) of its own memory.
    own: dict[int, list[tuple[int, int, int]]]
    fixed: np.ndarray  # [family, position]: bytes of maps whose placement no candidate changes
    shares: dict[tuple[int, int], float]  # (candidate, map) -> its share of the map's residency


class _Maps:
    """The movable maps of every region, numbered: bytes, live positions and region."""

    def __init__(self) -> None:
        self.index: dict[tuple[int, FeatureMap], int] = {}
        self.size: list[int] = []
        self.live: list[tuple[int, int, int]] = []  # (region, first, last position)

    def add(self, region: int, fm: FeatureMap, size: int, live: tuple[int, int]) -> int:
        key = (region, fm)
        if key not in self.index:
            self.index[key] = len(self.size)
            self.size.append(size)
            self.live.append((region, *live))
        return self.index[key]


def _prepare(net: NetworkFacts, datas: Sequence[RegionData], maps: _Maps) -> list[_Region]:
    return [_prepare_region(net, data, number, maps) for number, data in enumerate(datas)]


def _fixed_bytes(net: NetworkFacts, data: RegionData, key: object) -> int:
    """Bytes a live range holds in fast storage whatever is chosen (movable maps: none; rolling maps are taken
    off by the candidate that holds them)."""
    layout = net.layout(data.region.sg_index)
    if not isinstance(key, FeatureMap):
        return layout.ranges[key].size if net.shared else 0
    if key in data.movable:
        return 0
    if net.shared:
        return net.size(key)
    place = data.kept.get(key) or net.base.get(key)
    return net.size(key) if key not in data.decided and place is not None and place.mem_area == net.fast else 0


def _prepare_region(net: NetworkFacts, data: RegionData, number: int, maps: _Maps) -> _Region:
    lo, hi = data.positions.start, data.positions.stop - 1
    n = hi - lo + 1
    # Bytes of fixed ranges overlapping lo..b: ranges starting by b, less those ending before a.
    starts_by = np.zeros(n + 1, dtype=np.int64)
    ends_before = np.zeros(n + 1, dtype=np.int64)
    fixed_at = np.zeros(n, dtype=np.int64)
    for key, (a, b) in data.live.items():
        size = _fixed_bytes(net, data, key)
        if size:
            a, b = max(a, lo), min(b, hi)
            starts_by[a - lo + 1] += size
            ends_before[b - lo + 1] += size
            fixed_at[a - lo:b - lo + 1] += size
    starts_by = np.cumsum(starts_by)
    ends_before = np.cumsum(ends_before)

    def in_reach(a: int, b: int) -> int:
        return int(starts_by[b - lo + 1] - ends_before[a - lo])

    movable_index = {fm: maps.add(number, fm, net.size(fm), data.live[fm]) for fm in data.movable}
    touching: dict[FeatureMap, list[int]] = {}
    for pos in data.positions:
        op = net.subgraphs[data.region.sg_index].ops[pos]
        for access in (op.ifm, op.ifm2, op.ofm):
            if access is not None and access.tensor in movable_index:
                touching.setdefault(access.tensor, []).append(pos)
    order = sorted((k for k in range(len(data.candidates)) if k not in data.excluded),
                   key=lambda k: (data.candidates[k].start, k))
    at_load: dict[int, int] = {}
    after_load: dict[int, int] = {}
    own: dict[int, list[tuple[int, int, int]]] = {}
    shares: dict[tuple[int, int], float] = {}
    group_of: dict[int, dict[Slack, int]] = {}
    row_candidate, row_group, row_price, row_legacy, row_maps = [], [], [], [], []
    for k in order:
        c = data.candidates[k]
        reach = in_reach(c.start, c.end)
        if net.shared:
            reach -= sum(net.size(fm) for fm in c.internal if fm in data.live)
        saved = c.reuse[2] if c.reuse is not None and (net.shared or (c.reuse[0] in data.movable
                                                                       and c.reuse[1] in data.movable)) else 0
        # Dedicated: the saving needs both maps resident, whose bytes the resident terms count (never fewer).
        at_load[k] = reach + c.mem_at - (saved if net.shared else 0)
        after_load[k] = reach + c.mem_after - (saved if net.shared else 0)
        if not net.shared:
            terms = [(c.start, 0, c.mem_at - saved), (c.end, 1, c.mem_after - saved)]
            terms += [(pos, 0, c.mem_at) for pos in range(c.start + 1, c.end + 1) if c.mem_at]
            if c.mem_before and c.start > lo:
                terms.append((c.start - 1, 1, c.mem_before))
            own[k] = [(pos - lo, family, size) for pos, family, size in terms if size]
        table = data.tables[k]
        group_of[k] = {s: g for g, members in enumerate(table.groups) for s in members}
        for fm in table.movable:
            inside = sum(1 for pos in touching[fm] if c.start <= pos <= c.end)
            shares[k, movable_index[fm]] = inside / len(touching[fm])
        for (combo, group), (scaled, _, legacy) in table.rows.items():
            kept = tuple(movable_index[fm] for bit, fm in zip(combo, table.movable, strict=True) if bit)
            row_candidate.append(k)
            row_group.append(group)
            row_price.append(scaled)
            row_legacy.append(legacy)
            row_maps.append(kept)
    fixed = np.vstack([fixed_at, fixed_at]).astype(float)
    return _Region(data, order, at_load, after_load, np.array(row_candidate, dtype=np.int64),
                   np.array(row_group, dtype=np.int64), np.array(row_price, dtype=float),
                   np.array(row_legacy, dtype=float), row_maps, group_of, own,
                   fixed, shares)


@dataclass
class _Solved:
    """One region's shortest path under given multipliers: its cost, its candidates and, per candidate, the
    table row chosen (for the subgradient)."""

    cost: float
    path: tuple[int, ...] | None
    rows: dict[int, int]


def _shortest_path(region: _Region, limit: int, candidate_group_cost: dict[tuple[int, int], tuple[float, int]],
                   own_cost: dict[int, float]) -> _Solved:
    """The cheapest exact cover of the region's positions by consecutive candidates whose steps fit ``limit``:
    ``candidate_group_cost[k, group]`` is candidate k's cheapest row of that slack group (cost, row), ``own_cost``
    what its own memory costs under the multipliers."""
    data = region.data
    lo, hi = data.positions.start, data.positions.stop - 1
    # Per boundary position and slack left there: predecessors sorted by the bytes at their odd step, with the
    # running least cost (a candidate with pre-buffered weights may follow only those that leave room).
    arrivals: dict[tuple[int, Slack], list[tuple[int, float, int]]] = {}
    incoming = data.slack_classes[lo][0]
    arrivals[lo, incoming] = [(0, 0.0, -1)]
    ready: dict[tuple[int, Slack], tuple[list[int], list[float], list[int]]] = {}
    best: dict[int, tuple[float, int, int]] = {}  # k -> (cost to its end, predecessor, row)

    def lookup(pos: int, slack: Slack) -> tuple[list[int], list[float], list[int]] | None:
        key = (pos, slack)
        if key not in ready:
            entries = arrivals.get(key)
            if not entries:
                return None
            entries.sort()
            loads, costs, preds = [], [], []
            running, who = INFINITE, -1
            for load, cost, pred in entries:
                if cost < running:
                    running, who = cost, pred
                loads.append(load)
                costs.append(running)
                preds.append(who)
            ready[key] = (loads, costs, preds)
        return ready[key]

    for k in region.order:
        c = data.candidates[k]
        if region.at_load[k] > limit or region.after_load[k] > limit:
            continue
        room = limit - c.mem_before
        chosen: tuple[float, int, int] | None = None
        for slack in data.slack_classes[c.start]:
            found = ready.get((c.start, slack))  # the lists already sorted, else sorted now
            if found is None:
                found = lookup(c.start, slack)
                if found is None:
                    continue
            loads, costs, preds = found
            i = bisect.bisect_right(loads, room) - 1
            if i < 0 or costs[i] == INFINITE:
                continue
            price, row = candidate_group_cost[k, region.group_of[k][slack]]
            total = costs[i] + price
            if chosen is None or total < chosen[0]:
                chosen = (total, preds[i], row)
        if chosen is None:
            continue
        total = chosen[0] + own_cost.get(k, 0.0)
        best[k] = (total, chosen[1], chosen[2])
        arrivals.setdefault((c.end + 1, data.slack_out[k]), []).append((region.after_load[k], total, k))
    ends = [(best[k][0], k) for k in best if data.candidates[k].end == hi]
    if not ends:
        return _Solved(INFINITE, None, {})
    cost, last = min(ends)
    path, rows = [], {}
    while last >= 0:
        path.append(last)
        rows[last] = best[last][2]
        last = best[last][1]
    return _Solved(cost, tuple(reversed(path)), rows)


def _group_costs(region: _Region, map_cost: np.ndarray, alpha: np.ndarray) -> dict[tuple[int, int], tuple[float, int]]:
    """Per (candidate, slack group): its cheapest row when each resident map costs ``map_cost`` per share and each
    model's part ``alpha`` more (legacy, default)."""
    costs = (1 + alpha[1]) * region.row_price + (alpha[0] - alpha[1]) * region.row_legacy
    if map_cost.any():
        for r, kept in enumerate(region.row_maps):
            if kept:
                k = int(region.row_candidate[r])
                costs[r] += sum(region.shares[k, m] * map_cost[m] for m in kept)
    out: dict[tuple[int, int], tuple[float, int]] = {}
    for r in range(costs.size):
        key = (int(region.row_candidate[r]), int(region.row_group[r]))
        if key not in out or costs[r] < out[key][0]:
            out[key] = (float(costs[r]), r)
    return out


def path_bound(net: NetworkFacts, datas: Sequence[RegionData], limit: int, upper_scaled: float | None = None,
               deadline: float | None = None, max_iterations: int = MAX_ITERATIONS) -> PathBound:
    """The lower bound (see the module docstring) over the candidate space of ``datas`` (whole subgraphs) within
    ``limit`` bytes, on the objective: under ``Estimator.BOTH`` with a cap, the over-cap penalty too (each
    model's excess ``max(0, part - cap)`` is at least ``alpha x (part - cap)`` for any ``alpha`` in
    [0, OVER_CAP_PENALTY]: two more multipliers). ``upper_scaled`` is a known schedule's scaled objective (the
    multipliers step towards it); without it, or with shared fast storage and no cap, one programme is solved.
    Stops at ``deadline`` or after ``max_iterations`` subgradient steps (deterministic when the deadline does
    not bind). With shared fast storage every path is a schedule: the one with the least objective is kept."""
    started = time.monotonic()
    maps = _Maps()
    regions = _prepare(net, datas, maps)
    sizes = np.array(maps.size, dtype=float)
    multipliers = [np.zeros((2, len(r.data.positions))) for r in regions]
    penalised = net.arch.estimator is Estimator.BOTH and net.arch.blend_cap > 0
    cap = round(net.arch.blend_cap * SCALE)
    alpha = np.zeros(2)  # legacy part, default part
    memory_dual = not net.shared and bool(maps.size)
    dual = (memory_dual or penalised) and upper_scaled is not None
    best_bound = -INFINITE
    best_paths: tuple[tuple[int, ...], ...] | None = None
    best_objective = INFINITE
    factor, stall = STEP_FACTOR, 0
    iterations = 0
    timed_out = False
    while True:
        iterations += 1
        map_cost = np.zeros(len(sizes))
        if memory_dual:
            for m, (ri, a, b) in enumerate(maps.live):
                lo = regions[ri].data.positions.start
                map_cost[m] = sizes[m] * multipliers[ri][:, a - lo:b - lo + 1].sum()
        total = -float(alpha.sum()) * cap
        solved = []
        for region, lam in zip(regions, multipliers, strict=True):
            own_cost = {k: sum(lam[family, pos] * size for pos, family, size in terms)
                        for k, terms in region.own.items()} if memory_dual else {}
            result = _shortest_path(region, limit, _group_costs(region, map_cost, alpha), own_cost)
            solved.append(result)
            total += result.cost + float((lam * (region.fixed - limit)).sum())
        if any(s.path is None for s in solved):
            return PathBound(INFINITE, net.shared, None, iterations, time.monotonic() - started)
        cycles, legacy = _path_parts(regions, solved)
        objective = cycles + (OVER_CAP_PENALTY * (max(0.0, legacy - cap) + max(0.0, cycles - legacy - cap))
                              if penalised else 0.0)
        if best_paths is None or (net.shared and objective < best_objective):
            best_paths, best_objective = tuple(s.path for s in solved if s.path is not None), objective
        if total > best_bound + 1e-9:
            best_bound, stall = total, 0
            if not net.shared:
                best_paths = tuple(s.path for s in solved if s.path is not None)
        else:
            stall += 1
            if stall >= STALL:
                factor, stall = factor / 2, 0
        timed_out = deadline is not None and time.monotonic() > deadline
        if not dual or iterations >= max_iterations or factor < MIN_STEP_FACTOR or timed_out:
            break
        assert upper_scaled is not None
        if total >= upper_scaled:
            break
        # Each group of multipliers steps by Polyak's rule on its own norm (bytes and cycles differ in scale).
        room = factor * (upper_scaled - total)
        if memory_dual:
            gradients = _subgradients(regions, solved, maps, limit)
            norm = sum(float((g * g).sum()) for g in gradients)
            if norm > 0:
                for lam, g in zip(multipliers, gradients, strict=True):
                    np.maximum(lam + room / norm * g, 0.0, out=lam)
        if penalised:
            excess = np.array([legacy - cap, cycles - legacy - cap])
            norm = float((excess * excess).sum())
            if norm > 0:
                np.clip(alpha + room / norm * excess, 0.0, OVER_CAP_PENALTY, out=alpha)
    return PathBound(best_bound, net.shared, best_paths, iterations, time.monotonic() - started,
                     timed_out and dual and iterations < max_iterations and factor >= MIN_STEP_FACTOR)


def _path_parts(regions: list[_Region], solved: list[_Solved]) -> tuple[float, float]:
    """The scaled cycles of the chosen rows, and their legacy-model part (``Estimator.BOTH``)."""
    cycles = legacy = 0.0
    for region, result in zip(regions, solved, strict=True):
        for row in result.rows.values():
            cycles += region.row_price[row]
            legacy += region.row_legacy[row]
    return cycles, legacy


def _subgradients(regions: list[_Region], solved: list[_Solved], maps: _Maps, limit: int) -> list[np.ndarray]:
    """Per region, each per-position limit's excess in the relaxation's solution: fixed maps, the candidates' own
    memory and the shares of the maps they keep resident, less the limit."""
    gradients = [region.fixed - limit for region in regions]
    for ri, (region, result) in enumerate(zip(regions, solved, strict=True)):
        lo = region.data.positions.start
        g = gradients[ri]
        for k in result.path or ():
            for pos, family, size in region.own.get(k, ()):
                g[family, pos] += size
            for m in region.row_maps[result.rows[k]]:
                _, a, b = maps.live[m]
                g[:, a - lo:b - lo + 1] += maps.size[m] * region.shares[k, m]
    return gradients


def least_peak(net: NetworkFacts, datas: Sequence[RegionData]) -> int:
    """The least fast storage any schedule of the candidate space needs (bytes): per region, the path whose
    largest step is smallest, no map kept resident."""
    return max((_bottleneck(region) for region in _prepare(net, datas, _Maps())), default=0)


def _bottleneck(region: _Region) -> int:
    data = region.data
    lo, hi = data.positions.start, data.positions.stop - 1
    # Per boundary: predecessors (bytes at their odd step, the largest step of the path so far).
    arrivals: dict[int, list[tuple[int, int]]] = {lo: [(0, 0)]}
    widest: dict[int, int] = {}
    for k in region.order:
        c = data.candidates[k]
        options = [max(path_peak, load + c.mem_before) for load, path_peak in arrivals.get(c.start, ())]
        if not options:
            continue
        widest[k] = max(min(options), region.at_load[k])
        arrivals.setdefault(c.end + 1, []).append((region.after_load[k], widest[k]))
    ends = [max(peak, region.after_load[k]) for k, peak in widest.items() if data.candidates[k].end == hi]
    return min(ends) if ends else 0


def resident_maps(net: NetworkFacts, datas: Sequence[RegionData], paths: Sequence[Sequence[int]],
                  limit: int) -> frozenset[FeatureMap]:
    """Dedicated fast storage: the maps a path keeps resident, so that the relaxation's path becomes a schedule
    (repaired to fit): greedily, most cycles saved per byte first (each map priced with the others in their
    default memory), each taken only where every step it is live over still fits ``limit``."""
    resident: set[FeatureMap] = set()
    for number, (data, path) in enumerate(zip(datas, paths, strict=True)):
        region = _prepare_region(net, data, number, _Maps())
        held = {fm for k in path for fm in data.candidates[k].internal}
        at = {k: region.at_load[k] for k in path}
        after = {k: region.after_load[k] + (data.candidates[path[i + 1]].mem_before if i + 1 < len(path) else 0)
                 for i, k in enumerate(path)}
        group = {}
        for i, k in enumerate(path):
            slack = data.slack_out[path[i - 1]] if i else data.slack_classes[data.positions.start][0]
            group[k] = region.group_of[k][slack]
        # Each map's saving summed over the path in its order (a map is movable in few of its candidates).
        saved: dict[FeatureMap, float] = {}
        for k in path:
            for fm in data.tables[k].movable:
                saved[fm] = saved.get(fm, 0) + _saved_cycles(data, k, group[k], fm)
        gains = []
        for fm in data.movable - held:
            gain = saved.get(fm, 0)
            if gain > 0:
                gains.append((-gain / net.size(fm), fm.name or "", data.live[fm][0], fm))
        steps = _PathSteps(data, path)
        for _, _, _, fm in sorted(gains, key=lambda g: g[:3]):
            size = net.size(fm)
            over = steps.over(*data.live[fm])
            if all(at[k] + size <= limit and after[k] + size <= limit for k in over):
                resident.add(fm)
                for k in over:
                    at[k] += size
                    after[k] += size
    return frozenset(resident)


class _PathSteps:
    """A path's candidates by the positions they cover: those over a range found by bisection (a path's candidates
    follow each other), not by a scan of the whole path for every map (seconds on a path of 1,800 passes)."""

    def __init__(self, data: RegionData, path: Sequence[int]) -> None:
        self.path = list(path)
        self.starts = [data.candidates[k].start for k in path]
        self.ends = [data.candidates[k].end for k in path]
        self.ordered = all(end < start for end, start in zip(self.ends, self.starts[1:], strict=False))
        self.data = data

    def over(self, a: int, b: int) -> list[int]:
        """The path's candidates whose positions meet [a, b], in path order."""
        if not self.ordered:
            return [k for k in self.path if self.data.candidates[k].start <= b and self.data.candidates[k].end >= a]
        first = bisect.bisect_left(self.ends, a)
        last = bisect.bisect_right(self.starts, b)
        return self.path[first:last]


def _saved_cycles(data: RegionData, k: int, group: int, fm: FeatureMap) -> float:
    """What candidate k's price (slack group ``group``) drops by when ``fm`` alone of its maps is resident."""
    table = data.tables[k]
    off = tuple(0 for _ in table.movable)
    on = tuple(int(m == fm) for m in table.movable)
    return table.rows[off, group][0] - table.rows[on, group][0]


def path_schedule(net: NetworkFacts, datas: Sequence[RegionData], paths: Sequence[Sequence[int]],
                  resident: frozenset[FeatureMap] = frozenset()) -> Schedule:
    """The schedule a path of every region makes: in fast storage the maps its cascades hold in rolling buffers
    (as ``extract_schedule`` places them) and ``resident``, the others in their default memory."""
    ops: list[OpSchedule] = []
    places = dict(net.base)
    for data, path in zip(datas, paths, strict=True):
        held: set[FeatureMap] = set(resident)
        for k in path:
            ops.extend(data.candidates[k].ops)
            held.update(data.candidates[k].internal)
        for fm in data.decided:
            if fm in net.base:
                area = net.fast if fm in held else net.base[fm].mem_area
                places[fm] = TensorPlacement(area, net.base[fm].format)
    return Schedule(ops=tuple(sorted(ops, key=lambda o: o.op_index)), tensors=tuple(places.items()), label="CPSAT",
                    solver="cpsat")
