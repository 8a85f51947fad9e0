"""The network generator: deterministic, readable by npusched, and scheduled by the heuristic as Vela schedules it.

Vela 5.2.0's legacy core (the `vela` CLI, a project dependency) is the oracle; a missing `vela` fails the tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS
from ethosu.vela.data_type import DataType as VelaDataType
from ethosu.vela.lut import create_lut_rsqrt_int8_op
from ethosu.vela.operation import Op, Operation
from ethosu.vela.tensor import QuantizationParameters
from ethosu.vela.tensor import Tensor as VelaTensor

from npusched.app.pipeline import load_network, run, scheduled_model_bytes
from npusched.frontend.supported import cpu_operators, npu_support, vela_cpu_reason
from npusched.frontend.tflite_reader import TfliteTensor, parse_tflite, read_tflite
from npusched.ir import TensorFormat
from npusched.lowering.graph import lower_model
from npusched.netgen import ARCHITECTURES, SPLIT_BY_DEFAULT, GenerationError, generate
from npusched.run import RunOptions
from npusched.schedule.memory_model import reusable_ifm
from npusched.schedule.tensor_use import tensor_use
from npusched.target.arch import load_architecture
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.fidelity import compare_with_golden
from npusched.vela.golden import run_golden
from npusched.vela.report import read_cpu_operator_count, read_verbose_schedule

SMALL_PASSES = 40
# What Vela 5.2.0's legacy core leaves on the CPU in a generated transformer: BATCH_MATMUL and GELU (no NPU
# implementation), MULs with neither input of the OFM's shape, and TRANSPOSEs by [0, 2, 3, 1].
TRANSFORMER_CPU_OPERATORS = frozenset({"BATCH_MATMUL", "GELU", "MUL", "TRANSPOSE"})


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
    # The size knob is an estimate; small budgets round up to one block per stage (a transformer block with its
    # 31-pass SOFTMAX and 7-pass SQUARED_DIFFERENCEs is about 90 passes).
    assert SMALL_PASSES / 2 <= passes <= (120 if arch == "transformer" else 2 * SMALL_PASSES), passes
    if arch == "transformer":  # attention's BATCH_MATMULs, GELU and the layer norms' [1, T, 1] x [D] MULs
        assert len(network.subgraphs) > 1
        assert {"BATCH_MATMUL", "MUL"} <= {op.tflite_op for op in network.cpu_ops} <= TRANSFORMER_CPU_OPERATORS
    elif arch in SPLIT_BY_DEFAULT:
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
    # Layer norm's MUL(x, x): two consumers of x to Vela, so the MUL may not overwrite it in place (was -0.53%).
    ("transformer", 120, 3, "u55-128_hee_shared_size"),
    # Inception: four- and three-way concatenations, one of them of a max pool reading the block input. 40 passes
    # draws a SAME reduction (30 -> 15) at 128 px; 150 two VALID ones (22 -> 10 -> 4) in a 128 KiB arena. Vela
    # legacy: 39 and 154 passes, 2,975,102 and 3,606,752 cycles, the heuristic's to the cycle.
    ("inception", 40, 1, "u55-128_hee_shared"), ("inception", 150, 1, "u55-256_hee_shared_arena128k"),
]


def test_a_pass_reading_one_map_as_both_inputs_is_two_consumers(tmp_path):
    """Vela lists a pass once per input it reads a map with: MUL(x, x) makes x's consumers two, so no in-place
    reuse of x for the MUL's OFM (which would let the OFM overwrite x while x is still read)."""
    model = _write(tmp_path, "transformer", 120, 3)
    _, network, _ = load_network(run_options_from_vela_args(model, CONFIGS["u55-128_hee_shared_size"]))
    use = tensor_use(network)
    squares = [op for op in network.npu_ops if op.ifm2 is not None and op.ifm2.tensor == op.ifm.tensor]
    assert squares, "the generated transformer has no MUL(x, x)"
    for op in squares:
        assert use.consumer_count(op.ifm.tensor) == len(use.consumers[op.ifm.tensor]) + 1
        assert reusable_ifm(op, use, lambda fm: TensorFormat.NHWC) is None


@pytest.mark.slow
@pytest.mark.parametrize("arch, passes, seed, config", VELA_CASES)
def test_heuristic_equals_vela_legacy(tmp_path, arch, passes, seed, config):
    model = _write(tmp_path, arch, passes, seed)
    options = run_options_from_vela_args(model, CONFIGS[config], solver="heuristic")
    # Vela compiles the model the heuristic schedules: normalised (e.g. a U-Net's output head re-laid out).
    scheduled = tmp_path / "scheduled" / model.name
    scheduled.parent.mkdir()
    scheduled.write_bytes(scheduled_model_bytes(options))
    golden = tmp_path / "vela"
    golden.mkdir()
    assert run_golden(scheduled, CONFIGS[config], golden, timeout_seconds=300) == ""
    vela_passes = sum(len(s.ops) for s in read_verbose_schedule(golden / "vela_stdout.txt"))
    comparison = compare_with_golden(run(options), golden)
    _, network, _ = load_network(options)  # Vela's graph: CP-SAT's may write concatenations in place
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


# ---------------------------------------------------------------------------------------------------------------
# The transformer: npusched's CPU/NPU partition against Vela legacy's, operator by operator

# Vela's placement messages: semantic failures, failed NPU rules, operators without an NPU implementation.
_VELA_CPU_LINE = re.compile(r"^(?:Warning: Unsupported TensorFlow Lite semantics for (\w+) '(.*)'\. Placing on CPU"
                            r"|Warning: (\w+) '(.*)' is not supported on the NPU\. Placing on CPU"
                            r"|Info: (\w+) '(.*)' is a CPU only op)")


def _vela_cpu_operators(stdout: str) -> Counter:
    found: Counter = Counter()
    for line in stdout.splitlines():
        m = _VELA_CPU_LINE.match(line)
        if m:
            opcode, name = (g for g in m.groups() if g is not None)
            found[(opcode, name)] += 1
    return found


def _our_cpu_operators(sg) -> Counter:
    return Counter((sg.operators[i].opcode, sg.tensors[sg.operators[i].outputs[0]].name) for i in cpu_operators(sg))


# Seeds whose blocks draw every export variant between them: the GELU operator (exact and tanh form) and GELU as
# element-wise operators with TANH, the layer norm's SQUARED_DIFFERENCE and its SUB and MUL, and the key
# transposed by [0, 2, 3, 1] (CPU) or read through adj_y; seed 1 at 200 passes has three blocks.
TRANSFORMER_CASES = [(40, 0), (40, 1), (40, 4), (200, 1)]


def test_transformer_draws_every_export_variant():
    ops = Counter(op.opcode for passes, seed in TRANSFORMER_CASES
                  for op in parse_tflite(generate("transformer", passes, seed)).main.operators)
    assert {"GELU", "TANH", "SQUARED_DIFFERENCE", "RSQRT", "BATCH_MATMUL", "TRANSPOSE", "SOFTMAX"} <= set(ops)
    perms = {tuple(int(v) for v in np.asarray(sg.tensors[op.inputs[1]].data).reshape(-1))
             for passes, seed in TRANSFORMER_CASES for sg in [parse_tflite(generate("transformer", passes, seed)).main]
             for op in sg.operators if op.opcode == "TRANSPOSE"}
    assert perms == {(0, 2, 1, 3), (0, 2, 3, 1)}


@pytest.mark.parametrize("passes, seed", TRANSFORMER_CASES)
def test_transformer_runs_on_the_npu_whatever_vela_legacy_does(passes, seed):
    """npusched lowers every operator Vela legacy runs on the NPU here (RSQRT, SQUARED_DIFFERENCE, TRANSPOSE
    included): its placement is its mirror of Vela's verdict, operator by operator."""
    sg = parse_tflite(generate("transformer", passes, seed)).main
    for op in sg.operators:
        assert (npu_support(op, sg) is None) == (vela_cpu_reason(op, sg) is None), npu_support(op, sg)


@pytest.mark.slow
@pytest.mark.parametrize("passes, seed", TRANSFORMER_CASES)
def test_transformer_partition_equals_vela_legacy(tmp_path, passes, seed):
    """The same operators on the CPU as Vela legacy announces, and the same NPU subgraphs with the same passes
    in the same order as its --verbose-schedule (so --output-dir's subgraph check holds)."""
    model = tmp_path / "transformer.tflite"
    model.write_bytes(generate("transformer", passes, seed))
    golden = tmp_path / "vela"
    golden.mkdir()
    assert run_golden(model, CONFIGS["u55-128_hee_shared"], golden, timeout_seconds=300) == ""
    stdout = (golden / "vela_stdout.txt").read_text()
    sg = read_tflite(model).main
    ours, vela = _our_cpu_operators(sg), _vela_cpu_operators(stdout)
    assert ours == vela and sum(ours.values()) == read_cpu_operator_count(golden / "vela_stdout.txt")
    network = lower_model(read_tflite(model), load_architecture("ethos-u55-128"))
    vela_passes = [[op.name for op in s.ops] for s in read_verbose_schedule(golden / "vela_stdout.txt")]
    assert [[op.name for op in s.ops] for s in network.subgraphs] == vela_passes


def _velas_rsqrt_table(ifm: TfliteTensor, ofm: TfliteTensor) -> np.ndarray:
    """The lookup table Vela 5.2.0's own graph optimiser builds for an int8 RSQRT with these tensors."""
    def vela_tensor(t: TfliteTensor) -> VelaTensor:
        tens = VelaTensor(list(t.shape), VelaDataType.int8, t.name)
        tens.quantization = QuantizationParameters()
        tens.quantization.scale_f32 = float(t.quantization.scale[0])
        tens.quantization.zero_point = int(t.quantization.zero_point[0])
        return tens

    op = Operation(Op.Rsqrt, ofm.name)
    op.add_input_tensor(vela_tensor(ifm))
    op.set_output_tensor(vela_tensor(ofm))
    return np.asarray(create_lut_rsqrt_int8_op(op).activation_lut.values).reshape(-1)


@pytest.mark.parametrize("passes, seed", TRANSFORMER_CASES[:2])
def test_transformer_rsqrt_table_is_velas(passes, seed):
    """The layer norm's RSQRT becomes a table lookup fused into the ADD before it. Its table is DMA'd into SHRAM
    before the pass and the DMA is priced by the table's bytes, so it must be Vela's table: 256 int8 entries
    (a 16-bit table's 512 words made Vela's estimate of each such ADD differ from npusched's by 1,792 cycles on
    the U55). The entries may differ by one LSB: Vela evaluates the reference's fixed-point 1/sqrt."""
    model = parse_tflite(generate("transformer", passes, seed))
    sg = model.main
    ours = {op.activation_lut.name: op.activation_lut for s in lower_model(model, load_architecture("ethos-u55-128")
                                                                            ).subgraphs
            for op in s.ops if op.activation_lut is not None}
    rsqrts = [op for op in sg.operators if op.opcode == "RSQRT"]
    assert rsqrts
    for op in rsqrts:
        ofm = sg.tensors[op.outputs[0]]
        vela = _velas_rsqrt_table(sg.tensors[op.inputs[0]], ofm)
        table = ours[f"{ofm.name}_lut_rsqrt_values"]
        assert table.size_in_bytes == vela.nbytes and table.values.dtype == vela.dtype, ofm.name
        assert np.abs(table.values.reshape(-1).astype(int) - vela.astype(int)).max() <= 1, ofm.name


# Configurations whose LUT DMA costs differ (off-chip flash on the U55, DRAM on the U65) and both strategies.
BACKEND_CONFIGS = ("u55-128_hee_shared_size", "u65-256_mid_dedicated256k")


@pytest.mark.slow
@pytest.mark.parametrize("config", BACKEND_CONFIGS)
@pytest.mark.parametrize("solver", ["heuristic", "cpsat"])
def test_transformer_compiles_and_velas_estimate_agrees(tmp_path, config, solver):
    """Forced into Vela's backend, a transformer's schedule is priced by Vela op by op as by npusched (the RSQRT
    tables' DMA included)."""
    model = _write(tmp_path, "transformer", SMALL_PASSES, 0)
    overrides = {"time_limit_seconds": 10.0, "workers": 1, "deterministic": True} if solver == "cpsat" else {}
    result = run(run_options_from_vela_args(model, CONFIGS[config], solver=solver, **overrides))
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
    assert {op.op_index for op in compiled.ops} == {op.index for op in result.network.npu_ops}
