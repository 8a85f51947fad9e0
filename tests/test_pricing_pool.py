"""Pricing passes in forked processes: the same candidate space as pricing them in one."""

from __future__ import annotations

import time

from conftest import load_corpus

from npusched.schedule.options import clear_caches
from npusched.solvers.cpsat import pricing_pool
from npusched.solvers.cpsat.model import NetworkFacts
from npusched.target import weights as wts
from npusched.target.estimators import Estimator, with_estimator


def _facts():
    """(architecture, facts of the first subgraph) of MobileNet-V2 under both cost models, fresh."""
    arch, network = load_corpus("mobilenet_v2_224_int8", "u55-128_hee_shared")
    arch = with_estimator(arch, Estimator.BOTH)
    return arch, NetworkFacts(network, arch).facts(0)


def test_processes_price_as_one_process_does() -> None:
    """Two processes give every pass the pricing one process gives it (options, prices and fastest blocks), and
    hand the weight encodings' sizes back, so that the caller does not encode them again."""
    arch, alone = _facts()
    positions = range(len(alone.sg.ops))
    assert len(positions) >= 4 * pricing_pool.CHUNK_PASSES
    assert pricing_pool.price_in_processes(arch, alone, positions, 1, None)
    clear_caches()
    wts.clear_caches()
    arch, facts = _facts()
    assert pricing_pool.price_in_processes(arch, facts, positions, 2, None)
    assert facts.priced == alone.priced
    digests = {wts.weights_digest(op.weights) for op in facts.sg.ops if op.weights is not None}
    assert len({key[0] for key, _ in wts.known_stream_sizes(digests)}) == len(digests)


def test_out_of_time_says_so() -> None:
    arch, facts = _facts()
    for processes in (2, 1):
        assert not pricing_pool.price_in_processes(arch, facts, range(len(facts.sg.ops)), processes,
                                                   time.monotonic() - 1)
    assert len(facts.priced) < len(facts.sg.ops)


def test_usable_processes_are_bounded_by_the_workers() -> None:
    assert pricing_pool.usable_processes(1) == 1
    assert 1 <= pricing_pool.usable_processes(64) <= 64
