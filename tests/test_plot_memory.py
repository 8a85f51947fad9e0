"""`--plot-memory`: fast storage per step split into feature maps, rolling buffers and weight buffers.

person_detect on ethos-u55-128 with a 32 KiB arena: Vela's heuristic cascades to fit, so all three parts appear.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import CONFIGS, model_path, run_options

from npusched.app.cli import main
from npusched.app.pipeline import run
from npusched.schedule.evaluator import cascade_rolling_buffers, subgraphs_of
from npusched.schedule.memory_breakdown import memory_breakdown
from npusched.vela.command import vela_hardware_args

CONFIG = "u55-128_hee_shared"
ARENA_BYTES = 32768
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cascaded():
    return run(run_options(CONFIG, "person_detect", solver="heuristic", arena_cache_size=ARENA_BYTES))


def test_parts_add_up_to_the_evaluators_use_and_peak(cascaded) -> None:
    breakdowns = memory_breakdown(cascaded.network, cascaded.schedule, cascaded.evaluation)
    assert len(breakdowns) == len(cascaded.evaluation.memory)
    for parts, memory in zip(breakdowns, cascaded.evaluation.memory, strict=True):
        assert parts.subgraph == memory.name
        assert parts.total == memory.usage
    assert max(max(b.total) for b in breakdowns) == cascaded.evaluation.peak_fast_storage


def test_every_part_is_there_when_the_schedule_cascades_and_buffers_weights(cascaded) -> None:
    (parts,) = memory_breakdown(cascaded.network, cascaded.schedule, cascaded.evaluation)
    assert max(parts.feature_maps) > 0 and max(parts.weight_buffers) > 0
    # The rolling buffers are the cascaded IFMs, sized as the evaluator sizes them.
    (sg,) = subgraphs_of(cascaded.network)
    rolling = cascade_rolling_buffers(sg, cascaded.schedule)
    assert rolling, "the heuristic no longer cascades person_detect in 32 KiB: pick another case"
    smallest_rolling = min(shape.elements() for shape in rolling.values())  # int8: one byte an element
    assert max(parts.rolling_buffers) >= smallest_rolling


def test_without_cascades_there_are_no_rolling_buffers() -> None:
    result = run(run_options(CONFIG, "micro_speech_int8", solver="heuristic"))
    (parts,) = memory_breakdown(result.network, result.schedule, result.evaluation)
    assert not any(parts.rolling_buffers) and max(parts.feature_maps) > 0


def _cli(tmp_path: Path, *extra: str) -> int:
    return main([str(model_path("person_detect")), *vela_hardware_args(CONFIGS[CONFIG]), "--arena-cache-size",
                 str(ARENA_BYTES), "--solver", "heuristic", "--quiet", *extra])


def test_cli_writes_png_and_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png, svg = tmp_path / "memory.png", tmp_path / "sub" / "memory.svg"
    assert _cli(tmp_path, "--plot-memory", str(png)) == 0
    assert _cli(tmp_path, "--plot-memory", str(svg)) == 0
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 10_000
    assert ET.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"
    assert f"memory plot written to {svg}" in capsys.readouterr().out


def test_cli_refuses_an_unknown_image_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(tmp_path, "--plot-memory", str(tmp_path / "memory.jpg")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --plot-memory") and err.count("\n") == 1
    assert not (tmp_path / "memory.jpg").exists()


def test_a_limit_far_above_the_use_is_named_not_drawn(tmp_path: Path) -> None:
    # Without --arena-cache-size the limit is the whole 4 GiB address space: drawing it would flatten the bars.
    svg = tmp_path / "memory.svg"
    assert main([str(model_path("micro_speech_int8")), *vela_hardware_args(CONFIGS[CONFIG]), "--solver",
                 "heuristic", "--quiet", "--plot-memory", str(svg)]) == 0
    text = svg.read_text()
    assert "limit (4 GiB, off the chart)" in text
