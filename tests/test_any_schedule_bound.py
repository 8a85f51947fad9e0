"""The "any schedule" lower bound (``npusched.solvers.cpsat.any_schedule_bound``) against the evaluator, the single
judge: never above the total of a schedule the evaluator prices, whichever solver made it and whichever cost model
prices it, and above nothing.

Cases: every corpus model under every configuration of golden/configs.json, against the heuristic's (Vela's own),
the 2020 DP's and CP-SAT's schedules (a short deterministic search from the heuristic). The small models run in the
fast tier, the rest in the slow one. How close the bound comes to the best schedule is measured, not asserted:
scripts/bench/gap.py (docs/results/bounds.md, "The any-schedule bound").
"""

from __future__ import annotations

import functools

import pytest
from conftest import CONFIGS, MODELS, load_corpus

from npusched.errors import ScheduleError
from npusched.schedule.evaluator import evaluate
from npusched.schedule.schedule import Schedule
from npusched.solvers.cpsat import NetworkFacts, SearchBudget, solve_cpsat
from npusched.solvers.cpsat.any_schedule_bound import (
    any_schedule_bound,
    block_configs,
    ideal_memories,
    least_moving,
)
from npusched.solvers.dp import dp_schedule
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target import performance as perf
from npusched.target import performance_default as perf_default
from npusched.target.estimators import Estimator, blended, objective_cycles, with_estimator
from npusched.target.performance_query import query_for_op

FAST_MODELS = ("keyword_scrambled_8bit", "micro_speech_int8")
# CP-SAT's part: short, one worker, sized by work so that it is the same search on any machine.
CPSAT_SECONDS = 10.0
CPSAT_WORK_SECONDS = 2.0


def _cases() -> list:
    return [pytest.param(model, config, id=f"{model}-{config}",
                         marks=() if model in FAST_MODELS else pytest.mark.slow)
            for model in MODELS for config in CONFIGS]


# Each solver's schedule of a corpus model under a configuration, made once per test run for the three tests that
# price it (schedules are frozen). A ScheduleError is not cached: it is raised again at each call.
@functools.cache
def _heuristic(model: str, config: str) -> Schedule:
    arch, network = load_corpus(model, config)
    return heuristic_schedule(network, arch)


@functools.cache
def _dp(model: str, config: str) -> Schedule:
    arch, network = load_corpus(model, config)
    return dp_schedule(network, arch, arch.optimise)


@functools.cache
def _schedules(model: str, config: str) -> tuple[object, object, dict[str, Schedule], float]:
    """(architecture, network, the schedules each solver finds (none where it finds no schedule that fits),
    the bound CP-SAT reported)."""
    arch, network = load_corpus(model, config)
    found: dict[str, Schedule] = {}
    reported = float("nan")
    try:
        found["heuristic"] = _heuristic(model, config)
    except ScheduleError:
        pass
    try:
        found["dp"] = _dp(model, config)
    except ScheduleError:
        pass
    try:
        budget = SearchBudget(CPSAT_SECONDS, workers=1, seed=0, deterministic=True,
                              work_limit_seconds=CPSAT_WORK_SECONDS)
        result = solve_cpsat(network, arch, budget, hint=found.get("heuristic"))
        found["cpsat"] = result.schedule
        reported = result.any_schedule_bound_cycles
    except ScheduleError:
        pass
    return arch, network, found, reported


@pytest.mark.parametrize(("model", "config"), _cases())
def test_bound_is_positive_and_below_every_solvers_schedule(model, config):
    arch, network, schedules, reported = _schedules(model, config)
    bound = any_schedule_bound(NetworkFacts(network, arch))
    assert bound > 0
    for solver, schedule in schedules.items():
        total = evaluate(network, arch, schedule).total_cycles
        assert bound <= total, (solver, bound, total)
    if "cpsat" in schedules:
        # What CP-SAT reports is this bound: a pure function of the network and the architecture.
        assert reported == bound


@pytest.mark.parametrize("estimator", [Estimator.VELA_DEFAULT, Estimator.CONTENTION])
@pytest.mark.parametrize("model", FAST_MODELS + ("kws_dscnn_int8",))
def test_bound_holds_under_every_cost_model(model, estimator):
    """Under the default core's model and the contention estimator, the bound of that model is below what that
    model prices each solver's schedule at (on shared and on dedicated SRAM)."""
    for config in ("u55-128_hee_shared", "u65-512_high_dedicated384k"):
        base, network = load_corpus(model, config)
        arch = with_estimator(base, estimator)
        bound = any_schedule_bound(NetworkFacts(network, arch))
        assert bound > 0
        for schedule in (_heuristic(model, config), _dp(model, config)):
            assert bound <= evaluate(network, arch, schedule).total_cycles


@pytest.mark.parametrize("model", FAST_MODELS + ("kws_dscnn_int8",))
def test_under_both_models_the_bound_holds_for_the_objective_and_for_each_model(model):
    """Under ``--objective both`` the search minimises a blend of the two Vela models (with a penalty over a cap)
    while a run reports one model's cycles: the bound holds for the blend, for the objective and for each model."""
    for config in ("u55-128_hee_shared", "u65-256_mid_dedicated256k"):
        base, network = load_corpus(model, config)
        schedules = (_heuristic(model, config), _dp(model, config))
        legacy, default = (with_estimator(base, e) for e in (Estimator.VELA_LEGACY, Estimator.VELA_DEFAULT))
        legacy_total = evaluate(network, legacy, schedules[0]).total_cycles
        default_total = evaluate(network, default, schedules[0]).total_cycles
        arch = blended(base, 0.5, 0.5 * legacy_total / default_total, cap=0.5 * legacy_total)
        bound = any_schedule_bound(NetworkFacts(network, arch))
        assert bound > 0
        for schedule in schedules:
            blend = evaluate(network, arch, schedule)
            assert bound <= blend.total_cycles <= objective_cycles(arch, blend.total_cycles, blend.parts)
            for single in (legacy, default):
                assert bound <= evaluate(network, single, schedule).total_cycles


def test_the_bound_is_the_same_every_time():
    arch, network = load_corpus("kws_dscnn_int8", "u65-256_mid_dedicated256k")
    assert any_schedule_bound(NetworkFacts(network, arch)) == any_schedule_bound(NetworkFacts(network, arch))


@pytest.mark.parametrize("estimator", [Estimator.VELA_LEGACY, Estimator.VELA_DEFAULT])
def test_ideal_memories_and_least_moving_blocks_bound_every_block_config(estimator):
    """The two relaxations the search rests on, checked on every block config of kws_dscnn's passes in both its
    feature-map memories: a pass's compute time with ideal memories is no more than with any real one, and the
    block config that moves least (``least_moving``) reads and writes no more elements than any real one."""
    base, network = load_corpus("kws_dscnn_int8", "u65-256_mid_dedicated256k")
    arch = with_estimator(base, estimator)
    model = perf_default if estimator is Estimator.VELA_DEFAULT else perf
    for op in network.npu_ops:
        for area in (arch.fast_storage_mem_area, arch.feature_map_storage_mem_area):
            query = query_for_op(op, None, ifm_area=area, ofm_area=area, const_area=area)
            configs = block_configs(arch, op)
            least = model.measure_element_access(arch, perf.PerformanceQuery(
                **{**query.__dict__, "config": least_moving(query, configs[0])}))
            for config in configs:
                at = perf.PerformanceQuery(**{**query.__dict__, "config": config})
                ideal = model.measure_cycle_cost(ideal_memories(arch), op.op_type, op.activation, at).op_cycles
                assert ideal <= model.measure_cycle_cost(arch, op.op_type, op.activation, at).op_cycles
                access = model.measure_element_access(arch, at)
                assert sum(least.ifm_read) <= sum(access.ifm_read)
                assert least.ofm_write <= access.ofm_write
                assert least.const_read[0] <= access.const_read[0]
                assert least.weights_refetch <= access.weights_refetch
