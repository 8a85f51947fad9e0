"""`--pareto`: the cycles-vs-fast-storage frontier, every point a verified schedule, cycles never rising with the
limit, from the smallest fit up to the unconstrained optimum's peak; its CSV and plots; Vela legacy's points.

micro_speech_int8 on ethos-u55-256 Shared_Sram: CP-SAT solves it in a fraction of a second, and more memory buys
fewer cycles on it (it needs ~6 KiB; cascading nothing takes ~22 KiB and ~20% fewer cycles).
"""

from __future__ import annotations

import csv
import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import CONFIGS, GOLDEN_DIR, model_path, run_options

import npusched.io.pareto_report as pareto_report
from npusched.app.cli import main
from npusched.app.pareto import run_pareto, vela_points
from npusched.app.pipeline import architecture, load_network
from npusched.errors import ScheduleError
from npusched.io.pareto_report import COLUMNS, write_pareto_csv
from npusched.io.plots import plot_pareto
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.rules import ALLOCATION_QUANTUM
from npusched.solvers.cpsat import SearchBudget, solve_cpsat
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.pareto import limits_between
from npusched.vela.command import vela_hardware_args
from npusched.vela.report import read_summary

CONFIG = "u55-256_hee_shared_arena128k"
MODEL = "micro_speech_int8"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _options(**overrides):
    return run_options(CONFIG, MODEL, time_limit_seconds=20.0, workers=1, deterministic=True, **overrides)


def _arch_at(limit: int):
    return architecture(replace(_options(), arena_cache_size=limit))


@pytest.fixture(scope="module")
def network():
    return load_network(_options())[1]


@pytest.fixture(scope="module")
def pareto():
    return run_pareto(_options(), inner_points=3)


def test_every_point_is_a_verified_schedule_within_its_limit(pareto, network) -> None:
    for point in pareto.frontier.points:
        arch = _arch_at(point.limit_bytes)
        evaluation = evaluate(network, arch, point.schedule)  # judged afresh, not trusted from the search
        assert verify(network, arch, point.schedule, evaluation) == []
        assert evaluation.total_cycles == pytest.approx(point.cycles)
        assert evaluation.peak_fast_storage == point.peak_fast_storage_bytes <= point.limit_bytes
        assert not math.isnan(point.gap), f"no bound proven at {point.limit_bytes} bytes"


def test_cycles_never_rise_with_memory_and_the_frontier_strictly_falls(pareto) -> None:
    points = pareto.frontier.points
    assert [p.limit_bytes for p in points] == sorted({p.limit_bytes for p in points})
    assert all(a.cycles >= b.cycles for a, b in pairwise(points))
    kept = pareto.frontier.frontier
    assert kept[0] is points[0]
    assert all(a.cycles > b.cycles and a.peak_fast_storage_bytes < b.peak_fast_storage_bytes
               for a, b in pairwise(kept))
    # micro_speech has a real trade: the curve is more than one point.
    assert len(kept) >= 2


def test_the_first_point_is_the_smallest_fit(pareto, network) -> None:
    frontier = pareto.frontier
    assert frontier.smallest_fit_proven
    assert frontier.points[0].limit_bytes == frontier.smallest_fit_bytes
    # One allocation quantum less and neither a schedule of CP-SAT's candidate space nor Vela's fits.
    arch = _arch_at(frontier.smallest_fit_bytes - ALLOCATION_QUANTUM)
    vela = heuristic_schedule(network, arch, "Performance")
    assert verify(network, arch, vela)
    with pytest.raises(ScheduleError, match="no schedule fits"):
        solve_cpsat(network, arch, SearchBudget(time_limit_seconds=10, workers=1, deterministic=True), hint=vela)


def test_the_last_point_is_where_more_memory_stops_helping(pareto, network) -> None:
    frontier = pareto.frontier
    last = frontier.points[-1]
    assert last.limit_bytes == frontier.unconstrained_peak_bytes
    assert last.cycles == pytest.approx(frontier.unconstrained_cycles)
    # Proven optimal over the candidate space even with all the memory the hardware has, and no schedule with
    # more memory is faster.
    assert last.gap == 0.0
    unlimited = solve_cpsat(network, _arch_at(_arch_at(0).max_address_offset),
                            SearchBudget(time_limit_seconds=10, workers=1, deterministic=True))
    assert unlimited.objective_cycles == pytest.approx(last.cycles)


def test_where_memory_buys_nothing_the_curve_is_one_point_and_says_so() -> None:
    # Sram_Only: the constants sit in memory as fast as the SRAM, so no use of fast storage saves cycles.
    run = run_pareto(replace(_options(), memory_mode="Sram_Only"), inner_points=3)
    (point,) = run.frontier.points
    assert point.limit_bytes == run.frontier.smallest_fit_bytes == run.frontier.unconstrained_peak_bytes
    assert any("buys nothing" in note for note in run.frontier.notes)


def test_bisection_places_a_limit_where_the_cycles_drop(pareto) -> None:
    # inner_points=3: two limits spaced geometrically, one by bisection inside a step of the curve.
    frontier = pareto.frontier
    geometric = limits_between(frontier.smallest_fit_bytes, frontier.unconstrained_peak_bytes, 2)
    (bisected,) = [p for p in frontier.points if p.limit_bytes not in geometric]
    below = max((p for p in frontier.points if p.limit_bytes < bisected.limit_bytes and p.limit_bytes in geometric),
                key=lambda p: p.limit_bytes)
    above = min((p for p in frontier.points if p.limit_bytes > bisected.limit_bytes and p.limit_bytes in geometric),
                key=lambda p: p.limit_bytes)
    assert below.cycles > above.cycles  # it was placed in a step, not on a flat stretch
    assert below.limit_bytes < bisected.limit_bytes < above.peak_fast_storage_bytes


def test_limits_are_geometric_between_the_ends() -> None:
    assert limits_between(1024, 1024, 5) == (1024,)
    limits = limits_between(1024, 65536, 5)
    assert limits[0] == 1024 and limits[-1] == 65536 and len(limits) == 7
    assert all(v % ALLOCATION_QUANTUM == 0 for v in limits[1:-1])
    ratios = [b / a for a, b in pairwise(limits)]
    assert max(ratios) / min(ratios) < 1.05  # 64x in six equal steps of 2x
    assert limits_between(1000, 1040, 10) == (1000, 1008, 1024, 1040)  # quantised, no repeats
    assert limits_between(0, 65536, 3) == (0, 8192, 16384, 32768, 65536)  # from nothing, halvings


def test_csv_has_the_documented_columns_and_the_points(pareto, tmp_path: Path) -> None:
    for column in COLUMNS:
        assert f"``{column}``" in pareto_report.__doc__
    path = tmp_path / "out" / "frontier.csv"
    write_pareto_csv(pareto, path)
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == COLUMNS
    assert [int(r["limit_bytes"]) for r in rows] == [p.limit_bytes for p in pareto.frontier.points]
    assert [int(r["cycles"]) for r in rows] == [round(p.cycles) for p in pareto.frontier.points]
    assert [r["on_frontier"] for r in rows] == [str(int(p.on_frontier)) for p in pareto.frontier.points]
    assert all(r["vela_cycles"] == "" and r["vela_error"] == "" for r in rows)


def test_plots_are_valid_png_and_svg(pareto, tmp_path: Path) -> None:
    png, svg = tmp_path / "frontier.png", tmp_path / "frontier.svg"
    plot_pareto(pareto, [png, svg])
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 10_000
    assert ET.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"


def test_vela_points_are_vela_legacys_own_figures() -> None:
    # At the golden configuration's arena Vela's cycles are those of its golden output; at 1 KiB its legacy
    # core cannot fit micro_speech and says so.
    golden = read_summary(GOLDEN_DIR / CONFIG / MODEL / "summary.csv")
    small, golden_size = vela_points(_options(), [1024, 131072])
    assert golden_size.error == ""
    assert golden_size.cycles == pytest.approx(float(golden["cycles_total"]))
    assert golden_size.sram_used_bytes == round(float(golden["sram_memory_used"]) * 1024)
    assert small.error or small.sram_used_bytes > 1024


def _cli(*extra: str) -> int:
    try:
        return main([str(model_path(MODEL)), *vela_hardware_args(CONFIGS[CONFIG]), "--time-limit", "20",
                     "--workers", "1", "--deterministic", *extra])
    except SystemExit as exc:  # argparse's errors exit from inside the parser
        return int(exc.code)


def test_cli_writes_csv_png_and_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "micro.csv"
    assert _cli("--pareto", str(path), "--pareto-points", "1") == 0
    out = capsys.readouterr().out
    assert "Cycles against fast storage: micro_speech_int8" in out and f"frontier written to {path}" in out
    rows = list(csv.DictReader(path.open(newline="")))
    assert len(rows) == 3 and rows[0]["on_frontier"] == "1"
    assert path.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)
    assert ET.parse(path.with_suffix(".svg")).getroot().tag.endswith("svg")


@pytest.mark.parametrize("extra", [
    ("--pareto", "frontier.txt"),
    ("--with-vela",),
    ("--pareto-points", "3"),
    ("--pareto", "frontier.csv", "--solver", "heuristic"),
    ("--pareto", "frontier.csv", "--optimise", "Size"),
    ("--pareto", "frontier.csv", "--json", "out.json"),
    ("--pareto", "frontier.csv", "--pareto-points", "-1"),
    ("--pareto", "frontier.csv", "--with-vela", "--estimator", "contention"),
])
def test_cli_refuses_what_makes_no_sense(extra: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert _cli(*extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert not list(tmp_path.iterdir())
