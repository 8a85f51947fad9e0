"""The zoo of real converter exports (tests/data/exports, made by scripts/export_zoo.py; see docs/zoo.md) is whole:
every required layer type, family and model is there, every file is the one the manifest records, and the zoo
stays within its size budget. Needs only the standard library and pytest: no converter is imported."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest

EXPORTS = Path(__file__).parent / "data" / "exports"
MANIFEST = EXPORTS / "manifest.json"
GOLDEN = EXPORTS / "golden"
CONFIGS = json.loads((Path(__file__).parent / "data" / "golden" / "configs.json").read_text())

MAX_FILE_BYTES = 500 * 1024
MAX_TOTAL_BYTES = 8 * 1024 * 1024
MIN_MODELS = 40

REQUIRED_LAYERS = frozenset("""
conv1d_valid conv1d_same conv1d_causal conv1d_dilated conv1d_strided conv2d_valid conv2d_same conv2d_strided
conv2d_dilated conv2d_stride4 conv2d_stride8 depthwise_conv2d separable_conv2d conv2d_transpose dense_2d dense_3d
dense_4d max_pool average_pool global_average_pool global_max_pool batchnorm_folded batchnorm_unfolded layer_norm
group_norm relu relu6 leaky_relu prelu hard_swish gelu silu elu sigmoid tanh softmax_last_axis softmax_other_axis
upsample_nearest_2x upsample_nearest_4x upsample_nearest_nonsquare upsample_bilinear_2x upsample_bilinear_4x
zero_padding cropping reflect_padding concatenate add multiply abs_difference reshape permute flatten lstm_unrolled
lstm_fused lstm gru_unrolled gru multi_head_attention pixel_shuffle argmax exp mean_channel_axis
""".split())

REQUIRED_FAMILIES = frozenset("""
kws_cnn kws_tcn kws_gru kws_lstm mobilenet_v1 mobilenet_v2 mobilenet_v3 mobilenet_v4 efficientnet_lite resnet
yolo_detector aspp_segmentation super_resolution autoencoder vit mobilevit convnext siamese multi_io
classifier_argmax unit
""".split())

# Every model of the zoo: removing one from the manifest (or the folder) fails test_every_required_model_is_there.
REQUIRED_MODELS = frozenset("""
kws_dscnn_s kws_cnn_49x40 kws_tcn_49x40 kws_tcresnet8 kws_gru_unrolled kws_lstm_unrolled mobilenet_v1_025_96
mobilenet_v2_035_96 mobilenet_v3_small_035_96 mobilenet_v4_uib_96 efficientnet_lite_035_128 resnet_tiny_96
yolov8_tiny_128 deeplab_aspp_96x128 espcn_x3_64 conv_autoencoder_64 vit_tiny_64 mobilevit_xxs_96 convnext_atto_64
siamese_64 audio_visual_multi_io person_argmax_96 unit_conv2d_variants unit_conv1d_variants unit_pad_crop
unit_upsample unit_norms unit_reductions unit_activations unit_dense_nd kws_dscnn_s_16x8 unit_activations_16x8
resnet_tiny_96_16x8 kws_lstm_fused kws_lstm_stacked_fused_49x40 kws_dscnn_s_tfkeras pt_kws_cnn
pt_mobilenet_v2_035_96 pt_espcn_x2_96 pt_vit_tiny_64 pt_kws_gru pt_kws_lstm pt_yolov8_tiny_128 pt_convnext_atto_64
""".split())

CONVERTERS = {"tensorflow", "tf-keras", "onnx2tf", "litert-torch"}
ENTRY_FIELDS = {"file", "family", "layers", "converter", "converter_version", "framework_version", "quantisation",
                "settings", "seed", "sha256", "bytes", "reproducible"}
# Files in tests/data/exports that are not models.
NOT_MODELS = {"manifest.json", "large_manifest.json"}


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


@pytest.fixture(scope="module")
def models(manifest: dict) -> list[dict]:
    return manifest["models"]


def test_every_entry_says_what_and_how(models: list[dict]) -> None:
    for entry in models:
        assert ENTRY_FIELDS <= entry.keys(), (entry.get("file"), ENTRY_FIELDS - entry.keys())
        assert entry["converter"] in CONVERTERS, entry["file"]
        assert entry["quantisation"] in ("int8", "16x8"), entry["file"]
        assert isinstance(entry["seed"], int) and isinstance(entry["settings"], dict), entry["file"]
        assert isinstance(entry["reproducible"], bool), entry["file"]
        assert entry["converter_version"] and entry["framework_version"], entry["file"]
        assert set(entry["layers"]) <= REQUIRED_LAYERS, (entry["file"], set(entry["layers"]) - REQUIRED_LAYERS)


def test_every_required_layer_type_and_family_is_there(models: list[dict]) -> None:
    layers = {layer for entry in models for layer in entry["layers"]}
    assert REQUIRED_LAYERS - layers == set()
    assert REQUIRED_FAMILIES - {entry["family"] for entry in models} == set()


def test_every_required_model_is_there(models: list[dict]) -> None:
    files = [entry["file"] for entry in models]
    assert len(files) == len(set(files))
    assert REQUIRED_MODELS - {Path(f).stem for f in files} == set()
    assert len(files) >= MIN_MODELS


def test_a_pytorch_path_exports_six_models(models: list[dict]) -> None:
    assert sum(entry["converter"] in ("onnx2tf", "litert-torch") for entry in models) >= 6
    assert {"tensorflow", "tf-keras"} <= {entry["converter"] for entry in models}


def test_folder_and_manifest_agree(models: list[dict]) -> None:
    on_disk = {p.name for p in EXPORTS.iterdir() if p.is_file() and p.name not in NOT_MODELS}
    assert on_disk == {entry["file"] for entry in models}


def test_files_are_the_recorded_ones(models: list[dict]) -> None:
    for entry in models:
        data = (EXPORTS / entry["file"]).read_bytes()
        assert data[4:8] == b"TFL3", entry["file"]
        assert len(data) == entry["bytes"], entry["file"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["file"]
        assert len(data) <= MAX_FILE_BYTES, entry["file"]


def test_zoo_and_golden_fit_the_budget() -> None:
    total = sum(p.stat().st_size for p in EXPORTS.rglob("*") if p.is_file())
    assert total <= MAX_TOTAL_BYTES, total


def test_golden_covers_every_model_configuration_and_core(models: list[dict]) -> None:
    stems = {Path(entry["file"]).stem for entry in models}
    with (GOLDEN / "partition.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(row["model"], row["config"]) for row in rows} == {(m, c) for m in stems for c in CONFIGS}
    for core in ("legacy", "regor"):
        for config in CONFIGS:
            folders = {p.name for p in (GOLDEN / f"vela-5.2.0-{core}" / config).iterdir()}
            assert folders == stems, (core, config, folders ^ stems)
    for row in rows:
        for core in ("legacy", "regor"):
            folder = GOLDEN / f"vela-5.2.0-{core}" / row["config"] / row["model"]
            if row[f"{core}_cpu_ops"] == "error":
                assert (folder / "error.txt").exists()
            else:
                assert (folder / "summary.csv.gz").exists(), folder
                assert int(row[f"{core}_npu_subgraphs"]) >= 0 and int(row[f"{core}_cpu_ops"]) >= 0
