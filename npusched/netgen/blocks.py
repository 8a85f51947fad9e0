"""Building blocks of well-known int8 vision and audio networks, on top of ``GraphBuilder``.

Each block takes the builder and its input activation and returns its output activation; random choices (kernel
sizes, squeeze-excite gates, upsampling kinds) come from the builder's seeded generator.
"""

from __future__ import annotations

from npusched.netgen.graph import Act, GraphBuilder


def stem(g: GraphBuilder, x: Act, filters: int, activation: str | None = "RELU6") -> Act:
    """The usual first layer: a 3x3 stride-2 convolution."""
    return g.conv(x, filters, (3, 3), (2, 2), activation)


def _activate(g: GraphBuilder, x: Act, activation: str) -> Act:
    """Apply an activation that is not fusable into the layer: hard-swish or swish (x * logistic(x))."""
    if activation == "HARD_SWISH":
        return g.hard_swish(x)
    if activation == "SWISH":
        return g.mul(x, g.logistic(x))
    return x


def _fused(activation: str) -> str | None:
    return activation if activation in ("RELU", "RELU6") else None


def squeeze_excite(g: GraphBuilder, x: Act, reduced: int, gate: str, pool: str, use_fc: bool) -> Act:
    """Squeeze-excite: global pool -> reduce (FC or 1x1 conv) -> ReLU -> expand -> gate -> broadcast MUL."""
    if pool == "MEAN":
        squeezed = g.mean(x)
    else:
        squeezed = g.pool(x, "AVERAGE", (x.height, x.width), (1, 1), "VALID")
    if use_fc:
        flat = g.reshape(squeezed, (1, x.channels))
        hidden = g.fully_connected(flat, reduced, "RELU")
        expanded = g.reshape(g.fully_connected(hidden, x.channels), (1, 1, 1, x.channels))
    else:
        expanded = g.conv(g.conv(squeezed, reduced, activation="RELU"), x.channels, activation=None)
    gated = g.hard_swish(expanded) if gate == "HARD_SWISH" else g.logistic(expanded)
    return g.mul(x, gated)


def inverted_residual(g: GraphBuilder, x: Act, filters: int, stride: int, expansion: int, kernel: int = 3,
                      activation: str = "RELU6", se_ratio: float = 0.0, dilation: int = 1) -> Act:
    """MobileNet-V2/V3 and EfficientNet block: 1x1 expand -> depthwise (dilated by ``dilation``) ->
    (squeeze-excite) -> 1x1 project, with a residual ADD when the shape is kept."""
    y = x
    if expansion > 1:
        y = _activate(g, g.conv(y, x.channels * expansion, activation=_fused(activation)), activation)
    y = _activate(g, g.depthwise(y, (kernel, kernel), (stride, stride), _fused(activation), dilation=dilation),
                  activation)
    if se_ratio > 0:
        gate = "LOGISTIC" if activation == "SWISH" else str(g.rng.choice(["HARD_SWISH", "LOGISTIC"]))
        y = squeeze_excite(g, y, max(8, int(y.channels * se_ratio)), gate, str(g.rng.choice(["MEAN", "AVERAGE"])),
                           bool(g.rng.integers(2)))
    y = g.conv(y, filters, activation=None)
    if stride == 1 and filters == x.channels:
        y = g.add(y, x)
    return y


def dense_block(g: GraphBuilder, x: Act, layers: int, growth: int) -> Act:
    """DenseNet: each layer (1x1 bottleneck -> 3x3 conv) appends ``growth`` channels by CONCATENATION."""
    for _ in range(layers):
        bottleneck = g.conv(x, 4 * growth, activation="RELU")
        new = g.conv(bottleneck, growth, (3, 3), activation="RELU", quant=x.quant)
        x = g.concat([x, new], quant=x.quant)
    return x


def dense_transition(g: GraphBuilder, x: Act, filters: int) -> Act:
    """DenseNet transition: 1x1 convolution then 2x2 average pooling."""
    return g.pool(g.conv(x, filters, activation="RELU"), "AVERAGE", (2, 2), (2, 2), "VALID")


def separable(g: GraphBuilder, x: Act, filters: int, kernel: int, stride: int = 1) -> Act:
    """Separable convolution: depthwise kxk then pointwise 1x1."""
    return g.conv(g.depthwise(x, (kernel, kernel), (stride, stride), "RELU"), filters, activation="RELU")


def nasnet_cell(g: GraphBuilder, x: Act, filters: int, reduction: bool) -> Act:
    """A NASNet-like cell: a 1x1 squeeze, then several pairs of branches (separable 3x3/5x5, pooling, identity)
    each summed by ADD, and all pair sums concatenated."""
    stride = 2 if reduction else 1
    h = g.conv(x, filters, activation="RELU")
    pairs = int(g.rng.integers(3, 6))
    cell_quant = g.output_quant("RELU")
    sums = []
    for _ in range(pairs):
        branches = []
        for _ in range(2):
            choice = int(g.rng.integers(5))
            if choice == 0:
                branch = separable(g, h, filters, 3, stride)
            elif choice == 1:
                branch = separable(g, h, filters, 5, stride)
            elif choice == 2:
                branch = g.pool(h, "AVERAGE", (3, 3), (stride, stride))
            elif choice == 3:
                branch = g.pool(h, "MAX", (3, 3), (stride, stride))
            else:
                branch = g.conv(h, filters, stride=(stride, stride), activation="RELU") if reduction else h
            branches.append(branch)
        sums.append(g.add(branches[0], branches[1]))
    # TFLite's int8 concatenation keeps one quantisation: the sums are requantised to it by a 1x1 conv each.
    parts = [g.conv(s, filters, activation="RELU", quant=cell_quant) for s in sums]
    return g.concat(parts, quant=cell_quant)


def inception_block(g: GraphBuilder, x: Act, widths: tuple[int, ...], factorised: bool) -> Act:
    """InceptionV3's Inception-A (or, ``factorised``, its 7x7-factorised later form): four branches concatenated
    on the channel axis: 1x1; 1x1 -> 5x5 (or 1x1 -> 1x7 -> 7x1); 1x1 -> 3x3 -> 3x3; 3x3 average pool (stride 1,
    SAME) -> 1x1. ``widths``: the 1x1, the second branch's reduce and output, the third's reduce and output, and
    the pool projection. Every branch ends in a convolution, which writes the block's shared quantisation."""
    single, reduce_wide, wide, reduce_double, double, projection = widths
    block_quant = g.output_quant("RELU")
    branch_1x1 = g.conv(x, single, activation="RELU", quant=block_quant)
    y = g.conv(x, reduce_wide, activation="RELU")
    if factorised:
        y = g.conv(g.conv(y, reduce_wide, (1, 7), activation="RELU"), wide, (7, 1), activation="RELU",
                   quant=block_quant)
    else:
        y = g.conv(y, wide, (5, 5), activation="RELU", quant=block_quant)
    z = g.conv(g.conv(x, reduce_double, activation="RELU"), double, (3, 3), activation="RELU")
    z = g.conv(z, double, (3, 3), activation="RELU", quant=block_quant)
    pooled = g.conv(g.pool(x, "AVERAGE", (3, 3), (1, 1), "SAME"), projection, activation="RELU", quant=block_quant)
    return g.concat([branch_1x1, y, z, pooled], quant=block_quant)


def inception_reduction(g: GraphBuilder, x: Act, wide: int, reduce_double: int, double: int) -> Act:
    """InceptionV3's grid reduction: 3x3 stride-2 convolution; 1x1 -> 3x3 -> 3x3 stride 2; 3x3 stride-2 max pool
    of the input itself, concatenated. The padding (VALID as Keras's InceptionV3, or SAME; SAME on maps under 3
    pixels) is drawn. A max pool keeps its input's quantisation, so the whole block writes the input's."""
    padding = str(g.rng.choice(["VALID", "SAME"]))
    if min(x.height, x.width) < 3:
        padding = "SAME"
    branch_3x3 = g.conv(x, wide, (3, 3), (2, 2), "RELU", padding, quant=x.quant)
    z = g.conv(g.conv(x, reduce_double, activation="RELU"), double, (3, 3), activation="RELU")
    z = g.conv(z, double, (3, 3), (2, 2), "RELU", padding, quant=x.quant)
    pooled = g.pool(x, "MAX", (3, 3), (2, 2), padding)
    return g.concat([branch_3x3, z, pooled], quant=x.quant)


def unet_encoder(g: GraphBuilder, x: Act, filters: int) -> tuple[Act, Act]:
    """Two 3x3 convolutions (the skip output) then 2x2 max pooling."""
    skip = g.conv(g.conv(x, filters, (3, 3)), filters, (3, 3))
    return skip, g.pool(skip, "MAX", (2, 2), (2, 2), "VALID")


def unet_decoder(g: GraphBuilder, x: Act, skip: Act, filters: int) -> Act:
    """Upsample by 2 (nearest, bilinear or transposed convolution), concatenate the skip, two 3x3 convolutions."""
    kind = int(g.rng.integers(3))
    if kind == 0:
        up = g.resize(x, 2, "NEAREST")
    elif kind == 1:
        up = g.resize(x, 2, "BILINEAR", half_pixel_centers=bool(g.rng.integers(2)))
    else:
        up = g.transpose_conv(x, filters)
    up = g.conv(up, filters, (1, 1), quant=skip.quant)  # brings the upsampled map to the skip's quantisation
    y = g.concat([up, skip], quant=skip.quant)
    return g.conv(g.conv(y, filters, (3, 3)), filters, (3, 3))


def resnet_basic(g: GraphBuilder, x: Act, filters: int, stride: int) -> Act:
    """ResNet basic block: two 3x3 convolutions and a shortcut (1x1 strided conv when the shape changes)."""
    y = g.conv(g.conv(x, filters, (3, 3), (stride, stride)), filters, (3, 3), activation=None)
    shortcut = x
    if stride != 1 or filters != x.channels:
        shortcut = g.conv(x, filters, (1, 1), (stride, stride), activation=None)
    return g.add(y, shortcut, "RELU")


def regnet_block(g: GraphBuilder, x: Act, filters: int, stride: int, group_width: int, se: bool) -> Act:
    """RegNet X block (Y with ``se``): 1x1 conv, 3x3 grouped conv (groups of ``group_width`` channels, the
    stride), squeeze-excite for Y, 1x1 conv, and a shortcut (1x1 strided conv when the shape changes) added
    before the ReLU."""
    y = g.conv(x, filters)
    y = g.conv(y, filters, (3, 3), (stride, stride), groups=filters // group_width)
    if se:
        y = squeeze_excite(g, y, max(8, x.channels // 4), "LOGISTIC", "MEAN", use_fc=False)
    y = g.conv(y, filters, activation=None)
    shortcut = x
    if stride != 1 or filters != x.channels:
        shortcut = g.conv(x, filters, (1, 1), (stride, stride), activation=None)
    return g.add(y, shortcut, "RELU")


def audio_block(g: GraphBuilder, x: Act, filters: int, kernel: int, stride: int) -> Act:
    """1-D (H=1) separable convolution over time, as in keyword-spotting and speech models."""
    y = g.depthwise(x, (1, kernel), (1, stride), "RELU")
    y = g.conv(y, filters, activation=None)
    if stride == 1 and filters == x.channels:
        y = g.add(y, x, "RELU")
    return y


def classifier_head(g: GraphBuilder, x: Act, classes: int) -> Act:
    """Global average pooling (MEAN torch style) -> RESHAPE to [1, C] -> FULLY_CONNECTED -> SOFTMAX."""
    pooled = g.global_pool(x)
    return g.softmax(g.fully_connected(g.reshape(pooled, (1, x.channels)), classes))


def cpu_split(g: GraphBuilder, x: Act) -> Act:
    """An operator Vela 5.2.0 leaves to the CPU, so the NPU work around it falls into separate NPU subgraphs.

    SPACE_TO_DEPTH needs an even height and width and changes the shape; an NPU 1x1 convolution and a
    DEPTH_TO_SPACE put it back, making a small NPU subgraph between two CPU operators.
    """
    if x.height % 2 or x.width % 2 or g.rng.integers(2):
        return g.l2_normalization(x)
    packed = g.conv(g.space_to_depth(x), 4 * x.channels, activation=None)
    return g.depth_to_space(packed)


# --- transformer blocks, as Keras's int8 export writes them ----------------------------------------------------

def layer_norm(g: GraphBuilder, x: Act, squared_difference: bool = True) -> Act:
    """Keras LayerNormalization over the last axis, as tf.nn.moments and tf.nn.batch_normalization export:
    mean, variance (SQUARED_DIFFERENCE, or SUB and MUL), RSQRT(variance + epsilon), then
    x * (gamma * inv) + (beta - mean * (gamma * inv)). The [1, T, 1] x [D] product broadcasts both ways."""
    mean = g.mean_axis(x, -1, keep_dims=True)
    if squared_difference and not g.int16:  # TFLite has no int16 SQUARED_DIFFERENCE: 16x8 exports SUB and MUL
        squares = g.binary("SQUARED_DIFFERENCE", x, mean, x.shape)
    else:
        centred = g.binary("SUB", x, mean, x.shape)
        squares = g.binary("MUL", centred, centred, x.shape)
    epsilon, _ = g.scalar("epsilon", 1e-3)
    inv = g.rsqrt(g.binary("ADD", g.mean_axis(squares, -1, keep_dims=True), epsilon, mean.shape))
    gamma, beta, _ = g.layer_norm_constants(x.channels)
    scale = g.binary("MUL", inv, gamma, x.shape)
    shift = g.binary("SUB", beta, g.binary("MUL", mean, scale, x.shape), x.shape)
    return g.binary("ADD", g.binary("MUL", x, scale, x.shape), shift, x.shape)


def gelu_tanh(g: GraphBuilder, x: Act) -> Act:
    """GELU's tanh approximation as element-wise operators: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = g.binary("MUL", g.binary("MUL", x, x, x.shape), x, x.shape)
    c1, _ = g.scalar("gelu_c1", 0.044715)
    inner = g.binary("ADD", x, g.binary("MUL", cube, c1, x.shape), x.shape)
    c2, _ = g.scalar("gelu_c2", (2 / 3.141592653589793) ** 0.5)
    t = g.tanh(g.binary("MUL", inner, c2, x.shape))
    one, _ = g.scalar("gelu_one", 1.0)
    half, _ = g.scalar("gelu_half", 0.5)
    return g.binary("MUL", g.binary("MUL", x, half, x.shape), g.binary("ADD", t, one, t.shape), x.shape)


def multi_head_attention(g: GraphBuilder, x: Act, heads: int, transpose_key: bool = False) -> Act:
    """Keras MultiHeadAttention on [1, T, D]: Q, K, V dense layers, heads split by RESHAPE and TRANSPOSE
    [0, 2, 1, 3], Q scaled by 1/sqrt(d), scores Q.K^T by BATCH_MATMUL (adj_y, or K transposed [0, 2, 3, 1] first),
    SOFTMAX, scores.V, heads merged back and the output dense layer."""
    _, steps, width = x.shape
    depth = width // heads

    def split_heads(y: Act, perm: tuple[int, ...] = (0, 2, 1, 3)) -> Act:
        return g.transpose(g.reshape(y, (1, steps, heads, depth)), perm)

    scale, _ = g.scalar("attention_scale", depth ** -0.5)
    query = g.binary("MUL", split_heads(g.dense(x, width)), scale, (1, heads, steps, depth))
    if transpose_key:
        scores = g.batch_matmul(query, split_heads(g.dense(x, width), (0, 2, 3, 1)))
    else:
        scores = g.batch_matmul(query, split_heads(g.dense(x, width)), adj_y=True)
    context = g.batch_matmul(g.softmax(scores), split_heads(g.dense(x, width)))
    merged = g.reshape(g.transpose(context, (0, 2, 1, 3)), (1, steps, width))
    return g.dense(merged, width)


def transformer_block(g: GraphBuilder, x: Act, heads: int, expansion: int = 2, gelu: str = "GELU",
                      squared_difference: bool = True, transpose_key: bool = False) -> Act:
    """A pre-norm encoder block (KWT, ViT): x + attention(norm(x)), then x + dense(gelu(dense(norm(x)))).
    ``gelu`` is "GELU" (the TFLite operator), "GELU_APPROXIMATE" (the operator, tanh form) or "TANH" (the tanh
    form as element-wise operators)."""
    x = g.binary("ADD", x, multi_head_attention(g, layer_norm(g, x, squared_difference), heads, transpose_key),
                 x.shape)
    hidden = g.dense(layer_norm(g, x, squared_difference), x.channels * expansion)
    hidden = gelu_tanh(g, hidden) if gelu == "TANH" else g.gelu(hidden, approximate=gelu == "GELU_APPROXIMATE")
    return g.binary("ADD", x, g.dense(hidden, x.channels), x.shape)


def tcn_block(g: GraphBuilder, x: Act, filters: int, kernel: int, dilation: int) -> Act:
    """A temporal convolutional network's residual block: two causal convolutions dilated by ``dilation``, a 1x1
    convolution on the shortcut where the width changes, the sum through a ReLU."""
    y = g.causal_conv1d(g.causal_conv1d(x, filters, kernel, dilation), filters, kernel, dilation, activation=None)
    shortcut = x if x.shape[-1] == filters else g.causal_conv1d(x, filters, 1, activation=None)
    return g.add(y, shortcut, "RELU")


def conv_swish(g: GraphBuilder, x: Act, filters: int, kernel: int = 1, stride: int = 1, dilation: int = 1) -> Act:
    """YOLOv8's Conv: convolution, SiLU (x * logistic(x))."""
    return _activate(g, g.conv(x, filters, (kernel, kernel), (stride, stride), None, dilation=dilation), "SWISH")


def c2f(g: GraphBuilder, x: Act, filters: int, bottlenecks: int, shortcut: bool = True) -> Act:
    """YOLOv8's C2f, CSP-style: two 1x1 halves, ``bottlenecks`` 3x3 pairs on the second (each output kept), all
    concatenated and fused by a 1x1 convolution. The parts share one quantisation, as the concatenation needs."""
    half = max(8, filters // 2)
    quant = g.output_quant(None)
    parts = [g.conv(x, half, activation=None, quant=quant), g.conv(x, half, activation=None, quant=quant)]
    for _ in range(bottlenecks):
        y = conv_swish(g, conv_swish(g, parts[-1], half, 3), half, 3)
        parts.append(g.add(y, parts[-1], quant=quant) if shortcut else g.conv(y, half, activation=None, quant=quant))
    return conv_swish(g, g.concat(parts, quant=quant), filters)


def sppf(g: GraphBuilder, x: Act, filters: int) -> Act:
    """YOLOv8's SPPF: a 1x1 convolution, three chained 5x5 max pools, the four concatenated, a 1x1 convolution."""
    y = g.conv(x, max(8, filters // 2), activation="RELU")
    pooled = [y]
    for _ in range(3):
        pooled.append(g.pool(pooled[-1], "MAX", (5, 5), (1, 1)))
    return conv_swish(g, g.concat(pooled), filters)


def aspp(g: GraphBuilder, x: Act, filters: int, rates: tuple[int, ...]) -> Act:
    """DeepLab's atrous spatial pyramid pooling (without the image-pooling branch): a 1x1 convolution and a 3x3
    one per atrous rate, concatenated (one quantisation) and projected by a 1x1 convolution."""
    quant = g.output_quant("RELU")
    branches = [g.conv(x, filters, quant=quant)]
    branches += [g.conv(x, filters, (3, 3), dilation=rate, quant=quant) for rate in rates]
    return g.conv(g.concat(branches, quant=quant), filters)


def gru(g: GraphBuilder, x: Act, units: int, return_sequences: bool) -> Act:
    """Keras GRU(unroll=True) (reset_after, the default) over a [1, T, F] sequence: UNPACK over time, a zero state
    (FILL, Keras-style), then per step x W and h U (FULLY_CONNECTED each, the weights shared by the steps) SPLIT
    into their update, reset and candidate thirds, z = logistic(x_z + h_z), r = logistic(x_r + h_r),
    c = tanh(x_c + r * h_c), h = z * h + (1 - z) * c; the states PACKed back over time or the last one. Each
    tensor has one quantisation over the steps, as a calibration over the sequence gives it."""
    steps = g.unpack(x, 1)
    h = g.zeros((1, units), g.output_quant(None))
    kernel, recurrent = g.fc_params(steps[0], 3 * units), g.fc_params(h, 3 * units)
    one, _ = g.scalar("one", 1.0)
    quant = {name: g.output_quant(None) for name in ("xw", "hw", "z", "r", "rh", "c", "keep", "rest", "new")}
    shape = (1, units)
    outputs = []
    for step in steps:
        xz, xr, xc = g.split(g.fully_connected(step, 3 * units, params=kernel, quant=quant["xw"]), 3)
        hz, hr, hc = g.split(g.fully_connected(h, 3 * units, params=recurrent, quant=quant["hw"]), 3)
        z = g.logistic(g.binary("ADD", xz, hz, shape, quant["z"]))
        r = g.logistic(g.binary("ADD", xr, hr, shape, quant["r"]))
        c = g.tanh(g.binary("ADD", xc, g.binary("MUL", r, hc, shape, quant["rh"]), shape, quant["c"]))
        kept = g.binary("MUL", z, h, shape, quant["keep"])
        new = g.binary("MUL", g.binary("SUB", one, z, shape, quant["rest"]), c, shape, quant["new"])
        h = g.binary("ADD", kept, new, shape, h.quant)
        outputs.append(h)
    return g.pack(outputs, 1) if return_sequences else h
