"""Graph lowering against Vela 5.2.0's verbose schedule for every corpus model.

In the u55-128_hee_shared config every stripe Vela prints is the full IFM/IFM2/OFM shape, so the per-op
(name, type, kernel, IFM, IFM2, OFM) sequence of each NPU subgraph is exactly what lowering must produce.
"""

from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from conftest import MODELS, golden_arch, golden_cases, golden_path

from npusched.frontend.tflite_reader import read_tflite
from npusched.ir import CpuOp, NpuBlockType, NpuOp, TensorFormat
from npusched.lowering.graph import lower_model
from npusched.vela.report import read_cpu_operator_count, read_verbose_schedule

CONFIG = "u55-128_hee_shared"
SYNTHETIC_DIR = Path(__file__).parent / "data" / "lowering"
SYNTHETIC = ("ops_a", "ops_b", "ops_c1", "ops_c2")

def parse_schedule(path: Path) -> tuple[dict[str, list[dict]], int]:
    """NPU subgraph name -> ops (name, type, kernel, stripes) and the 'CPU operators' count of a vela_stdout."""
    subgraphs: dict[str, list[dict]] = {}
    for schedule in read_verbose_schedule(path):
        subgraphs.setdefault(schedule.subgraph, []).extend(
            {
                "name": op.name,
                "Type": op.op_type,
                "Kernel": "w={}, h={}, stride=({}, {}), dilation=({}, {})".format(*op.kernel),
                "IFM Stripe": str(op.ifm_stripe),
                "IFM2 Stripe": None if op.ifm2_stripe is None else str(op.ifm2_stripe),
                "OFM Stripe": str(op.ofm_stripe),
            }
            for op in schedule.ops
        )
    return subgraphs, read_cpu_operator_count(path)


def describe(op: NpuOp) -> dict:
    """Our op in the golden file's terms."""
    k = op.kernel
    return {
        "name": op.name,
        "Type": op.op_type,
        "Kernel": f"w={k.width}, h={k.height}, stride=({k.stride_x}, {k.stride_y}), "
                  f"dilation=({k.dilation_x}, {k.dilation_y})",
        "IFM Stripe": str(op.ifm.shape),
        "IFM2 Stripe": None if op.ifm2 is None else str(op.ifm2.shape),
        "OFM Stripe": str(op.ofm.shape),
    }


@pytest.fixture(scope="module")
def tflite_models(corpus_dir):
    return {name: read_tflite(corpus_dir / f"{name}.tflite") for name in MODELS}


@pytest.fixture(scope="module")
def lowered(tflite_models, golden_dir):
    arch = golden_arch(CONFIG)
    return {name: lower_model(model, arch) for name, model in tflite_models.items()}


@pytest.fixture(scope="module")
def golden(golden_dir):
    return {name: parse_schedule(golden_dir / CONFIG / name / "vela_stdout.txt") for name in MODELS}


@pytest.mark.parametrize("name", MODELS)
def test_npu_subgraphs_and_cpu_operator_count(lowered, golden, name):
    net = lowered[name]
    subgraphs, cpu = golden[name]
    assert [sg.name for sg in net.subgraphs] == list(subgraphs)
    assert len(net.cpu_ops) == cpu


@pytest.mark.parametrize("name", MODELS)
def test_tflite_operators_vela_runs_on_npu_are_npu_ops(lowered, golden, tflite_models, name):
    sg = tflite_models[name].main
    tflite_outputs = {sg.tensors[op.outputs[0]].name for op in sg.operators if op.outputs}
    ours = Counter(op.name for op in lowered[name].npu_ops)
    expected = Counter(op["name"] for ops in golden[name][0].values() for op in ops if op["name"] in tflite_outputs)
    assert expected, "every corpus model keeps some TFLite operator as an NPU pass"
    # Names can repeat (keyword_scrambled_8bit leaves every tensor name empty): compare as multisets.
    for op_name, count in expected.items():
        assert ours[op_name] >= count, op_name


@pytest.mark.parametrize("name", MODELS)
def test_pass_sequence_matches_vela_exactly(lowered, golden, name):
    """Names, op types, kernels and full IFM/IFM2/OFM shapes of every pass, in Vela's order — including
    the passes Vela synthesises (softmax/mean/LSTM decompositions, concat/pad slices, DMA copies)."""
    net = lowered[name]
    subgraphs, _ = golden[name]
    for sg in net.subgraphs:
        assert [describe(op) for op in sg.ops] == subgraphs[sg.name], sg.name


def test_sequence_is_the_same_for_every_config(tflite_models, configs):
    """Lowering does not depend on the accelerator among the golden configs (all have >16 SHRAM banks, so a
    LUT activation can always fuse): names, types and kernels match each config's schedule."""
    checked = 0
    for config in configs:
        if config == CONFIG:
            continue
        arch = golden_arch(config)
        for _, name in golden_cases((config,)):
            model = tflite_models[name]
            subgraphs, cpu = parse_schedule(golden_path(config, name) / "vela_stdout.txt")
            net = lower_model(model, arch)
            assert len(net.cpu_ops) == cpu
            for sg in net.subgraphs:
                ours = [(d["name"], d["Type"], d["Kernel"]) for d in map(describe, sg.ops)]
                assert ours == [(g["name"], g["Type"], g["Kernel"]) for g in subgraphs[sg.name]], (config, name)
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("name", MODELS)
def test_network_structure_is_consistent(lowered, name):
    net = lowered[name]
    assert [op.index for op in net.ops] == list(range(len(net.ops)))
    assert net.cpu_ops == tuple(op for op in net.ops if isinstance(op, CpuOp))
    seen = set()
    for sg in net.subgraphs:
        indices = [op.index for op in sg.ops]
        assert indices == sorted(indices) and not seen & set(indices)
        seen |= set(indices)
        assert all(net.ops[op.index] is op for op in sg.ops)
        # The pass DAG: passes and the feature maps they read and write; the execution order is a topological
        # order of it, so every map is written before it is read.
        g = sg.graph
        assert sorted(n for n in g.nodes if isinstance(n, int)) == indices and nx.is_directed_acyclic_graph(g)
        position = {index: p for p, index in enumerate(indices)}
        for op in sg.ops:
            assert list(g.successors(op.index)) == [op.ofm.tensor]
            for fm in g.predecessors(op.index):
                assert fm in (op.ifm.tensor, op.ifm2.tensor if op.ifm2 else None) and not fm.is_const
                assert all(position[w] < position[op.index] for w in sg.writers(fm))
                assert op.index in sg.readers(fm)
        produced = {op.ofm.tensor for op in sg.ops}
        for op in sg.ops:
            for acc in (op.ifm, op.ifm2):
                if acc is None or acc.tensor.is_const or acc.tensor in produced:
                    continue
                assert acc.tensor in sg.inputs, (sg.name, op.name, acc.tensor.name)
    assert seen == {op.index for op in net.ops if isinstance(op, NpuOp)}


@pytest.mark.parametrize("name", MODELS)
def test_weights_are_hwio_matching_the_kernel(lowered, name):
    """Weights as Vela holds them after its import/optimiser transformations: HWIO for convolutions (I=1 for
    depthwise), IO for fully connected, agreeing with the kernel and shapes Vela prints."""
    for op in lowered[name].npu_ops:
        if op.npu_block_type in (NpuBlockType.ConvolutionMxN, NpuBlockType.ConvolutionDepthWise):
            h, w, i, o = op.weights.shape
            assert (h, w, o) == (op.kernel.height, op.kernel.width, op.ofm.shape.depth), op.name
            expected_i = 1 if op.npu_block_type == NpuBlockType.ConvolutionDepthWise else op.ifm.shape.depth
            assert i == expected_i, op.name
            assert op.bias is not None and op.bias.shape == (o,)
        elif op.npu_block_type == NpuBlockType.VectorProduct:
            assert op.weights.shape == (op.ifm.shape.depth, op.ofm.shape.depth), op.name
            assert op.kernel.width == op.kernel.height == 1


def test_keyword_spotting_cpu_operators_carry_reasons(lowered):
    cpu = lowered["keyword_scrambled_8bit"].cpu_ops
    assert sorted(op.tflite_op for op in cpu) == ["QUANTIZE", "SOFTMAX"] + ["SVDF"] * 7
    assert all(op.reason for op in cpu)


def test_pad_is_folded_into_hardware_padding(lowered):
    """MobileNet v2's 18 PADs vanish (no pass reads a PAD output) and the following strided convolutions
    use explicit hardware padding."""
    net = lowered["mobilenet_v2_224_int8"]
    assert [op.tflite_op for op in net.cpu_ops] == ["TRANSPOSE"]
    first = net.npu_ops[0]
    assert first.ifm.shape.as_list() == [1, 224, 224, 3] and first.kernel.stride_x == 2
    # PAD adds 1 on every side; as hardware padding of a stride-2 3x3 kernel over an even 224 the trailing
    # side shrinks to 0 (only 1 row/column of padding is ever read), as Vela computes it.
    assert first.kernel.padding == (1, 1, 0, 0)
    assert sum(op.kernel.padding != (0, 0, 0, 0) for op in net.npu_ops) >= 18


def test_sigmoid_is_fused_as_lut_into_the_fully_connected(lowered):
    last = lowered["dtln"].npu_ops[-1]
    assert last.op_type == "FullyConnected" and last.activation == "LUT"
    assert last.activation_lut is not None and last.activation_lut.shape == (1, 1, 1, 256)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_synthetic_operator_coverage_matches_vela(golden_dir, name):
    """Operators the corpus lacks, against Vela's schedule for small synthetic models (tests/data/lowering)."""
    net = lower_model(read_tflite(SYNTHETIC_DIR / f"{name}.tflite"), golden_arch(CONFIG))
    subgraphs, cpu = parse_schedule(SYNTHETIC_DIR / f"{name}.vela_stdout.txt")
    assert [sg.name for sg in net.subgraphs] == list(subgraphs)
    assert len(net.cpu_ops) == cpu
    for sg in net.subgraphs:
        assert [describe(op) for op in sg.ops] == subgraphs[sg.name], sg.name


@pytest.mark.parametrize("name", MODELS)
def test_brick_format_only_inside_npu_subgraphs(lowered, name):
    """Vela keeps NPU subgraph inputs/outputs and DMA-copied tensors linear (NHWC); only feature maps passed
    between NPU passes may be NHCWB16."""
    for sg in lowered[name].subgraphs:
        assert all(fm.format == TensorFormat.NHWC for fm in sg.inputs + sg.outputs)
        for op in sg.ops:
            if op.op_type == "Memcpy":
                assert op.ifm.tensor.format == op.ofm.tensor.format == TensorFormat.NHWC


def test_convolution_chains_use_brick_format(lowered):
    net = lowered["mobilenet_v2_224_int8"]
    convs = [op for op in net.npu_ops if op.op_type == "Conv2DBias"]
    assert sum(op.ofm.tensor.format == TensorFormat.NHCWB16 for op in convs) == len(convs)
