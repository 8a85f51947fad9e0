"""A layer norm's constant broadcast both ways written at the output's shape (normalise/broadcast_operands.py): the
MULs Vela legacy's semantic rule leaves to the CPU run on the NPU, exactly, and Vela's backend compiles them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONFIGS
from test_normalise import _assert_exact

from npusched.app.pipeline import run
from npusched.frontend.normalise import GraphRecipe, normalise
from npusched.frontend.normalise.broadcast_operands import BROADCAST_OPERANDS
from npusched.frontend.tflite_reader import parse_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import lower_model
from npusched.netgen import generate
from npusched.target.estimators import load_architecture
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args

PASSES = 40


def _cpu_operators(data: bytes) -> list[tuple[str, str]]:
    """(operator, output name) of every operator left on the CPU."""
    model = parse_tflite(data)
    validate_model(model)
    return sorted((op.tflite_op, op.name) for op in lower_model(model, load_architecture("ethos-u55-128")).cpu_ops)


@pytest.mark.parametrize("keras_style", [False, True])
def test_a_layer_norms_gamma_is_written_at_the_output_shape_and_runs_on_the_npu(keras_style: bool) -> None:
    """Each layer norm's MUL([1, T, 1], gamma [D]) leaves the CPU, nothing else moves (the attention's
    BATCH_MATMULs run on the NPU either way: normalisation reads their right operands transposed), and every tensor
    the two models share is bit-exact."""
    raw = generate("transformer", PASSES, 0, keras_style=keras_style)
    normalised, record = normalise(raw)
    muls = [name for kind, name in _cpu_operators(raw) if kind == "MUL"]
    assert len(muls) >= 2 and record.sites_of(BROADCAST_OPERANDS) == len(muls)
    sites = frozenset(f"{BROADCAST_OPERANDS.name}:{name}" for name in muls)
    left_alone = normalise(raw, GraphRecipe(skipped_sites=sites))[0]
    before, after = _cpu_operators(left_alone), _cpu_operators(normalised)
    assert sorted(set(before) - set(after)) == sorted(("MUL", name) for name in muls) and set(after) < set(before)
    assert "BATCH_MATMUL" not in {kind for kind, _ in before}
    assert _assert_exact(raw, normalised) > 20


@pytest.mark.slow
def test_the_transformer_with_its_layer_norms_on_the_npu_compiles(tmp_path: Path) -> None:
    """Vela legacy, given the normalised file, makes the same NPU subgraphs (the bridge checks it) and prices
    CP-SAT's schedule as npusched does."""
    model = tmp_path / "transformer.tflite"
    model.write_bytes(generate("transformer", PASSES, 0))
    result = run(run_options_from_vela_args(model, CONFIGS["u55-128_hee_shared"], solver="cpsat",
                                            time_limit_seconds=10.0, workers=1, deterministic=True))
    assert "MUL" not in {op.tflite_op for op in result.network.cpu_ops}
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
