"""Measure the phases a CP-SAT run plans (``npusched.app.time_plan``) and fit their rates.

    python scripts/bench/time_plan.py measure [--models DIR_OR_FILES ...] [--netgen ARCH:PASSES ...]
                                              [--configs NAMES] [--csv phases.csv] [--cli-from CSV]
    python scripts/bench/time_plan.py fit phases.csv

``measure`` runs each phase of a run on each model x configuration and records its CPU time (this process's, and
its children's for the `vela` CLI), which a busy machine does not inflate as it inflates wall time: reading,
lowering npusched's graph and Vela's, Vela legacy's own schedule (the heuristic), the default core's CLI (or its
figure from an earlier measurement, ``--cli-from``), an evaluation (the mean of a floor's: under each single model,
then the objective's blend) and the any-schedule bound, with the network's operators, passes, weight bytes and OFM
elements.
``fit`` fits each phase as a line through the median network, then scales them all by one factor so that a run's
phases together are predicted no shorter than they take for nine networks in ten (covering each phase apart adds
up nine-in-ten margins), and prints the ``PhaseRates`` it makes. The data the rates were fitted to:
docs/results/data/time_plan_phases.csv.
"""

from __future__ import annotations

import argparse
import csv
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from npusched.app.pipeline import load
from npusched.bench.golden import load_configs, run_options_from_vela_args
from npusched.bench.netgen_models import write_network
from npusched.bench.paths import corpus_models
from npusched.frontend.recipe import GraphRecipe
from npusched.lowering.build import build_graph
from npusched.schedule.evaluator import evaluate
from npusched.solvers.cpsat import NetworkFacts
from npusched.solvers.cpsat.any_schedule_bound import any_schedule_bound
from npusched.solvers.heuristic import heuristic_schedule
from npusched.sweep.grid import find_models
from npusched.target.estimators import Estimator, blended, with_estimator
from npusched.vela.command import VelaError
from npusched.vela.default_core import run_default_core

COLUMNS = ("model", "config", "operators", "passes", "weight_bytes", "ofm_megaelements", "read", "lower_own",
           "lower_vela", "heuristic", "default_core", "evaluation", "any_schedule_bound")


def cpu_seconds(step: Callable[[], Any]) -> tuple[Any, float]:
    """What ``step`` returns, and the CPU time it took (this process's and its children's)."""
    before_self, before_children = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    answer = step()
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = (after_children.ru_utime + after_children.ru_stime) - (before_children.ru_utime
                                                                       + before_children.ru_stime)
    return answer, time.process_time() - before_self + children


def measure(model: Path, config_name: str, config: dict[str, Any],
            known_cli_seconds: dict[tuple[str, str], float]) -> dict[str, Any]:
    options = run_options_from_vela_args(model, config, solver="cpsat")
    loaded, read = cpu_seconds(lambda: load(options))
    own, lower_own = cpu_seconds(lambda: loaded.build())
    vela_recipe = GraphRecipe(normalise=loaded.recipe.normalise, stage_maps=loaded.recipe.stage_maps)
    vela, lower_vela = cpu_seconds(lambda: build_graph(loaded.data, loaded.source, loaded.arch, vela_recipe,
                                                       parsed=loaded.model))
    arch = loaded.arch
    schedule, heuristic = cpu_seconds(lambda: heuristic_schedule(vela.network, arch, arch.optimise))
    # A floor is evaluated under each single model, then under the objective's blend: what an evaluation costs a
    # run, the evaluator's memory and single-model prices worked out once per schedule.
    priced = [with_estimator(arch, estimator) for estimator in Estimator.single()] + [blended(arch, 0.5, 0.5)]
    _, evaluations = cpu_seconds(lambda: [evaluate(vela.network, each, schedule) for each in priced])
    evaluation = evaluations / len(priced)
    _, bound = cpu_seconds(lambda: any_schedule_bound(NetworkFacts(own.network, arch)))
    default_core = known_cli_seconds.get((model.stem, config_name))
    if default_core is None:
        with tempfile.TemporaryDirectory() as folder:
            written = Path(folder) / model.name
            written.write_bytes(vela.model_bytes)
            _, default_core = cpu_seconds(lambda: run_default_core(
                run_options_from_vela_args(written, config), Path(folder) / "output", timeout_seconds=600))
    network = own.network
    return {"model": model.stem, "config": config_name, "operators": len(network.ops),
            "passes": len(network.npu_ops),
            "weight_bytes": sum(op.weights.size_in_bytes for op in network.npu_ops if op.weights is not None),
            "ofm_megaelements": sum(op.ofm.shape.elements() for op in network.npu_ops) / 1e6,
            "read": read, "lower_own": lower_own, "lower_vela": lower_vela, "heuristic": heuristic,
            "default_core": default_core, "evaluation": evaluation, "any_schedule_bound": bound}


def models(paths: list[Path], netgen: list[str], folder: Path) -> Iterator[Path]:
    yield from find_models(tuple(paths)) if paths else ()
    for spec in netgen:
        arch, passes = spec.split(":")
        yield write_network(folder, arch, int(passes), 0)


# Each phase's features (``fixed``: a constant part too), and how often a run of both cost models on two graphs
# does it: the weights of the run's total, which the common cover is fitted to.
PHASES: dict[str, tuple[tuple[str, ...], bool, float]] = {
    "read": (("operators",), False, 1),
    "lower_own": (("passes", "weight_megabytes"), False, 1),
    "lower_vela": (("passes", "weight_megabytes"), False, 1),
    "heuristic": (("passes", "ofm_megaelements", "weight_megabytes"), False, 2),
    "evaluation": (("passes",), False, 20),
    "any_schedule_bound": (("passes", "ofm_megaelements"), True, 2),
}


def _features(row: dict[str, float], features: tuple[str, ...], fixed: bool) -> list[float]:
    """One row of a phase's design matrix: a constant first where the phase has a fixed part."""
    return [*([1.0] if fixed else []), *(row[f] for f in features)]


def _line(rows: list[dict[str, float]], phase: str, features: tuple[str, ...], fixed: bool) -> np.ndarray:
    """Coefficients of ``phase``'s seconds over ``features`` through the median network: least squares on the
    relative error (a small network counts as much as a large one), scaled so that half the networks take longer."""
    design = np.array([_features(r, features, fixed) for r in rows])
    seconds = np.array([r[phase] for r in rows])
    weight = 1 / np.maximum(seconds, 0.02)
    coefficients, *_ = np.linalg.lstsq(design * weight[:, None], seconds * weight, rcond=None)
    coefficients = np.maximum(coefficients, 0.0)
    return coefficients * float(np.median(seconds / np.maximum(design @ coefficients, 1e-9)))


def fit(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's rates (``PHASES``) through the median network, all scaled by one factor so that a run's phases
    together (their ``PHASES`` weights) are predicted no shorter than they take for nine networks in ten. The
    default core's CLI, a process beside the run stopped at twice its prediction, has a line of its own covering
    nine networks in ten."""
    for row in rows:
        row["weight_megabytes"] = row["weight_bytes"] / 1e6
    lines = {phase: _line(rows, phase, features, fixed) for phase, (features, fixed, _) in PHASES.items()}
    lines["lower_vela"] = lines["lower_own"]  # the plan has one rate for lowering either graph

    def predicted(row: dict[str, float], phase: str) -> float:
        features, fixed, _ = PHASES[phase]
        return float(np.dot(lines[phase], _features(row, features, fixed)))

    run = [sum(weight * row[phase] for phase, (_, _, weight) in PHASES.items()) for row in rows]
    planned = [sum(weight * predicted(row, phase) for phase, (_, _, weight) in PHASES.items()) for row in rows]
    cover = max(1.0, float(np.percentile(np.array(run) / np.array(planned), 90)))
    read, (lower_pass, lower_mb), (heuristic_pass, heuristic_ofm, heuristic_mb) = \
        (lines["read"] * cover)[0], lines["lower_own"] * cover, lines["heuristic"] * cover
    bound_fixed, bound_pass, bound_ofm = lines["any_schedule_bound"] * cover
    cli_features = ("passes", "weight_megabytes", "ofm_megaelements")
    cli = _line(rows, "default_core", cli_features, True)
    cli *= max(1.0, float(np.percentile([row["default_core"] / np.dot(cli, _features(row, cli_features, True))
                                         for row in rows], 90)))
    return {"read_seconds_per_operator": read, "lower_seconds_per_pass": lower_pass,
            "lower_seconds_per_weight_megabyte": lower_mb, "heuristic_seconds_per_pass": heuristic_pass,
            "heuristic_seconds_per_ofm_megaelement": heuristic_ofm,
            "heuristic_seconds_per_weight_megabyte": heuristic_mb,
            "evaluation_seconds_per_pass": (lines["evaluation"] * cover)[0],
            "bound_fixed_seconds_per_model": bound_fixed, "bound_seconds_per_pass_and_model": bound_pass,
            "bound_seconds_per_ofm_megaelement_and_model": bound_ofm, "default_core_fixed_seconds": cli[0],
            "default_core_seconds_per_pass": cli[1], "default_core_seconds_per_weight_megabyte": cli[2],
            "default_core_seconds_per_ofm_megaelement": cli[3], "cover": cover}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--models", nargs="*", type=Path, default=[], help="files or folders (default: the corpus)")
    run.add_argument("--netgen", nargs="*", default=[], metavar="ARCH:PASSES")
    run.add_argument("--configs", default="u55-128_hee_shared,u65-256_mid_dedicated256k")
    run.add_argument("--csv", type=Path, default=Path("phases.csv"))
    run.add_argument("--cli-from", type=Path, metavar="CSV",
                     help="take the default core's CLI seconds from an earlier measurement where it has the model and "
                          "configuration (Vela's time, which npusched's changes do not move) rather than run it")
    fitted = sub.add_parser("fit")
    fitted.add_argument("csv", type=Path)
    args = parser.parse_args()
    if args.action == "fit":
        rows = [{k: (float(v) if k not in ("model", "config") else v) for k, v in row.items()}
                for row in csv.DictReader(args.csv.open())]
        for name, value in fit(rows).items():
            print(f"    {name}: float = {value:.4g}")
        return 0
    configs = load_configs()
    chosen = args.configs.split(",")
    known_cli_seconds = {(row["model"], row["config"]): float(row["default_core"])
                         for row in csv.DictReader(args.cli_from.open())} if args.cli_from else {}
    with tempfile.TemporaryDirectory() as folder, args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        corpus = corpus_models() if not args.models and not args.netgen else []
        for model in models(args.models or corpus, args.netgen, Path(folder)):
            for name in chosen:
                try:
                    row = measure(model, name, configs[name], known_cli_seconds)
                except VelaError as error:
                    print(f"{model.stem} on {name} left out: {error}", flush=True)
                    continue
                writer.writerow(row)
                handle.flush()
                print(", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
