"""``--optimise Size`` under CP-SAT is lexicographic: the least peak fast storage first, then the fewest cycles
among schedules with that peak; checked against an exhaustive enumeration of the candidate space."""

from __future__ import annotations

import pytest
from conftest import first_passes, load_corpus

import npusched.solvers.cpsat as cpsat
import npusched.solvers.cpsat.search as cpsat_search
from npusched.lowering.graph import Network
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.schedule import Schedule
from npusched.solvers.cpsat import NetworkFacts
from npusched.solvers.cpsat.candidates import Candidate, all_candidates
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.max_schedule import max_schedule

SIZE = "u55-128_hee_shared_size"

# Slow tier (pytest -m 'not slow' skips it): CP-SAT with long limits.
pytestmark = pytest.mark.slow


def _every_schedule(net: Network, arch) -> list[tuple[int, float]]:
    """(peak fast storage, cycles) of every schedule of the candidate space that verifies: every exact cover of
    the passes by candidates (with shared fast storage every feature map is there, so the cover is the whole
    choice), priced by the evaluator alone, skipping those with a pass priced below its own compute time (the
    DMA-credit artefact the solver keeps out on purpose)."""
    sg = net.subgraphs[0]
    facts_of_net = NetworkFacts(net, arch)
    facts, placements = facts_of_net.facts(0), facts_of_net.base
    candidates = all_candidates(arch, facts, (max_schedule(net, arch),))

    def covers(pos: int) -> list[tuple[Candidate, ...]]:
        if pos == len(sg.ops):
            return [()]
        return [(c, *rest) for c in candidates if c.start == pos for rest in covers(c.end + 1)]

    found = []
    for cover in covers(0):
        schedule = Schedule(ops=tuple(o for c in cover for o in c.ops), tensors=tuple(placements.items()))
        ev = evaluate(net, arch, schedule)
        if any(cost.npu_cycles < cost.op_cycles - 1e-6 for cost in ev.ops):
            continue
        if not verify(net, arch, schedule, ev):
            found.append((ev.peak_fast_storage, ev.total_cycles))
    return found


def test_size_is_least_peak_then_fewest_cycles(corpus_dir):
    """kws_dscnn_int8's first three passes (conv 3x3 -> depthwise 3x3 -> 1x1 conv) on ethos-u55-128 with shared
    SRAM. By hand: run whole, the depthwise pass holds its IFM and OFM at once, two 25x5x64 int8 maps, so every
    schedule without a cascade needs at least 16,000 bytes; cascading keeps the maps between the passes in
    rolling buffers of a few rows, which lowers the peak but costs cycles (smaller blocks, weights read again per
    stripe). So the fastest schedule is not the smallest, and Size must pick the smallest peak and, among the
    schedules with exactly that peak, the fastest. Both are found here by enumerating the whole candidate space."""
    arch, network = load_corpus("kws_dscnn_int8", SIZE)
    net = first_passes(network, 3)
    schedules = _every_schedule(net, arch)
    least_peak = min(peak for peak, _ in schedules)
    fastest_at_least_peak = min(cycles for peak, cycles in schedules if peak == least_peak)
    assert least_peak < 2 * 25 * 5 * 64  # only a cascade gets there
    # The two objectives really disagree here, so the test tells Size from Performance.
    assert min(cycles for _, cycles in schedules) < fastest_at_least_peak

    result = cpsat.solve_cpsat(net, arch,
                               cpsat.SearchBudget(time_limit_seconds=60, workers=2, seed=1, deterministic=True))
    ev = evaluate(net, arch, result.schedule)
    assert verify(net, arch, result.schedule, ev) == []
    assert result.strategy == "Size"
    assert result.status == "optimal"
    assert ev.peak_fast_storage == least_peak
    assert result.peak_bound_bytes == least_peak and result.peak_proven_minimal
    assert ev.total_cycles == pytest.approx(fastest_at_least_peak, abs=1e-6)
    assert result.bound_cycles == pytest.approx(fastest_at_least_peak, abs=1e-3)


def test_performance_is_fewest_cycles_within_the_limit(corpus_dir):
    """The same slice under Performance: the fastest schedule of the candidate space, whatever its peak."""
    arch, network = load_corpus("kws_dscnn_int8", "u55-128_hee_shared")
    net = first_passes(network, 3)
    fastest = min(cycles for _, cycles in _every_schedule(net, arch))
    result = cpsat.solve_cpsat(net, arch,
                               cpsat.SearchBudget(time_limit_seconds=60, workers=2, seed=1, deterministic=True))
    assert result.strategy == "Performance" and result.status == "optimal"
    assert result.peak_bound_bytes is None
    assert result.objective_cycles == pytest.approx(fastest, abs=1e-6)


def test_window_search_lowers_the_peak_first(corpus_dir, monkeypatch):
    """person_detect under Size, decided window by window as a large network would be: the windows around the
    peak step lower the heuristic's (Vela legacy's) peak of 30,720 bytes (the whole model proves 23,808 the least
    of the candidate space), no window raises it, the cycles are then lowered within the new peak, and the result
    verifies. Without the whole candidate space priced (here: too large for the work budget), the window search
    proves no bound, and says so."""
    arch, network = load_corpus("person_detect", SIZE)
    hint = heuristic_schedule(network, arch, "Size")
    hint_eval = evaluate(network, arch, hint)
    monkeypatch.setattr(cpsat_search, "FULL_MODEL_MAX_PASSES", 0)
    monkeypatch.setattr(cpsat_search, "PRICING_SECONDS_PER_PASS_AND_MODEL", 1e9)
    result = cpsat.solve_cpsat(network, arch,
                               cpsat.SearchBudget(time_limit_seconds=15, workers=2, seed=1, deterministic=True),
                               hint=hint)
    ev = evaluate(network, arch, result.schedule)
    assert verify(network, arch, result.schedule, ev) == []
    assert result.model_stats["mode"] == "windows" and result.model_stats["peak_improved_windows"] >= 1
    assert ev.peak_fast_storage < hint_eval.peak_fast_storage
    assert result.status == "feasible" and result.peak_bound_bytes is None and not result.peak_proven_minimal
    assert result.objective_cycles == ev.total_cycles


def test_large_network_priced_whole_ends_on_the_least_peak_path(corpus_dir, monkeypatch):
    """The same network and start, the whole candidate space priced: the path bound's least peak is the one
    model's proven least (23,808 bytes: tests/test_small_memory.py works it out), its path at that peak has the
    fewest cycles there (shared fast storage),
    so the run ends on it, optimal, with no window to search."""
    arch, network = load_corpus("person_detect", SIZE)
    hint = heuristic_schedule(network, arch, "Size")
    monkeypatch.setattr(cpsat_search, "FULL_MODEL_MAX_PASSES", 0)
    result = cpsat.solve_cpsat(network, arch,
                               cpsat.SearchBudget(time_limit_seconds=60, workers=2, seed=1, deterministic=True),
                               hint=hint)
    ev = evaluate(network, arch, result.schedule)
    assert verify(network, arch, result.schedule, ev) == []
    assert result.model_stats["mode"] == "path" and result.status == "optimal" and result.gap == 0
    assert ev.peak_fast_storage == result.peak_bound_bytes == 23808 and result.peak_proven_minimal
    assert result.bound_cycles == pytest.approx(result.objective_cycles, abs=len(network.npu_ops) / 1000)


def test_a_search_that_ends_without_a_fit_says_none_exists_where_the_rules_floor_is_over_the_limit() -> None:
    """Where the search ends without a schedule within the limit (here asked directly), the floor of every schedule
    the cascade rules allow decides what the error says: over the limit, that none fits and what sets the floor;
    under it, that a longer time limit may find one."""
    from npusched.solvers.peak_floor import network_floor

    arch, network = load_corpus("person_detect", "u55-128_hee_shared")
    floor = network_floor(network, arch, held_operands=True).npu.floor_bytes
    net = NetworkFacts(network, arch, joins=False)
    below = cpsat_search._nothing_found(net, None, floor - 1, 5.0)
    assert below.startswith(f"no schedule fits {floor - 1} bytes of fast storage: every schedule Vela's cascade "
                            f"rules allow needs {floor:,} bytes at pass ")
    above = cpsat_search._nothing_found(net, None, floor, 5.0)
    assert above.startswith(f"no schedule that fits {floor} bytes of fast storage was found within 5 s")
