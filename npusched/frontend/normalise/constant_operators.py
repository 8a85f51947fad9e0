"""Operators of constants computed once, when the model is compiled: a recurrent layer's zero initial state run
through its FULLY_CONNECTED (and the SPLIT of the result) every inference.

An unrolled Keras or TF RNN multiplies its initial state (zeros) by the recurrent weights at the first step; the
exporter writes that FULLY_CONNECTED as an operator of constants. Run on the NPU it reads the whole recurrent
kernel from flash and its output stays live from the start of the network to the step that reads it (a GRU's
peak). ``shape folding`` (``folding``) evaluates only unquantised integer arithmetic with numpy; the quantised
operators here are evaluated by the TFLite reference interpreter itself, on a model of just those operators, so
each value is the one the kernels would compute at run time.

Not priced: a folded operator is work removed, and its constant is no larger than the constants it was computed
from (or a few KiB), kept in flash beside them, never in fast storage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ai_edge_litert import interpreter as litert
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    NUMPY_TYPES,
    ModelT,
    SubGraphT,
    constant,
    ints,
    name,
    opcode,
    pack_model,
    static_shape,
    well_formed,
)
from npusched.frontend.normalise.folding import MAX_GROWTH_BYTES, FoldPlan, apply_folds
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# The operators evaluated: deterministic kernels without state or subgraphs that the reference interpreter runs.
FOLDED_OPERATORS = frozenset({
    "FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "LOGISTIC",
    "TANH", "RELU", "RELU6", "SPLIT", "SPLIT_V", "CONCATENATION", "RESHAPE", "QUANTIZE", "DEQUANTIZE", "PAD",
    "STRIDED_SLICE", "SLICE", "PACK", "UNPACK", "TRANSPOSE",
})


def find_constant_operators(model: ModelT, subgraph: SubGraphT) -> list[FoldPlan]:
    """Every operator of constants this rewrite computes, in execution order; none where the reference
    interpreter cannot run them (the file is then left as it is)."""
    tensors = subgraph.tensors or []
    known = {index for index, tensor in enumerate(tensors) if constant(model, tensor) is not None}
    graph_outputs = set(ints(subgraph.outputs))
    found = []
    for position, op in enumerate(subgraph.operators or []):
        code = opcode(model, op)
        inputs = [i for i in ints(op.inputs) if i >= 0]
        outputs = ints(op.outputs)
        if (code not in FOLDED_OPERATORS or not inputs or not outputs or not well_formed(subgraph, op)
                or any(i not in known for i in inputs) or graph_outputs & set(outputs)
                or any(tensors[i].isVariable for i in inputs + outputs)):
            continue
        input_bytes = sum(_bytes(tensors[i]) or 0 for i in inputs)
        sizes = [_bytes(tensors[i]) for i in outputs]
        if any(size is None or size > max(MAX_GROWTH_BYTES, input_bytes) for size in sizes):
            continue
        known.update(outputs)
        found.append((position, tuple(outputs), code))
    values = _values(model, subgraph, found) if found else None
    if values is None:
        return []
    return [FoldPlan(Site("constant", name(tensors[outputs[0]])), position, outputs,
                     tuple(values[i] for i in outputs), code) for position, outputs, code in found]


def _describe(sites: int, operators: int) -> str:
    return f"computed {counted(operators, 'operator')} of constants when compiling"


# Applied as shape folding's plans are: each operator's outputs become constants and the operator goes.
CONSTANT_OPERATORS = Rewrite("constant", priced=False, find=find_constant_operators, apply=apply_folds,
                             describe=_describe)


def _bytes(tensor: schema.TensorT) -> int | None:
    shape = static_shape(tensor)
    if shape is None or tensor.type not in NUMPY_TYPES:
        return None
    return int(np.prod(shape, dtype=np.int64)) * NUMPY_TYPES[tensor.type].itemsize


def _values(model: ModelT, subgraph: SubGraphT, found: Sequence[tuple[int, tuple[int, ...], str]]
            ) -> dict[int, np.ndarray] | None:
    """The outputs of the operators at ``found``'s positions as the reference interpreter computes them, from a
    model that holds only those operators (no inputs: every value is known); None if the interpreter refuses it."""
    operators = subgraph.operators or []
    alone = schema.SubGraphT()
    alone.tensors = subgraph.tensors
    alone.operators = [operators[position] for position, _, _ in found]
    alone.inputs = np.asarray([], dtype=np.int32)
    outputs = [index for _, indices, _ in found for index in indices]
    alone.outputs = np.asarray(outputs, dtype=np.int32)
    probe = schema.ModelT()
    probe.version, probe.operatorCodes, probe.buffers = model.version, model.operatorCodes, list(model.buffers or [])
    probe.subgraphs = [alone]
    try:
        run = litert.Interpreter(model_content=pack_model(probe),
                                 experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
        run.allocate_tensors()
        run.invoke()
        values = {index: np.array(run.get_tensor(index)) for index in outputs}
    except (RuntimeError, ValueError):  # an operator the interpreter refuses: the file is left as it is
        return None
    tensors = subgraph.tensors
    for index, value in values.items():
        if value.dtype != NUMPY_TYPES[tensors[index].type] or value.shape != static_shape(tensors[index]):
            return None
    return values
