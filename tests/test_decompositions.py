"""SOFTMAX / MEAN / UNIDIRECTIONAL_SEQUENCE_LSTM decompositions against Vela 5.2.0's verbose schedules.

Each corpus operator is read with the project's reader, lowered directly by its decomposition module, and every
produced pass is compared with the pass of the same name in the golden ``--verbose-schedule`` output
(u55-128_hee_shared: no striping, so the printed stripes are the full shapes Vela's scheduler sees) and with
the golden per-layer table (TFLite operator / NNG operator columns).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import GOLDEN_DIR, model_path

from npusched.frontend.tflite_reader import read_tflite
from npusched.ir import DataType, NpuOp, Shape4D
from npusched.lowering.context import LoweringContext
from npusched.lowering.lstm import lower_lstm
from npusched.lowering.mean import lower_mean
from npusched.lowering.softmax import lower_softmax

GOLDEN = GOLDEN_DIR / "u55-128_hee_shared"
LOWER = {"SOFTMAX": lower_softmax, "MEAN": lower_mean, "UNIDIRECTIONAL_SEQUENCE_LSTM": lower_lstm}
SOFTMAX_MODELS = ["kws_dscnn_int8", "micro_speech_int8", "person_detect", "resnet8_ic_int8",
                  "resnet_large_ic_int8", "str_ww_int8", "vww_96_int8"]
BINARY_ELEMENTWISE = {"Add", "Sub", "Mul", "Maximum", "Minimum", "SHL", "SHR", "SquaredDifference"}

_OP_LINE = re.compile(r"^\t(\d+): Operation (.*)  - OFM <Shape4D \[([\d, ]+)\]>$")
_KERNEL = re.compile(r"Kernel: w=(\d+), h=(\d+), stride=\((\d+), (\d+)\), dilation=\((\d+), (\d+)\)")
_STRIPE = re.compile(r"(IFM|IFM2|OFM) Stripe\s+= (?:<Shape4D \[([\d, ]+)\]>|None)")
_WEIGHTS = re.compile(r"Encoded Weights = (\d+|None) bytes")


def _shape(text: str | None) -> tuple[int, ...] | None:
    return None if text is None else tuple(int(v) for v in text.split(","))


def golden_schedule(model: str) -> list[dict]:
    """Every pass of the golden verbose schedule: name, type, kernel, stripes, encoded weight bytes."""
    passes: list[dict] = []
    for line in (GOLDEN / model / "vela_stdout.txt").read_text().splitlines():
        m = _OP_LINE.match(line)
        if m:
            passes.append({"index": int(m.group(1)), "name": m.group(2)})
            continue
        if not passes or not line.startswith("\t\t"):
            continue
        text = line.strip()
        cur = passes[-1]
        if text.startswith("Type: "):
            cur["type"] = text[len("Type: "):]
        elif (k := _KERNEL.match(text)) is not None:
            cur["kernel"] = tuple(int(v) for v in k.groups())
        elif (s := _STRIPE.match(text)) is not None:
            cur[s.group(1)] = _shape(s.group(2))
        elif (w := _WEIGHTS.match(text)) is not None:
            cur["weights"] = None if w.group(1) == "None" else int(w.group(1))
    return passes


def golden_layers(model: str) -> list[dict]:
    with open(GOLDEN / model / "per_layer.csv", newline="") as f:
        return [row for row in csv.DictReader(f) if row["TFLite_operator"] != "TFLite_operator"]


def lowered(model: str, opcode: str) -> list[NpuOp]:
    """All passes the decomposition makes of every ``opcode`` operator of the model, model order."""
    tfl = read_tflite(model_path(model))
    sg = tfl.subgraphs[0]
    ctx = LoweringContext(model=tfl, subgraph=sg)
    out: list[NpuOp] = []
    for op in sg.operators:
        if op.opcode == opcode:
            out.extend(LOWER[opcode](op, ctx.feature_map(op.inputs[0]), ctx.feature_map(op.outputs[0]), ctx))
    assert out, f"{model} has no {opcode}"
    return out


def scheduled_stripes(op: NpuOp) -> tuple:
    """(IFM, IFM2, OFM) shapes as Vela's scheduler prints them: for a binary elementwise pass whose first
    operand is constant/scalar and whose second is a full, non-broadcast tensor, Vela swaps the operands."""
    ifm, ifm2 = op.ifm, op.ifm2
    if op.op_type in BINARY_ELEMENTWISE and ifm2 is not None:
        first_movable = ifm.tensor.is_const or ifm.tensor.orig_shape == ()
        ofm_shape = op.ofm.tensor.orig_shape
        second_primary = not (ifm2.tensor.is_const or ifm2.tensor.orig_shape == ()
                              or ifm2.tensor.orig_shape != ofm_shape)
        if first_movable and second_primary:
            ifm, ifm2 = ifm2, ifm
    return (tuple(ifm.shape.as_list()), None if ifm2 is None else tuple(ifm2.shape.as_list()),
            tuple(op.ofm.shape.as_list()))


def signature(op: NpuOp) -> tuple:
    k = op.kernel
    ifm, ifm2, ofm = scheduled_stripes(op)
    return (op.name, op.op_type, (k.width, k.height, k.stride_x, k.stride_y, k.dilation_x, k.dilation_y),
            ifm, ifm2, ofm)


def golden_signature(p: dict) -> tuple:
    return (p["name"], p["type"], p["kernel"], p["IFM"], p["IFM2"], p["OFM"])


def match_rate(ours: list[NpuOp], golden: list[dict]) -> tuple[int, int, list]:
    """(matching passes, passes, mismatches) comparing as multisets of signatures (Vela reuses pass names
    across operators, e.g. the gates of two LSTMs)."""
    want = Counter(golden_signature(p) for p in golden)
    have = Counter(signature(o) for o in ours)
    matched = sum((want & have).values())
    return matched, max(len(ours), len(golden)), sorted((have - want).elements()) + sorted((want - have).elements())


def assert_dependency_order(ops: list[NpuOp]) -> None:
    """Every non-constant input is produced by an earlier pass or comes from outside the decomposition."""
    produced = {op.ofm.tensor for op in ops}
    seen = set()
    for op in ops:
        for acc in (op.ifm, op.ifm2):
            if acc is not None and not acc.tensor.is_const and acc.tensor in produced:
                assert acc.tensor in seen, f"{op.name} reads {acc.tensor.name} before it is written"
        seen.add(op.ofm.tensor)


@pytest.mark.parametrize("model", SOFTMAX_MODELS)
def test_softmax_matches_golden_schedule(model):
    ops = lowered(model, "SOFTMAX")
    schedule = golden_schedule(model)
    start = next(i for i, p in enumerate(schedule) if p["name"] == ops[0].name)
    golden = schedule[start:start + len(ops)]
    # Softmax is a chain: Vela schedules the passes contiguously, in creation order.
    assert [signature(o) for o in ops] == [golden_signature(p) for p in golden]
    assert len(ops) == 31
    layers = {row["Name"]: row for row in golden_layers(model)}
    for op in ops:
        assert layers[op.name]["TFLite_operator"] == op.tflite_op == "SOFTMAX"
        assert layers[op.name]["NNG Operator"] == op.op_type
    assert_dependency_order(ops)


def test_softmax_int8_tensors_follow_vela():
    ops = {o.name: o for o in lowered("kws_dscnn_int8", "SOFTMAX")}
    # The exp LUT is attached to the first Sub: 256 32-bit words, 1 KiB to DMA into SHRAM.
    sub = ops["Identity_sub1"]
    assert sub.activation == "LUT" and sub.activation_lut.size_in_bytes == 1024
    table = sub.activation_lut.values.reshape(-1).astype(np.int64)
    assert table[-1] == 2**31 - 1  # exp(0) saturates
    assert np.all(np.diff(table) >= 0)
    # Everything from the subtraction to the last shift runs on int32; only the row max keeps int8.
    assert ops["Identity_maxpool0"].ofm.tensor.dtype == DataType.int8
    inner = [o for name, o in ops.items() if name not in ("Identity_maxpool0", "Identity_shr30")]
    assert all(o.ofm.tensor.dtype == DataType.int32 for o in inner)
    assert ops["Identity_shr30"].ofm.tensor.name == "Identity"
    assert ops["Identity_shr30"].rounding_mode == "HalfUp"
    # Constant operands are [1, 1, 1, 1] int32 tensors fed as IFM2 (or IFM, swapped by the scheduler).
    consts = [acc.tensor for o in ops.values() for acc in (o.ifm, o.ifm2) if acc is not None and acc.tensor.is_const]
    assert {c.name for c in consts} == {"Identity_shr2_const", "headroom_offset_const", "one_const",
                                        "shifted_one_const", "F0_one_const", "neg_32_over_17_const",
                                        "48_over_17_const", "F2_one_const", "four_const", "two_const"}
    assert all(c.shape == Shape4D(1, 1, 1, 1) and c.dtype == DataType.int32 for c in consts)


def test_mean_matches_golden_schedule_and_weights():
    ops = lowered("mobilenet_v2_224_int8", "MEAN")
    schedule = golden_schedule("mobilenet_v2_224_int8")
    matched, total, diff = match_rate(ops, [p for p in schedule if p["name"] in {o.name for o in ops}])
    assert (matched, total) == (2, 2), diff
    conv, mul = ops
    assert conv.op_type == "DepthwiseConv2DBias" and conv.ofm.tensor.dtype == DataType.int32
    assert mul.ifm2.tensor.is_const and mul.ofm.tensor.name == "adaptive_avg_pool2d_1.1_transform_1"
    layers = {row["Name"]: row for row in golden_layers("mobilenet_v2_224_int8")}
    # The per-layer table prints the NNG operator and MAC count of the convolution pass.
    assert layers[conv.name]["NNG Operator"] == "DepthwiseConv2DBias"
    assert int(layers[conv.name]["MAC Count"]) == conv.macs


def test_mean_weights_encode_to_golden_size():
    """The all-ones weights are in the layout the encoder expects: Vela's 21952 encoded bytes, with the golden
    block depth (96) and depth slices."""
    from npusched.target.estimators import load_architecture
    from npusched.target.weights import encode_op_weights

    arch = load_architecture("ethos-u55-128", system_config="Ethos_U55_High_End_Embedded", memory_mode="Shared_Sram")
    conv = lowered("mobilenet_v2_224_int8", "MEAN")[0]
    golden = next(p for p in golden_schedule("mobilenet_v2_224_int8") if p["name"] == conv.name)
    encoded = encode_op_weights(arch, conv, 96, (0, 160, 928, 1280))
    assert encoded.total_bytes == golden["weights"] == 21952


def test_lstm_matches_golden_schedule():
    ops = lowered("dtln", "UNIDIRECTIONAL_SEQUENCE_LSTM")
    schedule = golden_schedule("dtln")
    lstm_names = {o.name for o in ops}
    golden = [p for p in schedule if p["name"] in lstm_names]
    matched, total, diff = match_rate(ops, golden)
    assert (matched, total) == (36, 36), diff
    # Apart from the LSTMs, dtln has one fully connected layer: Vela runs all 37 passes on the NPU.
    assert len(schedule) == 37
    rows = golden_layers("dtln")
    want = Counter((r["Name"], r["TFLite_operator"], r["NNG Operator"]) for r in rows if r["Name"] in lstm_names)
    assert Counter((o.name, o.tflite_op, o.op_type) for o in ops) == want
    assert_dependency_order(ops)


def test_lstm_types_and_state_writes():
    ops = lowered("dtln", "UNIDIRECTIONAL_SEQUENCE_LSTM")
    first = ops[:18]
    by_name = {o.name: o for o in first}
    # Gate FCs produce int16 at scale 2^-12; the gate Adds fuse the hardware Sigmoid/Tanh.
    fcs = [o for o in first if o.op_type == "FullyConnected"]
    assert len(fcs) == 8 and all(o.ofm.tensor.dtype == DataType.int16 for o in fcs)
    assert all(o.ofm.tensor.quantization.scale == (2.0**-12,) for o in fcs)
    assert by_name["input_gate#0.0_add"].activation == "Sigmoid"
    assert by_name["cell_gate#0.0_add"].activation == "Tanh"
    assert by_name["output_state#0.0_tanh"].activation == "Tanh"
    # The cell sum and the new output state are written into the variable state tensors.
    cell = by_name["cell_state#0.0_add"]
    out = by_name["output_state#0.0_mul"]
    assert dict(cell.attrs)["variable_tensor"].name == "tfl.pseudo_qconst1"
    assert dict(out.attrs)["variable_tensor"].name == "tfl.pseudo_qconst"
    assert cell.ofm.tensor.dtype == DataType.int16 and out.ofm.tensor.dtype == DataType.int8
    assert dict(cell.attrs)["activation_min"] == -10.0  # cell_clip of the model
    # The input FCs read the sequence tensor directly (Vela moves the slice into the pass).
    feature_fc = by_name["input_gate#0.0:serving_default_input_7:0_feature#0.0_fc"]
    assert feature_fc.ifm.tensor.name == "serving_default_input_7:0"
    assert feature_fc.weights.shape == (257, 128)
    # The two LSTMs name their intermediates alike; their tensors must still be told apart.
    second = {o.name: o for o in ops[18:]}
    assert second["cell_state#0.0_add"].ofm.tensor != cell.ofm.tensor


def test_lstm_fc_weights_encode_to_golden_sizes():
    """Transposed [in, out] FC weights encode to the sizes Vela printed (block depth 128, one slice)."""
    from npusched.target.estimators import load_architecture
    from npusched.target.weights import encode_op_weights

    arch = load_architecture("ethos-u55-128", system_config="Ethos_U55_High_End_Embedded", memory_mode="Shared_Sram")
    fcs = [o for o in lowered("dtln", "UNIDIRECTIONAL_SEQUENCE_LSTM") if o.op_type == "FullyConnected"]
    names = {o.name for o in fcs}
    golden = Counter((p["name"], p["weights"]) for p in golden_schedule("dtln") if p["name"] in names)
    ours = Counter((o.name, encode_op_weights(arch, o, 128, (0, 128)).total_bytes) for o in fcs)
    assert len(fcs) == 16 and ours == golden


# ---------------------------------------------------------------------------------------------------------------
# Shapes the corpus does not exercise, on small synthetic models. The expected passes are what
# `vela 5.2.0 --debug-force-legacy-core --verbose-schedule` (ethos-u55-128, HEE, Shared_Sram) printed for
# exactly these models: (name, type, kernel w x h, IFM stripe, IFM2 stripe, OFM stripe).

def _write_model(path: Path, tensors: list[dict], opcode: str, inputs: list[int], outputs: list[int],
                 options: tuple, intermediates: tuple[int, ...] = ()) -> None:
    """A one-operator TFLite file. ``tensors``: name, shape, type, optional scale/zp/data/variable;
    ``options``: (BuiltinOptions name, {snake_case field: value})."""
    import importlib

    import flatbuffers
    from tflite.BuiltinOperator import BuiltinOperator
    from tflite.BuiltinOptions import BuiltinOptions
    from tflite.TensorType import TensorType

    def mod(name):
        return importlib.import_module(f"tflite.{name}")

    b = flatbuffers.Builder(4096)

    def ints(values, prepend=b.PrependInt32, width=4):
        b.StartVector(width, len(values), width)
        for v in reversed(values):
            prepend(v)
        return b.EndVector()

    def tables(offsets):
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    buf, tbl = mod("Buffer"), mod("Tensor")
    buffers = [(buf.Start(b), buf.End(b))[1]]
    tensor_offsets = []
    for t in tensors:
        index = 0
        if t.get("data") is not None:
            raw = np.asarray(t["data"], dtype={"INT8": np.int8, "INT32": np.int32}[t["type"]]).tobytes()
            data = b.CreateByteVector(raw)
            buf.Start(b)
            buf.AddData(b, data)
            buffers.append(buf.End(b))
            index = len(buffers) - 1
        name, shape = b.CreateString(t["name"]), ints(list(t["shape"]))
        quant = None
        if "scale" in t:
            qp = mod("QuantizationParameters")
            scale = ints([t["scale"]], b.PrependFloat32)
            zero = ints([t.get("zp", 0)], b.PrependInt64, 8)
            qp.Start(b)
            qp.AddScale(b, scale)
            qp.AddZeroPoint(b, zero)
            quant = qp.End(b)
        tbl.Start(b)
        tbl.AddShape(b, shape)
        tbl.AddType(b, getattr(TensorType, t["type"]))
        tbl.AddBuffer(b, index)
        tbl.AddName(b, name)
        if quant is not None:
            tbl.AddQuantization(b, quant)
        tbl.AddIsVariable(b, bool(t.get("variable", False)))
        tensor_offsets.append(tbl.End(b))
    code = getattr(BuiltinOperator, opcode)
    oc = mod("OperatorCode")
    oc.Start(b)
    oc.AddDeprecatedBuiltinCode(b, min(code, 127))
    oc.AddBuiltinCode(b, code)
    oc.AddVersion(b, 1)
    code_offset = oc.End(b)
    opt_name, fields = options
    opt = mod(opt_name)
    opt.Start(b)
    for field, value in fields.items():
        getattr(opt, "Add" + "".join(w.capitalize() for w in field.split("_")))(b, value)
    opt_offset = opt.End(b)
    op_mod = mod("Operator")
    ins, outs = ints(inputs), ints(outputs)
    inter = ints(list(intermediates)) if intermediates else None
    op_mod.Start(b)
    op_mod.AddOpcodeIndex(b, 0)
    op_mod.AddInputs(b, ins)
    op_mod.AddOutputs(b, outs)
    op_mod.AddBuiltinOptionsType(b, getattr(BuiltinOptions, opt_name))
    op_mod.AddBuiltinOptions(b, opt_offset)
    if inter is not None:
        op_mod.AddIntermediates(b, inter)
    op_offset = op_mod.End(b)
    sg = mod("SubGraph")
    tv, ov, iv, outv = tables(tensor_offsets), tables([op_offset]), ints([inputs[0]]), ints(outputs)
    sg.Start(b)
    sg.AddTensors(b, tv)
    sg.AddOperators(b, ov)
    sg.AddInputs(b, iv)
    sg.AddOutputs(b, outv)
    sg_offset = sg.End(b)
    model = mod("Model")
    sgs, codes, bufs = tables([sg_offset]), tables([code_offset]), tables(buffers)
    model.Start(b)
    model.AddVersion(b, 3)
    model.AddOperatorCodes(b, codes)
    model.AddSubgraphs(b, sgs)
    model.AddBuffers(b, bufs)
    b.Finish(model.End(b), file_identifier=b"TFL3")
    path.write_bytes(b.Output())


def _mean_model(path: Path, shape, axes, keep_dims, out_shape, dtype="INT8") -> None:
    tensors = [dict(name="x", shape=shape, type=dtype, scale=0.05, zp=3),
               dict(name="axes", shape=[len(axes)], type="INT32", data=axes),
               dict(name="y", shape=out_shape, type=dtype, scale=0.04, zp=-2)]
    _write_model(path, tensors, "MEAN", [0, 1], [2], ("ReducerOptions", {"keep_dims": keep_dims}))


def _softmax_model(path: Path, shape, dtype) -> None:
    if dtype == "INT16":
        tensors = [dict(name="logits", shape=shape, type=dtype, scale=0.001, zp=0),
                   dict(name="probs", shape=shape, type=dtype, scale=1 / 32768, zp=0)]
    else:
        tensors = [dict(name="logits", shape=shape, type=dtype, scale=0.1, zp=5),
                   dict(name="probs", shape=shape, type=dtype, scale=1 / 256, zp=-128)]
    _write_model(path, tensors, "SOFTMAX", [0], [1], ("SoftmaxOptions", {"beta": 1.0}))


def _lstm_model(path: Path, batch, time, features, units, time_major) -> None:
    rng = np.random.default_rng(0)
    seq = [time, batch, features] if time_major else [batch, time, features]
    tensors = [dict(name="seq", shape=seq, type="INT8", scale=0.05, zp=-3)]
    for gate in "ifco":
        tensors.append(dict(name=f"w_in_{gate}", shape=[units, features], type="INT8", scale=0.02,
                            data=rng.integers(-127, 127, (units, features))))
    for gate in "ifco":
        tensors.append(dict(name=f"w_rec_{gate}", shape=[units, units], type="INT8", scale=0.03,
                            data=rng.integers(-127, 127, (units, units))))
    for gate in "ifco":
        tensors.append(dict(name=f"b_{gate}", shape=[units], type="INT32", scale=0.001,
                            data=rng.integers(-1000, 1000, units)))
    tensors.append(dict(name="h_state", shape=[batch, units], type="INT8", scale=0.0078, zp=2, variable=True))
    tensors.append(dict(name="c_state", shape=[batch, units], type="INT16", scale=2.0**-11, variable=True))
    for k in range(5):
        tensors.append(dict(name=f"inter{k}", shape=[], type="INT16" if k < 4 else "INT8",
                            scale=2.0**-12 if k < 4 else 0.0071))
    out = [time, batch, units] if time_major else [batch, time, units]
    tensors.append(dict(name="out", shape=out, type="INT8", scale=0.0078, zp=2))
    inputs = [0, 1, 2, 3, 4, 5, 6, 7, 8, -1, -1, -1, 9, 10, 11, 12, -1, -1, 13, 14, -1, -1, -1, -1]
    _write_model(path, tensors, "UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [20],
                 ("UnidirectionalSequenceLSTMOptions", {"fused_activation_function": 4, "cell_clip": 10.0,
                                                        "time_major": time_major}), (15, 16, 17, 18, 19))


def _lower_file(path: Path, opcode: str) -> list[NpuOp]:
    tfl = read_tflite(path)
    sg = tfl.subgraphs[0]
    ctx = LoweringContext(model=tfl, subgraph=sg)
    op = sg.operators[0]
    assert op.opcode == opcode
    return LOWER[opcode](op, ctx.feature_map(op.inputs[0]), ctx.feature_map(op.outputs[0]), ctx)


def _brief(op: NpuOp) -> tuple:
    name, op_type, kernel, ifm, ifm2, ofm = signature(op)
    return (name, op_type, kernel[:2], ifm, ifm2, ofm)


S1, S8, S24 = (1, 1, 1, 1), (1, 1, 1, 8), (1, 1, 7, 24)
VELA_SYNTHETIC = {
    # 100 x 100 rows of a 4096-element kernel at most: three bands of rows (40, 40, 20) and two int32 adds.
    "mean_split": (lambda p: _mean_model(p, [1, 100, 100, 8], [1, 2], True, [1, 1, 1, 8]), "MEAN", [
        ("yy_conv_0", "DepthwiseConv2DBias", (100, 40), (1, 100, 100, 8), None, S8),
        ("yy_conv_1", "DepthwiseConv2DBias", (100, 40), (1, 100, 100, 8), None, S8),
        ("yy_conv_2", "DepthwiseConv2DBias", (100, 20), (1, 100, 100, 8), None, S8),
        ("y_add_0", "Add", (1, 1), S8, S8, S8),
        ("y_add_1", "Add", (1, 1), S8, S8, S8),
        ("y_mul", "Mul", (1, 1), S8, S1, S8)]),
    # More than 64 rows but few enough elements: the window is read as one 3200-wide row.
    "mean_tall": (lambda p: _mean_model(p, [1, 80, 40, 8], [1, 2], True, [1, 1, 1, 8]), "MEAN", [
        ("yy_conv_0", "DepthwiseConv2DBias", (3200, 1), (1, 1, 3200, 8), None, S8),
        ("y_mul", "Mul", (1, 1), S8, S1, S8)]),
    # Mean over depth with keep_dims=False: C moves into W.
    "mean_depth": (lambda p: _mean_model(p, [1, 10, 1, 32], [3], False, [1, 10, 1]), "MEAN", [
        ("yy_conv_0", "DepthwiseConv2DBias", (32, 1), (1, 10, 32, 1), None, (1, 10, 1, 1)),
        ("y_mul", "Mul", (1, 1), (1, 10, 1, 1), S1, (1, 10, 1, 1))]),
    # int16 over H only: bands of 64 rows.
    "mean_h16": (lambda p: _mean_model(p, [1, 130, 7, 24], [1], True, [1, 1, 7, 24], "INT16"), "MEAN", [
        ("yy_conv_0", "DepthwiseConv2DBias", (1, 64), (1, 130, 7, 24), None, S24),
        ("yy_conv_1", "DepthwiseConv2DBias", (1, 64), (1, 130, 7, 24), None, S24),
        ("yy_conv_2", "DepthwiseConv2DBias", (1, 2), (1, 130, 7, 24), None, S24),
        ("y_add_0", "Add", (1, 1), S24, S24, S24),
        ("y_add_1", "Add", (1, 1), S24, S24, S24),
        ("y_mul", "Mul", (1, 1), S24, S1, S24)]),
    "softmax_int16": (lambda p: _softmax_model(p, [1, 10], "INT16"), "SOFTMAX", [
        ("probs_maxpool0", "MaxPool", (10, 1), (1, 1, 10, 1), None, S1),
        ("probs_sub1", "Sub", (1, 1), (1, 1, 1, 10), S1, (1, 1, 1, 10)),
        ("probs_mul2", "Mul", (1, 1), (1, 1, 1, 10), S1, (1, 1, 1, 10)),
        ("probs_add3", "Add", (1, 1), (1, 1, 1, 10), S1, (1, 1, 1, 10)),
        ("probs_reduce_sum4", "ReduceSum", (1, 1), (1, 1, 1, 10), None, S1),
        ("probs_clz5", "CLZ", (1, 1), S1, None, S1),
        ("probs_sub6", "Sub", (1, 1), S1, S1, S1),
        ("probs_shl7", "SHL", (1, 1), S1, S1, S1),
        ("probs_sub8", "Sub", (1, 1), S1, S1, S1),
        ("probs_shl9", "SHL", (1, 1), S1, S1, S1),
        ("probs_shr10", "SHR", (1, 1), S1, S1, S1),
        ("probs_sub11", "Sub", (1, 1), S1, S1, S1),
        ("probs_mul12", "Mul", (1, 1), (1, 1, 1, 10), S1, (1, 1, 1, 10)),
        ("probs_shr13", "SHR", (1, 1), (1, 1, 1, 10), S1, (1, 1, 1, 10))]),
}


@pytest.mark.parametrize("case", sorted(VELA_SYNTHETIC))
def test_synthetic_cases_match_vela(case, tmp_path):
    build, opcode, want = VELA_SYNTHETIC[case]
    path = tmp_path / f"{case}.tflite"
    build(path)
    ops = _lower_file(path, opcode)
    assert sorted(_brief(o) for o in ops) == sorted(want)
    assert_dependency_order(ops)


def test_softmax_batch_rows_fold_into_height(tmp_path):
    """A [3, 10] softmax is three rows: Vela views the IFM as [3, 1, 1, 10] and folds the batch into H."""
    path = tmp_path / "softmax_batch.tflite"
    _softmax_model(path, [3, 10], "INT8")
    ops = {o.name: o for o in _lower_file(path, "SOFTMAX")}
    assert _brief(ops["probs_maxpool0"]) == ("probs_maxpool0", "MaxPool", (10, 1), (1, 3, 10, 1), None, (1, 3, 1, 1))
    assert _brief(ops["probs_sub1"]) == ("probs_sub1", "Sub", (1, 1), (1, 3, 1, 10), (1, 3, 1, 1), (1, 3, 1, 10))
    assert _brief(ops["probs_mul29"]) == ("probs_mul29", "Mul", (1, 1), (1, 3, 1, 10), (1, 3, 1, 1), (1, 3, 1, 10))
    assert _brief(ops["probs_shr30"]) == ("probs_shr30", "SHR", (1, 1), (1, 3, 1, 10), (1, 3, 1, 1), (1, 3, 1, 10))


def test_lstm_batches_and_time_steps(tmp_path):
    """Batch-major, 2 batches x 3 steps: Vela unrolls 6 steps of 18 passes; later steps read the states the
    previous step wrote. Time-major with 5 rows: the FCs become 1x1 Conv2DBias passes over [1, 1, 5, n]."""
    path = tmp_path / "lstm_b2t3.tflite"
    _lstm_model(path, batch=2, time=3, features=20, units=16, time_major=False)
    ops = _lower_file(path, "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert len(ops) == 108
    by_name = {o.name: o for o in ops}
    later = by_name["input_gate#1.2:output_state#1.1_mul_tens0_fc"]
    assert _brief(later) == (later.name, "FullyConnected", (1, 1), (1, 1, 2, 16), None, (1, 1, 1, 16))
    assert later.ifm.offset == Shape4D(0, 0, 1, 0)
    assert by_name["out#1.2"].ofm.offset == Shape4D(0, 1, 2, 0)
    # The output scale comes from the operator's 5th intermediate (scale 0.0071): Vela's explicit scaling.
    assert dict(by_name["output_state#0.0_mul"].attrs)["explicit_scaling"] == (False, (53,), (1181494016,))
    assert_dependency_order(ops)

    path = tmp_path / "lstm_tm_b5t1.tflite"
    _lstm_model(path, batch=5, time=1, features=20, units=16, time_major=True)
    ops = {o.name: o for o in _lower_file(path, "UNIDIRECTIONAL_SEQUENCE_LSTM")}
    assert len(ops) == 18
    assert _brief(ops["output_gate#0.0:h_state_fc"]) == (
        "output_gate#0.0:h_state_fc", "Conv2DBias", (1, 1), (1, 1, 5, 16), None, (1, 1, 5, 16))
    assert _brief(ops["output_gate#0.0:seq_feature#0.0_fc"]) == (
        "output_gate#0.0:seq_feature#0.0_fc", "Conv2DBias", (1, 1), (1, 1, 5, 20), None, (1, 1, 5, 16))
    assert _brief(ops["out#0.0"]) == ("out#0.0", "AvgPool", (1, 1), (1, 1, 5, 16), None, (1, 1, 5, 16))
