"""Pricing passes in forked processes: the same candidate space as pricing them in one."""

from __future__ import annotations

import time

import pytest
from conftest import load_corpus

from npusched.schedule.options import clear_caches
from npusched.solvers.cpsat import candidates, pricing_pool
from npusched.solvers.cpsat.model import NetworkFacts
from npusched.target import weights as wts
from npusched.target.estimators import Estimator, with_estimator


def _facts():
    """(architecture, facts of the first subgraph) of person_detect (60 passes) under both cost models, fresh."""
    arch, network = load_corpus("person_detect", "u55-128_hee_shared")
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
    candidates.clear_caches()
    wts.clear_caches()
    arch, facts = _facts()
    assert pricing_pool.price_in_processes(arch, facts, positions, 2, None)
    assert facts.priced == alone.priced
    # the parent knows every encoding the processes made: encoding a priced pass's weights again encodes nothing
    wts.take_new_stream_sizes()
    encoded = 0
    for pos, (full, _) in facts.priced.items():
        op = facts.sg.ops[pos]
        for option in (o for options in full.values() for o in options if op.weights is not None):
            wts.encode_op_weights(arch, op, option.block_config.ofm_block.depth, (0, op.ofm.shape.depth))
            encoded += 1
    assert encoded > len(positions) and not wts.take_new_stream_sizes()


def test_out_of_time_says_so() -> None:
    candidates.clear_caches()  # nothing priced before (another test's kinds would be taken)
    arch, facts = _facts()
    for processes in (2, 1):
        assert not pricing_pool.price_in_processes(arch, facts, range(len(facts.sg.ops)), processes,
                                                   time.monotonic() - 1)
    assert len(facts.priced) < len(facts.sg.ops)


def test_usable_processes_are_bounded_by_the_workers() -> None:
    assert pricing_pool.usable_processes(1) == 1
    assert 1 <= pricing_pool.usable_processes(64) <= 64


def test_price_tables_from_processes_are_the_same() -> None:
    """The candidates' price tables worked out in two processes are those one process works out (dedicated fast
    storage, so that tables have placement columns), keyed by this process's maps."""
    from npusched.solvers.cpsat.model import whole_network_data
    from npusched.solvers.heuristic import heuristic_schedule

    arch, network = load_corpus("person_detect", "u65-256_mid_dedicated256k")
    arch = with_estimator(arch, Estimator.BOTH)
    references = (heuristic_schedule(network, arch),)
    one = whole_network_data(NetworkFacts(network, arch), references, True, processes=1)
    candidates.clear_caches()  # priced again, in the processes
    two = whole_network_data(NetworkFacts(network, arch), references, True, processes=2)
    assert len(one[0].candidates) >= pricing_pool.MIN_CHUNKS * 2 * pricing_pool.CHUNK_CANDIDATES
    assert any(table.movable for table in one[0].tables)
    for a, b in zip(one, two, strict=True):
        assert [c.key for c in a.candidates] == [c.key for c in b.candidates]
        assert a.tables == b.tables
        for candidate, table in zip(b.candidates, b.tables, strict=True):  # this process's maps, not copies
            assert all(any(fm is m for m in candidate.boundary) for fm in table.movable)


@pytest.mark.slow
def test_a_run_past_its_deadline_exits_though_its_processes_were_killed_mid_answer(tmp_path) -> None:
    """Large answers are still being sent when the deadline passes and the processes are killed: the caller gets
    None and its process exits (with a process pool's shared result queue, a reader left waiting for the rest of
    a killed process's answer kept the interpreter from exiting: a 30 s run never ended)."""
    import subprocess
    import sys

    script = tmp_path / "killed.py"
    script.write_text(
        "import time\n"
        "from npusched.solvers.cpsat.pricing_pool import fork_map\n"
        "def work(item):\n"
        "    time.sleep(0.05)\n"
        "    return b'x' * 3_000_000\n"
        # 64 items of 0.05 s at least in two processes cannot be done by a deadline 0.3 s ahead, however fast
        "for _ in range(5):\n"
        "    assert fork_map(work, list(range(64)), 2, time.monotonic() + 0.3, 1) is None\n"
        "print('done')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
