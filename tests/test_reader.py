"""The TFLite reader on the real corpus, and on broken files made from real corpus bytes."""

import csv
import struct
from pathlib import Path

import numpy as np
import pytest
import tflite
from conftest import MODELS

from npusched.errors import ModelError
from npusched.frontend.tflite_reader import parse_tflite, read_tflite
from npusched.ir import DataType

NUMPY = {DataType.int8: np.int8, DataType.uint8: np.uint8, DataType.int16: np.int16, DataType.int32: np.int32,
         DataType.int64: np.int64, DataType.float32: np.float32}


@pytest.fixture(scope="session")
def models(corpus_dir):
    return {name: read_tflite(corpus_dir / f"{name}.tflite") for name in MODELS}


def test_corpus_is_the_expected_one(corpus_dir):
    assert sorted(p.stem for p in corpus_dir.glob("*.tflite")) == sorted(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_every_corpus_model_is_consistent(models, name):
    model = models[name]
    assert model.version == 3 and len(model.subgraphs) == 1
    sg = model.main
    assert sg.inputs and sg.outputs and sg.operators
    for op in sg.operators:
        assert all(-1 <= i < len(sg.tensors) for i in op.inputs + op.outputs)
        assert all(t is not None for t in sg.op_outputs(op))
    for t in sg.tensors:
        if t.data is not None and t.dtype in NUMPY:
            assert t.data.dtype == NUMPY[t.dtype] and t.data.shape == t.shape
            assert not t.data.flags.writeable


@pytest.mark.parametrize("name", MODELS)
def test_operators_match_vela_per_layer_table(models, golden_dir, name):
    """Vela's per-layer table names each NPU pass by its TFLite operator type and output tensor. Passes Vela
    synthesises (softmax, LSTM decompositions) have new names; every name that is one of our operators'
    outputs must come with that operator's type, and every type in the table must be one of ours."""
    table = golden_dir / "u55-128_hee_shared" / name / "per_layer.csv"
    sg = models[name].main
    type_of = {sg.tensors[o].name: op.opcode for op in sg.operators for o in op.outputs if sg.tensors[o].name}
    with table.open(newline="") as f:
        rows = [(r[0], r[-1]) for r in csv.reader(f) if r and r[0] != "TFLite_operator"]
    assert {op_type for op_type, _ in rows} <= {op.opcode for op in sg.operators}
    matched = [(op_type, type_of[out]) for op_type, out in rows if out in type_of]
    assert all(theirs == ours for theirs, ours in matched)
    assert matched or not type_of


def test_kws_dscnn_structure(models):
    sg = models["kws_dscnn_int8"].main
    assert len(sg.operators) == 13
    assert models["kws_dscnn_int8"].op_counts() == {"CONV_2D": 5, "DEPTHWISE_CONV_2D": 4, "AVERAGE_POOL_2D": 1,
                                                    "RESHAPE": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1}
    ifm = sg.tensor(sg.operators[0].inputs[0])
    assert ifm.shape == (1, 49, 10, 1) and ifm.dtype is DataType.int8 and ifm.data is None
    assert ifm.shape_signature == (-1, 49, 10, 1)
    assert sg.tensors[sg.outputs[0]].shape == (1, 12)

    first = sg.operators[0]
    assert first.opcode == "CONV_2D" and first.custom_code is None
    assert first.options["padding"] == "SAME"
    assert (first.options["stride_h"], first.options["stride_w"]) == (2, 2)
    assert first.options["fused_activation_function"] == "RELU"
    weights, bias = sg.tensor(first.inputs[1]), sg.tensor(first.inputs[2])
    assert weights.shape == (64, 10, 4, 1) and weights.dtype is DataType.int8
    assert weights.data.dtype == np.int8 and weights.data.nbytes == 64 * 10 * 4
    assert len(weights.quantization.scale) == 64 and weights.quantization.zero_point == (0,) * 64
    assert bias.shape == (64,) and bias.data.dtype == np.int32

    pool = next(op for op in sg.operators if op.opcode == "AVERAGE_POOL_2D")
    assert pool.options["padding"] == "VALID"
    assert (pool.options["filter_height"], pool.options["filter_width"]) == (25, 5)


def test_person_detect_depthwise_options(models):
    sg = models["person_detect"].main
    first = sg.operators[0]
    assert first.opcode == "DEPTHWISE_CONV_2D"
    assert first.options["depth_multiplier"] == 8 and first.options["fused_activation_function"] == "RELU6"
    assert (first.options["stride_h"], first.options["stride_w"], first.options["padding"]) == (2, 2, "SAME")
    assert sg.tensor(first.inputs[1]).quantization.quantized_dimension == 3
    assert sg.operators[-2].opcode == "RESHAPE" and sg.operators[-2].options["new_shape"] == (1, 2)


@pytest.mark.parametrize("name", ["kws_dscnn_int8", "person_detect", "resnet8_ic_int8"])
def test_constant_data_is_decoded_in_layout(models, name):
    """TFLite's symmetric per-channel int8 weights reach +-127 in every output channel along the quantised
    dimension; a wrong dtype, byte order or shape would break that. Int32 biases stay small."""
    sg = models[name].main
    for op in sg.operators:
        if op.opcode not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            continue
        weights, bias = sg.tensor(op.inputs[1]), sg.tensor(op.inputs[2])
        axis = weights.quantization.quantized_dimension
        others = tuple(i for i in range(weights.data.ndim) if i != axis)
        assert set(np.abs(weights.data.astype(np.int32)).max(axis=others).tolist()) == {127}
        assert np.abs(bias.data).max() < 2**24


def test_lstm_optional_inputs_and_variables(models):
    sg = models["dtln"].main
    lstm = sg.operators[0]
    assert lstm.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM" and len(lstm.inputs) == 24
    # no peephole, projection or layer-norm tensors: those optional inputs are absent
    assert [i for i, t in enumerate(lstm.inputs) if t == -1] == [9, 10, 11, 16, 17, 20, 21, 22, 23]
    assert sg.tensor(-1) is None
    assert lstm.options["fused_activation_function"] == "TANH" and lstm.options["time_major"] is False
    assert sum(t.is_variable for t in sg.tensors) == 4


def test_every_options_table_of_the_schema_decodes():
    """Options are read generically from the generated classes; an empty table of each union member gives
    the schema defaults (an empty Conv2DOptions has dilation factors 1 and SAME padding, enum value 0)."""
    import flatbuffers

    from npusched.frontend.tflite_reader import _decode_options

    decoded = {}
    for union in (tflite.BuiltinOptions, tflite.BuiltinOptions2):
        for name, value in vars(union).items():
            if name.startswith("_") or value == 0:
                continue
            builder = flatbuffers.Builder(64)
            getattr(tflite, f"{name}Start")(builder)
            builder.Finish(getattr(tflite, f"{name}End")(builder))
            buf = bytes(builder.Output())
            decoded[name] = _decode_options(flatbuffers.table.Table(buf, int.from_bytes(buf[:4], "little")), name)
    assert len(decoded) > 140
    assert decoded["Conv2DOptions"] == {"padding": "SAME", "stride_w": 0, "stride_h": 0,
                                        "fused_activation_function": "NONE", "dilation_w_factor": 1,
                                        "dilation_h_factor": 1, "quantized_bias_type": "FLOAT32"}
    assert decoded["StablehloPadOptions"]["edge_padding_low"] == ()


# ---- broken inputs, made from real bytes ------------------------------------------------------------------


def _error(data: bytes) -> str:
    with pytest.raises(ModelError) as info:
        parse_tflite(data, "model.tflite")
    message = str(info.value)
    assert "\n" not in message and message.startswith("model.tflite: ")
    return message


@pytest.fixture(scope="session")
def kws_bytes(corpus_dir) -> bytes:
    return (corpus_dir / "kws_dscnn_int8.tflite").read_bytes()


def _field(table, slot: int) -> int:
    """Byte position of a scalar field, found through the generated binding's table (slot = vtable offset)."""
    offset = table._tab.Offset(slot)
    assert offset, "field not stored in this file"
    return table._tab.Pos + offset


def _vector(table, slot: int) -> int:
    """Byte position of element 0 of a vector field (its uint32 length sits just before)."""
    offset = table._tab.Offset(slot)
    assert offset, "vector not stored in this file"
    return table._tab.Vector(offset)


def _patch(data: bytes, pos: int, fmt: str, expected: int, value: int) -> bytes:
    buf = bytearray(data)
    assert struct.unpack_from(fmt, buf, pos)[0] == expected, "patching the wrong bytes"
    struct.pack_into(fmt, buf, pos, value)
    return bytes(buf)


def _model_with_external_buffer(values: np.ndarray) -> bytes:
    """A one-tensor model whose constant is stored after the flatbuffer (Buffer.offset/size), as the TFLite
    converter does for models over 2 GB; built with the flatbuffers builder and the generated functions."""
    import flatbuffers

    b = flatbuffers.Builder(256)
    name = b.CreateString("w")
    tflite.TensorStartShapeVector(b, values.ndim)
    for dim in reversed(values.shape):
        b.PrependInt32(dim)
    shape = b.EndVector()
    tflite.TensorStart(b)
    tflite.TensorAddShape(b, shape)
    tflite.TensorAddType(b, tflite.TensorType.INT16)
    tflite.TensorAddBuffer(b, 1)
    tflite.TensorAddName(b, name)
    tensor = tflite.TensorEnd(b)
    tflite.SubGraphStartTensorsVector(b, 1)
    b.PrependUOffsetTRelative(tensor)
    tensors = b.EndVector()
    tflite.SubGraphStartOutputsVector(b, 1)
    b.PrependInt32(0)
    outputs = b.EndVector()
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors)
    tflite.SubGraphAddOutputs(b, outputs)
    subgraph = tflite.SubGraphEnd(b)
    tflite.BufferStart(b)
    empty = tflite.BufferEnd(b)
    tflite.BufferStart(b)
    tflite.BufferAddOffset(b, 0xFFFF_FFFF)  # placeholder, patched below once the flatbuffer size is known
    tflite.BufferAddSize(b, values.nbytes)
    external = tflite.BufferEnd(b)
    tflite.ModelStartBuffersVector(b, 2)
    b.PrependUOffsetTRelative(external)
    b.PrependUOffsetTRelative(empty)
    buffers = b.EndVector()
    tflite.ModelStartSubgraphsVector(b, 1)
    b.PrependUOffsetTRelative(subgraph)
    subgraphs = b.EndVector()
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddSubgraphs(b, subgraphs)
    tflite.ModelAddBuffers(b, buffers)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    flat = bytes(b.Output())
    start = -(-len(flat) // 16) * 16
    buffer = tflite.Model.GetRootAs(flat).Buffers(1)
    flat = _patch(flat, _field(buffer, 6), "<Q", 0xFFFF_FFFF, start)
    return flat.ljust(start, b"\0") + values.astype("<i2").tobytes()


def test_constant_stored_after_the_flatbuffer():
    values = np.array([[1, -2, 3], [300, -400, 32767]], dtype=np.int16)
    data = _model_with_external_buffer(values)
    (tensor,) = parse_tflite(data).main.tensors
    assert tensor.dtype is DataType.int16 and tensor.shape == (2, 3)
    assert tensor.data.dtype == np.int16 and np.array_equal(tensor.data, values)
    assert "lies at bytes" in _error(data[:-2])


def test_valid_bytes_parse(kws_bytes):
    assert len(parse_tflite(kws_bytes).main.operators) == 13


def test_missing_file_and_directory(tmp_path):
    for path in (tmp_path / "nope.tflite", tmp_path):
        with pytest.raises(ModelError) as info:
            read_tflite(path)
        assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_empty_and_truncated(corpus_dir):
    assert "empty" in _error(b"")
    for name in ("kws_dscnn_int8", "mobilenet_v2_224_int8", "dtln"):
        data = (corpus_dir / f"{name}.tflite").read_bytes()
        for cut in (3, 7, 8, 12, 64, len(data) // 2, len(data) - 16):
            _error(data[:cut])


def test_random_bytes():
    rng = np.random.default_rng(1234)
    for i in range(40):
        blob = bytearray(rng.integers(0, 256, size=int(rng.integers(8, 4096)), dtype=np.uint8).tobytes())
        if i % 2:
            blob[4:8] = b"TFL3"  # get past the identifier check into the flatbuffer decoding
        _error(bytes(blob))


def test_wrong_identifier(kws_bytes):
    assert "not a TFLite model" in _error(kws_bytes[:4] + b"TFL2" + kws_bytes[8:])


def test_unsupported_version(kws_bytes):
    model = tflite.Model.GetRootAs(kws_bytes)
    data = _patch(kws_bytes, _field(model, 4), "<I", 3, 2)
    assert "schema version 2" in _error(data)


def test_no_subgraphs(kws_bytes):
    model = tflite.Model.GetRootAs(kws_bytes)
    data = _patch(kws_bytes, _vector(model, 8) - 4, "<I", 1, 0)
    assert "no subgraphs" in _error(data)


def test_operator_tensor_index_out_of_range(kws_bytes):
    op = tflite.Model.GetRootAs(kws_bytes).Subgraphs(0).Operators(3)
    data = _patch(kws_bytes, _vector(op, 6), "<i", op.Inputs(0), 99)
    assert _error(data) == ("model.tflite: operator 3 of subgraph 0 uses tensor index 99 "
                            "but the subgraph has 35 tensors")


def test_opcode_index_out_of_range(kws_bytes):
    sg = tflite.Model.GetRootAs(kws_bytes).Subgraphs(0)
    index = next(i for i in range(sg.OperatorsLength()) if sg.Operators(i).OpcodeIndex() != 0)
    op = sg.Operators(index)
    data = _patch(kws_bytes, _field(op, 4), "<I", op.OpcodeIndex(), 50)
    assert f"operator {index} of subgraph 0 uses operator code 50 but the model has 6" in _error(data)


def test_buffer_index_out_of_range(kws_bytes):
    tensor = tflite.Model.GetRootAs(kws_bytes).Subgraphs(0).Tensors(17)
    data = _patch(kws_bytes, _field(tensor, 8), "<I", tensor.Buffer(), 999)
    assert "tensor 17 ('functional_1/conv2d/Conv2D') of subgraph 0 uses buffer index 999" in _error(data)


def test_subgraph_output_index_out_of_range(kws_bytes):
    sg = tflite.Model.GetRootAs(kws_bytes).Subgraphs(0)
    data = _patch(kws_bytes, _vector(sg, 8), "<i", sg.Outputs(0), 1000)
    assert "subgraph 0 output is tensor index 1000" in _error(data)


def test_buffer_size_does_not_match_shape(kws_bytes):
    tensor = tflite.Model.GetRootAs(kws_bytes).Subgraphs(0).Tensors(17)
    data = _patch(kws_bytes, _vector(tensor, 4), "<i", 64, 65)
    assert "has 2560 bytes of data but shape [65, 10, 4, 1] of INT8 needs 2600" in _error(data)


def test_builtin_code_is_the_larger_of_both_fields(models, kws_bytes, corpus_dir):
    """kws stores only the int8 deprecated code (as files from before the int32 field); dtln stores both.
    Zeroing dtln's deprecated code must not change the operator, as the TFLite runtime takes the max."""
    kws_code = tflite.Model.GetRootAs(kws_bytes).OperatorCodes(0)
    assert kws_code._tab.Offset(10) == 0 and kws_code.DeprecatedBuiltinCode() == tflite.BuiltinOperator.CONV_2D
    assert models["kws_dscnn_int8"].op_counts()["CONV_2D"] == 5

    dtln = (corpus_dir / "dtln.tflite").read_bytes()
    code = tflite.Model.GetRootAs(dtln).OperatorCodes(0)
    lstm = tflite.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    data = _patch(dtln, _field(code, 4), "<b", lstm, 0)
    assert parse_tflite(data).main.operators[0].opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM"


def test_file_shorter_than_a_header(tmp_path: Path):
    bad = tmp_path / "model.tflite"
    bad.write_bytes(b"\x00" * 3)
    with pytest.raises(ModelError, match="too short"):
        read_tflite(bad)
