"""The evaluator as judge: it accepts the schedules Vela itself chose and rejects broken ones.

Vela's own schedules (reproduced by the heuristic solver) over the golden grid — every corpus model under the five
configurations of golden/configs.json — must verify, and the evaluator's memory model must see what Vela saw:
per pass the "SRAM Used" of ``--verbose-schedule``, over the inference the "sram_memory_used" of summary.csv.
Schedules broken by hand from a real one (over the limit, inconsistent cascades, a missing pass) must be refused.
"""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest
from conftest import (
    MODELS,
    corpus_arch,
    corpus_evaluation,
    corpus_heuristic,
    corpus_network,
    golden_cases,
    golden_path,
)

from npusched.schedule.evaluator import cascade_rolling_buffers, evaluate, verify
from npusched.schedule.schedule import TensorPlacement
from npusched.vela.report import read_summary, read_verbose_schedule

CONFIG_NAMES = ("u55-128_hee_shared", "u55-128_hee_shared_size", "u55-256_hee_shared_arena128k",
                "u65-256_mid_dedicated256k", "u65-512_high_dedicated384k")
GRID = golden_cases(CONFIG_NAMES)


def _verify(config: str, model: str, schedule=None, **kwargs) -> list[str]:
    schedule = schedule if schedule is not None else corpus_heuristic(config, model)
    return verify(corpus_network(config, model), corpus_arch(config)[0], schedule, **kwargs)


def test_grid_is_the_golden_one():
    """54 of the 55 cases: Vela failed only on mobilenet_v2 with a 128 KiB arena."""
    assert len(GRID) == 54
    assert [(c, m) for c in CONFIG_NAMES for m in MODELS if golden_path(c, m).is_dir()] == GRID


@pytest.mark.parametrize("config,model", GRID)
def test_vela_schedule_verifies(config, model):
    """Vela's own choice is valid, within the fast storage it was given."""
    assert _verify(config, model, evaluation=corpus_evaluation(config, model)) == []


@pytest.mark.parametrize("config,model", GRID)
def test_sram_used_per_pass_is_velas(config, model):
    """At every pass the evaluator sees the fast storage Vela's scheduler saw (rolling buffers of cascades instead
    of whole feature maps, weight buffers, feature maps before they are moved into fast storage)."""
    golden = read_verbose_schedule(golden_path(config, model) / "vela_stdout.txt")
    evaluation = corpus_evaluation(config, model)
    assert [c.sram_used for c in evaluation.ops] == [op.sram_used_bytes for sg in golden for op in sg.ops]
    assert list(evaluation.sram_used_peaks) == [max(op.sram_used_bytes for op in sg.ops) for sg in golden]


@pytest.mark.parametrize("config,model", GRID)
def test_peak_is_velas_sram_memory_used(config, model):
    """The whole-inference peak is the fast storage Vela allocates (summary.csv "sram_memory_used", KiB), CPU
    operators' tensors included (keyword_scrambled_8bit's SVDF states: 5,408 bytes in all)."""
    with open(golden_path(config, model) / "summary.csv", newline="") as handle:
        row = next(csv.DictReader(handle))
    vela = round(float(row["sram_memory_used"]) * 1024)
    evaluation = corpus_evaluation(config, model)
    assert evaluation.network_peak_fast_storage == vela
    if len(corpus_network(config, model).subgraphs) == 1 and model != "dtln":  # dtln: variables live across the run
        assert evaluation.peak_fast_storage == vela


def test_prefetch_slack_of_a_sliced_but_unbuffered_op():
    """str_ww optimised for size: Vela slices an op's weights, finds the slices do not fit and reads the whole
    weights in place, but the next op still hides its weight DMA only under the planned last slice. The schedule
    records that depth and the evaluator prices it, landing on Vela's total."""
    config, model = "u55-128_hee_shared_size", "str_ww_int8"
    schedule = corpus_heuristic(config, model)
    quirky = [o for o in schedule.ops if o.slack_ofm_depth is not None and not o.weight_buffering.is_buffered]
    assert quirky
    vela = float(read_summary(golden_path(config, model) / "summary.csv")["cycles_total"])
    assert corpus_evaluation(config, model).total_cycles == vela
    plain = schedule.with_ops(replace(o, slack_ofm_depth=None) for o in quirky)
    assert evaluate(corpus_network(config, model), corpus_arch(config)[0], plain).total_cycles != vela


# --------------------------------------------------------------------------------------------------------------
# Broken schedules (from mobilenet_v2 on a U65 with 256 KiB of dedicated SRAM: cascades, feature maps in DRAM)

BROKEN = ("u65-256_mid_dedicated256k", "mobilenet_v2_224_int8")


def _cascaded_pair():
    """The first producer/consumer pair inside a cascade, as (network op, op schedule) each."""
    network, schedule = corpus_network(*BROKEN), corpus_heuristic(*BROKEN)
    (sg,) = network.subgraphs
    for prev, op in zip(sg.ops, sg.ops[1:], strict=False):
        a, b = schedule.op(prev.index), schedule.op(op.index)
        if a.cascade is not None and a.cascade == b.cascade:
            return (prev, a), (op, b)
    raise AssertionError("no cascade in the schedule")


def test_limit_just_below_the_peak_is_exceeded():
    evaluation = corpus_evaluation(*BROKEN)
    peak = evaluation.peak_fast_storage
    assert peak > 0
    assert _verify(*BROKEN, evaluation=evaluation, limit=peak) == []
    problems = _verify(*BROKEN, evaluation=evaluation, limit=peak - 1)
    assert len(problems) == 1 and f"fast storage use {peak} bytes" in problems[0], problems


def test_extra_feature_map_in_fast_storage_is_over_the_limit():
    """Moving the largest feature map left in DRAM (the 224x224x3 input) into the SRAM overflows the 256 KiB."""
    arch = corpus_arch(BROKEN[0])[0]
    schedule = corpus_heuristic(*BROKEN)
    in_dram = [(fm, place) for fm, place in schedule.tensors if place.mem_area != arch.fast_storage_mem_area]
    fm, place = max(in_dram, key=lambda item: item[0].shape.elements())
    assert fm.shape.elements() + corpus_evaluation(*BROKEN).peak_fast_storage > arch.arena_cache_size
    moved = replace(schedule, tensors=tuple((f, TensorPlacement(arch.fast_storage_mem_area, p.format) if f is fm else p)
                                            for f, p in schedule.tensors))
    problems = _verify(*BROKEN, moved)
    assert any("exceeds the limit of 262144 bytes" in p for p in problems), problems


def test_explicit_rolling_buffer_equal_to_velas_changes_nothing():
    network, schedule = corpus_network(*BROKEN), corpus_heuristic(*BROKEN)
    (sg,) = network.subgraphs
    rolling = cascade_rolling_buffers(sg, schedule)
    assert rolling
    explicit = schedule.with_ops(replace(schedule.op(i), rolling_buffer=shape) for i, shape in rolling.items())
    arch = corpus_arch(BROKEN[0])[0]
    assert evaluate(network, arch, explicit).memory == corpus_evaluation(*BROKEN).memory
    assert _verify(*BROKEN, explicit) == []


def test_consumer_stripe_taller_than_its_rolling_buffer_is_rejected():
    """The consumer's stripes grow while the rolling buffer stays as sized for the old ones."""
    (_, producer), (op, consumer) = _cascaded_pair()
    schedule = corpus_heuristic(*BROKEN)
    (sg,) = corpus_network(*BROKEN).subgraphs
    buffer = cascade_rolling_buffers(sg, schedule)[op.index]
    taller = buffer.height + producer.ofm_stripe.height
    assert consumer.ofm_stripe.height + taller < op.ofm.shape.height
    broken = replace(consumer, rolling_buffer=buffer,
                     ofm_stripe=consumer.ofm_stripe.with_height(consumer.ofm_stripe.height + taller),
                     ifm_stripe=consumer.ifm_stripe.with_height(consumer.ifm_stripe.height + taller * 2))
    problems = _verify(*BROKEN, schedule.with_ops([broken]))
    assert any(p.startswith(f"op {op.index} ") and "rolling buffer" in p for p in problems), problems


def test_ifm_stripe_short_of_what_the_ofm_stripe_reads_is_rejected():
    (_, _), (op, consumer) = _cascaded_pair()
    schedule = corpus_heuristic(*BROKEN)
    broken = replace(consumer, ofm_stripe=consumer.ofm_stripe.with_height(consumer.ofm_stripe.height + 2))
    problems = _verify(*BROKEN, schedule.with_ops([broken]))
    assert any(p.startswith(f"op {op.index} ") and "IFM stripe" in p for p in problems), problems


def test_missing_op_is_rejected():
    schedule = corpus_heuristic(*BROKEN)
    dropped = schedule.ops[len(schedule.ops) // 2]
    broken = replace(schedule, ops=tuple(o for o in schedule.ops if o is not dropped))
    problems = _verify(*BROKEN, broken)
    assert any(p.startswith(f"op {dropped.op_index} ") and "no schedule entry" in p for p in problems), problems
    notes = evaluate(corpus_network(*BROKEN), corpus_arch(BROKEN[0])[0], broken).notes
    assert any("no schedule entry" in n for n in notes)
