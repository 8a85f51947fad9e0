"""A BATCH_MATMUL's right operand written transposed (``adj_y``), so that the NPU can run it.

The NPU runs a product of two activations column by column (``npusched.lowering.batch_matmul``): each column needs
one row of the right operand with the shared axis in depth, which is the right operand as ``adj_y`` reads it,
[.., N, K]. Attention's scores·V (and Q·Kᵀ written with K transposed first) read it as [.., K, N]. The same product
with the right operand transposed back and ``adj_y`` set computes every element exactly as before (a transpose only
moves bytes), where that operand can be made by a transpose Vela legacy runs on the NPU.

The search follows the operand back through the RESHAPEs and TRANSPOSEs that made it (up to ``_CHAIN``) and, at
each map on the way, tries every permutation Vela legacy runs (``npu_rules.legacy_transpose``; none at all, too):
a candidate is taken when its elements, in order, are the wanted operand's, checked on the index maps themselves
(so the rewrite is exact by construction, whatever the layout). Q·Kᵀ with K transposed [0, 2, 3, 1] becomes K
transposed [0, 2, 1, 3]; V of heads split from [1, T, D] becomes [1, T, D] transposed to [1, D, T] and reshaped to
[1, H, d, T]; a TRANSPOSE of the last two axes alone goes. The operators the old form used go where nothing else
reads them. Not priced: without it the product stays on the CPU.
"""

from __future__ import annotations

import itertools
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


# How many RESHAPE / TRANSPOSE operators back from the operand the search looks.
_CHAIN = 4
_SHAPE_OPERATORS = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})


@dataclass(frozen=True)
class TransposedOperand:
    """The BATCH_MATMUL at ``position`` reads its right operand as ``source`` transposed by ``perm`` (none: as it
    is), reshaped to ``shape`` where that differs; ``removed`` are the positions of the old form's operators nothing
    else reads."""

    site: Site
    position: int
    source: int
    perm: tuple[int, ...] | None
    shape: tuple[int, ...]
    removed: tuple[int, ...]
    operators: int = 1


def find_matmul_operands(model: ModelT, subgraph: SubGraphT) -> list[TransposedOperand]:
    """BATCH_MATMULs of two int8 activations whose right operand is not transposed and can be made transposed."""
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
        if not isinstance(options, schema.BatchMatMulOptionsT) or options.adjY or options.adjX \
                or any(s is None for s in shapes) \
                or any(tensors[i].type != _INT8 for i in (lhs, rhs, ints(op.outputs)[0])) \
                or any(constant(model, tensors[i]) is not None for i in (lhs, rhs)):
            continue
        rhs_shape = shapes[1]
        assert rhs_shape is not None and shapes[0] is not None
        wanted = (*rhs_shape[:-2], rhs_shape[-1], rhs_shape[-2])
        if batch_matmul_form(shapes[0], wanted, (DataType.int8,) * 3, False, True, False) is not None:
            continue
        found = _transposed(model, subgraph, operators, producer, rhs)
        if found is None:
            continue
        source, perm, old = found
        # The old form's operators go where only this product reads them (and each only the one after it).
        removed: list[int] = []
        reader_of = rhs
        for old_position in old:
            if reader_of in kept or read.get(reader_of, []) != [removed[-1] if removed else position]:
                break
            removed.append(old_position)
            reader_of = ints(operators[old_position].inputs)[0]
        plans.append(TransposedOperand(Site("matmul_operand", name(tensors[ints(op.outputs)[0]])), position, source,
                                       perm, wanted, tuple(removed)))
    return plans


def _transposed(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], producer: dict[int, int],
                rhs: int) -> tuple[int, tuple[int, ...] | None, tuple[int, ...]] | None:
    """(source, permutation Vela legacy runs or None, the old form's positions from the operand back) that make the
    right operand with its last two axes swapped; None where no map of its chain gives it."""
    rhs_shape = static_shape(tensor_at(subgraph, rhs))
    assert rhs_shape is not None
    # Which element of each map back along the chain each element of the wanted operand is.
    chain: list[tuple[int, int | None]] = [(rhs, None)]  # (map, the position of the operator making the one after)
    while len(chain) <= _CHAIN:
        position = producer.get(chain[-1][0])
        op = operators[position] if position is not None else None
        if op is None or opcode(model, op) not in {*_SHAPE_OPERATORS, "TRANSPOSE"} or not well_formed(subgraph, op):
            break
        chain.append((ints(op.inputs)[0], position))
    shapes = [static_shape(tensor_at(subgraph, index)) for index, _ in chain]
    found: list[tuple[int, tuple[int, ...] | None, tuple[int, ...]]] = []
    for depth in range(len(chain)):
        source, source_shape = chain[depth][0], shapes[depth]
        if source_shape is None:
            break
        elements = np.arange(int(np.prod(source_shape, dtype=np.int64))).reshape(source_shape)
        made = _replayed(model, subgraph, operators, elements, [position for _, position in chain[1:depth + 1]])
        if made is None:
            break
        wanted = np.swapaxes(made, -1, -2).reshape(-1)
        old = tuple(position for _, position in chain[1:depth + 1] if position is not None)
        for perm in (None, *itertools.permutations(range(len(source_shape)))):
            if perm is not None and (perm == tuple(range(len(perm))) or not legacy_transpose(source_shape, perm)):
                continue
            if np.array_equal((elements if perm is None else np.transpose(elements, perm)).reshape(-1), wanted):
                found.append((source, perm, old))
                break
    # A map whose bytes already are the operand's (a reshape, no pass) before the nearest transpose.
    return next((f for f in found if f[1] is None), found[0] if found else None)


def _replayed(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], elements: np.ndarray,
              positions: list[int | None]) -> np.ndarray | None:
    """``elements`` taken through the operators at ``positions`` (nearest the operand first), in their order."""
    for position in reversed(positions):
        assert position is not None
        op = operators[position]
        out_shape = static_shape(tensor_at(subgraph, ints(op.outputs)[0]))
        if out_shape is None:
            return None
        if opcode(model, op) == "TRANSPOSE":
            perm = int_input(model, subgraph, op, 1) if len(ints(op.inputs)) == 2 else None
            if perm is None or perm.size != elements.ndim:
                return None
            elements = np.transpose(elements, [int(p) for p in perm.reshape(-1)])
        if elements.size != int(np.prod(out_shape, dtype=np.int64)):
            return None
        elements = elements.reshape(out_shape)
    return elements


def write_matmul_operands(model: ModelT, subgraph: SubGraphT, plans: Sequence[TransposedOperand]) -> None:
    """Each planned product reads its right operand transposed (``adj_y``); the old form's unread operators go."""
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        op = subgraph.operators[plan.position]
        lhs, rhs = ints(op.inputs)
        like = subgraph.tensors[rhs]
        source_shape = static_shape(subgraph.tensors[plan.source])
        assert source_shape is not None
        made, operand = [], plan.source
        if plan.perm is not None:
            transposed_shape = tuple(source_shape[p] for p in plan.perm)
            operand = add_tensor(subgraph, like, "/adj_y" + ("/t" if transposed_shape != plan.shape else ""),
                                 transposed_shape)
            perm = const_int32(model, subgraph, f"{name(like)}/adj_y/perm", list(plan.perm), (len(plan.perm),))
            made.append(new_operator(model, schema.BuiltinOperator.TRANSPOSE, [plan.source, perm], [operand],
                                     schema.BuiltinOptions.TransposeOptions, schema.TransposeOptionsT()))
        if static_shape(subgraph.tensors[operand]) != plan.shape:
            reshaped = add_tensor(subgraph, like, "/adj_y", plan.shape)
            made.append(reshape_op(model, subgraph, operand, reshaped, plan.shape))
            operand = reshaped
        made.append(copied_operator(op, [lhs, operand], ints(op.outputs), adjY=True))
        replaced[plan.position] = made
        replaced.update((p, []) for p in plan.removed)
    replace_operators(subgraph, replaced)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'BATCH_MATMUL')} reading the right operand transposed (adj_y)"


MATMUL_OPERANDS = Rewrite("matmul_operand", priced=False, find=find_matmul_operands, apply=write_matmul_operands,
                          describe=_describe)
