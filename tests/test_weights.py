"""Weight/scale stream sizes against what Vela 5.2.0 printed for the corpus (golden vela_stdout.txt).

The ops' weights are taken straight from the TFLite files and brought into the layout Vela's graph lowering
hands to its encoder (HWIO; a few rewrites reshape or synthesise them), so these tests do not depend on the
lowering module. Each golden op's block config, depth slices and kernel come from the golden file itself.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA_DIR

from npusched.frontend.tflite_reader import TfliteModel, read_tflite
from npusched.ir import (
    ConstTensor,
    DataType,
    FeatureMap,
    Kernel,
    NpuBlockType,
    NpuOp,
    OperandAccess,
    Quantization,
    Shape4D,
)
from npusched.target import weights as W
from npusched.target.estimators import load_architecture

CONFIGS = {
    "u55-128_hee_shared": "ethos-u55-128",
    "u55-128_hee_shared_size": "ethos-u55-128",
    "u55-256_hee_shared_arena128k": "ethos-u55-256",
    "u65-256_mid_dedicated256k": "ethos-u65-256",
    "u65-512_high_dedicated384k": "ethos-u65-512",
}
BLOCK_TYPES = {
    "Conv2DBias": NpuBlockType.ConvolutionMxN,
    "DepthwiseConv2DBias": NpuBlockType.ConvolutionDepthWise,
    "FullyConnected": NpuBlockType.VectorProduct,
}
WEIGHTED_TFLITE_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
LSTM_GATES = {"input_gate": 0, "forget_gate": 1, "cell_gate": 2, "output_gate": 3}


# --- golden output ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldenOp:
    name: str
    op_type: str
    ofm_depth: int
    kernel: tuple[int, int, int, int, int, int]  # w, h, stride x, stride y, dilation x, dilation y
    block_config: tuple[int, int, int, int]
    encoded: int | None
    buffers: tuple[int, ...]
    depth_slices: tuple[int, ...]


_OP_RE = re.compile(r"^\t\d+: Operation (.*?)  - OFM <Shape4D \[(.*?)\]>$", re.M)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"-?\d+", text))


@functools.cache
def golden_ops(path: Path) -> tuple[GoldenOp, ...]:
    text = path.read_text()
    heads = list(_OP_RE.finditer(text))
    ops = []
    for head, nxt in zip(heads, heads[1:] + [None], strict=True):
        body = text[head.end(): nxt.start() if nxt else len(text)]

        def field(label: str, body: str = body) -> str:
            return re.search(rf"{label} = (.*)", body).group(1)

        kernel = re.search(r"Kernel: (w=.*)", body).group(1)
        encoded = field("Encoded Weights").split()[0]
        ops.append(GoldenOp(
            name=head.group(1),
            op_type=re.search(r"Type: (\w+)", body).group(1),
            ofm_depth=_ints(head.group(2))[-1],
            kernel=_ints(kernel),
            block_config=_ints(field("Block Config")),
            encoded=None if encoded == "None" else int(encoded),
            buffers=tuple(int(v) for v in re.findall(r"Weight buffer\d = (\d+) bytes", body)),
            depth_slices=_ints(field("Depth slices")),
        ))
    return tuple(ops)


# --- weights as Vela's lowering leaves them ----------------------------------------------------------------


@functools.cache
def model(corpus_dir: Path, name: str) -> TfliteModel:
    return read_tflite(corpus_dir / f"{name}.tflite")


def _hwio(op_code: str, values: np.ndarray) -> np.ndarray:
    """TFLite layout -> HWIO: conv OHWI, depthwise 1HW(C*M) -> HW1(C*M), fully connected [out, in] -> 11IO."""
    if op_code == "FULLY_CONNECTED":
        return values.T.reshape(1, 1, values.shape[1], values.shape[0])
    if op_code == "DEPTHWISE_CONV_2D":
        return np.transpose(values, (1, 2, 0, 3))
    return np.transpose(values, (1, 2, 3, 0))


def _needed_padding(size: int, stride: int, kernel: int) -> int:
    return max(kernel - (stride if size % stride == 0 else size % stride), 0)


def _fold_stride_into_depth(hwio: np.ndarray, zero_points: tuple[int, ...], ifm_width: int, stride_x: int,
                            same_padding: bool) -> np.ndarray:
    """Vela's fixup_strided_conv for the first op: pad the kernel's width, then fold W into the input depth."""
    k_w = hwio.shape[1]
    factor = stride_x
    if ifm_width % factor:
        usable = [s for s in (2, 3) if factor % s == 0 and ifm_width % (stride_x // s) == 0]
        reduced = factor // (usable[0] if usable else 1)
        factor = reduced if reduced != factor else 1
    final_stride = stride_x // factor
    hw_pad = _needed_padding(ifm_width, stride_x, k_w)
    extra, left_right = 0, (0, 0)
    if same_padding:
        if ifm_width % (final_stride * factor) == 0:
            target = hw_pad + final_stride
        else:
            target = hw_pad + (ifm_width // factor) % final_stride
        extra = target * factor - k_w
        left = extra // 2 if hw_pad == 0 else extra // hw_pad * (hw_pad // 2)
        left_right = (left, extra - left)
    if k_w % factor and (extra == 0 or hw_pad == 0):
        left_right = (0, factor - k_w % factor)
    fill = zero_points[0] if len(zero_points) == 1 else 0
    padded = np.pad(hwio, [(0, 0), left_right, (0, 0), (0, 0)], constant_values=fill)
    h, w, i, o = padded.shape
    return padded.reshape(h, w // factor, i * factor, o)


def _find_op(tfl: TfliteModel, name: str):
    for sg in tfl.subgraphs:
        for op in sg.operators:
            outs = sg.op_outputs(op)
            if outs and outs[0] is not None and outs[0].name == name:
                return sg, op
    return None, None


def _const(name: str, values: np.ndarray, dtype: DataType, zero_points: tuple[int, ...]) -> ConstTensor:
    return ConstTensor(name, tuple(values.shape), dtype, Quantization(zero_point=zero_points), values)


def vela_weights(tfl: TfliteModel, gop: GoldenOp, unnamed_index: int) -> tuple[ConstTensor, int]:
    """(HWIO weights as Vela encodes them, IFM bits) for a golden op."""
    kernel_w = gop.kernel[0]
    if gop.name == "":  # a model without tensor names: take the weighted ops in order
        weighted = [(s, o) for s in tfl.subgraphs for o in s.operators if o.opcode in WEIGHTED_TFLITE_OPS]
        sg, op = weighted[unnamed_index]
    else:
        sg, op = _find_op(tfl, gop.name)
        if op is None and gop.name.endswith("_fc"):  # 1x1 conv on a 1x1 IFM, turned into fully connected
            sg, op = _find_op(tfl, gop.name[:-3])
    if op is not None and op.opcode in WEIGHTED_TFLITE_OPS:
        ifm, wt = sg.op_inputs(op)[:2]
        hwio = _hwio(op.opcode, wt.data)
        zps = wt.quantization.zero_point
        if hwio.shape[1] != kernel_w:
            hwio = _fold_stride_into_depth(hwio, zps, ifm.shape[2], op.options["stride_w"],
                                           op.options["padding"] == "SAME")
        return _const(wt.name, hwio, wt.dtype, zps), ifm.dtype.size_in_bits
    mean = re.fullmatch(r"(.*)_conv_\d+", gop.name)
    if mean:  # MEAN as depthwise convolutions with all-ones weights (op names repeat the MEAN's name)
        base = mean.group(1)[: len(mean.group(1)) // 2]
        msg, mop = _find_op(tfl, base)
        assert mop is not None and mop.opcode == "MEAN", gop.name
        ones = np.ones((gop.kernel[1], gop.kernel[0], 1, gop.ofm_depth), dtype=np.uint8)
        return _const(f"{gop.name}_weights", ones, DataType.uint8, (0,)), msg.op_inputs(mop)[0].dtype.size_in_bits
    gate = re.fullmatch(r"(\w+_gate)#\d+\.\d+:(.*)_(feature|state)#.*_fc", gop.name)
    if gate:  # LSTM: one fully connected op per gate for the input and one for the recurrent state
        for s in tfl.subgraphs:
            for lstm in s.operators:
                if lstm.opcode != "UNIDIRECTIONAL_SEQUENCE_LSTM":
                    continue
                inputs = s.op_inputs(lstm)
                source = inputs[0] if gate.group(3) == "feature" else inputs[18]
                if source.name == gate.group(2):
                    wt = inputs[(1 if gate.group(3) == "feature" else 5) + LSTM_GATES[gate.group(1)]]
                    return (_const(wt.name, _hwio("FULLY_CONNECTED", wt.data), wt.dtype, wt.quantization.zero_point),
                            source.dtype.size_in_bits)
    raise AssertionError(f"no weights found for golden op {gop.name!r}")


def golden_weighted_ops(corpus_dir: Path, golden_dir: Path, config: str):
    """(model, golden op, weights, ifm bits) for every op with encoded weights under ``config``."""
    for model_dir in sorted((golden_dir / config).iterdir()):
        tfl = model(corpus_dir, model_dir.name)
        unnamed = 0
        for gop in golden_ops(model_dir / "vela_stdout.txt"):
            if gop.encoded is None:
                continue
            weights, ifm_bits = vela_weights(tfl, gop, unnamed)
            unnamed += gop.name == ""
            yield model_dir.name, gop, weights, ifm_bits


def encode_golden(arch, gop: GoldenOp, weights: ConstTensor, ifm_bits: int, slices=None) -> W.EncodedWeights:
    kw, kh, _, _, dx, dy = gop.kernel
    return W.encode_weights(arch, weights, None, BLOCK_TYPES[gop.op_type],
                            Kernel(width=kw, height=kh, dilation_x=dx, dilation_y=dy), gop.block_config[3],
                            gop.depth_slices if slices is None else slices, ifm_bits=ifm_bits)


def expected_buffers(encoded: W.EncodedWeights, count: int) -> tuple[int, ...]:
    return encoded.double_buffer_sizes[:count]


# --- tests -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_encoded_sizes_match_vela(corpus_dir, golden_dir, config):
    """Encoded Weights, Weight buffer1/2 for every weighted op of every model, at Vela's block depth/slices."""
    arch = load_architecture(CONFIGS[config])
    checked, mismatches = 0, []
    for model_name, gop, weights, ifm_bits in golden_weighted_ops(corpus_dir, golden_dir, config):
        enc = encode_golden(arch, gop, weights, ifm_bits)
        got = (enc.total_bytes, expected_buffers(enc, len(gop.buffers)))
        if got != (gop.encoded, gop.buffers):
            mismatches.append(f"{model_name} {gop.name[-50:]}: got {got}, Vela {(gop.encoded, gop.buffers)}")
        checked += 1
    print(f"{config}: {checked - len(mismatches)}/{checked} weighted ops match Vela exactly")
    assert checked > 100
    assert not mismatches, "\n".join(mismatches[:20])


def test_two_core_streams_interleave_channels(corpus_dir, golden_dir):
    """U65-512 splits each slice between 2 cores; the streams add up to Vela's total, each core's scales
    cover every other channel."""
    arch = load_architecture("ethos-u65-512")
    path = golden_dir / "u65-512_high_dedicated384k" / "kws_dscnn_int8" / "vela_stdout.txt"
    gop = golden_ops(path)[0]
    assert gop.depth_slices == (0, 16, 64)
    weights, bits = vela_weights(model(corpus_dir, "kws_dscnn_int8"), gop, 0)
    enc = encode_golden(arch, gop, weights, bits)
    assert enc.total_bytes == gop.encoded
    assert [(r.core, r.depth_offset) for r in enc.ranges] == [(0, 0), (1, 0), (0, 16), (1, 16)]
    assert [r.scale_bytes for r in enc.ranges] == [80, 80, 240, 240]
    assert all(r.offset % 16 == 0 and r.weight_offset % 16 == 0 for r in enc.ranges)
    assert sum(enc.slice_bytes) == enc.total_bytes
    single = encode_golden(load_architecture("ethos-u65-256"), gop, weights, bits)
    assert len(single.ranges) == 2 and single.total_bytes != enc.total_bytes


def test_cache_separates_block_depths_and_slices(corpus_dir, golden_dir):
    """The same weights encoded at another depth slicing or block depth give other sizes, and a fresh copy
    of the weights hits the same results."""
    arch = load_architecture("ethos-u55-128")
    gop = golden_ops(golden_dir / "u55-128_hee_shared" / "kws_dscnn_int8" / "vela_stdout.txt")[0]
    weights, bits = vela_weights(model(corpus_dir, "kws_dscnn_int8"), gop, 0)
    W.clear_caches()
    whole = encode_golden(arch, gop, weights, bits, slices=(0, 64))
    sliced = encode_golden(arch, gop, weights, bits)
    assert (whole.total_bytes, sliced.total_bytes) == (4416, gop.encoded)  # 4416: Vela's full-depth size
    copy = ConstTensor(weights.name, weights.shape, weights.dtype, weights.quantization, weights.values.copy())
    assert encode_golden(arch, gop, copy, bits) is sliced
    deeper = W.encode_weights(arch, weights, None, NpuBlockType.ConvolutionMxN, Kernel(width=3, height=10), 64,
                              (0, 16, 64), ifm_bits=bits)
    assert deeper.ofm_block_depth == 64 and deeper is not sliced


def test_encode_op_weights_reads_the_npu_op(corpus_dir, golden_dir):
    """The NpuOp entry point takes block type, kernel and IFM width from the op."""
    arch = load_architecture("ethos-u55-128")
    gop = golden_ops(golden_dir / "u55-128_hee_shared" / "kws_dscnn_int8" / "vela_stdout.txt")[0]
    weights, _ = vela_weights(model(corpus_dir, "kws_dscnn_int8"), gop, 0)
    ifm = FeatureMap("ifm", Shape4D(1, 49, 5, 2), DataType.int8)
    ofm = FeatureMap("ofm", Shape4D(1, 25, 5, 64), DataType.int8)
    op = NpuOp(index=0, name=gop.name, tflite_op="CONV_2D", op_type="Conv2DBias",
               npu_block_type=NpuBlockType.ConvolutionMxN, ifm=OperandAccess(ifm, ifm.shape),
               ofm=OperandAccess(ofm, ofm.shape), kernel=Kernel(width=3, height=10, stride_y=2), weights=weights)
    assert W.encode_op_weights(arch, op, gop.block_config[3], gop.depth_slices).total_bytes == gop.encoded
    no_weights = NpuOp(index=1, name="pool", tflite_op="MAX_POOL_2D", op_type="MaxPool",
                       npu_block_type=NpuBlockType.Pooling, ifm=op.ifm, ofm=op.ofm)
    with pytest.raises(ValueError, match="no weights"):
        W.encode_op_weights(arch, no_weights, 16, (0, 64))


def test_invalid_requests_are_rejected(corpus_dir, golden_dir):
    arch = load_architecture("ethos-u55-128")
    gop = golden_ops(golden_dir / "u55-128_hee_shared" / "kws_dscnn_int8" / "vela_stdout.txt")[0]
    weights, bits = vela_weights(model(corpus_dir, "kws_dscnn_int8"), gop, 0)
    for slices in ((0,), (0, 80), (16, 16, 64), (0, 32, 16)):
        with pytest.raises(ValueError):
            encode_golden(arch, gop, weights, bits, slices=slices)
    with pytest.raises(ValueError):
        W.encode_weights(arch, weights, None, NpuBlockType.ConvolutionMxN, Kernel(width=4, height=10), 16, (0, 64))


def test_traversal_choice():
    """Part-kernel-first for shallow IFMs or when it uses the MACs better, depth-first otherwise."""
    conv = NpuBlockType.ConvolutionMxN
    assert W.choose_traversal(conv, (10, 3, 2, 64), 8) == W.BlockTraversal.PART_KERNEL_FIRST
    assert W.choose_traversal(conv, (1, 1, 64, 64), 8) == W.BlockTraversal.DEPTH_FIRST
    # 3x3 over 24 channels: depth-first 24/32 = 0.75 < part-kernel (24/24) * (9/12) = 0.75 -> tie goes to part-kernel
    assert W.choose_traversal(conv, (3, 3, 24, 8), 8) == W.BlockTraversal.PART_KERNEL_FIRST
    assert W.choose_traversal(conv, (3, 3, 64, 8), 8) == W.BlockTraversal.DEPTH_FIRST
    assert W.choose_traversal(NpuBlockType.ConvolutionDepthWise, (3, 3, 1, 8), 8) == W.BlockTraversal.DEPTH_FIRST


def test_scale_entry_format():
    """10 bytes little-endian: 40-bit bias, 32-bit multiplier, 6-bit shift (values worked out by hand)."""
    assert W.pack_bias_scale(-2, 0x40000000, 31) == bytes([0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0x40, 31])
    assert W.pack_bias_scale(0x0102030405, 0x8899AABB, 63) == bytes(
        [0x05, 0x04, 0x03, 0x02, 0x01, 0xBB, 0xAA, 0x99, 0x88, 63])
    assert W.quantise_scale(0.5) == (1 << 30, 31)
    assert W.quantise_scale(0.75 * 2.0**-20) == (3 << 29, 51)
    assert W.quantise_scale(2.0**40) == (0, 16)
    with pytest.raises(ValueError):
        W.pack_bias_scale(1 << 39, 0, 0)


# Calls of Vela 5.2.0's Scheduler.propose_weight_buffering, recorded from an instrumented copy of Vela run on
# the corpus: (config, model, golden op index, inputs, Vela's outputs). op_cycles / transfer are the answers
# Vela's own estimate_op_performance (per OFM depth) and measure_mem2mem_cycles (per byte count) gave.
def _buffering_calls() -> list[tuple[str, str, int, dict, dict]]:
    """What Vela's weight-buffering decision was called with and returned, per op (tests/data/golden)."""
    rows = json.loads((DATA_DIR / "golden" / "vela_buffering_calls.json").read_text())
    return [(row["config"], row["model"], row["op_index"],
             {**row["inputs"], "transfer": {int(k): v for k, v in row["inputs"]["transfer"].items()},
              "op_cycles": {int(k): v for k, v in row["inputs"]["op_cycles"].items()}},
             {key: tuple(value) if isinstance(value, list) else value for key, value in row["vela"].items()})
            for row in rows]


VELA_BUFFERING_CALLS = _buffering_calls()


@pytest.mark.parametrize("config,model_name,op_index,inputs,vela", VELA_BUFFERING_CALLS,
                         ids=[f"{c}-{m}-{i}" for c, m, i, _, _ in VELA_BUFFERING_CALLS])
def test_weight_buffering_plan_matches_vela(corpus_dir, golden_dir, config, model_name, op_index, inputs, vela):
    arch = load_architecture(CONFIGS[config])
    gop = golden_ops(golden_dir / config / model_name / "vela_stdout.txt")[op_index]
    weights, bits = vela_weights(model(corpus_dir, model_name), gop, 0)
    kw, kh, _, _, dx, dy = gop.kernel
    kernel = Kernel(width=kw, height=kh, dilation_x=dx, dilation_y=dy)
    asked: list[int] = []

    def op_cycles(depth: int) -> float:
        asked.append(depth)
        return inputs["op_cycles"][depth]

    plan = W.plan_weight_buffering(
        lambda slices: W.encode_weights(arch, weights, None, BLOCK_TYPES[gop.op_type], kernel, inputs["block"],
                                        slices, ifm_bits=bits),
        inputs["stripe"], inputs["block"], needs_dma=True, is_fully_connected=inputs["fc"],
        cascaded=inputs["cascaded"], buffer_limit_bytes=inputs["limit"], slack_cycles=inputs["slack_cycles"],
        slack_memory=inputs["slack_memory"], transfer_cycles=lambda n: inputs["transfer"][n], op_cycles=op_cycles)
    assert plan.depth_slices == vela["slices"]
    assert plan.buffer_sizes == vela["buffers"]
    assert plan.double_buffered == (len(vela["buffers"]) == 2)
    assert plan.pre_buffer == vela["pre_buffer"]
    assert plan.encoded.total_bytes == vela["encoded"]
    assert plan.slack_memory_used == vela["slack_memory_used"]
    assert sorted(set(asked)) == sorted(inputs["op_cycles"])  # Vela asked for the same depths
    if inputs["op_cycles"]:
        assert plan.tail_cycles == vela["slack_cycles_after"]
    else:
        assert plan.tail_cycles is None


def test_no_dma_means_no_buffering(corpus_dir, golden_dir):
    """Weights already in fast storage are read in place at full depth."""
    arch = load_architecture("ethos-u55-128")
    gop = golden_ops(golden_dir / "u55-128_hee_shared" / "kws_dscnn_int8" / "vela_stdout.txt")[0]
    weights, bits = vela_weights(model(corpus_dir, "kws_dscnn_int8"), gop, 0)

    def fail(_: int) -> float:
        raise AssertionError("no cycle estimate is needed")

    plan = W.plan_weight_buffering(lambda s: encode_golden(arch, gop, weights, bits, slices=s), 64, 16,
                                   needs_dma=False, is_fully_connected=False, cascaded=False,
                                   buffer_limit_bytes=1 << 20, slack_cycles=0, slack_memory=0,
                                   transfer_cycles=fail, op_cycles=fail)
    assert (plan.depth_slices, plan.buffer_sizes, plan.encoded.total_bytes) == ((0, 64), (), 4416)
