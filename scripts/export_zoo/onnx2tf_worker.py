"""The PyTorch worker: ``torch.onnx.export`` of a seeded module, then onnx2tf's int8 full-integer quantisation.

Runs inside the ``onnx2tf`` venv (torch 2.13, onnx2tf 1.29 with the TensorFlow 2.19 it pins). This is the path
Ultralytics' TFLite export takes (``onnx2tf -oiqt`` with calibration data); litert-torch was tried first but its
PT2E quantiser leaves float operators between QUANTIZE/DEQUANTIZE pairs (no int8 kernels), see docs/zoo.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from export_zoo.common import CALIBRATION_SAMPLES, ModelSpec

# onnx2tf checks its conversion on 20 sample images it downloads when a model has one 3-channel image input; this
# machine reaches no such host, so a seeded stand-in of the same name and shape is left where onnx2tf looks for it.
_SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"


def _versions() -> tuple[str, str]:
    """(onnx2tf version, framework versions)."""
    import onnx
    import onnx2tf
    import tensorflow as tf
    import torch

    return onnx2tf.__version__, f"torch {torch.__version__}, onnx {onnx.__version__}, tensorflow {tf.__version__}"


def _tf_layout(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The input's shape once onnx2tf has made it channels-last (a 4-D NCHW image becomes NHWC; a 3-D
    sequence input is kept as it is, with -kat)."""
    return (*shape[1:], shape[0]) if len(shape) == 3 else shape


def export(spec: ModelSpec, work: Path, meta: dict[str, Any]) -> Path:
    """Export the seeded module to ONNX and convert it; returns the quantised .tflite onnx2tf wrote (and puts the
    module's parameter count in ``meta``)."""
    import torch

    from export_zoo import torch_nets

    torch.manual_seed(spec.seed)
    module = torch_nets.build(spec.builder, spec.settings)
    meta["parameters"] = sum(int(p.numel()) for p in module.parameters())
    args = tuple(torch.zeros((1, *shape)) for shape in spec.inputs)
    names = [f"input_{i}" for i in range(len(spec.inputs))]
    onnx_path = work / f"{spec.name}.onnx"
    with torch.no_grad():
        torch.onnx.export(module, args, str(onnx_path), input_names=names, opset_version=17, dynamo=False)
    rng = np.random.default_rng(spec.seed)
    np.save(work / _SAMPLE_FILE, rng.random((20, 128, 128, 3), dtype=np.float32))
    command = [str(Path(sys.executable).parent / "onnx2tf"), "-i", str(onnx_path), "-o", str(work / "out"), "-oiqt",
               "-n"]
    for name, shape in zip(names, spec.inputs, strict=True):
        layout = _tf_layout(shape)
        data = rng.standard_normal((CALIBRATION_SAMPLES, *layout)).astype(np.float32)
        np.save(work / f"{name}.npy", data)
        command += ["-cind", name, str(work / f"{name}.npy"), "0.0", "1.0"]
        if len(shape) == 2:
            command += ["-kat", name]
    if spec.settings.get("unroll"):
        command.append("-eru")  # without it the int8 quantiser crashes (SIGSEGV) on the while loop of GRU/LSTM
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    (work / "onnx2tf.log").write_text(done.stdout + done.stderr)
    suffix = "full_integer_quant_with_int16_act" if spec.quantisation == "16x8" else "full_integer_quant"
    result = work / "out" / f"{spec.name}_{suffix}.tflite"
    if done.returncode != 0 or not result.exists():
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise RuntimeError(f"onnx2tf exit {done.returncode}: {' | '.join(lines[-3:])[:400]}")
    return result


def run(specs: list[ModelSpec], out: Path) -> None:
    """Convert every spec into ``out/<name>.tflite`` with its metadata (versions, or the error) beside it."""
    converter_version, framework_version = _versions()
    for spec in specs:
        meta: dict[str, Any] = {"converter_version": converter_version, "framework_version": framework_version}
        work = Path(tempfile.mkdtemp(prefix=f"zoo_{spec.name}_"))
        try:
            shutil.copyfile(export(spec, work, meta), out / spec.file)
        except Exception as error:  # a failed conversion is a result the report lists
            meta["error"] = f"{type(error).__name__}: {str(error)[:400]}"
        finally:
            if "error" not in meta:
                shutil.rmtree(work, ignore_errors=True)
            else:
                meta["work_dir"] = str(work)
        (out / f"{spec.name}.json").write_text(json.dumps(meta, indent=1))
        print(spec.name, meta.get("error", "ok"), flush=True)
