"""Channel-poor element-wise chains computed on a deep view of the same bytes (priced).

Maps [1, H, W, C<16] (an image input's rescaling and normalisation on H x W x 3) move through memory in C-byte
bursts; viewed [1, H', W', D] (same bytes, same order), D = 16, or lcm(C, 16) where an operand is a per-channel
constant (a Normalization layer's mean and variance), they move in full bursts. The view is a map no convolution
can read in stripes, though: where the chain feeds a convolution a cascade could start from it, and a Size
schedule may need the cascade more than the bursts (``npusched.app.graph_choice`` prices both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    DEEP_CHANNELS,
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    constant,
    deep_view,
    ints,
    name,
    opcode,
    per_channel_scales,
    readers,
    repeated_constant,
    reshape_op,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

UNARY_ELEMENTWISE = frozenset({"RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU",
                               "ABS"})
_BINARY_ELEMENTWISE = frozenset({"ADD", "SUB", "MUL"})


@dataclass(frozen=True)
class ChainPlan:
    """A chain of element-wise operators on one channel-poor map: the map it reads, its shape, the operators'
    positions, each one's per-channel constants (index -> value) and the view's depth."""

    site: Site
    source: int
    shape: tuple[int, ...]
    positions: tuple[int, ...]
    constants: tuple[dict[int, np.ndarray], ...]
    depth: int

    @property
    def operators(self) -> int:
        return len(self.positions)

    @property
    def position(self) -> int:
        return self.positions[0]


def _operands(model: ModelT, subgraph: SubGraphT, op: OperatorT,
              channels: int) -> tuple[int, dict[int, np.ndarray]] | None:
    """The feature-map input and the per-channel constant inputs (index -> value), if the op may join a chain: it
    is unary element-wise, or its other operand is a one-element or per-channel constant."""
    code, inputs = opcode(model, op), ints(op.inputs)
    if not well_formed(subgraph, op) or any(i < 0 for i in inputs):
        return None
    if code in UNARY_ELEMENTWISE and len(inputs) == 1:
        return inputs[0], {}
    if code in _BINARY_ELEMENTWISE and len(inputs) == 2:
        values = {i: value for i in inputs if (value := constant(model, subgraph.tensors[i])) is not None}
        maps = [i for i in inputs if i not in values]
        per_channel = {i: v for i, v in values.items() if v.size == channels > 1 and v.shape[-1:] == (channels,)
                       and per_channel_scales(subgraph.tensors[i]) <= 1}
        if len(maps) == 1 and all(v.size == 1 or i in per_channel for i, v in values.items()):
            return maps[0], per_channel
    return None


def find_chains(model: ModelT, subgraph: SubGraphT) -> list[ChainPlan]:
    """Each longest chain of element-wise operators on one [1, H, W, C<16] map, each read by the next alone; the
    site is named by the chain's last output, which keeps its name, shape and value."""
    tensors = subgraph.tensors or []
    operators = list(subgraph.operators or [])
    read = readers(operators)
    graph_outputs = set(ints(subgraph.outputs))

    def single_output_shape(op: OperatorT) -> tuple[int, ...] | None:
        outputs = ints(op.outputs)
        return static_shape(tensor_at(subgraph, outputs[0])) if len(outputs) == 1 else None

    plans: list[ChainPlan] = []
    taken: set[int] = set()
    for position, op in enumerate(operators):
        if position in taken or not well_formed(subgraph, op):
            continue
        maps = [i for i in ints(op.inputs) if i >= 0 and constant(model, tensors[i]) is None]
        shape = static_shape(tensors[maps[0]]) if len(maps) == 1 else None
        if shape is None or len(shape) != 4 or shape[0] != 1 or not 0 < shape[3] < DEEP_CHANNELS \
                or single_output_shape(op) != shape:
            continue
        found = _operands(model, subgraph, op, shape[3])
        if found is None:
            continue
        chain, constants = [position], [found[1]]
        while True:
            out = ints(operators[chain[-1]].outputs)[0]
            following = read.get(out, [])
            if out in graph_outputs or len(following) != 1:
                break
            joined = _operands(model, subgraph, operators[following[0]], shape[3])
            if joined is None or joined[0] != out or single_output_shape(operators[following[0]]) != shape:
                break
            chain.append(following[0])
            constants.append(joined[1])
        depth = math.lcm(shape[3], DEEP_CHANNELS) if any(constants) else DEEP_CHANNELS
        if (shape[1] * shape[2] * shape[3]) % depth:
            continue
        taken.update(chain)
        last = ints(operators[chain[-1]].outputs)[0]
        plans.append(ChainPlan(Site("relayout", name(tensors[last])), found[0], shape, tuple(chain),
                               tuple(constants), depth))
    return plans


def relayout_chains(model: ModelT, subgraph: SubGraphT, plans: Sequence[ChainPlan]) -> None:
    """A chain is exact on any view of its bytes when every operator is unary element-wise or has a one-element
    constant as its other operand; on a view D deep when C divides D, a per-channel constant tiled D / C times is
    the same operand (channel d of the view is channel d mod C). So the chain gets a RESHAPE to the deep view
    before it and one back after it, and its intermediate tensors the deep shape (renamed with a ``/c16``
    suffix)."""
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    before: dict[int, OperatorT] = {}
    after: dict[int, OperatorT] = {}
    for plan in plans:
        shape, chain = plan.shape, plan.positions
        deep = deep_view(shape, plan.depth)
        originals = [ints(operators[p].outputs)[0] for p in chain]
        current = add_tensor(subgraph, tensors[plan.source], "/c16", deep)
        before[chain[0]] = reshape_op(model, subgraph, plan.source, current, deep)
        previous = plan.source
        repeats = plan.depth // shape[3]
        for position, original, per_channel in zip(chain, originals, plan.constants, strict=True):
            op = operators[position]
            op.inputs = np.asarray([current if i == previous else repeated_constant(
                model, subgraph, i, np.tile(per_channel[i].reshape(-1), repeats), repeats)
                if i in per_channel else i for i in ints(op.inputs)], dtype=np.int32)
            previous = original
            current = add_tensor(subgraph, tensors[original], "/c16", deep)
            op.outputs = np.asarray([current], dtype=np.int32)
        after[chain[-1]] = reshape_op(model, subgraph, current, originals[-1], shape)
    subgraph.operators = [new for position, op in enumerate(operators)
                          for new in [*([before[position]] if position in before else []), op,
                                      *([after[position]] if position in after else [])]]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(operators, 'element-wise pass', 'es')} re-laid out 16 or more deep"


RELAYOUT = Rewrite("relayout", priced=True, find=find_chains, apply=relayout_chains, describe=_describe)
