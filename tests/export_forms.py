"""Small models in the forms real converters write (seen in tests/data/exports), built with netgen's GraphBuilder
so that each normalisation rewrite for them is tested on a model of a few operators, at any seed, besides the zoo
file where it was found. Every builder returns the model's bytes; ``seed`` draws its weights and quantisation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npusched.netgen.flatbuffer import OperatorDef, TensorDef, serialise
from npusched.netgen.graph import Act, GraphBuilder, Quant


def _builder(seed: int, keras_style: bool = False) -> GraphBuilder:
    return GraphBuilder(np.random.default_rng(seed), keras_style=keras_style)


def _float_island(g: GraphBuilder, x: Act, kind: str, quant: Quant) -> Act:
    """DEQUANTIZE -> ``kind`` (NEG, SQUARE) -> QUANTIZE, as TF leaves an operator without an int8 kernel."""
    dequantized = g._add_tensor(TensorDef(g._name("dequantize"), x.shape, "FLOAT32"))
    g.operators.append(OperatorDef("DEQUANTIZE", (x.index,), (dequantized,)))
    result = g._add_tensor(TensorDef(g._name(kind.lower()), x.shape, "FLOAT32"))
    g.operators.append(OperatorDef(kind, (dequantized,), (result,)))
    y = g._act("quantize", x.shape, quant)
    g.operators.append(OperatorDef("QUANTIZE", (result,), (y.index,)))
    return y


def layer_norm(seed: int = 0, shape: Sequence[int] = (1, 6, 5, 24)) -> bytes:
    """Keras 3's LayerNormalization as TF 2.21 exports it: MEAN over axis -1, ``-mean`` as a float island (same
    scale, zero point -z - 1), SQUARED_DIFFERENCE, MEAN, ADD epsilon, RSQRT, the MULs and the ADD."""
    g = _builder(seed)
    x = g.conv(g.input(shape), int(shape[-1]), (1, 1), activation=None)
    mean = g.mean_axis(x, -1, keep_dims=True)
    g.operators[-1] = OperatorDef("MEAN", (x.index, g._const_int32("axis", (-1,))), (mean.index,),
                                  "ReducerOptions", (("KeepDims", True),))
    negated = _float_island(g, mean, "NEG", Quant(mean.quant.scale, -mean.quant.zero_point - 1))
    squared = g.binary("SQUARED_DIFFERENCE", x, mean, x.shape, Quant(float(np.float32(0.02)), -128))
    variance = g.mean_axis(squared, len(shape) - 1, keep_dims=True, quant=Quant(float(np.float32(0.01)), -128))
    inverse = g.rsqrt(variance)
    scaled = g.binary("MUL", x, inverse, x.shape)
    shift = g.binary("MUL", negated, inverse, mean.shape)
    return serialise(g.network([g.binary("ADD", scaled, shift, x.shape)], "Keras 3 layer norm"))


def group_norm(seed: int = 0, groups: int = 4) -> bytes:
    """Keras 3's GroupNormalization: the map reshaped to [1, H, W, G, C / G], MEAN over axes [1, 2, 4], SUB, a
    float SQUARE island, MEAN, RSQRT and MULs on 5-D maps, reshaped back."""
    g = _builder(seed)
    x = g.conv(g.input((1, 6, 4, 16)), 16, (1, 1), activation=None)
    grouped = g.reshape(x, (1, 6, 4, groups, 16 // groups))
    axes = g._const_int32("axes", (1, 2, 4))
    mean = g._act("mean", (1, 1, 1, groups, 1), g.output_quant(None))
    g._op("MEAN", (grouped.index, axes), mean, "ReducerOptions", KeepDims=True)
    centred = g.binary("SUB", grouped, mean, grouped.shape)
    squared = _float_island(g, centred, "SQUARE", Quant(float(np.float32(0.05)), -128))
    variance = g._act("variance", mean.shape, Quant(float(np.float32(0.02)), -128))
    g._op("MEAN", (squared.index, g._const_int32("axes", (1, 2, 4))), variance, "ReducerOptions", KeepDims=True)
    normalised = g.binary("MUL", centred, g.rsqrt(variance), grouped.shape)
    return serialise(g.network([g.reshape(normalised, (1, 6, 4, 16))], "Keras 3 group norm"))


def attention_5d(seed: int = 0, patches: int = 2, tokens: int = 9, heads: int = 2, depth: int = 8) -> bytes:
    """Keras 3's MultiHeadAttention on MobileViT's [1, P, N, D] patches: heads split to 5-D, the einsums as
    TRANSPOSEs, BATCH_MATMULs (K·Qᵀ, then the scores transposed), a MUL by the scale and SOFTMAX on 5-D maps."""
    g = _builder(seed)
    width = heads * depth
    x = g.reshape(g.conv(g.input((1, patches, tokens, width)), width, (1, 1), activation=None),
                  (1, patches, tokens, width))

    def split() -> Act:
        projected = g.conv(x, width, (1, 1), activation=None)
        return g.reshape(projected, (1, patches, tokens, heads, depth))

    query, key, value = split(), split(), split()
    scale, _ = g.scalar("scale", 0.25)
    query = g.binary("MUL", query, scale, query.shape)
    scores = g.batch_matmul(g.transpose(key, (0, 1, 3, 2, 4)), g.transpose(query, (0, 1, 3, 4, 2)))
    probabilities = g.softmax(g.transpose(scores, (0, 1, 2, 4, 3)))
    context = g.batch_matmul(probabilities, g.transpose(value, (0, 1, 3, 2, 4)))
    merged = g.reshape(g.transpose(context, (0, 1, 3, 2, 4)), (1, patches, tokens, width))
    return serialise(g.network([merged], "Keras 3 attention on 5-D maps"))


def tensordot_dense(seed: int = 0, tokens: int = 12, width: int = 16, units: int = 24) -> bytes:
    """Keras 3's Dense on a [1, T, D] sequence as a Tensordot: RESHAPE to [T, D] by a shape computed at run time
    (recorded [1, 1], signature [-1, -1]) -> FULLY_CONNECTED -> RESHAPE back to [1, T, units]."""
    g = _builder(seed, keras_style=True)
    x = g.input((1, tokens, width))
    shape = g._shape_op("SHAPE", (x.index,), "shape", (3,), "ShapeOptions", OutType=2)
    leading = g._shape_op("GATHER", (shape, g._const_int32("leading", (0, 1))), "gather", (2,), "GatherOptions",
                          Axis=0, BatchDims=0)
    rows = g._shape_op("REDUCE_PROD", (leading, g._const_int32("prod_axis", (0,))), "prod", (), "ReducerOptions",
                       KeepDims=False)
    flat = g._runtime_shape([rows, g._const_int32("depth", width)])
    back = g._shape_op("CONCATENATION", (leading, g._const_int32("units", (units,))), "concat", (3,),
                       "ConcatenationOptions", Axis=0, FusedActivationFunction=0)
    rows_map = g._add_tensor(TensorDef(g._name("tensordot_rows"), (1, 1), "INT8", (x.quant.scale,),
                                       (x.quant.zero_point,), shape_signature=(-1, -1)))
    g.operators.append(OperatorDef("RESHAPE", (x.index, flat), (rows_map,)))
    weights, bias = g.fc_params(x, units)
    product = g._act("matmul", (1, units), g.output_quant(None))
    g.operators.append(OperatorDef("FULLY_CONNECTED", (rows_map, weights, bias), (product.index,),
                                   "FullyConnectedOptions", (("FusedActivationFunction", 0),)))
    y = g._act("tensordot", (1, tokens, units), product.quant)
    g.operators.append(OperatorDef("RESHAPE", (product.index, back), (y.index,)))
    return serialise(g.network([y], "Keras 3 Tensordot"))


def last_step(seed: int = 0, steps: int = 10, width: int = 16, indices: Sequence[int] | int | None = None) -> bytes:
    """onnx2tf's ``output[:, -1]`` after a recurrent layer: GATHER along the time axis at constant indices (the
    last step by default)."""
    g = _builder(seed)
    x = g.reshape(g.conv(g.input((1, 1, steps, width)), width, (1, 3), activation=None), (1, steps, width))
    index_data = np.asarray(steps - 1 if indices is None else indices, dtype="<i8")
    index = g._add_tensor(TensorDef(g._name("indices"), index_data.shape, "INT64", data=index_data.tobytes()))
    shape = (1, width) if index_data.ndim == 0 else (1, index_data.size, width)
    picked = g._act("gather", shape, x.quant)
    g._op("GATHER", (x.index, index), picked, "GatherOptions", Axis=1, BatchDims=0)
    return serialise(g.network([picked], "GATHER of the last step"))


def global_max(seed: int = 0, keep_dims: bool = False) -> bytes:
    """Keras's GlobalMaxPooling2D: REDUCE_MAX over axes [1, 2]."""
    g = _builder(seed)
    x = g.conv(g.input((1, 10, 7, 8)), 12, (3, 3))
    shape = (1, 1, 1, 12) if keep_dims else (1, 12)
    y = g._act("max", shape, x.quant)
    g._op("REDUCE_MAX", (x.index, g._const_int32("axes", (1, 2))), y, "ReducerOptions", KeepDims=keep_dims)
    return serialise(g.network([y], "global max pooling"))


def patch_embedding(seed: int = 0, stride: int = 4, size: tuple[int, int] = (16, 24)) -> bytes:
    """A ViT's patch embedding (ConvNeXt's stem): CONV_2D whose kernel is its stride, over 3."""
    g = _builder(seed)
    x = g.input((1, *size, 3))
    y = g.conv(x, 16, (stride, stride), (stride, stride), activation=None, padding="VALID")
    return serialise(g.network([g.conv(y, 8, (1, 1))], f"{stride}x{stride} stride-{stride} patch embedding"))


def nchw_transposes(seed: int = 0) -> bytes:
    """onnx2tf's layout changes inside a network: TRANSPOSE [0, 3, 1, 2] before a flatten, [0, 2, 3, 1] back,
    and a [0, 3, 2, 1] as a softmax over another axis writes."""
    g = _builder(seed)
    x = g.conv(g.input((1, 6, 5, 8)), 8, (3, 3))
    nchw = g.transpose(x, (0, 3, 1, 2))
    back = g.conv(g.transpose(g.conv(g.transpose(nchw, (0, 2, 3, 1)), 8, (1, 1)), (0, 3, 2, 1)), 4, (1, 1))
    flat = g.fully_connected(g.reshape(nchw, (1, 240)), 10)
    return serialise(g.network([flat, back], "NCHW transposes"))


def pixel_shuffle(seed: int = 0, block: int = 2) -> bytes:
    """DEPTH_TO_SPACE as TF writes it, and PyTorch's pixel shuffle as onnx2tf writes it: RESHAPE to 6-D,
    TRANSPOSE, RESHAPE."""
    g = _builder(seed)
    x = g.conv(g.input((1, 5, 6, 4)), 4 * block * block, (3, 3), activation=None)
    shuffled = g.depth_to_space(x, block)
    six = g.reshape(x, (1, 5, 6, 4, block, block))
    moved = g.transpose(six, (0, 1, 4, 2, 5, 3))
    torch = g.reshape(moved, (1, 5 * block, 6 * block, 4))
    return serialise(g.network([shuffled, torch], "pixel shuffles"))


def gated_tcn(seed: int = 0, dilation: int = 2) -> bytes:
    """Keras 3's causal dilated Conv1D pair of a gated unit: PAD -> SPACE_TO_BATCH_ND on the 3-D sequence ->
    EXPAND_DIMS -> two CONV_2Ds -> RESHAPE (for SQUEEZE) -> BATCH_TO_SPACE_ND each, then TANH x SIGMOID."""
    g = _builder(seed)
    x = g.reshape(g.conv(g.input((1, 1, 15, 8)), 8, (1, 1)), (1, 15, 8))
    padded = g.pad(x, ((0, 0), (2 * dilation, 0), (0, 0)))
    extra = -padded.shape[1] % dilation
    phases = g.expand_dims(g.space_to_batch(padded, (dilation,), ((0, extra),)), 1)

    def branch() -> Act:
        convolved = g.conv(phases, 8, (1, 3), activation=None, padding="VALID")
        squeezed = g.reshape(convolved, (convolved.shape[0], convolved.shape[2], 8))
        g.operators[-1] = OperatorDef("RESHAPE", (convolved.index, g._const_int32("shape", (-1, convolved.shape[2],
                                                                                              8))),
                                      (squeezed.index,))
        return g.batch_to_space(squeezed, (dilation,), ((0, extra),))

    gate = g.binary("MUL", g.tanh(branch()), g.logistic(branch()), (1, 15, 8))
    return serialise(g.network([gate], "Keras 3 gated causal TCN"))


def upsamplings(seed: int = 0) -> bytes:
    """Keras 3's UpSampling2D repeats: (2, 1) and 4 x 4 from one shared EXPAND_DIMS, and from 1 x 1."""
    g = _builder(seed)
    x = g.conv(g.input((1, 4, 6, 8)), 8, (1, 1))
    expanded = g.expand_dims(x, 2)

    def repeat(source: Act, expand: Act, axis: int, factor: int) -> Act:
        shape = list(source.shape)
        shape[axis] *= factor
        if factor == 1:
            return g.reshape(expand, shape)
        multiples = [1] * 5
        multiples[axis + 1] = factor
        return g.reshape(g.tile(expand, multiples), shape)

    tall = repeat(x, expanded, 1, 2)
    wide_2x1 = repeat(tall, g.expand_dims(tall, 3), 2, 1)
    four = repeat(x, expanded, 1, 4)
    four = repeat(four, g.expand_dims(four, 3), 2, 4)
    pooled = g.pool(x, "AVERAGE", (4, 6), (1, 1), "VALID")
    grown = repeat(pooled, g.expand_dims(pooled, 2), 1, 3)
    grown = repeat(grown, g.expand_dims(grown, 3), 2, 5)
    return serialise(g.network([wide_2x1, four, grown], "Keras 3 up-samplings"))


def nchw_ends(seed: int = 0) -> bytes:
    """A PyTorch-style export: the NCHW input transposed to NHWC first, the output transposed back to NCHW."""
    g = GraphBuilder(np.random.default_rng(seed), torch_style=True)
    y = g.conv(g.input((1, 8, 6, 4)), 8, (3, 3))
    return serialise(g.network([g.output(y)], "NCHW at both ends"))
