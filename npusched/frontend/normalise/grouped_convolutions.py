"""Grouped convolutions split into convolutions of whole groups: SPLIT -> one CONV_2D per part -> CONCATENATION.

Keras exports Conv2D(groups=G) (RegNet, ResNeXt) as one CONV_2D whose kernel depth is a fraction of the IFM's.
Vela's legacy core makes the same rewrite but stops on its own split (a TypeError, Vela 5.2.0 with numpy 2), and
npusched's lowering reads a convolution's weights as covering the whole IFM depth, so the grouped form is no pass
either can run. Not priced: without it the convolution runs on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    DEEP_CHANNELS,
    Convolution,
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    concatenation_op,
    const_int32,
    convolution,
    derived_constant,
    name,
    new_operator,
    replace_operators,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class GroupedPlan:
    """A grouped CONV_2D at ``position`` and the parts it becomes."""

    site: Site
    position: int
    conv: Convolution
    groups: int
    parts: int
    operators: int = 1


def grouped_convolution_parts(groups: int, group_ifm_depth: int, group_ofm_depth: int) -> int:
    """How many convolutions a grouped one becomes: k neighbouring groups share one (block-diagonal weights), k
    the fewest groups whose IFM and OFM depths are whole 16-channel bricks, so each part reads and writes its
    channels of NHCWB16 maps in whole bricks; every group alone (k = 1) when no k divides the groups so."""
    for k in range(1, groups + 1):
        if groups % k == 0 and (k * group_ifm_depth) % DEEP_CHANNELS == 0 \
                and (k * group_ofm_depth) % DEEP_CHANNELS == 0:
            return groups // k
    return groups


def find_grouped_convolutions(model: ModelT, subgraph: SubGraphT) -> list[GroupedPlan]:
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        conv = convolution(model, subgraph, op)
        if conv is None:
            continue
        group_ifm_depth, filters = conv.weights.shape[3], conv.weights.shape[0]
        groups = conv.ifm_shape[3] // group_ifm_depth if group_ifm_depth else 0
        if groups < 2 or conv.ifm_shape[3] % group_ifm_depth or filters % groups or conv.ofm_shape[3] != filters:
            continue
        parts = grouped_convolution_parts(groups, group_ifm_depth, filters // groups)
        plans.append(GroupedPlan(Site("grouped_convolution", name(subgraph.tensors[conv.output])), position, conv,
                                 groups, parts))
    return plans


def split_grouped_convolutions(model: ModelT, subgraph: SubGraphT, plans: Sequence[GroupedPlan]) -> None:
    """A part holds k neighbouring groups (``grouped_convolution_parts``) with block-diagonal weights: each output
    channel sums the products of its own group only, with its own bias and scales, so every part's output is
    exactly its channels of the grouped convolution's (zero weights add nothing). The parts keep the OFM's
    quantisation and fused activation; Vela reads each part's channels at an offset and writes them at one."""
    replaced = {plan.position: _parts(model, subgraph, subgraph.operators[plan.position], plan) for plan in plans}
    replace_operators(subgraph, replaced)


def _parts(model: ModelT, subgraph: SubGraphT, op: OperatorT, plan: GroupedPlan) -> list[OperatorT]:
    conv, parts = plan.conv, plan.parts
    tensors = subgraph.tensors
    weights, bias, inputs, output = conv.weights, conv.bias, conv.inputs, conv.output
    group_ifm_depth, filters = weights.shape[3], weights.shape[0]
    group_ofm_depth = filters // plan.groups
    per_part = plan.groups // parts
    part_ifm_depth, part_ofm_depth = per_part * group_ifm_depth, per_part * group_ofm_depth
    new_ops: list[OperatorT] = []
    part_inputs = [inputs[0]]
    if parts > 1:
        axis = const_int32(model, subgraph, f"{name(tensors[output])}/group_axis", [3], ())
        part_inputs = [add_tensor(subgraph, tensors[inputs[0]], f"/group{p}", (*conv.ifm_shape[:3], part_ifm_depth))
                       for p in range(parts)]
        split_options = schema.SplitOptionsT()
        split_options.numSplits = parts
        new_ops.append(new_operator(model, schema.BuiltinOperator.SPLIT, [axis, inputs[0]], part_inputs,
                                    schema.BuiltinOptions.SplitOptions, split_options))
    part_outputs = []
    for p in range(parts):
        channels = slice(p * part_ofm_depth, (p + 1) * part_ofm_depth)
        block = np.zeros((part_ofm_depth, *weights.shape[1:3], part_ifm_depth), dtype=weights.dtype)
        for g in range(per_part):
            rows = slice(g * group_ofm_depth, (g + 1) * group_ofm_depth)
            block[rows, :, :, g * group_ifm_depth:(g + 1) * group_ifm_depth] = weights[channels][rows]

        def sliced(index: int, value: np.ndarray, channels: slice = channels, p: int = p) -> int:
            return derived_constant(model, subgraph, index, value, f"/group{p}", lambda values: values[channels])

        conv_inputs = [part_inputs[p], sliced(inputs[1], block)]
        if bias is not None:
            conv_inputs.append(sliced(inputs[2], bias[channels]))
        if parts > 1:
            part_outputs.append(add_tensor(subgraph, tensors[output], f"/group{p}",
                                           (*conv.ofm_shape[:3], part_ofm_depth)))
        part = schema.OperatorT()
        part.opcodeIndex, part.builtinOptionsType, part.builtinOptions = \
            op.opcodeIndex, op.builtinOptionsType, op.builtinOptions
        part.inputs = np.asarray(conv_inputs, dtype=np.int32)
        part.outputs = np.asarray(part_outputs[-1:] if parts > 1 else [output], dtype=np.int32)
        new_ops.append(part)
    if parts > 1:
        new_ops.append(concatenation_op(model, part_outputs, output, 3))
    return new_ops


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'grouped convolution')} split into convolutions of whole groups"


GROUPED_CONVOLUTIONS = Rewrite("grouped_convolution", priced=False, find=find_grouped_convolutions,
                               apply=split_grouped_convolutions, describe=_describe)
