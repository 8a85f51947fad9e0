"""The 2020 dynamic-programming scheduler on our cost model: valid, within the fast-storage limit, at least as
fast as Vela's max schedule when everything fits, and cascading (or failing clearly) when memory is tight.

Cases: four small corpus models under the five configurations of golden/configs.json. The max schedule is our
reproduction of Vela's ``MAX_BUFFERED`` (checked against Vela elsewhere); the golden ``cycles_total`` ties it to
Vela here too, so that "faster than the max schedule" means "faster than Vela's own choice".
"""

from __future__ import annotations

import csv
import functools

import pytest
from conftest import CONFIGS, golden_path, run_options

from npusched.app.pipeline import load_network
from npusched.errors import ScheduleError
from npusched.schedule.evaluator import evaluate, staging_limit, tensor_use, verify
from npusched.solvers.dp import DpOptions, dp_schedule, dp_subgraph
from npusched.solvers.max_schedule import max_schedule, vela_tensor_placements
from npusched.target.arch import OptimisationStrategy

MODELS = ("kws_dscnn_int8", "micro_speech_int8", "resnet8_ic_int8", "vww_96_int8")
UNLIMITED_CONFIG = "u55-128_hee_shared"


@functools.cache
def _loaded(config: str, model: str, arena: int | None = None):
    overrides = {"arena_cache_size": arena} if arena is not None else {}
    options = run_options(config, model, **overrides)
    arch, network, _ = load_network(options)
    return options, arch, network


@functools.cache
def _dp(config: str, model: str, arena: int | None = None):
    options, arch, network = _loaded(config, model, arena)
    schedule = dp_schedule(network, arch, options.optimise)
    return schedule, evaluate(network, arch, schedule)


def _golden_cycles(config: str, model: str) -> float:
    with open(golden_path(config, model) / "summary.csv", newline="") as handle:
        return float(next(csv.DictReader(handle))["cycles_total"])


@pytest.mark.slow
@pytest.mark.parametrize("config", tuple(CONFIGS))
@pytest.mark.parametrize("model", MODELS)
def test_dp_schedule_verifies_within_the_limit(config, model):
    _, arch, network = _loaded(config, model)
    schedule, evaluation = _dp(config, model)
    assert verify(network, arch, schedule, evaluation) == []
    assert evaluation.peak_fast_storage <= arch.arena_cache_size
    assert schedule.solver == "dp"
    # Every pass scheduled once; a cascade's passes are striped, the others run whole.
    ops = [op for sg in network.subgraphs for op in sg.ops]
    assert sorted(o.op_index for o in schedule.ops) == sorted(op.index for op in ops)
    for op in ops:
        choice = schedule.op(op.index)
        if choice.cascade is None:
            assert choice.ofm_stripe == op.ofm.shape and choice.rolling_buffer is None
        else:
            assert choice.ofm_stripe.height < op.ofm.shape.height


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_dp_is_at_least_as_fast_as_the_max_schedule_when_everything_fits(model):
    """With an unlimited arena the max schedule (Vela's choice: its cycles are Vela's cycles_total) is one of
    the schedules the DP can build, pass for pass, so the DP must not be slower."""
    _, arch, network = _loaded(UNLIMITED_CONFIG, model)
    reference = evaluate(network, arch, max_schedule(network, arch))
    assert reference.total_cycles == pytest.approx(_golden_cycles(UNLIMITED_CONFIG, model), rel=0.02)
    _, evaluation = _dp(UNLIMITED_CONFIG, model)
    assert evaluation.total_cycles <= reference.total_cycles


@pytest.mark.slow
@pytest.mark.parametrize("model,arena", [("vww_96_int8", 60_000), ("kws_dscnn_int8", 17_000),
                                         ("resnet8_ic_int8", 50_000)])
def test_dp_fits_a_tight_arena(model, arena):
    """Below the max schedule's peak the DP still finds a schedule that fits (vww by cascading)."""
    config = "u55-256_hee_shared_arena128k"
    _, arch, network = _loaded(config, model, arena)
    peak_max = evaluate(network, arch, max_schedule(network, arch)).peak_fast_storage
    assert peak_max > arena
    schedule, evaluation = _dp(config, model, arena)
    assert verify(network, arch, schedule, evaluation) == []
    assert evaluation.peak_fast_storage <= arena
    if model == "vww_96_int8":
        assert any(o.cascade is not None for o in schedule.ops)
        assert any(o.rolling_buffer is not None for o in schedule.ops)


def test_dp_reports_the_smallest_arena_it_can_fit():
    config, model = "u55-256_hee_shared_arena128k", "resnet8_ic_int8"
    _, arch, network = _loaded(config, model, 20_000)
    with pytest.raises(ScheduleError, match=r"^no schedule fits 20000 bytes of fast storage; the smallest that "
                                            r"fits needs (\d+) bytes$") as info:
        dp_schedule(network, arch)
    need = int(info.value.args[0].rsplit(" ", 2)[-2])
    # The figure is real: at that size the DP succeeds.
    _, arch, network = _loaded(config, model, need)
    schedule = dp_schedule(network, arch)
    assert evaluate(network, arch, schedule).peak_fast_storage <= need


def test_cascading_can_be_turned_off():
    """Without cascading the tight vww arena cannot be met: the cascades above are what made it fit."""
    _, arch, network = _loaded("u55-256_hee_shared_arena128k", "vww_96_int8", 60_000)
    with pytest.raises(ScheduleError, match="no schedule fits 60000 bytes"):
        dp_schedule(network, arch, options=DpOptions(use_cascading=False))


@pytest.mark.slow
@pytest.mark.parametrize("config,model,arena,optimise", [
    ("u55-128_hee_shared", "vww_96_int8", None, "Performance"),
    ("u55-256_hee_shared_arena128k", "vww_96_int8", 60_000, "Performance"),
    ("u55-256_hee_shared_arena128k", "kws_dscnn_int8", 17_000, "Performance"),
    ("u55-256_hee_shared_arena128k", "resnet8_ic_int8", 50_000, "Size"),
    ("u65-256_mid_dedicated256k", "resnet8_ic_int8", None, "Performance"),
    ("u65-512_high_dedicated384k", "micro_speech_int8", None, "Performance"),
    # Vela legacy's --optimise Size arenas (35.00 and 105.00 KiB): the peak is where a residual's skip map is
    # read by the pass at hand and stays live past it, which the DP once counted twice.
    ("u55-128_hee_shared_size", "resnet8_ic_int8", 35_840, "Size"),
    ("u55-128_hee_shared_size", "resnet_large_ic_int8", 107_520, "Size"),
])
def test_dp_own_peak_is_the_evaluators(config, model, arena, optimise):
    """The DP prunes on its own reckoning of fast storage; it reads the same memory layout as the evaluator, so
    the peak it believes its pick has is the evaluator's, subgraph by subgraph (cascades, rolling and weight
    buffers included)."""
    _, arch, network = _loaded(config, model, arena)
    strategy = OptimisationStrategy.parse(optimise)
    opts = DpOptions(place_feature_maps=False)
    schedule = dp_schedule(network, arch, strategy, opts)
    evaluation = evaluate(network, arch, schedule)
    use = tensor_use(network)
    placements = vela_tensor_placements(network, arch, use)
    checked = 0
    for sg, memory in zip(network.subgraphs, evaluation.memory, strict=True):
        picked = dp_subgraph(arch, sg, use, placements, staging_limit(arch), strategy, opts)
        assert picked is not None
        assert {o.op_index: o for o in picked.ops} == {o.op_index: schedule.op(o.op_index) for o in picked.ops}
        assert picked.peak_bytes == memory.peak
        checked += 1
    assert checked == len(network.subgraphs) > 0
