"""Shapes the converter could only record as dynamic, written out once the run-time shape arithmetic is folded.

Keras 3 writes a Dense layer on a 3-D or 4-D map as a Tensordot: RESHAPE to [rows, depth] -> FULLY_CONNECTED ->
RESHAPE back, the first shape computed at run time from SHAPE (``[1, 64, 96] -> [1, 1]`` in the file, signature
[-1, -1]); its UpSampling2D's second repeat and the maps after it carry two dynamic dimensions the same way. Once
folding has made those shape inputs constants, every such tensor has one static shape: the RESHAPE's constant, and
from it the FULLY_CONNECTED's [rows, units] and the element-wise or convolution outputs that follow. Neither Vela
core reads a shape from a run-time input (the legacy core leaves the operators to the CPU, the default core
stops: "Does not have valid TFLite Semantics"), so those shapes are written into the file. Only the recorded
shapes change, never an operator or a value: the interpreter computes the same tensors, now of the shapes it
would have resized them to. Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    TensorT,
    constant,
    ints,
    name,
    opcode,
    options,
    signature,
    static_shape,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# Operators whose output has the shape of their first input.
_SAME_SHAPE = frozenset({
    "QUANTIZE", "DEQUANTIZE", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "LOGISTIC", "TANH",
    "HARD_SWISH", "GELU", "ELU", "EXP", "LOG", "RSQRT", "SQRT", "SQUARE", "NEG", "ABS", "SOFTMAX", "PRELU"})
# Element-wise operators of two inputs broadcast against each other.
_BROADCAST = frozenset({"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW"})


@dataclass(frozen=True)
class ShapePlan:
    """An operator's output (``tensor``) given the static ``shape`` its inputs determine."""

    site: Site
    position: int
    tensor: int
    shape: tuple[int, ...]
    operators: int = 1


def find_static_shapes(model: ModelT, subgraph: SubGraphT) -> list[ShapePlan]:
    """Every operator output recorded as dynamic whose shape its static inputs determine, in execution order (a
    shape found feeds the operators after it)."""
    tensors = subgraph.tensors or []
    known: dict[int, tuple[int, ...]] = {}

    def shape_of(index: int) -> tuple[int, ...] | None:
        return known.get(index) or (static_shape(tensors[index]) if 0 <= index < len(tensors) else None)

    plans = []
    for position, op in enumerate(subgraph.operators or []):
        outputs = ints(op.outputs)
        if len(outputs) != 1 or not well_formed(subgraph, op):
            continue
        output = tensors[outputs[0]]
        # An output recorded as dynamic, or one whose input this rewrite has given another shape (the batch fixed
        # at 1 on a Tensordot's [-1, units] output, which really holds a row per position).
        follows = any(i in known for i in ints(op.inputs))
        if not (_dynamic(output) or follows):
            continue
        shape = _inferred(model, subgraph, op, shape_of)
        recorded = tuple(int(v) for v in (output.shape if output.shape is not None else ()))
        sig = signature(output) if _dynamic(output) else None
        if shape is None or shape == recorded or not _agrees(shape, sig or tuple(-1 for _ in recorded), recorded):
            continue
        known[outputs[0]] = shape
        plans.append(ShapePlan(Site("static_shape", name(output)), position, outputs[0], shape))
    return plans


def _dynamic(tensor: TensorT) -> bool:
    return -1 in (signature(tensor) or ())


def _agrees(shape: tuple[int, ...], sig: tuple[int, ...], recorded: tuple[int, ...]) -> bool:
    """Whether ``shape`` is one the file allows: the signature's rank, and its static dimensions."""
    return len(shape) == len(sig) == len(recorded) and all(s in (-1, v) for s, v in zip(sig, shape, strict=True)) \
        and all(v > 0 for v in shape)


def _inferred(model: ModelT, subgraph: SubGraphT, op: OperatorT,
              get: Callable[[int], tuple[int, ...] | None]) -> tuple[int, ...] | None:
    """The output shape of ``op`` from its inputs' static shapes (``get``) and constant shape input, or None."""
    code, inputs = opcode(model, op), ints(op.inputs)
    if not inputs or inputs[0] < 0:
        return None
    first = get(inputs[0])
    if first is None:
        return None
    if code == "RESHAPE":
        return _reshaped(model, subgraph, op, first)
    if code == "FULLY_CONNECTED":
        return _fully_connected(model, subgraph, op, first)
    if code in _SAME_SHAPE:
        return first
    if code in _BROADCAST and len(inputs) == 2 and inputs[1] >= 0:
        second = get(inputs[1])
        try:
            return None if second is None else tuple(int(v) for v in np.broadcast_shapes(first, second))
        except ValueError:
            return None
    if code in ("CONV_2D", "DEPTHWISE_CONV_2D") and len(first) == 4:
        return _convolved(model, subgraph, op, code, first)
    return None


def _reshaped(model: ModelT, subgraph: SubGraphT, op: OperatorT, first: tuple[int, ...]) -> tuple[int, ...] | None:
    inputs = ints(op.inputs)
    wanted = constant(model, subgraph.tensors[inputs[1]]) if len(inputs) > 1 and inputs[1] >= 0 else None
    if wanted is None or wanted.dtype.kind != "i" or wanted.ndim != 1:
        return None
    dims = [int(v) for v in wanted]
    total = int(np.prod(first, dtype=np.int64))
    if dims.count(-1) > 1 or any(d < -1 or d == 0 for d in dims):
        return None
    if -1 in dims:
        rest = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if rest <= 0 or total % rest:
            return None
        dims[dims.index(-1)] = total // rest
    return tuple(dims) if int(np.prod(dims, dtype=np.int64)) == total else None


def _fully_connected(model: ModelT, subgraph: SubGraphT, op: OperatorT, first: tuple[int, ...]
                     ) -> tuple[int, ...] | None:
    inputs = ints(op.inputs)
    fc = options(op, schema.FullyConnectedOptionsT)
    weights = subgraph.tensors[inputs[1]] if len(inputs) > 1 and inputs[1] >= 0 else None
    weight_shape = static_shape(weights)
    if weight_shape is None or len(weight_shape) != 2 or not first or first[-1] <= 0:
        return None
    units, depth = weight_shape
    total = int(np.prod(first, dtype=np.int64))
    if fc is not None and fc.keepNumDims:
        return (*first[:-1], units) if first[-1] == depth else None
    return (total // depth, units) if total % depth == 0 else None


def _convolved(model: ModelT, subgraph: SubGraphT, op: OperatorT, code: str, first: tuple[int, ...]
               ) -> tuple[int, ...] | None:
    inputs = ints(op.inputs)
    kind = schema.Conv2DOptionsT if code == "CONV_2D" else schema.DepthwiseConv2DOptionsT
    conv = options(op, kind)
    weight_shape = static_shape(subgraph.tensors[inputs[1]]) if len(inputs) > 1 and inputs[1] >= 0 else None
    if conv is None or weight_shape is None or len(weight_shape) != 4 or min(conv.strideH, conv.strideW) < 1:
        return None
    kernel = ((weight_shape[1] - 1) * max(conv.dilationHFactor, 1) + 1,
              (weight_shape[2] - 1) * max(conv.dilationWFactor, 1) + 1)
    strides = (conv.strideH, conv.strideW)
    if conv.padding == schema.Padding.SAME:
        spatial = tuple(-(-size // stride) for size, stride in zip(first[1:3], strides, strict=True))
    else:
        spatial = tuple((size - k) // stride + 1 for size, k, stride in zip(first[1:3], kernel, strides, strict=True))
    depth = weight_shape[0] if code == "CONV_2D" else weight_shape[3]
    return (first[0], spatial[0], spatial[1], depth)


def write_static_shapes(model: ModelT, subgraph: SubGraphT, plans: Sequence[ShapePlan]) -> None:
    """Each planned tensor gets its static shape (and no signature: it is no longer dynamic)."""
    for plan in plans:
        tensor = subgraph.tensors[plan.tensor]
        tensor.shape = np.asarray(plan.shape, dtype=np.int32)
        tensor.shapeSignature = None


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'run-time shape')} written out static"


STATIC_SHAPES = Rewrite("static_shape", priced=False, find=find_static_shapes, apply=write_static_shapes,
                        describe=_describe)
