"""The CP-SAT scheduler against the evaluator (the single judge), the heuristic and brute force."""

from __future__ import annotations

import itertools
import re
import time

import pytest
from conftest import assert_names_the_peak, first_passes, load_corpus, run_options
from ortools.sat.python import cp_model

import npusched.solvers.cpsat.model as cpsat_model
from npusched.app.pipeline import run
from npusched.errors import ScheduleError
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.schedule import Schedule, TensorPlacement
from npusched.solvers.cpsat import SearchBudget, solve_cpsat
from npusched.solvers.cpsat.candidates import all_candidates
from npusched.solvers.cpsat.model import SCALE
from npusched.solvers.cpsat.search import NO_TIME_TO_SEARCH, STOPPED_BY_CLOCK
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.max_schedule import max_schedule


@pytest.mark.slow
def test_three_pass_slice_matches_brute_force(corpus_dir):
    """kws_dscnn_int8's first three passes (conv 3x3 -> depthwise -> 1x1 conv) on a U65 with 256 KiB of
    dedicated SRAM. By hand: the two feature maps between the passes may each sit in DRAM or SRAM, or live only in
    a rolling buffer when the passes around them cascade; every pass picks a block config and whether its weights
    are copied into SRAM. The optimum is the cheapest of all those schedules that verify, which this test finds by
    enumerating every exact cover of the three passes by candidates and every residency of the two maps, priced by
    the evaluator alone (skipping schedules with a pass priced below its own compute time, which the solver
    excludes on purpose). CP-SAT must land on exactly that total."""
    arch, network = load_corpus("kws_dscnn_int8", "u65-256_mid_dedicated256k")
    net = first_passes(network, 3)
    result = solve_cpsat(net, arch, SearchBudget(time_limit_seconds=60, workers=2, seed=1, deterministic=True))
    assert result.status == "optimal"

    sg = net.subgraphs[0]
    facts_of_net = cpsat_model.NetworkFacts(net, arch)
    facts, placements, fast = facts_of_net.facts(0), facts_of_net.base, facts_of_net.fast
    cands = all_candidates(arch, facts, (max_schedule(net, arch),))
    middle = (sg.ops[0].ofm.tensor, sg.ops[1].ofm.tensor)
    best = None

    def covers(pos: int):
        if pos == len(sg.ops):
            yield ()
            return
        for cand in cands:
            if cand.start == pos:
                for rest in covers(cand.end + 1):
                    yield (cand, *rest)

    for cover in covers(0):
        internal = set().union(*(c.internal for c in cover))
        for bits in itertools.product((0, 1), repeat=2):
            if any(b and fm in internal for b, fm in zip(bits, middle, strict=True)):
                continue
            in_fast = internal | {fm for b, fm in zip(bits, middle, strict=True) if b}
            tensors = tuple((fm, TensorPlacement(fast if fm in in_fast else p.mem_area, p.format))
                            for fm, p in placements.items())
            schedule = Schedule(ops=tuple(o for c in cover for o in c.ops), tensors=tensors)
            ev = evaluate(net, arch, schedule)
            if any(cost.npu_cycles < cost.op_cycles - 1e-6 for cost in ev.ops):
                continue  # the cascade DMA-credit artefact, kept out of the candidates on purpose
            if not verify(net, arch, schedule, ev) and (best is None or ev.total_cycles < best):
                best = ev.total_cycles
    assert best is not None
    assert result.objective_cycles == best


@pytest.mark.slow
@pytest.mark.parametrize("config", ["u65-256_mid_dedicated256k", "u55-256_hee_shared_arena128k"])
@pytest.mark.parametrize("model", ["kws_dscnn_int8", "micro_speech_int8", "ad01_int8"])
def test_objective_is_the_evaluators_total(corpus_dir, model, config):
    arch, network = load_corpus(model, config)
    heuristic = heuristic_schedule(network, arch)
    result = solve_cpsat(network, arch,
                         SearchBudget(time_limit_seconds=60, workers=2, deterministic=True), hint=heuristic)
    assert result.status == "optimal"
    ev = evaluate(network, arch, result.schedule)
    assert verify(network, arch, result.schedule, ev) == []
    # The float total the solver reports is the evaluator's, and the integer CP-SAT objective is the evaluator's
    # per-pass prices scaled and rounded, term for term.
    assert result.objective_cycles == ev.total_cycles
    assert result.scaled_objective == sum(round(cost.total_cycles * SCALE) for cost in ev.ops)
    assert result.bound_cycles * SCALE == pytest.approx(result.scaled_objective)
    # Never worse than the heuristic (Vela's own schedule).
    assert ev.total_cycles <= evaluate(network, arch, heuristic).total_cycles


def test_impossible_limit_names_the_smallest_size(corpus_dir):
    arch, network = load_corpus("micro_speech_int8", "u55-256_hee_shared_arena128k", arena_cache_size=1024)
    with pytest.raises(ScheduleError, match=r"no schedule fits 1024 bytes of fast storage; the smallest that "
                                            r"fits needs \d+ bytes") as info:
        solve_cpsat(network, arch, SearchBudget(time_limit_seconds=10, workers=2, deterministic=True))
    needed = int(re.search(r"needs (\d+) bytes", str(info.value)).group(1))
    assert needed > 1024 and info.value.needed_bytes == needed
    assert_names_the_peak(str(info.value), needed, network)
    # That size really is enough: the solver fits a schedule in it, and the evaluator agrees.
    arch, network = load_corpus("micro_speech_int8", "u55-256_hee_shared_arena128k", arena_cache_size=needed)
    result = solve_cpsat(network, arch, SearchBudget(time_limit_seconds=10, workers=2, deterministic=True))
    assert result.status in ("optimal", "feasible")
    assert evaluate(network, arch, result.schedule).peak_fast_storage <= needed
    # ... and 16 bytes less (one allocation quantum) is not.
    arch, network = load_corpus("micro_speech_int8", "u55-256_hee_shared_arena128k",
                          arena_cache_size=needed - 16)
    with pytest.raises(ScheduleError):
        solve_cpsat(network, arch, SearchBudget(time_limit_seconds=10, workers=2, deterministic=True))


def test_with_no_time_left_a_fitting_hint_is_the_answer_and_an_unfitting_one_is_not(corpus_dir):
    """A run that keeps its whole time limit for Vela's compile asks for a search of 0 s: the hint comes back
    unimproved when it fits; when it does not, the search still runs (a schedule is needed)."""
    arch, network = load_corpus("kws_dscnn_int8", "u65-256_mid_dedicated256k")
    hint = heuristic_schedule(network, arch)
    result = solve_cpsat(network, arch, SearchBudget(time_limit_seconds=0, workers=1), hint=hint)
    assert (result.status, result.reason) == ("fallback", NO_TIME_TO_SEARCH)
    assert result.schedule.ops == hint.ops and result.schedule.tensors == hint.tensors
    assert result.objective_cycles == evaluate(network, arch, hint).total_cycles
    # The heuristic's schedule of a 1 KiB arena does not fit it: no answer without searching.
    small, network = load_corpus("micro_speech_int8", "u55-256_hee_shared_arena128k", arena_cache_size=1024)
    with pytest.raises(ScheduleError, match="fits 1024 bytes"):  # found too small, or none found in time
        solve_cpsat(network, small, SearchBudget(time_limit_seconds=0, workers=1), hint=max_schedule(network, small))


@pytest.mark.slow
def test_a_deterministic_run_is_sized_by_its_inputs_not_by_the_clock(monkeypatch):
    """The same --deterministic run on an idle and on a loaded machine (simulated: 2.5 s already gone when it
    starts) gives CP-SAT the same work budgets, so the same schedule; only the wall-clock safety net differs. The
    limit leaves that net far beyond the work the search needs (it proves this model optimal within its budget), so
    the clock, which would make the answer depend on the machine, never ends it."""
    import npusched.solvers.cpsat.search as search

    original = search.new_solver
    budgets: list[float | None] = []

    def recording(time_limit, budget, work_seconds=None):
        budgets.append(work_seconds)
        return original(time_limit, budget, work_seconds)

    monkeypatch.setattr(search, "new_solver", recording)
    options = run_options("u65-256_mid_dedicated256k", "kws_dscnn_int8", solver="cpsat", time_limit_seconds=60,
                          workers=1, deterministic=True)
    runs = []
    for offset in (0.0, 2.5):
        budgets.clear()
        result = run(options, started=time.monotonic() - offset)
        runs.append((list(budgets), result.schedule.ops, result.schedule.tensors))
    assert runs[0][0] and runs[0] == runs[1]


@pytest.mark.slow
def test_a_deterministic_run_cut_by_the_clock_says_so():
    """--deterministic stops CP-SAT after a work budget; the wall clock is only a safety net. Where the clock ends
    the search first (here half a second for a 60-pass model, with the work of 100 s), the answer depends on the
    machine, and the result says so; where the budget ends it, nothing is said (half a second of work, as any
    budget the clock does not cut would do)."""
    arch, network = load_corpus("person_detect", "u65-512_high_dedicated384k")
    hint = heuristic_schedule(network, arch)
    cut = solve_cpsat(network, arch,
                      SearchBudget(time_limit_seconds=0.5, workers=1, deterministic=True, work_limit_seconds=100),
                      hint=hint)
    assert cut.model_stats.get("stopped_by_clock") and STOPPED_BY_CLOCK in cut.reason
    budgeted = solve_cpsat(network, arch,
                           SearchBudget(time_limit_seconds=300, workers=1, deterministic=True, work_limit_seconds=0.5),
                           hint=hint)
    assert not budgeted.model_stats.get("stopped_by_clock") and STOPPED_BY_CLOCK not in budgeted.reason


@pytest.mark.slow
def test_deterministic_runs_give_the_same_schedule(corpus_dir):
    arch, network = load_corpus("kws_dscnn_int8", "u65-256_mid_dedicated256k")
    first = solve_cpsat(network, arch, SearchBudget(time_limit_seconds=30, workers=2, seed=7, deterministic=True))
    second = solve_cpsat(network, arch, SearchBudget(time_limit_seconds=30, workers=2, seed=7, deterministic=True))
    assert first.schedule.ops == second.schedule.ops
    assert first.schedule.tensors == second.schedule.tensors
    assert first.objective_cycles == second.objective_cycles


@pytest.mark.parametrize("arena", [16, None])
def test_single_pass_optimum_by_hand(corpus_dir, arena):
    """One pass alone (kws_dscnn_int8's first convolution, U65 with dedicated SRAM): its IFM is the network input
    and its OFM the output, both in DRAM, so the only choices are the block config and whether the weights are
    copied into SRAM first. With 16 bytes of SRAM no weight buffer fits, so the optimum is the fastest block config
    reading its weights in place (13972 cycles); with the default 256 KiB copying them first wins (13551). Both
    minima come from ``price_options`` (the option pricer, a separate path from the evaluator's ``price_op``)."""
    from npusched.schedule.options import price_options

    overrides = {"arena_cache_size": arena} if arena is not None else {}
    arch, network = load_corpus("kws_dscnn_int8", "u65-256_mid_dedicated256k", **overrides)
    net = first_passes(network, 1)
    op = net.subgraphs[0].ops[0]
    full = (op.ofm.shape.height,)
    in_place = min(o.total_cycles for o in price_options(arch, op, stripe_heights=full, weights_buffered=False))
    buffered = min(o.total_cycles for o in price_options(arch, op, stripe_heights=full, weights_buffered=True))
    expected = in_place if arena == 16 else min(in_place, buffered)
    result = solve_cpsat(net, arch, SearchBudget(time_limit_seconds=10, workers=2, deterministic=True))
    assert result.status == "optimal"
    assert result.objective_cycles == pytest.approx(expected, abs=1e-6)
    assert buffered < in_place  # the two cases really differ


@pytest.mark.slow
@pytest.mark.parametrize("model,config,arena,size_first", [
    ("vww_96_int8", "u55-256_hee_shared_arena128k", 60_000, False),
    ("vww_96_int8", "u55-256_hee_shared_arena128k", None, True),
    ("resnet8_ic_int8", "u55-256_hee_shared_arena128k", None, True),
    ("resnet8_ic_int8", "u65-256_mid_dedicated256k", 40_000, False),
    ("dtln", "u65-256_mid_dedicated256k", None, False),
    ("kws_dscnn_int8", "u55-128_hee_shared", 17_000, False),
    ("kws_dscnn_int8", "u65-256_mid_dedicated256k", 12_000, False),
    ("ad01_int8", "u65-512_high_dedicated384k", 4_000, False),
    ("micro_speech_int8", "u65-256_mid_dedicated256k", 8_000, True),
])
def test_model_own_peak_is_the_evaluators(model, config, arena, size_first):
    """The model holds every step's fast storage to the limit (or minimises the peak) on its own reckoning of
    the memory: it reads the same memory layout as the evaluator, so the peak it counts for its solution is the
    evaluator's, subgraph by subgraph (cascades, rolling and weight buffers, OFMs over IFMs, shared buffers)."""
    overrides = {"arena_cache_size": arena} if arena is not None else {}
    arch, network = load_corpus(model, config, **overrides)
    net = cpsat_model.NetworkFacts(network, arch)
    references = (heuristic_schedule(network, arch), max_schedule(network, arch))
    built = cpsat_model.build_model(net, cpsat_model.whole_subgraph_regions(net), references,
                                    minimise_memory=size_first, hint_first=True)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 60
    solver.parameters.num_workers = 2
    assert solver.solve(built.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    schedule, _ = cpsat_model.extract_schedule(built, solver.boolean_value)
    evaluation = evaluate(network, arch, schedule)
    assert verify(network, arch, schedule, evaluation) == []
    peaks = [cpsat_model.model_peak_bytes(region, solver.value) for region in built.regions]
    assert peaks == [memory.peak for memory in evaluation.memory]
    if size_first:
        assert solver.objective_value == max(peaks)
