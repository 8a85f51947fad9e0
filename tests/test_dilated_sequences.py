"""Causal convolutions dilated by more than 2 computed undilated on a [T / d, d] view of the sequence
(normalise/dilated_sequences.py): exact, without the zero taps Vela legacy spreads such kernels with, compiled."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CONFIGS
from test_normalise import _assert_exact

from npusched.app.pipeline import run
from npusched.frontend.normalise import GraphRecipe, normalise
from npusched.frontend.normalise.dilated_sequences import DILATED_SEQUENCES
from npusched.frontend.normalise.flatbuffer import unpack_model
from npusched.frontend.tflite_reader import parse_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import lower_model
from npusched.netgen import generate
from npusched.target.estimators import load_architecture
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args


def _dilations(data: bytes) -> list[int]:
    """The dilation of every convolution of the model (the larger of its two factors)."""
    model = unpack_model(data)
    return [max(op.builtinOptions.dilationWFactor, op.builtinOptions.dilationHFactor)
            for op in model.subgraphs[0].operators if hasattr(op.builtinOptions, "dilationWFactor")]


def _macs(data: bytes) -> int:
    model = parse_tflite(data)
    validate_model(model)
    return sum(op.macs for op in lower_model(model, load_architecture("ethos-u55-128")).npu_ops)


@pytest.mark.parametrize("keras_style", [False, True])
def test_a_tcns_large_dilations_are_computed_undilated_and_exactly(keras_style: bool) -> None:
    """Every convolution dilated by more than 2 is rewritten (none is left), each tensor the two models share is
    bit-exact, and the NPU makes fewer multiply-accumulates than with Vela's zero taps."""
    raw = generate("tcn", 60, 0, keras_style=keras_style)
    normalised, record = normalise(raw)
    sites = [site.key for site in record.applied if site.rewrite == DILATED_SEQUENCES.name]
    with_zero_taps = normalise(raw, GraphRecipe(skipped_sites=frozenset(sites)))[0]
    large = sum(1 for d in _dilations(generate("tcn", 60, 0)) if d > 2)  # the plain export's, same layers
    assert large > 0 and len(sites) == large == record.sites_of(DILATED_SEQUENCES)
    assert max(_dilations(normalised)) <= 2
    assert _macs(normalised) < _macs(with_zero_taps)
    assert _assert_exact(raw, normalised) > 20


@pytest.mark.slow
@pytest.mark.parametrize("passes", [60, 50])
def test_the_tcn_without_zero_taps_compiles(tmp_path: Path, passes: int) -> None:
    """Vela legacy folds each view's row padding into its convolution and prices CP-SAT's schedule as npusched.
    At 50 passes a convolution's output is also read through the next layer's view: Vela keeps it linear, and so
    must the schedule (its layout is the lowering's, decided before the reshape is packed away)."""
    path = tmp_path / "tcn.tflite"
    path.write_bytes(generate("tcn", passes, 0))
    result = run(run_options_from_vela_args(path, CONFIGS["u55-128_hee_shared"], solver="cpsat",
                                            time_limit_seconds=20.0, workers=1, deterministic=True))
    assert result.normalisation is not None
    assert result.normalisation.normalisation.sites_of(DILATED_SEQUENCES) > 0
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
