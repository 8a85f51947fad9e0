"""Nearest up-sampling Keras 3 wrote as repeats, written back as RESIZE_NEAREST_NEIGHBOR.

Keras 3's UpSampling2D (interpolation "nearest") is ``ops.repeat`` along the height and then the width, which TF
writes as EXPAND_DIMS (a unit axis after the repeated one) -> TILE (the factor on that unit axis) -> RESHAPE
(merging it back) per axis, through 5-D maps; a factor of 1 has no TILE, and two up-samplings of one map share its
EXPAND_DIMS. Neither Vela core's legacy path runs TILE or 5-D maps on the NPU: each up-sampling is up to six CPU
operators between two NPU subgraphs. A repeat by f along an axis is a nearest resize by f along it (without
align-corners or half-pixel centres, output row y reads input row floor(y / f)), so two such chains in turn over the
height and the width by one factor become one RESIZE_NEAREST_NEIGHBOR of the 4-D map. Of any other aspect
(DeepLab's non-square up-sampling: 2 x 1) each axis is resized on its own, on a view of the map's bytes that makes
it the only axis resized: a repeat of rows is a resize of [1, H, 1, W C] to [1, f H, 1, W C], a repeat of columns
one of [1, 1, H W, C] to [1, 1, f H W, C] (each pixel repeated in place), which Vela legacy runs for f of 2, 4 or 8
(the resize's scale 1 / f is exact in float, so each output reads floor(y / f)); another factor is f copies of the
view [1, H, 1, W C] (or [1, H W, 1, C]) concatenated along its unit axis; a factor of 1 is a RESHAPE. The map keeps
its quantisation, as every operator of the chain does. Not priced: without it the up-sampling runs on the CPU.
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
    concatenation_op,
    const_int32,
    int_input,
    ints,
    name,
    new_operator,
    opcode,
    readers,
    replace_operators,
    reshape_op,
    same_quantisation,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# The factors Vela legacy resizes by (one axis at a time on a view, or both alike).
RESIZED_FACTORS = frozenset({2, 4, 8})
# A repeat by another factor is that many copies; beyond this it is left to the CPU.
MAX_COPIES = 8


@dataclass(frozen=True)
class Repeat:
    """EXPAND_DIMS at ``expand`` -> TILE (None for a factor of 1) -> RESHAPE: ``source`` [1, H, W, C] repeated
    ``factor`` times along ``axis`` (1 height, 2 width) into ``output``."""

    expand: int
    tile: int | None
    reshape: int
    source: int
    output: int
    axis: int
    factor: int

    @property
    def positions(self) -> tuple[int, ...]:
        return tuple(p for p in (self.expand, self.tile, self.reshape) if p is not None)


@dataclass(frozen=True)
class UpsamplingPlan:
    """One or two repeats in turn (over both axes) and the (height, width) factors of the resize they become; the
    EXPAND_DIMS among them that go (their every reader is rewritten)."""

    site: Site
    position: int
    repeats: tuple[Repeat, ...]
    factors: tuple[int, int]
    dropped: tuple[int, ...]
    operators: int = 1

    @property
    def positions(self) -> tuple[int, ...]:
        return tuple(sorted({*self.dropped, *(p for r in self.repeats for p in r.positions if p != r.expand)}))


def find_nearest_upsamplings(model: ModelT, subgraph: SubGraphT) -> list[UpsamplingPlan]:
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    repeats: dict[int, Repeat] = {}
    for position, op in enumerate(operators):
        if opcode(model, op) == "EXPAND_DIMS" and well_formed(subgraph, op):
            for found in _repeats(model, subgraph, operators, read, kept, position):
                repeats[found.output] = found
    chains: list[tuple[Repeat, ...]] = []
    taken: set[int] = set()
    for first in sorted(repeats.values(), key=lambda r: r.positions):
        if first.output in taken:
            continue
        second = next((r for r in repeats.values() if r.source == first.output), None)
        # Merged only where nothing else reads the map between the two (it is no longer made).
        pair = second is not None and second.axis != first.axis and len(read.get(first.output, [])) == 1 \
            and first.output not in kept
        chain: tuple[Repeat, ...] = (first, second) if pair and second is not None else (first,)
        taken.update(r.output for r in chain)
        chains.append(chain)
    chains = [chain for chain in chains if _one_resize(subgraph, chain)
              or all(r.factor in RESIZED_FACTORS or r.factor <= MAX_COPIES for r in chain)]
    rewritten = {r.reshape for chain in chains for r in chain}
    plans = []
    for chain in chains:
        factors = [1, 1]
        for r in chain:
            factors[r.axis - 1] = r.factor
        # An EXPAND_DIMS goes with the plan of its first reader, once every reader of it is rewritten.
        dropped = tuple(r.expand for r in chain if _owns(r, repeats, read, operators, rewritten))
        plans.append(UpsamplingPlan(Site("nearest_upsampling", name(subgraph.tensors[chain[-1].output])),
                                    chain[0].positions[0], chain, (factors[0], factors[1]), dropped))
    return plans


def _owns(repeat: Repeat, repeats: dict[int, Repeat], read: dict[int, list[int]], operators: list[OperatorT],
          rewritten: set[int]) -> bool:
    """Whether ``repeat`` is the first of the repeats sharing its EXPAND_DIMS, all of which are rewritten."""
    expanded = ints(operators[repeat.expand].outputs)[0]
    sharing = [r for r in repeats.values() if r.expand == repeat.expand]
    every = len(sharing) == len(read.get(expanded, [])) and all(r.reshape in rewritten for r in sharing)
    return every and min(r.reshape for r in sharing) == repeat.reshape


def _repeats(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
             kept: set[int], position: int) -> list[Repeat]:
    """The repeats reading the EXPAND_DIMS at ``position`` (one per reader; none where a reader is no repeat)."""
    expand = operators[position]
    inputs = ints(expand.inputs)
    shape = static_shape(tensor_at(subgraph, inputs[0])) if inputs else None
    axis = int_input(model, subgraph, expand, 1) if len(inputs) == 2 else None
    expanded = ints(expand.outputs)[0] if len(ints(expand.outputs)) == 1 else -1
    if shape is None or len(shape) != 4 or shape[0] != 1 or axis is None or axis.size != 1 \
            or int(axis.reshape(-1)[0]) % 5 not in (2, 3) or expanded < 0 or expanded in kept \
            or not same_quantisation(subgraph, inputs[0], expanded):
        return []
    unit_axis = int(axis.reshape(-1)[0]) % 5
    found = []
    for reader in read.get(expanded, []):
        repeat = _repeat(model, subgraph, operators, read, kept, position, reader, shape, unit_axis)
        if repeat is None:
            return []
        found.append(repeat)
    return found


def _repeat(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
            kept: set[int], position: int, reader: int, shape: tuple[int, ...], unit_axis: int) -> Repeat | None:
    """TILE -> RESHAPE (or a RESHAPE alone: a factor of 1) from the EXPAND_DIMS at ``position``."""
    op = operators[reader]
    expanded = ints(operators[position].outputs)[0]
    factor, tile = 1, None
    if opcode(model, op) == "TILE":
        multiples = int_input(model, subgraph, op, 1) if len(ints(op.inputs)) == 2 else None
        if multiples is None or multiples.shape != (5,) or not well_formed(subgraph, op) \
                or ints(op.inputs)[0] != expanded or len(ints(op.outputs)) != 1:
            return None
        factor = int(multiples[unit_axis])
        if factor < 2 or any(int(m) != 1 for i, m in enumerate(multiples) if i != unit_axis):
            return None
        tile = reader
        step = _sole(model, subgraph, operators, read, kept, ints(op.outputs)[0], "RESHAPE")
    else:
        step = (reader, op) if opcode(model, op) == "RESHAPE" and well_formed(subgraph, op) \
            and ints(op.inputs)[0] == expanded and len(ints(op.outputs)) == 1 else None
    if step is None:
        return None
    source, index = ints(operators[position].inputs)[0], ints(step[1].outputs)[0]
    repeated = list(shape)
    repeated[unit_axis - 1] *= factor
    if static_shape(tensor_at(subgraph, index)) != tuple(repeated) or not same_quantisation(subgraph, source, index):
        return None
    return Repeat(position, tile, step[0], source, index, unit_axis - 1, factor)


def _sole(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
          kept: set[int], index: int, kind: str) -> tuple[int, OperatorT] | None:
    following = read.get(index, [])
    if len(following) != 1 or index in kept:
        return None
    op = operators[following[0]]
    ok = opcode(model, op) == kind and well_formed(subgraph, op) and ints(op.inputs)[:1] == [index] \
        and len(ints(op.outputs)) == 1
    return (following[0], op) if ok else None


def rewrite_nearest_upsamplings(model: ModelT, subgraph: SubGraphT, plans: Sequence[UpsamplingPlan]) -> None:
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        replaced.update((p, []) for p in plan.dropped)
        for r in plan.repeats:
            replaced.update((p, []) for p in r.positions if p not in (r.expand, r.reshape))
            replaced[r.reshape] = []
        last = plan.repeats[-1].reshape
        replaced[last] = _resized(model, subgraph, plan)
    replace_operators(subgraph, replaced)


def _resized(model: ModelT, subgraph: SubGraphT, plan: UpsamplingPlan) -> list[OperatorT]:
    """One RESIZE_NEAREST_NEIGHBOR where both factors are one Vela resizes by, else one axis after the other."""
    source, output = plan.repeats[0].source, plan.repeats[-1].output
    fh, fw = plan.factors
    if _one_resize(subgraph, plan.repeats):
        out_shape = [int(v) for v in subgraph.tensors[output].shape]
        return [_resize(model, subgraph, source, output, out_shape[1:3])]
    made: list[OperatorT] = []
    current = source
    steps = [(axis, f) for axis, f in ((1, fh), (2, fw)) if f > 1]
    if not steps:
        return [reshape_op(model, subgraph, source, output, tuple(int(v) for v in subgraph.tensors[output].shape))]
    for number, (axis, factor) in enumerate(steps):
        target = output if number == len(steps) - 1 else None
        ops, current = _repeat_axis(model, subgraph, current, target, axis, factor)
        made += ops
    return made


def _one_resize(subgraph: SubGraphT, chain: Sequence[Repeat]) -> bool:
    """Whether Vela legacy runs the whole up-sampling as one RESIZE_NEAREST_NEIGHBOR (its rule: from 1 x 1, or by
    one factor of 2, 4 or 8 in both axes, or along an axis where the other is 1 wide)."""
    _, height, width, _ = (int(v) for v in subgraph.tensors[chain[0].source].shape)
    factors = [1, 1]
    for r in chain:
        factors[r.axis - 1] = r.factor
    fh, fw = factors
    if height == width == 1:
        return True
    if fh == fw:
        return fh in RESIZED_FACTORS
    return (fh in RESIZED_FACTORS and fw == 1 and width == 1) or (fw in RESIZED_FACTORS and fh == 1 and height == 1)


def _repeat_axis(model: ModelT, subgraph: SubGraphT, source: int, target: int | None, axis: int, factor: int
                 ) -> tuple[list[OperatorT], int]:
    """``source`` [1, H, W, C] repeated ``factor`` times along ``axis`` into ``target`` (None: a new map), on a
    view of its bytes; the operators and the map made."""
    tensors = subgraph.tensors
    _, height, width, depth = (int(v) for v in tensors[source].shape)
    out = (1, height * factor, width, depth) if axis == 1 else (1, height, width * factor, depth)
    if target is None:
        target = add_tensor(subgraph, tensors[source], f"/repeat{axis}", out)
    if factor in RESIZED_FACTORS:
        view = (1, height, 1, width * depth) if axis == 1 else (1, 1, height * width, depth)
        grown = (1, height * factor, 1, width * depth) if axis == 1 else (1, 1, height * width * factor, depth)
    else:
        view = (1, height, 1, width * depth) if axis == 1 else (1, height * width, 1, depth)
        grown = (view[0], view[1], factor, view[3])
    viewed = add_tensor(subgraph, tensors[source], f"/repeat{axis}/view", view)
    made = add_tensor(subgraph, tensors[source], f"/repeat{axis}/grown", grown)
    middle = _resize(model, subgraph, viewed, made, list(grown[1:3])) if factor in RESIZED_FACTORS \
        else concatenation_op(model, [viewed] * factor, made, 2)
    return [reshape_op(model, subgraph, source, viewed, view), middle,
            reshape_op(model, subgraph, made, target, out)], target


def _resize(model: ModelT, subgraph: SubGraphT, source: int, output: int, size: list[int]) -> OperatorT:
    size_tensor = const_int32(model, subgraph, f"{name(subgraph.tensors[output])}/size", size, (2,))
    resize_options = schema.ResizeNearestNeighborOptionsT()
    resize_options.alignCorners, resize_options.halfPixelCenters = False, False
    return new_operator(model, schema.BuiltinOperator.RESIZE_NEAREST_NEIGHBOR, [source, size_tensor], [output],
                        schema.BuiltinOptions.ResizeNearestNeighborOptions, resize_options)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'repeat-written nearest up-sampling')} written as RESIZE_NEAREST_NEIGHBOR"


NEAREST_UPSAMPLING = Rewrite("nearest_upsampling", priced=False, find=find_nearest_upsamplings,
                             apply=rewrite_nearest_upsamplings, describe=_describe)
