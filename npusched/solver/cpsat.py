"""The CP-SAT scheduler: cascades, stripes, block configs, weight buffering and fast-storage residency, jointly.

The model (built in ``build_model``, solved in ``solve_cpsat``), per NPU subgraph of passes 0..n-1:

* ``use[c]``: candidate ``c`` (``npusched.solver.cpsat_candidates``) runs its passes ``start..end``; every pass is
  covered by exactly one chosen candidate (an exact cover of the execution order).
* ``resident[F]``: feature map F is held whole in fast storage. Only with dedicated fast storage (feature maps
  default to DRAM) and only for maps produced and consumed inside the subgraph; with shared fast storage every
  feature map is there anyway. A map inside a chosen cascade lives in its rolling buffer, never whole.
* ``price[c, placement, slack]``: which row of candidate c's price table applies: the placements of its boundary
  feature maps (linked to ``resident``) and the slack the previous candidate leaves for prefetching weights
  (linked to which candidate ends just before c). Each row is the evaluator's own price, so the objective is the
  evaluator's total cycles, scaled by ``SCALE`` and rounded per pass.
* ``after_slack[c, s]``: the candidate before c leaves slack s (only where c's price depends on it); per boundary
  these form a transportation problem with the candidates ending there, which keeps the LP relaxation tight.
* Memory: for every candidate, at its step and at the odd step after it (where the next candidate's
  pre-buffered weights appear), resident feature maps live at that step + its rolling and weight buffers - the
  OFM written over its IFM (elementwise) <= the fast-storage limit. Steps are laid out as the evaluator lays
  them (a feature map is live from its producer's step to its last consumer's step + 1; maps sharing a buffer,
  such as LSTM states, as one range). The same limits are also stated per pass, summed over the candidates that
  could cover it, without enforcement literals (implied for integer choices, stronger in the LP), with clique
  cuts on maps larger than half (a third, a quarter) of the limit.

Everything the evaluator prices is in the tables, so ``evaluate(schedule).total_cycles`` equals the objective:
exactly as a float (the solver reports the evaluator's total of the schedule it extracts) and, scaled, term for
term (the CP-SAT objective is the sum of the evaluator's per-pass prices times ``SCALE``, each rounded).
The solver runs with full linearisation (``linearization_level`` 2): with it every corpus model x golden
configuration that has a schedule is solved to proven optimality within 30 s on two workers.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from npusched.errors import ScheduleError
from npusched.solver.cpsat_candidates import Candidate, Pricer, SubgraphFacts, all_candidates
from npusched.solver.evaluator import (
    elementwise_reuse_source,
    evaluate,
    staging_limit,
    storage_size,
    subgraphs_of,
    tensor_use,
    verify,
)
from npusched.solver.heuristic import sched_ops_of
from npusched.solver.max_schedule import max_schedule, vela_tensor_placements
from npusched.solver.schedule import Schedule, TensorPlacement

# Prices are in cycles with fractions; the objective counts 1/SCALE cycles (rounded per pass).
SCALE = 1000

Log = Callable[[str], None]


@dataclass(frozen=True)
class CpSatResult:
    schedule: Schedule
    status: str  # "optimal" | "feasible" | "fallback"
    objective_cycles: float
    bound_cycles: float
    gap: float
    solve_seconds: float
    reason: str = ""
    model_stats: dict[str, Any] = field(default_factory=dict)
    scaled_objective: int | None = None


@dataclass
class _Table:
    """Price rows of one candidate: cycles (scaled int) and per-pass floats per (placement combo, slack group)."""

    movable: tuple[Any, ...]
    groups: tuple[tuple[float, ...], ...]
    rows: dict[tuple[tuple[int, ...], int], tuple[int, tuple[float, ...]]]


@dataclass
class CpSatModel:
    """The built model and what extraction needs."""

    model: cp_model.CpModel
    candidates: list[Candidate]
    use_vars: list[Any]
    resident: dict[Any, Any]
    tables: list[_Table]
    row_vars: list[dict[tuple[tuple[int, ...], int], Any]]
    limit: int
    base: dict[Any, TensorPlacement]
    fast_area: Any
    shared: bool
    stats: dict[str, Any]
    limit_var: Any = None


# --------------------------------------------------------------------------------------------------------------
# Building


def _fm_facts(sg: Any) -> dict[Any, tuple[int, int]]:
    """First and last position (inclusive) a feature map of ``sg`` is live over, in candidate terms: from its
    producer (or first reader) to its last reader (len(ops) for subgraph outputs, which live to the end)."""
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    n = len(sg.ops)
    for pos, op in enumerate(sg.ops):
        for access in (op.ifm, op.ifm2, op.ofm):
            if access is None or access.tensor.is_const:
                continue
            fm = access.tensor
            first.setdefault(fm, pos)
            last[fm] = pos
    for fm in getattr(sg, "outputs", ()) or ():
        if fm in first:
            last[fm] = n
    return {fm: (first[fm], last[fm]) for fm in first}


def _storage_units(sg: Any, use: Any, live: dict[Any, tuple[int, int]], base: dict[Any, TensorPlacement]
                   ) -> dict[Any, tuple[int, int, int]]:
    """Feature maps that share one buffer (an LSTM state and the passes writing it) as the evaluator books them:
    storage key -> (first position, last position, bytes of the member booked first)."""
    units: dict[Any, tuple[int, int, int]] = {}
    for op in sg.ops:
        for access in (op.ifm, op.ifm2, op.ofm):
            if access is None or access.tensor.is_const:
                continue
            fm = access.tensor
            key = use.storage_key(fm)
            if key is fm or key == fm:
                continue
            a, c = live[fm]
            if key in units:
                a0, c0, size = units[key]
                units[key] = (min(a, a0), max(c, c0), size)
            else:
                units[key] = (a, c, storage_size(fm, base[fm].format) if fm in base else 0)
    return units


def build_model(network: Any, arch: Any, references: tuple[Schedule, ...], limit: int | None = None,
                minimise_memory: bool = False, log: Log | None = None, hint_first: bool = False) -> CpSatModel:
    """The CP-SAT model of ``network``; ``references`` (hint first) supply verbatim candidates.

    With ``minimise_memory`` the limit becomes a variable to minimise (used to report the smallest fast storage
    any candidate schedule needs).
    """
    start_time = time.monotonic()
    use = tensor_use(network)
    placements = vela_tensor_placements(network, arch, use)
    base = dict(placements)
    fast = arch.fast_storage_mem_area
    default_area = arch.feature_map_storage_mem_area
    shared = fast == default_area
    limit = staging_limit(arch) if limit is None else int(limit)
    all_fast = Schedule(ops=(), tensors=tuple((fm, TensorPlacement(fast, p.format)) for fm, p in placements))
    model = cp_model.CpModel()
    limit_var = model.NewIntVar(0, limit, "fast_storage_limit") if minimise_memory else None
    cap = limit_var if minimise_memory else limit
    pricer = Pricer(arch, base)
    candidates: list[Candidate] = []
    use_vars: list[Any] = []
    tables: list[_Table] = []
    row_vars: list[dict] = []
    resident: dict[Any, Any] = {}
    objective: list[Any] = []
    outputs_all = set(use.subgraph_outputs)

    for sgi, sg in enumerate(subgraphs_of(network)):
        n = len(sg.ops)
        if n == 0:
            continue
        formats = {fm: p.format for fm, p in placements}
        sops = sched_ops_of(sg, use, formats)
        reuse: dict[int, tuple[Any, Any, int]] = {}
        for pos, op in enumerate(sg.ops):
            src = elementwise_reuse_source(op, arch, all_fast, use)
            if (src is not None and src is not op.ofm.tensor and use.storage_key(src) == src
                    and use.storage_key(op.ofm.tensor) == op.ofm.tensor):
                reuse[pos] = (src, op.ofm.tensor, storage_size(src, base[src].format))
        facts = SubgraphFacts(sgi, sg, sops, use, reuse)
        cands = all_candidates(arch, facts, references, hint_first)
        live_fms = _fm_facts(sg)
        units = _storage_units(sg, use, live_fms, base)
        grouped = {fm for fm in live_fms if use.storage_key(fm) != fm}
        live: dict[Any, tuple[int, int]] = {fm: ac for fm, ac in live_fms.items() if fm not in grouped}
        live.update({key: (a, c) for key, (a, c, _) in units.items()})
        inputs = set(getattr(sg, "inputs", ()) or ())
        # A map larger than the whole fast storage can never be resident: leaving it out keeps the price tables
        # small and the LP relaxation from holding a fraction of it.
        movable = {fm for fm in live_fms if fm not in grouped and not shared and fm not in inputs
                   and fm not in outputs_all and fm in base and storage_size(fm, base[fm].format) <= limit}
        # Slack each candidate leaves (placement-independent) and the cover structure.
        slack_out: list[float] = []
        for cand in cands:
            _, slack = pricer.price(sg.ops, cand, {}, 0.0)
            slack_out.append(slack)
        xs = [model.NewBoolVar(f"use_sg{sgi}_p{c.start}_{c.end}_{c.source}_{k}") for k, c in enumerate(cands)]
        candidates.extend(cands)
        use_vars.extend(xs)
        for pos in range(n):
            model.AddExactlyOne(x for x, c in zip(xs, cands, strict=True) if c.start <= pos <= c.end)
        internal_of: dict[Any, list[Any]] = {}
        for x, c in zip(xs, cands, strict=True):
            for fm in c.internal:
                internal_of.setdefault(fm, []).append(x)
        for fm in sorted(movable, key=lambda f: live[f][0]):
            r = model.NewBoolVar(f"resident_{fm.name or fm.uid}")
            resident[fm] = r
            if fm in internal_of:
                model.Add(r + sum(internal_of[fm]) <= 1)

        def memory_term(fm: Any, internal_of: dict[Any, list[Any]] = internal_of,
                        units: dict[Any, tuple[int, int, int]] = units) -> Any:
            if fm in units:
                return units[fm][2] if shared else 0
            size = storage_size(fm, base[fm].format) if fm in base else 0
            if fm in resident:
                return size * resident[fm]
            if shared:
                return size * (1 - sum(internal_of.get(fm, [])))
            return 0

        ends_at: dict[int, list[int]] = {}
        starts_at: dict[int, list[int]] = {}
        for k, c in enumerate(cands):
            ends_at.setdefault(c.end, []).append(k)
            starts_at.setdefault(c.start, []).append(k)
        slack_classes = {pos: sorted({slack_out[k] for k in ends_at.get(pos - 1, [])}) if pos > 0 else [0.0]
                         for pos in range(n)}

        incoming: dict[tuple[int, float], list[Any]] = {}
        own_at: list[list[Any]] = [[] for _ in range(n)]
        own_after: list[list[Any]] = [[] for _ in range(n)]
        for k, c in enumerate(cands):
            x = xs[k]
            # Memory at the candidate's step and at the odd step after it.
            live_terms = [memory_term(fm) for fm, (a, b) in live.items() if a <= c.end and b >= c.start]
            saving: Any = 0
            if c.reuse is not None:
                src, dst, size = c.reuse
                if shared:
                    saving = size * x
                elif src in resident and dst in resident:
                    q = model.NewBoolVar(f"ofm_over_ifm_sg{sgi}_p{c.start}_{k}")
                    model.AddImplication(q, x)
                    model.AddImplication(q, resident[src])
                    model.AddImplication(q, resident[dst])
                    saving = size * q
            own_at[c.start].append(c.mem_at * x - saving)
            own_after[c.end].append(c.mem_after * x - saving)
            if c.mem_before and c.start > 0:
                own_after[c.start - 1].append(c.mem_before * x)
            model.Add(sum(live_terms) + c.mem_at - saving <= cap).OnlyEnforceIf(x)
            nxt = [cands[m].mem_before * xs[m] for m in starts_at.get(c.end + 1, []) if cands[m].mem_before]
            model.Add(sum(live_terms) + c.mem_after - saving + sum(nxt) <= cap).OnlyEnforceIf(x)
            # Price table.
            table = _price_table(pricer, sg, c, [fm for fm in c.boundary if fm in movable], slack_classes[c.start],
                                 fast, base)
            tables.append(table)
            if c.key in pricer.artefacts or c.internal & grouped:
                model.Add(x == 0)
            rows = {}
            if len(table.rows) == 1:
                (key, (cost, _)), = table.rows.items()
                rows[key] = x
                objective.append(cost * x)
            else:
                for key, (cost, _) in table.rows.items():
                    y = model.NewBoolVar(f"price_sg{sgi}_p{c.start}_{k}_{key}")
                    rows[key] = y
                    objective.append(cost * y)
                model.Add(sum(rows.values()) == x)
                for bit, fm in enumerate(table.movable):
                    model.Add(sum(y for (combo, _), y in rows.items() if combo[bit]) <= resident[fm])
                    model.Add(sum(y for (combo, _), y in rows.items() if not combo[bit]) <= 1 - resident[fm])
                if len(table.groups) > 1:
                    # slack[c, s]: the candidate before c leaves slack s. Per boundary, these form a transportation
                    # problem with the candidates ending there (tighter than linking each row to them alone).
                    slack_vars = {v: model.NewBoolVar(f"after_slack_sg{sgi}_p{c.start}_{k}_{i}")
                                  for i, v in enumerate(slack_classes[c.start])}
                    model.Add(sum(slack_vars.values()) == x)
                    for g, members in enumerate(table.groups):
                        model.Add(sum(y for (_, gg), y in rows.items() if gg == g)
                                  == sum(slack_vars[v] for v in members))
                    for v, w in slack_vars.items():
                        incoming.setdefault((c.start, v), []).append(w)
            row_vars.append(rows)
        # The same memory limits summed over whichever candidate covers each pass (implied by the ones above for
        # integer choices, but free of the enforcement literals, so they also hold in the LP relaxation).
        for pos in range(n):
            live_here = [memory_term(fm) for fm, (a, b) in live.items() if a <= pos <= b]
            covering = [(cands[m].mem_at * xs[m]) for m in range(len(cands))
                        if cands[m].start < pos <= cands[m].end and cands[m].mem_at]
            model.Add(sum(live_here) + sum(own_at[pos]) + sum(covering) <= cap)
            model.Add(sum(live_here) + sum(own_after[pos]) <= cap)
            if not minimise_memory:
                # Cuts the LP misses: of the maps live here, at most k-1 of those larger than limit/k fit at once.
                sizes = {fm: storage_size(fm, base[fm].format) for fm in resident if live_fms[fm][0] <= pos
                         <= live_fms[fm][1]}
                for parts in (2, 3, 4):
                    big = [resident[fm] for fm, size in sizes.items() if size * parts > limit]
                    if len(big) >= parts:
                        model.Add(sum(big) <= parts - 1)
        for (pos, v), terms in incoming.items():
            model.Add(sum(terms) <= sum(xs[m] for m in ends_at.get(pos - 1, []) if slack_out[m] == v))

    if minimise_memory:
        model.Minimize(limit_var)
    else:
        model.Minimize(sum(objective))
    proto = model.Proto()
    stats = {"candidates": len(candidates), "variables": len(proto.variables), "constraints": len(proto.constraints),
             "build_seconds": round(time.monotonic() - start_time, 3), "priced_passes": len(pricer.memo)}
    if log is not None:
        log(f"cp-sat model: {stats['candidates']} candidates, {stats['variables']} variables, "
            f"{stats['constraints']} constraints, built in {stats['build_seconds']:.2f} s")
    return CpSatModel(model, candidates, use_vars, resident, tables, row_vars, limit, base, fast, shared, stats,
                      limit_var)


def _price_table(pricer: Pricer, sg: Any, cand: Candidate, movable: list[Any], slacks: list[float], fast: Any,
                 base: dict[Any, TensorPlacement]) -> _Table:
    """Every price of ``cand``: per residency of its movable boundary maps and per incoming slack; dimensions
    that never change the price are dropped, slacks with identical prices grouped."""
    internal = {fm: TensorPlacement(fast, base[fm].format) for fm in cand.internal if fm in base}
    full: dict[tuple[tuple[int, ...], float], tuple[int, tuple[float, ...]]] = {}
    for combo in itertools.product((0, 1), repeat=len(movable)):
        places = dict(internal)
        for bit, fm in zip(combo, movable, strict=True):
            if bit:
                places[fm] = TensorPlacement(fast, base[fm].format)
        for s in slacks:
            totals, _ = pricer.price(sg.ops, cand, places, s)
            full[(combo, s)] = (sum(round(t * SCALE) for t in totals), tuple(totals))
    relevant = []
    for bit in range(len(movable)):
        if any(full[(combo, s)][0] != full[(combo[:bit] + (1 - combo[bit],) + combo[bit + 1:], s)][0]
               for combo in itertools.product((0, 1), repeat=len(movable)) for s in slacks):
            relevant.append(bit)
    combos = list(itertools.product((0, 1), repeat=len(relevant)))

    def full_combo(reduced: tuple[int, ...]) -> tuple[int, ...]:
        out = [0] * len(movable)
        for bit, v in zip(relevant, reduced, strict=True):
            out[bit] = v
        return tuple(out)

    columns: dict[tuple[int, ...], list[float]] = {}
    for s in slacks:
        column = tuple(full[(full_combo(rc), s)][0] for rc in combos)
        columns.setdefault(column, []).append(s)
    groups = tuple(tuple(v) for v in columns.values())
    rows = {}
    for g, members in enumerate(groups):
        for rc in combos:
            rows[(rc, g)] = full[(full_combo(rc), members[0])]
    return _Table(tuple(movable[b] for b in relevant), groups, rows)


# --------------------------------------------------------------------------------------------------------------
# Extraction


def _extract(built: CpSatModel, value: Callable[[Any], int]) -> tuple[Schedule, int, float]:
    """The schedule the solver chose, its scaled objective and its cycles as the tables price them."""
    ops = []
    fast_fms: set[Any] = set()
    scaled = 0
    cycles = 0.0
    for cand, x, table, rows in zip(built.candidates, built.use_vars, built.tables, built.row_vars, strict=True):
        if not value(x):
            continue
        ops.extend(cand.ops)
        fast_fms.update(cand.internal)
        for key, y in rows.items():
            if value(y):
                cost, totals = table.rows[key]
                scaled += cost
                cycles += sum(totals)
    fast_fms.update(fm for fm, r in built.resident.items() if value(r))
    tensors = tuple((fm, TensorPlacement(built.fast_area if fm in fast_fms else place.mem_area, place.format))
                    for fm, place in built.base.items())
    schedule = Schedule(ops=tuple(sorted(ops, key=lambda o: o.op_index)), tensors=tensors, label="CPSAT",
                        solver="cpsat")
    return schedule, scaled, cycles


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, log: Log | None, start: float) -> None:
        super().__init__()
        self.log = log
        self.start = start
        self.solutions = 0

    def on_solution_callback(self) -> None:
        self.solutions += 1
        if self.log is not None:
            self.log(f"cp-sat {time.monotonic() - self.start:6.1f} s: objective {self.ObjectiveValue() / SCALE:.0f} "
                     f"cycles, bound {self.BestObjectiveBound() / SCALE:.0f}")


def _hint(built: CpSatModel, hint: Schedule | None) -> None:
    """Hint the candidates the hint schedule is made of (verbatim candidates carry its exact choices)."""
    if hint is None:
        return
    chosen = {k for k, cand in enumerate(built.candidates) if cand.source == "hint"}
    for k, x in enumerate(built.use_vars):
        built.model.AddHint(x, 1 if k in chosen else 0)
    for fm, r in built.resident.items():
        place = hint.placement(fm)
        built.model.AddHint(r, 1 if place is not None and place.mem_area == built.fast_area else 0)



def _solver(time_limit: float, workers: int, seed: int, deterministic: bool) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit, 0.1)
    solver.parameters.num_workers = max(1, workers)
    solver.parameters.random_seed = seed
    # Full linearisation: the price-row and residency links are MIP-like, and their LP bound proves optimality
    # where the default level stalls (mobilenet_v2 on 256 KiB of dedicated SRAM: 21% gap -> optimal in 25 s).
    solver.parameters.linearization_level = 2
    if deterministic:
        solver.parameters.interleave_search = True
        solver.parameters.num_workers = max(1, workers)
        # A deterministic-time budget stops the search at the same point whatever the machine load (the wall
        # clock limit above stays as a safety net).
        solver.parameters.max_deterministic_time = max(time_limit / 2, 0.1)
    return solver


def solve_cpsat(network: Any, arch: Any, *, time_limit_seconds: float = 30.0, workers: int | None = None,
                seed: int = 0, deterministic: bool = False, hint: Schedule | None = None,
                log: Log | None = None) -> CpSatResult:
    """Schedule ``network`` with CP-SAT within ``time_limit_seconds`` of wall clock (building included).

    Never worse than ``hint`` (default: Vela's MAX_BUFFERED schedule) when the hint verifies: the better of the
    two by the evaluator is returned. Raises ScheduleError when no candidate schedule fits the fast storage.
    """
    start = time.monotonic()
    workers = workers or os.cpu_count() or 1
    references = tuple(s for s in (hint, _max_schedule_or_none(network, arch)) if s is not None)
    limit = staging_limit(arch)
    if getattr(arch, "optimise", "Performance") == "Size" and hint is not None:
        # Optimising for size, the hint's (Vela's size-optimised) peak is the budget: CP-SAT looks for fewer cycles
        # in no more fast storage than that.
        hint_eval = evaluate(network, arch, hint)
        if not verify(network, arch, hint, hint_eval):
            limit = min(limit, hint_eval.peak_fast_storage)
    built = build_model(network, arch, references, limit=limit, log=log, hint_first=hint is not None)
    remaining = time_limit_seconds - (time.monotonic() - start)
    _hint(built, hint)
    solver = _solver(remaining, workers, seed, deterministic)
    progress = _Progress(log, start)
    status = solver.Solve(built.model, progress)
    solve_seconds = time.monotonic() - start
    stats = dict(built.stats)
    fallback = hint if hint is not None else (references[-1] if references else None)
    if status == cp_model.INFEASIBLE:
        if fallback is not None and not verify(network, arch, fallback):
            return _fallback(network, arch, fallback, "the candidate space has no schedule that fits", solve_seconds,
                             stats)
        needed = smallest_fast_storage(network, arch, references, max(1.0, time_limit_seconds / 4))
        if needed < 0:
            raise ScheduleError(f"no schedule fits {built.limit} bytes of fast storage")
        raise ScheduleError(f"no schedule fits {built.limit} bytes of fast storage; the smallest that fits needs "
                            f"{needed} bytes")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if fallback is None:
            raise ScheduleError("CP-SAT found no schedule within the time limit and there is no hint to fall back on")
        return _fallback(network, arch, fallback, f"no CP-SAT solution within {time_limit_seconds:g} s",
                         solve_seconds, stats)
    schedule, scaled, _ = _extract(built, solver.BooleanValue)
    evaluation = evaluate(network, arch, schedule)
    problems = verify(network, arch, schedule, evaluation)
    if problems and fallback is not None:
        # Should not happen (the model counts memory as the evaluator does); the judge has the last word.
        return _fallback(network, arch, fallback, f"the CP-SAT schedule fails verification: {problems[0]}",
                         solve_seconds, stats)
    bound = solver.BestObjectiveBound() / SCALE
    label = "optimal" if status == cp_model.OPTIMAL else "feasible"
    gap = max(0.0, (evaluation.total_cycles - bound) / evaluation.total_cycles) if evaluation.total_cycles else 0.0
    if status == cp_model.OPTIMAL:
        gap = 0.0
    if fallback is not None:
        fb_eval = evaluate(network, arch, fallback)
        if fb_eval.total_cycles < evaluation.total_cycles and not verify(network, arch, fallback, fb_eval):
            result = _fallback(network, arch, fallback, "the hint is faster than the CP-SAT schedule", solve_seconds,
                               stats)
            return CpSatResult(result.schedule, "fallback", fb_eval.total_cycles, bound,
                               max(0.0, (fb_eval.total_cycles - bound) / fb_eval.total_cycles), solve_seconds,
                               result.reason, stats)
    schedule = schedule.with_status(label, f"cp-sat {label}: bound {bound:.0f} cycles, gap {gap:.2%}")
    if log is not None:
        log(f"cp-sat {label}: {evaluation.total_cycles:.0f} cycles, bound {bound:.0f}, gap {gap:.2%}, "
            f"{solve_seconds:.1f} s")
    return CpSatResult(schedule, label, evaluation.total_cycles, bound, gap, solve_seconds, "", stats, scaled)


def _max_schedule_or_none(network: Any, arch: Any) -> Schedule | None:
    try:
        return max_schedule(network, arch)
    except ScheduleError:
        return None


def _fallback(network: Any, arch: Any, schedule: Schedule, reason: str, seconds: float,
              stats: dict[str, Any]) -> CpSatResult:
    total = evaluate(network, arch, schedule).total_cycles
    return CpSatResult(schedule.with_status("fallback", reason), "fallback", total, math.nan, math.nan, seconds,
                       reason, stats)


def smallest_fast_storage(network: Any, arch: Any, references: tuple[Schedule, ...], time_limit: float) -> int:
    """The least fast storage any schedule of the candidate space needs (CP-SAT, minimising the limit)."""
    built = build_model(network, arch, references, limit=max(staging_limit(arch), 1 << 40), minimise_memory=True)
    solver = _solver(time_limit, 1, 0, False)
    status = solver.Solve(built.model)
    if status == cp_model.OPTIMAL:
        return int(solver.ObjectiveValue())
    if status == cp_model.FEASIBLE:  # a size that fits, perhaps not the smallest
        return int(solver.ObjectiveValue())
    return -1
