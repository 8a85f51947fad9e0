"""The floor on peak fast storage: below every schedule, on the corpus and on generated networks, met by CP-SAT's
smallest schedules, and worked by hand where it is small enough to follow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS, MODELS, load_corpus

from npusched.app.pipeline import load_network
from npusched.netgen import generate
from npusched.netgen.flatbuffer import serialise
from npusched.netgen.graph import GraphBuilder
from npusched.schedule.evaluator import evaluate
from npusched.solvers.cpsat import SearchBudget, solve_cpsat
from npusched.solvers.dp import dp_schedule
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.max_schedule import max_schedule
from npusched.solvers.peak_floor import network_floor
from npusched.vela.command import run_options_from_vela_args

SIZE = "u55-128_hee_shared_size"


def _assert_above_floor(network, arch, schedules, joins: bool = False) -> None:
    """Vela's rules' floor, or with ``joins`` the floor of CP-SAT's own Size rules (held operands, joins, rolling
    buffers sized in Vela's pull order)."""
    floor = network_floor(network, arch, held_operands=joins, joins=joins)
    for schedule in schedules:
        evaluation = evaluate(network, arch, schedule)
        assert floor.npu.floor_bytes <= evaluation.peak_fast_storage, schedule.solver
        assert floor.whole_bytes <= evaluation.network_peak_fast_storage, schedule.solver


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_no_schedule_goes_below_the_floor(model):
    """Vela's own schedules (the heuristic's, for Size and for Performance), the max schedule and the DP's all
    need at least the floor, per NPU subgraph and over the whole inference."""
    arch, network = load_corpus(model, SIZE)
    schedules = [heuristic_schedule(network, arch, "Size"), heuristic_schedule(network, arch, "Performance"),
                 max_schedule(network, arch)]
    if model != "mobilenet_v2_224_int8":  # (the DP takes minutes there)
        schedules.append(dp_schedule(network, arch, "Size"))
    _assert_above_floor(network, arch, schedules)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet8_ic_int8", "vww_96_int8", "person_detect", "dtln"])
def test_cpsat_smallest_schedule_meets_the_floor(model):
    """CP-SAT proves its least peak over its own candidate space; the floor holds over every schedule whose
    cascades CP-SAT's Size rules allow (Vela's, gates and residual joins held or read lagged, rolling buffers
    sized in Vela's pull order). Where the two meet, CP-SAT's schedule is the smallest there is."""
    arch, network = load_corpus(model, SIZE)
    result = solve_cpsat(network, arch,
                         SearchBudget(time_limit_seconds=60, workers=2, deterministic=True),
                         hint=heuristic_schedule(network, arch, "Size"))
    assert result.peak_proven_minimal
    evaluation = evaluate(network, arch, result.schedule)
    floor = network_floor(network, arch, held_operands=True, joins=True)
    assert evaluation.peak_fast_storage == floor.npu.floor_bytes
    assert evaluation.network_peak_fast_storage == floor.whole_bytes


def test_resnet8_floor_by_hand():
    """resnet8's first block: conv -> conv -> conv -> add, the add's second operand the first conv's OFM (the
    skip). That map (32 x 32 x 16 int8, 16,384 bytes) is read by the second conv and by the add, so it is whole
    from the first conv to the add. The add may not cascade (its second operand is a feature map), the second
    and third conv may: at the third conv fast storage holds at least the skip (the cascade's IFM), the third
    conv's OFM (16,384) and between the two convs a rolling buffer of twice the 3 rows a one-row stripe of a 3x3
    conv reads, 32 wide and 16 deep (3,072). Any other run there needs more: the three maps whole (49,152)."""
    arch, network = load_corpus("resnet8_ic_int8", SIZE)
    floor = network_floor(network, arch).npu
    assert floor.floor_bytes == 2 * 32 * 32 * 16 + 2 * 3 * 32 * 16 == 35_840
    assert (floor.position, floor.run) == (2, (1, 2))
    assert [size for _, size in floor.parts] == [16_384, 16_384, 3_072]
    assert "rolling buffer after pass 1" in floor.describe()


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["mixed", "resnet", "mobilenet_v2", "nasnet", "densenet"])
def test_floor_holds_on_generated_networks(tmp_path: Path, architecture: str):
    """Networks the corpus does not have (CPU operators mid-graph, branching cells, concatenations): the floors
    stay below the heuristic's smallest schedule (Vela's rules) and CP-SAT's (its own Size rules, joins)."""
    path = tmp_path / f"{architecture}.tflite"
    path.write_bytes(generate(architecture, 40, 5))
    arch, network, _ = load_network(run_options_from_vela_args(path, CONFIGS[SIZE]))
    heuristic = heuristic_schedule(network, arch, "Size")
    result = solve_cpsat(network, arch,
                         SearchBudget(time_limit_seconds=20, workers=2, deterministic=True), hint=heuristic)
    _assert_above_floor(network, arch, [heuristic])
    _assert_above_floor(network, arch, [result.schedule], joins=True)


@pytest.mark.slow
def test_held_operands_lower_no_corpus_floor(tmp_path: Path):
    """Gate MULs joining cascades with their second map held whole (CP-SAT's rules allow it, Vela's do not) lower
    no corpus model's floor: what sets each one (the network input with the first cascade's output, a skip map
    held whole, passes that cannot cascade at all) stays. It is not vacuous: where a wide map is gated between two
    convolutions, the cascade through the gate holds neither the map nor the gated one whole."""
    for model in MODELS:
        arch, network = load_corpus(model, SIZE)
        assert network_floor(network, arch, held_operands=True) == network_floor(network, arch), model
    g = GraphBuilder(np.random.default_rng(0))
    x = g.input((1, 64, 64, 16))
    gate = g.logistic(g.conv(g.mean(x), 64, activation=None))
    path = tmp_path / "gated.tflite"
    path.write_bytes(serialise(g.network([g.conv(g.mul(g.conv(x, 64), gate), 16)], "a gated wide map")))
    arch, network, _ = load_network(run_options_from_vela_args(path, CONFIGS[SIZE]))
    held, vela = network_floor(network, arch, held_operands=True), network_floor(network, arch)
    assert held.npu.floor_bytes < vela.npu.floor_bytes


def test_floor_needs_feature_maps_in_fast_storage():
    arch, network = load_corpus("kws_dscnn_int8", "u65-256_mid_dedicated256k")
    with pytest.raises(ValueError, match="every feature map in fast storage"):
        network_floor(network, arch)
