"""Compile npusched's schedules with Vela's backend over the corpus and check what Vela says about them.

    python scripts/vela_backend_check.py [--models NAME ...] [--configs NAME ...] [--solvers heuristic cpsat]
        [--time-limit 10] [--estimator vela-legacy] [--netgen [ARCH ...]] [--torch-style] [--markdown out.md]

For every corpus model x golden configuration x solver: the schedule is compiled by Vela 5.2.0's legacy backend
(``solve-schedule --output-dir``); Vela's own per-op estimate is compared with the evaluator's (agreement within
0.01%, op by op and in total); for the heuristic the ``_vela.tflite`` is compared with the one Vela's legacy core
writes on its own (``vela --debug-force-legacy-core``, taught BATCH_MATMUL and GELU as the bridge teaches them:
``python -m npusched.vela.taught_vela``; tensors and metadata as sets, operators in order). CP-SAT runs with
``--deterministic`` and one worker. Prints a Markdown table (the one in docs/results.md). ``--netgen`` checks
generated Keras-style networks (``npusched.netgen``, seed 1, ``--passes`` 40; PyTorch-style ones, named ARCH_torch,
with ``--torch-style``) instead of the corpus, each normalised first so that plain Vela compiles the model the
heuristic schedules.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched import solve_options  # noqa: E402
from npusched.app.pipeline import scheduled_model_bytes  # noqa: E402
from npusched.app.replay import compile_as_deployed  # noqa: E402
from npusched.errors import NpuschedError  # noqa: E402
from npusched.io.report_json import write_json  # noqa: E402
from npusched.netgen import ARCHITECTURES, generate  # noqa: E402
from npusched.vela.backend import compile_schedule, tflite_contents  # noqa: E402
from npusched.vela.command import VelaError, last_line, run_options_from_vela_args, run_vela  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "corpus"
CONFIGS = json.loads((REPO / "tests" / "data" / "golden" / "configs.json").read_text())


def plain_vela(model: Path, config: dict, output_dir: Path) -> Path:
    """Vela's own compilation of ``model`` (legacy core, taught BATCH_MATMUL and GELU as the bridge teaches it)."""
    done = run_vela(run_options_from_vela_args(model, config), output_dir, core="taught", cwd=output_dir)
    if done.returncode != 0:
        raise VelaError(f"Vela's legacy core failed on {model.name}: {last_line(done)}")
    return output_dir / f"{model.stem}_vela.tflite"


def check_cell(model: Path, config_name: str, solver: str, time_limit: float, work: Path,
               keep: Path | None = None, estimator: str = "vela-legacy") -> dict:
    """One model x configuration x solver: compile, compare estimates, and (heuristic) compare with Vela's file.
    A schedule Vela refuses is saved as a document into ``keep`` (replay it with solve-schedule --schedule)."""
    row = {"model": model.stem, "config": config_name, "solver": solver}
    options = run_options_from_vela_args(model, CONFIGS[config_name], solver=solver, time_limit_seconds=time_limit,
                                         deterministic=True, workers=1, estimator=estimator)
    started = time.monotonic()
    try:
        result = solve_options(options).run
    except NpuschedError as exc:
        return {**row, "error": str(exc)}
    try:
        compiled = compile_as_deployed(result, lambda run: compile_schedule(run, work / solver))
    except NpuschedError as exc:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            write_json(result, keep / f"{model.stem}_{config_name}_{solver}.json")
        return {**row, "error": str(exc)}
    row.update(seconds=time.monotonic() - started, npusched=compiled.npusched_total_cycles,
               vela=compiled.vela_total_cycles, agreed=compiled.agreed,
               disagreeing=sum(not op.agrees for op in compiled.ops), ops=len(compiled.ops))
    if solver == "heuristic":
        plain = work / "plain"
        plain.mkdir()
        row["same_tflite"] = tflite_contents(plain_vela(model, CONFIGS[config_name], plain)) == tflite_contents(
            compiled.tflite_path)
    return row


def markdown(rows: list[dict]) -> str:
    lines = ["| model | config | solver | npusched cycles | Vela's estimate | agrees (ops) | .tflite = Vela's |",
             "|---|---|---|---:|---:|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['config']} | {r['solver']} | | | error: {r['error']} | |")
            continue
        agrees = "yes" if r["agreed"] else f"no ({r['disagreeing']} of {r['ops']} ops differ)"
        same = {True: "yes", False: "**no**"}.get(r.get("same_tflite"), "")
        lines.append(f"| {r['model']} | {r['config']} | {r['solver']} | {r['npusched']:,.0f} | {r['vela']:,.0f} | "
                     f"{agrees} | {same} |")
    written = sum("error" not in r for r in rows)
    agreed = sum(bool(r.get("agreed")) for r in rows)
    heuristic = [r for r in rows if "same_tflite" in r]
    lines.append("")
    lines.append(f"{written} of {len(rows)} cells compiled; Vela's estimate agrees with npusched's in {agreed}; "
                 f"the heuristic's .tflite equals Vela's in {sum(r['same_tflite'] for r in heuristic)} of "
                 f"{len(heuristic)}.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=sorted(p.stem for p in CORPUS.glob("*.tflite")))
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument("--solvers", nargs="*", default=["heuristic", "cpsat"])
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--keep-refused", type=Path, help="save the schedules Vela refuses here (JSON documents)")
    parser.add_argument("--estimator", default="vela-legacy", help="as solve-schedule's (default: vela-legacy)")
    parser.add_argument("--netgen", nargs="*", metavar="ARCH",
                        help="generated networks of these architectures (none named: all) instead of the corpus")
    parser.add_argument("--passes", type=int, default=40, help="with --netgen: their size (default: 40)")
    parser.add_argument("--torch-style", action="store_true",
                        help="with --netgen: PyTorch-style exports (NCHW input, explicit PAD) instead of Keras-style")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as generated:
        models = [CORPUS / f"{model}.tflite" for model in args.models]
        if args.netgen is not None:
            suffix = "_torch" * args.torch_style
            archs = args.netgen or list(ARCHITECTURES)
            models = [Path(generated) / f"{arch}{suffix}.tflite" for arch in archs]
            for arch, model in zip(archs, models, strict=True):
                model.write_bytes(generate(arch, args.passes, 1, keras_style=not args.torch_style,
                                           torch_style=args.torch_style))
                # Vela's graph (the heuristic's): each cell's own run then stages inputs where its solver does.
                model.write_bytes(scheduled_model_bytes(run_options_from_vela_args(model, CONFIGS[args.configs[0]],
                                                                                   solver="heuristic")))
        for model in models:
            for config in args.configs:
                for solver in args.solvers:
                    with tempfile.TemporaryDirectory() as work:
                        row = check_cell(model, config, solver, args.time_limit, Path(work), args.keep_refused,
                                         args.estimator)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    table = markdown(rows)
    print(table)
    if args.markdown is not None:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
