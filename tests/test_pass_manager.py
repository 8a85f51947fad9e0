"""The graph's recipe and the rewrites' pass manager: every rewrite can be switched off by name, is recorded alike,
and can be verified against the TFLite reference interpreter as it runs; one recipe makes one graph whatever the
cost model, objective or solver."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIGS, REWRITE_MODELS

import npusched.frontend.normalise as normalisation
from npusched.app.cli import main
from npusched.app.pipeline import load, load_graph
from npusched.errors import ConfigError
from npusched.frontend.normalise import PIPELINE, REWRITE_NAMES, GraphRecipe, RewriteError, normalise
from npusched.frontend.normalise.flatbuffer import SubGraphT
from npusched.frontend.normalise.folding import FOLDING
from npusched.lowering.build import BuiltGraph, build_graph
from npusched.run import OBJECTIVES, Solver, recipe_for
from npusched.target.arch import load_hardware
from npusched.target.estimators import Estimator, load_architecture
from npusched.vela.command import run_options_from_vela_args, vela_hardware_args

# npusched's own graph lowered where feature maps live in fast storage: concatenations written in place.
OWN = GraphRecipe(in_place_writes=True, in_place_budget_bytes=None, softmax_deep_views=True)


def test_every_rewrite_has_a_model_it_applies_to() -> None:
    assert sorted(REWRITE_MODELS) == sorted(REWRITE_NAMES)
    assert len(set(REWRITE_NAMES)) == len(REWRITE_NAMES)


@pytest.mark.parametrize("name", REWRITE_NAMES)
def test_a_rewrite_switched_off_by_name_applies_nowhere(name: str) -> None:
    """On a model where the rewrite applies, switching it off leaves every one of its sites alone (and it only),
    and the graph differs."""
    make, stage = REWRITE_MODELS[name]
    data = make()
    arch = load_architecture("ethos-u55-128")
    recipe = replace(OWN, stage_maps=stage)
    on = build_graph(data, name, arch, recipe)
    off = build_graph(data, name, arch, replace(recipe, disabled_rewrites=frozenset({name})))
    records_on = {record.name: record for record in on.rewrites}
    records_off = {record.name: record for record in off.rewrites}
    assert records_on[name].applied > 0 and not records_on[name].disabled
    assert records_off[name].applied == 0 and records_off[name].disabled
    assert _passes(on) != _passes(off) or on.model_bytes != off.model_bytes


def _passes(graph: BuiltGraph) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    return [(op.op_type, tuple(op.ifm.shape.as_list()), tuple(op.ofm.shape.as_list())) for op in graph.network.npu_ops]


@pytest.mark.slow
def test_every_rewrite_is_recorded_in_the_json(tmp_path: Path) -> None:
    """The schedule document has a record for every rewrite (sites found, applied, operators, seconds) and the
    recipe of its graph, which says what was switched off."""
    model = tmp_path / "tcn.tflite"
    model.write_bytes(generate_tcn())
    out = tmp_path / "run.json"
    assert main([str(model), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]), "--solver", "dp", "--quiet",
                 "--disable-rewrite", "padded_convolution", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    records = {record["name"]: record for record in document["rewrites"]}
    assert sorted(records) == sorted(REWRITE_NAMES)
    assert records["padded_convolution"]["disabled"] and records["padded_convolution"]["applied"] == 0
    assert records["dilated_sequence"]["applied"] > 0 and records["dilated_sequence"]["seconds"] >= 0
    assert document["recipe"]["disabled_rewrites"] == ["padded_convolution"]
    assert GraphRecipe.from_json(document["recipe"]).disabled_rewrites == {"padded_convolution"}


def generate_tcn() -> bytes:
    return REWRITE_MODELS["dilated_sequence"][0]()


def test_an_unknown_rewrite_name_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["model.tflite", "--disable-rewrite", "no_such_rewrite"])
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "unknown rewrite 'no_such_rewrite'" in error[0]


def _corrupting_fold(model: object, subgraph: SubGraphT, plans: object) -> None:
    """Folding as it is, and then one weight of the first convolution changed: a wrong rewrite."""
    FOLDING.apply(model, subgraph, plans)  # type: ignore[arg-type]
    for op in subgraph.operators:
        weights = subgraph.tensors[int(op.inputs[1])] if len(op.inputs) > 1 else None
        buffer = model.buffers[weights.buffer] if weights is not None else None  # type: ignore[attr-defined]
        if buffer is not None and buffer.data is not None and len(buffer.data) > 0:
            data = np.array(buffer.data, dtype=np.uint8)
            data[0] ^= 0x40
            buffer.data = data
            return


def test_verify_each_rewrite_catches_a_wrong_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """With verification on, a correct pipeline passes and a rewrite that changes a tensor is named."""
    data = REWRITE_MODELS["fold"][0]()
    normalise(data, verify=True)  # every rewrite of this model is exact
    wrong = replace(FOLDING, apply=_corrupting_fold)
    monkeypatch.setattr(normalisation, "PIPELINE", tuple(wrong if r is FOLDING else r for r in PIPELINE))
    normalise(data)  # unverified, the wrong rewrite goes unnoticed
    with pytest.raises(RewriteError, match="the fold rewrite changed tensor"):
        normalise(data, verify=True)


@pytest.mark.slow
def test_one_recipe_one_graph_whatever_the_cost_model_objective_or_solver(tmp_path: Path) -> None:
    """The graph is the recipe's: built from the recipe of one run, every estimator x objective x solver gets the
    same passes (the options decide only the recipe: ``recipe_for``)."""
    model = tmp_path / "yolo.tflite"
    model.write_bytes(REWRITE_MODELS["nearest_upsampling"][0]())
    base = run_options_from_vela_args(model, CONFIGS["u65-256_mid_dedicated256k"], solver="cpsat")
    recipe = load(base).recipe
    graphs = set()
    for estimator in Estimator.single():
        for objective in OBJECTIVES:
            for solver in Solver:
                options = replace(base, estimator=estimator.value, objective=objective, solver=solver.value)
                _, graph = load_graph(options, recipe)
                graphs.add((graph.model_bytes, tuple(_passes(graph))))
    assert len(graphs) == 1
    # The hardware alone (no cost model, no objective: ArchitectureFeatures has no such field) builds that graph too.
    hardware = load_hardware(**{k: v for k, v in base.architecture_arguments.items() if k != "estimator"})
    assert not {"estimator", "blend_weights", "blend_cap"} & {f.name for f in fields(hardware)}
    alone = build_graph(model.read_bytes(), str(model), hardware, recipe)
    assert {(alone.model_bytes, tuple(_passes(alone)))} == graphs
    # And the options' own recipes differ only where the options ask for another graph.
    arch = load(base).arch
    assert recipe_for(replace(base, solver="heuristic"), arch) != recipe
    assert recipe_for(replace(base, objective="estimator"), arch) == recipe


def test_a_malformed_recipe_in_a_document_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown fields: colour"):
        GraphRecipe.from_json({"colour": "red"})
    with pytest.raises(ConfigError, match="in_place_writes is not true or false"):
        GraphRecipe.from_json({"in_place_writes": "yes"})
    assert GraphRecipe.from_json(OWN.as_json()) == OWN


def test_only_build_graph_normalises_and_lowers() -> None:
    """Every graph of the package is made by ``build_graph``: no other module calls ``normalise`` or
    ``lower_model`` (the recipe is the only way to ask for another graph)."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "npusched"
    callers = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name in ("normalise", "lower_model"):
                    callers.append(str(path.relative_to(package)))
    assert sorted(set(callers)) == ["lowering/build.py"]
