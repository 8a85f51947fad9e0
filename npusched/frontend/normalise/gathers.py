"""A GATHER of a map at constant, consecutive indices written as the SLICE of those positions.

onnx2tf writes PyTorch's ``output[:, -1]`` after an unrolled GRU or LSTM (the last time step, read by the
classifier) as GATHER(axis 1, index 48) of [1, 49, 32]. Neither Vela core runs GATHER on the NPU, so it splits the
NPU work. Indices that are one constant or a run of consecutive ones select a block of the map along the axis:
SLICE of that block (a RESHAPE after it where one index drops the axis) moves the same elements in the same order,
and GATHER keeps its input's quantisation, so every element is as before. Vela legacy runs SLICE (a copy of the
block). Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    const_int32,
    constant,
    ints,
    name,
    new_operator,
    opcode,
    options,
    replace_operators,
    reshape_op,
    same_quantisation,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class GatherPlan:
    """The GATHER at ``position``: the block [begin, begin + size) along ``axis``; ``dropped``: a scalar index, so
    the output has no such axis."""

    site: Site
    position: int
    axis: int
    begin: int
    size: int
    dropped: bool
    operators: int = 1


def find_gathers(model: ModelT, subgraph: SubGraphT) -> list[GatherPlan]:
    """Every GATHER of a static activation at constant consecutive indices (batch_dims 0), its quantisation kept."""
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        gather = options(op, schema.GatherOptionsT)
        if opcode(model, op) != "GATHER" or len(inputs) != 2 or len(outputs) != 1 or min(inputs) < 0 \
                or gather is None or gather.batchDims or not well_formed(subgraph, op):
            continue
        shape = static_shape(tensor_at(subgraph, inputs[0]))
        out_shape = static_shape(tensor_at(subgraph, outputs[0]))
        indices = constant(model, subgraph.tensors[inputs[1]])
        if shape is None or out_shape is None or indices is None or indices.dtype.kind != "i" \
                or indices.ndim > 1 or indices.size == 0 or constant(model, subgraph.tensors[inputs[0]]) is not None \
                or not same_quantisation(subgraph, inputs[0], outputs[0]) \
                or not -len(shape) <= gather.axis < len(shape):
            continue
        axis = int(gather.axis) % len(shape)
        values = [int(v) % shape[axis] if -shape[axis] <= int(v) < shape[axis] else -1 for v in indices.reshape(-1)]
        if min(values) < 0 or values != list(range(values[0], values[0] + len(values))):
            continue
        dropped = indices.ndim == 0
        sliced = (*shape[:axis], len(values), *shape[axis + 1:])
        wanted = (*shape[:axis], *shape[axis + 1:]) if dropped else sliced
        if out_shape != wanted:
            continue
        plans.append(GatherPlan(Site("gather", name(subgraph.tensors[outputs[0]])), position, axis, values[0],
                                len(values), dropped))
    return plans


def rewrite_gathers(model: ModelT, subgraph: SubGraphT, plans: Sequence[GatherPlan]) -> None:
    replace_operators(subgraph, {plan.position: _sliced(model, subgraph, plan) for plan in plans})


def _sliced(model: ModelT, subgraph: SubGraphT, plan: GatherPlan) -> list[OperatorT]:
    op = subgraph.operators[plan.position]
    source, output = ints(op.inputs)[0], ints(op.outputs)[0]
    tensors = subgraph.tensors
    shape = [int(v) for v in tensors[source].shape]
    begin = [0] * len(shape)
    begin[plan.axis] = plan.begin
    size = list(shape)
    size[plan.axis] = plan.size
    label = name(tensors[output])
    target = add_tensor(subgraph, tensors[output], "/slice", tuple(size)) if plan.dropped else output
    made = [new_operator(model, schema.BuiltinOperator.SLICE,
                         [source, const_int32(model, subgraph, f"{label}/begin", begin, (len(begin),)),
                          const_int32(model, subgraph, f"{label}/size", size, (len(size),))], [target],
                         schema.BuiltinOptions.SliceOptions, schema.SliceOptionsT())]
    if plan.dropped:
        made.append(reshape_op(model, subgraph, target, output, tuple(int(v) for v in tensors[output].shape)))
    return made


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'GATHER')} of consecutive constant indices written as SLICE"


GATHERS = Rewrite("gather", priced=False, find=find_gathers, apply=rewrite_gathers, describe=_describe)
