"""Zoo cells whose CP-SAT schedule Vela's backend refused or priced otherwise, compiled as npusched's own answer
(not a fallback) with Vela's estimate equal to the evaluator's. Three are rules of Vela's command stream for a
cascade: a rolling buffer holds the rows the stream asks the producer for (not only those the kernel reads), a
producer written through a view of another shape is not cascaded, and a nearest-neighbour up-sampling ends a
cascade on even stripes (the replay of the stream, ``npusched.vela.rolling_check``, finds no row read that its
buffer does not hold). One is pricing: Vela's estimate reads a standalone activation packed into the pass
(``NpuOp.reported_activation``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONFIGS, EXPORTS_DIR

from npusched.app.pipeline import load_network, run
from npusched.schedule.rules import pulled_buffer_height, rows_past_the_kernel, writes_a_view
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args

SIZE = "u55-128_hee_shared_size"


def _network(model: str, config: str):
    return load_network(run_options_from_vela_args(EXPORTS_DIR / f"{model}.tflite", CONFIGS[config],
                                                   solver="cpsat"))[1]


def test_vela_asks_a_strided_valid_pass_of_an_odd_map_for_a_row_past_its_kernel() -> None:
    """Vela ends an IFM stripe at its bottom skirt (SAME's padding): a 2x2 stride-2 VALID pool of an 11-row map is
    asked 3 rows per output row, so its producer runs one row further ahead (``rows_past_the_kernel``)."""
    network = _network("kws_cnn_49x40", SIZE)
    pool = next(op for op in network.npu_ops if op.op_type == "MaxPool" and op.ifm.shape.height == 11)
    assert (pool.kernel.height, pool.kernel.stride_y) == (2, 2)
    assert rows_past_the_kernel(pool) == 1
    assert pulled_buffer_height(1, 2, 11, rows_past_the_kernel(pool)) == 3
    assert all(rows_past_the_kernel(op) == 0 for op in network.npu_ops if op.kernel.stride_y == 1)


def test_an_up_sampling_repeat_written_on_a_view_is_found() -> None:
    """The any-aspect up-sampling's repeat writes its [1, 32, 24, 8] map as [1, 32, 1, 192]: the one such pass of
    the zoo's up-sampling model."""
    network = _network("unit_upsample", SIZE)
    assert [op.name.rsplit("/", 2)[-2:] for op in network.npu_ops if writes_a_view(op)] == [["repeat1", "grown"]]


def _compiles_own_schedule(model: str, config: str, tmp_path: Path, cascaded: bool = True) -> None:
    """CP-SAT's schedule (10 s, deterministic) compiles as the answer with Vela's estimate equal; ``cascaded``:
    it holds a rolling buffer (the rules under test are a cascade's)."""
    result = run(run_options_from_vela_args(EXPORTS_DIR / f"{model}.tflite", CONFIGS[config], solver="cpsat",
                                            time_limit_seconds=10, workers=1, deterministic=True))
    if cascaded:
        assert any(op.cascade is not None and op.rolling_buffer is not None for op in result.schedule.ops)
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed and compiled.written == "answer", compiled.warnings()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["kws_cnn_49x40", "pt_kws_cnn"])
def test_a_pool_of_an_odd_map_cascaded_in_a_pulled_buffer_compiles(tmp_path: Path, model: str) -> None:
    """Keras 3 and PyTorch (via onnx2tf) exports under --optimise Size, where CP-SAT cascades that pool in a
    rolling buffer of Vela's pull order: Vela's backend refused both ("a rolling buffer is too shallow") when the
    buffer was one row short."""
    _compiles_own_schedule(model, SIZE, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["u55-128_hee_shared", SIZE])
def test_a_cascade_of_up_samplings_compiles(tmp_path: Path, config: str) -> None:
    """Vela's backend refused the zoo's up-sampling model on ethos-u55-128: "Negative address offset" (a 1-row
    stripe of a 2x nearest resize ending a cascade) and, under Size, "a rolling buffer is too shallow" (the repeat
    written on a view cascaded into its reader)."""
    _compiles_own_schedule("unit_upsample", config, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["u55-128_hee_shared", "u55-256_hee_shared_arena128k", "u65-256_mid_dedicated256k"])
def test_an_int16_sigmoid_run_as_an_average_pool_is_priced_as_vela_reports_it(tmp_path: Path, config: str) -> None:
    """The 16x8 export's SIGMOID and TANH run as AvgPool passes whose activation Vela's command stream adds after
    scheduling; its estimate of them (about 4,170 cycles on ethos-u55-128) was twice npusched's (2,112)."""
    network = _network("unit_activations_16x8", config)
    assert {op.reported_activation for op in network.npu_ops if op.activation is None
            and op.attr("pass_activation") is not None} == {"Sigmoid", "Tanh"}
    _compiles_own_schedule("unit_activations_16x8", config, tmp_path, cascaded=False)
