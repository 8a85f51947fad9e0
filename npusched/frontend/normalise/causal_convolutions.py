"""Causal convolutions computed without copying their whole input (priced).

A causal convolution (Keras's Conv1D(padding="causal"), a TCN's) PADs (k - 1) x d zeros before the sequence and
convolves VALID. Vela legacy folds a PAD into the convolution's hardware padding only up to half the dilated
kernel, so a causal PAD becomes two NPU passes: the zeros, and a copy of the whole input into the padded map
(26% of a TCN's cycles under the default core's model, which pads in hardware up to the whole kernel). The same
outputs without the copy: the convolution VALID on the input itself gives every output from position (k - 1) x d
on; of the first (k - 1) x d, those in [s d, (s + 1) d) see only the kernel's last s + 1 taps (the others read
padding), so they are that truncated kernel's VALID convolution of the input's first (s + 1) d steps, for
s = 0 .. k - 2. The parts are CONCATENATED along the sequence, each written straight into the concatenation (an
in-place write, ``npusched.lowering.in_place``). Every part has the convolution's bias, quantisation, fused
activation and (its taps of) weights, so every output is the original's. A 3-D sequence (a Keras-style export, its
EXPAND_DIMS or RESHAPE to [1, 1, T, C] after the PAD) is viewed as 4-D first.

Priced (``npusched.app.graph_choice``): where the sequence is short against the kernel, or a schedule would rather
cascade through the PAD, the copy may cost less.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    CONVOLUTION_OPTIONS,
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    concatenation_op,
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
    readers,
    replace_chains,
    reshape_op,
    same_quantisation,
    sole_reader,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class CausalPlan:
    """PAD at ``position`` (``positions``: it, a reshape to 4-D if any, the convolution) padding (k - 1) x d steps
    before spatial ``axis`` (1 height, 2 width) of the convolution's 4-D input ``view`` of ``source``, k taps
    dilated by d along it."""

    site: Site
    position: int
    positions: tuple[int, ...]
    source: int
    view: tuple[int, ...]
    axis: int
    taps: int
    dilation: int
    operators: int = 1

    @property
    def pad(self) -> int:
        return (self.taps - 1) * self.dilation


def find_causal_convolutions(model: ModelT, subgraph: SubGraphT) -> list[CausalPlan]:
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    plans = []
    for position, op in enumerate(operators):
        if opcode(model, op) == "PAD" and well_formed(subgraph, op):
            plan = _plan(model, subgraph, operators, read, kept, position)
            if plan is not None:
                plans.append(plan)
    return plans


def _plan(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
          kept: set[int], position: int) -> CausalPlan | None:
    pad_op = operators[position]
    inputs = ints(pad_op.inputs)
    shape = static_shape(tensor_at(subgraph, inputs[0])) if len(inputs) == 2 else None
    paddings = int_input(model, subgraph, pad_op, 1) if len(inputs) == 2 else None
    if shape is None or len(shape) not in (3, 4) or shape[0] != 1 or paddings is None \
            or paddings.shape != (len(shape), 2) \
            or not same_quantisation(subgraph, inputs[0], ints(pad_op.outputs)[0]):
        return None
    padded = [(axis, int(before)) for axis, (before, after) in enumerate(paddings) if before or after]
    if len(padded) != 1 or int(paddings[padded[0][0], 1]) != 0 or padded[0][1] < 1:
        return None  # one axis padded, before it only
    axis, pad = padded[0]
    chain = [position]
    step = sole_reader(operators, read, kept, ints(pad_op.outputs)[0])
    view = shape
    if step is not None and len(shape) == 3:  # Keras-style: EXPAND_DIMS / RESHAPE of [1, T, C] to [1, 1, T, C]
        out = static_shape(tensor_at(subgraph, ints(step[1].outputs)[0])) if ints(step[1].outputs) else None
        padded_shape = tuple(s + int(paddings[a, 0]) for a, s in enumerate(shape))
        if opcode(model, step[1]) not in ("RESHAPE", "EXPAND_DIMS") or out != (1, *padded_shape):
            return None
        view, axis = (1, *shape), axis + 1
        chain.append(step[0])
        step = sole_reader(operators, read, kept, ints(step[1].outputs)[0])
    if step is None or opcode(model, step[1]) not in CONVOLUTION_OPTIONS or axis not in (1, 2):
        return None
    conv = step[1]
    conv_options = options(conv, CONVOLUTION_OPTIONS[opcode(model, conv)])
    weights = constant(model, tensor_at(subgraph, ints(conv.inputs)[1])) if len(ints(conv.inputs)) >= 2 else None
    if conv_options is None or not well_formed(subgraph, conv) or weights is None or weights.ndim != 4 \
            or (conv_options.strideH, conv_options.strideW, conv_options.padding) != (1, 1, schema.Padding.VALID):
        return None
    dilation, taps = (conv_options.dilationHFactor if axis == 1 else conv_options.dilationWFactor), weights.shape[axis]
    reach = dilation * (taps - 1)
    # Causal: the whole span padded before. Vela legacy folds a PAD of up to half the dilated kernel into hardware
    # padding: nothing to save there.
    if pad != reach or pad <= (reach + 1) // 2 or view[axis] <= reach or dilation < 1:
        return None
    chain.append(step[0])
    return CausalPlan(Site("causal_convolution", name(subgraph.tensors[ints(conv.outputs)[0]])), position,
                      tuple(chain), inputs[0], tuple(view), axis, taps, dilation)


def rewrite_causal_convolutions(model: ModelT, subgraph: SubGraphT, plans: Sequence[CausalPlan]) -> None:
    replace_chains(subgraph, plans, lambda plan: _split(model, subgraph, plan))


def _split(model: ModelT, subgraph: SubGraphT, plan: CausalPlan) -> list[OperatorT]:
    """The convolution VALID on the input (every output from the padding's length on), then, for the outputs
    before, one VALID convolution per dilation-long segment with the taps that reach the input; their
    concatenation along the axis, in order."""
    tensors = subgraph.tensors
    conv = subgraph.operators[plan.positions[-1]]
    conv_inputs = ints(conv.inputs)
    output = ints(conv.outputs)[0]
    out_shape = static_shape(tensors[output]) or ()
    weights = constant(model, tensors[conv_inputs[1]])
    assert weights is not None  # checked when found
    new_ops: list[OperatorT] = []
    source = plan.source
    if len(static_shape(tensors[source]) or ()) != 4:
        source = add_tensor(subgraph, tensors[plan.source], "/4d", plan.view)
        new_ops.append(reshape_op(model, subgraph, plan.source, source, plan.view))

    def along(length: int, shape: Sequence[int]) -> tuple[int, ...]:
        resized = list(shape)
        resized[plan.axis] = length
        return tuple(resized)

    parts = []
    for segment in range(plan.taps - 1):  # outputs [segment d, (segment + 1) d): the last segment + 1 taps
        first_tap = plan.taps - 1 - segment
        taps = [slice(None)] * 4
        taps[plan.axis] = slice(first_tap, None)
        kernel = derived_constant(model, subgraph, conv_inputs[1], weights[tuple(taps)], f"/taps{first_tap}")
        head = add_tensor(subgraph, tensors[plan.source], f"/head{segment}",
                          along((segment + 1) * plan.dilation, plan.view))
        label = name(tensors[head])
        begin = const_int32(model, subgraph, f"{label}/begin", [0, 0, 0, 0], (4,))
        size = const_int32(model, subgraph, f"{label}/size", list(along((segment + 1) * plan.dilation, plan.view)),
                           (4,))
        new_ops.append(new_operator(model, schema.BuiltinOperator.SLICE, [source, begin, size], [head],
                                    schema.BuiltinOptions.SliceOptions, schema.SliceOptionsT()))
        parts.append(add_tensor(subgraph, tensors[output], f"/head{segment}", along(plan.dilation, out_shape)))
        new_ops.append(copied_operator(conv, [head, kernel, *conv_inputs[2:]], [parts[-1]]))
    parts.append(add_tensor(subgraph, tensors[output], "/main", along(out_shape[plan.axis] - plan.pad, out_shape)))
    new_ops.append(copied_operator(conv, [source, *conv_inputs[1:]], [parts[-1]]))
    new_ops.append(concatenation_op(model, parts, output, plan.axis))
    return new_ops


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'causal convolution')} computed without copying the padded input"


CAUSAL_CONVOLUTIONS = Rewrite("causal_convolution", priced=True, find=find_causal_convolutions,
                              apply=rewrite_causal_convolutions, describe=_describe)
