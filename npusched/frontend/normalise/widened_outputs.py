"""A 1x1 convolution making a channel-poor network output, computed on a 16-deep view (priced).

A network output is written to memory the CPU reads, channel by channel: C-byte bursts, where a segmentation
head's 1x1 convolution (and the LOGISTIC or other unary chain after it, to the output) spends most of its time.
k = 16 / C neighbouring pixels become one: the IFM viewed [1, H, W/k, k x Cin] and the weights block-diagonal,
so the OFM [1, H, W/k, 16] holds the output's bytes in their order, exactly (each output channel of each pixel
sums its own pixel's inputs, with its own bias and scales, repeated k times). The MACs grow k-fold, on a layer
that has few.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    DEEP_CHANNELS,
    Convolution,
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    convolution,
    ints,
    name,
    opcode,
    readers,
    repeated_constant,
    replace_operators,
    reshape_op,
    static_shape,
    tensor_at,
    zero_points,
)
from npusched.frontend.normalise.relayout import UNARY_ELEMENTWISE
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class WidenPlan:
    site: Site
    position: int
    conv: Convolution
    operators: int = 1


def find_widenable(model: ModelT, subgraph: SubGraphT) -> list[WidenPlan]:
    """1x1, stride 1, undilated convolutions whose IFM is 16-channel aligned (so its view is a plain reshape of
    bytes its producer writes in whole bricks), whose weights have zero points 0 and whose OFM of C channels (16
    divisible by C, W by 16 / C) reaches a network output through unary element-wise operators only."""
    operators = list(subgraph.operators or [])
    read = readers(operators)
    graph_outputs = set(ints(subgraph.outputs))

    def reaches_an_output(tensor: int, shape: tuple[int, ...]) -> bool:
        while tensor not in graph_outputs:
            following = read.get(tensor, [])
            if len(following) != 1 or opcode(model, operators[following[0]]) not in UNARY_ELEMENTWISE:
                return False
            outputs = ints(operators[following[0]].outputs)
            if len(outputs) != 1 or static_shape(tensor_at(subgraph, outputs[0])) != shape:
                return False
            tensor = outputs[0]
        return True

    plans = []
    for position, op in enumerate(operators):
        conv = convolution(model, subgraph, op)
        if conv is None or (conv.options.strideH, conv.options.strideW, conv.options.dilationHFactor,
                            conv.options.dilationWFactor) != (1, 1, 1, 1) \
                or conv.ifm_shape[0] != 1 or conv.ifm_shape[3] % DEEP_CHANNELS or conv.weights.shape[1:3] != (1, 1) \
                or conv.weights.shape[3] != conv.ifm_shape[3]:
            continue
        channels = conv.ofm_shape[3]
        if not 0 < channels < DEEP_CHANNELS or DEEP_CHANNELS % channels \
                or conv.ofm_shape[2] % (DEEP_CHANNELS // channels) or conv.ofm_shape[:3] != conv.ifm_shape[:3]:
            continue
        weights = subgraph.tensors[conv.inputs[1]]
        if weights.quantization is None or np.any(zero_points(weights) != 0) \
                or not reaches_an_output(conv.output, conv.ofm_shape):
            continue
        plans.append(WidenPlan(Site("widened_output", name(subgraph.tensors[conv.output])), position, conv))
    return plans


def widen_outputs(model: ModelT, subgraph: SubGraphT, plans: Sequence[WidenPlan]) -> None:
    replaced = {plan.position: _widened(model, subgraph, subgraph.operators[plan.position], plan.conv)
                for plan in plans}
    replace_operators(subgraph, replaced)


def _widened(model: ModelT, subgraph: SubGraphT, op: OperatorT, conv: Convolution) -> list[OperatorT]:
    tensors = subgraph.tensors
    inputs, output, ifm_shape, ofm_shape, weights = conv.inputs, conv.output, conv.ifm_shape, conv.ofm_shape, \
        conv.weights
    channels = ofm_shape[3]
    k = DEEP_CHANNELS // channels
    wide_weights = np.zeros((k * channels, 1, 1, k * weights.shape[3]), dtype=weights.dtype)
    for block in range(k):
        wide_weights[block * channels:(block + 1) * channels, :, :,
                     block * weights.shape[3]:(block + 1) * weights.shape[3]] = weights
    view_shape = (1, ifm_shape[1], ifm_shape[2] // k, k * ifm_shape[3])
    wide_inputs = [add_tensor(subgraph, tensors[inputs[0]], "/c16", view_shape),
                   repeated_constant(model, subgraph, inputs[1], wide_weights, k)]
    if len(inputs) == 3:
        wide_inputs.append(-1 if conv.bias is None else repeated_constant(model, subgraph, inputs[2],
                                                                          np.tile(conv.bias, k), k))
    deep = (1, ofm_shape[1], ofm_shape[2] // k, DEEP_CHANNELS)
    wide_output = add_tensor(subgraph, tensors[output], "/c16", deep)
    view = reshape_op(model, subgraph, inputs[0], wide_inputs[0], view_shape)
    op.inputs = np.asarray(wide_inputs, dtype=np.int32)
    op.outputs = np.asarray([wide_output], dtype=np.int32)
    return [view, op, reshape_op(model, subgraph, wide_output, output, ofm_shape)]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, '1x1 convolution')} making a channel-poor output computed 16 deep"


WIDENED_OUTPUTS = Rewrite("widened_output", priced=True, find=find_widenable, apply=widen_outputs,
                          describe=_describe)
