"""netgen held to the zoo: where netgen imitates an exporter (``keras_style``, ``torch_style``), the operators it
writes that the real converter's file of that family does not (tests/data/exports, written by Keras 3 / TF 2.21 and
onnx2tf 1.29) are exactly the ones listed here, each with why. netgen stays for scale and variety; the zoo is the
truth about forms. Teaching netgen an exporter's real form removes its line; a new imitation the real file does
not show fails until it is listed (or mended). Each network is netgen's at 40 passes, seed 0 (netgen draws some
variants, such as a transformer's GELU form, per network). netgen's Keras style keeps the plain variant's layers by
design (normalised, it is the plain network plus the rescaling: tests/test_normalise.py), so a layer Keras 3 writes
in another form (global pooling as MEAN) stays listed here rather than mended there."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from conftest import EXPORTS_DIR

from npusched.frontend.tflite_reader import read_tflite
from npusched.netgen import generate

# (netgen architecture, export style, the zoo's real file of that family) -> (operators netgen writes that the real
# file has not, why).
DIVERGENCES: dict[tuple[str, str, str], tuple[frozenset[str], str]] = {
    ("tcn", "keras", "kws_tcn_49x40"): (
        frozenset({"SQUEEZE"}),
        "netgen ends a Conv1D's EXPAND_DIMS -> CONV_2D with SQUEEZE (tf.keras 2); Keras 3 writes a RESHAPE"),
    ("gru", "keras", "kws_gru_unrolled"): (
        frozenset({"FILL", "PACK", "SHAPE"}),
        "netgen builds the zero state from the run-time batch (tf.zeros((tf.shape(x)[0], units))); Keras 3's unrolled "
        "GRU starts from a constant"),
    ("yolo", "keras", "yolov8_tiny_128"): (
        frozenset({"PACK"}),
        "netgen's run-time reshape shape; the real head splits with SPLIT and reshapes to static shapes"),
    ("yolo", "torch", "pt_yolov8_tiny_128"): (frozenset(), ""),
    ("mobilenet_v2", "keras", "mobilenet_v2_035_96"): (
        frozenset({"AVERAGE_POOL_2D", "MUL", "PACK", "RESHAPE", "SHAPE", "STRIDED_SLICE"}),
        "netgen's global pooling is AVERAGE_POOL_2D (Keras 3 writes MEAN), its Flatten a run-time reshape (tf.keras "
        "2; Keras 3's shapes are static), its image input rescaled by a MUL (the zoo's model has no Rescaling)"),
    ("mobilenet_v2", "torch", "pt_mobilenet_v2_035_96"): (
        frozenset({"RESHAPE", "TRANSPOSE"}),
        "netgen's network ends in a 4-D map TRANSPOSEd back to NCHW; the real one is a classifier (2-D output)"),
    ("mobilenet_v3", "keras", "mobilenet_v3_small_035_96"): (
        frozenset({"AVERAGE_POOL_2D", "LOGISTIC", "PACK", "RESHAPE", "SHAPE", "STRIDED_SLICE"}),
        "as MobileNet-V2's, and netgen gates its squeeze-excite blocks with LOGISTIC where Keras 3's MobileNetV3 "
        "uses a hard sigmoid (MUL and ADD)"),
    ("resnet", "keras", "resnet_tiny_96"): (
        frozenset({"AVERAGE_POOL_2D", "MUL", "PACK", "RESHAPE", "SHAPE", "STRIDED_SLICE"}),
        "as MobileNet-V2's"),
    ("efficientnet", "keras", "efficientnet_lite_035_128"): (
        frozenset({"AVERAGE_POOL_2D", "LOGISTIC", "MUL", "PACK", "RESHAPE", "SHAPE", "STRIDED_SLICE"}),
        "as MobileNet-V2's; netgen's EfficientNet has squeeze-excite gates (LOGISTIC, MUL), EfficientNet-lite none"),
    ("transformer", "keras", "vit_tiny_64"): (
        frozenset({"SUB"}),
        "netgen's layer norm subtracts the mean with SUB; Keras 3's negates it in a float island (DEQUANTIZE -> NEG "
        "-> QUANTIZE) and adds"),
    ("transformer", "torch", "pt_vit_tiny_64"): (
        frozenset({"GELU"}),
        "netgen (this network's draw of its variants) writes the GELU operator; onnx2tf writes PyTorch's tanh GELU in "
        "element-wise operators (TANH, MUL, ADD)"),
    ("deeplab", "keras", "deeplab_aspp_96x128"): (frozenset(), ""),
    ("gru", "torch", "pt_kws_gru"): (
        frozenset({"SPLIT"}),
        "netgen splits the gates with SPLIT; onnx2tf slices them (GATHER, STRIDED_SLICE)"),
}


def _operators(data: bytes) -> set[str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.tflite"
        path.write_bytes(data)
        return set(read_tflite(path).op_counts())


@pytest.mark.parametrize(("arch", "style", "export"), list(DIVERGENCES), ids=["-".join(k) for k in DIVERGENCES])
def test_netgen_writes_what_the_real_exporter_writes_but_the_listed_imitations(arch: str, style: str,
                                                                               export: str) -> None:
    imitation = _operators(generate(arch, 40, 0, keras_style=style == "keras", torch_style=style == "torch"))
    real = _operators((EXPORTS_DIR / f"{export}.tflite").read_bytes())
    listed, why = DIVERGENCES[(arch, style, export)]
    assert imitation - real == listed, why or "netgen writes only what the real file has"
