"""REDUCE_MAX over a map's height and width written as the MAX_POOL_2D of one window that covers them.

Keras's GlobalMaxPooling2D is REDUCE_MAX over axes [1, 2] of [1, H, W, C]. Vela legacy has no NPU form of
REDUCE_MAX (it leaves it to the CPU, splitting the NPU work before the classifier); its default core runs it. A
MAX_POOL_2D whose VALID window is the whole H x W (stride 1) takes the maximum of the same elements per channel
into [1, 1, 1, C]: the maximum of int8 values is one of them, and both kernels keep the input's quantisation (TFLite
requires REDUCE_MAX's input and output to share it, and MAX_POOL_2D copies values unrescaled), so every element is
as before. A RESHAPE gives the output its shape where REDUCE_MAX dropped the axes. Reducing one of H and W is the
window of that axis. Vela legacy runs the pool where the window is within its limits (at most 256 rows, 65536
elements). Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    int_input,
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

_TYPES = frozenset({schema.TensorType.INT8, schema.TensorType.INT16})
# Vela legacy's MAX_POOL_2D window: at most this many rows, and this many elements.
MAX_WINDOW_HEIGHT = 256
MAX_WINDOW_AREA = 256 * 256


@dataclass(frozen=True)
class MaxPlan:
    """A REDUCE_MAX at ``position`` as a MAX_POOL_2D of the ``window`` (height, width), then a RESHAPE where its
    output drops the reduced axes (``reshaped``)."""

    site: Site
    position: int
    window: tuple[int, int]
    reshaped: bool
    operators: int = 1


def find_max_reductions(model: ModelT, subgraph: SubGraphT) -> list[MaxPlan]:
    """Every REDUCE_MAX of a static int8 or int16 [1, H, W, C] map over H, W or both, its quantisation kept."""
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        reducer = options(op, schema.ReducerOptionsT)
        if opcode(model, op) != "REDUCE_MAX" or len(inputs) != 2 or len(outputs) != 1 or inputs[0] < 0 \
                or reducer is None or not well_formed(subgraph, op):
            continue
        shape = static_shape(tensor_at(subgraph, inputs[0]))
        out_shape = static_shape(tensor_at(subgraph, outputs[0]))
        axes = int_input(model, subgraph, op, 1)
        if shape is None or out_shape is None or len(shape) != 4 or shape[0] != 1 or axes is None \
                or axes.ndim > 1 or subgraph.tensors[inputs[0]].type not in _TYPES \
                or not same_quantisation(subgraph, inputs[0], outputs[0]):
            continue
        reduced = {int(a) % 4 for a in axes.reshape(-1) if -4 <= int(a) < 4}
        if len(reduced) != axes.size or not reduced or not reduced <= {1, 2}:
            continue
        window = (shape[1] if 1 in reduced else 1, shape[2] if 2 in reduced else 1)
        pooled = (1, 1 if 1 in reduced else shape[1], 1 if 2 in reduced else shape[2], shape[3])
        if window[0] > MAX_WINDOW_HEIGHT or window[0] * window[1] > MAX_WINDOW_AREA \
                or math.prod(out_shape) != math.prod(pooled):
            continue
        plans.append(MaxPlan(Site("max_reduction", name(subgraph.tensors[outputs[0]])), position, window,
                             out_shape != pooled))
    return plans


def rewrite_max_reductions(model: ModelT, subgraph: SubGraphT, plans: Sequence[MaxPlan]) -> None:
    replace_operators(subgraph, {plan.position: _pooled(model, subgraph, plan) for plan in plans})


def _pooled(model: ModelT, subgraph: SubGraphT, plan: MaxPlan) -> list[OperatorT]:
    op = subgraph.operators[plan.position]
    source, output = ints(op.inputs)[0], ints(op.outputs)[0]
    tensors = subgraph.tensors
    shape = tuple(int(v) for v in tensors[source].shape)
    pooled_shape = (1, shape[1] // plan.window[0], shape[2] // plan.window[1], shape[3])
    target = add_tensor(subgraph, tensors[output], "/pooled", pooled_shape) if plan.reshaped else output
    pool = schema.Pool2DOptionsT()
    pool.padding = schema.Padding.VALID
    pool.strideH = pool.strideW = 1
    pool.filterHeight, pool.filterWidth = plan.window
    made = [new_operator(model, schema.BuiltinOperator.MAX_POOL_2D, [source], [target],
                         schema.BuiltinOptions.Pool2DOptions, pool)]
    if plan.reshaped:
        made.append(reshape_op(model, subgraph, target, output, tuple(int(v) for v in tensors[output].shape)))
    return made


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'REDUCE_MAX')} over height and width written as MAX_POOL_2D"


MAX_REDUCTIONS = Rewrite("max_reduction", priced=False, find=find_max_reductions, apply=rewrite_max_reductions,
                         describe=_describe)
