"""The TensorFlow worker: builds Keras models and converts them with ``tf.lite.TFLiteConverter``.

Runs inside the ``tf`` venv (TensorFlow 2.21). With ``TF_USE_LEGACY_KERAS=1`` in the environment (set by the
entry point for the ``tf-keras`` converter) ``tf.keras`` is Keras 2 from the tf-keras package, whose LSTM the
converter fuses into UNIDIRECTIONAL_SEQUENCE_LSTM; otherwise the builders get Keras 3.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from export_zoo import keras_nets, keras_units
from export_zoo.common import ModelSpec, representative_samples


def _keras() -> tuple[Any, Any, str, str]:
    """(keras module, tf, converter version, framework version) for this process's converter."""
    import tensorflow as tf

    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        import tf_keras

        return tf_keras, tf, tf.__version__, f"tf-keras {tf_keras.__version__}"
    import keras

    return keras, tf, tf.__version__, f"keras {keras.__version__}"


def _randomise_batchnorm(k: Any, model: Any, seed: int) -> None:
    """Give every BatchNormalization seeded, non-trivial statistics: fresh ones are near-identity, which a
    converter could fold away and which tells a scheduler nothing about real scales."""
    rng = np.random.default_rng(seed + 7919)
    stack = [model]
    while stack:
        layer = stack.pop()
        if hasattr(layer, "layers"):
            stack.extend(layer.layers)
        if isinstance(layer, k.layers.BatchNormalization):
            gamma, beta, mean, var = (w.shape for w in layer.get_weights())
            layer.set_weights([rng.uniform(0.5, 1.5, gamma).astype(np.float32),
                               rng.uniform(-0.2, 0.2, beta).astype(np.float32),
                               rng.uniform(-0.2, 0.2, mean).astype(np.float32),
                               rng.uniform(0.5, 1.5, var).astype(np.float32)])


def build(spec: ModelSpec) -> Any:
    """The seeded Keras model of ``spec`` (names reset first, so two builds in one process agree)."""
    k, tf, _, _ = _keras()
    k.backend.clear_session()
    k.utils.set_random_seed(spec.seed)
    builder = getattr(keras_nets, spec.builder, None) or getattr(keras_units, spec.builder)
    model = builder(k, tf, spec.settings)
    _randomise_batchnorm(k, model, spec.seed)
    return model


def convert_keras(model: Any, shapes: tuple[tuple[int, ...], ...], seed: int, quantisation: str) -> bytes:
    """Full-integer conversion as Ethos-U users do it: int8 (or 16x8) operators and int8/int16 inputs and
    outputs, calibrated on the seeded representative dataset."""
    _, tf, _, _ = _keras()
    samples = representative_samples(shapes, seed)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if len(shapes) > 1:
        # By name: the converter's signature orders several inputs its own way, not as model.inputs does.
        names = [tensor.name for tensor in model.inputs]
        converter.representative_dataset = lambda: iter([dict(zip(names, s, strict=True)) for s in samples])
    else:
        converter.representative_dataset = lambda: iter(samples)
    if quantisation == "16x8":
        ops = tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
        converter.target_spec.supported_ops = [ops]
        converter.inference_input_type = converter.inference_output_type = tf.int16
    else:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.int8
    return bytes(converter.convert())


def error_summary(error: Exception) -> str:
    """The converter's own reason: its first line that says 'error' (TensorFlow's messages are MLIR dumps)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if "error" in line.lower()] or lines[-1:]
    return f"{type(error).__name__}: {said[0][:400] if said else ''}"


def run(specs: list[ModelSpec], out: Path) -> None:
    """Convert every spec into ``out/<name>.tflite`` with its metadata (versions, or the error) beside it."""
    _, _, converter_version, framework_version = _keras()
    for spec in specs:
        meta: dict[str, Any] = {"converter_version": converter_version, "framework_version": framework_version}
        try:
            model = build(spec)
            meta["parameters"] = int(model.count_params())
            (out / spec.file).write_bytes(convert_keras(model, spec.inputs, spec.seed, spec.quantisation))
        except Exception as error:  # a failed conversion is a result the report lists
            meta["error"] = error_summary(error)
        (out / f"{spec.name}.json").write_text(json.dumps(meta, indent=1))
        print(spec.name, meta.get("error", "ok"), flush=True)
