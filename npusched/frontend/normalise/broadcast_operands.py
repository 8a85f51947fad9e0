"""A constant operand broadcast both ways written out at the output's shape: a layer norm's ``inv * gamma``.

TF exports ``tf.nn.batch_normalization`` in a layer norm as MUL([1, T, 1], gamma [D]) -> [1, T, D]: each input
is broadcast along another axis, which Vela legacy's semantic rule "at least one input has the OFM's shape"
leaves to the CPU (three such MULs split a transformer's NPU work at every layer norm). With gamma stored at the
output's shape ([1, T, D], T copies of it) the MUL computes every element exactly as before (a broadcast is only
a read pattern) and one input has the OFM's shape, so Vela runs it on the NPU, broadcasting the other along the
channels. Not priced: it changes what runs on the NPU; the constant grows by at most ``_MAX_CONSTANT_BYTES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    SubGraphT,
    constant,
    derived_constant,
    ints,
    name,
    opcode,
    per_channel_scales,
    static_shape,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# The binary element-wise operators under Vela's rule (its semantic checks of ADD, SUB, MUL, MAXIMUM, MINIMUM).
_BINARY = frozenset({"ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM"})
# A constant written out at the output's shape is at most this large (it lives in flash beside the weights).
_MAX_CONSTANT_BYTES = 64 * 1024


@dataclass(frozen=True)
class BroadcastPlan:
    """An operator whose constant input (``operand``: 0 or 1) is written out at the output's shape."""

    site: Site
    position: int
    operand: int
    value: np.ndarray
    operators: int = 1


def find_broadcast_operands(model: ModelT, subgraph: SubGraphT) -> list[BroadcastPlan]:
    """Binary element-wise operators neither of whose inputs has the output's shape, one input a constant."""
    tensors = subgraph.tensors or []
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        if opcode(model, op) not in _BINARY or len(inputs) != 2 or len(outputs) != 1 or min(inputs) < 0 \
                or not well_formed(subgraph, op):
            continue
        out_shape = static_shape(tensors[outputs[0]])
        shapes = [shape for shape in (static_shape(tensors[i]) for i in inputs) if shape is not None]
        if out_shape is None or len(shapes) != 2 or out_shape in shapes or not _broadcasts_to(shapes, out_shape):
            continue
        for operand, index in enumerate(inputs):
            value = constant(model, tensors[index])
            if value is None or per_channel_scales(tensors[index]) > 1 \
                    or value.dtype.itemsize * int(np.prod(out_shape)) > _MAX_CONSTANT_BYTES:
                continue
            written = np.ascontiguousarray(np.broadcast_to(value, out_shape))
            plans.append(BroadcastPlan(Site("broadcast_operand", name(tensors[outputs[0]])), position, operand,
                                       written))
            break
    return plans


def _broadcasts_to(shapes: list[tuple[int, ...]], out_shape: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(*shapes) == out_shape
    except ValueError:
        return False


def write_broadcast_operands(model: ModelT, subgraph: SubGraphT, plans: Sequence[BroadcastPlan]) -> None:
    """Each planned operator reads a new constant, its old one written out at the output's shape."""
    for plan in plans:
        op = subgraph.operators[plan.position]
        inputs = ints(op.inputs)
        inputs[plan.operand] = derived_constant(model, subgraph, inputs[plan.operand], plan.value, "/broadcast")
        op.inputs = np.asarray(inputs, dtype=np.int32)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'constant operand')} broadcast both ways written at the output's shape"


BROADCAST_OPERANDS = Rewrite("broadcast_operand", priced=False, find=find_broadcast_operands,
                             apply=write_broadcast_operands, describe=_describe)
