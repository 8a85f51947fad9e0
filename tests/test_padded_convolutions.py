"""PADs longer than half a convolution's kernel padded in hardware (normalise/padded_convolutions.py), the zero taps
that read only padding dropped (lowering/rewrite_helpers.py), and Vela's backend taught the same (vela/lessons.py).

The oracles: a direct convolution in numpy for the dropped taps, Vela's own compile and estimate of npusched's
schedule, and each Vela core's own schedule of the exported file, priced by its own model.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS, EXPORTS_DIR

from npusched.app.pipeline import run
from npusched.lowering.rewrite_helpers import without_padding_only_taps
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args


def _convolution(ifm: np.ndarray, weights: np.ndarray, padding: tuple[int, int, int, int],
                 dilation_xy: tuple[int, int]) -> np.ndarray:
    """Stride-1 convolution of an [H, W, I] map by [KH, KW, I, O] weights, zero padding (top, left, bottom,
    right)."""
    top, left, bottom, right = padding
    padded = np.pad(ifm, ((top, bottom), (left, right), (0, 0)))
    d_x, d_y = dilation_xy
    rows = padded.shape[0] - (weights.shape[0] - 1) * d_y
    columns = padded.shape[1] - (weights.shape[1] - 1) * d_x
    out = np.zeros((rows, columns, weights.shape[3]), dtype=np.int64)
    for i in range(weights.shape[0]):
        for j in range(weights.shape[1]):
            out += padded[i * d_y:i * d_y + rows, j * d_x:j * d_x + columns] @ weights[i, j]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_dropped_zero_taps_leave_every_output_as_it_was(seed: int) -> None:
    """Random kernels with zero rows and columns at their edges, random padding: the kernel without the taps
    that read only padding, with the padding left, gives the same outputs; a tap reading the map stays."""
    rng = np.random.default_rng(seed)
    weights = rng.integers(-127, 128, size=(5, 4, 3, 2))
    zero_top, zero_left, zero_bottom, zero_right = rng.integers(0, 3, size=4)
    weights[:zero_top], weights[:, :zero_left] = 0, 0
    weights[5 - zero_bottom:], weights[:, 4 - zero_right:] = 0, 0
    padding = tuple(int(p) for p in rng.integers(0, 5, size=4))
    dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    ifm = rng.integers(-128, 128, size=(9, 8, 3))
    trimmed = without_padding_only_taps(weights, 0, (1, 1), dilation, padding)  # type: ignore[arg-type]
    assert trimmed is not None or not (zero_top or zero_left or zero_bottom or zero_right) or min(padding) == 0
    kept, left_padding = trimmed if trimmed is not None else (weights, padding)
    assert np.array_equal(_convolution(ifm, kept, left_padding, dilation),
                          _convolution(ifm, weights, padding, dilation))  # type: ignore[arg-type]
    assert all(0 <= after <= before for after, before in zip(left_padding, padding, strict=True))


def test_no_tap_is_dropped_along_a_strided_axis_or_that_reads_the_map() -> None:
    weights = np.zeros((3, 3, 1, 1), dtype=np.int8)
    weights[1, 1] = 1
    assert without_padding_only_taps(weights, 0, (2, 2), (1, 1), (1, 1, 1, 1)) is None
    assert without_padding_only_taps(weights, 0, (1, 1), (1, 1), (0, 0, 0, 0)) is None
    kept, padding = without_padding_only_taps(weights, 0, (1, 1), (1, 1), (1, 0, 2, 0))  # type: ignore[misc]
    assert kept.shape == (1, 3, 1, 1) and padding == (0, 0, 1, 0)
    assert without_padding_only_taps(weights, [0, 3], (1, 1), (1, 1), (1, 1, 1, 1)) is None  # mixed zero points


@pytest.mark.parametrize(("model", "config"), [("kws_tcn_49x40", "u55-128_hee_shared"),
                                               ("kws_tcn_49x40", "u65-512_high_dedicated384k"),
                                               ("unit_pad_crop", "u55-128_hee_shared"),
                                               ("unit_pad_crop", "u65-256_mid_dedicated256k")])
def test_vela_compiles_the_hardware_padding_and_the_answer_is_under_both_cores(model: str, config: str,
                                                                                tmp_path: Path) -> None:
    """Real Keras exports whose PADs Vela legacy copies (a TCN's causal ones; a one-sided ZeroPadding2D): Vela's
    backend compiles npusched's schedule with no PAD pass left, its estimate equal to npusched's, and the answer
    is no slower than either core's own schedule, each by its own model (the TCN was 1.02-1.36x the default
    core's while it copied the PADs)."""
    options = run_options_from_vela_args(EXPORTS_DIR / f"{model}.tflite", CONFIGS[config], solver="cpsat",
                                         time_limit_seconds=60, workers=1, deterministic=True)
    result = run(options)
    assert result.solver_report is not None and result.solver_report.status == "optimal"
    compiled = compile_schedule(result, tmp_path)
    assert compiled.agreed, compiled.warnings()
    with compiled.per_layer_csv_path.open() as handle:
        assert not any(row["TFLite_operator"] == "PAD" for row in csv.DictReader(handle))
    floors = {floor.core: floor for floor in result.floors}
    for core in ("vela-legacy", "vela-default"):
        assert result.cycles_by_estimator[core] <= floors[core].total_cycles, core
