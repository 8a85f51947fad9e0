"""Paths, the model specification and the helpers every process (entry point, workers) shares.

Nothing here imports a converter: the entry point runs in the project's venv, the workers in the converters'.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EXPORTS = REPO / "tests" / "data" / "exports"
MANIFEST = EXPORTS / "manifest.json"
LARGE_MANIFEST = EXPORTS / "large_manifest.json"
GOLDEN = EXPORTS / "golden"
GOLDEN_CONFIGS = REPO / "tests" / "data" / "golden" / "configs.json"
VENVS = Path("/work/venvs")

# Calibration: how many seeded samples each representative dataset has (TFLite's converter and onnx2tf alike).
CALIBRATION_SAMPLES = 32

# Every converter's venv: its directory name under VENVS and the pip requirements that make it. The pins are the
# versions the committed zoo was made with; onnx2tf pins its own dependencies exactly (TensorFlow 2.19 among them).
VENV_REQUIREMENTS: dict[str, list[str]] = {
    "tf": ["tensorflow-cpu==2.21.0", "tf-keras==2.21.0"],
    "onnx2tf": ["torch==2.13.0", "onnx2tf==1.29.24", "onnxscript==0.7.2"],
}
# Which venv each converter runs in.
CONVERTER_VENV = {"tensorflow": "tf", "tf-keras": "tf", "onnx2tf": "onnx2tf"}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One zoo model: what it is (family, layer types, settings) and how it is made (converter, builder, seed)."""

    name: str
    family: str
    converter: str
    builder: str
    layers: tuple[str, ...]
    settings: dict[str, Any]
    inputs: tuple[tuple[int, ...], ...]
    seed: int
    quantisation: str = "int8"

    @property
    def file(self) -> str:
        """The committed file's name."""
        return f"{self.name}.tflite"


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def representative_samples(shapes: tuple[tuple[int, ...], ...], seed: int,
                           count: int = CALIBRATION_SAMPLES) -> list[list[np.ndarray]]:
    """Seeded calibration samples (batch 1, standard normal) for every input, the same in every converter."""
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((1, *shape)).astype(np.float32) for shape in shapes] for _ in range(count)]


def write_json(path: Path, data: Any) -> None:
    """JSON with sorted keys and a final newline, so a regenerated file diffs cleanly."""
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def gzip_bytes(data: bytes) -> bytes:
    """gzip without a timestamp or file name, so regenerating golden output gives identical bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)
