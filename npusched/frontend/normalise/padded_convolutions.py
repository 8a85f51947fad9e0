"""Convolutions after a PAD longer than half their kernel, padded in hardware all the same (priced).

Vela legacy folds a zero PAD before a VALID convolution into the convolution's hardware padding only where no
side pads more than half the dilated kernel; otherwise the PAD becomes its own NPU passes, a copy of the whole
input into the padded map and one per padded edge. The default core folds any side shorter than the kernel.
Where a converter writes such PADs: a causal convolution (Keras's Conv1D(padding="causal"), a TCN's: (k - 1) x d
steps before the sequence, the copy 26% of a TCN's cycles under the default core's model) and one-sided
ZeroPadding2D before a convolution.

The same outputs in a form Vela legacy folds: along each padded axis, the kernel gains zero taps before its first
(a) and after its last (c), and the PAD pads a x d more before and c x d more after, the fewest that bring both
sides within half the longer kernel. Every output reads the steps it read before; the zero taps read only the
added padding. A TFLite runtime runs that form as it is; npusched's lowering, and Vela's graph as the backend
bridge teaches it (``npusched.vela.lessons``), fold the PAD and then drop zero taps that read only padding together
with that padding (``npusched.lowering.rewrite_helpers.without_padding_only_taps``): what is left is the original
convolution padded in hardware as the PAD padded, as the default core runs it. A 3-D sequence (a Keras-style
export, its EXPAND_DIMS or RESHAPE to [1, 1, T, C] after the PAD) is viewed as 4-D first. Only at stride 1 along
the padded axes, and where the longer kernel stays within the NPU's dilated kernel limits.

Priced (``npusched.app.graph_choice``) like every rewrite of npusched's graph; it removes the PAD's passes and the
padded map and changes nothing else.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    CONVOLUTION_OPTIONS,
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    chains_from,
    const_int32,
    constant,
    copied_operator,
    derived_constant,
    int_input,
    ints,
    name,
    new_operator,
    opcode,
    options,
    replace_chains,
    reshape_op,
    same_quantisation,
    sole_reader,
    static_shape,
    tensor_at,
    well_formed,
    zero_points,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.frontend.op_view import DILATED_AREA_MAX, DILATED_HEIGHT_MAX

SPATIAL_AXES = (1, 2)  # height and width of a 4-D map


@dataclass(frozen=True)
class PaddedPlan:
    """PAD at ``position`` (``positions``: it, a reshape to 4-D if any, the convolution) of ``source``, seen as the
    convolution's 4-D input ``view``, padding ``pads[axis]`` (before, after) along each axis; the kernel's ``taps``
    and ``dilation`` per spatial axis (height, width), and the zero taps it gains, ``extension[axis]`` (before,
    after; None where no zero taps make Vela legacy fold the PAD)."""

    site: Site
    position: int
    positions: tuple[int, ...]
    source: int
    view: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    taps: tuple[int, int]
    dilation: tuple[int, int]
    extension: tuple[tuple[int, int], ...] | None
    operators: int = 1

    @property
    def causal_axis(self) -> int | None:
        """The axis of a causal convolution (one axis padded, by the dilated kernel's span, before it only)."""
        padded = [axis for axis in SPATIAL_AXES if any(self.pads[axis])]
        if len(padded) != 1:
            return None
        axis = padded[0]
        before, after = self.pads[axis]
        return axis if after == 0 and before == (self.taps[axis - 1] - 1) * self.dilation[axis - 1] else None


def find_padded_convolutions(model: ModelT, subgraph: SubGraphT) -> list[PaddedPlan]:
    return [plan for plan in pads_vela_copies(model, subgraph) if plan.extension is not None]


def pads_vela_copies(model: ModelT, subgraph: SubGraphT) -> list[PaddedPlan]:
    """Every PAD before a convolution that Vela legacy does not fold and the default core does (with the zero taps
    that make Vela fold it, where there are any within the NPU's limits)."""
    return chains_from(model, subgraph, "PAD", functools.partial(_plan, model, subgraph))


def _plan(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
          kept: set[int], position: int) -> PaddedPlan | None:
    pad_op = operators[position]
    inputs = ints(pad_op.inputs)
    shape = static_shape(tensor_at(subgraph, inputs[0])) if len(inputs) == 2 else None
    paddings = int_input(model, subgraph, pad_op, 1) if len(inputs) == 2 else None
    if shape is None or len(shape) not in (3, 4) or shape[0] != 1 or paddings is None \
            or paddings.shape != (len(shape), 2) or np.any(paddings < 0) \
            or not same_quantisation(subgraph, inputs[0], ints(pad_op.outputs)[0]):
        return None
    pads = [(int(before), int(after)) for before, after in paddings]
    chain = [position]
    step = sole_reader(operators, read, kept, ints(pad_op.outputs)[0])
    view = shape
    if step is not None and len(shape) == 3:  # Keras-style: EXPAND_DIMS / RESHAPE of [1, T, C] to [1, 1, T, C]
        out = static_shape(tensor_at(subgraph, ints(step[1].outputs)[0])) if ints(step[1].outputs) else None
        padded_shape = tuple(s + before + after for s, (before, after) in zip(shape, pads, strict=True))
        if opcode(model, step[1]) not in ("RESHAPE", "EXPAND_DIMS") or out != (1, *padded_shape):
            return None
        view, pads = (1, *shape), [(0, 0), *pads]
        chain.append(step[0])
        step = sole_reader(operators, read, kept, ints(step[1].outputs)[0])
    if step is None or opcode(model, step[1]) not in CONVOLUTION_OPTIONS \
            or any(pads[axis] != (0, 0) for axis in (0, 3)):
        return None
    conv = step[1]
    conv_options = options(conv, CONVOLUTION_OPTIONS[opcode(model, conv)])
    weights_tensor = tensor_at(subgraph, ints(conv.inputs)[1]) if len(ints(conv.inputs)) >= 2 else None
    weights = constant(model, weights_tensor) if weights_tensor is not None else None
    if conv_options is None or not well_formed(subgraph, conv) or weights is None or weights.ndim != 4 \
            or (conv_options.strideH, conv_options.strideW, conv_options.padding) != (1, 1, schema.Padding.VALID) \
            or np.any(zero_points(weights_tensor) != 0):  # int8 weights are symmetric: the zero taps are zeros
        return None
    taps = (int(weights.shape[1]), int(weights.shape[2]))
    dilation = (int(conv_options.dilationHFactor), int(conv_options.dilationWFactor))
    spans = [d * (k - 1) for k, d in zip(taps, dilation, strict=True)]  # the dilated kernel, less one
    if min(dilation) < 1 or any(max(pads[axis]) > spans[axis - 1] or view[axis] <= spans[axis - 1]
                                for axis in SPATIAL_AXES):
        return None  # the default core would not fold it either: nothing to gain
    if all(max(pads[axis]) <= (spans[axis - 1] + 1) // 2 for axis in SPATIAL_AXES):
        return None  # Vela legacy folds it as it is
    chain.append(step[0])
    return PaddedPlan(Site("padded_convolution", name(subgraph.tensors[ints(conv.outputs)[0]])), position,
                      tuple(chain), inputs[0], tuple(view), tuple(pads), taps, dilation,
                      _extension(pads, spans, dilation))


def _extension(pads: list[tuple[int, int]], spans: list[int], dilation: tuple[int, int]
               ) -> tuple[tuple[int, int], ...] | None:
    """The zero taps per axis that make Vela legacy fold ``pads``; None where none do within the NPU's dilated
    kernel limits."""
    zero_taps = [_zero_taps(*pads[axis], spans[axis - 1], dilation[axis - 1]) for axis in SPATIAL_AXES]
    if None in zero_taps:
        return None
    extension = ((0, 0), *(taps for taps in zero_taps if taps is not None), (0, 0))
    longer = [spans[axis - 1] + dilation[axis - 1] * sum(extension[axis]) + 1 for axis in SPATIAL_AXES]
    return None if longer[0] > DILATED_HEIGHT_MAX or longer[0] * longer[1] > DILATED_AREA_MAX else extension


def _zero_taps(before: int, after: int, span: int, dilation: int) -> tuple[int, int] | None:
    """The fewest zero taps (before the first, after the last) that bring both sides' padding, each lengthened by
    its zero taps' reach, within half the longer dilated kernel (``span`` + 1 long before): Vela legacy's rule.
    None where no number does (both sides together pad more than the kernel is long)."""
    for added in range(2 * span + 2):
        half = (span + 1 + added * dilation) // 2
        for first in range(added + 1):
            if before + first * dilation <= half and after + (added - first) * dilation <= half:
                return first, added - first
    return None


def rewrite_padded_convolutions(model: ModelT, subgraph: SubGraphT, plans: Sequence[PaddedPlan]) -> None:
    replace_chains(subgraph, plans, lambda plan: _lengthened(model, subgraph, plan))


def _lengthened(model: ModelT, subgraph: SubGraphT, plan: PaddedPlan) -> list[OperatorT]:
    """(RESHAPE to the 4-D view ->) PAD, lengthened by the zero taps' reach -> the convolution, its kernel with
    the zero taps."""
    tensors = subgraph.tensors
    conv = subgraph.operators[plan.positions[-1]]
    conv_inputs = ints(conv.inputs)
    weights = constant(model, tensors[conv_inputs[1]])
    assert weights is not None  # checked when found
    assert plan.extension is not None  # found so
    kernel = derived_constant(model, subgraph, conv_inputs[1], np.pad(weights, plan.extension), "/padded")
    pads = [(before + first * plan.dilation[axis - 1], after + last * plan.dilation[axis - 1])
            if axis in SPATIAL_AXES else (before, after)
            for axis, ((before, after), (first, last)) in enumerate(zip(plan.pads, plan.extension, strict=True))]
    new_ops: list[OperatorT] = []
    source = plan.source
    if len(static_shape(tensors[source]) or ()) != 4:
        source = add_tensor(subgraph, tensors[plan.source], "/4d", plan.view)
        new_ops.append(reshape_op(model, subgraph, plan.source, source, plan.view))
    padded_shape = tuple(size + before + after for size, (before, after) in zip(plan.view, pads, strict=True))
    padded = add_tensor(subgraph, tensors[plan.source], "/padded", padded_shape)
    paddings = const_int32(model, subgraph, f"{name(tensors[padded])}/paddings",
                           [side for pair in pads for side in pair], (4, 2))
    new_ops.append(new_operator(model, schema.BuiltinOperator.PAD, [source, paddings], [padded],
                                schema.BuiltinOptions.PadOptions, schema.PadOptionsT()))
    new_ops.append(copied_operator(conv, [padded, kernel, *conv_inputs[2:]], ints(conv.outputs)))
    return new_ops


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'convolution')} padded in hardware beyond half the kernel, without copying the input"


PADDED_CONVOLUTIONS = Rewrite("padded_convolution", priced=True, find=find_padded_convolutions,
                              apply=rewrite_padded_convolutions, describe=_describe)
