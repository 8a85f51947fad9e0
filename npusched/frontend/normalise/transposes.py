"""A TRANSPOSE Vela legacy does not run written as the block swaps it does run (``transposition``).

onnx2tf writes PyTorch's NCHW <-> NHWC changes inside a network as TRANSPOSE [0, 3, 1, 2] / [0, 2, 3, 1] (before a
flatten, around YOLO's C2f), Keras 3 writes attention's head split and einsums as 5-D TRANSPOSEs
([0, 1, 3, 2, 4] on [1, P, N, H, d]), and a PyTorch pixel shuffle is a 6-D one. Vela legacy runs a TRANSPOSE only
as a swap of H and W (or W and C beside a unit axis, or 2-D), so each is a CPU operator; the default core runs the
4-D ones. The same permutation as at most one swap [A, B, C] -> [B, A, C] per merged axis group is a chain of
RESHAPEs and TRANSPOSEs Vela legacy runs, moving the same bytes to the same places (exact by construction; the
permutation of the groups is checked on the index maps when found). A TRANSPOSE that reads a network input or writes
a network output is left as it is: it changes the layout to or from the caller's (the corpus' mobilenet_v2 takes
NCHW, a PyTorch-style U-Net returns it), which Vela legacy's graph keeps on the CPU, and npusched's schedules of
those models stay as they were. Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    int_input,
    ints,
    name,
    opcode,
    replace_operators,
    same_quantisation,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.frontend.normalise.transposition import Swap, groups, steps, swap_operators
from npusched.frontend.npu_rules import legacy_transpose

# A transpose of more swaps than this is left to the CPU (each swap is a pass over the whole map).
MAX_SWAPS = 4


@dataclass(frozen=True)
class TransposePlan:
    """The TRANSPOSE at ``position`` and the swaps that do it."""

    site: Site
    position: int
    swaps: tuple[Swap, ...]
    operators: int = 1


def find_transposes(model: ModelT, subgraph: SubGraphT) -> list[TransposePlan]:
    """Every TRANSPOSE of a static map outside Vela legacy's forms, neither of a network input nor to a network
    output, that swaps do."""
    graph_ends = set(ints(subgraph.inputs)) | set(ints(subgraph.outputs))
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        if opcode(model, op) != "TRANSPOSE" or len(inputs) != 2 or len(outputs) != 1 or inputs[0] < 0 \
                or {inputs[0], *outputs} & graph_ends or not well_formed(subgraph, op):
            continue
        shape = static_shape(tensor_at(subgraph, inputs[0]))
        perm_value = int_input(model, subgraph, op, 1)
        if shape is None or perm_value is None or perm_value.ndim != 1 or len(shape) != perm_value.size \
                or sorted(int(p) for p in perm_value) != list(range(len(shape))):
            continue
        perm = tuple(int(p) for p in perm_value)
        # Vela legacy's forms, but not a 4-D one of batch over 1 (its generic rule leaves that to the CPU).
        legacy = len(shape) <= 4 and legacy_transpose(shape, perm) and not (len(shape) == 4 and shape[0] != 1)
        if legacy or not same_quantisation(subgraph, inputs[0], outputs[0]):
            continue
        swaps = _swaps(shape, perm)
        out_shape = static_shape(tensor_at(subgraph, outputs[0]))
        if swaps is None or out_shape != tuple(shape[p] for p in perm):
            continue
        plans.append(TransposePlan(Site("transpose", name(subgraph.tensors[outputs[0]])), position, tuple(swaps)))
    return plans


def _swaps(shape: tuple[int, ...], perm: tuple[int, ...]) -> list[Swap] | None:
    """The swaps of ``perm`` on ``shape``, checked to move every element where the TRANSPOSE does."""
    sizes, order = groups(shape, perm)
    swaps = steps(sizes, order)
    if swaps is None or not swaps or len(swaps) > MAX_SWAPS:
        return None
    index = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    moved = index
    for swap in swaps:
        moved = np.transpose(moved.reshape(swap.shape), (1, 0, 2)).reshape(-1)
    return swaps if np.array_equal(moved, np.transpose(index.reshape(shape), perm).reshape(-1)) else None


def rewrite_transposes(model: ModelT, subgraph: SubGraphT, plans: Sequence[TransposePlan]) -> None:
    replace_operators(subgraph, {plan.position: _swapped(model, subgraph, plan) for plan in plans})


def _swapped(model: ModelT, subgraph: SubGraphT, plan: TransposePlan) -> list[OperatorT]:
    op = subgraph.operators[plan.position]
    source, output = ints(op.inputs)[0], ints(op.outputs)[0]
    return swap_operators(model, subgraph, source, output, list(plan.swaps), subgraph.tensors[output], "")


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'TRANSPOSE')} written as block swaps Vela legacy runs"


TRANSPOSES = Rewrite("transpose", priced=False, find=find_transposes, apply=rewrite_transposes, describe=_describe)
