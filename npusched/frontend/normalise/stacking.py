"""UNPACK and PACK of activations as the slices and concatenations the NPU runs.

An unrolled recurrent layer (Keras's GRU(unroll=True), LSTM(unroll=True)) UNPACKs its [1, T, F] input into T steps
and PACKs the T states back. Vela legacy and npusched both run UNPACK and PACK on the NPU themselves (as Vela's
graph optimiser lowers them: ``npusched.lowering.rewrites_memory``), but Vela legacy mis-reads a negative UNPACK
axis (it fails at -1), so npusched leaves such an UNPACK to the CPU. Written here as the operators both run, every
static UNPACK and PACK reaches the NPU whatever its axis: UNPACK along an axis is SPLIT along it into slices of
length 1, each RESHAPEd without that axis; PACK is each part RESHAPEd with a unit axis there, then CONCATENATION
along it. Every tensor keeps its quantisation (TFLite's int8 UNPACK and PACK already move elements unchanged), the
original tensors keep their names and indices, and the written file is what both npusched and Vela read. Not
priced: the passes are those Vela makes of the operators themselves (a slice read, a slice written per part).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    concatenation_op,
    const_int32,
    ints,
    name,
    new_operator,
    opcode,
    options,
    replace_operators,
    reshape_op,
    same_quantisation,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# The NPU's maps have at most 4 dimensions: a wider slice or part stays on the CPU.
_MAX_RANK = 4


@dataclass(frozen=True)
class StackingPlan:
    """An UNPACK (``unpack``) or a PACK at ``position`` along ``axis`` (non-negative), and its length."""

    site: Site
    position: int
    unpack: bool
    axis: int
    length: int
    operators: int = 1


def find_stacking(model: ModelT, subgraph: SubGraphT) -> list[StackingPlan]:
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        code = opcode(model, op)
        if code not in ("UNPACK", "PACK") or not well_formed(subgraph, op):
            continue
        plan = _unpack_plan(subgraph, op, position) if code == "UNPACK" else _pack_plan(subgraph, op, position)
        if plan is not None:
            plans.append(plan)
    return plans


def _unpack_plan(subgraph: SubGraphT, op: OperatorT, position: int) -> StackingPlan | None:
    unpack_options = options(op, schema.UnpackOptionsT)
    inputs, outputs = ints(op.inputs), ints(op.outputs)
    shape = static_shape(tensor_at(subgraph, inputs[0])) if len(inputs) == 1 else None
    if unpack_options is None or shape is None or not 1 <= len(shape) <= _MAX_RANK:
        return None
    axis = unpack_options.axis + len(shape) if unpack_options.axis < 0 else unpack_options.axis
    if not 0 <= axis < len(shape) or shape[axis] != len(outputs) or len(outputs) < 1 \
            or any(static_shape(tensor_at(subgraph, o)) != shape[:axis] + shape[axis + 1:]
                   or not same_quantisation(subgraph, inputs[0], o) for o in outputs):
        return None
    return StackingPlan(Site("stacking", name(subgraph.tensors[inputs[0]])), position, True, axis, len(outputs))


def _pack_plan(subgraph: SubGraphT, op: OperatorT, position: int) -> StackingPlan | None:
    pack_options = options(op, schema.PackOptionsT)
    inputs, outputs = ints(op.inputs), ints(op.outputs)
    shape = static_shape(tensor_at(subgraph, outputs[0])) if len(outputs) == 1 and inputs else None
    if pack_options is None or shape is None or not 1 <= len(shape) <= _MAX_RANK or min(inputs) < 0:
        return None
    axis = pack_options.axis + len(shape) if pack_options.axis < 0 else pack_options.axis
    if not 0 <= axis < len(shape) or shape[axis] != len(inputs) \
            or any(static_shape(tensor_at(subgraph, i)) != shape[:axis] + shape[axis + 1:]
                   or not same_quantisation(subgraph, i, outputs[0]) for i in inputs):
        return None
    return StackingPlan(Site("stacking", name(subgraph.tensors[outputs[0]])), position, False, axis, len(inputs))


def rewrite_stacking(model: ModelT, subgraph: SubGraphT, plans: Sequence[StackingPlan]) -> None:
    replaced = {plan.position: (_split(model, subgraph, plan) if plan.unpack else _concatenate(model, subgraph, plan))
                for plan in plans}
    replace_operators(subgraph, replaced)


def _with_unit_axis(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return (*shape[:axis], 1, *shape[axis:])


def _split(model: ModelT, subgraph: SubGraphT, plan: StackingPlan) -> list[OperatorT]:
    """SPLIT along the axis into slices of length 1, each RESHAPEd into an UNPACK output."""
    op = subgraph.operators[plan.position]
    source, outputs = ints(op.inputs)[0], ints(op.outputs)
    tensors = subgraph.tensors
    slices = [add_tensor(subgraph, tensors[o], "/slice", _with_unit_axis(static_shape(tensors[o]) or (), plan.axis))
              for o in outputs]
    axis = const_int32(model, subgraph, f"{name(tensors[source])}/unpack_axis", [plan.axis], ())
    split_options = schema.SplitOptionsT()
    split_options.numSplits = plan.length
    split = new_operator(model, schema.BuiltinOperator.SPLIT, [axis, source], slices,
                         schema.BuiltinOptions.SplitOptions, split_options)
    return [split, *(reshape_op(model, subgraph, s, o, static_shape(tensors[o]) or ())
                     for s, o in zip(slices, outputs, strict=True))]


def _concatenate(model: ModelT, subgraph: SubGraphT, plan: StackingPlan) -> list[OperatorT]:
    """Each PACK input RESHAPEd with a unit axis, then CONCATENATION along it into the PACK output."""
    op = subgraph.operators[plan.position]
    inputs, output = ints(op.inputs), ints(op.outputs)[0]
    tensors = subgraph.tensors
    parts = [add_tensor(subgraph, tensors[output], f"/part{k}", _with_unit_axis(static_shape(tensors[i]) or (),
                                                                                plan.axis))
             for k, i in enumerate(inputs)]
    reshapes = [reshape_op(model, subgraph, i, p, static_shape(tensors[p]) or ())
                for i, p in zip(inputs, parts, strict=True)]
    return [*reshapes, concatenation_op(model, parts, output, plan.axis)]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'UNPACK or PACK', '')} of activations written as SPLIT or CONCATENATION"


STACKING = Rewrite("stacking", priced=False, find=find_stacking, apply=rewrite_stacking, describe=_describe)
