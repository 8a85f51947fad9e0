"""The normalisation rewrites for the forms the zoo of real exports showed (issue 45): each exact under the TFLite
reference interpreter, on the zoo file where it was found and on small models of the form (tests/export_forms.py,
two seeds each), and each moving the operators of its form from the CPU to the NPU.

Exactness: both models run on the same seeded random inputs and every tensor they share is compared bit for bit
(``first_difference``). Three zoo files hold operators the interpreter's reference kernels do not register at the
version the converter wrote (TILE 3, DEPTH_TO_SPACE 2); those are run at version 1, whose int8 kernel is the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import export_forms as forms
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from conftest import CONFIGS, EXPORTS_DIR

from npusched.app.pipeline import run
from npusched.frontend.normalise import normalise
from npusched.frontend.normalise.flatbuffer import pack_model, unpack_model
from npusched.frontend.normalise.float_islands import FLOAT_ISLANDS
from npusched.frontend.normalise.transposition import groups, steps
from npusched.frontend.normalise.verify import first_difference
from npusched.frontend.tflite_reader import parse_tflite
from npusched.lowering.graph import lower_model
from npusched.target.estimators import load_architecture
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args

ARCH = load_architecture("ethos-u55-128")


def _runnable(data: bytes) -> bytes:
    """The model with TILE and DEPTH_TO_SPACE at version 1, which the reference resolver registers."""
    model = unpack_model(data)
    for code in model.operatorCodes:
        if max(code.builtinCode, code.deprecatedBuiltinCode) in (schema.BuiltinOperator.TILE,
                                                                   schema.BuiltinOperator.DEPTH_TO_SPACE):
            code.version = 1
    return pack_model(model)


def _cpu(data: bytes) -> Counter[str]:
    return Counter(op.tflite_op for op in lower_model(parse_tflite(data), ARCH).cpu_ops)


def _normalised(data: bytes) -> tuple[bytes, dict[str, int]]:
    out, record = normalise(data)
    return out, {r.name: r.applied for r in record.rewrites if r.applied}


# The forms: builder, the rewrites it must apply, the CPU operators its export has that normalisation moves.
FORMS: dict[str, tuple[Callable[[int], bytes], set[str], set[str]]] = {
    "layer_norm": (forms.layer_norm, {"mean_axis", "float_island", "channel_mean"},
                   {"MEAN", "DEQUANTIZE", "NEG", "QUANTIZE"}),
    "group_norm": (forms.group_norm, {"channel_mean", "high_rank", "reshape_chain"},
                   {"RESHAPE", "MEAN", "SUB", "RSQRT", "MUL"}),
    "attention_5d": (forms.attention_5d, {"high_rank", "transpose", "reshape_chain"},
                     {"RESHAPE", "TRANSPOSE", "MUL", "BATCH_MATMUL", "SOFTMAX"}),
    "tensordot_dense": (forms.tensordot_dense, {"static_shape"}, {"RESHAPE", "FULLY_CONNECTED"}),
    "last_step": (forms.last_step, {"gather"}, {"GATHER"}),
    "global_max": (forms.global_max, {"max_reduction"}, {"REDUCE_MAX"}),
    "patch_embedding": (forms.patch_embedding, {"strided_convolution"}, {"CONV_2D"}),
    "nchw_transposes": (forms.nchw_transposes, {"transpose"}, {"TRANSPOSE"}),
    "pixel_shuffle": (forms.pixel_shuffle, {"transpose", "reshape_chain"}, {"RESHAPE", "TRANSPOSE"}),
    "gated_tcn": (forms.gated_tcn, {"dilated_convolution"}, {"SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"}),
    "upsamplings": (forms.upsamplings, {"nearest_upsampling"}, {"EXPAND_DIMS", "TILE", "RESHAPE"}),
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_form_is_rewritten_exactly_onto_the_npu(form: str, seed: int) -> None:
    build, rewrites, moved = FORMS[form]
    data = build(seed)
    out, applied = _normalised(data)
    assert rewrites <= set(applied), applied
    differing, compared = first_difference(_runnable(data), _runnable(out), seeds=(0, 1))
    assert differing is None and compared > 0
    before, after = _cpu(data), _cpu(out)
    assert moved <= set(before), before
    assert not moved & set(after), after


# Zoo files the reference interpreter runs (ELU, a Flex operator: not) where the new rewrites apply, and what they
# must apply there.
ZOO = {
    "kws_tcn_49x40": {"dilated_convolution"},
    "unit_conv1d_variants": {"dilated_convolution"},
    "unit_upsample": {"static_shape", "nearest_upsampling"},
    "deeplab_aspp_96x128": {"static_shape", "nearest_upsampling"},
    "yolov8_tiny_128": {"static_shape", "nearest_upsampling"},
    "vit_tiny_64": {"static_shape", "mean_axis", "float_island", "strided_convolution"},
    "convnext_atto_64": {"static_shape", "mean_axis", "float_island", "channel_mean", "strided_convolution"},
    "mobilevit_xxs_96": {"static_shape", "mean_axis", "float_island", "channel_mean", "high_rank", "transpose",
                         "reshape_chain"},
    "unit_dense_nd": {"static_shape"},
    "unit_norms": {"mean_axis", "float_island", "channel_mean", "high_rank", "reshape_chain"},
    "unit_reductions": {"mean_axis", "max_reduction", "transpose"},
    "person_argmax_96": {"max_reduction"},
    "pt_vit_tiny_64": {"strided_convolution"},
    "pt_yolov8_tiny_128": {"transpose"},
    "pt_kws_cnn": {"transpose"},
    "pt_espcn_x2_96": {"transpose", "reshape_chain"},
    "pt_kws_gru": {"gather"},
}


@pytest.mark.parametrize("model", [pytest.param(model, marks=pytest.mark.slow) if model == "pt_kws_gru" else model
                                   for model in sorted(ZOO)])
def test_the_zoo_file_is_rewritten_exactly(model: str) -> None:
    data = (EXPORTS_DIR / f"{model}.tflite").read_bytes()
    out, applied = _normalised(data)
    assert ZOO[model] <= set(applied), applied
    differing, compared = first_difference(_runnable(data), _runnable(out), seeds=(0, 1))
    assert differing is None and compared > 0


# ---------------------------------------------------------------------------------------------------------------
# the pieces the rewrites rest on

def test_block_swaps_do_every_permutation() -> None:
    """``transposition.steps`` moves every element where the permutation does, on random shapes and permutations
    of 2 to 6 axes (unit axes and neighbours that stay neighbours included)."""
    rng = np.random.default_rng(0)
    for _ in range(400):
        rank = int(rng.integers(2, 7))
        shape = tuple(int(v) for v in rng.integers(1, 4, size=rank))
        perm = tuple(int(v) for v in rng.permutation(rank))
        index = np.arange(int(np.prod(shape))).reshape(shape)
        swaps = steps(*groups(shape, perm))
        assert swaps is not None and len(swaps) < max(rank, 2)
        moved = index.reshape(-1)
        for swap in swaps:
            moved = np.transpose(moved.reshape(swap.shape), (1, 0, 2)).reshape(-1)
        assert np.array_equal(moved, np.transpose(index, perm).reshape(-1)), (shape, perm)


@pytest.mark.parametrize("zero_point", [-128, -7, 0, 5, 127])
def test_a_negated_island_is_exact_on_all_256_inputs(zero_point: int) -> None:
    """Keras 3's ``-mean`` island (scale kept, zero point -z - 1) is replaced, and its table over every int8 input
    is the island's: the proof the rewrite rests on, checked here on a model fed all 256 values."""
    data = forms.layer_norm(3)
    model = unpack_model(data)
    graph = model.subgraphs[0]
    codes = [max(model.operatorCodes[op.opcodeIndex].builtinCode,
                 model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode) for op in graph.operators]
    dequantize = graph.operators[codes.index(schema.BuiltinOperator.DEQUANTIZE)]
    quantize_op = graph.operators[codes.index(schema.BuiltinOperator.QUANTIZE)]
    mean, quantize = graph.tensors[dequantize.inputs[0]], graph.tensors[quantize_op.outputs[0]]
    mean.quantization.zeroPoint = np.asarray([zero_point])
    quantize.quantization.zeroPoint = np.asarray([-zero_point - 1])
    changed = pack_model(model)
    plans = FLOAT_ISLANDS.find(model, graph)
    assert len(plans) == 1
    out, applied = _normalised(changed)
    assert applied.get("float_island") == 1
    assert first_difference(changed, out, seeds=(0, 1, 2))[0] is None


def test_an_island_whose_int8_form_differs_stays_on_the_cpu() -> None:
    """unit_norms' SQUARE island rounds 8 of its 256 inputs otherwise than MUL(x, x) would: it is left."""
    data = (EXPORTS_DIR / "unit_norms.tflite").read_bytes()
    out, applied = _normalised(data)
    assert applied.get("float_island") == 2  # the two NEG islands
    assert _cpu(out) == Counter({"DEQUANTIZE": 1, "SQUARE": 1, "QUANTIZE": 1})


def test_a_transpose_of_the_callers_layout_is_left() -> None:
    """A TRANSPOSE reading a network input or writing a network output (the caller's NCHW, as the corpus'
    mobilenet_v2 takes it) stays as it is, on the CPU, as in Vela legacy's graph."""
    data = forms.nchw_ends(0)
    out, applied = _normalised(data)
    assert "transpose" not in applied
    assert _cpu(out) == Counter({"TRANSPOSE": 2})


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(FORMS))
def test_velas_backend_compiles_a_form(form: str, tmp_path) -> None:
    """The heuristic's schedule of each form, rewritten, compiles through Vela legacy's backend with its estimate
    equal op by op."""
    path = tmp_path / f"{form}.tflite"
    path.write_bytes(FORMS[form][0](1))
    result = run(run_options_from_vela_args(path, CONFIGS["u65-256_mid_dedicated256k"], solver="heuristic"))
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
