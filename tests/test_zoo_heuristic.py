"""The heuristic against Vela legacy on the zoo of real converter exports (tests/data/exports): where Vela legacy
runs an export wholly on the NPU (golden/partition.csv), the heuristic's schedule of Vela's graph is Vela legacy's
own, choice for choice and cycle for cycle, in all five configurations, judged against the committed golden output
(no Vela runs)."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest
from conftest import CONFIGS
from test_heuristic import assert_velas_schedule
from test_zoo import GOLDEN, MODELS, Partition, core_partition, zoo_options

from npusched.app.graph_choice import graph_sites
from npusched.app.pipeline import load_graph
from npusched.solvers.heuristic import schedule_subgraphs
from npusched.vela.report import read_summary, read_verbose_schedule

# Every zoo model Vela legacy runs wholly on the NPU, in every configuration.
WHOLLY_ON_NPU = tuple(model for model in MODELS if all(core_partition(model, config, "legacy") == Partition(0, 1)
                                                         for config in CONFIGS))
HEURISTIC_CASES = [(config, model) for model in WHOLLY_ON_NPU for config in CONFIGS]
# The quick tier compares each model in one configuration, every configuration in turn; the rest are slow.
QUICK_CASES = {(tuple(CONFIGS)[number % len(CONFIGS)], model) for number, model in enumerate(WHOLLY_ON_NPU)}


def _golden_file(config: str, model: str, name: str, folder: Path) -> Path:
    path = folder / name
    path.write_bytes(gzip.decompress((GOLDEN / "vela-5.2.0-legacy" / config / model / f"{name}.gz").read_bytes()))
    return path


@pytest.mark.parametrize(("config", "model"), [
    case if case in QUICK_CASES else pytest.param(*case, marks=pytest.mark.slow) for case in HEURISTIC_CASES])
def test_the_heuristic_is_velas_own_schedule(config: str, model: str) -> None:
    """Same schedule label, cascades and, per op, block config, stripes, cascade, weight buffers and SRAM in use as
    Vela legacy's --verbose-schedule of the export, and the same network cycles as its summary.csv."""
    options = zoo_options(model, config)
    arch, graph = load_graph(options)
    if graph_sites(graph):  # Vela's graph: the priced rewrites' sites left out (a one-sided PAD copied, as Vela does)
        arch, graph = load_graph(options, graph.recipe.without(site.key for site in graph_sites(graph)))
    results = schedule_subgraphs(graph.network, arch, options.optimise)
    with tempfile.TemporaryDirectory() as scratch:
        golden = read_verbose_schedule(_golden_file(config, model, "vela_stdout.txt", Path(scratch)))
        vela_cycles = float(read_summary(_golden_file(config, model, "summary.csv", Path(scratch)))["cycles_total"])
    assert_velas_schedule(results, golden)
    assert sum(r.total_cycles for r in results) == pytest.approx(vela_cycles, rel=1e-9)


def test_every_model_vela_legacy_runs_wholly_is_compared() -> None:
    assert len(WHOLLY_ON_NPU) == 15 and len(HEURISTIC_CASES) == 75
