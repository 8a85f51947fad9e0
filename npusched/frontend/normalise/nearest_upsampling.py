"""Nearest up-sampling Keras 3 wrote as repeats, written back as RESIZE_NEAREST_NEIGHBOR.

Keras 3's UpSampling2D (interpolation "nearest") is ``ops.repeat`` along the height and then the width, which TF
writes as EXPAND_DIMS (a unit axis after the repeated one) -> TILE (the factor on that unit axis) -> RESHAPE
(merging it back) per axis, through 5-D maps. Neither Vela core's legacy path runs TILE or 5-D maps on the NPU:
each up-sampling is six CPU operators between two NPU subgraphs. A repeat by f along an axis is a nearest resize
by f along it (without align-corners or half-pixel centres, output row y reads input row floor(y / f)), so two
such chains in turn over the height and the width become one RESIZE_NEAREST_NEIGHBOR of the 4-D map, and a lone
chain one resizing that axis only. The map keeps its quantisation, as every operator of the chain does. Not
priced: without it the up-sampling runs on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    const_int32,
    int_input,
    ints,
    name,
    new_operator,
    opcode,
    readers,
    replace_operators,
    same_quantisation,
    sole_reader,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class Repeat:
    """EXPAND_DIMS -> TILE -> RESHAPE at ``positions``: ``source`` [1, H, W, C] repeated ``factor`` times along
    ``axis`` (1 height, 2 width) into ``output``."""

    positions: tuple[int, int, int]
    source: int
    output: int
    axis: int
    factor: int


@dataclass(frozen=True)
class UpsamplingPlan:
    """One or two repeats in turn (over both axes) and the (height, width) factors of the resize they become."""

    site: Site
    position: int
    repeats: tuple[Repeat, ...]
    factors: tuple[int, int]
    operators: int = 1

    @property
    def positions(self) -> tuple[int, ...]:
        return tuple(p for r in self.repeats for p in r.positions)


def find_nearest_upsamplings(model: ModelT, subgraph: SubGraphT) -> list[UpsamplingPlan]:
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    repeats = {}
    for position, op in enumerate(operators):
        if opcode(model, op) == "EXPAND_DIMS" and well_formed(subgraph, op):
            found = _repeat(model, subgraph, operators, read, kept, position)
            if found is not None:
                repeats[found.source] = found
    plans = []
    taken: set[int] = set()
    for first in sorted(repeats.values(), key=lambda r: r.positions):
        if first.source in taken:
            continue
        second = repeats.get(first.output)
        # Merged only where nothing else reads the map between the two (it is no longer made).
        pair = second is not None and second.axis != first.axis and len(read.get(first.output, [])) == 1 \
            and first.output not in kept
        chain = (first, second) if pair and second is not None else (first,)
        taken.update(r.source for r in chain)
        factors = [1, 1]
        for r in chain:
            factors[r.axis - 1] = r.factor
        plans.append(UpsamplingPlan(Site("nearest_upsampling", name(subgraph.tensors[chain[-1].output])),
                                    first.positions[0], chain, (factors[0], factors[1])))
    return plans


def _repeat(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
            kept: set[int], position: int) -> Repeat | None:
    expand = operators[position]
    inputs = ints(expand.inputs)
    shape = static_shape(tensor_at(subgraph, inputs[0])) if inputs else None
    axis = int_input(model, subgraph, expand, 1) if len(inputs) == 2 else None
    if shape is None or len(shape) != 4 or shape[0] != 1 or axis is None or axis.size != 1 \
            or int(axis.reshape(-1)[0]) % 5 not in (2, 3):
        return None
    unit_axis = int(axis.reshape(-1)[0]) % 5
    chain = [position]
    index = ints(expand.outputs)[0]
    for kind in ("TILE", "RESHAPE"):
        step = sole_reader(operators, read, kept, index)
        if step is None or opcode(model, step[1]) != kind or not well_formed(subgraph, step[1]) \
                or len(ints(step[1].outputs)) != 1:
            return None
        op, op_inputs = step[1], ints(step[1].inputs)
        if kind == "TILE":
            multiples = int_input(model, subgraph, op, 1) if len(op_inputs) == 2 else None
            if multiples is None or multiples.shape != (5,):
                return None
            factor = int(multiples[unit_axis])
            if factor < 2 or any(int(m) != 1 for i, m in enumerate(multiples) if i != unit_axis):
                return None
        chain.append(step[0])
        index = ints(op.outputs)[0]
    repeated = list(shape)
    repeated[unit_axis - 1] *= factor
    if static_shape(tensor_at(subgraph, index)) != tuple(repeated) \
            or not same_quantisation(subgraph, inputs[0], index):
        return None
    return Repeat((chain[0], chain[1], chain[2]), inputs[0], index, unit_axis - 1, factor)


def rewrite_nearest_upsamplings(model: ModelT, subgraph: SubGraphT, plans: Sequence[UpsamplingPlan]) -> None:
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        positions = plan.positions
        replaced.update((p, []) for p in positions[:-1])
        source, output = plan.repeats[0].source, plan.repeats[-1].output
        out_shape = [int(v) for v in subgraph.tensors[output].shape]
        size = const_int32(model, subgraph, f"{name(subgraph.tensors[output])}/size", out_shape[1:3], (2,))
        resize_options = schema.ResizeNearestNeighborOptionsT()
        resize_options.alignCorners, resize_options.halfPixelCenters = False, False
        replaced[positions[-1]] = [new_operator(model, schema.BuiltinOperator.RESIZE_NEAREST_NEIGHBOR,
                                                [source, size], [output],
                                                schema.BuiltinOptions.ResizeNearestNeighborOptions, resize_options)]
    replace_operators(subgraph, replaced)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'repeat-written nearest up-sampling')} written as RESIZE_NEAREST_NEIGHBOR"


NEAREST_UPSAMPLING = Rewrite("nearest_upsampling", priced=False, find=find_nearest_upsamplings,
                             apply=rewrite_nearest_upsamplings, describe=_describe)
