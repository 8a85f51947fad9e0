"""The max schedule against Vela 5.2.0 (legacy core) on the u55-128_hee_shared configuration.

With Shared_Sram every corpus model fits, so Vela ships its ``<sg>_MAX_BUFFERED`` schedule: the golden verbose
schedule, per-layer CSV and summary CSV describe exactly the schedule ``max_schedule`` must rebuild, and the
figures ``evaluate`` must price.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
from conftest import golden_arch, golden_cases, golden_path, model_path

from npusched.frontend.tflite_reader import read_tflite
from npusched.ir import MemArea
from npusched.lowering.graph import lower_model
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.schedule import TensorPlacement, WeightBuffering
from npusched.solvers.max_schedule import max_schedule
from npusched.target.estimators import load_architecture
from npusched.target.performance import Direction, Purpose
from npusched.vela.report import read_per_layer, read_summary, read_verbose_schedule

# Configurations whose golden runs use Vela's max schedule: for every model on the first; on the second only for
# the models that fit the 128 KiB arena (MAX_CASES below).
CASES = golden_cases(("u55-128_hee_shared", "u55-256_hee_shared_arena128k"))
REL = 0.01  # 1 % tolerance on cycle figures


def _close(mine: float, ref: float) -> bool:
    return abs(mine - ref) <= REL * max(abs(ref), 1.0)


@functools.cache
def _arch(config: str = "u55-128_hee_shared"):
    return golden_arch(config)


@functools.cache
def _run(config: str, model: str):
    arch = _arch(config)
    network = lower_model(read_tflite(model_path(model)), arch)
    schedule = max_schedule(network, arch)
    return network, schedule, evaluate(network, arch, schedule)


@functools.cache
def _vela_schedules(config: str, model: str):
    return read_verbose_schedule(golden_path(config, model) / "vela_stdout.txt")


def _vela_uses_max(config: str, model: str) -> bool:
    return all(s.label.endswith("_MAX_BUFFERED") for s in _vela_schedules(config, model))


def _vela_ops(config: str, model: str):
    return [op for sched in _vela_schedules(config, model) for op in sched.ops]


def _vela_rows(config: str, model: str):
    return [row for group in read_per_layer(golden_path(config, model) / "per_layer.csv") for row in group]


MAX_CASES = [case for case in CASES if _vela_uses_max(*case)]


@pytest.mark.parametrize(("config", "model"), CASES)
def test_schedule_names_status_and_validity(config, model):
    network, schedule, evaluation = _run(config, model)
    schedules = _vela_schedules(config, model)
    if not _vela_uses_max(config, model):
        # Vela goes on to cascade because the max schedule does not fit; so must we.
        assert schedule.status == "over_limit"
        assert evaluation.peak_fast_storage >= _arch(config).arena_cache_size
        assert any("exceeds the limit" in p for p in verify(network, _arch(config), schedule, evaluation))
        return
    assert [schedule.name_for(sg.name) for sg in network.subgraphs] == [s.label for s in schedules]
    assert schedule.status == "fits"
    assert verify(network, _arch(config), schedule, evaluation) == []


@pytest.mark.parametrize(("config", "model"), MAX_CASES)
def test_block_configs_weight_buffers_and_depth_slices(config, model):
    network, schedule, _ = _run(config, model)
    ops = [op for sg in network.subgraphs for op in sg.ops]
    vela = _vela_ops(config, model)
    assert len(ops) == len(vela)
    mismatches = []
    for op, ref in zip(ops, vela, strict=True):
        mine = schedule.op(op.index)
        got = (mine.block_config.old_style(), list(mine.weight_buffering.buffer_sizes), list(mine.depth_slices),
               mine.ofm_stripe.as_list(), mine.ifm_stripe.as_list())
        want = (ref.block_config, ref.weight_buffer_bytes, ref.depth_slices, ref.ofm_stripe, ref.ifm_stripe)
        if got != want:
            mismatches.append((op.index, op.name, got, want))
        if op.weights is not None and ref.encoded_weights_bytes is not None:
            assert mine.encoded_weights.total_bytes == ref.encoded_weights_bytes, op.name
    assert mismatches == []


@pytest.mark.parametrize(("config", "model"), MAX_CASES)
def test_sram_used_per_op(config, model):
    _, _, evaluation = _run(config, model)
    vela = _vela_ops(config, model)
    assert [cost.sram_used for cost in evaluation.ops] == [op.sram_used_bytes for op in vela]


@pytest.mark.parametrize(("config", "model"), MAX_CASES)
def test_whole_inference_sram_usage_per_op(config, model):
    _, _, evaluation = _run(config, model)
    rows = _vela_rows(config, model)
    assert [cost.network_sram_used for cost in evaluation.ops] == [int(float(row["SRAM Usage"])) for row in rows]


@pytest.mark.parametrize(("config", "model"), MAX_CASES)
def test_op_and_npu_cycles_per_op(config, model):
    _, _, evaluation = _run(config, model)
    rows = _vela_rows(config, model)
    assert len(evaluation.ops) == len(rows)
    off = [(cost.op_index, cost.name, cost.total_cycles, float(row["Op Cycles"]), cost.npu_cycles, float(row["NPU"]))
           for cost, row in zip(evaluation.ops, rows, strict=True)
           if not (_close(cost.total_cycles, float(row["Op Cycles"])) and _close(cost.npu_cycles, float(row["NPU"])))]
    assert off == []
    assert [cost.macs for cost in evaluation.ops] == [int(row["MAC Count"]) for row in rows]
    access = [(cost.op_index, cost.name, area, cost.access_cycles[area], float(row[column]))
              for cost, row in zip(evaluation.ops, rows, strict=True)
              for area, column in ((MemArea.Sram, "SRAM AC"), (MemArea.OffChipFlash, "OffFlash AC"))
              if not _close(cost.access_cycles[area], float(row[column]))]
    assert access == []


@pytest.mark.parametrize(("config", "model"), MAX_CASES)
def test_network_totals(config, model):
    _, _, evaluation = _run(config, model)
    summary = read_summary(golden_path(config, model) / "summary.csv")
    assert _close(evaluation.total_cycles, float(summary["cycles_total"]))
    assert _close(evaluation.npu_cycles, float(summary["cycles_npu"]))
    assert _close(evaluation.access_cycles[MemArea.Sram], float(summary["cycles_sram_access"]))
    assert _close(evaluation.access_cycles[MemArea.OffChipFlash], float(summary["cycles_off_chip_flash_access"]))
    assert _close(evaluation.bytes_moved(MemArea.Sram), float(summary["sram_total_bytes"]))
    assert _close(evaluation.bytes_moved(MemArea.Sram, Purpose.Weights, Direction.Write),
                  float(summary["sram_weight_write_bytes"]))
    assert _close(evaluation.bytes_moved(MemArea.OffChipFlash), float(summary["off_chip_flash_total_bytes"]))
    assert evaluation.macs == int(summary["nn_macs"])
    assert evaluation.encoded_weight_bytes == int(summary["total_npu_encoded_weights"])
    # Vela's allocator can only add fragmentation to the peak of the live ranges; on these models it adds none.
    allocated = float(summary["sram_memory_used"]) * 1024
    assert evaluation.peak_fast_storage <= evaluation.network_peak_fast_storage == allocated


def test_verify_reports_broken_schedules():
    network, schedule, evaluation = _run("u55-128_hee_shared", "kws_dscnn_int8")
    arch = _arch()
    first = network.subgraphs[0].ops[0]
    buffered = schedule.op(first.index)
    assert buffered.weight_buffering.kind == "double"  # Vela streams this op's weights in two slices

    dropped = dataclasses.replace(schedule, ops=schedule.ops[1:])
    assert any("no schedule entry" in p for p in verify(network, arch, dropped))

    shrunk = schedule.with_ops([dataclasses.replace(
        buffered, weight_buffering=dataclasses.replace(buffered.weight_buffering, buffer_sizes=(16, 16)))])
    assert any("smaller than their slices" in p for p in verify(network, arch, shrunk))

    single = schedule.with_ops([dataclasses.replace(
        buffered, weight_buffering=WeightBuffering("single", buffered.depth_slices, (4432, 4432)))])
    assert any("single buffering needs 1 buffers" in p for p in verify(network, arch, single))

    resliced = schedule.with_ops([dataclasses.replace(
        buffered, weight_buffering=dataclasses.replace(buffered.weight_buffering, depth_slices=(0, 32, 64)))])
    assert any("differ from the encoded" in p for p in verify(network, arch, resliced))

    # Flash is read-only to the NPU (a window search once left three OFMs there; Vela's backend refused them).
    ofm = first.ofm.tensor
    in_flash = dataclasses.replace(schedule, tensors=tuple(
        (fm, TensorPlacement(MemArea.OffChipFlash, place.format) if fm == ofm else place)
        for fm, place in schedule.tensors))
    assert any("placed in read-only OffChipFlash" in p for p in verify(network, arch, in_flash))

    limit = evaluation.peak_fast_storage - 1
    assert any("exceeds the limit" in p for p in verify(network, arch, schedule, evaluation, limit=limit))
    assert verify(network, arch, schedule, evaluation, limit=evaluation.peak_fast_storage) == []


def test_unbuffered_schedule_costs_more_and_uses_less_fast_storage():
    network, schedule, evaluation = _run("u55-128_hee_shared", "kws_dscnn_int8")
    plain = schedule.with_ops(dataclasses.replace(op, weight_buffering=WeightBuffering(),
                                                  encoded_weights=None) for op in schedule.ops)
    # Without buffering every op reads its full-depth weights straight from flash while it runs.
    cost = evaluate(network, _arch(), plain)
    assert cost.peak_fast_storage < evaluation.peak_fast_storage
    assert cost.total_cycles > evaluation.total_cycles


def test_dedicated_sram_never_keeps_the_max_schedule():
    # With a dedicated SRAM acting as a cache in front of DRAM, Vela always goes on to cascade.
    config = golden_path("u65-256_mid_dedicated256k", "kws_dscnn_int8")
    assert not any(s.label.endswith("_MAX_BUFFERED") for s in read_verbose_schedule(config / "vela_stdout.txt"))
    arch = load_architecture("ethos-u65-256", ["Arm/vela.ini"], "Ethos_U65_Mid_End", "Dedicated_Sram_256KB")
    network = lower_model(read_tflite(model_path("kws_dscnn_int8")), arch)
    schedule = max_schedule(network, arch)
    assert arch.is_spilling_enabled()
    assert schedule.status == "over_limit"
