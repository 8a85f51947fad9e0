"""Every operator Vela 5.2.0's legacy core runs on the NPU, npusched runs there too, as the same passes.

The operator set is read from Vela itself (``TFLiteSupportedOperators.supported_operators``), so an operator Vela
adds fails ``test_npusched_runs_every_operator_vela_runs`` until npusched lowers it (and
``tests/operator_models.py`` has a model of it). Vela's placement and passes come from its own graph optimiser
and pass packing, run in this process on each small model; npusched must leave nothing to the CPU and make the very
passes (names, order) Vela packs. For the operators lowered last (ABS, ARG_MAX, EXP, MIRROR_PAD, PACK, PRELU,
RELU_0_TO_1, UNPACK) the slow tier holds the heuristic's schedule to the `vela` CLI's and has Vela's backend compile
it; the tables npusched computes (EXP, a PRELU's single alpha) are checked entry by entry against the TFLite
reference interpreter.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ai_edge_litert import interpreter
from conftest import CONFIGS
from ethosu.vela import architecture_features, graph_optimiser, mark_tensors, model_reader, pass_packing
from ethosu.vela.nn_graph import PassPlacement
from ethosu.vela.tflite_mapping import BUILTIN_OPERATOR_UNKNOWN, optype_to_builtintype
from ethosu.vela.tflite_supported_operators import TFLiteSupportedOperators
from operator_models import (
    VARIANTS,
    VELA_OPERATOR_MODELS,
    Net,
    arg_max,
    conv,
    mirror_pad,
    prelu,
    unpack,
    with_signature,
)
from operator_models import recurrent_stack as recurrent_stack_model

from npusched.app.pipeline import load_network, run, scheduled_model_bytes
from npusched.frontend.normalise import normalise
from npusched.frontend.normalise.flatbuffer import signature, unpack_model
from npusched.frontend.normalise.folding import fix_batch
from npusched.frontend.normalise.stacking import STACKING
from npusched.frontend.op_view import NPU_OPERATORS, TAUGHT_OPERATORS, VELA_NPU_OPERATORS
from npusched.frontend.supported import UNPACK_NEGATIVE_AXIS, npu_support
from npusched.frontend.tflite_reader import parse_tflite
from npusched.ir import NpuOp, Quantization
from npusched.lowering import luts
from npusched.lowering.graph import Network, lower_model
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.fidelity import compare_with_golden
from npusched.vela.golden import run_golden
from npusched.vela.report import read_cpu_operator_count, read_verbose_schedule

# Vela's supported operator types as TFLite builtins (its internal-only types, which no file holds, dropped).
VELA_SET = frozenset(optype_to_builtintype(op) for op in TFLiteSupportedOperators.supported_operators) \
    - {BUILTIN_OPERATOR_UNKNOWN}
# Operators both fold into constants before placement: no pass of their own on either side.
FOLDED = {"SHAPE": "Vela and npusched both turn a SHAPE of a map into a constant before placing anything"}
# The operators npusched lowered last, as Vela's graph optimiser does.
LOWERED_LAST = ("ABS", "ARG_MAX", "EXP", "MIRROR_PAD", "PACK", "PRELU", "RELU_0_TO_1", "UNPACK")


def _vela_arch() -> Any:
    with contextlib.redirect_stdout(io.StringIO()):
        default = architecture_features.ArchitectureFeatures.DEFAULT_CONFIG
        return architecture_features.ArchitectureFeatures(
            vela_config_files=None, system_config=default, memory_mode=default, accelerator_config="ethos-u55-128",
            max_blockdep=3, verbose_config=False, arena_cache_size=None)


_VELA_ARCH = _vela_arch()


def _vela_graph(data: bytes) -> Any:
    """Vela legacy's graph of ``data`` after its graph optimiser and pass packing (its stdout swallowed)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.tflite"
        path.write_bytes(data)
        with contextlib.redirect_stdout(io.StringIO()):
            nng, network_type = model_reader.read_model(str(path), model_reader.ModelReaderOptions())
            nng = graph_optimiser.optimise_graph(nng, _VELA_ARCH, network_type, False, False)
            nng = mark_tensors.mark_tensor_purpose(nng, _VELA_ARCH, False)
            pass_packing.pack_into_passes(nng, _VELA_ARCH, False)
    return nng


def _vela_passes(data: bytes) -> tuple[list[Any], list[str]]:
    """(the primary op of every NPU pass, the types of the operators on the CPU), in Vela's pass order."""
    npu, cpu = [], []
    for sg in _vela_graph(data).subgraphs:
        for ps in sg.passes:
            if ps.placement == PassPlacement.Npu:
                npu.append(ps.primary_op)
            elif ps.placement == PassPlacement.Cpu:
                cpu += [optype_to_builtintype(op.type) for op in ps.ops]
    return npu, cpu


def _lowered(data: bytes) -> Network:
    return lower_model(parse_tflite(data), None)


def _assert_same_passes(data: bytes) -> tuple[list[Any], Network]:
    """Vela runs everything of ``data`` on the NPU, and npusched makes the same passes in the same order."""
    vela, vela_cpu = _vela_passes(data)
    network = _lowered(data)
    assert vela_cpu == [], f"Vela leaves {vela_cpu} to the CPU: the model does not show the operator on the NPU"
    assert [(c.tflite_op, c.reason) for c in network.cpu_ops] == []
    assert [op.name for op in network.npu_ops] == [op.name for op in vela]
    return vela, network


# ---------------------------------------------------------------------------------------------------------------
# the whole set

def test_the_frontend_lists_velas_set() -> None:
    """npusched's list of Vela's NPU operators is Vela's own (and the operators its bridge teaches Vela), and
    npusched lowers every one of them that is not folded away first."""
    assert VELA_NPU_OPERATORS == VELA_SET | TAUGHT_OPERATORS
    assert VELA_SET - set(FOLDED) <= NPU_OPERATORS


@pytest.mark.parametrize("opcode", sorted(VELA_SET))
def test_npusched_runs_every_operator_vela_runs(opcode: str) -> None:
    """A model where Vela legacy runs ``opcode`` on the NPU: npusched runs every operator of it on the NPU too, as
    the passes Vela packs, named and ordered as Vela's."""
    make = VELA_OPERATOR_MODELS.get(opcode)
    assert make is not None, f"Vela runs {opcode} on the NPU: give it a model in tests/operator_models.py"
    data = make()
    subgraph = parse_tflite(data).main
    ours = [op for op in subgraph.operators if op.opcode == opcode]
    assert ours, f"the {opcode} model has no {opcode}"
    assert all(npu_support(op, subgraph) is None for op in ours) or opcode in FOLDED
    vela, network = _assert_same_passes(data)
    assert vela and network.npu_ops


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_form_of_the_operators_lowered_last_is_velas(name: str) -> None:
    """Each form Vela's graph optimiser gives the operators lowered last (PRELU's three, the mirrored edges,
    ARG_MAX's chunks and int64 output, PACK and UNPACK along every axis, int16) makes Vela's passes."""
    _assert_same_passes(VARIANTS[name]())


def _shape(shape: Any) -> list[int] | None:
    return None if shape is None else [int(v) for v in shape]


def _offset(shape: Any) -> list[int] | None:
    """An offset, None where there is none or it is zero (both mean the slice starts at the origin)."""
    return None if shape is None or not any(shape) else _shape(shape)


def _access(op: NpuOp) -> tuple[Any, ...]:
    ifm, ofm = op.ifm, op.ofm
    return (op.op_type, _shape(ifm.shape.as_list()), _offset(ifm.offset and ifm.offset.as_list()),
            _shape(ifm.access_shape and ifm.access_shape.as_list()), _shape(ofm.shape.as_list()),
            _offset(ofm.offset and ofm.offset.as_list()), _shape(ofm.access_shape and ofm.access_shape.as_list()),
            list(op.attr("ofm_stride_multiplier", (1, 1, 1))), op.attr("tile_base_offset_ofm", 0))


def _vela_access(op: Any) -> tuple[Any, ...]:
    return (op.type.name, _shape(op.ifm_shapes[0]), _offset(op.read_offsets[0]), _shape(op.read_shapes[0]),
            _shape(op.ofm_shapes[0]), _offset(op.write_offset), _shape(op.write_shape),
            list(op.ofm_stride_multiplier), op.tile_base_offsets_ofm[0])


@pytest.mark.parametrize("make", [
    lambda: mirror_pad([[0, 0], [1, 2], [2, 1], [0, 0]], 0), lambda: mirror_pad([[0, 0], [2, 1], [1, 2], [0, 0]], 1),
    lambda: mirror_pad([[1, 1], [2, 2], [0, 0]], 0, (6, 6, 8), int16=True), lambda: arg_max((1, 300, 240, 2)),
    lambda: unpack((1, 2, 4, 8), 2)], ids=["reflect", "symmetric", "int16", "argmax_chunks", "unpack"])
def test_reads_writes_and_strides_are_velas(make: Callable[[], bytes]) -> None:
    """What the cost model does not see but the command stream needs: every pass reads and writes the slices Vela's
    do, with its strides and tile offsets (the mirrored edges written backwards, ARG_MAX's chunks)."""
    vela, network = _assert_same_passes(make())
    for theirs, ours in zip(vela, network.npu_ops, strict=True):
        assert _access(ours) == _vela_access(theirs), ours.name


def test_arg_max_tables_are_velas() -> None:
    """ARG_MAX's shift weights, reversed-index bias and 7-bit extraction table are the ones Vela builds."""
    data = arg_max()
    vela, network = _assert_same_passes(data)
    for theirs, ours in zip(vela, network.npu_ops, strict=True):
        if theirs.activation_lut is not None:
            assert ours.activation_lut is not None
            expected = np.asarray(theirs.activation_lut.values, dtype=np.int64).astype(np.uint32)
            assert np.array_equal(np.asarray(ours.activation_lut.values).view(np.uint32).reshape(-1),
                                  expected.reshape(-1))
        if theirs.bias is not None:
            assert ours.bias is not None and np.array_equal(ours.bias.values, theirs.bias.values)
            assert np.array_equal(np.asarray(ours.weights.values).reshape(-1),
                                  np.asarray(theirs.weights.values).reshape(-1))


# ---------------------------------------------------------------------------------------------------------------
# what npusched deliberately leaves to the CPU, and why that still holds

def _vela_fails(data: bytes) -> bool:
    try:
        _vela_graph(data)
    except (IndexError, AssertionError):
        return True
    return False


def _vela_reads_unpack_slices_across_depth(data: bytes) -> bool:
    """Vela's slices of an UNPACK of a [1, 8, 3] map along axis 1 (-2) start at depth offsets, not rows."""
    vela, _ = _vela_passes(data)
    offsets = [op.read_offsets[0] for op in vela if op.read_offsets[0] is not None and any(op.read_offsets[0])]
    return bool(offsets) and all(o.depth != 0 and o.width == 0 for o in offsets)


def _grouped_convolution_runs_once_split(data: bytes) -> bool:
    """Normalisation splits the grouped convolution into whole groups, which Vela and npusched run on the NPU as the
    same passes (Vela 5.2.0's own split of the groups fails here: its SPLIT axis is a 1-D tensor numpy 2 will not
    turn into an int)."""
    normalised, record = normalise(data)
    _assert_same_passes(normalised)
    return record.sites_of("grouped_convolution") >= 1


# Forms of operators in Vela's set npusched leaves to the CPU -> (model, npusched's reason, the check that the
# reason still holds).
DELIBERATELY_ON_THE_CPU: dict[str, tuple[Callable[[], bytes], str, Callable[[bytes], bool]]] = {
    "UNPACK along axis -1": (lambda: unpack((1, 8, 3), -1), UNPACK_NEGATIVE_AXIS, _vela_fails),
    "UNPACK along axis -2": (lambda: unpack((1, 8, 3), -2), UNPACK_NEGATIVE_AXIS,
                             _vela_reads_unpack_slices_across_depth),
    "grouped CONV_2D, not normalised": (lambda: conv(groups=2), "grouped convolution",
                                        _grouped_convolution_runs_once_split),
}


@pytest.mark.parametrize("case", sorted(DELIBERATELY_ON_THE_CPU))
def test_what_npusched_leaves_to_the_cpu_still_has_its_reason(case: str) -> None:
    make, reason, holds = DELIBERATELY_ON_THE_CPU[case]
    data = make()
    network = _lowered(data)
    assert network.cpu_ops and all(reason in c.reason for c in network.cpu_ops), [c.reason for c in network.cpu_ops]
    assert holds(data), f"{case}: the reason npusched leaves it to the CPU no longer holds"


# ---------------------------------------------------------------------------------------------------------------
# tables npusched computes, against the reference interpreter

def _reference(data: bytes, values: np.ndarray) -> tuple[np.ndarray, Quantization, Quantization]:
    it = interpreter.Interpreter(model_content=data,
                                 experimental_op_resolver_type=interpreter.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    source, result = it.get_input_details()[0], it.get_output_details()[0]
    it.set_tensor(source["index"], values.reshape(source["shape"]))
    it.invoke()
    (in_scale, in_zero), (out_scale, out_zero) = source["quantization"], result["quantization"]
    return (it.get_tensor(result["index"]).reshape(-1).astype(np.int64), Quantization((in_scale,), (in_zero,)),
            Quantization((out_scale,), (out_zero,)))


def _single(opcode: str, length: int, in_scale: float, in_zero: int, out_scale: float, out_zero: int,
            dtype: str = "INT8") -> bytes:
    net = Net()
    x = net.input((1, length), in_scale, in_zero, dtype)
    y = net.act((1, length), out_scale, out_zero, dtype)
    net.op(opcode, (x,), (y,))
    return net.model([y])


def test_the_exp_table_is_tflites() -> None:
    """Every entry of an int8 EXP's table equals what TFLite's kernel makes of that input, over 64 quantisations."""
    rng = np.random.default_rng(0)
    for trial in range(64):
        data = _single("EXP", 256, float(np.float32(rng.uniform(0.004, 0.25))), int(rng.integers(-128, 128)),
                       float(np.float32(rng.uniform(0.004, 4.0))), int(rng.integers(-128, 128)))
        expected, ifm, ofm = _reference(data, np.arange(-128, 128, dtype=np.int8))
        assert luts.exp_lut8_values(ifm, ofm) == expected.tolist(), trial


def test_the_int16_exp_table_interpolates_to_tflites() -> None:
    """An int16 EXP's 512 base/slope words, read the way TFLite's int16 kernel reads its table (entry value >> 7,
    the low 7 bits interpolating to the next), give what the kernel gives for every one of the 65536 inputs."""
    rng = np.random.default_rng(1)
    inputs = np.arange(-32768, 32768, dtype=np.int64)
    for trial in range(8):
        data = _single("EXP", 65536, float(np.float32(rng.uniform(5e-5, 5e-4))), 0,
                       float(np.float32(rng.uniform(1e-4, 1e-2))), 0, "INT16")
        expected, ifm, ofm = _reference(data, inputs.astype(np.int16))
        words = np.asarray(luts.exp_lut16_values(ifm, ofm), dtype=np.int64)
        base, slope = (words & 0xFFFF).astype(np.uint16).astype(np.int16), (words >> 16).astype(np.uint16)
        slope = slope.astype(np.int16).astype(np.int64)
        index, fraction = 256 + (inputs >> 7), inputs & 0x7F
        ours = base.astype(np.int64)[index] + ((slope[index] * fraction + 64) >> 7)
        assert np.array_equal(np.clip(ours, -32768, 32767), expected), trial


def test_a_single_alpha_prelu_table_is_tflites() -> None:
    """A PRELU whose alpha is one value runs as a table: every entry equals TFLite's PRELU of that input."""
    rng = np.random.default_rng(2)
    for trial in range(64):
        alpha, alpha_scale, alpha_zero = int(rng.integers(-128, 128)), float(np.float32(rng.uniform(0.001, 0.05))), \
            int(rng.integers(-16, 16))
        net = Net(trial)
        x = net.input((1, 256), float(np.float32(rng.uniform(0.004, 0.2))), int(rng.integers(-128, 128)))
        y = net.act((1, 256), float(np.float32(rng.uniform(0.004, 0.2))), int(rng.integers(-128, 128)))
        net.op("PRELU", (x, net.const([alpha], "INT8", [alpha_scale], [alpha_zero])), (y,))
        expected, ifm, ofm = _reference(net.model([y]), np.arange(-128, 128, dtype=np.int8))
        table = luts.prelu_lut8_values(ifm, Quantization((alpha_scale,), (alpha_zero,)), alpha, ofm,
                                       luts.DataType.int8)
        assert table == expected.tolist(), trial


@pytest.mark.parametrize("make, table", [
    (lambda: _single("EXP", 64, 0.05, 3, 0.1, -100), lambda ifm, ofm: luts.exp_lut8_values(ifm, ofm)),
    (lambda: prelu([30] * 16), None)], ids=["exp", "prelu"])
def test_the_lowered_pass_carries_the_table(make: Callable[[], bytes], table: Any) -> None:
    """The pass npusched makes of the operator looks its OFM up in that table."""
    data = make()
    (op,) = _lowered(data).npu_ops
    assert op.activation == "LUT" and op.activation_lut is not None
    model = parse_tflite(data).main
    first = model.operators[0]
    ifm, ofm = (model.tensor(first.inputs[0]), model.tensor(first.outputs[0]))
    if table is None:
        alpha = model.tensor(first.inputs[1])
        expected = luts.prelu_lut8_values(ifm.quantization, alpha.quantization, int(alpha.data.reshape(-1)[0]),
                                          ofm.quantization, ifm.dtype)
    else:
        expected = table(ifm.quantization, ofm.quantization)
    assert np.asarray(op.activation_lut.values).reshape(-1).tolist() == expected


# ---------------------------------------------------------------------------------------------------------------
# a batch made dynamic in another dimension than the first

def test_a_time_major_batch_is_fixed_and_the_stack_written_as_split_and_concatenation() -> None:
    """Keras's unrolled recurrent layer transposed time-major keeps its dynamic batch in dimension 1 ([T, -1, F]):
    normalisation fixes it at 1 there too, so the UNPACK and PACK of the steps are written as a SPLIT and a
    CONCATENATION, exactly."""
    data = recurrent_stack_model()
    normalised, record = normalise(data)
    assert record.fixed_batch_inputs == (parse_tflite(data).main.tensors[0].name,)
    model = parse_tflite(normalised).main
    assert all(t.shape_signature is None or -1 not in t.shape_signature for t in model.tensors)
    assert record.sites_of(STACKING) == 2
    assert not {"PACK", "UNPACK"} & {op.opcode for op in model.operators}
    assert not _lowered(normalised).cpu_ops


def _signatures_after_fix(make: Callable[[Net], None]) -> tuple[list[str], list[tuple[int, ...] | None],
                                                                   list[tuple[int, ...]]]:
    """(inputs fixed, signatures, shapes) of a one-operator model's tensors after ``fix_batch``."""
    net = Net()
    make(net)
    model = unpack_model(net.model([len(net.tensors) - 1]))
    subgraph = model.subgraphs[0]
    fixed = fix_batch(subgraph)
    return (fixed, [signature(t) for t in subgraph.tensors],
            [tuple(int(v) for v in t.shape) for t in subgraph.tensors])


def _relu(shape: tuple[int, ...], signature: tuple[int, ...]) -> Callable[[Net], None]:
    def make(net: Net) -> None:
        x = net.input(shape, signature=signature)
        y = net.like(x)
        net.tensors[y] = with_signature(net.tensors[y], signature)
        net.op("RELU", (x,), (y,))
    return make


@pytest.mark.parametrize("shape, sig, fixed", [
    ((1, 6, 10), (-1, 6, 10), True),  # the batch first, as before
    ((6, 1, 10), (6, -1, 10), True),  # the batch moved by a transpose: static 1 there
    ((1, 6, 10), (-1, -1, 10), False),  # a dynamic sequence too: nothing is fixed, as before
    ((1, 6, 10), (1, -1, 10), False),  # dynamic where the static shape is not 1: a length, not the batch
])
def test_fix_batch_fixes_one_dynamic_unit_dimension(shape: tuple[int, ...], sig: tuple[int, ...],
                                                    fixed: bool) -> None:
    names, signatures, shapes = _signatures_after_fix(_relu(shape, sig))
    if fixed:
        assert names == ["t0"] and signatures == [None, None]
        assert shapes == [tuple(1 if v == -1 else v for v in sig)] * 2
    else:
        assert names == [] and signatures == [sig, sig] and shapes == [shape, shape]


def test_a_negative_axis_unpack_runs_on_the_npu_once_written_as_a_split() -> None:
    """The UNPACK npusched leaves to the CPU as given (Vela mis-reads its axis) is a SPLIT once normalised, which
    both run as the same passes."""
    normalised, record = normalise(unpack((1, 8, 3), -1))
    assert record.sites_of(STACKING) == 1
    _assert_same_passes(normalised)


# ---------------------------------------------------------------------------------------------------------------
# the slow tier: the heuristic against the `vela` CLI, and Vela's backend compiling it

_CONFIG_NAMES = sorted(CONFIGS)
# (case, model maker, normalise first): each operator lowered last in its own model, and the forms that make other
# passes; the time-major recurrent stack both as normalisation writes it and as given.
_SCHEDULED: list[tuple[str, Callable[[], bytes], bool]] = [
    *((opcode, VELA_OPERATOR_MODELS[opcode], False) for opcode in LOWERED_LAST),
    ("prelu_one_alpha", VARIANTS["prelu_one_alpha"], False),
    ("prelu_alpha_activation", VARIANTS["prelu_alpha_activation"], False),
    ("prelu_one_negative_alpha_int16", VARIANTS["prelu_one_negative_alpha_int16"], False),
    ("mirror_pad_columns", VARIANTS["mirror_pad_columns"], False),
    ("arg_max_int64", VARIANTS["arg_max_int64"], False),
    ("exp_int16", VARIANTS["exp_int16"], False),
    ("recurrent_stack", recurrent_stack_model, False),
    ("recurrent_stack_normalised", recurrent_stack_model, True),
]
# Each case under two of the five configurations, taking them in turn.
HEURISTIC_CASES = [(name, make, normalised, _CONFIG_NAMES[(2 * i + k) % len(_CONFIG_NAMES)])
                   for i, (name, make, normalised) in enumerate(_SCHEDULED) for k in (0, 1)]


def _options(tmp_path: Path, name: str, make: Callable[[], bytes], normalised: bool, config: str, **extra: Any
             ) -> Any:
    model = tmp_path / f"{name}.tflite"
    model.write_bytes(make())
    return run_options_from_vela_args(model, CONFIGS[config], solver="heuristic", normalise=normalised, **extra)


@pytest.mark.slow
@pytest.mark.parametrize("name, make, normalised, config", HEURISTIC_CASES,
                         ids=[f"{case[0]}-{case[3]}" for case in HEURISTIC_CASES])
def test_heuristic_equals_vela_legacy(tmp_path: Path, name: str, make: Callable[[], bytes], normalised: bool,
                                      config: str) -> None:
    """Vela legacy (the CLI) and npusched's heuristic schedule the same passes with the same block configs, cascades
    and cycles, op by op and in total, with nothing on the CPU."""
    options = _options(tmp_path, name, make, normalised, config)
    scheduled = tmp_path / "scheduled" / f"{name}.tflite"
    scheduled.parent.mkdir()
    scheduled.write_bytes(scheduled_model_bytes(options))
    golden = tmp_path / "vela"
    golden.mkdir()
    assert run_golden(scheduled, CONFIGS[config], golden, timeout_seconds=300) == ""
    stdout = golden / "vela_stdout.txt"
    _, network, _ = load_network(options)
    assert [op.name for sg in network.subgraphs for op in sg.ops] == \
        [op.name for schedule in read_verbose_schedule(stdout) for op in schedule.ops]
    assert not network.cpu_ops and read_cpu_operator_count(stdout) == 0
    comparison = compare_with_golden(run(options), golden)
    assert comparison.cycles_ours == comparison.cycles_vela and comparison.cascades_equal
    assert all(op.block_equal and op.cycles_ours == op.cycles_vela for op in comparison.ops), \
        [op for op in comparison.ops if not op.block_equal or op.cycles_ours != op.cycles_vela]


BACKEND_CASES = [(name, make, normalised, _CONFIG_NAMES[i % len(_CONFIG_NAMES)])
                 for i, (name, make, normalised) in enumerate(_SCHEDULED)]


@pytest.mark.slow
@pytest.mark.parametrize("name, make, normalised, config", BACKEND_CASES,
                         ids=[f"{case[0]}-{case[3]}" for case in BACKEND_CASES])
def test_velas_backend_compiles_the_heuristic_schedule(tmp_path: Path, name: str, make: Callable[[], bytes],
                                                       normalised: bool, config: str) -> None:
    """Forced into Vela's backend, the heuristic's schedule compiles op by op and Vela's estimate is npusched's."""
    result = run(_options(tmp_path, name, make, normalised, config))
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
    assert len(compiled.ops) == len(result.network.npu_ops)
    assert compiled.vela_total_cycles == result.evaluation.total_cycles
