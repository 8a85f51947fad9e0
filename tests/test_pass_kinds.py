"""Passes of one kind (``npusched.schedule.pass_kind``) are priced once by the CP-SAT candidate space: with that
sharing on, the whole candidate space (every candidate, its price table, slacks and maps) equals the one priced
pass by pass, on real exports that repeat passes (the zoo's keyword spotter, the twin towers of a Siamese network,
an unrolled GRU's time steps)."""

from __future__ import annotations

import time

import pytest

from npusched.app.pipeline import load
from npusched.bench.golden import load_configs, run_options_from_vela_args
from npusched.bench.paths import zoo_dir
from npusched.schedule.pass_kind import pass_kind
from npusched.solvers.cpsat import NetworkFacts, candidates
from npusched.solvers.cpsat.model import whole_network_data
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.estimators import blended

EXPORTS = zoo_dir()


def _whole_space(model: str, config: str, share: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    loaded = load(run_options_from_vela_args(EXPORTS / f"{model}.tflite", load_configs()[config], solver="cpsat"))
    network, arch = loaded.build().network, loaded.arch
    monkeypatch.setattr(candidates, "SHARE_PASS_KINDS", share)
    hint = heuristic_schedule(network, arch, arch.optimise)
    facts = NetworkFacts(network, blended(arch, 0.5, 0.4, cap=1e9))
    datas = tuple(whole_network_data(facts, (hint,), True, time.monotonic() + 600, 1))
    # every pass's options (block configs, stripes, prices, encoded weight sizes)
    priced = [facts.facts(index).priced for index in range(len(facts.subgraphs))]
    return network, datas, priced


@pytest.mark.parametrize(("model", "config"), [
    pytest.param("kws_dscnn_s", "u55-128_hee_shared", marks=pytest.mark.slow),
    ("siamese_64", "u65-256_mid_dedicated256k"),
    pytest.param("mobilenet_v2_035_96", "u65-256_mid_dedicated256k", marks=pytest.mark.slow),
    pytest.param("kws_gru_unrolled", "u65-256_mid_dedicated256k", marks=pytest.mark.slow)])
def test_pricing_each_kind_once_gives_the_candidate_space_pass_by_pass_pricing_gives(model, config, monkeypatch):
    network, shared, shared_options = _whole_space(model, config, True, monkeypatch)
    assert len({pass_kind(op) for op in network.npu_ops}) < len(network.npu_ops)  # some passes share a kind
    _, alone, options = _whole_space(model, config, False, monkeypatch)
    assert shared_options == options
    assert len(shared) == len(alone) > 0
    for a, b in zip(shared, alone, strict=True):
        assert a.candidates == b.candidates
        assert a.tables == b.tables
        assert (a.slack_out, a.slack_classes, a.movable, a.kept, a.excluded) == \
            (b.slack_out, b.slack_classes, b.movable, b.kept, b.excluded)


def test_a_kind_leaves_out_names_not_what_prices_a_pass():
    """The Siamese network's two towers run the same layers on different inputs: their passes pair up by kind;
    passes of different shapes or weights do not."""
    loaded = load(run_options_from_vela_args(EXPORTS / "siamese_64.tflite", load_configs()["u55-128_hee_shared"],
                                             solver="cpsat"))
    ops = loaded.build().network.npu_ops
    by_kind: dict = {}
    for op in ops:
        by_kind.setdefault(pass_kind(op), []).append(op)
    pairs = [group for group in by_kind.values() if len(group) > 1]
    assert pairs
    for group in pairs:
        assert len({op.name for op in group}) == len(group)
        assert len({(op.ofm.shape, op.weights is None, op.op_type) for op in group}) == 1
