"""The command line end to end: real runs, and bad input giving one `error:` line with exit status 2."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npusched.app import cli
from npusched.app.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kws_dscnn_int8.tflite"
HEE = ["--accelerator-config", "ethos-u55-128", "--config", "Arm/vela.ini",
       "--system-config", "Ethos_U55_High_End_Embedded", "--memory-mode", "Shared_Sram", "--solver", "heuristic"]


def _expect_one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    assert fragment in lines[0]
    return lines[0]


def test_example_runs_and_writes_the_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "kws.json"
    assert main([str(EXAMPLE), *HEE, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "NPU operators" in text and "CPU operators = 0" in text
    doc = json.loads(out.read_text())
    assert doc["format"] == "npusched.schedule/2"
    assert doc["accelerator_config"] == "ethos-u55-128"
    assert doc["system_config"] == "Ethos_U55_High_End_Embedded"
    assert doc["memory_mode"] == "Shared_Sram"
    names = {op["name"] for op in doc["ops"]}
    # The first convolution of the DS-CNN, under its TFLite output tensor name, runs on the NPU.
    first_conv = next(op for op in doc["ops"] if op["tflite_op"] == "CONV_2D")
    assert first_conv["placement"] == "npu" and first_conv["ofm_shape"] == [1, 25, 5, 64]
    assert first_conv["macs"] == 480000  # Vela's MAC count for this layer (golden per_layer.csv)
    assert len(names) == len(doc["ops"])


def test_cpu_operator_is_placed_on_cpu_and_reported(corpus_dir: Path, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    out = tmp_path / "mnv2.json"
    assert main([str(corpus_dir / "mobilenet_v2_224_int8.tflite"), *HEE, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "CPU operators = 1" in text and "TRANSPOSE" in text
    cpu = [op for op in json.loads(out.read_text())["ops"] if op["placement"] == "cpu"]
    assert [op["tflite_op"] for op in cpu] == ["TRANSPOSE"]
    assert cpu[0]["cpu_reason"]


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_bytes(b""), "empty"),
        (lambda p: p.write_bytes(EXAMPLE.read_bytes()[:1000]), ""),
        (lambda p: p.write_bytes(random.Random(7).randbytes(4096)), ""),
        (lambda p: p.write_bytes(EXAMPLE.read_bytes()[:4] + b"XXXX" + EXAMPLE.read_bytes()[8:]), "identifier"),
    ],
    ids=["missing", "empty", "truncated", "random", "wrong-identifier"],
)
def test_malformed_model(tmp_path: Path, capsys: pytest.CaptureFixture[str], make, fragment: str) -> None:
    path = tmp_path / "bad.tflite"
    make(path)
    _expect_one_line_error(capsys, [str(path), *HEE], fragment)


def test_the_default_cores_schedule_is_not_compiled_by_the_legacy_backend(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--solver vela-default's schedule is of the default core's graph; Vela legacy's backend (--output-dir) would
    meet passes it does not make (keyword_scrambled's int16 softmax): refused before any work, nothing written."""
    out = tmp_path / "out"
    argv = [str(EXAMPLE), *HEE[:-1], "vela-default", "--output-dir", str(out)]
    _expect_one_line_error(capsys, argv, "`vela` itself deploys it")
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("--system-config", "No_Such_System", "unknown system config 'No_Such_System'"),
        ("--memory-mode", "No_Such_Mode", "unknown memory mode 'No_Such_Mode'"),
        ("--accelerator-config", "ethos-u99-1", "ethos-u99-1"),
        ("--config", "/nonexistent/vela.ini", "/nonexistent/vela.ini"),
    ],
)
def test_unknown_configuration(capsys: pytest.CaptureFixture[str], option: str, value: str, fragment: str) -> None:
    argv = [str(EXAMPLE), *HEE]
    position = argv.index(option) if option in argv else -1
    if position >= 0:
        argv[position + 1] = value
    else:
        argv += [option, value]
    _expect_one_line_error(capsys, argv, fragment)


def test_bad_option_value_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(EXAMPLE), "--arena-cache-size", "lots"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_console_script_exit_status(tmp_path: Path) -> None:
    """The installed entry point behaves as main() does: no traceback, status 2."""
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\0" * 64)
    proc = subprocess.run([sys.executable, "-m", "npusched.app.cli", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_default_solver_is_cpsat_and_reports_bound_and_heuristic(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "kws.json"
    argv = [str(EXAMPLE), *HEE[:-2], "--time-limit", "60", "--workers", "2", "--deterministic", "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "Lower bound, candidate space (proven)" in text and "Heuristic (Vela) cycles" in text
    assert "Lower bound, any schedule" in text
    doc = json.loads(out.read_text())
    assert doc["solver"] == "cpsat" and doc["status"] in ("optimal", "feasible", "fallback")
    assert doc["heuristic"]["cycles"] == pytest.approx(84604.5)  # Vela legacy's cycles_total for this model
    assert doc["bound_cycles"] <= doc["totals"]["cycles"] <= doc["heuristic"]["cycles"]
    assert 0.0 <= doc["gap"] <= 1.0 and doc["solve_seconds"] > 0


@pytest.mark.slow
def test_time_limit_counts_from_each_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """main() called from Python counts its time limit from the call, not from when the module was imported: a
    process that has been running longer than the limit (a test run, a batch script) still gets the whole limit."""
    monkeypatch.setattr(cli, "STARTED", time.monotonic() - 3600.0)
    out = tmp_path / "kws.json"
    argv = [str(EXAMPLE), *HEE[:-2], "--time-limit", "60", "--workers", "2", "--deterministic", "--json", str(out)]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["status"] == "optimal" and doc["model_stats"]["mode"] in ("full", "path")


@pytest.mark.slow
def test_impossible_limit_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    line = _expect_one_line_error(capsys, [str(EXAMPLE), *HEE[:-2], "--arena-cache-size", "64", "--time-limit", "20",
                                           "--workers", "2", "--deterministic"],
                                  "no schedule fits 64 bytes of fast storage")
    assert "the smallest that fits needs" in line


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["1e308", "5e-324"])
def test_any_finite_positive_time_limit_ends_normally(limit: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The extremes of --time-limit: the smallest returns a schedule made without searching, the largest (taken as
    a week, the longest wait the system's timers take) searches until the schedule is proven optimal."""
    assert main([str(EXAMPLE), *HEE[:-2], "--time-limit", limit, "--workers", "1", "--deterministic",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Total cycles" in out and "Traceback" not in out
    if limit == "1e308":
        assert "Gap to that bound                                    0.00%" in out


@pytest.mark.slow
def test_ctrl_c_ends_the_search_and_reports_the_best_schedule_so_far(tmp_path: Path) -> None:
    """The first Ctrl-C stops the search (not the run): the summary and the JSON of the best schedule found so far,
    exit status 0; the note says it was interrupted. Sent once the floors are made (the search under way)."""
    import signal

    out = tmp_path / "run.json"
    model = Path(__file__).resolve().parent / "data" / "corpus" / "mobilenet_v2_224_int8.tflite"
    process = subprocess.Popen(
        [sys.executable, "-m", "npusched.app.cli", str(model), "--accelerator-config", "ethos-u65-256", "--config",
         "Arm/vela.ini", "--system-config", "Ethos_U65_Mid_End", "--memory-mode", "Dedicated_Sram_256KB",
         "--time-limit", "600", "--workers", "1", "--deterministic", "--quiet", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("floors:"):
            process.send_signal(signal.SIGINT)
            break
    rest, errors = process.communicate(timeout=600)
    assert process.returncode == 0, errors
    assert "interrupted (Ctrl-C): the best schedule found so far" in rest
    document = json.loads(out.read_text())
    assert "interrupted (Ctrl-C)" in document["status_reason"] and document["totals"]["cycles"] > 0
