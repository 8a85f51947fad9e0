"""Peak fast storage of npusched's ``--optimise Size`` schedules against both Vela 5.2.0 cores, per corpus model.

    python scripts/size_vs_vela.py [--config u55-128_hee_shared_size] [--models NAME ...] [--time-limit 60]
        [--workers 2] [--seed 0] [--smallest SECONDS] [--csv out.csv]

Each model is scheduled as ``solve-schedule --solver cpsat --deterministic`` would under the configuration of
tests/data/golden/configs.json, and its peak is compared with the SRAM each Vela core used
(tests/data/baselines/vela-5.2.0_corpus.csv, ``sram_kib``). Two peaks are printed: ``peak`` is the
evaluator's ``peak_fast_storage`` (each NPU subgraph on its own: feature maps, rolling and weight buffers);
``net peak`` is the whole inference's, as Vela's legacy core counts it: also the CPU operators' tensors and the
variables (LSTM and SVDF states), live throughout. They differ on two models. keyword_scrambled_8bit's seven
SVDF layers run on the CPU and their 5,120 bytes of state stay in the arena: legacy reports 5,408 bytes, regor
(which leaves CPU-side tensors out) 320, npusched's peak 288. dtln's LSTM states are read by the NPU: both Vela
cores keep them for the whole inference (2,320 bytes), npusched's peak only from their first to their last use
within the subgraph (1,808), so its peak is below Vela's there by how it counts, not by its schedule. The
geometric mean is printed for both peaks. ``--smallest SECONDS`` adds the least fast storage any schedule of
CP-SAT's candidate space needs (its own solve, minimising the peak alone, within SECONDS), which bounds what the
Size objective can reach.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npusched import solve_options  # noqa: E402
from npusched.app.pipeline import load_network  # noqa: E402
from npusched.errors import ScheduleError  # noqa: E402
from npusched.vela.command import run_options_from_vela_args  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
BASELINE = DATA / "baselines" / "vela-5.2.0_corpus.csv"
COLUMNS = ["model", "peak", "net_peak", "vela_legacy", "vela_regor", "vela_min", "peak_vs_legacy",
           "net_peak_vs_legacy", "within_min", "smallest", "cycles", "status", "seconds"]


def vela_sram_bytes(config: str) -> dict[str, dict[str, int]]:
    """model -> core -> SRAM used in bytes, for the cases where that core compiled the model."""
    out: dict[str, dict[str, int]] = {}
    for row in csv.DictReader(BASELINE.open()):
        if row["config"] == config and row["status"] == "ok" and row["sram_kib"]:
            out.setdefault(row["model"], {})[row["core"]] = round(float(row["sram_kib"]) * 1024)
    return out


def smallest_fit(options: Any, seconds: float) -> int | None:
    """The least fast storage a schedule of CP-SAT's candidate space needs (None when not found in time)."""
    from npusched.solvers.cpsat import NetworkFacts, smallest_fast_storage
    from npusched.solvers.heuristic import heuristic_schedule

    arch, network, _ = load_network(options)
    try:
        references: tuple[Any, ...] = (heuristic_schedule(network, arch, options.optimise),)
    except ScheduleError:
        references = ()
    needed = smallest_fast_storage(NetworkFacts(network, arch), references, time.monotonic() + seconds).needed_bytes
    return needed if needed >= 0 else None


def model_row(model: str, config: dict[str, Any], vela: dict[str, int], args: argparse.Namespace) -> dict[str, Any]:
    options = run_options_from_vela_args(DATA / "corpus" / f"{model}.tflite", config, solver="cpsat",
                                         time_limit_seconds=args.time_limit, workers=args.workers, seed=args.seed,
                                         deterministic=True)
    start = time.monotonic()
    row: dict[str, Any] = {"model": model, "vela_legacy": vela.get("legacy"), "vela_regor": vela.get("regor")}
    known = [v for v in (vela.get("legacy"), vela.get("regor")) if v is not None]
    row["vela_min"] = min(known) if known else None
    try:
        result = solve_options(options).run
    except ScheduleError as exc:
        row.update(status=f"error: {exc}", seconds=time.monotonic() - start)
        return row
    peak = result.evaluation.peak_fast_storage
    row.update(peak=peak, net_peak=result.evaluation.network_peak_fast_storage, cycles=result.evaluation.total_cycles,
               status=result.status, seconds=time.monotonic() - start)
    if row["vela_legacy"]:
        row["peak_vs_legacy"] = peak / row["vela_legacy"]
        row["net_peak_vs_legacy"] = row["net_peak"] / row["vela_legacy"]
    if row["vela_min"] is not None:
        row["within_min"] = peak <= row["vela_min"]
    if args.smallest is not None:
        row["smallest"] = smallest_fit(options, args.smallest)
    return row


def fmt(name: str, value: Any) -> str:
    if value is None:
        return "-"
    if name.endswith("_vs_legacy"):
        return f"{value:.3f}"
    if name == "seconds":
        return f"{value:.1f}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:,.0f}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="u55-128_hee_shared_size")
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smallest", type=float, metavar="SECONDS",
                        help="also solve for the candidate space's least peak, within SECONDS")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    configs = json.loads((DATA / "golden" / "configs.json").read_text())
    if args.config not in configs:
        print(f"error: unknown configuration '{args.config}' (known: {', '.join(configs)})", file=sys.stderr)
        return 2
    vela = vela_sram_bytes(args.config)
    models = args.models or sorted(vela)
    missing = [m for m in models if not (DATA / "corpus" / f"{m}.tflite").exists()]
    if missing:
        print(f"error: no corpus model {', '.join(missing)} in {DATA / 'corpus'}", file=sys.stderr)
        return 2
    rows = []
    print(" | ".join(COLUMNS))
    for model in models:
        row = model_row(model, configs[args.config], vela.get(model, {}), args)
        rows.append(row)
        print(" | ".join(fmt(name, row.get(name)) for name in COLUMNS), flush=True)
    for column in ("peak_vs_legacy", "net_peak_vs_legacy"):
        ratios = [row[column] for row in rows if row.get(column)]
        if ratios:
            geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            print(f"geomean {column.replace('_vs_legacy', '')} / Vela legacy over {len(ratios)} models: {geomean:.3f}")
    within = sum(1 for row in rows if row.get("within_min"))
    print(f"peak <= min(Vela legacy, Vela regor) on {within} of {len(rows)} models")
    if args.csv is not None:
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
