#!/usr/bin/env python3
"""The floor on peak fast storage against npusched's smallest schedules and both Vela cores.

    python scripts/peak_floor.py [--csv docs/peak_floor.csv] [--held-operands]
    python scripts/peak_floor.py --generated [--archs a,b] [--passes 40] [--seeds 0,1] [--time-limit 10]

Corpus (default): per model under u55-128_hee_shared_size, the floor no schedule Vela's cascade rules allow can
go below (``npusched.solvers.peak_floor``; NPU subgraphs, and the whole inference), next to npusched's least peak
(docs/size_vs_vela.csv, made by scripts/size_vs_vela.py) and both Vela cores' SRAM used (tests/data/baselines),
with geomeans. --held-operands: the floor of CP-SAT's own Size rules (gate MULs and residual joins holding a
second feature map or reading it lagged, rolling buffers sized in Vela's pull order; Vela's rules forbid them).
--generated: networks of npusched.netgen under the same
configuration; checks the floor is at or below the heuristic's and CP-SAT's (--optimise Size, deterministic)
peaks and counts where CP-SAT meets it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from size_vs_vela import BASELINE, vela_sram_bytes  # noqa: E402

from npusched.app.pipeline import load_network  # noqa: E402
from npusched.netgen import ARCHITECTURES, generate  # noqa: E402
from npusched.schedule.evaluator import evaluate  # noqa: E402
from npusched.solvers.cpsat import solve_cpsat  # noqa: E402
from npusched.solvers.heuristic import heuristic_schedule  # noqa: E402
from npusched.solvers.peak_floor import network_floor  # noqa: E402
from npusched.vela.command import run_options_from_vela_args  # noqa: E402

DATA = REPO / "tests" / "data"
CONFIG_NAME = "u55-128_hee_shared_size"
SIZE_TABLE = REPO / "docs" / "size_vs_vela.csv"
COLUMNS = ["model", "floor", "net_floor", "peak", "net_peak", "vela_legacy", "vela_default", "floor_vs_legacy",
           "net_floor_vs_legacy", "floor_met", "where"]


def config() -> dict:
    return json.loads((DATA / "golden" / "configs.json").read_text())[CONFIG_NAME]


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def corpus(args: argparse.Namespace) -> int:
    ours = {row["model"]: row for row in csv.DictReader(SIZE_TABLE.open())}
    vela = vela_sram_bytes(CONFIG_NAME)
    rows = []
    for path in sorted((DATA / "corpus").glob("*.tflite")):
        arch, network, _ = load_network(run_options_from_vela_args(path, config()))
        floor = network_floor(network, arch, args.held_operands, joins=args.held_operands)
        legacy = vela[path.stem]["legacy"]
        peak, net_peak = int(ours[path.stem]["peak"]), int(ours[path.stem]["net_peak"])
        rows.append({"model": path.stem, "floor": floor.npu.floor_bytes, "net_floor": floor.whole_bytes,
                     "peak": peak, "net_peak": net_peak, "vela_legacy": legacy,
                     "vela_default": vela[path.stem].get("regor"),
                     "floor_vs_legacy": round(floor.npu.floor_bytes / legacy, 3),
                     "net_floor_vs_legacy": round(floor.whole_bytes / legacy, 3),
                     "floor_met": peak == floor.npu.floor_bytes and net_peak == floor.whole_bytes,
                     "where": floor.npu.describe()})
    print("| model | floor | net_floor | npusched peak | net_peak | Vela legacy | Vela default | floor / legacy | "
          "net_floor / legacy | met |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")
    for r in rows:
        print(f"| {r['model']} | {r['floor']:,} | {r['net_floor']:,} | {r['peak']:,} | {r['net_peak']:,} | "
              f"{r['vela_legacy']:,} | {r['vela_default']:,} | {r['floor_vs_legacy']:.3f} | "
              f"{r['net_floor_vs_legacy']:.3f} | {'yes' if r['floor_met'] else 'no'} |")
    print(f"geomean floor / Vela legacy {geomean([r['floor'] / r['vela_legacy'] for r in rows]):.3f}, "
          f"net_floor / Vela legacy {geomean([r['net_floor'] / r['vela_legacy'] for r in rows]):.3f}; "
          f"npusched meets the floor on {sum(r['floor_met'] for r in rows)} of {len(rows)} models")
    if args.csv is not None:
        with args.csv.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return 0


def generated(args: argparse.Namespace) -> int:
    cases = met = 0
    below: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.archs.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                path = Path(folder) / f"{name}-{args.passes}-s{seed}.tflite"
                path.write_bytes(generate(name, args.passes, seed))
                arch, network, _ = load_network(run_options_from_vela_args(path, config()))
                heuristic = heuristic_schedule(network, arch, "Size")
                result = solve_cpsat(network, arch, time_limit_seconds=args.time_limit, workers=2,
                                     deterministic=True, hint=heuristic)
                peaks = []
                # each against the floor of its own cascade rules: Vela's, and CP-SAT's Size rules (gates and
                # joins held or read lagged, rolling buffers sized in Vela's pull order)
                for schedule, own in ((heuristic, False), (result.schedule, True)):
                    floor = network_floor(network, arch, held_operands=own, joins=own)
                    evaluation = evaluate(network, arch, schedule)
                    peaks.append(evaluation.peak_fast_storage)
                    if evaluation.peak_fast_storage < floor.npu.floor_bytes or \
                            evaluation.network_peak_fast_storage < floor.whole_bytes:
                        below.append(f"{path.stem} {schedule.solver}")
                cases += 1
                met += peaks[1] == floor.npu.floor_bytes
                print(f"{path.stem:24} passes {len(network.npu_ops):4}  floor {floor.npu.floor_bytes:>9,}  "
                      f"heuristic {peaks[0]:>9,}  cpsat {peaks[1]:>9,} ({result.status})", flush=True)
    print(f"SUMMARY {cases} networks: a schedule below the floor in {len(below)} ({', '.join(below) or 'none'}); "
          f"CP-SAT meets the floor in {met}")
    return 1 if below else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, help="write the corpus table here")
    parser.add_argument("--generated", action="store_true", help="check the floor on generated networks")
    parser.add_argument("--held-operands", action="store_true",
                        help="the floor when gate MULs holding a second feature map join cascades too, as "
                             "CP-SAT's may (Vela's rules forbid it)")
    parser.add_argument("--archs", default=",".join(ARCHITECTURES))
    parser.add_argument("--passes", type=int, default=40)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    assert BASELINE.is_file(), BASELINE
    return generated(args) if args.generated else corpus(args)


if __name__ == "__main__":
    sys.exit(main())
