"""A swish's gate first: MUL(x, LOGISTIC(x)) -> MUL(LOGISTIC(x), x) (priced).

The first operand of an element-wise pass is the one a cascade can follow from the pass making it; the second is
held whole (``npusched.schedule.cascades.elementwise_cascadable``). With the gate first, CP-SAT may cascade
LOGISTIC -> MUL -> the next convolution with x held. MUL commutes: the same products, the same rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    SubGraphT,
    ints,
    name,
    opcode,
    readers,
    static_shape,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class GatePlan:
    site: Site
    position: int
    operators: int = 1


def find_gates(model: ModelT, subgraph: SubGraphT) -> list[GatePlan]:
    """MULs of two same-shape feature maps (more than one row: something to cascade) whose second operand is read
    by nothing else and whose first is read elsewhere too, as in a swish x * logistic(x)."""
    operators = list(subgraph.operators or [])
    read = readers(operators)
    made = {index for op in operators for index in ints(op.outputs)}
    plans = []
    for position, op in enumerate(operators):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        if opcode(model, op) != "MUL" or len(inputs) != 2 or len(outputs) != 1 or not well_formed(subgraph, op) \
                or not all(i in made for i in inputs) or inputs[0] == inputs[1]:
            continue
        first, second = (static_shape(subgraph.tensors[i]) for i in inputs)
        if first is None or first != second or len(first) != 4 or first[1] < 2 \
                or len(read.get(inputs[1], [])) != 1 or len(read.get(inputs[0], [])) < 2:
            continue
        plans.append(GatePlan(Site("gate_first", name(subgraph.tensors[outputs[0]])), position))
    return plans


def put_gates_first(model: ModelT, subgraph: SubGraphT, plans: Sequence[GatePlan]) -> None:
    for plan in plans:
        op = subgraph.operators[plan.position]
        op.inputs = np.asarray(ints(op.inputs)[::-1], dtype=np.int32)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'MUL')} with the gate first"


GATES_FIRST = Rewrite("gate_first", priced=True, find=find_gates, apply=put_gates_first, describe=_describe)
