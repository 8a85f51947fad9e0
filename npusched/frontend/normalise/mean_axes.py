"""A MEAN's negative axes written as the non-negative ones they name.

Keras 3 writes every LayerNormalization's moments as MEAN over axis -1. TFLite counts a negative axis from the
input's rank, so -1 is the last axis; Vela legacy's semantic check takes axes only in [0, rank) and leaves such a
MEAN to the CPU (both per layer norm: the mean and the variance). The same MEAN with the axis counted from the
front reduces the same elements, so the kernel computes every element as before. Each site gets its own axis
constant (converters share one between every layer norm). Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    SubGraphT,
    const_int32,
    int_input,
    ints,
    name,
    opcode,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class AxesPlan:
    """A MEAN (at ``position``) and the non-negative axes it is given."""

    site: Site
    position: int
    axes: tuple[int, ...]
    operators: int = 1


def find_mean_axes(model: ModelT, subgraph: SubGraphT) -> list[AxesPlan]:
    """Every MEAN of a static map whose constant axes hold a negative one, each in range."""
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        if opcode(model, op) != "MEAN" or len(inputs) != 2 or len(outputs) != 1 or inputs[0] < 0 \
                or not well_formed(subgraph, op):
            continue
        shape = static_shape(tensor_at(subgraph, inputs[0]))
        axes = int_input(model, subgraph, op, 1)
        if shape is None or axes is None or axes.ndim > 1 or axes.size == 0:
            continue
        values = [int(a) for a in axes.reshape(-1)]
        rank = len(shape)
        if min(values) >= 0 or any(not -rank <= a < rank for a in values):
            continue
        resolved = tuple(a % rank for a in values)
        if len(set(resolved)) != len(resolved):
            continue
        plans.append(AxesPlan(Site("mean_axis", name(subgraph.tensors[outputs[0]])), position, resolved))
    return plans


def write_mean_axes(model: ModelT, subgraph: SubGraphT, plans: Sequence[AxesPlan]) -> None:
    """Each planned MEAN reads a new constant of its non-negative axes."""
    for plan in plans:
        op = subgraph.operators[plan.position]
        inputs = ints(op.inputs)
        label = f"{name(subgraph.tensors[ints(op.outputs)[0]])}/axes"
        inputs[1] = const_int32(model, subgraph, label, list(plan.axes), (len(plan.axes),))
        op.inputs = np.asarray(inputs, dtype=np.int32)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'MEAN')} with negative axes counted from the front"


MEAN_AXES = Rewrite("mean_axis", priced=False, find=find_mean_axes, apply=write_mean_axes, describe=_describe)
