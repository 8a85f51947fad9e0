"""The network generator: deterministic, readable by npusched, and scheduled by the heuristic as Vela schedules it.

Vela 5.2.0's legacy core (the `vela` CLI, a project dependency) is the oracle; a missing `vela` fails the tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CONFIGS

from npusched.app.pipeline import load_network, run
from npusched.netgen import ARCHITECTURES, SPLIT_BY_DEFAULT, GenerationError, generate
from npusched.run import RunOptions
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.fidelity import compare_with_golden
from npusched.vela.golden import run_golden
from npusched.vela.report import read_cpu_operator_count, read_verbose_schedule

SMALL_PASSES = 40


def _write(tmp_path: Path, arch: str, passes: int, seed: int) -> Path:
    path = tmp_path / f"{arch}-{passes}-{seed}.tflite"
    path.write_bytes(generate(arch, passes, seed))
    return path


def test_same_arguments_same_bytes_and_seeds_differ():
    for arch in ARCHITECTURES:
        first = generate(arch, SMALL_PASSES, 7)
        assert first[4:8] == b"TFL3"
        assert generate(arch, SMALL_PASSES, 7) == first, arch
        assert generate(arch, SMALL_PASSES, 8) != first, arch


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_is_read_and_lowered(tmp_path, arch):
    _, network, _ = load_network(RunOptions(model_path=_write(tmp_path, arch, SMALL_PASSES, 1),
                                            accelerator_config="ethos-u55-128"))
    passes = sum(len(sg.ops) for sg in network.subgraphs)
    # The size knob is an estimate; small budgets round up to one block per stage.
    assert SMALL_PASSES / 2 <= passes <= 2 * SMALL_PASSES, passes
    if arch in SPLIT_BY_DEFAULT:
        assert len(network.subgraphs) > 1 and len(network.cpu_ops) >= 2
        assert {op.tflite_op for op in network.cpu_ops} <= {"L2_NORMALIZATION", "SPACE_TO_DEPTH", "DEPTH_TO_SPACE"}
    else:
        assert len(network.subgraphs) == 1 and not network.cpu_ops


def test_size_knob_scales_the_pass_count(tmp_path):
    _, network, _ = load_network(RunOptions(model_path=_write(tmp_path, "resnet", 300, 0)))
    assert 270 <= sum(len(sg.ops) for sg in network.subgraphs) <= 330


def test_cpu_splits_knob_makes_subgraphs(tmp_path):
    path = tmp_path / "split.tflite"
    path.write_bytes(generate("mobilenet_v2", 60, 0, cpu_splits=3))
    _, network, _ = load_network(RunOptions(model_path=path))
    # A split is one L2_NORMALIZATION or a SPACE_TO_DEPTH ... DEPTH_TO_SPACE pair around an NPU convolution.
    kinds = [op.tflite_op for op in network.cpu_ops]
    assert kinds.count("L2_NORMALIZATION") + kinds.count("SPACE_TO_DEPTH") == 3
    assert kinds.count("SPACE_TO_DEPTH") == kinds.count("DEPTH_TO_SPACE")
    assert len(network.subgraphs) >= 2


@pytest.mark.parametrize("args, message", [
    (("vgg", 10, 0), "unknown architecture 'vgg'"),
    (("resnet", 0, 0), "passes must be between"),
    (("resnet", 10, -1), "seed must be 0 or more"),
])
def test_bad_arguments_are_one_line_errors(args, message):
    with pytest.raises(GenerationError, match=message):
        generate(*args)


def test_cli_writes_the_file_and_rejects_bad_input(tmp_path):
    out = tmp_path / "net.tflite"
    done = subprocess.run([sys.executable, "-m", "npusched.netgen", "audio1d", "--passes", "20", "--seed", "3",
                           "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0 and out.read_bytes() == generate("audio1d", 20, 3)
    for bad in (["vgg", "-o", str(out)], ["audio1d", "--passes", "x", "-o", str(out)],
                ["audio1d", "-o", str(tmp_path / "missing" / "net.tflite")]):
        done = subprocess.run([sys.executable, "-m", "npusched.netgen", *bad], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, bad


# (architecture, passes, seed, configuration) whose heuristic totals equal Vela's today (scripts/netgen_fidelity.py
# over every architecture at 30 and 150 passes; docs/netgen.md lists the cases that do not).
VELA_CASES = [
    ("mobilenet_v2", 30, 0, "u55-128_hee_shared"), ("mobilenet_v3", 30, 0, "u65-256_mid_dedicated256k"),
    ("efficientnet", 30, 0, "u55-128_hee_shared"), ("densenet", 30, 0, "u65-256_mid_dedicated256k"),
    ("nasnet", 30, 0, "u55-128_hee_shared"), ("unet", 30, 0, "u65-256_mid_dedicated256k"),
    ("resnet", 30, 0, "u55-128_hee_shared"), ("audio1d", 30, 0, "u65-256_mid_dedicated256k"),
    ("mixed", 30, 0, "u55-128_hee_shared"),
    # A concatenation output kept in fast storage (scored at the whole OFM depth, not one slice's): was +29.7%.
    ("nasnet", 150, 0, "u65-512_high_dedicated384k"),
    # A larger network with concatenation slices ahead of buffered weights (the prebuffering slack).
    ("densenet", 200, 1, "u55-128_hee_shared"),
]


@pytest.mark.slow
@pytest.mark.parametrize("arch, passes, seed, config", VELA_CASES)
def test_heuristic_equals_vela_legacy(tmp_path, arch, passes, seed, config):
    model = _write(tmp_path, arch, passes, seed)
    golden = tmp_path / "vela"
    golden.mkdir()
    assert run_golden(model, CONFIGS[config], golden, timeout_seconds=300) == ""
    vela_passes = sum(len(s.ops) for s in read_verbose_schedule(golden / "vela_stdout.txt"))
    options = run_options_from_vela_args(model, CONFIGS[config], solver="heuristic")
    comparison = compare_with_golden(run(options), golden)
    _, network, _ = load_network(run_options_from_vela_args(model, CONFIGS[config]))
    assert sum(len(sg.ops) for sg in network.subgraphs) == vela_passes
    assert len(network.cpu_ops) == read_cpu_operator_count(golden / "vela_stdout.txt")
    assert abs(comparison.cycles_error) <= 1.0, (comparison.cycles_ours, comparison.cycles_vela)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["nasnet", "mixed", "unet"])
def test_cpsat_is_verified_and_not_worse_than_the_heuristic(tmp_path, arch):
    model = _write(tmp_path, arch, 30, 2)
    options = run_options_from_vela_args(model, CONFIGS["u55-128_hee_shared"], solver="cpsat",
                                         time_limit_seconds=5.0, workers=1, deterministic=True)
    result = run(options)  # run() raises when the schedule fails verification
    assert result.solver_report is not None and result.solver_report.heuristic_cycles is not None
    assert result.evaluation.total_cycles <= result.solver_report.heuristic_cycles * (1 + 1e-9)
