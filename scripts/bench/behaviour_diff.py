"""Are npusched's schedules what a kept release made? The corpus x the golden configurations x every solver, each
run as a user runs it (the run and the document of ``solve-schedule --json``, ``--deterministic --workers 1 --seed
0``), its schedule and totals compared with those kept in tests/data/behaviour/<release>/ (a refactor must leave
every one identical; ``npusched.bench.behaviour`` says what is compared). The npusched imported is this
checkout's (``PYTHONPATH=.`` for a worktree without its own install).

    python scripts/bench/behaviour_diff.py capture [--jobs 2]     # keep this checkout's schedules
    python scripts/bench/behaviour_diff.py check   [--jobs 2]     # compare this checkout with the kept ones

A deterministic search the wall clock ends before its work budget is not reproducible (the run says so); such a
cell is kept at three (or nine) times the limit, where the work budget ends it, and checked at the limit it was kept
at. A cell the clock ends during the check (a busy machine), or ended when it was kept (a slower machine), is
reported as CLOCK, not as a difference: run it again on an idle machine, or keep it again at a longer limit.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from npusched.bench.behaviour import (
    SOLVERS,
    Cell,
    cell_key,
    first_difference,
    kept_dir,
    run_cell,
    same_behaviour,
)
from npusched.bench.golden import load_configs
from npusched.bench.paths import corpus_models

RELEASE = "cd5763c"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("capture", "check"))
    parser.add_argument("--jobs", type=int, default=1, help="cells run at once (default: 1)")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--configs", nargs="*", default=None)
    parser.add_argument("--solvers", nargs="*", default=list(SOLVERS))
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--kept", type=Path, default=kept_dir(RELEASE),
                        help="folder of the kept schedules (default: %(default)s)")
    args = parser.parse_args()
    models = args.models or [path.stem for path in corpus_models()]
    todo = [(model, config, solver) for model in models for config in args.configs or list(load_configs())
            for solver in args.solvers]
    args.kept.mkdir(parents=True, exist_ok=True)
    jobs = [(args.action, cell, args.kept, args.time_limit) for cell in todo]
    differ = 0
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for line, same in pool.map(one, *zip(*jobs, strict=True)):
            print(line, flush=True)
            differ += not same
    if args.action == "check":
        print(f"{len(todo) - differ} of {len(todo)} identical")
    return 1 if differ else 0


def one(action: str, cell: Cell, kept_folder: Path, time_limit: float) -> tuple[str, bool]:
    """Keep one cell's run (``capture``), or compare it with the kept one (``check``): the line to print, and
    whether it is the same."""
    path = kept_folder / f"{cell_key(cell)}.json.gz"
    if action == "capture":
        result = run_cell(cell, time_limit)
        for longer in (3, 9):
            if result["clock_ended"]:
                result = run_cell(cell, longer * time_limit)
        path.write_bytes(gzip.compress(json.dumps(result, sort_keys=True).encode(), mtime=0))
        return (f"kept   {cell_key(cell)}: {result.get('status', result.get('error'))} at "
                f"{result['time_limit']:g} s{' (the clock ended the search)' if result['clock_ended'] else ''}"), True
    if not path.exists():
        return f"NEW    {cell_key(cell)}: nothing kept", False
    kept = json.loads(gzip.decompress(path.read_bytes()))
    result = run_cell(cell, kept.get("time_limit", time_limit))
    if same_behaviour(kept, result):
        return f"same   {cell_key(cell)}", True
    if kept["clock_ended"]:
        return (f"CLOCK  {cell_key(cell)}: the wall clock ended the kept run's search (not reproducible): keep it "
                "again at a longer limit"), False
    if result["clock_ended"]:
        # Not this checkout's doing: the machine was too busy for the work budget within the limit.
        return f"CLOCK  {cell_key(cell)}: the wall clock ended the search here (a busy machine): run it again", False
    return f"DIFFER {cell_key(cell)}: {first_difference(kept, result)}", False


if __name__ == "__main__":
    sys.exit(main())
