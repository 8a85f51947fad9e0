#!/usr/bin/env python3
"""Build the zoo of real converter exports in tests/data/exports (see docs/zoo.md).

The converters live in their own venvs outside the repository (they are never needed by the package or its
tests); this entry point runs in any Python 3.10+ with numpy (the project's venv for ``golden``) and starts
workers in those venvs:

    python scripts/export_zoo.py setup             # make /work/venvs/{tf,onnx2tf} with pip
    python scripts/export_zoo.py export [NAME ...] # convert (twice each: byte-reproducible?), write manifest.json
    python scripts/export_zoo.py golden [NAME ...] # Vela 5.2.0, both cores, five configurations; partition.csv
    python scripts/export_zoo.py large --out DIR   # full-size keras.applications networks, checked by SHA-256
    python scripts/export_zoo.py list              # the models, their families and layer types
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from export_zoo import registry  # noqa: E402
from export_zoo.common import (  # noqa: E402
    CONVERTER_VENV,
    EXPORTS,
    GOLDEN,
    MANIFEST,
    VENV_REQUIREMENTS,
    VENVS,
    ModelSpec,
    sha256,
    write_json,
)

# Quiet, single-threaded, deterministic converters (oneDNN's reordered float sums could move a calibration range).
WORKER_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "",
              "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
              "TF_NUM_INTEROP_THREADS": "1"}


def venv_python(venv: str, root: Path = VENVS) -> Path:
    """The interpreter of one converter venv."""
    return root / venv / "bin" / "python"


def cmd_setup(args: argparse.Namespace) -> int:
    """Create the converter venvs (Python 3.11) and install the pinned converters into them."""
    for venv, requirements in VENV_REQUIREMENTS.items():
        path = Path(args.venvs) / venv
        if not (path / "bin" / "python").exists():
            subprocess.run([args.python, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run(["nice", "-n", "10", str(path / "bin" / "pip"), "install", *requirements], check=True)
    return 0


def _run_worker(converter: str, specs: list[ModelSpec], out: Path, venvs: Path) -> None:
    """Convert ``specs`` in the converter's venv (a fresh process, so two runs share no state)."""
    env = {**os.environ, **WORKER_ENV}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if converter == "tf-keras":
        env["TF_USE_LEGACY_KERAS"] = "1"
    command = ["nice", "-n", "10", str(venv_python(CONVERTER_VENV[converter], venvs)), str(Path(__file__).resolve()),
               "worker", "--converter", converter, "--out", str(out), *[s.name for s in specs]]
    # The converters print pages of MLIR and saved-model listings: keep them in a log, show the worker's own lines.
    done = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
    (out / "worker.log").write_text(done.stdout + done.stderr)
    names = {s.name for s in specs}
    for line in done.stdout.splitlines():
        if line.split(" ", 1)[0] in names:
            print(f"  [{converter}] {line}", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"the {converter} worker failed; see {out / 'worker.log'}")


def cmd_worker(args: argparse.Namespace) -> int:
    """(Inside a converter venv) convert the named models into --out."""
    specs = registry.by_name(args.names, args.converter)
    out = Path(args.out)
    if args.converter == "onnx2tf":
        from export_zoo import onnx2tf_worker

        onnx2tf_worker.run(specs, out)
    else:
        from export_zoo import tf_worker

        tf_worker.run(specs, out)
    return 0


def _entry(spec: ModelSpec, meta: dict[str, Any], data: bytes, reproducible: bool) -> dict[str, Any]:
    """One manifest entry."""
    return {"file": spec.file, "family": spec.family, "layers": list(spec.layers), "converter": spec.converter,
            "converter_version": meta["converter_version"], "framework_version": meta["framework_version"],
            "quantisation": spec.quantisation, "settings": spec.settings, "builder": spec.builder,
            "inputs": [list(shape) for shape in spec.inputs], "seed": spec.seed, "sha256": sha256(data),
            "bytes": len(data), "reproducible": reproducible, "parameters": meta.get("parameters")}


def cmd_export(args: argparse.Namespace) -> int:
    """Convert the models (each twice, in two processes, to test byte-reproducibility) and update the manifest."""
    specs = registry.by_name(args.names, args.converter)
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"models": [], "failures": []}
    entries = {e["file"]: e for e in manifest["models"]}
    failures = {f["file"]: f for f in manifest.get("failures", [])}
    versions: dict[str, Any] = manifest.get("versions", {})
    EXPORTS.mkdir(parents=True, exist_ok=True)
    for converter in sorted({s.converter for s in specs}):
        group = [s for s in specs if s.converter == converter]
        runs = [Path(tempfile.mkdtemp(prefix=f"zoo_{converter}_{i}_")) for i in range(1 if args.once else 2)]
        for out in runs:
            _run_worker(converter, group, out, Path(args.venvs))
        for spec in group:
            meta = json.loads((runs[0] / f"{spec.name}.json").read_text())
            versions[converter] = {"converter_version": meta["converter_version"],
                                   "framework_version": meta["framework_version"]}
            previous = entries.pop(spec.file, {})
            failures.pop(spec.file, None)
            if "error" in meta:
                failures[spec.file] = {"file": spec.file, "family": spec.family, "converter": converter,
                                       "layers": list(spec.layers), "error": meta["error"]}
                (EXPORTS / spec.file).unlink(missing_ok=True)
                continue
            first = runs[0] / spec.file
            same = all((r / spec.file).exists() and filecmp.cmp(first, r / spec.file, shallow=False) for r in runs)
            # With --once the verdict of the last two-run export stands (False when there was none).
            reproducible = same if len(runs) > 1 else bool(previous.get("reproducible", False))
            reproducible = reproducible and spec.name not in registry.NOT_REPRODUCIBLE
            shutil.copyfile(first, EXPORTS / spec.file)
            entries[spec.file] = _entry(spec, meta, first.read_bytes(), reproducible)
            print(f"{spec.file}: {first.stat().st_size} bytes, reproducible={reproducible}")
        for out in runs:
            shutil.rmtree(out, ignore_errors=True)
    order = {s.file: i for i, s in enumerate(registry.SPECS)}
    versions["python"] = platform.python_version()
    versions["vela"] = "5.2.0"
    manifest = {"versions": versions,
                "models": sorted((e for e in entries.values() if e["file"] in order), key=lambda e: order[e["file"]]),
                "failures": sorted((f for f in failures.values() if f["file"] in order),
                                   key=lambda f: order[f["file"]])}
    write_json(MANIFEST, manifest)
    return 0


def cmd_golden(args: argparse.Namespace) -> int:
    """Vela's golden output for the committed zoo (needs the project's venv: vela, ai_edge_litert)."""
    from export_zoo import golden

    manifest = json.loads(MANIFEST.read_text())
    files = [e["file"] for e in manifest["models"]]
    wanted = [f for f in files if not args.names or Path(f).stem in args.names]
    golden.run([EXPORTS / f for f in wanted])
    golden.prune({Path(f).stem for f in files}, GOLDEN)
    return 0


def cmd_large(args: argparse.Namespace) -> int:
    """Full-size networks: re-run this command in the tf venv unless TensorFlow is importable here."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        env = {**os.environ, **WORKER_ENV}
        env.pop("TF_USE_LEGACY_KERAS", None)
        command = ["nice", "-n", "10", str(venv_python("tf", Path(args.venvs))), *sys.argv]
        return subprocess.run(command, env=env, check=False).returncode
    from export_zoo import large

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return 1 if large.run(args.names, out, args.record) else 0


def cmd_list(args: argparse.Namespace) -> int:
    """Print the registry."""
    for spec in registry.SPECS:
        print(f"{spec.file:40s} {spec.family:18s} {spec.converter:10s} {spec.quantisation:5s} {' '.join(spec.layers)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the sub-command and run it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venvs", default=str(VENVS), help="where the converter venvs are (default %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup", help="create the converter venvs")
    p.add_argument("--python", default="python3", help="the Python 3.11 that makes the venvs")
    p.set_defaults(func=cmd_setup)
    p = sub.add_parser("export", help="convert the zoo and write manifest.json")
    p.add_argument("names", nargs="*")
    p.add_argument("--converter", choices=sorted(CONVERTER_VENV))
    p.add_argument("--once", action="store_true", help="convert once (no reproducibility check)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("worker", help=argparse.SUPPRESS)
    p.add_argument("names", nargs="*")
    p.add_argument("--converter", required=True, choices=sorted(CONVERTER_VENV))
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_worker)
    p = sub.add_parser("golden", help="Vela's output for the zoo")
    p.add_argument("names", nargs="*")
    p.set_defaults(func=cmd_golden)
    p = sub.add_parser("large", help="full-size networks, checked against large_manifest.json")
    p.add_argument("names", nargs="*")
    p.add_argument("--out", required=True)
    p.add_argument("--record", action="store_true", help="write the SHA-256s instead of checking them")
    p.set_defaults(func=cmd_large)
    p = sub.add_parser("list", help="the models")
    p.set_defaults(func=cmd_list)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
