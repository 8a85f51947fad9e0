"""The path bound (npusched.solvers.cpsat.path_bound): the candidate space's optimum with shared fast storage, a
Lagrangian lower bound with dedicated fast storage, the least peak, on real models, against CP-SAT's proofs and
every schedule the evaluator prices."""

from __future__ import annotations

import functools

import pytest
from conftest import load_corpus

from npusched.netgen import generate
from npusched.schedule.evaluator import evaluate, staging_limit, verify
from npusched.solvers.cpsat.model import (
    SCALE,
    NetworkFacts,
    add_hint,
    build_model,
    whole_network_data,
    whole_subgraph_regions,
)
from npusched.solvers.cpsat.path_bound import least_peak, path_bound, path_schedule, resident_maps
from npusched.solvers.cpsat.solver import SearchBudget, new_solver
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.max_schedule import max_schedule
from npusched.target.arch import OptimisationStrategy

SHARED = "u55-128_hee_shared"
DEDICATED = "u65-256_mid_dedicated256k"


@functools.cache
def _space(model: str, config: str, **overrides):
    """(arch, network, facts, heuristic hint, references, region data) of a corpus model: worked out once per test
    run (kws_dscnn_int8 under Shared_Sram is the space of two tests; nothing here is changed by a test)."""
    arch, network = load_corpus(model, config, **overrides)
    hint = heuristic_schedule(network, arch, arch.optimise.value)
    net = NetworkFacts(network, arch)
    references = (hint, max_schedule(network, arch))
    return arch, network, net, hint, references, whole_network_data(net, references, True)


def _proven_optimum(net, references, hint, minimise_memory=False):
    """CP-SAT's proven optimum of the one model over the same candidate space (a deterministic solve)."""
    built = build_model(net, whole_subgraph_regions(net), references, hint_first=True,
                        minimise_memory=minimise_memory)
    add_hint(built, hint)
    solver = new_solver(120, SearchBudget(workers=2, deterministic=True), 60)
    assert solver.solve(built.model) == 4  # OPTIMAL
    return solver.objective_value


@pytest.mark.parametrize("model", ["kws_dscnn_int8", "resnet8_ic_int8", "vww_96_int8"])
def test_shared_fast_storage_path_is_the_optimum_and_its_schedule_verifies(corpus_dir, model):
    """With shared fast storage what each step holds depends on its own candidate (and the next one's pre-buffered
    weights) only, so the shortest path is the candidate space's optimum: CP-SAT proves the same objective, and
    the path's schedule verifies with the evaluator's total equal to it (up to the per-pass rounding)."""
    arch, network, net, hint, references, datas = _space(model, SHARED)
    bound = path_bound(net, datas, staging_limit(arch), evaluate(network, arch, hint).total_cycles * SCALE)
    assert bound.exact and bound.paths is not None and bound.iterations == 1
    assert bound.scaled == pytest.approx(_proven_optimum(net, references, hint), abs=0.5)
    schedule = path_schedule(net, datas, bound.paths)
    evaluation = evaluate(network, arch, schedule)
    assert verify(network, arch, schedule, evaluation) == []
    assert evaluation.total_cycles == pytest.approx(bound.scaled / SCALE, abs=len(network.npu_ops) / SCALE)


@pytest.mark.parametrize("model", ["ad01_int8", "kws_dscnn_int8", "micro_speech_int8", "person_detect"])
def test_dedicated_fast_storage_bound_is_below_the_optimum_and_near_it(corpus_dir, model):
    """With dedicated fast storage residency couples far passes: the Lagrangian bound is never above CP-SAT's
    proven optimum, nor above the heuristic's total (a schedule of the candidate space), and within 5% of the
    optimum; its path, with maps made resident where they fit, verifies."""
    arch, network, net, hint, references, datas = _space(model, DEDICATED)
    hint_cycles = evaluate(network, arch, hint).total_cycles
    bound = path_bound(net, datas, staging_limit(arch), hint_cycles * SCALE)
    optimum = _proven_optimum(net, references, hint)
    assert not bound.exact and bound.iterations > 1
    assert 0.95 * optimum <= bound.scaled <= optimum + 0.5
    assert bound.scaled / SCALE <= hint_cycles
    # Repaired to fit (maps made resident greedily where every step still fits), its path is a schedule.
    resident = resident_maps(net, datas, bound.paths, staging_limit(arch))
    schedule = path_schedule(net, datas, bound.paths, resident)
    evaluation = evaluate(network, arch, schedule)
    assert verify(network, arch, schedule, evaluation) == []
    assert resident and bound.scaled / SCALE <= evaluation.total_cycles


def test_least_peak_is_the_one_model_s_proven_least(corpus_dir):
    """The least peak of the candidate space (the bottleneck path, no map resident) equals what the one model,
    minimising the peak, proves."""
    arch, network, net, hint, references, datas = _space("micro_speech_int8", SHARED,
                                                         optimise=OptimisationStrategy.SIZE.value)
    assert least_peak(net, datas) == round(_proven_optimum(net, references, hint, minimise_memory=True))


def test_no_schedule_fits_an_impossible_limit(corpus_dir):
    arch, network, net, hint, _, datas = _space("kws_dscnn_int8", SHARED)
    bound = path_bound(net, datas, least_peak(net, datas) - 1)
    assert not bound.feasible and bound.paths is None


@pytest.mark.slow
def test_bound_on_a_700_pass_network(tmp_path):
    """A generated 700-pass network (larger than any one model): the path bound is finite, above zero, below the
    heuristic's total and its own path's (which verifies), and the same twice."""
    from npusched.app.pipeline import load_network
    from npusched.vela.command import run_options_from_vela_args

    model = tmp_path / "mobilenet_v2-700.tflite"
    model.write_bytes(generate("mobilenet_v2", 700, 0))
    options = run_options_from_vela_args(model, {"accelerator_config": "ethos-u55-128",
                                                 "system_config": "Ethos_U55_High_End_Embedded",
                                                 "memory_mode": "Shared_Sram", "extra_args": []})
    arch, network = load_network(options)[:2]
    assert len(network.npu_ops) >= 690
    net = NetworkFacts(network, arch)
    hint = heuristic_schedule(network, arch)
    datas = whole_network_data(net, (hint, max_schedule(network, arch)), True)
    first, second = (path_bound(net, datas, staging_limit(arch)) for _ in range(2))
    assert (first.scaled, first.paths) == (second.scaled, second.paths)
    assert 0 < first.scaled / SCALE <= evaluate(network, arch, hint).total_cycles
    schedule = path_schedule(net, datas, first.paths)
    evaluation = evaluate(network, arch, schedule)
    assert verify(network, arch, schedule, evaluation) == []
    assert first.scaled / SCALE <= evaluation.total_cycles + len(network.npu_ops) / SCALE
