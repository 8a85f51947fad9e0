"""Full-size keras.applications networks, int8, regenerated from seeds and checked against recorded SHA-256s.

Too large to commit (1-25 MB each); ``export_zoo.py large --out DIR`` rebuilds them in the ``tf`` venv and
compares each with ``tests/data/exports/large_manifest.json`` (``--record`` writes that file instead).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from export_zoo.common import LARGE_MANIFEST, sha256, write_json

# name: (keras.applications constructor, input shape, keyword arguments); 1000 classes, random weights.
LARGE: dict[str, tuple[str, tuple[int, int, int], dict[str, Any]]] = {
    "nasnet_mobile_224": ("NASNetMobile", (224, 224, 3), {}),
    "resnet50_96": ("ResNet50", (96, 96, 3), {}),
    "mobilenet_v2_100_224": ("MobileNetV2", (224, 224, 3), {"alpha": 1.0}),
    "efficientnet_b0_224": ("EfficientNetB0", (224, 224, 3), {}),
    "densenet121_128": ("DenseNet121", (128, 128, 3), {}),
    "mobilenet_v3_small_224": ("MobileNetV3Small", (224, 224, 3), {}),
    "mobilenet_v3_large_224": ("MobileNetV3Large", (224, 224, 3), {}),
}
SEED = 7


def run(names: list[str], out: Path, record: bool) -> int:
    """Convert the named networks (all by default) into ``out``; returns the number that do not match the
    recorded SHA-256 (0 when recording)."""
    import keras
    import tensorflow as tf

    from export_zoo.tf_worker import convert_keras

    recorded = json.loads(LARGE_MANIFEST.read_text()) if LARGE_MANIFEST.exists() else {"models": {}}
    mismatches = 0
    for name in names or list(LARGE):
        constructor, shape, kwargs = LARGE[name]
        start = time.monotonic()
        keras.backend.clear_session()
        keras.utils.set_random_seed(SEED)
        model = getattr(keras.applications, constructor)(input_shape=shape, weights=None, **kwargs)
        data = convert_keras(model, (shape,), SEED, "int8")
        seconds = round(time.monotonic() - start, 1)
        (out / f"{name}.tflite").write_bytes(data)
        entry = {"constructor": f"keras.applications.{constructor}", "input": list(shape), "kwargs": kwargs,
                 "seed": SEED, "sha256": sha256(data), "bytes": len(data), "parameters": int(model.count_params()),
                 "seconds": seconds}
        if record:
            recorded["models"][name] = entry
            recorded["versions"] = {"tensorflow": tf.__version__, "keras": keras.__version__}
            write_json(LARGE_MANIFEST, recorded)
            status = "recorded"
        else:
            expected = recorded["models"].get(name, {}).get("sha256")
            status = "match" if expected == entry["sha256"] else f"MISMATCH (recorded {expected})"
            mismatches += status != "match"
        print(f"{name}: {len(data)} bytes, {seconds} s, {status}", flush=True)
    return mismatches
