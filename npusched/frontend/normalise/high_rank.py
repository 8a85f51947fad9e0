"""Element-wise operators, SOFTMAX and BATCH_MATMUL of 5-D (and higher) maps written on 4-D views of them.

Keras 3 writes attention's einsums on [1, P, N, H, d] maps (MobileViT's patches P, heads H) and a GroupNormalization
on [1, H, W, G, C / G]: MULs, ADDs, SUBs, RSQRTs, SOFTMAXes and BATCH_MATMULs of 5-D maps. Neither Vela core runs an
operator with a map of more than 4 dimensions on the NPU. These operators do not care how the axes they treat alike
are grouped: an element-wise operator pairs elements by position (broadcasting along an axis where an input holds
1), SOFTMAX normalises each run along the last axis, BATCH_MATMUL multiplies the last two axes batch by batch. So
neighbouring axes are merged wherever every operand holds both whole (or both as 1): axes of 1 go, and the first
mergeable pairs merge until at most three axes are left, the map then read as [1, A, B, C] (a product's batch axes
all merge; its last two stay). Each activation operand is viewed so by a RESHAPE (no data moved), each constant
written at its view's shape, and the operator's output viewed back: the kernel computes every element from the
same elements as before, so exactly as before. ``reshape_chains`` then merges the RESHAPEs that meet.

A product whose right operand is [.., K, N] (Keras 3's einsums transpose it so) also gets it transposed to
[.., N, K] and read with ``adj_y``, the form the NPU runs (``matmul_operands`` does the same on 4-D maps): where a
TRANSPOSE read by the product alone made the operand, that TRANSPOSE's permutation is composed with the swap of the
last two axes, else a TRANSPOSE of those is added; ``transposes`` then writes either as swaps Vela legacy runs. A
transpose only moves bytes and ``adj_y`` reads them back transposed, so every product is as before. Not priced:
it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
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
    per_channel_scales,
    readers,
    replace_operators,
    reshape_op,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# Operators that pair their inputs' elements by position (broadcasting), and those of one input.
# (A float island's DEQUANTIZE, QUANTIZE and float operators are viewed too: they stay on the CPU, but the RESHAPEs
# around them then have at most 4 dimensions, which the NPU runs.)
_ELEMENTWISE = frozenset({"ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "RSQRT", "LOGISTIC",
                          "TANH", "RELU", "RELU6", "LEAKY_RELU", "HARD_SWISH", "GELU", "EXP", "ABS", "QUANTIZE",
                          "DEQUANTIZE", "NEG", "SQUARE"})
_MAX_RANK = 4


@dataclass(frozen=True)
class ViewPlan:
    """The operator at ``position`` on views: each input's view shape (None: an omitted input) and the output's."""

    site: Site
    position: int
    inputs: tuple[tuple[int, ...] | None, ...]
    output: tuple[int, ...]
    # A product read with adj_y from now: the permutation its right operand is transposed by, and the position of
    # the TRANSPOSE that made that operand (None: a TRANSPOSE is added).
    adj_perm: tuple[int, ...] | None = None
    adj_transpose: int | None = None
    operators: int = 1


def find_high_rank(model: ModelT, subgraph: SubGraphT) -> list[ViewPlan]:
    """Every element-wise operator, SOFTMAX and BATCH_MATMUL with a static map of more than 4 dimensions whose
    axes merge to at most 3."""
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    plans = []
    for position, op in enumerate(operators):
        code = opcode(model, op)
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        if code not in _ELEMENTWISE | {"SOFTMAX", "BATCH_MATMUL"} or len(outputs) != 1 or not inputs \
                or min(inputs) < 0 or not well_formed(subgraph, op):
            continue
        shapes = [static_shape(tensor_at(subgraph, i)) for i in inputs]
        out_shape = static_shape(tensor_at(subgraph, outputs[0]))
        if out_shape is None or any(s is None for s in shapes) \
                or max(len(s) for s in [out_shape, *shapes] if s is not None) <= _MAX_RANK:
            continue
        known = [s for s in shapes if s is not None]
        if any(constant(model, subgraph.tensors[i]) is not None and per_channel_scales(subgraph.tensors[i]) > 1
               for i in inputs):
            continue
        adj: tuple[tuple[int, ...] | None, int | None] = (None, None)
        if code == "BATCH_MATMUL":
            adj = _adjoint(model, subgraph, operators, read, kept, op, known)
            if adj[0] is not None:  # the right operand as the product will read it
                known = [known[0], tuple(known[1][:-2]) + (known[1][-1], known[1][-2])]
        views = _product_views(known, out_shape) if code == "BATCH_MATMUL" else \
            _elementwise_views(known, out_shape, 1 if code == "SOFTMAX" else 0)
        if views is None:
            continue
        plans.append(ViewPlan(Site("high_rank", name(subgraph.tensors[outputs[0]])), position, tuple(views[0]),
                              views[1], *adj))
    return plans


def _adjoint(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
             kept: set[int], op: OperatorT, shapes: list[tuple[int, ...]]
             ) -> tuple[tuple[int, ...] | None, int | None]:
    """For a product reading its right operand [.., K, N] (neither adj set): the permutation that makes it
    [.., N, K] from the map the TRANSPOSE making it read (the product alone reading that TRANSPOSE), and that
    TRANSPOSE's position; else the swap of the last two axes of the operand itself, and None."""
    product = options(op, schema.BatchMatMulOptionsT)
    rhs = ints(op.inputs)[1]
    if product is None or product.adjX or product.adjY or len(shapes) != 2 \
            or constant(model, subgraph.tensors[rhs]) is not None:
        return None, None
    rank = len(shapes[1])
    swap = (*range(rank - 2), rank - 1, rank - 2)
    making = [p for p, other in enumerate(operators) if rhs in ints(other.outputs)]
    if making and opcode(model, operators[making[0]]) == "TRANSPOSE" and read.get(rhs) == [operators.index(op)] \
            and rhs not in kept and well_formed(subgraph, operators[making[0]]):
        transpose = operators[making[0]]
        perm = int_input(model, subgraph, transpose, 1) if len(ints(transpose.inputs)) == 2 else None
        source = static_shape(tensor_at(subgraph, ints(transpose.inputs)[0]))
        if perm is not None and perm.shape == (rank,) and sorted(int(p) for p in perm) == list(range(rank)) \
                and source is not None and len(source) == rank:
            return tuple(int(perm[axis]) for axis in swap), making[0]
    return swap, None


def _elementwise_views(shapes: list[tuple[int, ...]], out: tuple[int, ...], kept_last: int
                       ) -> tuple[list[tuple[int, ...]], tuple[int, ...]] | None:
    """Each input's view and the output's, the axes merged as the module docstring says; the last ``kept_last``
    axes are never merged (SOFTMAX's)."""
    rank = len(out)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    if any(len(s) > rank or any(d not in (1, o) for d, o in zip(s, out, strict=True)) for s in padded):
        return None
    axes = [[a] for a in range(rank) if out[a] != 1 or a >= rank - kept_last]
    mergeable = len(axes) - kept_last
    while len(axes) > _MAX_RANK - 1:
        pair = next((i for i in range(mergeable - 1) if _merge_ok(padded, out, axes[i], axes[i + 1])), None)
        if pair is None:
            return None
        axes[pair:pair + 2] = [axes[pair] + axes[pair + 1]]
        mergeable -= 1

    def view(shape: tuple[int, ...]) -> tuple[int, ...]:
        merged = tuple(int(np.prod([shape[a] for a in group], dtype=np.int64)) for group in axes)
        return (1,) * (_MAX_RANK - len(merged)) + merged

    return [view(s) for s in padded], view(out)


def _merge_ok(shapes: list[tuple[int, ...]], out: tuple[int, ...], first: list[int], second: list[int]) -> bool:
    """Whether every input holds both axis groups whole or both as ones (so the merged axis broadcasts alike)."""
    for shape in shapes:
        whole = all(shape[a] == out[a] for a in first + second)
        ones = all(shape[a] == 1 for a in first + second)
        if not (whole or ones):
            return False
    return True


def _product_views(shapes: list[tuple[int, ...]], out: tuple[int, ...]
                   ) -> tuple[list[tuple[int, ...]], tuple[int, ...]] | None:
    """A BATCH_MATMUL's operands and output with all batch axes merged into one: [1, batch, rows, columns]."""
    if len(shapes) != 2 or len(shapes[0]) != len(shapes[1]) or len(shapes[0]) != len(out) \
            or shapes[0][:-2] != shapes[1][:-2] or shapes[0][:-2] != out[:-2]:
        return None
    batch = int(np.prod(out[:-2], dtype=np.int64))
    return [(1, batch, *s[-2:]) for s in shapes], (1, batch, *out[-2:])


def rewrite_high_rank(model: ModelT, subgraph: SubGraphT, plans: Sequence[ViewPlan]) -> None:
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        made: list[OperatorT] = []
        inputs = ints(subgraph.operators[plan.position].inputs)
        if plan.adj_perm is not None:
            made, inputs[1] = _transposed_operand(model, subgraph, plan, inputs[1])
            if plan.adj_transpose is not None:
                replaced[plan.adj_transpose] = []
        replaced[plan.position] = [*made, *_on_views(model, subgraph, plan, inputs)]
    replace_operators(subgraph, replaced)


def _transposed_operand(model: ModelT, subgraph: SubGraphT, plan: ViewPlan, rhs: int) -> tuple[list[OperatorT], int]:
    """The TRANSPOSE making a product's right operand [.., N, K] (from the map the TRANSPOSE that made the old one
    read, where there was one: that one goes), and that operand."""
    assert plan.adj_perm is not None
    source = rhs if plan.adj_transpose is None else ints(subgraph.operators[plan.adj_transpose].inputs)[0]
    like = subgraph.tensors[rhs]
    shape = static_shape(subgraph.tensors[source])
    assert shape is not None
    transposed = add_tensor(subgraph, like, "/adj_y", tuple(shape[p] for p in plan.adj_perm))
    perm = const_int32(model, subgraph, f"{name(like)}/adj_y/perm", list(plan.adj_perm), (len(plan.adj_perm),))
    return [new_operator(model, schema.BuiltinOperator.TRANSPOSE, [source, perm], [transposed],
                         schema.BuiltinOptions.TransposeOptions, schema.TransposeOptionsT())], transposed


def _on_views(model: ModelT, subgraph: SubGraphT, plan: ViewPlan, inputs: list[int]) -> list[OperatorT]:
    """RESHAPE each activation input to its view (a constant: written at it) -> the operator -> RESHAPE back."""
    op = subgraph.operators[plan.position]
    tensors = subgraph.tensors
    output = ints(op.outputs)[0]
    before: list[OperatorT] = []
    viewed_inputs = []
    for number, (index, shape) in enumerate(zip(inputs, plan.inputs, strict=True)):
        assert shape is not None
        value = constant(model, tensors[index])
        if value is not None:
            viewed_inputs.append(derived_constant(model, subgraph, index, value.reshape(shape), f"/view{number}"))
            continue
        viewed = add_tensor(subgraph, tensors[index], f"/view{number}", shape)
        before.append(reshape_op(model, subgraph, index, viewed, shape))
        viewed_inputs.append(viewed)
    result = add_tensor(subgraph, tensors[output], "/view", plan.output)
    out_shape = tuple(int(v) for v in tensors[output].shape)
    changed = {"adjY": True} if plan.adj_perm is not None else {}
    return [*before, copied_operator(op, viewed_inputs, [result], **changed),
            reshape_op(model, subgraph, result, output, out_shape)]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'operator')} of 5-D or higher maps written on 4-D views"


HIGH_RANK = Rewrite("high_rank", priced=False, find=find_high_rank, apply=rewrite_high_rank, describe=_describe)
