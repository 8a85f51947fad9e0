"""The zoo: every model's family, converter, builder, layer types (the names tests/test_zoo_manifest.py requires),
settings and seed. Adding a model here and running ``export_zoo.py export`` adds it to the manifest."""

from __future__ import annotations

from typing import Any

from export_zoo.common import ModelSpec

_SPECS: list[ModelSpec] = []


def _add(name: str, family: str, converter: str, builder: str, layers: str, settings: dict[str, Any],
         inputs: list[tuple[int, ...]], quantisation: str = "int8") -> None:
    """Register one model; its seed is fixed by its position so that adding models never reseeds others."""
    _SPECS.append(ModelSpec(name=name, family=family, converter=converter, builder=builder,
                            layers=tuple(layers.split()), settings=settings, inputs=tuple(inputs),
                            seed=1000 + len(_SPECS), quantisation=quantisation))


TF, TFK, O2T = "tensorflow", "tf-keras", "onnx2tf"
KWS = "conv2d_same conv2d_strided batchnorm_folded relu depthwise_conv2d average_pool flatten dense_2d " \
      "softmax_last_axis"

# --- Keras 3 through TensorFlow's converter ---------------------------------------------------------------------
_add("kws_dscnn_s", "kws_cnn", TF, "kws_dscnn", KWS,
     {"input": [49, 10, 1], "width": 64, "blocks": 4, "classes": 12}, [(49, 10, 1)])
_add("kws_cnn_49x40", "kws_cnn", TF, "kws_cnn",
     "batchnorm_unfolded conv2d_valid relu max_pool flatten dense_2d softmax_last_axis",
     {"input": [49, 40, 1], "classes": 12}, [(49, 40, 1)])
_add("kws_tcn_49x40", "kws_tcn", TF, "kws_tcn",
     "conv1d_causal conv1d_dilated batchnorm_folded relu add global_average_pool dense_2d softmax_last_axis",
     {"input": [49, 40], "width": 32, "dilations": [1, 2, 4], "classes": 12}, [(49, 40)])
_add("kws_tcresnet8", "kws_tcn", TF, "kws_tcresnet",
     "conv1d_valid conv1d_same conv1d_strided batchnorm_folded relu add global_average_pool dense_2d "
     "softmax_last_axis",
     {"input": [49, 40], "widths": [24, 32, 48], "classes": 12}, [(49, 40)])
_add("kws_gru_unrolled", "kws_gru", TF, "kws_rnn", "gru_unrolled dense_2d softmax_last_axis",
     {"input": [49, 10], "cell": "gru", "units": [32], "unroll": True, "classes": 12}, [(49, 10)])
_add("kws_lstm_unrolled", "kws_lstm", TF, "kws_rnn", "lstm_unrolled dense_2d softmax_last_axis",
     {"input": [49, 10], "cell": "lstm", "units": [32], "unroll": True, "classes": 12}, [(49, 10)])
_add("mobilenet_v1_025_96", "mobilenet_v1", TF, "mobilenet_v1",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded relu6 zero_padding global_average_pool "
     "reshape softmax_last_axis",
     {"input": [96, 96, 3], "alpha": 0.25, "classes": 2, "source": "keras.applications.MobileNet"}, [(96, 96, 3)])
_add("mobilenet_v2_035_96", "mobilenet_v2", TF, "mobilenet_v2",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded relu6 zero_padding add global_average_pool "
     "dense_2d softmax_last_axis",
     {"input": [96, 96, 3], "alpha": 0.35, "cut": "block_12_add", "classes": 2,
      "source": "keras.applications.MobileNetV2 up to block_12_add"}, [(96, 96, 3)])
_add("mobilenet_v3_small_035_96", "mobilenet_v3", TF, "mobilenet_v3",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded relu hard_swish multiply add zero_padding "
     "global_average_pool dense_2d softmax_last_axis",
     {"input": [96, 96, 3], "alpha": 0.35, "minimalistic": False, "classes": 2,
      "source": "keras.applications.MobileNetV3Small, include_top=False, pooling=avg"}, [(96, 96, 3)])
_add("mobilenet_v4_uib_96", "mobilenet_v4", TF, "mobilenet_v4",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded relu add global_average_pool dense_2d "
     "softmax_last_axis",
     {"input": [96, 96, 3], "last": 256, "classes": 10,
      "blocks": [[32, 5, 5, 2, 3.0], [32, 0, 3, 1, 2.0], [32, 3, 0, 1, 2.0], [32, 0, 0, 1, 2.0],
                 [64, 3, 3, 2, 4.0], [64, 0, 3, 1, 2.0], [64, 3, 0, 1, 2.0], [64, 0, 0, 1, 2.0]]},
     [(96, 96, 3)])
_add("efficientnet_lite_035_128", "efficientnet_lite", TF, "efficientnet_lite",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded relu6 add global_average_pool dense_2d "
     "softmax_last_axis",
     {"input": [128, 128, 3], "last": 256, "classes": 10,
      "stages": [[1, 8, 3, 1, 1], [6, 16, 3, 2, 2], [6, 24, 5, 2, 2], [6, 40, 3, 2, 2], [6, 56, 5, 2, 1]]},
     [(128, 128, 3)])
_add("resnet_tiny_96", "resnet", TF, "resnet",
     "conv2d_strided conv2d_same batchnorm_folded relu max_pool add global_average_pool dense_2d softmax_last_axis",
     {"input": [96, 96, 3], "widths": [16, 32, 64], "classes": 10}, [(96, 96, 3)])
_add("yolov8_tiny_128", "yolo_detector", TF, "yolo_detector",
     "conv2d_strided conv2d_same batchnorm_folded silu concatenate upsample_nearest_2x max_pool add",
     {"input": [128, 128, 3], "widths": [8, 16, 32, 64], "head": 16, "classes": 4}, [(128, 128, 3)])
_add("deeplab_aspp_96x128", "aspp_segmentation", TF, "aspp_segmentation",
     "conv2d_strided conv2d_same depthwise_conv2d conv2d_dilated batchnorm_folded relu global_average_pool "
     "upsample_nearest_nonsquare upsample_bilinear_2x upsample_bilinear_4x concatenate softmax_last_axis",
     {"input": [96, 128, 3], "rates": [2, 4, 6], "classes": 5}, [(96, 128, 3)])
_add("espcn_x3_64", "super_resolution", TF, "super_resolution", "conv2d_same prelu pixel_shuffle",
     {"input": [64, 64, 1], "scale": 3}, [(64, 64, 1)])
_add("conv_autoencoder_64", "autoencoder", TF, "autoencoder",
     "conv2d_strided conv2d_transpose conv2d_same relu sigmoid",
     {"input": [64, 64, 1], "widths": [16, 32, 32]}, [(64, 64, 1)])
_add("vit_tiny_64", "vit", TF, "vit",
     "conv2d_stride8 reshape add layer_norm multi_head_attention dense_3d gelu global_average_pool dense_2d "
     "softmax_last_axis",
     {"input": [64, 64, 3], "dim": 64, "heads": 4, "depth": 2, "classes": 10}, [(64, 64, 3)])
_add("mobilevit_xxs_96", "mobilevit", TF, "mobilevit",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded silu add reshape permute layer_norm "
     "multi_head_attention dense_4d gelu concatenate global_average_pool dense_2d softmax_last_axis",
     {"input": [96, 96, 3], "vit_blocks": [[32, 40], [40, 48]], "last": 96, "classes": 10}, [(96, 96, 3)])
_add("convnext_atto_64", "convnext", TF, "convnext",
     "conv2d_stride4 layer_norm depthwise_conv2d dense_4d gelu multiply add conv2d_strided global_average_pool "
     "dense_2d softmax_last_axis",
     {"input": [64, 64, 3], "widths": [16, 32, 64], "depths": [1, 1, 2], "classes": 10}, [(64, 64, 3)])
_add("siamese_64", "siamese", TF, "siamese",
     "conv2d_strided relu global_average_pool dense_2d abs_difference sigmoid",
     {"input": [64, 64, 1], "inputs": 2}, [(64, 64, 1), (64, 64, 1)])
_add("audio_visual_multi_io", "multi_io", TF, "multi_io",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded relu global_average_pool concatenate dense_2d "
     "softmax_last_axis sigmoid",
     {"image": [64, 64, 3], "audio": [49, 10, 1], "classes": 5, "outputs": 2}, [(64, 64, 3), (49, 10, 1)])
_add("person_argmax_96", "classifier_argmax", TF, "classifier_argmax",
     "conv2d_strided relu max_pool global_max_pool dense_2d argmax",
     {"input": [96, 96, 1], "classes": 2}, [(96, 96, 1)])

# --- Keras 3 units ----------------------------------------------------------------------------------------------
_add("unit_conv2d_variants", "unit", TF, "unit_conv2d_variants",
     "conv2d_valid conv2d_dilated conv2d_same separable_conv2d leaky_relu elu relu",
     {"input": [32, 32, 8], "dilation": 2}, [(32, 32, 8)])
_add("unit_conv1d_variants", "unit", TF, "unit_conv1d_variants",
     "conv1d_valid conv1d_same conv1d_causal conv1d_dilated conv1d_strided relu tanh sigmoid multiply",
     {"input": [49, 40], "dilation": 2}, [(49, 40)])
_add("unit_pad_crop", "unit", TF, "unit_pad_crop", "zero_padding cropping reflect_padding conv2d_valid relu",
     {"input": [24, 24, 8]}, [(24, 24, 8)])
_add("unit_upsample", "unit", TF, "unit_upsample",
     "upsample_bilinear_2x upsample_nearest_4x upsample_nearest_nonsquare conv2d_same relu",
     {"input": [8, 12, 16]}, [(8, 12, 16)])
_add("unit_norms", "unit", TF, "unit_norms", "batchnorm_unfolded add group_norm layer_norm conv2d_same relu",
     {"input": [16, 16, 8], "groups": 4}, [(16, 16, 8)])
_add("unit_reductions", "unit", TF, "unit_reductions",
     "softmax_other_axis exp multiply mean_channel_axis global_max_pool conv2d_same",
     {"input": [8, 16, 10]}, [(8, 16, 10)])
_ACTS = ["hard_swish", "gelu", "silu", "elu", "tanh", "sigmoid", "leaky_relu", "relu6"]
_add("unit_activations", "unit", TF, "unit_activations", "conv2d_same " + " ".join(_ACTS),
     {"input": [16, 16, 8], "activations": _ACTS}, [(16, 16, 8)])
_add("unit_dense_nd", "unit", TF, "unit_dense_nd", "dense_4d dense_3d dense_2d reshape permute flatten relu "
     "softmax_last_axis", {"input": [8, 8, 16]}, [(8, 8, 16)])

# --- 16x8 (int16 activations, int8 weights) ---------------------------------------------------------------------
_add("kws_dscnn_s_16x8", "kws_cnn", TF, "kws_dscnn", KWS,
     {"input": [49, 10, 1], "width": 64, "blocks": 4, "classes": 12}, [(49, 10, 1)], quantisation="16x8")
# ELU and HARD_SWISH have no 16x8 kernels in TFLite ("Quantization to 16x8-bit not yet supported for op").
_ACTS16 = [a for a in _ACTS if a not in ("elu", "hard_swish")]
_add("unit_activations_16x8", "unit", TF, "unit_activations", "conv2d_same " + " ".join(_ACTS16),
     {"input": [16, 16, 8], "activations": _ACTS16}, [(16, 16, 8)], quantisation="16x8")
_add("resnet_tiny_96_16x8", "resnet", TF, "resnet",
     "conv2d_strided conv2d_same batchnorm_folded relu max_pool add global_average_pool dense_2d softmax_last_axis",
     {"input": [96, 96, 3], "widths": [16, 32, 64], "classes": 10}, [(96, 96, 3)], quantisation="16x8")

# --- Keras 2 through tf-keras (TF_USE_LEGACY_KERAS=1): the fused LSTM -------------------------------------------
_add("kws_lstm_fused", "kws_lstm", TFK, "kws_rnn", "lstm_fused dense_2d softmax_last_axis",
     {"input": [49, 10], "cell": "lstm", "units": [64], "unroll": False, "classes": 12}, [(49, 10)])
_add("kws_lstm_stacked_fused_49x40", "kws_lstm", TFK, "kws_rnn", "lstm_fused dense_2d softmax_last_axis",
     {"input": [49, 40], "cell": "lstm", "units": [48, 48], "unroll": False, "classes": 12}, [(49, 40)])
_add("kws_dscnn_s_tfkeras", "kws_cnn", TFK, "kws_dscnn", KWS,
     {"input": [49, 10, 1], "width": 64, "blocks": 4, "classes": 12}, [(49, 10, 1)])

# --- PyTorch: torch.onnx.export, then onnx2tf -oiqt (int8 full-integer quantisation) ----------------------------
_add("pt_kws_cnn", "kws_cnn", O2T, "kws_cnn",
     "conv2d_same batchnorm_folded relu max_pool flatten dense_2d softmax_last_axis",
     {"input": [1, 49, 10], "classes": 12}, [(1, 49, 10)])
_add("pt_mobilenet_v2_035_96", "mobilenet_v2", O2T, "mobilenet_v2",
     "conv2d_strided conv2d_same depthwise_conv2d batchnorm_folded relu6 add global_average_pool dense_2d",
     {"input": [3, 96, 96], "stages": [[8, 2, 2], [16, 2, 3], [24, 2, 3], [32, 1, 2]], "last": 256,
      "classes": 2}, [(3, 96, 96)])
_add("pt_espcn_x2_96", "super_resolution", O2T, "espcn", "conv2d_same prelu pixel_shuffle",
     {"input": [1, 96, 96], "scale": 2}, [(1, 96, 96)])
_add("pt_vit_tiny_64", "vit", O2T, "vit",
     "conv2d_stride8 reshape permute add layer_norm multi_head_attention dense_3d gelu softmax_last_axis "
     "dense_2d",
     {"input": [3, 64, 64], "dim": 64, "heads": 4, "depth": 2, "classes": 10}, [(3, 64, 64)])
_add("pt_kws_gru", "kws_gru", O2T, "rnn", "gru dense_2d softmax_last_axis",
     {"input": [49, 10], "cell": "gru", "units": 32, "classes": 12, "unroll": True}, [(49, 10)])
_add("pt_kws_lstm", "kws_lstm", O2T, "rnn", "lstm dense_2d softmax_last_axis",
     {"input": [49, 10], "cell": "lstm", "units": 32, "classes": 12, "unroll": True}, [(49, 10)])
_add("pt_yolov8_tiny_128", "yolo_detector", O2T, "yolo",
     "conv2d_strided conv2d_same batchnorm_folded silu concatenate upsample_nearest_2x max_pool add",
     {"input": [3, 128, 128], "widths": [8, 16, 32, 64], "classes": 4}, [(3, 128, 128)])
_add("pt_convnext_atto_64", "convnext", O2T, "convnext",
     "conv2d_stride4 layer_norm permute depthwise_conv2d dense_4d gelu multiply add conv2d_strided "
     "global_average_pool dense_2d",
     {"input": [3, 64, 64], "widths": [16, 32, 64], "depths": [1, 1, 2], "classes": 10}, [(3, 64, 64)])

SPECS: tuple[ModelSpec, ...] = tuple(_SPECS)

# Models a converter was seen to write differently from run to run (two runs of `export` may still agree by
# chance): TensorFlow 2.21 emits one of two graphs for Keras 3's unrolled GRU (826 or 829 operators, 2 of 6 runs)
# and unrolled LSTM (732 or 736 operators, 1 of 3 runs). Their manifest entries say reproducible: false.
NOT_REPRODUCIBLE = frozenset({"kws_gru_unrolled", "kws_lstm_unrolled"})


def by_name(names: list[str] | None = None, converter: str | None = None) -> list[ModelSpec]:
    """The specs named (all when ``names`` is empty), optionally only those of one converter."""
    wanted = set(names or [])
    unknown = wanted - {s.name for s in SPECS}
    if unknown:
        raise SystemExit(f"unknown models: {sorted(unknown)}")
    return [s for s in SPECS if (not wanted or s.name in wanted) and (converter is None or s.converter == converter)]
