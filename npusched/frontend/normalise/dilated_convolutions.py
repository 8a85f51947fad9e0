"""Dilated convolutions TF wrote in SPACE_TO_BATCH_ND form, written back as one dilated convolution.

Where TF cannot use a convolution's dilation itself (Keras 3's Conv1D and DepthwiseConv2D, atrous ASPP branches), it
writes SPACE_TO_BATCH_ND (block = the dilation, zero-point padding) -> an undilated VALID (DEPTHWISE_)CONV_2D on the
block x block phases -> BATCH_TO_SPACE_ND (cropping what made the sides multiples of the block); Conv1D adds
EXPAND_DIMS -> ... -> SQUEEZE around the convolution on a 3-D [B, T, C] sequence (Keras 3 with TF 2.21: a RESHAPE to
[-1, T', C] in the SQUEEZE's place, its causal padding a PAD before the SPACE_TO_BATCH_ND; a gated unit's two
convolutions share one SPACE_TO_BATCH_ND, each rewritten). Neither Vela core's legacy path runs the two batch
operators on the NPU, so each such convolution is three CPU operators and two NPU subgraph boundaries. Per spatial
axis the chain computes ``out[j] = sum_k w[k] x_pad[j + c0 + d k]`` over the input padded by (p0, p1) and cropped by
(c0, c1): the convolution dilated by d over the input padded by (p0 - c0, p1 - c1). That is what replaces it: SAME or
VALID where those pads are SAME's or none, else a PAD (zero point, as SPACE_TO_BATCH_ND pads) before a VALID one; a
3-D sequence is viewed as [1, 1, T, C] by RESHAPEs. The weights, bias, quantisation and fused activation are the
convolution's. Not priced: without it the convolution and its batch operators run on the CPU.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    int_input,
    ints,
    name,
    new_operator,
    opcode,
    options,
    replace_operators,
    reshape_op,
    same_quantisation,
    sole_reader,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted


@dataclass(frozen=True)
class Branch:
    """One convolution of the phases and what follows it: the convolution at ``conv_position``, the operators after
    it up to BATCH_TO_SPACE_ND (``positions``, its last), whose output is ``output``, and the explicit padding
    (height, width) of the dilated convolution that replaces it."""

    conv_position: int
    positions: tuple[int, ...]
    output: int
    pads: tuple[tuple[int, int], tuple[int, int]]


@dataclass(frozen=True)
class DilatedPlan:
    """SPACE_TO_BATCH_ND at ``position`` (and the EXPAND_DIMS after it, for a 3-D sequence: ``shared``) read by
    one or more convolutions (``branches``: a gated unit's two), each ending in BATCH_TO_SPACE_ND: the input
    ``source`` (3-D or 4-D), the dilation and ``sequence_axis``, the axis EXPAND_DIMS added (else None)."""

    site: Site
    position: int
    shared: tuple[int, ...]
    branches: tuple[Branch, ...]
    source: int
    dilation: tuple[int, int]
    sequence_axis: int | None

    @property
    def positions(self) -> tuple[int, ...]:
        return tuple(sorted({*self.shared, *(p for b in self.branches for p in (b.conv_position, *b.positions))}))

    @property
    def operators(self) -> int:
        return len(self.branches)


def find_dilated_convolutions(model: ModelT, subgraph: SubGraphT) -> list[DilatedPlan]:
    return chains_from(model, subgraph, "SPACE_TO_BATCH_ND", functools.partial(_plan, model, subgraph))


def _plan(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
          kept: set[int], position: int) -> DilatedPlan | None:
    s2b = operators[position]
    source, s2b_out = ints(s2b.inputs)[0], ints(s2b.outputs)[0]
    shape = static_shape(tensor_at(subgraph, source))
    block, paddings = int_input(model, subgraph, s2b, 1), int_input(model, subgraph, s2b, 2)
    if shape is None or len(shape) not in (3, 4) or shape[0] != 1 or block is None or paddings is None \
            or block.shape != (len(shape) - 2,) or paddings.shape != (len(shape) - 2, 2) or (block < 1).any() \
            or (paddings < 0).any() or not same_quantisation(subgraph, source, s2b_out):
        return None
    shared = [position]
    phases = s2b_out
    sequence_axis = None
    if len(shape) == 3:
        step = sole_reader(operators, read, kept, s2b_out)
        if step is None or opcode(model, step[1]) != "EXPAND_DIMS":
            return None
        axis = int_input(model, subgraph, step[1], 1)
        if axis is None or axis.size != 1 or int(axis.reshape(-1)[0]) not in (1, 2, -2, -3):
            return None
        sequence_axis = int(axis.reshape(-1)[0]) % 4
        shared.append(step[0])
        phases = ints(step[1].outputs)[0]
    following = read.get(phases, [])
    if not following or phases in kept:
        return None
    if len(shape) == 3:  # the sequence runs along the spatial axis EXPAND_DIMS did not add
        dilation = (1, int(block[0])) if sequence_axis == 1 else (int(block[0]), 1)
    else:
        dilation = (int(block[0]), int(block[1]))
    branches = []
    for conv_position in following:
        branch = _branch(model, subgraph, operators, read, kept, conv_position, phases, shape, block, paddings,
                         sequence_axis, dilation)
        if branch is None:
            return None
        branches.append(branch)
    return DilatedPlan(Site("dilated_convolution", name(subgraph.tensors[branches[0].output])), position,
                       tuple(shared), tuple(branches), source, dilation, sequence_axis)


def _branch(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
            kept: set[int], conv_position: int, phases: int, shape: tuple[int, ...], block: Any, paddings: Any,
            sequence_axis: int | None, dilation: tuple[int, int]) -> Branch | None:
    """The convolution at ``conv_position`` reading the phases, up to its BATCH_TO_SPACE_ND, or None."""
    conv = operators[conv_position]
    code = opcode(model, conv)
    conv_options = options(conv, CONVOLUTION_OPTIONS[code]) if code in CONVOLUTION_OPTIONS else None
    if conv_options is None or not well_formed(subgraph, conv) or len(ints(conv.inputs)) < 2 \
            or ints(conv.inputs)[0] != phases or phases in ints(conv.inputs)[1:] \
            or (conv_options.strideH, conv_options.strideW, conv_options.dilationHFactor,
                conv_options.dilationWFactor, conv_options.padding) != (1, 1, 1, 1, schema.Padding.VALID):
        return None
    chain = []
    step = sole_reader(operators, read, kept, ints(conv.outputs)[0])
    if step is not None and sequence_axis is not None:
        if not _drops_axis(model, subgraph, step[1], sequence_axis):
            return None
        chain.append(step[0])
        step = sole_reader(operators, read, kept, ints(step[1].outputs)[0])
    if step is None or opcode(model, step[1]) != "BATCH_TO_SPACE_ND" or not well_formed(subgraph, step[1]):
        return None
    b2s_position, b2s = step
    b2s_block, crops = int_input(model, subgraph, b2s, 1), int_input(model, subgraph, b2s, 2)
    if b2s_block is None or crops is None or crops.shape != paddings.shape or b2s_block.shape != block.shape \
            or (b2s_block != block).any() or (crops < 0).any() or (crops > paddings).any():
        return None
    chain.append(b2s_position)
    pads = paddings - crops
    if len(shape) == 3:
        unit = (0, 0)
        spatial_pads = (unit, tuple(pads[0])) if sequence_axis == 1 else (tuple(pads[0]), unit)
    else:
        spatial_pads = (tuple(pads[0]), tuple(pads[1]))
    output = ints(b2s.outputs)[0]
    if not same_quantisation(subgraph, ints(conv.outputs)[0], output) \
            or not _shapes_agree(model, subgraph, conv, shape, output, dilation, spatial_pads, sequence_axis):
        return None
    as_ints = tuple((int(a), int(b)) for a, b in spatial_pads)
    return Branch(conv_position, tuple(chain), output, (as_ints[0], as_ints[1]))


def _drops_axis(model: ModelT, subgraph: SubGraphT, op: OperatorT, axis: int) -> bool:
    """Whether ``op`` removes the unit axis ``axis`` EXPAND_DIMS added: a SQUEEZE of it, or (Keras 3) a RESHAPE to
    the 3-D shape without it (its leading dimension the run-time batch, -1)."""
    if opcode(model, op) == "SQUEEZE":
        squeezed = options(op, schema.SqueezeOptionsT)
        return squeezed is not None and [d % 4 for d in ints(squeezed.squeezeDims)] == [axis]
    if opcode(model, op) != "RESHAPE" or len(ints(op.inputs)) != 2 or not well_formed(subgraph, op):
        return False
    wanted = int_input(model, subgraph, op, 1)
    made = tensor_at(subgraph, ints(op.inputs)[0])
    shape = [int(v) for v in made.shape] if made is not None and made.shape is not None else []
    if wanted is None or wanted.ndim != 1 or len(shape) != 4 or shape[axis] != 1:
        return False
    kept = [int(v) for v in wanted]
    expected = [v for position, v in enumerate(shape) if position != axis]
    return len(kept) == 3 and kept[1:] == expected[1:] and kept[0] in (-1, expected[0])


def _four_d(shape: Sequence[int], sequence_axis: int | None) -> tuple[int, ...]:
    """A 3-D [1, T, C] shape as the 4-D view the dilated convolution reads ([1, 1, T, C] or [1, T, 1, C])."""
    if sequence_axis is None:
        return tuple(shape)
    return (*shape[:sequence_axis], 1, *shape[sequence_axis:])


def _shapes_agree(model: ModelT, subgraph: SubGraphT, conv: OperatorT, shape: tuple[int, ...], output: int,
                  dilation: tuple[int, int], pads: Any, sequence_axis: int | None) -> bool:
    """Whether the dilated convolution over the padded input makes exactly the chain's output shape (so the
    reading of every operator above is the file's)."""
    weights = constant(model, tensor_at(subgraph, ints(conv.inputs)[1]))
    out_shape = static_shape(tensor_at(subgraph, output))
    conv_out = static_shape(tensor_at(subgraph, ints(conv.outputs)[0]))
    if weights is None or weights.ndim != 4 or out_shape is None or conv_out is None:
        return False
    ifm = _four_d(shape, sequence_axis)
    kernel = weights.shape[1:3]
    spatial = tuple(size + before + after - d * (k - 1)
                    for size, (before, after), d, k in zip(ifm[1:3], pads, dilation, kernel, strict=True))
    return min(spatial) >= 1 and _four_d(out_shape, sequence_axis) == (1, *spatial, conv_out[-1])


def rewrite_dilated_convolutions(model: ModelT, subgraph: SubGraphT, plans: Sequence[DilatedPlan]) -> None:
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        replaced.update((p, []) for p in plan.shared)
        for branch in plan.branches:
            replaced.update((p, []) for p in (branch.conv_position, *branch.positions[:-1]))
            replaced[branch.positions[-1]] = _dilated(model, subgraph, plan, branch)
    replace_operators(subgraph, replaced)


def _dilated(model: ModelT, subgraph: SubGraphT, plan: DilatedPlan, branch: Branch) -> list[OperatorT]:
    tensors = subgraph.tensors
    number = plan.branches.index(branch)
    own = f"/{number}" if number else ""  # the maps a second branch makes are its own
    conv = subgraph.operators[branch.conv_position]
    shape = tuple(int(v) for v in tensors[plan.source].shape)
    out_shape = tuple(int(v) for v in tensors[branch.output].shape)
    ifm, ofm = plan.source, branch.output
    new_ops: list[OperatorT] = []
    if plan.sequence_axis is not None:
        ifm = add_tensor(subgraph, tensors[plan.source], f"/4d{own}",
                         _four_d(shape, plan.sequence_axis))
        ofm = add_tensor(subgraph, tensors[branch.output], "/4d", _four_d(out_shape, plan.sequence_axis))
        new_ops.append(reshape_op(model, subgraph, plan.source, ifm, _four_d(shape, plan.sequence_axis)))
    ifm_shape = tuple(int(v) for v in tensors[ifm].shape)
    kernel = constant(model, tensors[ints(conv.inputs)[1]]).shape[1:3]  # type: ignore[union-attr]
    same = tuple(_same_pads(k, d) for k, d in zip(kernel, plan.dilation, strict=True))
    padding = schema.Padding.VALID
    if branch.pads == same:
        padding = schema.Padding.SAME
    elif any(branch.pads[0] + branch.pads[1]):
        padded_shape = (1, ifm_shape[1] + sum(branch.pads[0]), ifm_shape[2] + sum(branch.pads[1]), ifm_shape[3])
        padded = add_tensor(subgraph, tensors[plan.source], f"/padded{own}", padded_shape)
        paddings = const_int32(model, subgraph, f"{name(tensors[branch.output])}/paddings",
                               [0, 0, *branch.pads[0], *branch.pads[1], 0, 0], (4, 2))
        new_ops.append(new_operator(model, schema.BuiltinOperator.PAD, [ifm, paddings], [padded],
                                    schema.BuiltinOptions.PadOptions, schema.PadOptionsT()))
        ifm = padded
    new_ops.append(copied_operator(conv, [ifm, *ints(conv.inputs)[1:]], [ofm], padding=padding,
                                   dilationHFactor=plan.dilation[0], dilationWFactor=plan.dilation[1]))
    if plan.sequence_axis is not None:
        new_ops.append(reshape_op(model, subgraph, ofm, branch.output, out_shape))
    return new_ops


def _same_pads(kernel: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME padding (before, after) of a stride-1 convolution dilated by ``dilation``."""
    total = dilation * (kernel - 1)
    return total // 2, total - total // 2


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'SPACE_TO_BATCH_ND convolution')} written as dilated convolutions"


DILATED_CONVOLUTIONS = Rewrite("dilated_convolution", priced=False, find=find_dilated_convolutions,
                               apply=rewrite_dilated_convolutions, describe=_describe)
