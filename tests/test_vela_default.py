"""Issue 20: the default (C++) core's cost model (``--estimator vela-default``) and its schedules as a baseline
(``--solver vela-default``), checked against what that core itself chose and estimated (tests/data/golden/
vela-5.2.0-regor: its debug database and summary)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import CONFIGS, EXPORTS_DIR, GOLDEN_ROOT, load_corpus, run_options

from npusched.app.pipeline import load_network, run
from npusched.ir import MemArea, TensorFormat
from npusched.run import RunOptions
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.schedule import TensorPlacement
from npusched.solvers.cpsat import objective_rank
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.estimators import Estimator
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.default_core import compare_default_core, read_default_core_ops, schedule_from_default_core
from npusched.vela.report import read_summary

REGOR_DIR = GOLDEN_ROOT / "vela-5.2.0-regor"
DEFAULT = {"estimator": "vela-default"}


def _golden(config: str, model: str) -> Path:
    return REGOR_DIR / config / model


def test_estimator_names() -> None:
    assert Estimator("vela") is Estimator.VELA_LEGACY  # the older name still parses
    assert Estimator.VELA is Estimator.VELA_LEGACY
    assert {"vela", "vela-legacy", "vela-default", "contention"} <= set(Estimator.names())


def test_every_estimator_totals_a_run() -> None:
    result = run(run_options("u55-128_hee_shared", "micro_speech_int8", solver="heuristic"))
    totals = result.cycles_by_estimator
    assert {"vela-legacy", "vela-default", "contention", "vela"} <= set(totals)
    assert totals["vela"] == totals["vela-legacy"] == result.evaluation.total_cycles


# Models whose passes are the default core's one for one (no op the two graph optimisers decompose differently).
SAME_GRAPH = ("kws_dscnn_int8", "micro_speech_int8", "person_detect", "str_ww_int8", "vww_96_int8")


# (str_ww_int8 and person_detect on u65-256 are off: weight buffering of a few ops, see docs/results/fidelity.md)
CASES = [("u55-128_hee_shared", model) for model in SAME_GRAPH] + [
    ("u65-256_mid_dedicated256k", model) for model in ("kws_dscnn_int8", "micro_speech_int8", "vww_96_int8")]


@pytest.mark.parametrize(("config", "model"), CASES)
def test_default_core_schedule_priced_as_it_prices_it(config: str, model: str) -> None:
    """Its own schedule, priced by npusched's evaluator under vela-default, costs what it says: the network
    total within 1% of its summary, and the NPU cycles of every op it schedules within 1% of its own."""
    arch, network = load_corpus(model, config, **DEFAULT)
    comparison = compare_default_core(network, arch, _golden(config, model), model)
    assert abs(comparison.cycles_error) <= 1.0, (comparison.cycles_ours, comparison.cycles_vela)
    off = [(op.name, op.npu_ours, op.npu_vela) for op in comparison.ops if abs(op.npu_error) > 1.0]
    assert not off, off[:3]
    assert len(comparison.ops) >= 27


def test_partial_blocks_count_only_micro_blocks_present() -> None:
    """The default core's first kws_dscnn convolution (OFM 25x5x64, block 10x6x16) costs fewer NPU cycles under
    its own model than under the legacy one, which counts 3 whole block rows where 2.5 are present."""
    config, model = "u55-128_hee_shared", "kws_dscnn_int8"
    arch, network = load_corpus(model, config, **DEFAULT)
    imported = schedule_from_default_core(network, arch, read_default_core_ops(_golden(config, model) /
                                                                                 "debug_db.xml"))
    first = network.subgraphs[0].ops[0]
    assert imported.matched[first.index].ofm_block.as_list() == [1, 10, 6, 16]
    default = evaluate(network, arch, imported.schedule).ops[0]
    legacy = evaluate(network, replace(arch, estimator=Estimator.VELA_LEGACY), imported.schedule).ops[0]
    assert default.op_cycles < legacy.op_cycles


def test_import_says_what_it_cannot_express() -> None:
    """keyword_scrambled's softmax runs on the NPU in the default core but not in npusched's graph: said."""
    config, model = "u55-128_hee_shared", "keyword_scrambled_8bit"
    arch, network = load_corpus(model, config, **DEFAULT)
    imported = schedule_from_default_core(network, arch, read_default_core_ops(_golden(config, model) /
                                                                                 "debug_db.xml"))
    assert any("have no npusched pass" in warning for warning in imported.warnings)
    assert imported.schedule.notes == imported.warnings


@pytest.mark.parametrize("config", ["u65-256_mid_dedicated256k", "u65-512_high_dedicated384k"])
def test_a_map_the_cpu_reads_is_never_in_dedicated_fast_storage(config: str) -> None:
    """The default core keeps keyword_scrambled's last NPU output in SRAM because its softmax, the reader, runs on
    the NPU there. In npusched's graph the CPU reads that map, and with Dedicated_Sram only the NPU addresses the
    SRAM: the verifier rejects that placement, in the default core's schedule and in one made so by hand, and
    accepts the heuristic's (Vela legacy's), which keeps it in DRAM."""
    model = "keyword_scrambled_8bit"
    arch, network = load_corpus(model, config, **DEFAULT)
    own = schedule_from_default_core(network, arch, read_default_core_ops(_golden(config, model) / "debug_db.xml"))
    problems = verify(network, arch, own.schedule)
    assert len(problems) == 1 and "output" in problems[0] and "where the CPU cannot read it" in problems[0]
    legacy = heuristic_schedule(network, arch)
    assert verify(network, arch, legacy) == []
    output = network.subgraphs[-1].outputs[0]
    place = legacy.placement(output)
    assert place is None or place.mem_area != arch.fast_storage_mem_area
    tensors = dict(legacy.tensors)
    tensors[output] = TensorPlacement(arch.fast_storage_mem_area, place.format if place else TensorFormat.NHWC)
    moved = replace(legacy, tensors=tuple(tensors.items()))
    assert any("where the CPU cannot read it" in problem for problem in verify(network, arch, moved))


@pytest.mark.slow
def test_a_rejected_default_core_schedule_is_reported_rejected() -> None:
    """--solver vela-default prices the default core's schedule even where npusched's verifier rejects it, but says
    so: status ``rejected`` (not ``feasible``) and the reason as a warning line. Read onto Vela legacy's graph
    (``default_core_graph=False``, as the comparisons with CP-SAT read it), where the CPU runs keyword_scrambled's
    softmax, the default core's schedule leaves the softmax's input in Dedicated_Sram, which the CPU cannot read;
    on the default core's own graph the NPU reads it (the schedule is feasible there)."""
    result = run(run_options("u65-512_high_dedicated384k", "keyword_scrambled_8bit", solver="vela-default",
                             default_core_graph=False, **DEFAULT))
    assert result.status == "rejected" and result.evaluation is not None
    assert any("rules reject" in warning and "where the CPU cannot read it" in warning for warning in result.warnings)
    own_graph = run(run_options("u65-512_high_dedicated384k", "keyword_scrambled_8bit", solver="vela-default",
                                **DEFAULT))
    assert own_graph.status == "feasible"


@pytest.mark.parametrize("config", CONFIGS)
def test_the_default_cores_graph_runs_its_int16_softmax(config: str) -> None:
    """keyword_scrambled ends in an int8 -> int16 SOFTMAX: Vela legacy leaves it to the CPU, the default core runs
    it on the NPU in 29 passes (its tail differs from the 8-bit one). Read onto that graph (--solver vela-default),
    the default core's schedule costs what it says it does, within 1%, in every configuration; before, its
    softmax passes were missing from npusched's total (-15% to -17%)."""
    model = "keyword_scrambled_8bit"
    _, legacy = load_corpus(model, config, **DEFAULT)
    assert any(op.tflite_op == "SOFTMAX" for op in legacy.cpu_ops)
    arch, network = load_corpus(model, config, solver="vela-default", **DEFAULT)
    assert not any(op.tflite_op == "SOFTMAX" for op in network.cpu_ops)
    assert sum(op.tflite_op == "SOFTMAX" for op in network.npu_ops) == 29
    comparison = compare_default_core(network, arch, _golden(config, model), model)
    assert abs(comparison.cycles_error) <= 1.0, (comparison.cycles_ours, comparison.cycles_vela)


@pytest.mark.parametrize("config", CONFIGS)
def test_the_default_cores_graph_copies_and_clamps_lstm_states(config: str) -> None:
    """dtln's two LSTMs: the default core reads each state variable through a copy and clamps the sigmoid gates
    and the new cell state in passes of their own (1x1 AvgPools), 6 passes per LSTM more than Vela legacy.
    Read onto that graph, its schedule costs what it says, within 1%, and every op it ran has an npusched pass
    (before: -2.5% to -9.9%, 16 ops unmatched)."""
    model = "dtln"
    _, legacy = load_corpus(model, config, **DEFAULT)
    arch, network = load_corpus(model, config, solver="vela-default", **DEFAULT)

    def lstm_passes(net: Any) -> int:
        return sum(op.tflite_op == "UNIDIRECTIONAL_SEQUENCE_LSTM" for op in net.npu_ops)

    assert lstm_passes(network) == lstm_passes(legacy) + 2 * 6
    imported = schedule_from_default_core(network, arch, read_default_core_ops(_golden(config, model) /
                                                                                 "debug_db.xml"))
    assert not any("have no npusched pass" in warning for warning in imported.warnings), imported.warnings
    comparison = compare_default_core(network, arch, _golden(config, model), model)
    assert abs(comparison.cycles_error) <= 1.0, (comparison.cycles_ours, comparison.cycles_vela)


@pytest.mark.parametrize("config", CONFIGS)
def test_the_default_cores_graph_runs_an_nchw_transpose(config: str) -> None:
    """mobilenet_v2 (a PyTorch export) starts with a TRANSPOSE from NCHW to NHWC: the CPU's in Vela legacy's
    graph, two NPU passes in the default core's (each swapping two neighbouring axes), priced by its memory
    traffic. Each pass costs exactly what the default core says, and the network total is within 1% (before:
    -1.4% to -7.5%, both passes missing)."""
    model = "mobilenet_v2_224_int8"
    _, legacy = load_corpus(model, config, **DEFAULT)
    assert any(op.tflite_op == "TRANSPOSE" for op in legacy.cpu_ops)
    arch, network = load_corpus(model, config, solver="vela-default", **DEFAULT)
    assert not network.cpu_ops
    transposes = [op for op in network.npu_ops if op.op_type == "Transpose"]
    assert [op.ofm.shape.as_list() for op in transposes] == [[1, 224, 3, 224], [1, 224, 224, 3]]
    comparison = compare_default_core(network, arch, _golden(config, model), model)
    by_name = {op.name: op for op in comparison.ops}
    for op in transposes:
        assert by_name[op.name].cycles_ours == by_name[op.name].cycles_vela
    assert abs(comparison.cycles_error) <= 1.0, (comparison.cycles_ours, comparison.cycles_vela)


@pytest.mark.slow
def test_fidelity_to_the_default_core_over_the_corpus() -> None:
    """Issue 20's measure: priced with vela-default on the default core's graph, the default core's own schedules
    cost what it says within 1% in 53 of the 55 corpus x configuration cells. The two left are resnet_large on
    the two configurations that read weights from flash: the default core's weight encoder (in its C++ library,
    not in ethosu.mlw_codec) writes a 2.2% smaller stream."""
    off = []
    for config in CONFIGS:
        for golden in sorted(p for p in (REGOR_DIR / config).iterdir() if p.is_dir()):
            arch, network = load_corpus(golden.name, config, solver="vela-default", **DEFAULT)
            comparison = compare_default_core(network, arch, golden, golden.name)
            if abs(comparison.cycles_error) > 1.0:
                off.append((config, golden.name))
    assert off == [("u55-128_hee_shared_size", "resnet_large_ic_int8"),
                   ("u55-256_hee_shared_arena128k", "resnet_large_ic_int8")]


def test_every_golden_case_is_there() -> None:
    for config in CONFIGS:
        assert (REGOR_DIR / config / "kws_dscnn_int8" / "debug_db.xml").is_file()


@pytest.mark.slow
def test_solver_vela_default_runs_the_default_core() -> None:
    """--solver vela-default runs the vela CLI's default core and prices its schedule: the same figure as its
    golden output, read back (Vela is deterministic)."""
    config, model = "u55-128_hee_shared", "micro_speech_int8"
    result = run(run_options(config, model, solver="vela-default", **DEFAULT))
    arch, network = load_corpus(model, config, solver="vela-default", **DEFAULT)
    golden = compare_default_core(network, arch, _golden(config, model), model)
    assert result.evaluation is not None
    assert result.evaluation.total_cycles == golden.cycles_ours
    assert abs(golden.cycles_error) <= 1.0


@pytest.mark.slow
def test_the_default_core_over_the_arena_is_reported_over_the_limit() -> None:
    """With the 128 KiB arena of Shared_Sram the default core schedules mobilenet_v2 in 353.5 KiB of SRAM (its
    scheduler checks the arena only where it can spill feature maps elsewhere): --solver vela-default reports that
    schedule as over the limit, at the peak the default core itself reports, instead of as feasible."""
    config, model = "u55-256_hee_shared_arena128k", "mobilenet_v2_224_int8"
    result = run(run_options(config, model, solver="vela-default", **DEFAULT))
    assert result.evaluation is not None
    sram_used_bytes = float(read_summary(_golden(config, model) / "summary.csv")["sram_memory_used"]) * 1024
    assert result.evaluation.peak_fast_storage == sram_used_bytes > 131072
    assert result.status == "over_limit"
    assert any("over the limit of 131072 bytes" in warning for warning in result.warnings)


@pytest.mark.slow
def test_cpsat_never_worse_than_the_default_core_under_its_model() -> None:
    """Under --estimator vela-default CP-SAT starts from the default core's own schedule where that is faster than
    the heuristic's, so it is never worse than it; on ad01 under u65-512 it was (56,678 against 54,695 cycles)
    before the default core's schedule was its start."""
    config, model = "u65-512_high_dedicated384k", "ad01_int8"
    result = run(run_options(config, model, solver="cpsat", time_limit_seconds=20, workers=1, deterministic=True,
                             **DEFAULT))
    arch, network = load_corpus(model, config, **DEFAULT)
    own = compare_default_core(network, arch, _golden(config, model), model)
    assert result.evaluation is not None
    assert result.evaluation.total_cycles <= own.cycles_ours


def _pt_kws_cnn(**overrides: Any) -> RunOptions:
    return run_options_from_vela_args(EXPORTS_DIR / "pt_kws_cnn.tflite", CONFIGS["u55-128_hee_shared"], **overrides)


def test_a_transpose_run_as_a_block_swap_is_priced_as_the_default_cores_transpose() -> None:
    """pt_kws_cnn (onnx2tf) flattens its NCHW map: a TRANSPOSE [0, 3, 1, 2] of 1x12x2x32, which the normalisation
    writes as one H/W swap of a 24x32 view. Vela legacy runs that swap as a 1x1 AvgPool writing swapped strides; the
    default core, given the same normalised model, runs it as its Transpose and reports 768 cycles (416 NPU, 768
    SRAM access). Priced under vela-default as an AvgPool of depth 1 it cost 6,258-6,395, so CP-SAT's answer was
    1.06x the default core's own total by its model and the default core's schedule read back 12.6% over its own."""
    arch, network, _ = load_network(_pt_kws_cnn(solver="heuristic", **DEFAULT))
    swaps = [op for op in network.npu_ops if op.tflite_op == "TRANSPOSE"]
    assert [(op.op_type, op.ifm.shape.as_list()) for op in swaps] == [("AvgPool", [1, 24, 32, 1])]
    evaluation = evaluate(network, arch, heuristic_schedule(network, arch))
    cost = next(c for c in evaluation.ops if c.op_index == swaps[0].index)
    assert (cost.total_cycles, cost.npu_cycles, cost.access_cycles[MemArea.Sram]) == (768, 416, 768)
    # Vela legacy's model still prices the AvgPool it runs (as before)
    legacy_arch, legacy_network, _ = load_network(_pt_kws_cnn(solver="heuristic"))
    legacy = evaluate(legacy_network, legacy_arch, heuristic_schedule(legacy_network, legacy_arch))
    assert next(c.total_cycles for c in legacy.ops if c.op_index == swaps[0].index) == 1868


@pytest.mark.slow
def test_cpsat_on_a_block_swap_is_never_slower_than_the_default_core() -> None:
    """The promise on pt_kws_cnn under u55-128: the answer is within 0.2% of either core's own total by that core's
    model or faster (the default core's: 1.060x before its transpose was priced as the default core prices it;
    0.936x after), and the default core's own schedule read back costs its own total within 1%."""
    result = run(_pt_kws_cnn(solver="cpsat", time_limit_seconds=20, workers=1, deterministic=True))
    floors = {floor.core: floor for floor in result.floors}
    assert set(floors) == {"vela-legacy", "vela-default"}, result.missing_floors
    for core, floor in floors.items():
        assert result.cycles_by_estimator[core] <= 1.002 * floor.total_cycles, (core, result.cycles_by_estimator)
    default = floors["vela-default"]
    assert default.own_cycles is not None
    assert abs(default.cycles_by_estimator["vela-default"] / default.own_cycles - 1) <= 0.01


class _Stop(Exception):
    """Raised by the stand-in for CP-SAT once it has seen what it was given."""


@pytest.mark.slow
@pytest.mark.parametrize("config", ["u65-512_high_dedicated384k", "u55-128_hee_shared_size"])
def test_the_search_starts_from_the_better_core_by_the_objective(monkeypatch: pytest.MonkeyPatch,
                                                                  config: str) -> None:
    """Under --estimator vela-default (--objective estimator) CP-SAT starts from the better of the two cores'
    schedules by its objective (the second configuration optimises for size: least peak, then cycles), so it is
    never worse than either."""
    from npusched.app import cpsat_run

    given: list[Any] = []

    def stand_in(network: object, arch: object, budget: object, *, hint: Any, **kwargs: object) -> None:
        given.append(hint)
        raise _Stop

    monkeypatch.setattr(cpsat_run, "solve_cpsat", stand_in)
    model = "resnet8_ic_int8"  # the default core's schedule ranks first under both objectives
    with pytest.raises(_Stop):
        run(run_options(config, model, solver="cpsat", objective="estimator", **DEFAULT))
    arch, network = load_corpus(model, config, **DEFAULT)
    heuristic = heuristic_schedule(network, arch, arch.optimise)
    own = schedule_from_default_core(network, arch, read_default_core_ops(_golden(config, model) / "debug_db.xml"))
    ranked = sorted((objective_rank(evaluate(network, arch, s), arch), n)
                    for n, s in enumerate((heuristic, own.schedule)))
    assert given[0].ops == (heuristic, own.schedule)[ranked[0][1]].ops


def test_a_convolution_legacy_runs_fully_connected_takes_the_default_cores_decisions() -> None:
    """str_ww's last convolution (1x1 on a 1x1 map) is a fully connected pass named ``..._fc`` in npusched's (and
    Vela legacy's) graph; the default core keeps the convolution and its name. Matched to it, the pass runs with
    the default core's weight buffering and costs what that core says, within 1%."""
    config, model = "u65-256_mid_dedicated256k", "str_ww_int8"
    arch, network = load_corpus(model, config, **DEFAULT)
    core_ops = read_default_core_ops(_golden(config, model) / "debug_db.xml")
    imported = schedule_from_default_core(network, arch, core_ops)
    fc = next(op for op in network.npu_ops if op.name.endswith("_fc"))
    core_op = imported.matched[fc.index]
    assert (fc.op_type, core_op.operator, core_op.name) == ("FullyConnected", "Conv2D", fc.name.removesuffix("_fc"))
    assert imported.schedule.op(fc.index).weight_buffering.is_buffered == (core_op.buffering in ("Single", "Double"))
    priced = evaluate(network, arch, imported.schedule).ops[fc.index]
    assert abs(priced.npu_cycles - core_op.npu_cycles) <= 0.01 * core_op.npu_cycles, (priced.npu_cycles,
                                                                                     core_op.npu_cycles)


@pytest.mark.slow
def test_a_copy_read_back_from_the_default_core_keeps_vela_legacys_block(tmp_path: Path) -> None:
    """The default core runs a copy as an AvgPool, its IFM block as deep as its OFM's; read back as npusched's DMA
    copy it keeps Vela legacy's IFM block, which Vela's backend checks. A PyTorch-style GRU's 48-deep copies on
    ethos-u65-512: CP-SAT takes the default core's schedule as its floor, and its answer compiles."""
    from npusched.ir import NpuBlockType
    from npusched.netgen import generate
    from npusched.vela.backend import compile_schedule
    from npusched.vela.command import run_options_from_vela_args

    path = tmp_path / "gru.tflite"
    path.write_bytes(generate("gru", 80, 0, torch_style=True))
    result = run(run_options_from_vela_args(path, CONFIGS["u65-512_high_dedicated384k"], solver="cpsat",
                                            time_limit_seconds=20.0, workers=1, deterministic=True))
    assert result.schedule is not None
    deep_copies = [op for op in result.network.npu_ops if op.npu_block_type == NpuBlockType.Dma
                   and op.ofm.shape.depth > 32]
    assert deep_copies
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()


@pytest.mark.slow
def test_a_reshapes_copy_read_back_from_the_default_core_compiles(tmp_path: Path) -> None:
    """A Keras export's final RESHAPE, a DMA copy of a [1, 1, 128, 1] map into [1, 8, 16, 1]: the default core runs
    it as an AvgPool of its own shape, 16 deep; read back onto npusched's copy, the IFM block is Vela legacy's for
    the copy's own IFM (8 deep), or Vela's backend refuses the answer CP-SAT starts from it ("Vela rejects block
    config [4, 2, 16, 16]")."""
    from npusched.vela.backend import compile_schedule
    from npusched.vela.command import run_options_from_vela_args

    model = Path(__file__).resolve().parent / "data" / "exports" / "unit_reductions.tflite"
    result = run(run_options_from_vela_args(model, CONFIGS["u55-128_hee_shared"], solver="cpsat",
                                            time_limit_seconds=10.0, workers=1, deterministic=True))
    assert result.status != "fallback"
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
