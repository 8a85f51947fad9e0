"""The contention-aware estimate (``--estimator contention``): prefetches only use bandwidth the pass they hide
under leaves idle, so no schedule gets cheaper than under Vela's estimate, and CP-SAT optimises it exactly."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import run_options

from npusched.app.pipeline import architecture, load_network, run
from npusched.ir import MemArea
from npusched.schedule.evaluator import evaluate, price_op, verify
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.contention import contention_slack
from npusched.target.estimators import Estimator
from npusched.target.performance import OpPerformance

CASES = [("u55-128_hee_shared", "micro_speech_int8"), ("u55-128_hee_shared", "str_ww_int8"),
         ("u65-256_mid_dedicated256k", "kws_dscnn_int8"), ("u55-256_hee_shared_arena128k", "ad01_int8")]


def test_slack_is_capped_by_the_busier_memory() -> None:
    arch = architecture(run_options("u55-128_hee_shared"))
    flash, sram = arch.permanent_storage_mem_area, arch.fast_storage_mem_area
    assert (flash, sram) == (MemArea.OffChipFlash, MemArea.Sram)
    estimate = OpPerformance(npu_cycles=1000, access_cycles={sram: 300.0, flash: 700.0}, total_cycles=1000, macs=0)
    assert contention_slack(arch, estimate, 800.0, 0) == 300.0  # flash is busy 700 of 1000 cycles
    assert contention_slack(arch, estimate, 200.0, 0) == 200.0  # idle time is not the limit here
    # Its own buffered weights keep both memories busy too (flash reads them, SRAM receives them).
    per_cycle = arch.memory_bandwidths_per_cycle
    weights = 100
    expected = 1000 - 700 - weights / per_cycle[flash]
    assert expected < 1000 - 300 - weights / per_cycle[sram]
    assert contention_slack(arch, estimate, 800.0, weights) == pytest.approx(expected)
    busy = OpPerformance(npu_cycles=500, access_cycles={sram: 900.0}, total_cycles=900, macs=0)
    assert contention_slack(arch, busy, 400.0, 0) == 0.0


@pytest.mark.parametrize(("config", "model"), CASES)
def test_contention_never_prices_below_vela(config: str, model: str) -> None:
    options = run_options(config, model)
    vela_arch, network, _ = load_network(options)
    contention_arch = replace(vela_arch, estimator=Estimator.CONTENTION)
    schedule = heuristic_schedule(network, vela_arch, options.optimise)
    vela = evaluate(network, vela_arch, schedule)
    contention = evaluate(network, contention_arch, schedule)
    assert not verify(network, contention_arch, schedule, contention)
    for by_vela, by_contention in zip(vela.ops, contention.ops, strict=True):
        assert by_contention.total_cycles >= by_vela.total_cycles - 1e-6
    assert contention.total_cycles >= vela.total_cycles
    # Each pass hands on no more slack than its memories leave idle.
    for sg in network.subgraphs:
        for op in sg.ops:
            _, slack, _ = price_op(contention_arch, op, schedule.op(op.index), schedule, 0.0)
            cost = next(c for c in contention.ops if c.op_index == op.index)
            assert slack <= cost.total_cycles - cost.access_cycles.get(contention_arch.permanent_storage_mem_area, 0)


def test_micro_speech_gain_partly_rests_on_the_free_prefetch() -> None:
    """The schedule CP-SAT finds under Vela's estimate costs more under contention; optimising for contention
    finds a schedule at least as good under it, still faster than Vela's."""
    vela_run = run(run_options("u55-128_hee_shared", "micro_speech_int8", solver="cpsat", deterministic=True,
                               workers=1, time_limit_seconds=20))
    contention_run = run(run_options("u55-128_hee_shared", "micro_speech_int8", solver="cpsat", deterministic=True,
                                     workers=1, time_limit_seconds=20, estimator="contention"))
    assert vela_run.cycles_by_estimator["contention"] > vela_run.cycles_by_estimator["vela"]
    best = contention_run.evaluation.total_cycles
    assert best == contention_run.cycles_by_estimator["contention"]
    assert best <= vela_run.cycles_by_estimator["contention"]
    report = contention_run.solver_report
    assert report is not None and report.heuristic_cycles is not None
    assert best < report.heuristic_cycles
    if report.status == "optimal":
        assert best == pytest.approx(report.bound_cycles, rel=1e-6, abs=1)


def test_unknown_estimator_is_a_config_error() -> None:
    from npusched.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown estimator 'guess'"):
        architecture(run_options("u55-128_hee_shared", estimator="guess"))
