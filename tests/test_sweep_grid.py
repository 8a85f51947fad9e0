"""The issue's grid (4 corpus models x 2 configurations x 3 arena sizes x {heuristic, cpsat}) with --jobs 2:
killed with SIGKILL halfway, rerun, and then reported and plotted."""

from __future__ import annotations

import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from npusched.sweep.cli import main

MODELS = ("kws_dscnn_int8", "micro_speech_int8", "ad01_int8", "resnet8_ic_int8")
CELLS = 4 * 2 * 3 * 2

# Slow tier (pytest -m 'not slow' skips it): a whole sweep, killed and resumed.
pytestmark = pytest.mark.slow


def grid_args(corpus_dir: Path, store: Path) -> list[str]:
    return [*(str(corpus_dir / f"{m}.tflite") for m in MODELS),
            "--accelerator-config", "ethos-u55-128", "ethos-u65-256",  # Vela's default system and memory mode
            "--arena-cache-size", "16k", "32k", "64k", "--solver", "heuristic,cpsat", "--time-limit", "5",
            "--jobs", "2", "--store", str(store), "--quiet"]


def store_rows(store: Path) -> dict[str, tuple[str, str, int]]:
    """cell_id -> (sweep that wrote it, when, attempt); empty while the store does not exist yet."""
    try:
        with sqlite3.connect(store) as connection:
            return {cell_id: (sweep, at, attempt) for cell_id, sweep, at, attempt in
                    connection.execute("SELECT cell_id, sweep_id, finished_at, attempt FROM cells")}
    except sqlite3.OperationalError:
        return {}


@pytest.fixture(scope="module")
def resumed(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run the grid in a child process, SIGKILL it once half the cells have rows, then rerun it to the end."""
    store = tmp_path_factory.mktemp("sweep") / "results.sqlite"
    args = grid_args(corpus_dir, store)
    child = subprocess.Popen([sys.executable, "-m", "npusched.sweep.cli", *args], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while len(store_rows(store)) < CELLS // 2:
        assert child.poll() is None, "the sweep ended before it could be killed halfway"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    time.sleep(1.0)  # orphaned cells, if any survived, would have a moment to (wrongly) land
    before_rerun = store_rows(store)
    rerun = subprocess.run([sys.executable, "-m", "npusched.sweep.cli", *args], capture_output=True, text=True,
                           timeout=900, check=False)
    return {"store": store, "killed": before_rerun, "rerun": rerun, "after": store_rows(store)}


def test_killed_sweep_resumes_with_one_row_per_cell_and_no_cell_run_twice(resumed: dict) -> None:
    killed, after, rerun = resumed["killed"], resumed["after"], resumed["rerun"]
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stderr == ""
    assert CELLS // 2 <= len(killed) < CELLS
    # Every cell has exactly one row (cell_id is the key), run once: none of the killed sweep's rows was redone.
    assert len(after) == CELLS
    assert all(after[cell_id] == row for cell_id, row in killed.items())
    assert {attempt for _, _, attempt in after.values()} == {1}
    assert len({sweep for sweep, _, _ in after.values()}) == 2
    # The rerun ran (or saw fail: some arenas are too small for any schedule) exactly the cells the kill left.
    counts = re.search(r"(\d+) cells: (\d+) run, (\d+) failed, (\d+) already in the store", rerun.stdout)
    assert counts is not None, rerun.stdout
    cells, ran, failed, stored = map(int, counts.groups())
    assert (cells, ran + failed, stored) == (CELLS, CELLS - len(killed), len(killed))


def test_rerunning_a_finished_sweep_runs_nothing(resumed: dict, corpus_dir: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(grid_args(corpus_dir, resumed["store"])) == 0
    assert f"0 run, 0 failed, {CELLS} already in the store" in capsys.readouterr().out
    assert store_rows(resumed["store"]) == resumed["after"]


def test_report_geomeans_equal_the_stores_cycle_ratios(resumed: dict, capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(resumed["store"]) as connection:
        pairs = connection.execute(
            "SELECT h.configuration, c.cycles / h.cycles FROM cells h JOIN cells c "
            "ON c.model_sha256 = h.model_sha256 AND c.configuration = h.configuration "
            "WHERE h.solver = 'heuristic' AND c.solver = 'cpsat' AND h.outcome = 'done' AND c.outcome = 'done'"
        ).fetchall()
    assert len(pairs) >= 20
    expected: dict[str, list[float]] = {}
    for configuration, ratio in pairs:
        expected.setdefault(configuration, []).append(ratio)
    assert main(["report", str(resumed["store"])]) == 0
    table = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in capsys.readouterr().out.splitlines()
             if line.startswith("| ethos-u")}
    assert set(table) == set(expected)
    for configuration, ratios in expected.items():
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        assert int(table[configuration][1]) >= len(ratios)
        assert float(table[configuration][2]) == pytest.approx(geomean, abs=5e-4)
        assert geomean <= 1.0 + 1e-9  # CP-SAT starts from the heuristic's schedule


def test_report_writes_csv_parquet_and_plots(resumed: dict, tmp_path: Path) -> None:
    import pandas

    assert main(["report", str(resumed["store"]), "--format", "parquet", "--output", str(tmp_path / "t.parquet"),
                 "--plot", str(tmp_path / "plots")]) == 0
    assert main(["report", str(resumed["store"]), "--format", "csv", "--output", str(tmp_path / "t.csv")]) == 0
    parquet, table = pandas.read_parquet(tmp_path / "t.parquet"), pandas.read_csv(tmp_path / "t.csv")
    assert len(parquet) == len(table) == 4 * 2 * 3
    assert list(parquet["heuristic_cycles"].round()) == list(table["heuristic_cycles"].round())
    # The documented one-liner loads the store itself.
    with sqlite3.connect(resumed["store"]) as connection:
        assert len(pandas.read_sql("SELECT * FROM cells", connection)) == CELLS
    files = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert files == sorted([f"cycles_vs_sram_{m}.{ext}" for m in MODELS for ext in ("png", "svg")]
                           + ["ratios_vs_heuristic.png", "ratios_vs_heuristic.svg"])
    for name in files:
        path = tmp_path / "plots" / name
        if name.endswith(".png"):
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            assert ElementTree.parse(path).getroot().tag.endswith("svg")
