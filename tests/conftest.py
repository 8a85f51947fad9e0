"""The test data: the corpus models and Vela's golden output, kept in tests/data (see tests/data/README.md).

The paths are module constants as well as fixtures because parametrisation happens at import time. Nothing is
skipped for missing data: a missing configs.json fails collection, a missing model or golden file fails the test
that reads it.
"""

from __future__ import annotations

import functools
import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import export_forms
import pytest

from npusched.app.cli import GC_THRESHOLDS
from npusched.app.pipeline import architecture, load_network
from npusched.frontend.tflite_reader import read_tflite
from npusched.lowering.graph import Network, NpuSubgraph, lower_model
from npusched.netgen import generate
from npusched.run import RunOptions
from npusched.schedule.evaluator import evaluate
from npusched.solvers.heuristic import heuristic_schedule
from npusched.vela.command import run_options_from_vela_args

DATA_DIR = Path(__file__).resolve().parent / "data"
CORPUS_DIR = DATA_DIR / "corpus"
GOLDEN_ROOT = DATA_DIR / "golden"
GOLDEN_DIR = GOLDEN_ROOT / "vela-5.2.0-legacy"
# The zoo of real converter exports (scripts/export_zoo.py, docs/zoo.md).
EXPORTS_DIR = DATA_DIR / "exports"
CONFIGS: dict[str, dict[str, Any]] = json.loads((GOLDEN_ROOT / "configs.json").read_text())

# Named rather than globbed so that a model missing from tests/data/corpus fails instead of vanishing.
MODELS = ("ad01_int8", "dtln", "keyword_scrambled_8bit", "kws_dscnn_int8", "micro_speech_int8",
          "mobilenet_v2_224_int8", "person_detect", "resnet8_ic_int8", "resnet_large_ic_int8", "str_ww_int8",
          "vww_96_int8")

# Where Vela's legacy core itself failed, so there is no golden folder (tests/data/golden/README.md).
VELA_FAILED = frozenset({("u55-256_hee_shared_arena128k", "mobilenet_v2_224_int8")})


def _export(model: str) -> bytes:
    """A zoo model's bytes, as its converter wrote them."""
    return (EXPORTS_DIR / f"{model}.tflite").read_bytes()


# Every rewrite of the graph (``npusched.frontend.normalise.REWRITE_NAMES``) -> (a model where it finds a site,
# whether that site needs maps staged: ``GraphRecipe.stage_maps``). A new rewrite fails test_pass_manager until it
# is given one.
REWRITE_MODELS: dict[str, tuple[Callable[[], bytes], bool]] = {
    "fold": (lambda: generate("mobilenet_v3", 40, 1, keras_style=True), False),
    "constant": (lambda: generate("gru", 40, 1), False),
    "dilated_convolution": (lambda: generate("tcn", 40, 1, keras_style=True), False),
    "nearest_upsampling": (lambda: generate("yolo", 40, 1, keras_style=True), False),
    "stacking": (lambda: generate("gru", 40, 1, keras_style=True), False),
    "grouped_convolution": (lambda: generate("regnet", 40, 1), False),
    "static_shape": (lambda: _export("unit_dense_nd"), False),
    "gather": (lambda: export_forms.last_step(1), False),
    "mean_axis": (lambda: _export("unit_norms"), False),
    "float_island": (lambda: _export("unit_norms"), False),
    "channel_mean": (lambda: _export("unit_norms"), False),
    "max_reduction": (lambda: _export("unit_reductions"), False),
    "strided_convolution": (lambda: export_forms.patch_embedding(1), False),
    "high_rank": (lambda: _export("unit_norms"), False),
    "transpose": (lambda: _export("unit_reductions"), False),
    "reshape_chain": (lambda: _export("pt_espcn_x2_96"), False),
    "broadcast_operand": (lambda: generate("transformer", 40, 1), False),
    "matmul_operand": (lambda: generate("transformer", 40, 1), False),
    "widened_output": (lambda: generate("unet", 40, 1, keras_style=True), False),
    "gate_first": (lambda: generate("efficientnet", 40, 1), False),
    "relayout": (lambda: generate("mobilenet_v3", 40, 1, keras_style=True), False),
    "staged_input": (lambda: generate("mobilenet_v2", 40, 1), True),
    "staged_output": (lambda: generate("unet", 40, 1, torch_style=True), True),
    "softmax_bands": (lambda: generate("unet", 40, 1, segmentation=True), False),
    "dilated_sequence": (lambda: generate("tcn", 60, 0), False),
    "padded_convolution": (lambda: generate("tcn", 40, 1), False),
    "in_place_writes": (lambda: generate("densenet", 40, 1), False),
    "softmax_deep_views": (lambda: generate("transformer", 40, 1), False),
}



def model_path(model: str) -> Path:
    return CORPUS_DIR / f"{model}.tflite"


def golden_path(config: str, model: str) -> Path:
    """The folder of Vela's output for one model under one configuration of configs.json."""
    return GOLDEN_DIR / config / model


def golden_cases(configs: tuple[str, ...] | None = None, models: tuple[str, ...] = MODELS) -> list[tuple[str, str]]:
    """(config, model) for every pair Vela compiled, over the given configurations (default: all)."""
    return [(config, model) for config in (configs or tuple(CONFIGS)) for model in models
            if (config, model) not in VELA_FAILED]


def run_options(config: str, model: str = "kws_dscnn_int8", **overrides: Any) -> RunOptions:
    """The run options of a configuration of configs.json for a corpus model."""
    return run_options_from_vela_args(model_path(model), CONFIGS[config], **overrides)


def load_corpus(model: str, config: str, **overrides: Any) -> tuple[Any, Network]:
    """(architecture, lowered network) of a corpus model under a configuration of configs.json: Vela's graph
    (what its golden output is of), unless ``solver`` names one that schedules npusched's own. Lowered once per
    test run (the IR is immutable, so every test may share it)."""
    overrides.setdefault("solver", None)
    return _loaded_corpus(model, config, tuple(sorted(overrides.items())))


@functools.cache
def _loaded_corpus(model: str, config: str, overrides: tuple[tuple[str, Any], ...]) -> tuple[Any, Network]:
    arch, network, _ = load_network(run_options(config, model, **dict(overrides)))
    return arch, network


# The corpus under each golden configuration as Vela legacy reads it (the file lowered as it is), with Vela
# legacy's own schedule (the heuristic) and its evaluation: built once per test run, shared by every test.
@functools.cache
def corpus_arch(config: str) -> tuple[Any, str]:
    """The architecture of a golden configuration and its ``--optimise`` strategy."""
    options = run_options(config)
    return architecture(options), options.optimise


@functools.cache
def corpus_network(config: str, model: str) -> Network:
    return lower_model(read_tflite(model_path(model)), corpus_arch(config)[0])


@functools.cache
def corpus_heuristic(config: str, model: str) -> Any:
    arch, optimise = corpus_arch(config)
    return heuristic_schedule(corpus_network(config, model), arch, optimise)


@functools.cache
def corpus_evaluation(config: str, model: str) -> Any:
    return evaluate(corpus_network(config, model), corpus_arch(config)[0], corpus_heuristic(config, model))


def first_passes(network: Network, count: int) -> Network:
    """A network of the first ``count`` passes of ``network``'s first NPU subgraph (small enough to enumerate)."""
    sg = network.subgraphs[0]
    ops = sg.ops[:count]
    part = NpuSubgraph(name=sg.name, ops=ops, inputs=(ops[0].ifm.tensor,), outputs=(ops[-1].ofm.tensor,))
    return Network(name="slice", subgraphs=(part,), ops=ops, cpu_ops=())


def golden_arch(config: str, **overrides: Any) -> Any:
    """The architecture of a configuration of configs.json."""
    return architecture(run_options(config, **overrides))


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    return CORPUS_DIR


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return GOLDEN_DIR


@pytest.fixture(scope="session")
def configs() -> dict[str, dict[str, Any]]:
    return CONFIGS


def assert_names_the_peak(message: str, needed_bytes: int, network: Any) -> None:
    """An impossible-limit error says where the smallest schedule peaks and what is live there: parts that add
    up to the size it needs, and allocations that are the network's own tensors (or its passes' weights)."""
    import re

    match = re.search(r"peaks at step (\d+) \((.+?)\) with (\d+) bytes: (.+?); largest live there: (.+)$", message)
    assert match is not None, message
    assert int(match.group(3)) == needed_bytes
    parts = dict(re.findall(r"(feature maps|rolling buffers|weight buffers) (\d+) B", match.group(4)))
    assert sum(int(v) for v in parts.values()) == needed_bytes, message
    names = {access.tensor.name for sg in network.subgraphs for op in sg.ops for access in (op.ifm, op.ofm, op.ifm2)
             if access is not None}
    ops = {op.name for sg in network.subgraphs for op in sg.ops}
    for what, size in re.findall(r"([^,]+?) (\d+) B(?:, |$)", match.group(5)):
        held = what[len("weights of '"):-1] if what.startswith("weights of '") else what
        assert (held in ops) if what.startswith("weights of") else set(held.split("/")) <= names, (what, message)
        assert 0 < int(size) <= needed_bytes


# The quick tier's tests of several seconds each: run first, so that under pytest-xdist (-n) no worker is left
# finishing one of them while the others are idle.
LONG_FIRST = ("test_options.py::test_cheapest_options_select_as_from_every_option",
              "test_path_bound.py::test_dedicated_fast_storage_bound_is_below_the_optimum_and_near_it",
              "test_pricing_pool.py::test_price_tables_from_processes_are_the_same",
              "test_graph_choice.py::test_a_tcn_pads_its_causal_convolutions_in_hardware",
              "test_in_place.py::test_vela_writes_the_in_place_slice_where_the_copy_wrote",
              "test_in_place.py::test_writing_in_place_saves_the_copies")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not any(name in item.nodeid for name in LONG_FIRST))  # stable: the rest in order


def pytest_collection_finish(session: pytest.Session) -> None:
    """The command's garbage-collection thresholds: the caches the tests fill (block configs, compute costs,
    lowered networks) grow to over a million objects, which each full collection walks (at the interpreter's
    defaults, 30-37 of them took 8-9 s of each quick-tier worker's CPU; 1-2 s at these)."""
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's heap, frozen: pytest's own last collections at exit would walk all of it (about 2 s a worker)."""
    gc.freeze()
