"""Refactors keep behaviour: the corpus under one golden configuration, each solver's schedule and totals equal to
those kept from release cd5763c (tests/data/behaviour; ``scripts/bench/behaviour_diff.py check`` runs all five
configurations). CP-SAT runs only on the three smallest models, which a deterministic search proves optimal long
before its limit (a larger one's search can be cut by the clock on a busy machine, and is then not reproducible)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
from conftest import MODELS

from npusched.bench.behaviour import cell_key, first_difference, kept_dir, run_cell, same_behaviour

RELEASE = "cd5763c"
CONFIG = "u55-128_hee_shared"
CPSAT_MODELS = ("ad01_int8", "kws_dscnn_int8", "micro_speech_int8")
# The quick tier: Vela legacy's schedule of every model, and CP-SAT's of the two smallest.
QUICK = {(model, "heuristic") for model in MODELS} | {("ad01_int8", "cpsat"), ("micro_speech_int8", "cpsat")}
CELLS = [pytest.param((model, CONFIG, solver), id=f"{model}-{solver}",
                      marks=[] if (model, solver) in QUICK else [pytest.mark.slow])
         for model in MODELS for solver in ("heuristic", "dp", "vela-default")] + \
    [pytest.param((model, CONFIG, "cpsat"), id=f"{model}-cpsat",
                  marks=[] if (model, "cpsat") in QUICK else [pytest.mark.slow]) for model in CPSAT_MODELS]


@pytest.mark.parametrize("cell", CELLS)
def test_the_schedule_is_the_kept_releases(cell: tuple[str, str, str]) -> None:
    kept = json.loads(gzip.decompress((kept_dir(RELEASE) / f"{cell_key(cell)}.json.gz").read_bytes()))
    now = run_cell(cell, kept["time_limit"])
    assert not now["clock_ended"], "the clock ended a deterministic search of a model proven optimal in seconds"
    assert same_behaviour(kept, now), first_difference(kept, now)


@pytest.mark.slow
def test_a_deterministic_run_decides_alike_with_every_cpu_busy() -> None:
    """--deterministic sizes its steps by the inputs, never by the clock: with a CPU-bound process per CPU beside
    it, a run decides what it decides on an idle machine (the kept release's schedule)."""
    cell = ("kws_dscnn_int8", CONFIG, "cpsat")
    kept = json.loads(gzip.decompress((kept_dir(RELEASE) / f"{cell_key(cell)}.json.gz").read_bytes()))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        loaded = run_cell(cell, kept["time_limit"])
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert not loaded["clock_ended"]
    assert same_behaviour(kept, loaded), first_difference(kept, loaded)


# The first CP-SAT model a deterministic search of a corpus model builds (from Vela legacy's schedule), serialised,
# printed by a process of its own.
FIRST_MODEL = """
import hashlib, sys
from npusched.app.pipeline import load_network
from npusched.bench.behaviour import cell_options
from npusched.solvers import interruption
from npusched.solvers.cpsat import SearchBudget, solve_cpsat
from npusched.solvers.heuristic import heuristic_schedule

def first_model(solver, model, callback=None):
    print(hashlib.sha256(str(model.Proto()).encode()).hexdigest())  # its text format
    sys.exit(0)

interruption._solve = first_model
arch, network, _ = load_network(cell_options((sys.argv[1], sys.argv[2], "cpsat"), 30.0))
solve_cpsat(network, arch, SearchBudget(time_limit_seconds=30, workers=1, deterministic=True),
            hint=heuristic_schedule(network, arch))
"""


@pytest.mark.slow
def test_the_cpsat_model_is_the_same_whatever_the_hash_seed() -> None:
    """Same inputs, same schedule: the CP-SAT model, and so which of equal optima a search returns, may not hang on
    the order a set of feature maps iterates in, which followed str's hash, seeded per process (PYTHONHASHSEED).
    mobilenet_v2_224_int8 on ethos-u65-512 returned one of two schedules of equal cycles by the seed."""
    digests = set()
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", FIRST_MODEL, "mobilenet_v2_224_int8",
                               "u65-512_high_dedicated384k"], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        digests.add(done.stdout.split()[-1])
    assert len(digests) == 1
