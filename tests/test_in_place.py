"""Concatenation inputs written in place (npusched/lowering/in_place.py) and Vela's backend compiling them.

The oracle for the backend is Vela's own command stream: where the heuristic's schedule (Vela legacy's graph)
copies a convolution's output into the concatenation, CP-SAT's graph has the convolution write there itself,
and the NPU operation Vela emits must address the same bytes of the concatenation.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CONFIGS, EXPORTS_DIR

from npusched.app import pipeline
from npusched.app.cli import main
from npusched.app.graph_choice import IN_PLACE_WRITES, Graphs
from npusched.app.pipeline import load_network, run
from npusched.lowering.in_place import IN_PLACE_OF
from npusched.netgen import generate
from npusched.netgen.flatbuffer import serialise
from npusched.netgen.graph import GraphBuilder
from npusched.run import RunResult
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.schedule import BufferKind, EncodedWeightsRef, WeightBuffering
from npusched.solvers.cpsat import SearchBudget, solve_cpsat
from npusched.solvers.heuristic import heuristic_schedule
from npusched.target.weights import encode_op_weights
from npusched.vela.backend import compile_schedule
from npusched.vela.command import last_line, run_options_from_vela_args, run_vela, vela_hardware_args


def _generated(factory: pytest.TempPathFactory, arch: str) -> Path:
    """A Keras-style generated network of 40 passes, seed 1."""
    path = factory.mktemp("in_place") / f"{arch}.tflite"
    path.write_bytes(generate(arch, 40, 1, keras_style=True))
    return path


@pytest.fixture(scope="module")
def densenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generated(tmp_path_factory, "densenet")


@pytest.fixture(scope="module")
def unet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generated(tmp_path_factory, "unet")


@pytest.fixture(scope="module")
def branches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Inception-like reduction: a max pool, a strided convolution and an ADD of two, concatenated."""
    g = GraphBuilder(np.random.default_rng(0))
    h = g.conv(g.input((1, 16, 16, 32)), 32)
    pooled = g.pool(h, "MAX", (3, 3), (2, 2))
    strided = g.conv(h, 32, (3, 3), (2, 2), quant=h.quant)
    left, right = g.conv(h, 16, (3, 3), (2, 2)), g.conv(h, 16, (1, 1), (2, 2))
    added = g.binary("ADD", left, right, left.shape, quant=h.quant)
    out = g.conv(g.concat([pooled, strided, added], quant=h.quant), 16)
    path = tmp_path_factory.mktemp("in_place") / "branches.tflite"
    path.write_bytes(serialise(g.network([out], "in-place writers of three kinds")))
    return path


@pytest.fixture(scope="module")
def upsampled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A feature-pyramid step: a skip map (read twice) concatenated with a 2x nearest-neighbour up-sampling."""
    g = GraphBuilder(np.random.default_rng(0))
    skip = g.conv(g.input((1, 32, 32, 16)), 32)
    low = g.conv(g.pool(skip, "MAX", (2, 2), (2, 2)), 32, quant=skip.quant)
    out = g.conv(g.concat([skip, g.resize(low, 2, "NEAREST")], quant=skip.quant), 16)
    path = tmp_path_factory.mktemp("in_place") / "upsampled.tflite"
    path.write_bytes(serialise(g.network([out], "an up-sampled concatenation input")))
    return path


@pytest.fixture(scope="module")
def fully_connected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two FULLY_CONNECTED heads on one vector, concatenated: the second writes at channel 48."""
    g = GraphBuilder(np.random.default_rng(0))
    x = g.input((1, 64))
    first = g.fully_connected(x, 48, "RELU")
    out = g.fully_connected(g.concat([first, g.fully_connected(x, 32, quant=first.quant)], quant=first.quant), 16)
    path = tmp_path_factory.mktemp("in_place") / "fully_connected.tflite"
    path.write_bytes(serialise(g.network([out], "fully connected heads, concatenated")))
    return path


@pytest.fixture(scope="module")
def nasnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generated(tmp_path_factory, "nasnet")


def _options(model: Path, config: str, **overrides: Any) -> Any:
    return run_options_from_vela_args(model, CONFIGS[config], **overrides)


def test_a_convolution_takes_the_place_of_the_copy_of_its_output(densenet: Path) -> None:
    """Each pass writing in place writes where the copy it replaces wrote; the graph is otherwise Vela legacy's
    (the heuristic's)."""
    _, legacy, _ = load_network(_options(densenet, "u55-128_hee_shared", solver="heuristic"))
    _, ours, _ = load_network(_options(densenet, "u55-128_hee_shared", solver="cpsat"))
    copies = {op.name: op for op in legacy.npu_ops}
    writers = [op for op in ours.npu_ops if op.attr(IN_PLACE_OF)]
    assert len(writers) == 8 and len(legacy.npu_ops) - len(ours.npu_ops) == len(writers)
    for op in writers:
        copy = copies[str(op.attr(IN_PLACE_OF))]
        assert copy.op_type == "AvgPool" and copy.ifm.tensor.name == op.name
        assert op.ofm.tensor == copy.ofm.tensor and op.ofm.offset == copy.ofm.offset
        assert op.ofm.shape == copy.ifm.shape and op.op_type == "Conv2DBias"
    assert {op.name for op in ours.npu_ops} == {op.name for op in legacy.npu_ops} - {
        str(op.attr(IN_PLACE_OF)) for op in writers}


def _first_writers(network: Any) -> list[Any]:
    """The in-place writers that are their concatenation's first writer: its live range starts with them."""
    sg = network.subgraphs[0]
    return [op for op in sg.ops if op.attr(IN_PLACE_OF) and sg.writers(op.ofm.tensor)[0] == op.index]


def test_an_input_copied_first_is_written_in_place_while_memory_allows(unet: Path) -> None:
    """A U-Net copies its skip input after the up-sampled one, so a write in place starts the concatenation's
    live range sooner, with the skip still live. That is taken while every step it touches fits the arena with
    every feature map resident, or wherever feature maps live off fast storage; never over a full arena."""
    roomy = _first_writers(load_network(_options(unet, "u55-128_hee_shared", solver="cpsat"))[1])
    off_chip = _first_writers(load_network(_options(unet, "u65-512_high_dedicated384k", solver="cpsat"))[1])
    full = _first_writers(load_network(_options(unet, "u55-128_hee_shared", solver="cpsat",
                                                arena_cache_size=150_000))[1])
    assert len(roomy) == len(off_chip) == 3 and full == []
    for op in roomy:
        assert op.op_type == "Conv2DBias" and op.ofm.offset.depth == 0


def test_writing_in_place_saves_the_copies(densenet: Path) -> None:
    """CP-SAT on the graph with the copies (Vela's) and without (npusched's), deterministic: the copies' cycles are
    saved, and the run, which searches both, keeps the writes and says why."""
    options = _options(densenet, "u55-128_hee_shared", solver="cpsat", estimator="vela-default",
                       objective="estimator", time_limit_seconds=60, workers=1, deterministic=True)
    loaded = pipeline.load(options)
    arch = loaded.arch
    graphs = Graphs(loaded.build, loaded.recipe)
    assert IN_PLACE_WRITES in graphs.sites
    with_copies = graphs.variant(loaded.recipe.without({IN_PLACE_WRITES.key}))
    in_place, copies = (solve_cpsat(variant.network, arch,
                                    SearchBudget(time_limit_seconds=30, workers=1, deterministic=True))
                        for variant in (graphs.own, with_copies))
    assert in_place.status == copies.status == "optimal"
    assert in_place.objective_cycles < 0.98 * copies.objective_cycles
    result = run(options)
    assert result.evaluation.total_cycles == pytest.approx(in_place.objective_cycles)
    decision = next(d for d in result.sites if d.site == IN_PLACE_WRITES)
    assert decision.applied and decision.reason.startswith("kept: CP-SAT")


def _npu_ofm_addresses(monkeypatch: pytest.MonkeyPatch, result: RunResult, output_dir: Path) -> tuple[Any, dict]:
    """Compile ``result``; per pass name, the OFM offset (from the OFM tensor's address), shape and strides and
    the IFM offset and shape of each NPU operation Vela emits ("ofm", ...), and the source of each DMA it is given
    ("dma", address)."""
    import ethosu.vela.high_level_command_to_npu_op as commands

    seen: dict[str, list[tuple[Any, ...]]] = {}
    convert = commands.convert_command_to_npu_op

    def recording(cmd: Any, arch: Any) -> Any:
        op = convert(cmd, arch)
        ps = getattr(cmd, "ps", None)
        name = ps.primary_op.name if ps is not None and ps.primary_op is not None else "?"
        if hasattr(op, "ofm"):  # addresses from the start of the OFM (IFM) tensor
            seen.setdefault(name, []).append(("ofm", op.ofm.tiles.addresses[0] - cmd.ofm_tensor.address,
                                              op.ofm.shape, op.ofm.strides,
                                              op.ifm.tiles.addresses[0] - cmd.ifm_tensor.address, op.ifm.shape))
        else:
            seen.setdefault(name, []).append(("dma", op.src.address))
        return op

    monkeypatch.setattr(commands, "convert_command_to_npu_op", recording)
    return compile_schedule(result, output_dir), seen


@pytest.mark.parametrize("name", ["densenet", "unet", "branches", "upsampled", "fully_connected"])
def test_vela_writes_the_in_place_slice_where_the_copy_wrote(name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               request: pytest.FixtureRequest) -> None:
    config, model = "u55-128_hee_shared", request.getfixturevalue(name)
    legacy = run(_options(model, config, solver="heuristic"))
    ours = run(_options(model, config, solver="cpsat", time_limit_seconds=60, workers=1, deterministic=True))
    with monkeypatch.context() as patch:
        legacy_backend, legacy_ops = _npu_ofm_addresses(patch, legacy, tmp_path / "legacy")
    ours_backend, ours_ops = _npu_ofm_addresses(monkeypatch, ours, tmp_path / "ours")
    assert legacy_backend.agreed and ours_backend.agreed, ours_backend.warnings()
    writers = [op for op in ours.network.npu_ops if op.attr(IN_PLACE_OF)]
    assert writers
    if name == "branches":
        assert sorted(op.op_type for op in writers) == ["Add", "Conv2DBias", "MaxPool"]
    if name == "fully_connected":
        assert [op.op_type for op in writers] == ["FullyConnected"] * 2
    if name == "upsampled":  # the resize reads its input as in Vela's graph, where it writes a map of its own
        (op,) = writers
        assert op.op_type == "ResizeNearestNeighbor"
        assert [e[4:] for e in ours_ops[op.name]] == [e[4:] for e in legacy_ops[op.name]]
    for op in writers:
        copy = str(op.attr(IN_PLACE_OF))
        ours_writes = [e[1:] for e in ours_ops[op.name] if e[0] == "ofm"]
        (copy_at, copy_shape, copy_strides), = [e[1:4] for e in legacy_ops[copy] if e[0] == "ofm"]
        # Each in-place write lands where the copy did in the concatenation, in the same shape and layout (in
        # depth slices, one after another, where its weights are double-buffered).
        assert ours_writes[0][0] == copy_at and {e[2] for e in ours_writes} == {copy_strides}
        assert {(e[1].height, e[1].width) for e in ours_writes} == {(copy_shape.height, copy_shape.width)}
        assert sum(e[1].depth for e in ours_writes) == copy_shape.depth


@pytest.mark.slow
def test_a_tcn_under_size_needs_no_more_sram_than_either_core(tmp_path: Path) -> None:
    """kws_tcn_49x40 under --optimise Size on ethos-u55-128: its causal convolutions pad in hardware
    (``npusched.frontend.normalise.padded_convolutions``; computed in parts written in place into a concatenation
    before, a 32-byte part was live beside the three 1,568-byte maps of the default core's own peak: 4,736 bytes
    against its 4,704). The compiled file's SRAM, as Vela reports it, is no more than either core's on the same
    file."""
    options = _options(EXPORTS_DIR / "kws_tcn_49x40.tflite", "u55-128_hee_shared_size", solver="cpsat",
                       time_limit_seconds=30, workers=1, deterministic=True)
    result = run(options)
    compiled = compile_schedule(result, tmp_path / "ours")
    assert compiled.agreed, compiled.warnings()
    for core in ("legacy", "default"):
        done = run_vela(options, tmp_path / core, core=core)
        assert done.returncode == 0, last_line(done)
        (summary,) = (tmp_path / core).glob("*_summary_*.csv")
        with summary.open() as handle:
            core_bytes = round(float(next(csv.DictReader(handle))["sram_memory_used"]) * 1024)
        assert compiled.vela_allocation_bytes is not None and compiled.vela_allocation_bytes <= core_bytes, core
    assert not any(op.name.endswith("_main") and "Pad" in op.name for op in result.network.npu_ops)


def test_sliced_weights_of_an_in_place_write_reach_their_channels(nasnet: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights double-buffered in two depth slices on a convolution writing at channel 64 of a concatenation:
    Vela's command stream finds each slice's weights by OFM channel, so it must fetch two different streams and
    write the second slice one brick (16 channels) after the first."""
    options = _options(nasnet, "u65-256_mid_dedicated256k", solver="cpsat")
    arch, network, _ = load_network(options)
    schedule = heuristic_schedule(network, arch, "Performance")
    op = next(op for op in network.npu_ops if op.attr(IN_PLACE_OF) and op.ofm.offset.depth == 64)
    choice = schedule.op(op.index)
    depth = choice.block_config.ofm_block.depth
    slices = (0, 16, 32)
    encoded = encode_op_weights(arch, op, depth, slices)
    buffering = WeightBuffering(BufferKind.DOUBLE, slices, tuple(encoded.double_buffer_sizes[:2]))
    sliced = replace(choice, encoded_weights=EncodedWeightsRef.of(encoded, depth), slack_ofm_depth=None,
                     weight_buffering=buffering)
    schedule = replace(schedule, ops=tuple(sliced if o.op_index == op.index else o for o in schedule.ops))
    evaluation = evaluate(network, arch, schedule)
    assert verify(network, arch, schedule, evaluation) == []
    result = RunResult(options=options, arch=arch, network=network, status="feasible", schedule=schedule,
                       evaluation=evaluation)
    backend, ops = _npu_ofm_addresses(monkeypatch, result, tmp_path)
    assert backend.agreed, backend.warnings()
    (_, first, first_shape, strides, *_), (_, second, second_shape, *_) = [e for e in ops[op.name] if e[0] == "ofm"]
    assert first_shape.depth == second_shape.depth == 16
    assert second - first == strides.depth  # the next 16 channels: one brick of the NHCWB16 concatenation on
    assert len({entry[1] for entry in ops[op.name] if entry[0] == "dma"}) == 2


def test_a_saved_heuristic_schedule_replays_on_its_own_graph(densenet: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A document made by the heuristic (Vela's graph, copies and all) replays with the default solver."""
    hardware = vela_hardware_args(CONFIGS["u55-128_hee_shared"])
    saved = tmp_path / "heuristic.json"
    assert main([str(densenet), *hardware, "--solver", "heuristic", "--quiet", "--json", str(saved)]) == 0
    assert main([str(densenet), *hardware, "--schedule", str(saved), "--quiet"]) == 0
    assert "heuristic" in capsys.readouterr().out
