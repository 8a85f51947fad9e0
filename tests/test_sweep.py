"""npusched-sweep: grid expansion and cell identity, grid files, failed cells, the executors' guards, bad input."""

from __future__ import annotations

import csv
import functools
import os
import shutil
import signal
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest

from npusched.sweep.cli import main
from npusched.sweep.events import Finished
from npusched.sweep.grid import Grid, HardwareConfig, expand, find_models, parse_size_bytes
from npusched.sweep.local import run_local


def cells_of(store: Path) -> list[dict]:
    with sqlite3.connect(store) as connection:
        connection.row_factory = sqlite3.Row
        return [dict(row) for row in connection.execute("SELECT * FROM cells ORDER BY model, solver")]


def test_cells_are_named_by_their_inputs_not_by_paths(corpus_dir: Path, tmp_path: Path) -> None:
    model = corpus_dir / "micro_speech_int8.tflite"
    grid = Grid(models=(model,), configurations=(HardwareConfig("u55", "ethos-u55-128"),),
                solvers=("heuristic", "cpsat"), arena_cache_sizes=(None, 65536), seeds=3)
    cells = expand(grid)
    # The heuristic has no seed: 2 arenas x (1 heuristic + 3 CP-SAT seeds).
    assert len(cells) == 8 and len({c.cell_id for c in cells}) == 8
    copy = tmp_path / "renamed.tflite"
    shutil.copy(model, copy)
    moved = expand(replace(grid, models=(copy,), configurations=(HardwareConfig("other name", "ethos-u55-128"),)))
    assert [c.cell_id for c in moved] == [c.cell_id for c in cells]
    longer = expand(replace(grid, time_limit_seconds=60.0))
    assert {c.cell_id for c in longer if c.solver == "heuristic"} == {c.cell_id for c in cells
                                                                      if c.solver == "heuristic"}
    assert not {c.cell_id for c in longer if c.solver == "cpsat"} & {c.cell_id for c in cells}
    copy.write_bytes(copy.read_bytes() + b"\0")
    assert not {c.cell_id for c in expand(replace(grid, models=(copy,)))} & {c.cell_id for c in cells}


def test_sizes_and_model_directories(corpus_dir: Path) -> None:
    assert [parse_size_bytes(s) for s in ("131072", "128k", "128KiB", "1M", "default")] == [
        131072, 131072, 131072, 1 << 20, None]
    assert len(find_models((corpus_dir,))) == len(list(corpus_dir.glob("*.tflite"))) >= 4


@pytest.mark.parametrize("suffix, text", [
    (".yaml", "models: [{m}]\nconfigurations:\n  - name: small\n    accelerator-config: ethos-u55-64\n"
              "    arena_cache_size: [32k, 64k]\nsolvers: heuristic\nstore: grid.sqlite\nquiet: true\n"),
    (".toml", 'models = ["{m}"]\nsolver = ["heuristic"]\nstore = "grid.sqlite"\nquiet = true\n'
              '[[configurations]]\nname = "small"\naccelerator_config = "ethos-u55-64"\n'
              'arena_cache_size = ["32k", "64k"]\n'),
])
def test_grid_file_runs_the_same_cells_as_flags(corpus_dir: Path, tmp_path: Path, suffix: str, text: str) -> None:
    model = corpus_dir / "micro_speech_int8.tflite"
    grid_file = tmp_path / f"grid{suffix}"
    grid_file.write_text(text.format(m=model))
    assert main(["--grid", str(grid_file)]) == 0
    from_file = cells_of(tmp_path / "grid.sqlite")
    assert main([str(model), "--accelerator-config", "ethos-u55-64", "--arena-cache-size", "32k", "64k",
                 "--solver", "heuristic", "--store", str(tmp_path / "flags.sqlite"), "--quiet"]) == 0
    from_flags = cells_of(tmp_path / "flags.sqlite")
    assert sorted(r["cell_id"] for r in from_file) == sorted(r["cell_id"] for r in from_flags)
    assert {r["configuration"] for r in from_file} == {"small"}
    assert sorted(r["fast_storage_limit_bytes"] for r in from_file) == [32768, 65536]


def test_failed_cells_are_recorded_and_retried(corpus_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.tflite"
    broken.write_bytes(b"not a flatbuffer")
    store = tmp_path / "s.sqlite"
    args = [str(broken), str(corpus_dir / "kws_dscnn_int8.tflite"), "--accelerator-config", "ethos-u55-128",
            "--solver", "heuristic", "--store", str(store), "--quiet", "--jobs", "2"]
    assert main(args) == 0
    rows = {r["model"]: r for r in cells_of(store)}
    assert rows["broken"]["outcome"] == "failed" and rows["broken"]["status"] == "error"
    assert rows["broken"]["error"] and "\n" not in rows["broken"]["error"]
    assert rows["kws_dscnn_int8"]["outcome"] == "done" and rows["kws_dscnn_int8"]["cycles"] > 0
    assert "1 run, 1 failed" in capsys.readouterr().out
    assert main(args) == 0  # failed cells are settled too, until asked to retry
    assert "0 run, 0 failed, 2 already in the store" in capsys.readouterr().out
    assert main([*args, "--retry-failed"]) == 0
    assert "0 run, 1 failed, 1 already in the store" in capsys.readouterr().out
    assert {r["model"]: r["attempt"] for r in cells_of(store)} == {"broken": 2, "kws_dscnn_int8": 1}


# Longer than any guard below by far: a cell that sleeps this long is past its guard however fast the machine is.
HANG_SECONDS = 3600.0


def _hang(cell) -> dict:
    """A stand-in for the runner whose cell never finishes in time, as a solver ignoring its limit would."""
    time.sleep(HANG_SECONDS)
    return {"outcome": "done", "status": "feasible", "cycles": 1.0}


def test_a_cell_past_its_guard_is_killed_and_recorded(corpus_dir: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's --cell-timeout kills the cell and the store records why. The cell is slow by
    construction (it sleeps an hour), so the outcome does not depend on how fast the machine solves anything."""
    from npusched.sweep import cli, local

    hanging = functools.partial(local.run_local, work=_hang)  # run_local's documented stand-in for the runner
    monkeypatch.setattr(local, "run_local", hanging)
    monkeypatch.setattr(cli, "run_local", hanging, raising=False)  # where the command line finds it
    store = tmp_path / "s.sqlite"
    assert main([str(corpus_dir / "kws_dscnn_int8.tflite"), "--solver", "cpsat", "--time-limit", "20",
                 "--cell-timeout", "1.5", "--store", str(store), "--quiet", "--jobs", "1"]) == 0
    (row,) = cells_of(store)
    assert (row["outcome"], row["status"]) == ("failed", "timeout")
    assert "1.5 s" in row["error"]  # the guard killed it (a finished cell would be 'done')


def _die_on_micro_speech(cell) -> dict:
    """A stand-in for the runner whose process crashes on one model, as a segfault in a solver would."""
    if cell.model == "micro_speech_int8":
        os.kill(os.getpid(), signal.SIGSEGV)
    return {"outcome": "done", "status": "feasible", "cycles": 1.0}


def test_a_crashed_cell_process_fails_that_cell_only(corpus_dir: Path) -> None:
    grid = Grid(models=find_models((corpus_dir / "micro_speech_int8.tflite", corpus_dir / "ad01_int8.tflite")),
                configurations=(HardwareConfig("u55", "ethos-u55-128"),), solvers=("heuristic",))
    events = list(run_local(list(expand(grid)), jobs=2, guard_seconds=60, work=_die_on_micro_speech))
    results = {e.cell.model: e.result for e in events if isinstance(e, Finished)}
    assert results["ad01_int8"]["outcome"] == "done"
    assert results["micro_speech_int8"]["status"] == "crashed"
    assert "SIGSEGV" in results["micro_speech_int8"]["error"]


@pytest.mark.parametrize("args, message", [
    (["{m}", "--store", "{s}", "--system-config", "Nope", "--memory-mode", "Shared_Sram"],
     "unknown system config 'Nope'"),
    (["{m}", "--store", "{s}", "--solver", "heuristic,magic"], "unknown solver 'magic'"),
    (["{m}"], "--store PATH is required"),
    (["{d}/missing.tflite", "--store", "{s}"], "does not exist"),
    (["{m}", "--store", "{s}", "--jobs", "4", "--workers", "4"], "exceeds the"),
    (["{m}", "--store", "{s}", "--arena-cache-size", "lots"], "expected a size in bytes"),
    (["--grid", "{d}/grid.yaml"], "seeds: expected a number, got 'many'"),
    (["--grid", "{d}/grid.toml"], "is not valid TOML"),
    (["report", "{d}/missing.sqlite"], "does not exist"),
    (["report", "{m}"], "not a usable SQLite store"),
])
def test_bad_input_is_one_error_line(corpus_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     args: list[str], message: str) -> None:
    values = {"m": str(corpus_dir / "micro_speech_int8.tflite"), "s": str(tmp_path / "s.sqlite"), "d": tmp_path}
    (tmp_path / "grid.yaml").write_text(f"models: [{values['m']}]\nstore: s.sqlite\nseeds: many\n")
    (tmp_path / "grid.toml").write_text("models = [\n")
    try:
        code = main([a.format(**values) for a in args])
    except SystemExit as exc:  # argparse's own errors exit from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "s.sqlite").exists() or "report" in args



def test_vela_cells_read_the_vela_clis_summary(corpus_dir: Path, golden_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    assert main([str(corpus_dir / "micro_speech_int8.tflite"), "--accelerator-config", "ethos-u55-128",
                 "--system-config", "Ethos_U55_High_End_Embedded", "--memory-mode", "Shared_Sram",
                 "--solver", "vela-cli-legacy,heuristic", "--store", str(store), "--quiet"]) == 0
    with (golden_dir / "u55-128_hee_shared" / "micro_speech_int8" / "summary.csv").open() as handle:
        golden = next(csv.DictReader(handle))
    rows = {r["solver"]: r for r in cells_of(store)}
    assert (rows["vela-cli-legacy"]["outcome"], rows["vela-cli-legacy"]["status"]) == ("done", "vela")
    assert rows["vela-cli-legacy"]["cycles"] == float(golden["cycles_total"])
    assert rows["vela-cli-legacy"]["peak_fast_storage_bytes"] == round(float(golden["sram_memory_used"]) * 1024)
    assert rows["vela-cli-legacy"]["bytes_sram"] == float(golden["sram_total_bytes"])
    assert rows["heuristic"]["cycles"] == pytest.approx(rows["vela-cli-legacy"]["cycles"], abs=1)
