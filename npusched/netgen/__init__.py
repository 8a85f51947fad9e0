"""Seeded generator of realistic int8 TFLite networks, for testing npusched against Vela on unseen graphs.

``generate(arch, passes, seed)`` returns the bytes of a .tflite file with roughly ``passes`` NPU passes; the same
arguments always give the same bytes. ``ARCHITECTURES`` lists the names.
"""

from __future__ import annotations

import zlib

import numpy as np

from npusched.errors import NpuschedError
from npusched.netgen.architectures import ARCHITECTURES, SPLIT_BY_DEFAULT, sizing
from npusched.netgen.flatbuffer import serialise
from npusched.netgen.graph import GraphBuilder

__all__ = ["ARCHITECTURES", "SPLIT_BY_DEFAULT", "MAX_PASSES", "GenerationError", "generate"]

MAX_PASSES = 20_000


class GenerationError(NpuschedError):
    """The generator was asked for something it cannot make (unknown architecture, size out of range)."""


def generate(arch: str, passes: int, seed: int, cpu_splits: int | None = None, keras_style: bool = False,
             segmentation: bool = False, torch_style: bool = False, int16: bool = False) -> bytes:
    """The .tflite bytes of architecture ``arch`` with about ``passes`` NPU passes.

    ``cpu_splits`` operators Vela runs on the CPU are placed between blocks (default: 2+ for "mixed", 0 for the
    others), each starting a new NPU subgraph. ``keras_style`` exports as Keras does: a dynamic batch dimension,
    reshape and transposed-convolution shapes computed at run time (SHAPE -> STRIDED_SLICE -> PACK), and image
    inputs rescaled by a MUL and an ADD; the layers and their weights are those of the plain variant.
    ``segmentation`` (unet only) ends the U-Net in a per-pixel SOFTMAX over its 4 classes, at the full input side.
    ``torch_style`` exports as PyTorch -> ONNX -> TensorFlow -> TFLite does: an NCHW input TRANSPOSEd to NHWC,
    every convolution VALID after an explicit PAD of PyTorch's symmetric padding, MEAN for global average pooling,
    a 4-D output TRANSPOSEd back to NCHW; the layers and their weights are those of the plain variant. It excludes
    ``keras_style``. ``int16`` quantises 16x8 (int16 activations, int8 weights, int64 biases), the layers and their
    real values those of the int8 variant.
    """
    if arch not in ARCHITECTURES:
        raise GenerationError(f"unknown architecture '{arch}' (known: {', '.join(ARCHITECTURES)})")
    if not 1 <= passes <= MAX_PASSES:
        raise GenerationError(f"passes must be between 1 and {MAX_PASSES}, not {passes}")
    if seed < 0:
        raise GenerationError(f"seed must be 0 or more, not {seed}")
    if cpu_splits is not None and cpu_splits < 0:
        raise GenerationError(f"cpu splits must be 0 or more, not {cpu_splits}")
    if keras_style and torch_style:
        raise GenerationError("keras style and torch style exclude each other: choose one")
    if segmentation and arch != "unet":
        raise GenerationError(f"a segmentation head is a unet option, not one of '{arch}'")
    # The architecture's name is part of the seed so that two architectures with one seed draw different numbers.
    rng = np.random.default_rng([seed, zlib.crc32(arch.encode()), passes])
    g = GraphBuilder(rng, keras_style, torch_style, int16)
    output = g.output(ARCHITECTURES[arch](g, sizing(arch, passes, cpu_splits, segmentation)))
    style = " keras-style" * keras_style + " torch-style" * torch_style + " segmentation" * segmentation \
        + " 16x8" * int16
    return serialise(g.network([output], f"npusched.netgen {arch} passes={passes} seed={seed}{style}"))
