"""Every bad input the fuzzing issue (#9) found gives one clear `error:` line and exit status 2, or, when the
input is valid after all, a schedule; the JSON document is strict and never overwrites an input."""

from __future__ import annotations

import configparser
import json
import math
import resource
import shutil
import signal
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from test_fuzz import CORPUS, REPO, model_sites

from npusched.app.cli import main
from npusched.app.pipeline import architecture, run
from npusched.errors import ConfigError, ModelError
from npusched.frontend.tflite_reader import parse_tflite, read_tflite
from npusched.frontend.validate import MAX_LSTM_STEPS
from npusched.io.report_json import document
from npusched.io.report_text import format_summary
from npusched.lowering.graph import RECURSION_LIMIT, lower_model
from npusched.netgen import generate
from npusched.run import RunOptions, SolverReport
from npusched.target.arch import resolve_config_file

KWS = CORPUS / "kws_dscnn_int8.tflite"
MICRO = CORPUS / "micro_speech_int8.tflite"
DTLN = CORPUS / "dtln.tflite"
OPS_A = REPO / "tests" / "data" / "lowering" / "ops_a.tflite"
OPS_C1 = REPO / "tests" / "data" / "lowering" / "ops_c1.tflite"
HEE = ["--accelerator-config", "ethos-u55-128", "--config", "Arm/vela.ini", "--system-config",
       "Ethos_U55_High_End_Embedded", "--memory-mode", "Shared_Sram"]


def _patched(directory: Path, source: Path, changes: dict[str, float | int]) -> Path:
    """A copy of ``source`` with the named stored values changed (site names as tests/test_fuzz.py gives them)."""
    sites = {site.what: site for kind in model_sites(source).values() for site in kind}
    data = bytearray(source.read_bytes())
    for what, value in changes.items():
        struct.pack_into(sites[what].fmt, data, sites[what].offset, value)
    path = directory / f"patched_{source.name}"
    path.write_bytes(bytes(data))
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *fragments: str) -> str:
    try:
        status = main(argv)
    except SystemExit as exc:  # argument errors leave through argparse
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "internal error" not in lines[0] and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _heuristic(path: Path) -> RunOptions:
    return RunOptions(model_path=path, accelerator_config="ethos-u55-128", solver="heuristic")


# ---------------------------------------------------------------------------------------------------------------
# the model: structure

@pytest.mark.parametrize(("changes", "fragments"), [
    ({"len(sg0.operators)": 0}, ("subgraph 0", "has no operators")),
    ({"len(sg0.outputs)": 0}, ("subgraph 0", "has no outputs")),
    # The first convolution reads the second's output, which depends on the first.
    ({"op0.inputs[0]": 23}, ("operator", "cycle")),
    # ADD of ops_a without inputs.
    ({"len(op5.inputs)": 0}, ("operator 5 (ADD", "lacks input 0")),
    # The depthwise convolution of micro_speech pointed at the fully-connected weights [4, 4000].
    ({"op1.inputs[1]": 7}, ("operator 1 (DEPTHWISE_CONV_2D", "must be 4-D")),
])
def test_structurally_broken_models_are_rejected(changes: dict, fragments: tuple[str, ...], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    source = OPS_A if "len(op5.inputs)" in changes else MICRO if "op1.inputs[1]" in changes else KWS
    path = _patched(tmp_path, source, changes)
    _one_line_error(capsys, [str(path), *HEE, "--solver", "heuristic"], *fragments)


def test_one_byte_change_to_the_lstm_input_is_rejected_quickly(tmp_path: Path) -> None:
    """dtln's LSTM input [1, 1, 257] with 257 time steps and an OFM of 1: once 44,083 passes and 335 s."""
    path = _patched(tmp_path, DTLN, {"t0.shape[1]": 257})
    with pytest.raises(ModelError, match=r"UNIDIRECTIONAL_SEQUENCE_LSTM.*differ in batch or time steps"):
        run(_heuristic(path))


def test_lstm_longer_than_the_unroll_limit_is_rejected(tmp_path: Path) -> None:
    """Consistent shapes, but more steps than npusched unrolls (Vela 5.2.0 fails on far fewer)."""
    steps = MAX_LSTM_STEPS + 1
    sequence = [t.index for t in read_tflite(DTLN).main.tensors if len(t.shape) == 3 and t.data is None]
    path = _patched(tmp_path, DTLN, {f"t{t}.shape[1]": steps for t in sequence})
    with pytest.raises(ModelError, match=f"unrolls into {steps} batch x time steps"):
        run(_heuristic(path))


def test_consistent_longer_lstm_sequences_are_lowered(tmp_path: Path) -> None:
    """16 and 64 time steps in and out: accepted, and unrolled into four times the passes."""
    sequence = [t.index for t in read_tflite(DTLN).main.tensors if len(t.shape) == 3 and t.data is None]
    arch = architecture(_heuristic(DTLN))
    passes = []
    for steps in (16, 64):
        (tmp_path / str(steps)).mkdir()
        model = read_tflite(_patched(tmp_path / str(steps), DTLN, {f"t{t}.shape[1]": steps for t in sequence}))
        passes.append(len(lower_model(model, arch).npu_ops))
    assert 3.9 < passes[1] / passes[0] < 4.1, passes


def test_a_deep_network_lowers_beyond_the_default_recursion_limit() -> None:
    """About 1500 chained passes: the recursive rewrites once stopped with an internal RecursionError."""
    model = parse_tflite(generate("audio1d", 1500, 1), "audio1d_1500")
    limit = sys.getrecursionlimit()
    assert limit < RECURSION_LIMIT
    assert len(lower_model(model, architecture(_heuristic(KWS))).npu_ops) >= 1400
    assert sys.getrecursionlimit() == limit  # restored afterwards


# ---------------------------------------------------------------------------------------------------------------
# the model: weights, options and quantisation of NPU operators

@pytest.mark.parametrize(("source", "changes", "fragments"), [
    # kws: the first convolution's OFM depth no longer matches its 64 filters.
    (KWS, {"t22.shape[3]": 63}, ("operator 0 (CONV_2D", "64 output channels", "[1, 25, 5, 63]")),
    # micro_speech: the depthwise convolution (8 channels) given the fully-connected bias (4 values).
    (MICRO, {"op1.inputs[2]": 1}, ("operator 1 (DEPTHWISE_CONV_2D", "bias", "8 output channels")),
    (OPS_C1, {"op1.Conv2DOptions.DilationWFactor": 0}, ("dilation_w_factor=0", "at least 1")),
    (OPS_C1, {"op1.Conv2DOptions.DilationHFactor": -2}, ("dilation_h_factor=-2", "at least 1")),
    (OPS_A, {"op1.Pool2DOptions.Padding": 3}, ("operator 1 (MAX_POOL_2D", "padding=3")),
    (OPS_A, {"op14.Pool2DOptions.StrideW": 0}, ("operator 14 (AVERAGE_POOL_2D", "stride_w=0")),
    (KWS, {"op1.DepthwiseConv2DOptions.DepthMultiplier": -3}, ("depth_multiplier=-3", "at least 0")),
    # micro_speech: the softmax output (tensor 9) with a NaN scale.
    (MICRO, {"t9.scale[0]": math.nan}, ("operator 3 (SOFTMAX", "scale nan")),
    (KWS, {"t22.scale[0]": math.nan}, ("operator 0 (CONV_2D", "scale nan", "positive and finite")),
    # A negative OFM scale puts the first convolution on the CPU (as Vela does); the depthwise convolution
    # reading it on the NPU cannot rescale it.
    (KWS, {"t22.scale[0]": -0.5}, ("operator 1 (DEPTHWISE_CONV_2D", "scale -0.5", "positive and finite")),
    (KWS, {"len(t22.scale)": 0}, ("operator 0 (CONV_2D", "no quantisation scale")),
])
def test_inconsistent_npu_operators_are_rejected(source: Path, changes: dict, fragments: tuple[str, ...],
                                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _patched(tmp_path, source, changes)
    _one_line_error(capsys, [str(path), *HEE, "--solver", "heuristic"], *fragments)


def test_a_model_without_npu_operators_runs_under_cpsat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every operator code of micro_speech made FLOOR (CPU only): once a division by zero in the CP-SAT summary."""
    floor = 8
    codes = [site.what for site in model_sites(MICRO)["structure"] if site.what.startswith("opcode")]
    path = _patched(tmp_path, MICRO, dict.fromkeys(codes, floor))
    out = tmp_path / "cpu_only.json"
    assert main([str(path), *HEE, "--time-limit", "5", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "NPU operators = 0" in text and "CPU operators = 4" in text
    doc = json.loads(out.read_text())
    assert doc["totals"]["npu_ops"] == 0 and doc["totals"]["cycles"] == 0


# ---------------------------------------------------------------------------------------------------------------
# configuration files

@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("core_clock", "nan", "core_clock=nan is not a finite number"),
    ("core_clock", "inf", "core_clock=inf is not a finite number"),
    ("Sram_clock_scale", "nan", "Sram_clock_scale=nan is not a finite number"),
    ("OffChipFlash_clock_scale", "-inf", "OffChipFlash_clock_scale=-inf is not a finite number"),
    ("Sram_ports_used", "0", "Sram_ports_used=0 is out of range"),
    ("OffChipFlash_ports_used", "-1", "OffChipFlash_ports_used=-1 is out of range"),
])
def test_invalid_config_values_are_rejected(key: str, value: str, fragment: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    parser = configparser.ConfigParser()
    parser.optionxform = str  # keep the key case Vela's files use
    parser.read(resolve_config_file("Arm/vela.ini"))
    parser["System_Config.Ethos_U55_High_End_Embedded"][key] = value
    ini = tmp_path / "bad.ini"
    with ini.open("w") as handle:
        parser.write(handle)
    argv = [str(KWS), "--accelerator-config", "ethos-u55-128", "--config", str(ini), "--system-config",
            "Ethos_U55_High_End_Embedded", "--memory-mode", "Shared_Sram", "--solver", "heuristic"]
    _one_line_error(capsys, argv, fragment)
    with pytest.raises(ConfigError):
        architecture(RunOptions(model_path=KWS, accelerator_config="ethos-u55-128", config_files=(str(ini),),
                                system_config="Ethos_U55_High_End_Embedded", memory_mode="Shared_Sram"))


# ---------------------------------------------------------------------------------------------------------------
# command-line options

@pytest.mark.parametrize(("option", "value", "fragment"), [
    ("--seed", str(2 ** 31), "argument --seed: must be between -2147483648 and 2147483647"),
    ("--seed", str(-(2 ** 31) - 1), "argument --seed: must be between"),
    ("--time-limit", "inf", "argument --time-limit: must be a positive finite number"),
    ("--time-limit", "nan", "argument --time-limit: must be a positive finite number"),
    ("--workers", "100000", "argument --workers: must be between 1 and 256"),
])
def test_out_of_range_options_are_rejected(option: str, value: str, fragment: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(capsys, [str(KWS), *HEE, option, value], fragment)


def test_largest_seed_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(MICRO), *HEE, "--seed", str(2 ** 31 - 1), "--time-limit", "5", "--quiet"]) == 0
    assert "Total cycles" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------------
# the JSON document

def test_json_refuses_a_directory_and_an_empty_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(capsys, [str(MICRO), *HEE, "--solver", "heuristic", "--json", str(tmp_path)], "is a directory")
    _one_line_error(capsys, [str(MICRO), *HEE, "--solver", "heuristic", "--json", ""], "empty")


def test_json_never_overwrites_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.tflite"
    shutil.copy(MICRO, model)
    model.chmod(0o644)
    _one_line_error(capsys, [str(model), *HEE, "--solver", "heuristic", "--json", str(model)],
                    "would overwrite the input file")
    assert model.read_bytes() == MICRO.read_bytes()


def test_json_refuses_a_device_and_a_read_only_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(capsys, [str(MICRO), *HEE, "--solver", "heuristic", "--json", "/dev/full"],
                    "not a regular file")
    locked = tmp_path / "locked.json"
    locked.write_text("{}")
    locked.chmod(0o444)
    _one_line_error(capsys, [str(MICRO), *HEE, "--solver", "heuristic", "--json", str(locked)], "read-only")
    assert locked.read_text() == "{}"


def test_json_on_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """A file-size limit makes the write fail the way a full disk does (EFBIG instead of ENOSPC)."""
    out = tmp_path / "out.json"
    out.write_text("old")

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    done = subprocess.run([sys.executable, "-m", "npusched.app.cli", str(MICRO), *HEE, "--solver", "heuristic",
                           "--json", str(out)], capture_output=True, text=True, preexec_fn=small_files, cwd=REPO,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --json") and "cannot write" in lines[0], done.stderr
    assert "Total cycles" not in done.stdout  # the write comes before the summary
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_json_is_strict_when_cpsat_reports_no_bound(tmp_path: Path) -> None:
    """A fallback's NaN bound and gap become null (JSON has no NaN) and the summary says 'none'."""
    result = run(_heuristic(MICRO))
    nan = float("nan")
    report = SolverReport(status="fallback", bound_cycles=nan, gap=nan, solve_seconds=0.0, reason="no solution",
                          model_stats={}, heuristic_cycles=0.0, heuristic_peak_fast_storage_bytes=0)
    fallback = replace(result, solver_report=report, status="fallback")
    text = json.dumps(document(fallback), allow_nan=False)
    doc = json.loads(text)
    assert doc["bound_cycles"] is None and doc["gap"] is None and doc["status"] == "fallback"
    summary = format_summary(fallback)
    assert "nan" not in summary.lower() and "Improvement over heuristic" not in summary
