"""NPU/CPU placement against Vela 5.2.0: the corpus against the golden output, and real corpus operators edited
one rule at a time. Every edited case's verdict was confirmed by running vela 5.2.0 (legacy core) on a
single-operator model holding exactly that operator."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS, golden_cases, model_path

from npusched.frontend.supported import NPU_OPERATORS, cpu_operators, npu_support, vela_cpu_reason
from npusched.frontend.tflite_reader import TfliteOperator, TfliteSubgraph, read_tflite
from npusched.ir import DataType, Quantization

# Vela's own placement messages in vela_stdout.txt: semantic failures, failed support rules, CPU-only types.
_VELA_CPU_LINE = re.compile(r"^(?:Warning: Unsupported TensorFlow Lite semantics for (\w+) '(.*)'\. Placing on CPU"
                            r"|Warning: (\w+) '(.*)' is not supported on the NPU\. Placing on CPU"
                            r"|Info: (\w+) '(.*)' is a CPU only op)")


@cache
def _subgraph(model: str) -> TfliteSubgraph:
    return read_tflite(model_path(model)).main


def _golden_stdout(golden_dir: Path, config: str, model: str) -> str:
    return (golden_dir / config / model / "vela_stdout.txt").read_text()


def _golden_cpu_count(text: str) -> int:
    return int(re.search(r"^CPU operators = (\d+)", text, re.M).group(1))


def _golden_cpu_ops(text: str) -> Counter:
    found = Counter()
    for line in text.splitlines():
        m = _VELA_CPU_LINE.match(line)
        if m:
            groups = [g for g in m.groups() if g is not None]
            found[(groups[0], groups[1])] += 1
    return found


@pytest.mark.parametrize("model", MODELS)
def test_cpu_operator_count_matches_golden(corpus_dir, golden_dir, model):
    sg = _subgraph(model)
    ours = cpu_operators(sg)
    text = _golden_stdout(golden_dir, "u55-128_hee_shared", model)
    assert len(ours) == _golden_cpu_count(text)
    # Same operators, by type and output name, as the ones Vela announced it would leave on the CPU.
    names = Counter((sg.operators[i].opcode, sg.tensors[sg.operators[i].outputs[0]].name) for i in ours)
    assert names == _golden_cpu_ops(text)
    assert all(reason.count("\n") == 0 and "runs on the CPU" in reason for reason in ours.values())


@pytest.mark.parametrize("config", ["u55-128_hee_shared_size", "u55-256_hee_shared_arena128k",
                                    "u65-256_mid_dedicated256k", "u65-512_high_dedicated384k"])
def test_placement_does_not_depend_on_the_hardware(golden_dir, config):
    counts = {m: _golden_cpu_count(_golden_stdout(golden_dir, config, m)) for _, m in golden_cases((config,))}
    assert counts == {m: len(cpu_operators(_subgraph(m))) for m in counts}


def test_corpus_reasons_name_the_broken_rule(corpus_dir):
    kws = cpu_operators(_subgraph("keyword_scrambled_8bit"))
    assert sum("SVDF is a CPU-only operator" in r for r in kws.values()) == 7
    assert "IFM and OFM have the same data type (IFM int8, OFM int16)" in kws[13]  # SOFTMAX int8 -> int16
    assert "int32" in kws[14] and kws[14].startswith("QUANTIZE")  # int16 -> int32 requantise
    mobilenet = cpu_operators(_subgraph("mobilenet_v2_224_int8"))
    assert list(mobilenet) == [0] and "permutation [0, 2, 3, 1]" in mobilenet[0]


# ---------------------------------------------------------------------------------------------------------------
# Real corpus operators with one thing changed. Each case: (model, op index, edit, expected reason fragment or
# None when the NPU still runs it). An edit takes and returns (subgraph, operator).

def _opts(**changes):
    def edit(sg, op):
        return sg, replace(op, options={**op.options, **changes})
    return edit


def _tensor(position: int, output: bool = False, **changes):
    """Replace fields of the operator's input (or output) tensor at ``position``."""
    def edit(sg, op):
        index = (op.outputs if output else op.inputs)[position]
        tensors = list(sg.tensors)
        tensors[index] = replace(tensors[index], **changes)
        return replace(sg, tensors=tuple(tensors)), op
    return edit


def _chain(*edits):
    def edit(sg, op):
        for e in edits:
            sg, op = e(sg, op)
        return sg, op
    return edit


def _weights_zero_point(zp: int):
    def edit(sg, op):
        w = sg.tensors[op.inputs[1]]
        return _tensor(1, quantization=replace(w.quantization, zero_point=(zp,)))(sg, op)
    return edit


def _tall_kernel(height: int):
    def edit(sg, op):
        w = sg.tensors[op.inputs[1]]
        o, _, kw, i = w.shape
        return _tensor(1, shape=(o, height, kw, i), data=np.ones((o, height, kw, i), np.int8))(sg, op)
    return edit


def _reinput(position: int, source: int):
    def edit(sg, op):
        inputs = list(op.inputs)
        inputs[position] = op.inputs[source] if source >= 0 else -1
        return sg, replace(op, inputs=tuple(inputs))
    return edit


def _graph_input(position: int):
    def edit(sg, op):
        return replace(sg, inputs=sg.inputs + (op.inputs[position],)), op
    return edit


def _state_not_variable(sg, op):
    for position in (18, 19):
        t = sg.tensors[op.inputs[position]]
        sg, op = _tensor(position, is_variable=False, data=np.zeros(t.shape, np.int8 if t.dtype == DataType.int8
                                                                         else np.int16))(sg, op)
    return sg, op


KWS_CONV, KWS_DW, KWS_POOL = ("kws_dscnn_int8", 0), ("kws_dscnn_int8", 1), ("kws_dscnn_int8", 9)
EDIT_CASES = {
    # CONV_2D 10x4, stride 2x2, IFM 1x49x10x1
    "conv as is": (*KWS_CONV, None, None),
    "conv stride H 4": (*KWS_CONV, _chain(_opts(stride_h=4), _tensor(0, True, shape=(1, 13, 5, 64))),
                        "Stride H is 1-3"),
    "conv stride W 4 folds into the IFM width": (*KWS_CONV, _chain(_opts(stride_w=4),
                                                                   _tensor(0, True, shape=(1, 25, 3, 64))), None),
    "conv stride W 7 cannot fold": (*KWS_CONV, _chain(_opts(stride_w=7), _tensor(0, True, shape=(1, 25, 2, 64))),
                                    "stride W is >= 1 and reduces to 1-3"),
    "conv int32 IFM": (*KWS_CONV, _tensor(0, dtype=DataType.int32), "int32 IFM/IFM2/weights/OFM only for"),
    "conv float IFM": (*KWS_CONV, _tensor(0, dtype=DataType.float32, quantization=Quantization()),
                       "IFM, IFM2, weights and OFM are quantised"),
    "conv kernel 65 high": (*KWS_CONV, _tall_kernel(65), "dilated kernel height is 1-64 (dilated kernel height 65)"),
    "conv kernel 64 high": (*KWS_CONV, _tall_kernel(64), None),
    "conv dilation 8 on a 10-high kernel": (*KWS_CONV, _opts(dilation_h_factor=8), "dilated kernel height 73"),
    "conv asymmetric weights": (*KWS_CONV, _weights_zero_point(5), "zero weight zero points"),
    "conv fused SIGN_BIT": (*KWS_CONV, _opts(fused_activation_function="SIGN_BIT"), "fused SIGN_BIT"),
    "conv batch 2": (*KWS_CONV, _tensor(0, shape=(2, 49, 10, 1)), "batch is 1"),
    "conv rank 5 IFM": (*KWS_CONV, _tensor(0, shape=(1, 1, 49, 10, 1)), "at most 4 dimensions"),
    "conv unknown opcode": (*KWS_CONV, lambda sg, op: (sg, replace(op, opcode="UNKNOWN_BUILTIN_999")),
                            "UNKNOWN_BUILTIN_999 is a CPU-only operator"),
    # DEPTHWISE_CONV_2D 3x3 stride 1; person_detect's first op has depth multiplier 8 on a 1-channel IFM
    "depthwise as is": (*KWS_DW, None, None),
    "depthwise stride 4": (*KWS_DW, _chain(_opts(stride_w=4), _tensor(0, True, shape=(1, 25, 2, 64))),
                           "Depthwise stride W and H are both 1-3"),
    "depth multiplier 8 on 1 channel": ("person_detect", 0, None, None),
    "depth multiplier 8 on 2 channels": ("person_detect", 0, _tensor(0, shape=(1, 96, 96, 2)),
                                         "IFM depth 2, OFM depth 8, multiplier 8"),
    # AVERAGE_POOL_2D 5x25 (WxH), stride 5x25 over a 5x25 IFM: Vela turns it into stride 1, VALID
    "pool kernel = stride = IFM, SAME": (*KWS_POOL, _opts(padding="SAME"), None),
    "pool kernel = stride < IFM, SAME": (*KWS_POOL, _chain(_opts(padding="SAME"), _tensor(0, shape=(1, 25, 10, 64)),
                                                          _tensor(0, True, shape=(1, 1, 2, 64))),
                                         "stride W above 3"),
    "pool int16 OFM": (*KWS_POOL, _tensor(0, True, dtype=DataType.int16), "IFM and OFM have the same data type"),
    # FULLY_CONNECTED with a 3-D IFM and keep_num_dims: a batch of 2 is fine for FC only
    "fc batch 2": ("dtln", 2, _chain(_tensor(0, shape=(2, 1, 128)), _tensor(0, True, shape=(2, 1, 257))), None),
    # non-constant weights keep their [out, in] layout, so Vela folds the IFM by the output depth and fails first
    "fc non-constant weights": ("dtln", 2, _chain(_tensor(1, data=None), _graph_input(1)),
                                "does not fold to rows of 257"),
    "fc non-constant square weights": ("dtln", 2, _chain(_tensor(1, data=None, shape=(128, 128)), _graph_input(1),
                                                         _tensor(0, True, shape=(1, 1, 128))), "Weights are constant"),
    "fc weights without data": ("dtln", 2, _tensor(1, data=None), "Constant inputs (not produced, not graph inputs"),
    "fc keep_num_dims rank change": ("dtln", 2, _tensor(0, True, shape=(1, 257)), "same rank"),
    # ADD with fused RELU
    "add broadcast from IFM2": ("resnet8_ic_int8", 3, _tensor(1, shape=(1, 1, 1, 16)), None),
    "add broadcast from both": ("resnet8_ic_int8", 3, _chain(_tensor(0, shape=(1, 32, 1, 16)),
                                                             _tensor(1, shape=(1, 1, 32, 16))),
                                "At least one input has the OFM's shape"),
    "add uint8 IFMs, int8 OFM": ("resnet8_ic_int8", 3, _chain(_tensor(0, dtype=DataType.uint8),
                                                              _tensor(1, dtype=DataType.uint8)),
                                 "An unsigned IFM gives an OFM of the same type or int32"),
    # UNIDIRECTIONAL_SEQUENCE_LSTM
    "lstm as is": ("dtln", 0, None, None),
    "lstm state not variable": ("dtln", 0, _state_not_variable, "state inputs (18, 19) are variable"),
    "lstm peephole": ("dtln", 0, _reinput(9, 12), "no peephole"),
    "lstm CIFG": ("dtln", 0, _chain(_reinput(1, -1), _reinput(5, -1)), "CIFG"),
    # RESHAPE with its shape as a second input
    "reshape changes quantisation": ("kws_dscnn_int8", 10, _tensor(0, True, quantization=Quantization((0.5,), (3,))),
                                     "share quantisation"),
    "reshape changes element count": ("kws_dscnn_int8", 10, _tensor(0, True, shape=(1, 63)), "same number of elements"),
    # TRANSPOSE: Vela runs an H/W swap on the NPU (a 1x1 AvgPool writing with swapped strides), and so does npusched
    "transpose swapping H and W": ("mobilenet_v2_224_int8", 0,
                                   _chain(_tensor(1, data=np.array([0, 2, 1, 3], np.int32)),
                                          _tensor(0, shape=(1, 3, 224, 224)), _tensor(0, True, shape=(1, 224, 3, 224))),
                                   None),
    # EXP: Vela runs it on the NPU as a lookup table, and so does npusched (docs/guide/operator_support.md)
    "exp": ("dtln", 3, lambda sg, op: (sg, replace(op, opcode="EXP")), None),
    "exp uint8": ("dtln", 3, _chain(lambda sg, op: (sg, replace(op, opcode="EXP")),
                                    _tensor(0, False, dtype=DataType.uint8), _tensor(0, True, dtype=DataType.uint8)),
                  "int8 or int16"),
    # SHAPE: Vela and npusched fold it into a constant before placement; left unfolded, npusched does not lower it
    "shape": ("dtln", 3, lambda sg, op: (sg, replace(op, opcode="SHAPE")), "npusched does not lower SHAPE"),
    "exp int8 to int16": ("dtln", 3, _chain(lambda sg, op: (sg, replace(op, opcode="EXP")),
                                            _tensor(0, True, dtype=DataType.int16)), "same data type"),
    # RSQRT: int8 only (its lookup table). These four verdicts follow Vela's rules as read in its source; the
    # transformer oracle test (tests/test_netgen.py) runs vela on RSQRT and SQUARED_DIFFERENCE in place.
    "rsqrt": ("dtln", 3, lambda sg, op: (sg, replace(op, opcode="RSQRT")), None),
    "rsqrt int16": ("dtln", 3, _chain(lambda sg, op: (sg, replace(op, opcode="RSQRT")),
                                      _tensor(0, dtype=DataType.int16), _tensor(0, True, dtype=DataType.int16)),
                    "RSQRT IFM is int8"),
}


def _edited(model: str, index: int, edit) -> tuple[TfliteSubgraph, TfliteOperator]:
    sg = _subgraph(model)
    op = sg.operators[index]
    if edit is not None:
        sg, op = edit(sg, op)
        sg = replace(sg, operators=tuple(op if o.index == op.index else o for o in sg.operators))
    return sg, op


@pytest.mark.parametrize("case", list(EDIT_CASES))
def test_edited_operator(corpus_dir, case):
    model, index, edit, expected = EDIT_CASES[case]
    sg, op = _edited(model, index, edit)
    reason = npu_support(op, sg)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason, reason
        assert reason.startswith(f"{op.opcode} '") and "\n" not in reason


def test_vela_verdict_and_npusched_scope_differ_only_outside_npusched_operators(corpus_dir):
    sg, op = _edited(*EDIT_CASES["shape"][:3])
    assert vela_cpu_reason(op, sg) is None and op.opcode not in NPU_OPERATORS
    for model in MODELS:
        sg = _subgraph(model)
        for op in sg.operators:
            if op.opcode in NPU_OPERATORS:
                vela, ours = vela_cpu_reason(op, sg), npu_support(op, sg)
                assert (vela is None) == (ours is None) and (ours is None or vela in ours)
