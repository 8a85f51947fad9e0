"""A MEAN over the channels (or any axes) that Vela legacy does not run, written as the same MEAN over the depth of
a 3-D view: [1, kept, reduced].

Every layer norm of a convolutional network (ConvNeXt's, MobileViT's on [1, P, N, D]) averages each pixel's
channels: MEAN over the last axis of [1, H, W, C]; a GroupNormalization averages [1, H, W, G, C / G] over H, W and
C / G. Neither Vela core runs these on the NPU: the legacy core reduces the depth only where H, W or C is 1 (it
then moves C into W and sums it with a depthwise convolution) and no map of more than 4 dimensions, the default
core neither. Each output of a MEAN is the mean of the elements that share its kept coordinates, whatever their
order: the map's axes are grouped (unit axes dropped, neighbours of one kind merged), the kept groups brought in
front of the reduced ones by block swaps Vela legacy runs where they are not (``transposition``: none for a
channel mean, one for a group norm), and the bytes read as [1, kept, reduced] (RESHAPEs, no data moved). MEAN over
axis 2 of that view sums exactly the elements the original sums, divides by the same count and requantises with
the same scales, and the reference kernel (``QuantizedMeanOrSum``) computes each output from those alone: every
element is as before. Vela legacy runs it (the depth of a 3-D map whose batch is 1; at most 4096 elements reduced).
A RESHAPE gives the output its shape. Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    const_int32,
    copied_operator,
    int_input,
    ints,
    name,
    opcode,
    options,
    replace_operators,
    reshape_op,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.frontend.normalise.transposition import MAX_DIMENSION, Swap, steps, swap_operators

# Vela legacy reduces at most this many elements along the width or depth of a MEAN.
MAX_REDUCED = 64 * 64
# A MEAN needing more swaps than this is left to the CPU (each swap is a pass over the whole map).
MAX_SWAPS = 2


@dataclass(frozen=True)
class MeanPlan:
    """A MEAN at ``position`` computed as [swaps] -> MEAN over axis 2 of [1, kept, reduced] -> RESHAPE."""

    site: Site
    position: int
    swaps: tuple[Swap, ...]
    kept: int
    reduced: int
    operators: int = 1


def find_channel_means(model: ModelT, subgraph: SubGraphT) -> list[MeanPlan]:
    """Every MEAN of a static map over constant axes that Vela legacy does not run as it is and the view runs."""
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        if opcode(model, op) != "MEAN" or len(inputs) != 2 or len(outputs) != 1 or inputs[0] < 0 \
                or options(op, schema.ReducerOptionsT) is None or not well_formed(subgraph, op):
            continue
        shape = static_shape(tensor_at(subgraph, inputs[0]))
        axes_value = int_input(model, subgraph, op, 1)
        out_shape = static_shape(tensor_at(subgraph, outputs[0]))
        if shape is None or out_shape is None or axes_value is None or axes_value.ndim > 1 or not shape \
                or any(not -len(shape) <= int(a) < len(shape) for a in axes_value.reshape(-1)):
            continue
        axes = sorted({int(a) % len(shape) for a in axes_value.reshape(-1)})
        if _legacy_runs(shape, axes):
            continue
        plan = _plan(shape, axes, out_shape)
        if plan is not None:
            swaps, kept, reduced = plan
            plans.append(MeanPlan(Site("channel_mean", name(subgraph.tensors[outputs[0]])), position, tuple(swaps),
                                  kept, reduced))
    return plans


def _legacy_runs(shape: tuple[int, ...], axes: list[int]) -> bool:
    """Vela legacy's semantic rule for MEAN axes (its size limits aside): 2-4 dimensions, the batch only where it
    is 1, the depth only where a unit axis lets it move the channels into the width."""
    rank = len(shape)
    if not 2 <= rank <= 4:
        return False
    if rank == 4 and 0 in axes and shape[0] != 1:
        return False
    depth_ok = (1 in shape) if rank == 3 else (1 in shape[1:]) if rank == 4 else True
    return not (rank - 1 in axes and rank >= 3 and not depth_ok)


def _plan(shape: tuple[int, ...], axes: list[int], out_shape: tuple[int, ...]
          ) -> tuple[list[Swap], int, int] | None:
    """The swaps bringing the kept axis groups before the reduced ones, and the sizes of both; None where the
    view is outside Vela legacy's limits or the output does not hold the kept elements."""
    groups: list[tuple[bool, int]] = []
    for axis, size in enumerate(shape):
        if size == 1:
            continue
        is_reduced = axis in axes
        if groups and groups[-1][0] == is_reduced:
            groups[-1] = (is_reduced, groups[-1][1] * size)
        else:
            groups.append((is_reduced, size))
    order = [i for i, (r, _) in enumerate(groups) if not r] + [i for i, (r, _) in enumerate(groups) if r]
    swaps = steps([size for _, size in groups], order)
    kept = int(np.prod([size for r, size in groups if not r], dtype=np.int64))
    reduced = int(np.prod([size for r, size in groups if r], dtype=np.int64))
    if swaps is None or len(swaps) > MAX_SWAPS or reduced < 2 or reduced > MAX_REDUCED or kept > MAX_DIMENSION \
            or int(np.prod(out_shape, dtype=np.int64)) != kept:
        return None
    return swaps, kept, reduced


def rewrite_channel_means(model: ModelT, subgraph: SubGraphT, plans: Sequence[MeanPlan]) -> None:
    replace_operators(subgraph, {plan.position: _viewed(model, subgraph, plan) for plan in plans})


def _viewed(model: ModelT, subgraph: SubGraphT, plan: MeanPlan) -> list[OperatorT]:
    """[swaps ->] RESHAPE to [1, kept, reduced] -> MEAN over axis 2 -> RESHAPE to the output's shape."""
    op = subgraph.operators[plan.position]
    source, output = ints(op.inputs)[0], ints(op.outputs)[0]
    tensors = subgraph.tensors
    view = add_tensor(subgraph, tensors[source], "/mean_view", (1, plan.kept, plan.reduced))
    if plan.swaps:
        operators = swap_operators(model, subgraph, source, view, list(plan.swaps), tensors[source], "/mean_view")
    else:
        operators = [reshape_op(model, subgraph, source, view, (1, plan.kept, plan.reduced))]
    mean = add_tensor(subgraph, tensors[output], "/mean_view", (1, plan.kept, 1))
    axis = const_int32(model, subgraph, f"{name(tensors[output])}/mean_view/axis", [2], (1,))
    out_shape = tuple(int(v) for v in tensors[output].shape)
    return [*operators, copied_operator(op, [view, axis], [mean], keepDims=True),
            reshape_op(model, subgraph, mean, output, out_shape)]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'MEAN')} over the channels written over the depth of [1, kept, reduced]"


CHANNEL_MEANS = Rewrite("channel_mean", priced=False, find=find_channel_means, apply=rewrite_channel_means,
                        describe=_describe)
