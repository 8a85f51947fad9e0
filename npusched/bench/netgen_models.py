"""Generated networks (``npusched.netgen``) for a grid: checked names, and each written to a file as the tools
read models from files.

An export style is how a converter writes the same network: ``plain`` (TFLite as netgen builds it), ``keras``
(Keras's run-time shape arithmetic and input rescaling) or ``torch`` (PyTorch via ONNX: NCHW input, explicit PAD).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npusched.errors import ConfigError
from npusched.netgen import ARCHITECTURES, generate

__all__ = ["ARCHITECTURES", "STYLES", "check", "write_network"]

STYLES = ("plain", "keras", "torch")


def check(archs: Sequence[str] | None, styles: Sequence[str] = ("plain",)) -> tuple[list[str], list[str]]:
    """The architectures (every one when None or ``["all"]``) and styles, a ``ConfigError`` naming one netgen does
    not have."""
    chosen = list(ARCHITECTURES) if archs is None or list(archs) == ["all"] else list(archs)
    unknown = [a for a in chosen if a not in ARCHITECTURES] + [s for s in styles if s not in STYLES]
    if unknown:
        raise ConfigError(f"unknown architecture or export style '{unknown[0]}' (architectures: "
                          f"{', '.join(ARCHITECTURES)}; styles: {', '.join(STYLES)})")
    return chosen, list(styles)


def write_network(folder: Path, arch: str, passes: int, seed: int, style: str = "plain", **options: Any) -> Path:
    """``arch`` with about ``passes`` NPU passes, exported in ``style``, written into ``folder`` (named for its
    architecture, size, seed and style); ``options``: netgen's others (``cpu_splits``, ``int16``, ...)."""
    path = folder / (f"{arch}-{passes}-s{seed}" + ("" if style == "plain" else f"-{style}") + ".tflite")
    path.write_bytes(generate(arch, passes, seed, keras_style=style == "keras", torch_style=style == "torch",
                              **options))
    return path
