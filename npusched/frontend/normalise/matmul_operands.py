"""A BATCH_MATMUL's right operand written transposed (``adj_y``), so that the NPU can run it.

The NPU runs a product of two activations column by column (``npusched.lowering.batch_matmul``): each column needs
one row of the right operand with the shared axis in depth, which is the right operand as ``adj_y`` reads it,
[.., N, K]. Attention's scores·V (and Q·Kᵀ written with K transposed first) read it as [.., K, N]. The same
product with the right operand transposed back and ``adj_y`` set computes every element exactly as before (a
transpose only moves bytes), and the transpose is one Vela legacy runs on the NPU, found in one of three ways:

* the operand is itself a TRANSPOSE: the same transpose with its last two axes swapped (Q·Kᵀ with K transposed
  [0, 2, 3, 1] becomes K transposed [0, 2, 1, 3]);
* it is heads split from [1, T, D] (RESHAPE to [1, T, H, d], TRANSPOSE [0, 2, 1, 3]): [1, T, D] transposed to
  [1, D, T] and reshaped to [1, H, d, T] (V of attention);
* its leading dimensions are all 1: a TRANSPOSE of its last two axes.

The transposes the old form used go where nothing else reads them. Not priced: without it the product stays on
the CPU.
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
    int_input,
    ints,
    name,
    new_operator,
    opcode,
    readers,
    replace_operators,
    reshape_op,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.frontend.npu_rules import batch_matmul_form, legacy_transpose
from npusched.ir import DataType

_INT8 = schema.TensorType.INT8


@dataclass(frozen=True)
class TransposedOperand:
    """The BATCH_MATMUL at ``position`` reads its right operand as ``source`` transposed by ``perm`` (then
    reshaped to ``shape`` when ``reshaped``); ``removed`` are the positions of the old form's operators nothing
    else reads."""

    site: Site
    position: int
    source: int
    perm: tuple[int, ...]
    shape: tuple[int, ...]
    reshaped: bool
    removed: tuple[int, ...]
    operators: int = 1


def find_matmul_operands(model: ModelT, subgraph: SubGraphT) -> list[TransposedOperand]:
    """BATCH_MATMULs of two int8 activations whose right operand is not transposed and has a form above."""
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    producer = {index: position for position, op in enumerate(operators) for index in ints(op.outputs)}
    tensors = subgraph.tensors or []
    plans = []
    for position, op in enumerate(operators):
        if opcode(model, op) != "BATCH_MATMUL" or not well_formed(subgraph, op) or len(ints(op.inputs)) != 2:
            continue
        options = op.builtinOptions
        lhs, rhs = ints(op.inputs)
        shapes = [static_shape(tensor_at(subgraph, i)) for i in (lhs, rhs, ints(op.outputs)[0])]
        if options is None or options.adjY or options.adjX or any(s is None for s in shapes) \
                or any(tensors[i].type != _INT8 for i in (lhs, rhs, ints(op.outputs)[0])) \
                or any(constant(model, tensors[i]) is not None for i in (lhs, rhs)):
            continue
        rhs_shape = shapes[1]
        assert rhs_shape is not None and shapes[0] is not None
        wanted = (*rhs_shape[:-2], rhs_shape[-1], rhs_shape[-2])
        if batch_matmul_form(shapes[0], wanted, (DataType.int8,) * 3, False, True, False) is not None:
            continue
        found = _transposed(model, subgraph, operators, producer, rhs, wanted)
        if found is None:
            continue
        source, perm, reshaped, old = found
        # The old form's operators go where only this product reads them (and the next only the one before).
        removed: list[int] = []
        reader_of = rhs
        for old_position in old:
            if reader_of in kept or read.get(reader_of, []) != [removed[-1] if removed else position]:
                break
            removed.append(old_position)
            reader_of = ints(operators[old_position].inputs)[0]
        plans.append(TransposedOperand(Site("matmul_operand", name(tensors[ints(op.outputs)[0]])), position, source,
                                       perm, wanted, reshaped, tuple(removed)))
    return plans


def _transposed(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], producer: dict[int, int],
                rhs: int, wanted: tuple[int, ...]) -> tuple[int, tuple[int, ...], bool, tuple[int, ...]] | None:
    """(source, permutation, reshaped after, old form's positions from the operand back) of a transpose Vela
    legacy runs that makes ``wanted`` from the right operand's sources; None where there is none."""
    rhs_shape = static_shape(tensor_at(subgraph, rhs))
    assert rhs_shape is not None
    position = producer.get(rhs)
    op = operators[position] if position is not None else None
    if position is not None and op is not None and opcode(model, op) == "TRANSPOSE" and well_formed(subgraph, op) \
            and len(ints(op.inputs)) == 2:
        perm_values = int_input(model, subgraph, op, 1)
        source = ints(op.inputs)[0]
        source_shape = static_shape(tensor_at(subgraph, source))
        if perm_values is not None and source_shape is not None and len(source_shape) == len(rhs_shape):
            perm = tuple(int(p) for p in perm_values.reshape(-1))
            swapped = (*perm[:-2], perm[-1], perm[-2])
            if legacy_transpose(source_shape, swapped):
                return source, swapped, False, (position,)
            split = _split_heads(model, subgraph, operators, producer, source, perm, wanted)
            if split is not None:
                return split[0], (0, 2, 1), True, (position, split[1])
    if int(np.prod(rhs_shape[:-2], dtype=np.int64)) == 1:
        last_two = (*range(len(rhs_shape) - 2), len(rhs_shape) - 1, len(rhs_shape) - 2)
        if legacy_transpose(rhs_shape, last_two):
            return rhs, last_two, False, ()
    return None


def _split_heads(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], producer: dict[int, int],
                 heads: int, perm: tuple[int, ...], wanted: tuple[int, ...]) -> tuple[int, int] | None:
    """(the [1, T, D] map, the RESHAPE's position) where ``heads`` [1, T, H, d] is it reshaped and ``perm`` is
    [0, 2, 1, 3]."""
    position = producer.get(heads)
    if perm != (0, 2, 1, 3) or position is None or opcode(model, operators[position]) != "RESHAPE":
        return None
    source = ints(operators[position].inputs)[0]
    source_shape = static_shape(tensor_at(subgraph, source))
    split = static_shape(tensor_at(subgraph, heads))
    if source_shape is None or split is None or len(source_shape) != 3 or source_shape[0] != 1 \
            or split[:2] != source_shape[:2] or split[2] * split[3] != source_shape[2] \
            or wanted != (1, split[2], split[3], split[1]):
        return None
    return source, position


def write_matmul_operands(model: ModelT, subgraph: SubGraphT, plans: Sequence[TransposedOperand]) -> None:
    """Each planned product reads its right operand transposed (``adj_y``); the old form's unread operators go."""
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        op = subgraph.operators[plan.position]
        lhs, rhs = ints(op.inputs)
        like = subgraph.tensors[rhs]
        source_shape = static_shape(subgraph.tensors[plan.source])
        assert source_shape is not None
        transposed_shape = tuple(source_shape[p] for p in plan.perm)
        transposed = add_tensor(subgraph, like, "/adj_y" + ("/t" if plan.reshaped else ""), transposed_shape)
        perm = const_int32(model, subgraph, f"{name(like)}/adj_y/perm", list(plan.perm), (len(plan.perm),))
        made = [new_operator(model, schema.BuiltinOperator.TRANSPOSE, [plan.source, perm], [transposed],
                             schema.BuiltinOptions.TransposeOptions, schema.TransposeOptionsT())]
        if plan.reshaped:
            operand = add_tensor(subgraph, like, "/adj_y", plan.shape)
            made.append(reshape_op(model, subgraph, transposed, operand, plan.shape))
        else:
            operand = transposed
        made.append(copied_operator(op, [lhs, operand], ints(op.outputs), adjY=True))
        replaced[plan.position] = made
        replaced.update((p, []) for p in plan.removed)
    replace_operators(subgraph, replaced)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'BATCH_MATMUL')} reading the right operand transposed (adj_y)"


MATMUL_OPERANDS = Rewrite("matmul_operand", priced=False, find=find_matmul_operands, apply=write_matmul_operands,
                          describe=_describe)
