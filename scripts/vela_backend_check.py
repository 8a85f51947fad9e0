#!/usr/bin/env python3
"""Compile npusched's schedules with Vela's backend over the corpus and check what Vela says about them.

    python scripts/vela_backend_check.py [--models a,b] [--configs c1,c2] [--solvers heuristic,cpsat]
        [--time-limit 10] [--estimator vela-legacy] [--netgen [ARCH,...]] [--passes 40] [--torch-style]
        [--keep-refused DIR] [--markdown out.md]

For every corpus model x golden configuration x solver: the schedule is compiled by Vela 5.2.0's legacy backend
(``solve-schedule --output-dir``); Vela's own per-op estimate is compared with the evaluator's (agreement within
0.01%, op by op and in total), and Vela's allocation of the fast storage with the limit; for the heuristic the
``_vela.tflite`` is compared with the one Vela's legacy core writes on its own (``vela --debug-force-legacy-core``,
taught BATCH_MATMUL and GELU as the bridge teaches them: ``python -m npusched.vela.taught_vela``; tensors and
metadata as sets, operators in order). CP-SAT runs with ``--deterministic`` and one worker. Prints a Markdown table
(the one in docs/results/backend.md). ``--netgen`` checks generated Keras-style networks (``npusched.netgen``, seed 1,
``--passes`` 40; PyTorch-style ones with ``--torch-style``; each named ARCH-PASSES-s1-STYLE) instead of the corpus, each
normalised first so that plain Vela compiles the model the heuristic schedules.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from npusched import solve_options
from npusched.app.pipeline import scheduled_model_bytes
from npusched.app.replay import compile_as_deployed
from npusched.bench import cli, golden, netgen_models, paths, table
from npusched.errors import NpuschedError, exit_status
from npusched.io.report_json import write_json
from npusched.vela.backend import compile_schedule, tflite_contents
from npusched.vela.command import VelaError, last_line, run_vela


def plain_vela(model: Path, config: golden.Config, output_dir: Path) -> Path:
    """Vela's own compilation of ``model`` (legacy core, taught BATCH_MATMUL and GELU as the bridge teaches it)."""
    done = run_vela(golden.run_options_from_vela_args(model, config), output_dir, core="taught", cwd=output_dir)
    if done.returncode != 0:
        raise VelaError(f"Vela's legacy core failed on {model.name}: {last_line(done)}")
    return output_dir / f"{model.stem}_vela.tflite"


def check_cell(model: Path, config_name: str, config: golden.Config, solver: str, time_limit: float, work: Path,
               keep: Path | None = None, estimator: str = "vela-legacy") -> dict[str, Any]:
    """One model x configuration x solver: compile, compare estimates, and (heuristic) compare with Vela's file.
    A schedule Vela refuses is saved as a document into ``keep`` (replay it with solve-schedule --schedule)."""
    row: dict[str, Any] = {"model": model.stem, "config": config_name, "solver": solver}
    options = golden.run_options_from_vela_args(model, config, solver=solver, time_limit_seconds=time_limit,
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
               disagreeing=sum(not op.agrees for op in compiled.ops), ops=len(compiled.ops),
               allocation_fits=compiled.allocation_fits, vela_allocation=compiled.vela_allocation_bytes)
    if solver == "heuristic":
        plain = work / "plain"
        plain.mkdir()
        row["same_tflite"] = tflite_contents(plain_vela(model, config, plain)) == tflite_contents(compiled.tflite_path)
    return row


def _cell(column: str, value: Any) -> str:
    if column in ("npusched", "vela") and isinstance(value, float):
        return f"{value:,.0f}"
    return "" if value is None else str(value)


def markdown(rows: list[dict[str, Any]]) -> str:
    shown = []
    for r in rows:
        if "error" in r:
            shown.append({**r, "agrees": f"error: {r['error']}"})
            continue
        agrees = "yes" if r["agreed"] else f"no ({r['disagreeing']} of {r['ops']} ops differ)"
        fits = "" if r["allocation_fits"] else f"; allocation {r['vela_allocation']} bytes over the limit"
        same = "" if r.get("same_tflite") is None else "yes" if r["same_tflite"] else "**no**"
        shown.append({**r, "agrees": agrees + fits, "same": same})
    written = sum("error" not in r for r in rows)
    agreed = sum(bool(r.get("agreed")) for r in rows)
    heuristic = [r for r in rows if "same_tflite" in r]
    return "\n".join([table.markdown(shown, ["model", "config", "solver", "npusched", "vela", "agrees", "same"],
                                     ["model", "config", "solver", "npusched cycles", "Vela's estimate",
                                      "agrees (ops)", ".tflite = Vela's"], cell=_cell, align="lllrrll"), "",
                      f"{written} of {len(rows)} cells compiled; Vela's estimate agrees with npusched's in {agreed}; "
                      f"the heuristic's .tflite equals Vela's in {sum(r['same_tflite'] for r in heuristic)} of "
                      f"{len(heuristic)}."])


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--models", help="comma-separated corpus models (default: all)")
    cli.add_configs(parser)
    parser.add_argument("--solvers", default="heuristic,cpsat", help="comma-separated (default: heuristic,cpsat)")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--keep-refused", type=Path, help="save the schedules Vela refuses here (JSON documents)")
    parser.add_argument("--estimator", default="vela-legacy", help="as solve-schedule's (default: vela-legacy)")
    parser.add_argument("--netgen", nargs="?", const="", metavar="ARCH,...",
                        help="generated networks of these architectures (none named: all) instead of the corpus")
    parser.add_argument("--passes", type=int, default=40, help="with --netgen: their size (default: 40)")
    parser.add_argument("--torch-style", action="store_true",
                        help="with --netgen: PyTorch-style exports (NCHW input, explicit PAD) instead of Keras-style")
    args = parser.parse_args()
    configs = golden.load_configs()
    names = golden.select(configs, paths.split_names(args.configs))
    rows = []
    with tempfile.TemporaryDirectory() as generated:
        if args.netgen is None:
            models = paths.corpus_models(paths.split_names(args.models))
        else:
            archs, _ = netgen_models.check(paths.split_names(args.netgen) or None)
            style = "torch" if args.torch_style else "keras"
            models = [netgen_models.write_network(Path(generated), arch, args.passes, 1, style) for arch in archs]
            for model in models:
                # Vela's graph (the heuristic's): each cell's own run then stages inputs where its solver does.
                model.write_bytes(scheduled_model_bytes(golden.run_options_from_vela_args(
                    model, configs[names[0]], solver="heuristic")))
        for model in models:
            for name in names:
                for solver in args.solvers.split(","):
                    with tempfile.TemporaryDirectory() as work:
                        row = check_cell(model, name, configs[name], solver, args.time_limit, Path(work),
                                         args.keep_refused, args.estimator)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    text = markdown(rows)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status(main))
