"""Float islands computed in integers: DEQUANTIZE -> a float element-wise operator -> QUANTIZE, where an int8
operator Vela legacy runs gives the same int8 output for every int8 input.

TF's int8 converter leaves an operator without an int8 kernel in float between a DEQUANTIZE and a QUANTIZE: Keras 3's
LayerNormalization writes ``-mean`` as DEQUANTIZE -> NEG -> QUANTIZE (same scale, zero point -z - 1), a group norm's
square as DEQUANTIZE -> SQUARE -> QUANTIZE. Neither Vela core runs float operators, so each island is three CPU
operators splitting the NPU work. An island maps one int8 value to one int8 value, so it is a table of 256 entries;
so is each candidate written in its place: MUL by the constant -1 (NEG), MUL of the map by itself (SQUARE). The
reference interpreter computes both tables, on a model of the island alone and on one of the candidate alone, fed
all 256 int8 values; the candidate replaces the island only where the two tables are equal, entry for entry, which
is a proof (every element of the map is one of those 256 inputs). Where no candidate matches the island stays on
the CPU. Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import interpreter as litert
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    TensorT,
    constant,
    ints,
    make_constant,
    name,
    new_operator,
    opcode,
    pack_model,
    readers,
    replace_operators,
    sole_reader,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

_INT8, _FLOAT32 = schema.TensorType.INT8, schema.TensorType.FLOAT32
# The float element-wise operators an island may hold, each with the int8 form tried in its place.
_CANDIDATES = {"NEG": "negated", "SQUARE": "squared"}
_ALL_INT8 = np.arange(-128, 128, dtype=np.int8)


@dataclass(frozen=True)
class IslandPlan:
    """DEQUANTIZE at ``position`` -> ``kind`` -> QUANTIZE at ``positions[-1]``, from ``source`` to ``output``."""

    site: Site
    position: int
    positions: tuple[int, int, int]
    source: int
    output: int
    kind: str
    operators: int = 3


def find_float_islands(model: ModelT, subgraph: SubGraphT) -> list[IslandPlan]:
    """Every island of one element-wise float operator between int8 maps whose int8 form is exact."""
    operators = list(subgraph.operators or [])
    read = readers(operators)
    kept = set(ints(subgraph.outputs))
    plans = []
    for position, op in enumerate(operators):
        if opcode(model, op) != "DEQUANTIZE" or not well_formed(subgraph, op) or len(ints(op.inputs)) != 1:
            continue
        plan = _island(model, subgraph, operators, read, kept, position)
        if plan is not None and _exact(model, subgraph, plan):
            plans.append(plan)
    return plans


def _island(model: ModelT, subgraph: SubGraphT, operators: list[OperatorT], read: dict[int, list[int]],
            kept: set[int], position: int) -> IslandPlan | None:
    source = ints(operators[position].inputs)[0]
    chain = [position]
    index = ints(operators[position].outputs)[0]
    kinds = []
    for expected in ("ELEMENTWISE", "QUANTIZE"):
        step = sole_reader(operators, read, kept, index)
        if step is None or not well_formed(subgraph, step[1]) or len(ints(step[1].outputs)) != 1:
            return None
        code = opcode(model, step[1])
        if (expected == "QUANTIZE") != (code == "QUANTIZE") or (expected != "QUANTIZE" and code not in _CANDIDATES) \
                or len(ints(step[1].inputs)) != 1:
            return None
        kinds.append(code)
        chain.append(step[0])
        index = ints(step[1].outputs)[0]
    tensors = subgraph.tensors
    shapes = {static_shape(tensor_at(subgraph, i)) for i in (source, index, *_floats(operators, chain))}
    if len(shapes) != 1 or None in shapes or not _int8(tensors[source]) or not _int8(tensors[index]) \
            or constant(model, tensors[source]) is not None \
            or any(tensors[i].type != _FLOAT32 for i in _floats(operators, chain)):
        return None
    return IslandPlan(Site("float_island", name(tensors[index])), position, (chain[0], chain[1], chain[2]), source,
                      index, kinds[0])


def _floats(operators: list[OperatorT], chain: list[int]) -> list[int]:
    """The float maps of an island: the outputs of all but its last operator."""
    return [ints(operators[p].outputs)[0] for p in chain[:-1]]


def _int8(tensor: TensorT) -> bool:
    q = tensor.quantization
    return tensor.type == _INT8 and q is not None and q.scale is not None and len(q.scale) == 1 \
        and q.zeroPoint is not None and len(q.zeroPoint) == 1


# ---------------------------------------------------------------------------------------------------------------
# the proof: both tables from the reference interpreter

def _exact(model: ModelT, subgraph: SubGraphT, plan: IslandPlan) -> bool:
    """Whether the int8 form gives the island's output for every int8 input (both run by the interpreter)."""
    operators = subgraph.operators
    island = [operators[p] for p in plan.positions]
    form = _CANDIDATES[plan.kind]
    before = _table(model, subgraph, plan, lambda probe, tensors: _copied_chain(island, tensors))
    after = _table(model, subgraph, plan, lambda probe, tensors: _int8_form(probe, form, tensors))
    return before is not None and after is not None and np.array_equal(before, after)


_Build = Callable[[ModelT, tuple[SubGraphT, int, int]], list[OperatorT]]


def _table(model: ModelT, subgraph: SubGraphT, plan: IslandPlan, build: _Build) -> np.ndarray | None:
    """The output of a probe model (made by ``build`` from the source and output tensors) for all 256 inputs."""
    probe = schema.ModelT()
    probe.version, probe.operatorCodes = model.version, list(model.operatorCodes or [])
    probe.buffers = [schema.BufferT()]
    graph = schema.SubGraphT()
    graph.tensors = []
    source = _probe_tensor(graph, subgraph.tensors[plan.source], _INT8)
    output = _probe_tensor(graph, subgraph.tensors[plan.output], _INT8)
    make_constant(probe, graph.tensors[source], _ALL_INT8)
    graph.operators = build(probe, (graph, source, output))
    graph.inputs, graph.outputs = np.asarray([], dtype=np.int32), np.asarray([output], dtype=np.int32)
    probe.subgraphs = [graph]
    try:
        run = litert.Interpreter(model_content=pack_model(probe),
                                 experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
        run.allocate_tensors()
        run.invoke()
        return np.array(run.get_tensor(output))
    except (RuntimeError, ValueError):  # the interpreter refuses the probe: the island stays
        return None


def _probe_tensor(graph: schema.SubGraphT, like: TensorT, kind: int) -> int:
    """A [256] tensor of type ``kind`` with ``like``'s quantisation (none for a float)."""
    tensor = schema.TensorT()
    tensor.name, tensor.type, tensor.buffer = name(like), kind, 0
    tensor.quantization = like.quantization if kind == _INT8 else None
    tensor.shape = np.asarray([256], dtype=np.int32)
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def _copied_chain(island: list[OperatorT], probe_tensors: tuple[SubGraphT, int, int]) -> list[OperatorT]:
    """The island's operators on the probe's tensors (its float maps new [256] tensors)."""
    graph, source, output = probe_tensors
    floats = [_probe_tensor(graph, schema.TensorT(), _FLOAT32) for _ in island[:-1]]
    ins, outs = [source, *floats], [*floats, output]
    chain = []
    for op, i, o in zip(island, ins, outs, strict=True):
        copied = schema.OperatorT()
        copied.opcodeIndex, copied.builtinOptionsType, copied.builtinOptions = \
            op.opcodeIndex, op.builtinOptionsType, op.builtinOptions
        copied.inputs, copied.outputs = np.asarray([i], dtype=np.int32), np.asarray([o], dtype=np.int32)
        chain.append(copied)
    return chain


def _int8_form(model: ModelT, kind: str, probe_tensors: tuple[SubGraphT, int, int]) -> list[OperatorT]:
    """The int8 operator tried in the island's place, from ``source`` to ``output`` of ``probe_tensors``."""
    graph, source, output = probe_tensors
    mul_options = schema.MulOptionsT()
    if kind == "squared":
        second = source
    else:  # negated: times the constant -1 (int8 -1 at scale 1, so the rescale is the ratio of the scales alone)
        minus_one = schema.TensorT()
        minus_one.name, minus_one.type = f"{name(graph.tensors[output])}/minus_one", _INT8
        minus_one.quantization = schema.QuantizationParametersT()
        minus_one.quantization.scale, minus_one.quantization.zeroPoint = [1.0], [0]
        make_constant(model, minus_one, np.asarray(-1, dtype=np.int8))
        graph.tensors.append(minus_one)
        second = len(graph.tensors) - 1
    return [new_operator(model, schema.BuiltinOperator.MUL, [source, second], [output],
                         schema.BuiltinOptions.MulOptions, mul_options)]


# ---------------------------------------------------------------------------------------------------------------
# the rewrite

def rewrite_float_islands(model: ModelT, subgraph: SubGraphT, plans: Sequence[IslandPlan]) -> None:
    replaced: dict[int, list[OperatorT]] = {}
    for plan in plans:
        replaced.update((p, []) for p in plan.positions[:-1])
        replaced[plan.positions[-1]] = _int8_form(model, _CANDIDATES[plan.kind], (subgraph, plan.source, plan.output))
    replace_operators(subgraph, replaced)


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'float island')} computed in int8"


FLOAT_ISLANDS = Rewrite("float_island", priced=False, find=find_float_islands, apply=rewrite_float_islands,
                        describe=_describe)
