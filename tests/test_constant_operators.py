"""Operators of constants computed when compiling (normalise/constant_operators.py): an unrolled GRU's zero initial
state through its recurrent FULLY_CONNECTED."""

from __future__ import annotations

from pathlib import Path

from conftest import CONFIGS
from test_normalise import _assert_exact

from npusched.app.pipeline import run
from npusched.frontend.normalise import GraphRecipe, Site, normalise
from npusched.frontend.normalise.constant_operators import CONSTANT_OPERATORS
from npusched.frontend.normalise.flatbuffer import unpack_model
from npusched.frontend.tflite_reader import parse_tflite
from npusched.netgen import generate
from npusched.vela.command import run_options_from_vela_args

GRU_LAYERS = 2
GATES_BYTES = 192  # 3 gates x 64 units, int8: a recurrent FULLY_CONNECTED's output


def _sites(raw: bytes) -> list[Site]:
    """The rewrite's sites on a model with nothing before it to fold."""
    model = unpack_model(raw)
    return [plan.site for plan in CONSTANT_OPERATORS.find(model, model.subgraphs[0])]


def test_a_zero_states_recurrent_fully_connected_is_computed_exactly_when_compiling() -> None:
    """Each layer's first step multiplies the zero state by the recurrent kernel (a FULLY_CONNECTED of constants)
    and splits the result into the three gates: both operators become constants, per layer, with the values the
    reference interpreter computes for them at run time (every tensor the two models share bit-exact)."""
    raw = generate("gru", 60, 0)
    normalised, record = normalise(raw)
    assert record.sites_of(CONSTANT_OPERATORS) == 2 * GRU_LAYERS
    assert f"computed {2 * GRU_LAYERS} operators of constants when compiling" in record.describe()
    before, after = parse_tflite(raw).op_counts(), parse_tflite(normalised).op_counts()
    assert before["FULLY_CONNECTED"] - after["FULLY_CONNECTED"] == GRU_LAYERS
    folded = {site.tensor for site in _sites(raw)}
    assert len(folded) == 2 * GRU_LAYERS
    written = unpack_model(normalised).subgraphs[0]
    produced = {written.tensors[i].name.decode() for op in written.operators for i in op.outputs}
    assert not folded & produced
    assert _assert_exact(raw, normalised) > 20


def test_a_16x8_grus_state_is_computed_exactly_too() -> None:
    """16x8 quantisation (int16 activations, int64 biases): the interpreter's int16 kernels give the constants."""
    raw = generate("gru", 60, 0, int16=True)
    normalised, record = normalise(raw)
    assert record.sites_of(CONSTANT_OPERATORS) == 2 * GRU_LAYERS
    assert _assert_exact(raw, normalised) > 20


def test_a_keras_rnns_folded_fill_is_computed_onwards() -> None:
    """Keras writes the zero state as a FILL at the run-time batch; once folded, the same operators follow it."""
    _, record = normalise(generate("gru", 60, 0, keras_style=True))
    assert record.sites_of(CONSTANT_OPERATORS) == 2 * GRU_LAYERS


def test_computing_the_state_when_compiling_lowers_the_gru_peak_by_the_gates(tmp_path: Path) -> None:
    """The first layer's zero-state gates were live from the network's first step to the second layer's: the
    least peak of `--optimise Size` (proven least both ways) drops by exactly their bytes."""
    raw = generate("gru", 60, 0)
    peaks = []
    for name, skip in (("computed", ()), ("as_is", [site.key for site in _sites(raw)])):
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(normalise(raw, GraphRecipe(skipped_sites=frozenset(skip)))[0])
        result = run(run_options_from_vela_args(path, CONFIGS["u55-128_hee_shared_size"], solver="cpsat",
                                                time_limit_seconds=20.0, workers=1, deterministic=True,
                                                normalise=False))
        assert result.solver_report is not None and result.solver_report.peak_proven_minimal
        assert result.evaluation is not None
        peaks.append(result.evaluation.peak_fast_storage)
    assert peaks[1] - peaks[0] == GATES_BYTES
