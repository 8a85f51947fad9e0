"""Cascades through residual joins and gates (``--optimise Size``): the map a later pass of the cascade reads as
second operand stays in its producer's rolling buffer, deepened for the rows the passes between run ahead.

The oracles are Vela's backend (it compiles the schedule and its estimate equals the evaluator's) and a replay of
Vela's own command stream (``npusched.vela.rolling_check``): no stripe reads a row its buffer no longer holds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import CONFIGS

from npusched.app.pipeline import run
from npusched.netgen import generate
from npusched.schedule.evaluator import evaluate
from npusched.schedule.rules import lagged_buffer_height
from npusched.schedule.verification import verify
from npusched.solvers.cpsat.candidates import cascade_candidate, vela_single_candidates
from npusched.solvers.cpsat.model import NetworkFacts
from npusched.solvers.peak_floor import network_floor
from npusched.vela.backend import VelaRefusal, compile_schedule
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.rolling_check import rolling_buffer_problems

SIZE = "u55-128_hee_shared_size"
# netgen's MobileNet-V2 (60 passes, seed 0): pass 11 makes a 32 x 32 x 24 map that passes 12 (1x1 expansion),
# 13 (3x3 depthwise) and 14 (1x1 projection) refine and pass 15 adds back: a residual block.
BLOCK = (11, 15)


def test_lagged_buffer_height_counts_the_rows_the_passes_between_run_ahead() -> None:
    # One-row stripes, two 3x3 passes between: before the reader's row r, the producer has made r + 4.
    assert lagged_buffer_height([1, 1, 1, 1], [3, 3], 32) == 5
    # The producer's 4-row stripes: it makes rows up to the next multiple of 4.
    assert lagged_buffer_height([4, 1, 1], [3], 32) == 6
    # Never more than the whole map.
    assert lagged_buffer_height([8, 8, 8], [1], 8) == 8


def _stripe(rows: tuple[int, int]) -> SimpleNamespace:
    return SimpleNamespace(start_coord=[0, rows[0], 0, 0], end_coord=[1, rows[1], 4, 16])


def test_the_replay_finds_a_read_of_an_overwritten_row() -> None:
    from ethosu.vela.tensor import TensorSubPurpose

    buffer = SimpleNamespace(name="skip", sub_purpose=TensorSubPurpose.RollingBufferY, storage_shape=[1, 2, 4, 16])

    def command(name: str, reads: tuple[int, int] | None, writes: tuple[int, int] | None) -> SimpleNamespace:
        return SimpleNamespace(is_npu_pass_command=lambda: True, ps=SimpleNamespace(name=name),
                               ifm_tensor=buffer if reads else None, ifm_box=_stripe(reads or (0, 0)),
                               ifm2_tensor=None, ifm2_box=None,
                               ofm_tensor=buffer if writes else SimpleNamespace(sub_purpose=None),
                               ofm_box=_stripe(writes or (0, 0)))

    fine = [command("make", None, (0, 1)), command("make", None, (1, 2)), command("read", (0, 2), None)]
    assert rolling_buffer_problems(fine) == []
    late = fine[:2] + [command("make", None, (2, 3)), command("read", (0, 2), None)]
    assert rolling_buffer_problems(late) == [
        "'read' reads rows 0..0 of 'skip', which its 2-row rolling buffer no longer (or not yet) holds"]
    early = [command("read", (0, 1), None)]
    assert len(rolling_buffer_problems(early)) == 1


@pytest.fixture(scope="module")
def block_schedule(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The heuristic's run of the generated MobileNet-V2 under Size, and a schedule of it that runs the residual
    block ``BLOCK`` as one cascade with one-row stripes (every other pass alone, with Vela's block config)."""
    path = tmp_path_factory.mktemp("joins") / "mobilenet_v2.tflite"
    path.write_bytes(generate("mobilenet_v2", 60, 0))
    options = run_options_from_vela_args(path, CONFIGS[SIZE], solver="heuristic")
    result = run(options)
    network, arch = result.network, result.arch
    facts = NetworkFacts(network, arch).facts(0)
    first, last = BLOCK
    assert facts.link_reach[first] == last  # the cascade through pass 12 must reach the add
    stripes = [facts.sg.ops[pos].ofm.shape.with_height(1) for pos in range(first, last + 1)]
    block = cascade_candidate(arch, facts, first, stripes, buffered=False)
    assert block is not None
    ops = [block.ops[pos - first] if first <= pos <= last else vela_single_candidates(arch, facts, pos)[0].ops[0]
           for pos in range(len(facts.sg.ops))]
    return result, replace(result.schedule, ops=tuple(ops))


def test_a_residual_block_cascades_with_its_skip_in_a_deepened_rolling_buffer(block_schedule: tuple) -> None:
    result, schedule = block_schedule
    network, arch = result.network, result.arch
    skip_reader = network.npu_ops[BLOCK[0] + 1]
    buffer = schedule.op(skip_reader.index).rolling_buffer
    # A 1x1 pass reads one row a stripe: Vela's buffer would be 2 rows, the pull order's 1; the add reads the skip
    # after the expansion and the depthwise pass between have run ahead of it: 3 (lagged_buffer_height's bound).
    assert buffer is not None and buffer.height == 3
    evaluation = evaluate(network, arch, schedule)
    assert verify(network, arch, schedule, evaluation) == []
    # The skip (32 x 32 x 24, 16-deep bricks: 32 KiB) is never whole: the block needs less than run pass by pass.
    facts = NetworkFacts(network, arch).facts(0)
    alone = replace(schedule, ops=tuple(vela_single_candidates(arch, facts, pos)[0].ops[0]
                                        for pos in range(len(network.npu_ops))))
    assert _block_peak(network, evaluation) < _block_peak(network, evaluate(network, arch, alone))


def _block_peak(network: object, evaluation: object) -> int:
    memory = evaluation.memory[0]  # type: ignore[attr-defined]
    steps = [memory.op_steps[op.index] for op in network.npu_ops[BLOCK[0]:BLOCK[1] + 1]]  # type: ignore[attr-defined]
    return max(memory.usage[min(steps):max(steps) + 1])


@pytest.mark.slow
def test_vela_compiles_the_join_cascade_and_refuses_a_shallow_buffer(block_schedule: tuple, tmp_path: Path) -> None:
    result, schedule = block_schedule
    network, arch = result.network, result.arch
    compiled = compile_schedule(replace(result, schedule=schedule, evaluation=evaluate(network, arch, schedule)),
                                tmp_path / "deep")
    assert compiled.agreed, compiled.warnings()
    # A one-row buffer loses each skip row before the add reads it (the depthwise pass between reads a row ahead;
    # npusched's bound, blind to padding, keeps one row more than Vela's order needs: 3, not 2).
    skip_reader = network.npu_ops[BLOCK[0] + 1]
    deep = schedule.op(skip_reader.index)
    shallow = replace(schedule, ops=tuple(replace(op, rolling_buffer=deep.rolling_buffer.with_height(1))
                                          if op.op_index == skip_reader.index else op for op in schedule.ops))
    assert any("needs a rolling buffer of 3 rows" in problem
               for problem in verify(network, arch, shallow, evaluate(network, arch, shallow)))
    with pytest.raises(VelaRefusal, match="rolling buffer is too shallow"):
        compile_schedule(replace(result, schedule=shallow, evaluation=evaluate(network, arch, shallow)),
                         tmp_path / "shallow")


@pytest.mark.slow
def test_a_network_neither_core_fits_fits_with_joins(tmp_path: Path) -> None:
    """The generated MobileNet-V2 in a 128 KiB shared arena (ethos-u55-256, the default objective): both Vela cores'
    schedules over-run it (legacy's smallest, under --optimise Size, needs 141,312 bytes), nothing fits within
    Vela's cascade rules, so the search is made again with joins and fits; Vela's backend compiles it within the
    arena with its estimate equal."""
    path = tmp_path / "mobilenet_v2.tflite"
    path.write_bytes(generate("mobilenet_v2", 60, 0))
    arena = 128 * 1024
    result = run(run_options_from_vela_args(path, CONFIGS["u55-256_hee_shared_arena128k"], solver="cpsat",
                                            time_limit_seconds=60, workers=1, deterministic=True))
    assert len(result.floors) == 2 and all(floor.peak_fast_storage_bytes > arena for floor in result.floors)
    # No schedule Vela's cascade rules allow fits (their floor, gates held as CP-SAT's own space holds them).
    assert network_floor(result.network, result.arch, held_operands=True).npu.floor_bytes > arena
    _, evaluation = result.solved()
    assert verify(result.network, result.arch, result.schedule, evaluation) == []
    assert evaluation.allocation.size_bytes <= arena
    assert any(op.cascade is not None and op.rolling_buffer is not None for op in result.schedule.ops)
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed and compiled.allocation_fits, compiled.warnings()
