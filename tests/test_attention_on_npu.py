"""Attention's operators Vela legacy leaves to the CPU, on the NPU: BATCH_MATMUL of two activations (the right
operand written transposed by normalisation, ``matmul_operands``; the column passes of the lowering,
``npusched.lowering.batch_matmul``) and GELU (TFLite's own table, ``npusched.lowering.luts.gelu_lut8_values``), with
Vela legacy's backend taught the same passes (``npusched.vela.lessons``).

The passes are checked against the TFLite reference interpreter by computing them as the NPU does on the
interpreter's own operand tensors: the MUL subtracts the zero points and keeps the int32 product (unit explicit
scaling), the REDUCE_SUM adds over the depth and applies its explicit (multiplier, shift) the way the NPU's TFLite
rounding mode does (TFLite's MultiplyByQuantizedMultiplier, as for every convolution Vela compiles), then the output
zero point. No NPU runs here, so this judges the decomposition (views, offsets, zero points and scaling), with the
output stage taken to be TFLite's as for Vela's convolutions.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import interpreter
from conftest import CONFIGS
from test_normalise import _assert_exact, _lowered, _tensors

from npusched.app.floors import legacy_floor
from npusched.app.pipeline import run
from npusched.frontend.normalise import normalise
from npusched.frontend.normalise.matmul_operands import MATMUL_OPERANDS
from npusched.frontend.tflite_reader import parse_tflite, read_tflite
from npusched.ir import NpuOp, Quantization
from npusched.lowering.luts import gelu_lut8_values
from npusched.netgen import generate
from npusched.netgen.flatbuffer import serialise
from npusched.netgen.graph import GraphBuilder
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args
from npusched.vela.default_core import read_default_core_ops, run_default_core, schedule_from_default_core
from npusched.vela.lessons import batch_matmul_support


def _three_forms() -> bytes:
    """One product in each form the normaliser meets: Q·Kᵀ with K transposed [0, 2, 3, 1], scores·V of heads split
    from [1, T, D], and a [1, M, K] x [1, K, N] product of maps whose leading dimensions are 1."""
    g = GraphBuilder(np.random.default_rng(3))
    x = g.input((1, 12, 32))

    def heads(perm: tuple[int, ...]):
        return g.transpose(g.reshape(g.dense(x, 32), (1, 12, 2, 16)), perm)

    scores = g.batch_matmul(heads((0, 2, 1, 3)), heads((0, 2, 3, 1)))
    context = g.batch_matmul(g.softmax(scores), heads((0, 2, 1, 3)))
    plain = g.batch_matmul(g.dense(x, 12), g.dense(x, 8))
    return serialise(g.network([context, plain], "three BATCH_MATMUL operand forms"))


def _rescaled(total: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier of int32 ``total`` by the NPU's (multiplier, right shift)."""
    exponent = 31 - shift
    x = total.astype(np.int64) << max(exponent, 0)
    product = x * multiplier
    nudged = product + np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    high = np.sign(nudged) * (np.abs(nudged) >> 31)  # C++ division truncates towards zero
    right = max(-exponent, 0)
    mask = (1 << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def _computed(ops: list[NpuOp], values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each BATCH_MATMUL's output as its column passes compute it on the NPU, by output name."""
    outputs: dict[str, np.ndarray] = {}
    for mul, total in zip(ops[::2], ops[1::2], strict=True):
        assert (mul.op_type, total.op_type) == ("Mul", "ReduceSum")
        assert mul.attr("explicit_scaling") == (False, (0,), (1,))  # the product is kept exact
        assert mul.ifm2 is not None and mul.ifm2.offset is not None and mul.ifm2.access_shape is not None
        lhs = values[mul.ifm.tensor.name].astype(np.int64).reshape(mul.ifm.shape.as_list())
        rows = values[mul.ifm2.tensor.name].astype(np.int64).reshape(mul.ifm2.shape.as_list())
        start, size = mul.ifm2.offset.as_list(), mul.ifm2.access_shape.as_list()
        row = rows[tuple(slice(s, s + n) for s, n in zip(start, size, strict=True))]
        products = (lhs - mul.ifm.tensor.quantization.zero_point[0]) \
            * (row - mul.ifm2.tensor.quantization.zero_point[0])
        assert products.shape == tuple(mul.ofm.shape.as_list()) and np.abs(products).max() < 2 ** 31
        _, (shift,), (multiplier,) = total.attr("explicit_scaling")  # type: ignore[misc]
        column = _rescaled(products.sum(axis=-1), multiplier, shift) + total.ofm.tensor.quantization.zero_point[0]
        out = outputs.setdefault(total.ofm.tensor.name, np.zeros(total.ofm.shape.as_list(), dtype=np.int64))
        assert total.ofm.offset is not None
        out[..., total.ofm.offset.depth] = np.clip(column, -128, 127)
    return outputs


def _torch_forms() -> bytes:
    """Attention as a PyTorch export writes it, in 3-D: heads [T, H, d] -> [H, T, d], Q·Kᵀ as a product by K
    transposed [0, 2, 1] (a transpose Vela legacy does not run: the rewrite reads K itself), scores·V."""
    g = GraphBuilder(np.random.default_rng(5))
    x = g.input((1, 12, 32))

    def heads():
        return g.transpose(g.reshape(g.dense(x, 32), (12, 2, 16)), (1, 0, 2))

    scores = g.batch_matmul(heads(), g.transpose(heads(), (0, 2, 1)))
    return serialise(g.network([g.batch_matmul(g.softmax(scores), heads())], "PyTorch-style 3-D attention"))


def _products(data: bytes) -> list[tuple[str, bool]]:
    """(output, adj_y) of every BATCH_MATMUL of the first subgraph."""
    subgraph = parse_tflite(data).subgraphs[0]
    return [(subgraph.tensors[op.outputs[0]].name, bool(op.options.get("adj_y")))
            for op in subgraph.operators if op.opcode == "BATCH_MATMUL"]


@pytest.mark.parametrize("make, transposes", [(_three_forms, 4), (_torch_forms, 3)], ids=["three_forms", "torch"])
def test_every_operand_form_is_read_transposed_exactly(make, transposes: int) -> None:
    """Each product reads its right operand transposed, made by transposes Vela legacy runs (or none: PyTorch's K
    transposed [0, 2, 1] goes, the product reads K itself), every shared tensor bit-exact."""
    original = make()
    normalised, record = normalise(original)
    assert not any(adj_y for _, adj_y in _products(original))
    assert all(adj_y for _, adj_y in _products(normalised)) and record.sites_of(MATMUL_OPERANDS) == len(
        _products(original))
    assert [op.opcode for op in parse_tflite(normalised).main.operators].count("TRANSPOSE") == transposes
    assert _assert_exact(original, normalised) > 10


def _left_to_cpu() -> bytes:
    """Two products the column passes do not run: x·xᵀ, both operands one map (read at two shapes), and an outer
    product (a shared axis of 1)."""
    g = GraphBuilder(np.random.default_rng(0))
    x = g.input((1, 12, 32))
    h = g.dense(x, 16)
    outer = g.batch_matmul(g.dense(x, 1), g.dense(x, 1), adj_y=True)
    return serialise(g.network([g.batch_matmul(h, h, adj_y=True), outer], "a Gram matrix and an outer product"))


def test_npuscheds_rule_and_the_bridges_partition_alike() -> None:
    """The bridge asks npusched's rule (``batch_matmul_form``) of Vela's own operations: before normalisation none of
    the three products is in the form the NPU runs, after it none is left to the CPU, in either reading; a product
    of a map by itself and an outer product stay on the CPU in both."""
    from ethosu.vela.model_reader import ModelReaderOptions, read_model
    from ethosu.vela.operation import Op

    cases = ((_three_forms(), 3, 0), (normalise(_three_forms())[0], 3, 3), (_left_to_cpu(), 2, 0))
    for data, products, on_npu in cases:
        ours = {op.name for op in _lowered(data).cpu_ops if op.tflite_op == "BATCH_MATMUL"}
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / "model.tflite"
            path.write_bytes(data)
            nng, _ = read_model(str(path), ModelReaderOptions())
        vela_ops = [op for sg in nng.subgraphs for op in sg.get_all_ops() if op.type == Op.BatchMatMul]
        theirs = {op.outputs[0].name for op in vela_ops if batch_matmul_support(op) is not None}
        assert len(vela_ops) == products and ours == theirs and len(vela_ops) - len(theirs) == on_npu


@pytest.mark.parametrize("make", [_three_forms, _torch_forms, lambda: generate("transformer", 60, 0),
                                  lambda: generate("transformer", 40, 1, keras_style=True)],
                         ids=["three_forms", "torch", "transformer", "transformer_keras"])
def test_the_column_passes_compute_tflites_products(make) -> None:
    normalised, _ = normalise(make())
    network = _lowered(normalised)
    assert "BATCH_MATMUL" not in {op.tflite_op for op in network.cpu_ops}
    passes = [op for op in network.npu_ops if op.tflite_op == "BATCH_MATMUL"]
    for seed in (0, 1):
        values = _tensors(normalised, seed)
        computed = _computed(passes, values)
        assert len(computed) == len(_products(normalised)) >= 1
        for name, out in computed.items():
            expected = values[name].astype(np.int64).reshape(out.shape)
            assert np.array_equal(out, expected), (name, seed, np.abs(out - expected).max())


def test_the_gelu_table_is_tflites() -> None:
    """Every entry of the table npusched (and the bridge, for Vela) gives a GELU equals what TFLite's kernel makes of
    that input, erf and tanh forms, over 24 quantisations."""
    rng = np.random.default_rng(0)
    for trial in range(24):
        g = GraphBuilder(rng)
        approximate = bool(trial % 2)
        out = g.gelu(g.input((1, 256)), approximate)
        it = interpreter.Interpreter(model_content=serialise(g.network([out], "one GELU")),
                                     experimental_op_resolver_type=interpreter.OpResolverType.BUILTIN_REF)
        it.allocate_tensors()
        source, result = it.get_input_details()[0], it.get_output_details()[0]
        it.set_tensor(source["index"], np.arange(-128, 128, dtype=np.int8).reshape(1, 256))
        it.invoke()
        (in_scale, in_zero), (out_scale, out_zero) = source["quantization"], result["quantization"]
        table = gelu_lut8_values(Quantization((in_scale,), (in_zero,)), Quantization((out_scale,), (out_zero,)),
                                 approximate)
        assert table == it.get_tensor(result["index"]).reshape(-1).tolist(), (trial, approximate)


@pytest.mark.slow
@pytest.mark.parametrize("make, config, taught", [
    (lambda: generate("transformer", 60, 0), "u55-128_hee_shared", ("BATCH_MATMUL",)),
    (lambda: generate("transformer", 60, 0), "u65-256_mid_dedicated256k", ("BATCH_MATMUL",)),
    (lambda: generate("transformer", 40, 1), "u55-256_hee_shared_arena128k", ("BATCH_MATMUL", "GELU")),
    (_three_forms, "u65-512_high_dedicated384k", ("BATCH_MATMUL",)),
    (_torch_forms, "u55-128_hee_shared_size", ("BATCH_MATMUL",))],
    ids=["transformer_u55", "transformer_u65", "transformer_gelu", "three_forms_u65", "torch"])
def test_vela_legacy_compiles_the_products_and_agrees(tmp_path: Path, make, config: str, taught) -> None:
    """The whole network is one NPU subgraph; Vela legacy, taught the column passes, compiles CP-SAT's schedule into
    a file with no operator left to the CPU and prices it as npusched does; the report says what it was taught."""
    model = tmp_path / "model.tflite"
    model.write_bytes(make())
    result = run(run_options_from_vela_args(model, CONFIGS[config], solver="cpsat", time_limit_seconds=5.0,
                                            workers=1, deterministic=True))
    assert not result.network.cpu_ops
    legacy = legacy_floor(result.network, result.arch)  # what the report prints beside Vela legacy's own schedule
    assert not isinstance(legacy, Exception) and legacy.report.taught == taught
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
    assert [op.opcode for op in read_tflite(compiled.tflite_path).subgraphs[0].operators] == ["CUSTOM"]


@pytest.mark.slow
def test_the_default_cores_model_prices_the_column_passes_near_its_own_matmul(tmp_path: Path) -> None:
    """The default core runs each BATCH_MATMUL as one compound MatMul of the same column passes, and its model counts
    the int32 product map as scratch (one byte per element): npusched's passes, priced by that model, come within
    15% of the core's own MatMul estimate (priced as passes of their own, four bytes per element, they cost 1.65x:
    block configs and each pass's own memory-or-compute bound make the rest). Its schedule read back gives each
    column pass the MatMul's decisions."""
    model = tmp_path / "transformer.tflite"
    model.write_bytes(normalise(generate("transformer", 60, 0))[0])
    options = run_options_from_vela_args(model, CONFIGS["u55-128_hee_shared"], solver="heuristic",
                                         estimator="vela-default", normalise=False)
    core_ops = read_default_core_ops(run_default_core(options, tmp_path / "default"))
    theirs = {op.name: op.op_cycles for op in core_ops if op.operator == "MatMul"}
    result = run(options)
    assert result.evaluation is not None and len(theirs) == 2
    for name, cycles in theirs.items():
        ours = sum(cost.total_cycles for cost in result.evaluation.ops
                   if cost.name.startswith(f"{name}_mul") or cost.name.startswith(f"{name}_sum"))
        assert 0.9 * cycles <= ours <= 1.15 * cycles, (name, ours, cycles)
    # Read back (--solver vela-default), every column pass takes its decisions from the core's MatMul.
    matched = schedule_from_default_core(result.network, result.arch, core_ops).matched
    columns = [op for op in result.network.npu_ops if op.tflite_op == "BATCH_MATMUL"]
    assert len(columns) == 2 * (49 + 16)
    assert all(matched[op.index].operator == "MatMul" for op in columns)
