"""An attention layer's softmax computed a band of heads at a time where fast storage is short
(softmax_bands.split_bytes_for): a transformer Vela legacy cannot fit in a 96 KiB arena fits, and compiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from npusched.app.pipeline import run
from npusched.frontend.normalise import SOFTMAX_BAND_BYTES, split_bytes_for
from npusched.netgen import generate
from npusched.run import RunOptions
from npusched.vela.backend import compile_schedule

ARENA_BYTES = 96 * 1024


def test_softmaxes_are_split_smaller_only_where_fast_storage_is_short() -> None:
    assert split_bytes_for(4 * 1024 * 1024, least_memory=False) == 1024 * 1024  # a quarter of the arena
    assert split_bytes_for(128 * 1024, least_memory=False) == SOFTMAX_BAND_BYTES
    assert split_bytes_for(4 * 1024 * 1024, least_memory=True) == SOFTMAX_BAND_BYTES


@pytest.mark.slow
def test_a_transformer_fits_an_arena_its_attention_softmax_alone_overruns(tmp_path: Path) -> None:
    """At the attention softmax's peak Vela's decomposition holds its int32 maps of all heads at once, more than
    the arena (the heuristic, Vela legacy's schedule, needs more); in bands of heads the schedule fits, and Vela's
    backend compiles it within the arena with its estimate equal."""
    model = tmp_path / "transformer.tflite"
    model.write_bytes(generate("transformer", 60, 0))
    options = RunOptions(model_path=model, accelerator_config="ethos-u55-256",
                         config_files=("Arm/vela.ini",), system_config="Ethos_U55_High_End_Embedded",
                         memory_mode="Shared_Sram", arena_cache_size=ARENA_BYTES, solver="cpsat",
                         time_limit_seconds=30.0, workers=1, deterministic=True)
    result = run(options)
    assert result.normalisation is not None
    assert "SOFTMAX split into 2 row bands" in result.normalisation.normalisation.describe()
    assert result.solver_report is not None
    assert result.solver_report.heuristic_peak_fast_storage_bytes is not None
    assert result.solver_report.heuristic_peak_fast_storage_bytes > ARENA_BYTES
    assert result.evaluation is not None and result.evaluation.allocation.size_bytes <= ARENA_BYTES
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
