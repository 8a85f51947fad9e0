"""Any permutation of a map's axes as transposes Vela legacy runs: block swaps [A, B, C] -> [B, A, C].

Vela legacy's TRANSPOSE (an AvgPool writing its OFM with swapped strides) runs a rank-3 [A, B, C] -> [B, A, C] for
any A, B, C (its rule "HxWxC -> WxHxC"; the map is [1, A, B, C] to it), besides a few forms of rank 2 and 4. Every
permutation is a sequence of such swaps of the map's bytes read at other shapes: drop the unit axes, merge axes that
stay neighbours in the same order (``groups``), then, from the last position to the first, bring the group that
belongs there to the end of the part not yet placed by swapping the two blocks around it (``steps``): at most one
swap per group. Each step is RESHAPE to [A, B, C] -> TRANSPOSE [1, 0, 2]; pure data movement, so exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    TensorT,
    add_tensor,
    const_int32,
    name,
    new_operator,
    reshape_op,
)

# Vela's limit on any dimension of an NPU map.
MAX_DIMENSION = 65536


@dataclass(frozen=True)
class Swap:
    """One block swap: the map read as [A, B, C] written as [B, A, C]."""

    shape: tuple[int, int, int]

    @property
    def swapped(self) -> tuple[int, int, int]:
        a, b, c = self.shape
        return (b, a, c)


def groups(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The permutation on merged axes: the sizes of the groups of ``shape`` (unit axes dropped, neighbours that
    stay neighbours merged) and the order ``perm`` puts them in."""
    kept = [axis for axis in perm if shape[axis] != 1]
    runs: list[list[int]] = []
    for axis in kept:
        if runs and runs[-1][-1] + 1 == axis:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    by_start = sorted(runs, key=lambda run: run[0])
    sizes = [int(np.prod([shape[a] for a in run], dtype=np.int64)) for run in by_start]
    order = [by_start.index(run) for run in runs]
    return sizes, order


def steps(sizes: list[int], order: list[int]) -> list[Swap] | None:
    """The swaps that put groups of ``sizes`` (in input order) into ``order``; None where a block is larger than
    Vela's dimension limit."""
    current = list(range(len(sizes)))
    swaps = []
    for position in range(len(current) - 1, 0, -1):
        found = current.index(order[position])
        if found == position:
            continue
        front, back, rest = current[:found + 1], current[found + 1:position + 1], current[position + 1:]
        block = (_product(sizes, front), _product(sizes, back), _product(sizes, rest))
        if max(block) > MAX_DIMENSION:
            return None
        swaps.append(Swap(block))
        current = back + front + rest
    return swaps


def _product(sizes: list[int], members: list[int]) -> int:
    return int(np.prod([sizes[m] for m in members], dtype=np.int64))


def swap_operators(model: ModelT, subgraph: SubGraphT, source: int, target: int, swaps: list[Swap],
                   like: TensorT, label: str) -> list[OperatorT]:
    """RESHAPE -> TRANSPOSE [1, 0, 2] per swap, from ``source`` to ``target`` (reshaped to its shape at the end):
    the new maps named after ``label``, with ``like``'s type and quantisation."""
    operators: list[OperatorT] = []
    current = source
    for number, swap in enumerate(swaps):
        viewed = add_tensor(subgraph, like, f"{label}/swap{number}/in", swap.shape)
        swapped = add_tensor(subgraph, like, f"{label}/swap{number}", swap.swapped)
        perm = const_int32(model, subgraph, f"{name(like)}{label}/swap{number}/perm", [1, 0, 2], (3,))
        operators.append(reshape_op(model, subgraph, current, viewed, swap.shape))
        operators.append(new_operator(model, schema.BuiltinOperator.TRANSPOSE, [viewed, perm], [swapped],
                                      schema.BuiltinOptions.TransposeOptions, schema.TransposeOptionsT()))
        current = swapped
    shape = tuple(int(v) for v in subgraph.tensors[target].shape)
    operators.append(reshape_op(model, subgraph, current, target, shape))
    return operators

