"""Every rewrite of the normaliser reads the operators it matches defensively.

For each rewrite, a model where it finds a site, mutated at that site's operator the ways generated bad input
is: another operator's options table (a CONV_2D carrying LSTMOptions once ended in an AttributeError), a tensor of
another type or rank, a constant's buffer out of range, an input index out of range. Normalising it and lowering
the result must end in the run's one-line error (a ModelError or another NpuschedError, which the CLI prints as
``error: ...`` with exit status 2) or leave the site alone: never another exception.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from conftest import CONFIGS, REWRITE_MODELS

from npusched.app.cli import main
from npusched.errors import NpuschedError
from npusched.frontend.normalise import PIPELINE, GraphRecipe, normalise
from npusched.frontend.normalise.flatbuffer import pack_model, unpack_model
from npusched.frontend.normalise.folding import fix_batch
from npusched.frontend.normalise.rewrite import Rewrite
from npusched.frontend.tflite_reader import parse_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import lower_model
from npusched.target.estimators import load_architecture
from npusched.vela.command import vela_hardware_args

_BY_NAME = {rewrite.name: rewrite for rewrite in PIPELINE}
# A concatenation's inputs written in place, as npusched's own graph does.
IN_PLACE = GraphRecipe(in_place_writes=True, in_place_budget_bytes=None)
# rewrite -> (a model where it finds a site, whether the model is normalised with ``stage``)
MODELS = {name: entry for name, entry in REWRITE_MODELS.items() if name in _BY_NAME}


def _other_options(op: schema.OperatorT, tensors: list[schema.TensorT], model: schema.ModelT) -> None:
    op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.LSTMOptions, schema.LSTMOptionsT()


def _other_type(op: schema.OperatorT, tensors: list[schema.TensorT], model: schema.ModelT) -> None:
    tensors[int(op.inputs[0])].type = schema.TensorType.INT32


def _other_rank(op: schema.OperatorT, tensors: list[schema.TensorT], model: schema.ModelT) -> None:
    tensor = tensors[int(op.inputs[0])]
    tensor.shape = np.asarray(list(tensor.shape)[1:] or [1], dtype=np.int32)
    tensor.shapeSignature = None


def _buffer_out_of_range(op: schema.OperatorT, tensors: list[schema.TensorT], model: schema.ModelT) -> None:
    constants = [int(i) for i in op.inputs if i >= 0 and tensors[int(i)].buffer > 0]
    for index in constants or [int(op.outputs[0])]:
        tensors[index].buffer = len(model.buffers) + 7


def _index_out_of_range(op: schema.OperatorT, tensors: list[schema.TensorT], model: schema.ModelT) -> None:
    op.inputs = np.asarray([len(tensors) + 3, *list(op.inputs)[1:]], dtype=np.int32)


MUTATIONS = {"other_options": _other_options, "other_type": _other_type, "other_rank": _other_rank,
             "buffer_out_of_range": _buffer_out_of_range, "index_out_of_range": _index_out_of_range}


def _mutated(rewrite: Rewrite, data: bytes, mutation: Callable[..., None], where: int = 0) -> bytes:
    """``data`` as the rewrite finds it (the batch fixed and folded; the other rewrites applied before a priced
    rewrite) with the operator of its first site mutated."""
    model = unpack_model(data)
    subgraph = model.subgraphs[0]
    fix_batch(subgraph)
    for before in (rewrite for rewrite in PIPELINE if not rewrite.priced):  # what normalisation applies before it
        if before is rewrite:
            break
        before.apply(model, subgraph, before.find(model, subgraph))
    plans = rewrite.find(model, subgraph)
    assert plans, f"the {rewrite.name} model has no site"
    # The operator the site starts at, or, for a chain of operators, the one at ``where`` in it.
    chain = getattr(plans[0], "positions", (plans[0].position,))
    mutation(subgraph.operators[chain[where * (len(chain) - 1) // 2]], subgraph.tensors, model)
    return pack_model(model)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_mutated_site_is_an_error_line_or_left_alone(name: str, mutation: str) -> None:
    make, stage = MODELS[name]
    bad = _mutated(_BY_NAME[name], make(), MUTATIONS[mutation])
    arch = load_architecture("ethos-u65-256")
    try:
        normalised, _ = normalise(bad, GraphRecipe(stage_maps=stage), "bad.tflite")
        model = parse_tflite(normalised, "bad.tflite")
        validate_model(model)
        lower_model(model, arch, IN_PLACE)
    except NpuschedError as exc:  # the CLI's one-line error
        assert "\n" not in str(exc) and str(exc)


@pytest.mark.parametrize("where", [1, 2], ids=["middle", "last"])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("name", ["dilated_convolution", "nearest_upsampling", "padded_convolution",
                                  "dilated_sequence"])
def test_a_chain_mutated_inside_is_an_error_line_or_left_alone(name: str, mutation: str, where: int) -> None:
    """The rewrites of operator chains read every operator of the chain defensively, not only its first."""
    make, stage = MODELS[name]
    bad = _mutated(_BY_NAME[name], make(), MUTATIONS[mutation], where)
    try:
        lower_model(parse_tflite(normalise(bad, GraphRecipe(stage_maps=stage), "bad.tflite")[0], "bad.tflite"),
                    load_architecture("ethos-u65-256"), IN_PLACE)
    except NpuschedError as exc:
        assert "\n" not in str(exc) and str(exc)


def test_the_cli_prints_one_error_line_for_a_convolution_with_lstm_options(tmp_path, capsys) -> None:
    """The issue's case: a CONV_2D carrying another operator's options table, through the whole run."""
    bad = _mutated(_BY_NAME["widened_output"], MODELS["widened_output"][0](), _other_options)
    path = tmp_path / "bad.tflite"
    path.write_bytes(bad)
    status = main([str(path), *vela_hardware_args(CONFIGS["u65-256_mid_dedicated256k"]), "--solver", "heuristic",
                   "--quiet"])
    err = capsys.readouterr().err
    assert status in (0, 2) and "internal error" not in err and "Traceback" not in err
    assert status == 0 or (err.startswith("error: ") and err.count("\n") == 1)
