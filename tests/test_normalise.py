"""Normalisation: Keras-style exports lose their run-time shape arithmetic, and nothing else changes.

Exactness is judged by the TFLite reference interpreter (ai-edge-litert's reference kernels, not XNNPACK) on
random inputs, comparing every tensor the original and the normalised model share, not only the outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import CORPUS_DIR as CORPUS
from conftest import EXPORTS_DIR

from npusched.frontend.normalise import GraphRecipe, normalise, repack
from npusched.frontend.normalise.gates_first import GATES_FIRST
from npusched.frontend.normalise.grouped_convolutions import GROUPED_CONVOLUTIONS
from npusched.frontend.normalise.padded_convolutions import PADDED_CONVOLUTIONS
from npusched.frontend.normalise.relayout import RELAYOUT
from npusched.frontend.normalise.softmax_bands import SOFTMAX_BANDS
from npusched.frontend.normalise.stacking import STACKING
from npusched.frontend.normalise.staged_inputs import STAGED_INPUTS
from npusched.frontend.normalise.staged_outputs import STAGED_OUTPUTS
from npusched.frontend.normalise.verify import tensor_values
from npusched.frontend.normalise.widened_outputs import WIDENED_OUTPUTS
from npusched.frontend.tflite_reader import parse_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import lower_model
from npusched.netgen import ARCHITECTURES, generate
from npusched.netgen.flatbuffer import NetworkDef, OperatorDef, TensorDef, serialise
from npusched.netgen.graph import GraphBuilder
from npusched.schedule.evaluator import evaluate
from npusched.target.estimators import load_architecture

interpreter = pytest.importorskip("ai_edge_litert.interpreter")

SHAPE_OPS = {"SHAPE", "STRIDED_SLICE", "PACK"}
CORPUS_MODELS = sorted(p.name for p in CORPUS.glob("*.tflite"))
# The reference interpreter cannot run these two as they are: person_detect's per-tensor scales carry
# quantized_dimension 3 (it refuses the file), and keyword_scrambled aborts when asked to keep every tensor.
# Their normalised bytes are their own (nothing to fold), and the writer's round trip is checked structurally.
NOT_RUNNABLE = {"person_detect.tflite", "keyword_scrambled_8bit.tflite"}
# The channel-poor re-layouts switched off (the widened outputs, the gate order and the re-layout itself).
NO_RELAYOUT = GraphRecipe(disabled_rewrites=frozenset({"widened_output", "gate_first", "relayout"}))


def _tensors(data: bytes, seed: int) -> dict[str, np.ndarray]:
    """Every tensor's value after one inference on seeded random inputs, by name (names used once only)."""
    return tensor_values(data, seed)


def _assert_exact(original: bytes, normalised: bytes, seeds: tuple[int, ...] = (0, 1)) -> int:
    """Every shared tensor equal bit for bit; returns how many were compared."""
    for seed in seeds:
        before, after = _tensors(original, seed), _tensors(normalised, seed)
        shared = sorted(set(before) & set(after))
        for name in shared:
            a, b = before[name], after[name]
            assert a.dtype == b.dtype and a.shape == b.shape, (name, a.shape, b.shape)
            assert a.tobytes() == b.tobytes(), f"tensor {name!r} differs (seed {seed})"
        # The outputs are among them.
        assert len(shared) >= max(1, len(after) // 2)
    return len(shared)


def _lowered(data: bytes):
    model = parse_tflite(data)
    validate_model(model)
    return lower_model(model, load_architecture(accelerator_config="ethos-u55-128"))


def _keras(arch: str, passes: int = 40, seed: int = 2) -> bytes:
    return generate(arch, passes, seed, keras_style=True)


# ---------------------------------------------------------------------------------------------------------------
# what the Keras-style export is, and what normalisation makes of it

# Every Keras-style variant reshapes at run time in its head (a Reshape layer), but these: a TCN pools over time by
# MEAN, a DeepLab encoder ends in per-pixel logits, a GRU classifies its last state.
HEADS_WITHOUT_RESHAPE = frozenset({"tcn", "deeplab", "gru"})


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_keras_style_shape_arithmetic_is_folded_away(arch):
    raw = _keras(arch)
    before = _lowered(raw)
    if arch not in HEADS_WITHOUT_RESHAPE:
        assert {op.tflite_op for op in before.cpu_ops} >= {"STRIDED_SLICE", "PACK"}
    normalised, record = normalise(raw)
    after = _lowered(normalised)
    # No CPU operator is left from shape arithmetic (the CPU keeps only what it keeps in the plain export,
    # normalised too: a transformer's broadcast MULs); the NPU subgraphs are the plain export's.
    plain = _lowered(normalise(generate(arch, 40, 2))[0])
    assert not {op.tflite_op for op in after.cpu_ops} & SHAPE_OPS
    assert sorted(op.tflite_op for op in after.cpu_ops) == sorted(op.tflite_op for op in plain.cpu_ops)
    assert len(after.subgraphs) == len(plain.subgraphs) <= len(before.subgraphs)
    assert len(after.cpu_ops) == len(plain.cpu_ops)
    model = parse_tflite(normalised)
    assert not set(model.op_counts()) & SHAPE_OPS
    for op in model.main.operators:
        if op.opcode in ("RESHAPE", "TRANSPOSE_CONV"):
            shape_input = op.inputs[1] if op.opcode == "RESHAPE" else op.inputs[0]
            assert model.main.tensors[shape_input].is_const, op
    # Folded: the shape arithmetic, a GRU's zero states (FILL), the Rescaling's MULs (but an unrolled GRU's PACK
    # of its states, an activation's, which the stacking rewrite writes as a concatenation).
    raw_counts = parse_tflite(raw).op_counts()
    assert record.folded_operators == sum(raw_counts.get(k, 0) for k in SHAPE_OPS | {"FILL"}) + (
        raw_counts.get("MUL", 0) - model.op_counts().get("MUL", 0)) - record.sites_of(STACKING) \
        + raw_counts.get("UNPACK", 0)
    assert record.fixed_batch_inputs == (parse_tflite(raw).main.tensors[parse_tflite(raw).main.inputs[0]].name,)
    assert "dynamic batch dimension fixed to 1" in record.describe()
    assert all(t.shape_signature is None or -1 not in t.shape_signature for t in model.main.tensors)


def test_squeeze_excite_exports_split_the_npu_work_until_normalised():
    raw = _keras("mobilenet_v3", 60, 1)
    before, after = _lowered(raw), _lowered(normalise(raw)[0])
    assert len(before.subgraphs) > 2 and len(after.subgraphs) == 1 and not after.cpu_ops


def test_channel_poor_rescaling_is_computed_16_deep():
    """The input's MUL and ADD on H x W x 3 run on a [1, H', W', 16] view of the same bytes between two
    RESHAPEs; the ADD's output keeps its name and shape, so the first convolution reads what it read."""
    raw = _keras("mobilenet_v3", 60, 1)
    normalised, record = normalise(raw)
    assert record.operators_of(RELAYOUT) == 2
    assert "2 element-wise passes re-laid out 16 or more deep" in record.describe()
    sg = parse_tflite(normalised).main
    ops = [op.opcode for op in sg.operators]
    assert ops[:4] == ["RESHAPE", "MUL", "ADD", "RESHAPE"]
    mul, add = sg.operators[1], sg.operators[2]
    assert sg.tensors[mul.inputs[0]].shape == (1, 64, 48, 16) == sg.tensors[add.outputs[0]].shape  # 128*128*3/16
    assert sg.tensors[sg.operators[3].outputs[0]].shape == (1, 128, 128, 3)
    assert sg.tensors[sg.operators[3].outputs[0]].name == "net/rescale_add_5"
    plain, _ = normalise(raw, NO_RELAYOUT)
    assert _assert_exact(plain, normalised) > 20


def test_channel_poor_work_is_re_laid_out_in_a_model_with_nothing_to_fold():
    """Not only exported models: a plain U-Net's LOGISTIC on its 1-channel output runs on a 16-deep view too (the
    default core re-lays such work out in any model), exactly."""
    data = generate("unet", 40, 1)
    normalised, record = normalise(data)
    assert record.folded_operators == 0 and record.operators_of(RELAYOUT) == 1
    assert [op.opcode for op in parse_tflite(normalised).main.operators][-3:] == ["RESHAPE", "LOGISTIC", "RESHAPE"]
    assert _assert_exact(data, normalised) > 20


def _normalised_input(keras_style: bool = True) -> bytes:
    """A 3-channel input rescaled (MUL and ADD by scalars) and normalised as a Keras Normalization layer exports
    (SUB and MUL by per-channel constants), then two strided convolutions."""
    g = GraphBuilder(np.random.default_rng(0), keras_style=keras_style)
    x = g.input((1, 128, 128, 3))
    mean = g._add_tensor(TensorDef("net/mean", (3,), "INT8", (0.01,), (0,), data=bytes([10, 20, 30])))
    inv_std = g._add_tensor(TensorDef("net/inv_std", (3,), "INT8", (0.02,), (0,), data=bytes([50, 60, 70])))
    y = g.binary("MUL", g.binary("SUB", x, mean, x.shape), inv_std, x.shape)
    return serialise(g.network([g.conv(g.conv(y, 16, (3, 3), (2, 2)), 32, (3, 3), (2, 2))], "normalised input"))


def test_per_channel_constants_are_tiled_onto_a_48_deep_view():
    """A Normalization layer's SUB and MUL by [3] constants join the rescaling's chain: viewed 48 deep (lcm(3,
    16)), each constant repeated 16 times, exactly."""
    data = _normalised_input()
    normalised, record = normalise(data)
    assert record.operators_of(RELAYOUT) == 4
    model = parse_tflite(normalised)
    assert [op.opcode for op in model.main.operators][:6] == ["RESHAPE", "MUL", "ADD", "SUB", "MUL", "RESHAPE"]
    sub = model.main.operators[3]
    assert [list(model.main.tensors[i].shape) for i in sub.inputs] == [[1, 32, 32, 48], [48]]
    assert _assert_exact(data, normalised) > 5


def test_the_normalised_input_moves_in_full_bursts(tmp_path):
    """Priced by the default core's model on a U65 (the input in DRAM), CP-SAT's per-channel SUB and MUL on the
    48-deep view cost a fraction of what they cost on H x W x 3, where each pixel is a 3-byte burst."""
    from conftest import CONFIGS

    from npusched.app.pipeline import run
    from npusched.vela.command import run_options_from_vela_args

    model = tmp_path / "normalised_input.tflite"
    model.write_bytes(_normalised_input())
    cycles = {}
    for normalised in (True, False):
        result = run(run_options_from_vela_args(model, CONFIGS["u65-512_high_dedicated384k"], solver="cpsat",
                                                estimator="vela-default", normalise=normalised, workers=1,
                                                deterministic=True, time_limit_seconds=60))
        cycles[normalised] = sum(result.evaluation.ops[op.index].total_cycles for op in result.network.npu_ops
                                 if op.op_type in ("Sub", "Mul") and op.ifm2 is not None and op.ifm2.shape.depth > 1)
    assert cycles[True] < 0.2 * cycles[False]


def test_a_swish_gate_goes_first_exactly():
    """EfficientNet's swish x * logistic(x): the MUL's operands are swapped so that the gate, read by the MUL
    alone, is the first (a cascade can follow it from the LOGISTIC) and x, read by the LOGISTIC too, the second;
    every tensor stays the same bit for bit."""
    data = generate("efficientnet", 40, 1)
    normalised, record = normalise(data)
    sg = parse_tflite(normalised).main
    producers = {index: op for op in sg.operators for index in op.outputs}
    swapped = [op for op in sg.operators if op.opcode == "MUL" and op.inputs[0] in producers
               and producers[op.inputs[0]].opcode == "LOGISTIC"]
    assert record.sites_of(GATES_FIRST) == len(swapped) > 0 and "with the gate first" in record.describe()
    for op in swapped:
        assert producers[op.inputs[0]].inputs[0] == op.inputs[1]
    assert _assert_exact(data, normalised) > 20


def test_a_pointwise_convolution_making_a_channel_poor_output_is_widened_exactly():
    """A U-Net's last 1x1 convolution makes its 4-channel output (through a LOGISTIC): it runs on the 16-deep
    view, 4 pixels a row of the view with block-diagonal weights, and the output is the same bit for bit."""
    data = generate("unet", 40, 1, keras_style=True)
    normalised, record = normalise(data)
    assert record.sites_of(WIDENED_OUTPUTS) == 1
    model = parse_tflite(normalised)
    assert [op.opcode for op in model.main.operators][-7:] == ["CONV_2D", "RESHAPE", "CONV_2D", "RESHAPE",
                                                               "RESHAPE", "LOGISTIC", "RESHAPE"]
    conv = model.main.operators[-5]
    assert [list(model.main.tensors[i].shape) for i in conv.inputs[:2]] == [[1, 64, 16, 64], [16, 1, 1, 64]]
    assert list(model.main.tensors[conv.outputs[0]].shape) == [1, 64, 16, 16]
    assert _assert_exact(data, normalised) > 20


def test_the_widened_convolution_writes_the_output_in_full_bursts(tmp_path):
    """Priced by the default core's model on a U65 (the output in DRAM, which the CPU reads channel-last), the
    widened convolution costs a fraction of the 4-deep one: the same bytes in 16-byte bursts instead of 4."""
    from conftest import CONFIGS

    from npusched.app.pipeline import run
    from npusched.vela.command import run_options_from_vela_args

    model = tmp_path / "unet.tflite"
    model.write_bytes(generate("unet", 40, 1, keras_style=True))
    cycles = {}
    for normalised in (True, False):
        result = run(run_options_from_vela_args(model, CONFIGS["u65-512_high_dedicated384k"], solver="heuristic",
                                                estimator="vela-default", normalise=normalised))
        last = result.network.npu_ops[-1]
        assert last.ofm.tensor in result.network.subgraphs[0].outputs and last.op_type == "Conv2DBias"
        cycles[normalised] = result.evaluation.ops[last.index].total_cycles
    assert cycles[True] < 0.25 * cycles[False]


def test_a_model_with_nothing_to_fold_is_returned_as_it_is():
    data = generate("resnet", 40, 0)
    normalised, record = normalise(data)
    assert normalised is data and not record.changed and record.describe() == ""


def test_keras_style_option_keeps_the_plain_layers():
    """The Keras-style variant is the plain network plus its shape arithmetic and input rescaling."""
    plain = parse_tflite(generate("efficientnet", 40, 5))
    keras = parse_tflite(normalise(_keras("efficientnet", 40, 5), NO_RELAYOUT)[0])
    plain_counts, keras_counts = plain.op_counts(), keras.op_counts()
    assert keras_counts["MUL"] == plain_counts["MUL"] + 1 and keras_counts["ADD"] == plain_counts.get("ADD", 0) + 1
    assert {k: v for k, v in keras_counts.items() if k not in ("MUL", "ADD")} == \
        {k: v for k, v in plain_counts.items() if k not in ("MUL", "ADD")}


# ---------------------------------------------------------------------------------------------------------------
# exactness under the reference interpreter

@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_normalised_keras_variants_are_bit_exact(arch):
    raw = _keras(arch)
    normalised, record = normalise(raw)
    assert record.changed
    assert _assert_exact(raw, normalised) > 20


@pytest.mark.parametrize("keras_style", [False, True])
def test_causal_convolutions_are_padded_in_hardware_exactly(keras_style):
    """A TCN's causal PADs (more than half the dilated kernel: Vela legacy would copy the whole input) become
    PADs Vela folds before kernels with zero taps, every tensor the two models share bit-exact; lowered, each
    convolution reads the sequence itself and pads (k - 1) x d steps before it in hardware, its kernel as it was."""
    raw = generate("tcn", 40, 1, keras_style=keras_style)
    normalised, record = normalise(raw)
    sites = record.sites_of(PADDED_CONVOLUTIONS)
    assert sites > 5 and f"{sites} convolutions padded in hardware beyond half the kernel" in record.describe()
    _assert_exact(raw, normalised)
    before, after = _lowered(raw), _lowered(normalised)
    def copies(network) -> int:  # a PAD Vela legacy runs: a copy of its input, then the zeros
        return sum(op.name.lower().endswith("_main") and "pad" in op.name.lower() for op in network.npu_ops)

    assert copies(before) >= sites and copies(after) == 0
    causal = [op for op in after.npu_ops if op.kernel.padding[1] > op.kernel.area_width() // 2]
    assert len(causal) == sites
    for op in causal:
        top, left, bottom, right = op.kernel.padding
        assert (top, bottom, right) == (0, 0, 0) and left == (op.kernel.width - 1) * op.kernel.dilation_x, op.name


def test_a_one_sided_zero_padding_is_padded_in_hardware_as_the_default_core_pads() -> None:
    """A Keras export's ZeroPadding2D(((1, 2), (2, 1))) before a 3x3 convolution: Vela legacy copies the input
    (two sides pad more than half the kernel); normalised, the convolution reads the input itself, padded
    (top 1, left 2, bottom 2, right 1) in hardware with its own 3x3 kernel, and every tensor is bit-exact."""
    raw = (EXPORTS_DIR / "unit_pad_crop.tflite").read_bytes()
    normalised, record = normalise(raw)
    assert record.sites_of(PADDED_CONVOLUTIONS) == 1
    _assert_exact(raw, normalised)
    (conv, *_) = [op for op in _lowered(normalised).npu_ops if op.op_type == "Conv2DBias"]
    assert conv.ifm.shape.as_list() == [1, 24, 24, 8] and conv.kernel.padding == (1, 2, 2, 1)
    assert (conv.kernel.width, conv.kernel.height) == (3, 3)
    assert not any("zero_padding2d" in op.name for op in _lowered(normalised).npu_ops)


@pytest.mark.parametrize("name", CORPUS_MODELS)
def test_corpus_models_are_unchanged_and_the_writer_is_exact(name):
    data = (CORPUS / name).read_bytes()
    normalised, record = normalise(data)
    assert normalised == data and not record.folded  # no corpus model computes shapes at run time
    rewritten = repack(data)
    _assert_same_structure(data, rewritten)
    if name not in NOT_RUNNABLE:
        _assert_exact(data, rewritten, seeds=(0,))


def _assert_same_structure(a: bytes, b: bytes) -> None:
    """Two files hold the same subgraphs: tensors (name, shape, type, quantisation, data) and operators."""
    ma, mb = parse_tflite(a), parse_tflite(b)
    assert len(ma.subgraphs) == len(mb.subgraphs)
    for sa, sb in zip(ma.subgraphs, mb.subgraphs, strict=True):
        assert (sa.inputs, sa.outputs) == (sb.inputs, sb.outputs)
        for ta, tb in zip(sa.tensors, sb.tensors, strict=True):
            assert (ta.name, ta.shape, ta.dtype, ta.quantization, ta.shape_signature) == \
                (tb.name, tb.shape, tb.dtype, tb.quantization, tb.shape_signature)
            assert (ta.data is None) == (tb.data is None)
            if ta.data is not None:
                assert ta.data.tobytes() == tb.data.tobytes()
        for oa, ob in zip(sa.operators, sb.operators, strict=True):
            assert (oa.opcode, oa.inputs, oa.outputs, oa.options, oa.custom_options) == \
                (ob.opcode, ob.inputs, ob.outputs, ob.options, ob.custom_options)


# ---------------------------------------------------------------------------------------------------------------
# the folders against the reference kernels, on a model made of the awkward cases

def _int32(name: str, values: object) -> TensorDef:
    data = np.asarray(values, dtype="<i4")
    return TensorDef(name, data.shape, "INT32", data=data.tobytes())


def _awkward_model() -> bytes:
    """An int8 map reshaped by a shape computed with masks, negative indices, GATHER, CONCATENATION, truncating
    DIV, FLOOR_DIV, SUB, REDUCE_PROD, UNPACK and CAST, as exporters write them."""
    t: list[TensorDef] = [
        TensorDef("x", (1, 6, 4, 8), "INT8", (0.05,), (3,), shape_signature=(-1, 6, 4, 8)),  # 0
        TensorDef("shape", (4,), "INT32"),  # 1
        _int32("b", [-3]), _int32("e", [0]), _int32("s", [1]),  # 2..4
        TensorDef("hwc", (3,), "INT32"),  # 5: shape[-3:] (end_mask)
        _int32("idx", [2, 0]),  # 6
        TensorDef("c_h", (2,), "INT32"),  # 7: gather -> [8, 6]
        _int32("minus7", [-7, 7]),  # 8
        TensorDef("div", (2,), "INT32"),  # 9: truncating DIV [8, 6] / [-7, 7] -> [-1, 0]
        TensorDef("fdiv", (2,), "INT32"),  # 10: FLOOR_DIV -> [-2, 0]
        TensorDef("sub", (2,), "INT32"),  # 11: c_h - div -> [9, 6]
        _int32("axis0", [0]),  # 12
        TensorDef("prod", (), "INT32"),  # 13: REDUCE_PROD(hwc) = 192
        TensorDef("u0", (), "INT32"), TensorDef("u1", (), "INT32"),  # 14, 15: UNPACK(sub)
        TensorDef("u1_64", (), "INT64"), TensorDef("u1_32", (), "INT32"),  # 16, 17: CAST there and back
        _int32("one", 1),  # 18
        TensorDef("new_shape", (2,), "INT32"),  # 19: PACK(one, prod)
        TensorDef("flat", (1, 192), "INT8", (0.05,), (3,), shape_signature=(-1, 192)),  # 20
        TensorDef("extra", (3,), "INT32"),  # 21: CONCATENATION(fdiv, u1_32 as [1]) -> output
        _int32("shape1", [1]),  # 22
        TensorDef("u1_vec", (1,), "INT32"),  # 23
    ]
    ops = [
        OperatorDef("SHAPE", (0,), (1,), "ShapeOptions", (("OutType", 2),)),
        OperatorDef("STRIDED_SLICE", (1, 2, 3, 4), (5,), "StridedSliceOptions",
                    (("BeginMask", 0), ("EndMask", 1), ("EllipsisMask", 0), ("NewAxisMask", 0),
                     ("ShrinkAxisMask", 0), ("Offset", False))),
        OperatorDef("GATHER", (5, 6), (7,), "GatherOptions", (("Axis", 0), ("BatchDims", 0))),
        OperatorDef("DIV", (7, 8), (9,), "DivOptions", (("FusedActivationFunction", 0),)),
        OperatorDef("FLOOR_DIV", (7, 8), (10,)),
        OperatorDef("SUB", (7, 9), (11,), "SubOptions", (("FusedActivationFunction", 0),)),
        OperatorDef("REDUCE_PROD", (5, 12), (13,), "ReducerOptions", (("KeepDims", False),)),
        OperatorDef("UNPACK", (11,), (14, 15), "UnpackOptions", (("Num", 2), ("Axis", 0))),
        OperatorDef("CAST", (15,), (16,)),
        OperatorDef("CAST", (16,), (17,)),
        OperatorDef("PACK", (18, 13), (19,), "PackOptions", (("ValuesCount", 2), ("Axis", 0))),
        OperatorDef("RESHAPE", (0, 19), (20,)),
        OperatorDef("RESHAPE", (17, 22), (23,)),
        OperatorDef("CONCATENATION", (10, 23), (21,), "ConcatenationOptions",
                    (("Axis", 0), ("FusedActivationFunction", 0))),
    ]
    return serialise(NetworkDef(tuple(t), tuple(ops), (0,), (20, 21)))


def test_folders_agree_with_the_reference_kernels():
    raw = _awkward_model()
    normalised, record = normalise(raw)
    model = parse_tflite(normalised)
    # Everything but the feature map's RESHAPE is folded; CONCATENATION writes a graph output and stays.
    assert [op.opcode for op in model.main.operators] == ["RESHAPE", "CONCATENATION"]
    assert record.folded_operators == 12
    values = {t.name: t.data for t in model.main.tensors if t.data is not None}
    assert values["new_shape"].tolist() == [1, 192]
    assert values["u1_vec"].tolist() == [6]
    _assert_exact(raw, normalised, seeds=(0, 1, 2))


# ---------------------------------------------------------------------------------------------------------------
# the pipeline: what is scheduled, what is written, what Vela's backend compiles

U65 = ["--accelerator-config", "ethos-u65-256", "--config", "Arm/vela.ini", "--system-config", "Ethos_U65_Mid_End",
       "--memory-mode", "Dedicated_Sram_256KB"]


def test_run_schedules_the_normalised_model_and_says_what_changed(tmp_path):
    from npusched.app.pipeline import run
    from npusched.run import RunOptions

    raw = tmp_path / "mnv3.tflite"
    raw.write_bytes(_keras("mobilenet_v3", 60, 1))
    written = tmp_path / "mnv3_normalised.tflite"
    written.write_bytes(normalise(raw.read_bytes())[0])
    options = RunOptions(model_path=raw, accelerator_config="ethos-u55-128", solver="heuristic")
    result = run(options)
    as_is = run(RunOptions(model_path=raw, accelerator_config="ethos-u55-128", solver="heuristic", normalise=False))
    on_written = run(RunOptions(model_path=written, accelerator_config="ethos-u55-128", solver="heuristic"))
    report = result.normalisation
    assert report is not None and as_is.normalisation is None and on_written.normalisation is None
    assert (report.subgraphs_before, report.subgraphs_after) == (len(as_is.network.subgraphs), 1)
    assert (report.cpu_ops_before, report.cpu_ops_after) == (len(as_is.network.cpu_ops), 0)
    assert report.describe().startswith(f"{report.subgraphs_before} NPU subgraphs → 1")
    assert report.normalisation.describe().startswith("folded 21 shape operators")
    # Scheduling the model normalised here is scheduling the written file.
    assert result.evaluation.total_cycles == on_written.evaluation.total_cycles
    assert result.evaluation.total_cycles < as_is.evaluation.total_cycles


def test_cli_writes_the_normalised_model_and_vela_compiles_it(tmp_path, capsys):
    """A Keras-style U-Net's transposed convolution takes its output shape from SHAPE -> ... -> PACK: Vela's
    legacy backend stops on the raw file; normalised, it compiles, and its estimate is npusched's."""
    import json

    from npusched.app.cli import main

    raw = tmp_path / "unet.tflite"
    raw.write_bytes(_keras("unet"))
    written, out, doc = tmp_path / "unet_normalised.tflite", tmp_path / "out", tmp_path / "unet.json"
    argv = [str(raw), *U65, "--solver", "heuristic", "--quiet", "--write-model", str(written), "--output-dir",
            str(out), "--json", str(doc)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Normalised: " in printed and "\n  folded 7 shape operators" in printed
    assert "agrees with npusched's" in printed
    assert written.read_bytes() == normalise(raw.read_bytes())[0]
    assert (out / "unet_vela.tflite").exists()
    normalisation = json.loads(doc.read_text())["normalisation"]
    assert normalisation["folded_by_type"] == {"STRIDED_SLICE": 3, "MUL": 2, "PACK": 1, "SHAPE": 1}
    assert normalisation["cpu_ops_after"] == 0 < normalisation["cpu_ops_before"]
    # --no-normalise hands Vela the file as it is, which its legacy backend refuses (an error, nothing written).
    assert main([*argv[:-4], "--output-dir", str(tmp_path / "raw_out"), "--no-normalise"]) == 2
    assert "error:" in capsys.readouterr().err


# Vela as the oracle on the written model: the heuristic on a Keras-style export (normalised by the run) equals
# `vela --debug-force-legacy-core` on the file --write-model writes, with no CPU operator left.
KERAS_VELA_CASES = [("mobilenet_v3", "u65-256_mid_dedicated256k"), ("unet", "u55-128_hee_shared"),
                    ("efficientnet", "u65-512_high_dedicated384k")]


@pytest.mark.slow
@pytest.mark.parametrize("arch, config", KERAS_VELA_CASES)
def test_heuristic_on_the_written_model_equals_vela_legacy(tmp_path, arch, config):
    from conftest import CONFIGS

    from npusched.app.pipeline import run
    from npusched.vela.command import run_options_from_vela_args
    from npusched.vela.fidelity import compare_with_golden
    from npusched.vela.golden import run_golden
    from npusched.vela.report import read_cpu_operator_count

    raw = tmp_path / f"{arch}.tflite"
    raw.write_bytes(_keras(arch, 40, 3))
    written = tmp_path / f"{arch}_normalised.tflite"
    written.write_bytes(normalise(raw.read_bytes())[0])
    golden = tmp_path / "vela"
    golden.mkdir()
    assert run_golden(written, CONFIGS[config], golden, timeout_seconds=300) == ""
    assert read_cpu_operator_count(golden / "vela_stdout.txt") == 0
    result = run(run_options_from_vela_args(raw, CONFIGS[config], solver="heuristic"))
    assert result.normalisation is not None and not result.network.cpu_ops
    comparison = compare_with_golden(result, golden)
    assert abs(comparison.cycles_error) <= 1.0, (comparison.cycles_ours, comparison.cycles_vela)


# ---------------------------------------------------------------------------------------------------------------
# a SOFTMAX on a large map (a segmentation head) computed in row bands

def _segmentation_unet() -> bytes:
    """A U-Net ending in a per-pixel SOFTMAX over 4 classes on a 128 x 128 map (netgen --segmentation)."""
    return generate("unet", 40, 0, segmentation=True)


def _head_peak_and_rest(result) -> tuple[int, int]:
    """The most fast storage in use at a step of the softmax head (every pass from the first SPLIT_V or SOFTMAX
    on: the softmax is the network's last layer), and at a step of the rest."""
    ops = result.network.subgraphs[0].ops
    costs = sorted(result.evaluation.ops, key=lambda c: c.time_index)
    start = next(k for k, c in enumerate(costs) if ops[c.op_index].tflite_op in ("SOFTMAX", "SPLIT_V"))
    return max(c.network_sram_used for c in costs[start:]), max(c.network_sram_used for c in costs[:start])


def test_a_large_softmax_is_computed_in_row_bands_bit_exactly():
    raw = _segmentation_unet()
    before = parse_tflite(raw).main
    softmax = next(op for op in before.operators if op.opcode == "SOFTMAX")
    assert before.tensors[softmax.inputs[0]].shape == (1, 128, 128, 4)
    normalised, record = normalise(raw)
    assert record.sites_of(SOFTMAX_BANDS) == 1 and record.operators_of(SOFTMAX_BANDS) > 1 and not record.folded
    assert f"1 SOFTMAX split into {record.operators_of(SOFTMAX_BANDS)} row bands" in record.describe()
    after = parse_tflite(normalised).main
    ops = [op.opcode for op in after.operators]
    assert ops.count("SOFTMAX") == record.operators_of(SOFTMAX_BANDS) and ops.count("SPLIT_V") == 1
    split = next(op for op in after.operators if op.opcode == "SPLIT_V")
    bands = [after.tensors[i].shape for i in split.outputs]
    assert sum(shape[1] for shape in bands) == 128 and all(shape[2:] == (128, 4) for shape in bands)
    concat = next(op for op in after.operators if op.opcode == "CONCATENATION" and op.inputs[0] in
                  {o for op2 in after.operators if op2.opcode == "SOFTMAX" for o in op2.outputs})
    assert after.tensors[concat.outputs[0]].name == before.tensors[softmax.outputs[0]].name
    # Every tensor the two models share (the U-Net body and the softmax's output) is equal bit for bit.
    assert _assert_exact(raw, normalised) > 20
    # The banded model has nothing left to split.
    assert normalise(normalised)[0] is normalised
    lowered = _lowered(normalised)
    assert len(lowered.subgraphs) == 1 and not lowered.cpu_ops


def test_small_softmaxes_are_left_as_they_are():
    """A classifier's softmax ([1, 10]) is far below the size that is split: the file is used as it is."""
    data = generate("resnet", 90, 0)
    assert "SOFTMAX" in parse_tflite(data).op_counts()
    normalised, record = normalise(data)
    assert normalised is data and not record.changed


def test_banded_segmentation_head_needs_a_fraction_of_the_fast_storage(tmp_path):
    """Vela legacy's decomposition holds five int32 maps of the whole 128 x 128 x 4 input at once; in bands, the
    head needs no more than the U-Net body before it, for about the same cycles."""
    from npusched.app.pipeline import run
    from npusched.run import RunOptions

    path = tmp_path / "unet_seg.tflite"
    path.write_bytes(_segmentation_unet())
    runs = {normalised: run(RunOptions(model_path=path, accelerator_config="ethos-u55-128", solver="heuristic",
                                       normalise=normalised)) for normalised in (False, True)}
    head_before, body_before = _head_peak_and_rest(runs[False])
    head_after, body_after = _head_peak_and_rest(runs[True])
    assert head_before > 4 * body_before  # the problem: the head dwarfs the network
    assert head_after * 4 < head_before and head_after <= body_after
    assert runs[True].evaluation.peak_fast_storage * 4 < runs[False].evaluation.peak_fast_storage
    assert runs[True].evaluation.total_cycles < 1.02 * runs[False].evaluation.total_cycles
    report = runs[True].normalisation
    assert report is not None and "1 SOFTMAX split into" in report.normalisation.describe()


@pytest.mark.slow
def test_banded_segmentation_head_compiles_and_vela_legacy_agrees(tmp_path, capsys):
    """Vela's backend compiles the banded head with npusched's schedule (its estimate equal to npusched's), and
    `vela --debug-force-legacy-core` on the written model gives the heuristic's cycles, in a fraction of the
    SRAM Vela itself needs for the model as it was."""
    import csv

    from conftest import CONFIGS

    from npusched.app.cli import main
    from npusched.app.pipeline import run
    from npusched.vela.command import run_options_from_vela_args
    from npusched.vela.fidelity import compare_with_golden
    from npusched.vela.golden import run_golden

    raw, written, out = tmp_path / "unet_seg.tflite", tmp_path / "unet_seg_banded.tflite", tmp_path / "out"
    raw.write_bytes(_segmentation_unet())
    config = CONFIGS["u55-128_hee_shared"]
    hardware = ["--accelerator-config", config["accelerator_config"], "--config", "Arm/vela.ini",
                "--system-config", config["system_config"], "--memory-mode", config["memory_mode"]]
    assert main([str(raw), *hardware, "--solver", "heuristic", "--quiet", "--write-model", str(written),
                 "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "SOFTMAX split into" in printed and "agrees with npusched's" in printed
    assert (out / "unet_seg_vela.tflite").exists()
    sram_used = {}
    for name, model in (("before", raw), ("after", written)):
        golden = tmp_path / name
        golden.mkdir()
        assert run_golden(model, config, golden, timeout_seconds=600) == ""
        with (golden / "summary.csv").open() as f:
            sram_used[name] = float(next(csv.DictReader(f))["sram_memory_used"])
        if name == "after":
            result = run(run_options_from_vela_args(written, config, solver="heuristic"))
            assert result.normalisation is None  # nothing left to split
            comparison = compare_with_golden(result, golden)
            assert abs(comparison.cycles_error) <= 1.0, (comparison.cycles_ours, comparison.cycles_vela)
    assert sram_used["after"] * 4 < sram_used["before"]


# ---------------------------------------------------------------------------------------------------------------
# grouped convolutions (Keras Conv2D(groups=G): RegNet, ResNeXt)

def _grouped_model(channels: int, group_width: int, seed: int = 0) -> bytes:
    """conv 3x3 -> grouped conv 3x3 (``channels`` / ``group_width`` groups, ReLU) -> conv 1x1, as the TFLite
    converter exports Conv2D(groups=G): a CONV_2D whose kernel depth is the group width."""
    g = GraphBuilder(np.random.default_rng(seed))
    x = g.conv(g.input((1, 16, 16, 8)), channels, (3, 3))
    y = g.conv(x, channels, (3, 3), groups=channels // group_width)
    return serialise(g.network([g.conv(y, 16, (1, 1))], "grouped"))


@pytest.mark.parametrize("channels, group_width, parts", [(64, 8, 4), (24, 8, 3), (64, 16, 4), (48, 4, 3)])
def test_a_grouped_convolution_is_split_into_whole_groups_exactly(channels, group_width, parts):
    """Each part holds the fewest neighbouring groups whose depths are whole 16-channel bricks (block-diagonal
    weights), or one group where none do; every tensor, the grouped convolution's output included, is the same
    bit for bit under the reference kernels."""
    data = _grouped_model(channels, group_width)
    normalised, record = normalise(data)
    assert record.sites_of(GROUPED_CONVOLUTIONS) == 1 and "1 grouped convolution split" in record.describe()
    sg = parse_tflite(normalised).main
    opcodes = [op.opcode for op in sg.operators]
    assert opcodes == ["CONV_2D", "SPLIT", *["CONV_2D"] * parts, "CONCATENATION", "CONV_2D"]
    for op in sg.operators[2:2 + parts]:
        ifm, weights, ofm = (sg.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
        assert weights.shape[3] == ifm.shape[3] == channels // parts == weights.shape[0] == ofm.shape[3]
    grouped_output = sg.tensors[sg.operators[2 + parts].outputs[0]].name
    for seed in (0, 1):
        before, after = _tensors(data, seed), _tensors(normalised, seed)
        assert grouped_output in before and grouped_output in after
        for name in set(before) & set(after):
            assert before[name].tobytes() == after[name].tobytes(), f"tensor {name!r} differs (seed {seed})"


def test_a_grouped_convolution_is_priced_for_its_own_macs():
    """Lowered after the split, the grouped convolution's passes do the MACs of their parts (2 groups of 8 in
    each: twice the groups' own, a quarter of what the lowering counted before the rewrite, when it read the
    weights as covering the whole IFM depth); without normalisation it is left to the CPU, with the reason."""
    data = _grouped_model(64, 8)
    parts = [op for op in _lowered(normalise(data)[0]).npu_ops if "/group" in op.name]
    assert len(parts) == 4 and sum(op.macs for op in parts) == 16 * 16 * 64 * 16 * 9
    raw = _lowered(data)
    assert [op.tflite_op for op in raw.npu_ops] == ["CONV_2D", "CONV_2D"]
    assert len(raw.cpu_ops) == 1 and "grouped convolution" in raw.cpu_ops[0].reason


# ---------------------------------------------------------------------------------------------------------------
# channel-poor inputs staged (Dedicated_Sram: feature maps in DRAM)

def test_a_channel_poor_input_is_staged_by_a_copy_exactly():
    """Asked to, normalisation copies a 3-channel network input through a 16-deep view (RESHAPE -> 1x1 MAX_POOL
    -> RESHAPE) and its convolution reads the copy; every tensor is the same bit for bit. Not asked, nothing is
    staged; an input an element-wise chain reads (a Keras Rescaling, re-laid out itself) is left alone; a
    40-channel one is staged too."""
    data = generate("mobilenet_v2", 40, 1)
    assert normalise(data)[1].sites_of(STAGED_INPUTS) == 0
    staged, record = normalise(data, GraphRecipe(stage_maps=True))
    assert record.sites_of(STAGED_INPUTS) == 1 and "1 input copied in full bursts" in record.describe()
    sg = parse_tflite(staged).main
    assert [op.opcode for op in sg.operators[:4]] == ["RESHAPE", "MAX_POOL_2D", "RESHAPE", "CONV_2D"]
    view, copy_ = (sg.tensors[sg.operators[1].inputs[0]], sg.tensors[sg.operators[1].outputs[0]])
    assert view.shape == copy_.shape and view.shape[3] == 16 and sg.operators[3].inputs[0] == \
        sg.operators[2].outputs[0]
    assert sg.operators[0].inputs[0] == sg.inputs[0]
    assert _assert_exact(data, staged) > 20
    assert normalise(_keras("mobilenet_v2"), GraphRecipe(stage_maps=True))[1].sites_of(STAGED_INPUTS) == 0
    # Any depth that is not whole 16-channel bricks: audio1d's 40 features are read in 32-byte bursts.
    assert normalise(generate("audio1d", 40, 1), GraphRecipe(stage_maps=True))[1].sites_of(STAGED_INPUTS) == 1


def test_an_nchw_input_transposed_on_the_cpu_is_staged_before_its_pad():
    """A PyTorch export's input TRANSPOSE runs on the CPU; its NHWC output, read by the PAD of the first
    convolution, is staged, and the PAD reads the copy."""
    data = generate("mobilenet_v2", 40, 1, torch_style=True)
    staged, record = normalise(data, GraphRecipe(stage_maps=True))
    assert record.sites_of(STAGED_INPUTS) == 1
    opcodes = [op.opcode for op in parse_tflite(staged).main.operators]
    assert opcodes[:6] == ["TRANSPOSE", "RESHAPE", "MAX_POOL_2D", "RESHAPE", "PAD", "CONV_2D"]
    assert _assert_exact(data, staged) > 20


def test_inputs_are_staged_only_for_npuscheds_own_graph_off_fast_storage():
    """CP-SAT and the DP stage inputs where feature maps live in DRAM (the U65's Dedicated_Sram); the heuristic
    (Vela legacy's graph) and the default core's read-back never do, nor does any solver on Shared_Sram."""
    from conftest import CONFIGS

    from npusched.app.pipeline import load_graph
    from npusched.vela.command import run_options_from_vela_args

    path = CORPUS / "vww_96_int8.tflite"
    staged = {}
    for config in ("u65-512_high_dedicated384k", "u55-128_hee_shared"):
        for solver in ("cpsat", "dp", "heuristic", "vela-default"):
            record = load_graph(run_options_from_vela_args(path, CONFIGS[config], solver=solver))[1].normalisation
            staged[config, solver] = record.sites_of("staged_input") if record is not None else 0
    assert staged == {("u65-512_high_dedicated384k", "cpsat"): 1, ("u65-512_high_dedicated384k", "dp"): 1,
                      **{key: 0 for key in staged if key[0] == "u55-128_hee_shared" or key[1] in
                         ("heuristic", "vela-default")}}


def test_a_channel_poor_map_the_cpu_reads_is_staged_out_exactly():
    """A PyTorch-style U-Net ends in a 1x1 convolution to 4 channels (its sigmoid fused) that only the CPU's
    TRANSPOSE to NCHW reads. Asked to stage, the convolution writes a map of its own and one NPU pass copies it
    over a 16-deep view into the original tensor (same index, same name), which the TRANSPOSE still reads; every
    tensor is the same bit for bit."""
    data = generate("unet", 40, 1, torch_style=True)
    assert normalise(data)[1].sites_of(STAGED_OUTPUTS) == 0
    staged, record = normalise(data, GraphRecipe(stage_maps=True))
    assert record.sites_of(STAGED_OUTPUTS) == 1 and "1 output copied out in full bursts" in record.describe()
    before, after = parse_tflite(data).main, parse_tflite(staged).main
    transpose = after.operators[-1]
    assert transpose.opcode == "TRANSPOSE"
    assert [op.opcode for op in after.operators[-4:-1]] == ["RESHAPE", "MAX_POOL_2D", "RESHAPE"]
    read = after.tensors[transpose.inputs[0]]
    assert read.name == before.tensors[before.operators[-1].inputs[0]].name and read.shape[3] == 4
    assert after.tensors[after.operators[-3].inputs[0]].shape[3] == 16
    assert _assert_exact(data, staged) > 20


def _heuristic_on_u65(data: bytes, estimator: str, part: Callable[[Any], list[int]]) -> dict[bool, tuple[float, float]]:
    """Unstaged and staged (False, True): the cycles of the passes ``part`` picks of the lowered network, and the
    network's total, both as Vela's own rules (the heuristic's) schedule it on u65-512 (feature maps in DRAM)."""
    from conftest import CONFIGS

    from npusched.app.pipeline import architecture
    from npusched.solvers.heuristic import heuristic_schedule
    from npusched.vela.command import run_options_from_vela_args

    options = run_options_from_vela_args(CORPUS / "unused.tflite", CONFIGS["u65-512_high_dedicated384k"],
                                         estimator=estimator)
    arch = architecture(options)
    costs = {}
    for stage in (False, True):
        network = lower_model(parse_tflite(normalise(data, GraphRecipe(stage_maps=stage))[0]), arch)
        evaluation = evaluate(network, arch, heuristic_schedule(network, arch))
        picked = set(part(network))
        costs[stage] = (sum(c.total_cycles for c in evaluation.ops if c.op_index in picked), evaluation.total_cycles)
    return costs


@pytest.mark.parametrize("estimator", ["vela-legacy", "vela-default"])
def test_a_staged_output_costs_less_than_its_convolution_writing_dram(estimator):
    """The torch-style U-Net's last convolution writing its 4-channel map plus the copy into DRAM cost less than the
    convolution writing that map to DRAM in 4-byte bursts (under vela-legacy 44,017 against 69,905 cycles), and
    the network costs less."""
    def tail(network: Any) -> list[int]:
        last_convolution = max(op.index for op in network.npu_ops if op.op_type == "Conv2DBias")
        return [op.index for op in network.npu_ops if op.index >= last_convolution]

    costs = _heuristic_on_u65(generate("unet", 40, 1, torch_style=True), estimator, tail)
    assert costs[True][0] < 0.7 * costs[False][0] and costs[True][1] < costs[False][1], costs


@pytest.mark.parametrize("estimator", ["vela-legacy", "vela-default"])
def test_a_staged_input_costs_its_first_convolution_less_than_it_costs_the_copy(estimator):
    """The copy in full bursts plus the convolution reading it cost fewer cycles than the convolution reading the
    3-channel input from DRAM, and the network costs less."""
    def head(network: Any) -> list[int]:
        convolution = next(op.index for op in network.npu_ops if op.op_type == "Conv2DBias")
        return [op.index for op in network.npu_ops if op.index <= convolution]

    costs = _heuristic_on_u65(generate("mobilenet_v2", 40, 1), estimator, head)
    assert costs[True][0] < 0.5 * costs[False][0] and costs[True][1] < costs[False][1], costs


def test_a_cpsat_run_lowers_the_model_as_it_is_for_its_report_once_and_before_its_search(tmp_path, monkeypatch):
    """The report's lowering of the model as it is is made when the run's graph is built, before the search (whose
    time the plan then shares out): after the search it ran past the plan (0.7 s of an unrolled GRU's run)."""
    from npusched.app import cpsat_run, pipeline
    from npusched.run import RunOptions

    raw = tmp_path / "mnv3.tflite"
    raw.write_bytes(_keras("mobilenet_v3", 60, 1))
    events: list[str] = []
    real_build, real_search = pipeline.Loaded.build, cpsat_run.solve_cpsat

    def build(self, recipe=None, **kwargs):
        if recipe is not None and not recipe.normalise:
            events.append("as it is")
        return real_build(self, recipe, **kwargs)

    def search(*args, **kwargs):
        events.append("search")
        return real_search(*args, **kwargs)

    monkeypatch.setattr(pipeline.Loaded, "build", build)
    monkeypatch.setattr(cpsat_run, "solve_cpsat", search)
    result = pipeline.run(RunOptions(model_path=raw, accelerator_config="ethos-u55-128", solver="cpsat",
                                     time_limit_seconds=5, deterministic=True, workers=1))
    assert result.normalisation is not None and result.normalisation.cpu_ops_after == 0
    assert events.count("as it is") == 1 and events.index("as it is") < events.index("search")
