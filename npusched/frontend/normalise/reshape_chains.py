"""RESHAPEs that meet at a map of more than 4 dimensions merged into one: the 5-D and 6-D views vanish.

Converters reach 5-D and 6-D maps only through RESHAPE, EXPAND_DIMS and SQUEEZE (Keras 3's head split
[1, P, N, D] -> [1, P, N, H, d], a group norm's [1, H, W, G, C / G], a pixel shuffle's [1, H, W, 1, r, r]). Once the
operators on those maps are written on 4-D views (``high_rank``, ``transposes``, ``channel_means``), each such map
is only made by one reshape and read by others. A reshape only reinterprets the bytes in order, so reshaping to the
5-D map and from it is one reshape from the source: each reader becomes a RESHAPE of the source to its own shape,
and the 5-D map goes where nothing else reads it (neither Vela core runs a map of more than 4 dimensions). Exact: no
element moves. Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    ints,
    name,
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

_RESHAPES = frozenset({"RESHAPE", "EXPAND_DIMS", "SQUEEZE"})
_MAX_RANK = 4


@dataclass(frozen=True)
class ChainPlan:
    """The reshapes making a connected set of high-rank maps from ``source`` (dropped: ``dropped``) and those
    reading them into maps of at most 4 dimensions (``rewritten``), each to be a RESHAPE of ``source``."""

    site: Site
    position: int
    source: int
    dropped: tuple[int, ...]
    rewritten: tuple[int, ...]

    @property
    def operators(self) -> int:
        return len(self.dropped) + len(self.rewritten)


def find_reshape_chains(model: ModelT, subgraph: SubGraphT) -> list[ChainPlan]:
    """Every tree of reshapes through static maps of more than 4 dimensions that only reshapes read (and none a
    network output), from the map that is not such to the maps that are not."""
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    made_by = {ints(op.outputs)[0]: position for position, op in enumerate(operators)
               if _reshape(model, subgraph, op)}
    removable = {made: position for made, position in made_by.items()
                 if _removable(model, subgraph, operators, read, kept, made, position)}
    plans = []
    for made, position in sorted(removable.items(), key=lambda item: item[1]):
        source = ints(operators[position].inputs)[0]
        if source in removable:
            continue  # inside another tree: its root's plan holds it
        dropped, rewritten, frontier = [], [], [made]
        while frontier:
            current = frontier.pop()
            dropped.append(removable[current])
            for reader in read.get(current, []):
                target = ints(operators[reader].outputs)[0]
                if target in removable:
                    frontier.append(target)
                else:
                    rewritten.append(reader)
        plans.append(ChainPlan(Site("reshape_chain", name(subgraph.tensors[made])), position, source,
                               tuple(sorted(dropped)), tuple(sorted(rewritten))))
    return plans


def _removable(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
               kept: set[int], made: int, position: int) -> bool:
    """Whether the map ``made`` (by the reshape at ``position``) has more than 4 static dimensions, is no network
    output and is read only by reshapes of its values (same quantisation) to static shapes."""
    source = ints(operators[position].inputs)[0]
    shape = static_shape(tensor_at(subgraph, made))
    following = read.get(made, [])
    return shape is not None and len(shape) > _MAX_RANK and made not in kept and bool(following) \
        and static_shape(tensor_at(subgraph, source)) is not None and same_quantisation(subgraph, source, made) \
        and all(_reshape(model, subgraph, operators[p]) and ints(operators[p].inputs)[0] == made
                and static_shape(tensor_at(subgraph, ints(operators[p].outputs)[0])) is not None
                and same_quantisation(subgraph, made, ints(operators[p].outputs)[0]) for p in following)


def _reshape(model: ModelT, subgraph: SubGraphT, op: OperatorT) -> bool:
    inputs, outputs = ints(op.inputs), ints(op.outputs)
    return opcode(model, op) in _RESHAPES and len(outputs) == 1 and bool(inputs) and inputs[0] >= 0 \
        and well_formed(subgraph, op)


def merge_reshape_chains(model: ModelT, subgraph: SubGraphT, plans: Sequence[ChainPlan]) -> None:
    """Each tree's reshapes dropped and its last ones made RESHAPEs of its source; where one gives the source's
    own shape, its readers read the source instead (a network output keeps its RESHAPE)."""
    replaced: dict[int, list[OperatorT]] = {}
    renamed: dict[int, int] = {}
    kept = set(ints(subgraph.outputs))
    for plan in plans:
        replaced.update((position, []) for position in plan.dropped)
        source_shape = tuple(int(v) for v in subgraph.tensors[plan.source].shape)
        for position in plan.rewritten:
            target = ints(subgraph.operators[position].outputs)[0]
            shape = tuple(int(v) for v in subgraph.tensors[target].shape)
            if shape == source_shape and target not in kept:
                renamed[target] = plan.source
                replaced[position] = []
            else:
                replaced[position] = [reshape_op(model, subgraph, plan.source, target, shape)]
    replace_operators(subgraph, replaced)
    for op in subgraph.operators or []:
        if any(i in renamed for i in ints(op.inputs)):
            op.inputs = np.asarray([renamed.get(i, i) for i in ints(op.inputs)], dtype=np.int32)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'reshape')} through a 5-D or higher map merged"


RESHAPE_CHAINS = Rewrite("reshape_chain", priced=False, find=find_reshape_chains, apply=merge_reshape_chains,
                         describe=_describe)
