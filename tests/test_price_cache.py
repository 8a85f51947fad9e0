"""The evaluator keeps what it worked out (``pricing._PRICES``: a pass's single-model price by its choices and operand
places; ``pass_costs._MEMORIES``: a schedule's memory over time): an evaluation made after others, of schedules that
share passes and of the same schedule under other models, equals the one made with nothing kept."""

from __future__ import annotations

import pytest
from conftest import load_corpus

from npusched.schedule import pass_costs, pricing
from npusched.schedule.evaluator import evaluate
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.arch import OptimisationStrategy
from npusched.target.estimators import Estimator, blended, with_estimator


def _fresh(network, arch, schedule):
    pricing._PRICES.clear()
    pass_costs._MEMORIES.clear()
    return evaluate(network, arch, schedule)


@pytest.mark.parametrize(("model", "config"), [("person_detect", "u65-256_mid_dedicated256k"),
                                               ("kws_dscnn_int8", "u55-128_hee_shared")])
def test_an_evaluation_after_others_equals_one_made_afresh(model, config):
    arch, network = load_corpus(model, config)
    performance = heuristic_schedule(network, arch, OptimisationStrategy.PERFORMANCE)
    size = heuristic_schedule(network, arch, OptimisationStrategy.SIZE)
    assert performance.ops != size.ops  # schedules that differ in some passes, not in all
    models = [with_estimator(arch, e) for e in Estimator.single()] + [blended(arch, 0.5, 0.4, cap=1e5)]
    for schedule in (performance, size):
        expected = {m.estimator: _fresh(network, m, schedule) for m in models}
        pricing._PRICES.clear()
        pass_costs._MEMORIES.clear()
        for other in models:  # everything about the other schedule kept first
            evaluate(network, other, size if schedule is performance else performance)
        for priced in models + models[::-1]:
            assert evaluate(network, priced, schedule) == expected[priced.estimator]
    assert pricing._PRICES and pass_costs._MEMORIES
