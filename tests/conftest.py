"""The test data: the corpus models and Vela's golden output, kept in tests/data (see tests/data/README.md).

The paths are module constants as well as fixtures because parametrisation happens at import time. Nothing is
skipped for missing data: a missing configs.json fails collection, a missing model or golden file fails the test
that reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from npusched.app.pipeline import architecture, load_network
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.run import RunOptions
from npusched.vela.command import run_options_from_vela_args

DATA_DIR = Path(__file__).resolve().parent / "data"
CORPUS_DIR = DATA_DIR / "corpus"
GOLDEN_ROOT = DATA_DIR / "golden"
GOLDEN_DIR = GOLDEN_ROOT / "vela-5.2.0-legacy"
CONFIGS: dict[str, dict[str, Any]] = json.loads((GOLDEN_ROOT / "configs.json").read_text())

# Named rather than globbed so that a model missing from tests/data/corpus fails instead of vanishing.
MODELS = ("ad01_int8", "dtln", "keyword_scrambled_8bit", "kws_dscnn_int8", "micro_speech_int8",
          "mobilenet_v2_224_int8", "person_detect", "resnet8_ic_int8", "resnet_large_ic_int8", "str_ww_int8",
          "vww_96_int8")

# Where Vela's legacy core itself failed, so there is no golden folder (tests/data/golden/README.md).
VELA_FAILED = frozenset({("u55-256_hee_shared_arena128k", "mobilenet_v2_224_int8")})


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
    (what its golden output is of), unless ``solver`` names one that schedules npusched's own."""
    overrides.setdefault("solver", None)
    arch, network, _ = load_network(run_options(config, model, **overrides))
    return arch, network


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
