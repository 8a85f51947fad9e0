"""Keras builders of the zoo's network families (Keras 3; the recurrent ones also build under tf-keras).

Every builder takes the keras module ``k``, the TensorFlow module ``tf`` and the model's settings and returns an
un-trained model: the weights are whatever the seeded initialisers give, which is all a scheduler needs. Widths and
resolutions are those people deploy on Ethos-U (alpha 0.25-0.35, 96-128 px images, 49x10 / 49x40 features).
"""

from __future__ import annotations

from typing import Any

S = dict[str, Any]


def _conv_bn(k: Any, x: Any, filters: int, kernel: Any, strides: Any = 1, act: str | None = "relu",
             padding: str = "same", dilation: Any = 1) -> Any:
    """Conv2D without bias + BatchNormalization (folded by the converter) + activation."""
    x = k.layers.Conv2D(filters, kernel, strides=strides, padding=padding, dilation_rate=dilation, use_bias=False)(x)
    x = k.layers.BatchNormalization()(x)
    return k.layers.Activation(act)(x) if act else x


def _dw_bn(k: Any, x: Any, kernel: int = 3, strides: int = 1, act: str | None = "relu") -> Any:
    """DepthwiseConv2D without bias + BatchNormalization + activation."""
    x = k.layers.DepthwiseConv2D(kernel, strides=strides, padding="same", use_bias=False)(x)
    x = k.layers.BatchNormalization()(x)
    return k.layers.Activation(act)(x) if act else x


def _head(k: Any, x: Any, classes: int) -> Any:
    """Global average pool + Dense + softmax: the usual classifier head."""
    x = k.layers.GlobalAveragePooling2D()(x) if len(x.shape) == 4 else k.layers.GlobalAveragePooling1D()(x)
    return k.layers.Dense(classes, activation="softmax")(x)


def _learned(k: Any, shape: Any) -> Any:
    """A layer that returns a learned constant of ``shape`` (position embedding, layer scale), ignoring its input
    except for the batch size of 1 the zoo uses."""

    class Learned(k.layers.Layer):
        def build(self, input_shape: Any) -> None:
            self.value = self.add_weight(shape=tuple(shape), initializer="random_normal")

        def call(self, x: Any) -> Any:
            return k.ops.expand_dims(self.value, 0)

        def compute_output_shape(self, input_shape: Any) -> Any:
            return (1, *shape)

    return Learned()


# --- keyword spotting -------------------------------------------------------------------------------------------

def kws_dscnn(k: Any, tf: Any, s: S) -> Any:
    """DS-CNN (Zhang et al., 'Hello Edge'): strided 10x4 stem, depthwise-separable blocks, average pool."""
    inp = k.Input(s["input"])
    x = _conv_bn(k, inp, s["width"], (10, 4), strides=2)
    for _ in range(s["blocks"]):
        x = _dw_bn(k, x)
        x = _conv_bn(k, x, s["width"], 1)
    x = k.layers.AveragePooling2D(pool_size=tuple(x.shape[1:3]))(x)
    x = k.layers.Flatten()(x)
    return k.Model(inp, k.layers.Dense(s["classes"], activation="softmax")(x))


def kws_cnn(k: Any, tf: Any, s: S) -> Any:
    """The 'CNN' of Arm's ML-zoo: BatchNormalization of the raw features, two valid convs, dense layers."""
    inp = k.Input(s["input"])
    x = k.layers.BatchNormalization()(inp)
    x = k.layers.Conv2D(28, (10, 4), padding="valid", activation="relu")(x)
    x = k.layers.MaxPooling2D(2)(x)
    x = k.layers.Conv2D(30, (10, 4), padding="valid", activation="relu")(x)
    x = k.layers.MaxPooling2D(2)(x)
    x = k.layers.Flatten()(x)
    x = k.layers.Dense(16)(x)
    x = k.layers.Dense(64, activation="relu")(x)
    return k.Model(inp, k.layers.Dense(s["classes"], activation="softmax")(x))


def kws_tcn(k: Any, tf: Any, s: S) -> Any:
    """Temporal convolutional network: causal, dilated Conv1D residual blocks over 49 frames of 40 features."""
    inp = k.Input(s["input"])
    x = k.layers.Conv1D(s["width"], 3, padding="causal", activation="relu")(inp)
    for d in s["dilations"]:
        y = k.layers.Conv1D(s["width"], 3, padding="causal", dilation_rate=d, use_bias=False)(x)
        y = k.layers.BatchNormalization()(y)
        y = k.layers.Activation("relu")(y)
        y = k.layers.Conv1D(s["width"], 3, padding="causal", dilation_rate=d)(y)
        x = k.layers.Activation("relu")(k.layers.Add()([x, y]))
    return k.Model(inp, _head(k, x, s["classes"]))


def kws_tcresnet(k: Any, tf: Any, s: S) -> Any:
    """TC-ResNet8 (Choi et al.): MFCCs as channels, strided Conv1D residual blocks with 1x1 strided shortcuts."""
    inp = k.Input(s["input"])
    x = k.layers.Conv1D(16, 3, padding="valid", use_bias=False)(inp)
    for width in s["widths"]:
        y = k.layers.Conv1D(width, 9, strides=2, padding="same", use_bias=False)(x)
        y = k.layers.Activation("relu")(k.layers.BatchNormalization()(y))
        y = k.layers.BatchNormalization()(k.layers.Conv1D(width, 9, padding="same", use_bias=False)(y))
        sc = k.layers.BatchNormalization()(k.layers.Conv1D(width, 1, strides=2, use_bias=False)(x))
        x = k.layers.Activation("relu")(k.layers.Add()([y, sc]))
    return k.Model(inp, _head(k, x, s["classes"]))


def kws_rnn(k: Any, tf: Any, s: S) -> Any:
    """A recurrent keyword spotter: (stacked) LSTM or GRU over the frames, Dense + softmax on the last state.

    Batch size fixed at 1: tf-keras' LSTM becomes UNIDIRECTIONAL_SEQUENCE_LSTM only with static shapes."""
    inp = k.Input(s["input"], batch_size=1)
    cell = {"lstm": k.layers.LSTM, "gru": k.layers.GRU}[s["cell"]]
    x = inp
    for i, units in enumerate(s["units"]):
        x = cell(units, unroll=s["unroll"], return_sequences=i + 1 < len(s["units"]))(x)
    return k.Model(inp, k.layers.Dense(s["classes"], activation="softmax")(x))


# --- image classification ---------------------------------------------------------------------------------------

def mobilenet_v1(k: Any, tf: Any, s: S) -> Any:
    """keras.applications.MobileNet, random weights (the Visual Wake Words set-up: alpha 0.25, 96 px, 2 classes)."""
    return k.applications.MobileNet(s["input"], alpha=s["alpha"], weights=None, classes=s["classes"])


def mobilenet_v2(k: Any, tf: Any, s: S) -> Any:
    """keras.applications.MobileNetV2 cut after ``s['cut']`` (a detection-style backbone) with a small head."""
    base = k.applications.MobileNetV2(s["input"], alpha=s["alpha"], include_top=False, weights=None)
    return k.Model(base.input, _head(k, base.get_layer(s["cut"]).output, s["classes"]))


def mobilenet_v3(k: Any, tf: Any, s: S) -> Any:
    """keras.applications.MobileNetV3Small (hard-swish, squeeze-excite) with pooling and a Dense head."""
    base = k.applications.MobileNetV3Small(s["input"], alpha=s["alpha"], minimalistic=s["minimalistic"],
                                           include_top=False, weights=None, pooling="avg",
                                           include_preprocessing=False)
    return k.Model(base.input, k.layers.Dense(s["classes"], activation="softmax")(base.output))


def _uib(k: Any, x: Any, out: int, start_dw: int, mid_dw: int, strides: int, expand: float) -> Any:
    """MobileNetV4's Universal Inverted Bottleneck: optional dw, 1x1 expand, optional dw, 1x1 project."""
    inp, ch = x, x.shape[-1]
    if start_dw:
        x = _dw_bn(k, x, start_dw, strides if not mid_dw else 1, act=None)
    x = _conv_bn(k, x, int(ch * expand), 1)
    if mid_dw:
        x = _dw_bn(k, x, mid_dw, strides)
    x = _conv_bn(k, x, out, 1, act=None)
    return k.layers.Add()([inp, x]) if strides == 1 and ch == out else x


def mobilenet_v4(k: Any, tf: Any, s: S) -> Any:
    """A MobileNetV4-conv-small-like net built by hand (keras has none): FusedIB then UIB blocks (ExtraDW, IB,
    ConvNext-like, FFN), ReLU, a 1x1 widening before the pool."""
    inp = k.Input(s["input"])
    x = _conv_bn(k, inp, 16, 3, strides=2)
    x = _conv_bn(k, x, 32, 3, strides=2)  # FusedIB: full 3x3 expand, 1x1 project
    x = _conv_bn(k, x, 24, 1, act=None)
    for out, start_dw, mid_dw, strides, expand in s["blocks"]:
        x = _uib(k, x, out, start_dw, mid_dw, strides, expand)
    x = _conv_bn(k, x, s["last"], 1)
    return k.Model(inp, _head(k, x, s["classes"]))


def efficientnet_lite(k: Any, tf: Any, s: S) -> Any:
    """EfficientNet-Lite0 scaled down by hand: MBConv blocks without squeeze-excite, ReLU6, 3x3 and 5x5 kernels."""
    inp = k.Input(s["input"])
    x = _conv_bn(k, inp, 16, 3, strides=2, act="relu6")
    for expand, out, kernel, strides, repeats in s["stages"]:
        for r in range(repeats):
            y = _conv_bn(k, x, x.shape[-1] * expand, 1, act="relu6") if expand > 1 else x
            y = _dw_bn(k, y, kernel, strides if r == 0 else 1, act="relu6")
            y = _conv_bn(k, y, out, 1, act=None)
            x = k.layers.Add()([x, y]) if r > 0 else y
    x = _conv_bn(k, x, s["last"], 1, act="relu6")
    return k.Model(inp, _head(k, x, s["classes"]))


def resnet(k: Any, tf: Any, s: S) -> Any:
    """A small ResNet: strided stem, max pool, basic blocks with 1x1 strided projection shortcuts."""
    inp = k.Input(s["input"])
    x = _conv_bn(k, inp, 16, 3, strides=2)
    x = k.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for i, width in enumerate(s["widths"]):
        stride = 1 if i == 0 else 2
        y = _conv_bn(k, x, width, 3, strides=stride)
        y = _conv_bn(k, y, width, 3, act=None)
        sc = x if stride == 1 and x.shape[-1] == width else _conv_bn(k, x, width, 1, strides=stride, act=None)
        x = k.layers.Activation("relu")(k.layers.Add()([y, sc]))
    return k.Model(inp, _head(k, x, s["classes"]))


# --- detection, segmentation, image-to-image --------------------------------------------------------------------

def _c2f(k: Any, x: Any, out: int, n: int, shortcut: bool) -> Any:
    """YOLOv8's C2f: 1x1 conv, split in two, n bottlenecks on one half, concatenate all, 1x1 conv."""
    x = _conv_bn(k, x, out, 1, act="silu")
    a, b = k.ops.split(x, 2, axis=-1)
    parts = [a, b]
    for _ in range(n):
        y = _conv_bn(k, parts[-1], out // 2, 3, act="silu")
        y = _conv_bn(k, y, out // 2, 3, act="silu")
        parts.append(k.layers.Add()([parts[-1], y]) if shortcut else y)
    return _conv_bn(k, k.layers.Concatenate()(parts), out, 1, act="silu")


def yolo_detector(k: Any, tf: Any, s: S) -> Any:
    """A YOLOv8-n-like detector at 128 px: C2f backbone, SPPF, PAN neck (upsample + concat), two heads."""
    w = s["widths"]
    inp = k.Input(s["input"])
    x = _conv_bn(k, inp, w[0], 3, strides=2, act="silu")
    x = _conv_bn(k, x, w[1], 3, strides=2, act="silu")
    x = _c2f(k, x, w[1], 1, True)
    x = _conv_bn(k, x, w[2], 3, strides=2, act="silu")
    p3 = _c2f(k, x, w[2], 1, True)
    x = _conv_bn(k, p3, w[3], 3, strides=2, act="silu")
    x = _c2f(k, x, w[3], 1, True)
    x = _conv_bn(k, x, w[3] // 2, 1, act="silu")  # SPPF
    p1 = k.layers.MaxPooling2D(5, strides=1, padding="same")(x)
    p2 = k.layers.MaxPooling2D(5, strides=1, padding="same")(p1)
    p3b = k.layers.MaxPooling2D(5, strides=1, padding="same")(p2)
    p4 = _conv_bn(k, k.layers.Concatenate()([x, p1, p2, p3b]), w[3], 1, act="silu")
    up = k.layers.UpSampling2D(2, interpolation="nearest")(p4)
    n3 = _c2f(k, k.layers.Concatenate()([up, p3]), w[2], 1, False)
    down = _conv_bn(k, n3, w[2], 3, strides=2, act="silu")
    n4 = _c2f(k, k.layers.Concatenate()([down, p4]), w[3], 1, False)
    outs = []
    head = s["head"]
    for feat in (n3, n4):
        box = _conv_bn(k, _conv_bn(k, feat, head, 3, act="silu"), head, 3, act="silu")
        cls = _conv_bn(k, _conv_bn(k, feat, head, 3, act="silu"), head, 3, act="silu")
        outs.append(k.layers.Concatenate()([k.layers.Conv2D(64, 1)(box), k.layers.Conv2D(s["classes"], 1)(cls)]))
    return k.Model(inp, outs)


def aspp_segmentation(k: Any, tf: Any, s: S) -> Any:
    """DeepLabV3+-like: separable backbone to 1/8, ASPP (dilated 3x3s, image pooling upsampled back to the
    non-square map), decoder with 1/4 features, 4x bilinear resize at the end, per-pixel softmax."""
    inp = k.Input(s["input"])
    x = _conv_bn(k, inp, 16, 3, strides=2)
    x = _dw_bn(k, x)
    x = _conv_bn(k, x, 24, 1)
    x = _dw_bn(k, x, strides=2)
    low = _conv_bn(k, x, 24, 1)
    x = _dw_bn(k, low, strides=2)
    x = _conv_bn(k, x, 48, 1)
    branches = [_conv_bn(k, x, 32, 1)] + [_conv_bn(k, x, 32, 3, dilation=d) for d in s["rates"]]
    pool = k.layers.GlobalAveragePooling2D(keepdims=True)(x)
    pool = _conv_bn(k, pool, 32, 1)
    branches.append(k.layers.UpSampling2D(tuple(x.shape[1:3]), interpolation="nearest")(pool))
    x = _conv_bn(k, k.layers.Concatenate()(branches), 32, 1)
    x = k.layers.UpSampling2D(2, interpolation="bilinear")(x)
    x = k.layers.Concatenate()([x, _conv_bn(k, low, 16, 1)])
    x = _conv_bn(k, x, 32, 3)
    x = k.layers.Conv2D(s["classes"], 1)(x)
    x = k.layers.UpSampling2D(4, interpolation="bilinear")(x)
    return k.Model(inp, k.layers.Softmax(axis=-1)(x))


def super_resolution(k: Any, tf: Any, s: S) -> Any:
    """ESPCN (Shi et al.): 5x5 and 3x3 convs with PReLU, a conv to r*r channels, depth-to-space."""
    inp = k.Input(s["input"])
    x = k.layers.Conv2D(32, 5, padding="same")(inp)
    x = k.layers.PReLU(shared_axes=[1, 2])(x)
    x = k.layers.Conv2D(16, 3, padding="same")(x)
    x = k.layers.PReLU(shared_axes=[1, 2])(x)
    x = k.layers.Conv2D(s["scale"] ** 2 * s["input"][-1], 3, padding="same")(x)
    scale = s["scale"]
    return k.Model(inp, k.layers.Lambda(lambda t: tf.nn.depth_to_space(t, scale))(x))


def autoencoder(k: Any, tf: Any, s: S) -> Any:
    """Convolutional autoencoder: strided conv encoder, Conv2DTranspose decoder, sigmoid reconstruction."""
    inp = k.Input(s["input"])
    x = inp
    for width in s["widths"]:
        x = k.layers.Conv2D(width, 3, strides=2, padding="same", activation="relu")(x)
    for width in reversed(s["widths"]):
        x = k.layers.Conv2DTranspose(width, 3, strides=2, padding="same", activation="relu")(x)
    return k.Model(inp, k.layers.Conv2D(s["input"][-1], 3, padding="same", activation="sigmoid")(x))


# --- attention --------------------------------------------------------------------------------------------------

def _transformer(k: Any, x: Any, heads: int, dim: int, mlp: int, attention_axes: Any = None) -> Any:
    """Pre-norm transformer block: LayerNorm, MHA, add; LayerNorm, Dense-GELU-Dense, add."""
    y = k.layers.LayerNormalization(epsilon=1e-6)(x)
    y = k.layers.MultiHeadAttention(heads, dim // heads, attention_axes=attention_axes)(y, y)
    x = k.layers.Add()([x, y])
    y = k.layers.LayerNormalization(epsilon=1e-6)(x)
    y = k.layers.Dense(mlp, activation="gelu")(y)
    y = k.layers.Dense(dim)(y)
    return k.layers.Add()([x, y])


def vit(k: Any, tf: Any, s: S) -> Any:
    """A tiny ViT: 8x8 stride-8 patch embedding, learned position embedding, pre-norm transformer blocks."""
    inp = k.Input(s["input"])
    dim = s["dim"]
    x = k.layers.Conv2D(dim, 8, strides=8)(inp)
    x = k.layers.Reshape((-1, dim))(x)
    x = k.layers.Add()([x, _learned(k, x.shape[1:])(x)])
    for _ in range(s["depth"]):
        x = _transformer(k, x, s["heads"], dim, 2 * dim)
    x = k.layers.LayerNormalization(epsilon=1e-6)(x)
    return k.Model(inp, _head(k, x, s["classes"]))


def mobilevit(k: Any, tf: Any, s: S) -> Any:
    """MobileViT-XXS-like: MobileNetV2 blocks with SiLU, then MobileViT blocks (local conv, unfold into 2x1
    patches with Reshape + Permute (4-D at most, as Vela wants), transformer across the patches of each pixel
    position, fold back, fuse by concatenation)."""
    inp = k.Input(s["input"])
    x = _conv_bn(k, inp, 16, 3, strides=2, act="silu")

    def mv2(x: Any, out: int, strides: int) -> Any:
        y = _conv_bn(k, x, x.shape[-1] * 2, 1, act="silu")
        y = _dw_bn(k, y, 3, strides, act="silu")
        y = _conv_bn(k, y, out, 1, act=None)
        return k.layers.Add()([x, y]) if strides == 1 and x.shape[-1] == out else y

    for out, strides in ((16, 1), (24, 2), (24, 1), (48, 2)):
        x = mv2(x, out, strides)
    for dim, out in s["vit_blocks"]:
        local = _conv_bn(k, x, x.shape[-1], 3, act="silu")
        local = k.layers.Conv2D(dim, 1, use_bias=False)(local)
        h, w = local.shape[1], local.shape[2]
        t = k.layers.Reshape((h // 2, 2, w * dim))(local)
        t = k.layers.Permute((2, 1, 3))(t)
        t = k.layers.Reshape((2, h * w // 2, dim))(t)
        t = _transformer(k, t, 2, dim, 2 * dim, attention_axes=2)
        t = k.layers.Reshape((2, h // 2, w * dim))(t)
        t = k.layers.Permute((2, 1, 3))(t)
        t = k.layers.Reshape((h, w, dim))(t)
        t = _conv_bn(k, t, x.shape[-1], 1, act="silu")
        x = _conv_bn(k, k.layers.Concatenate()([x, t]), out, 3, act="silu")
        x = mv2(x, out, 2) if x.shape[1] > 6 else x
    x = _conv_bn(k, x, s["last"], 1, act="silu")
    return k.Model(inp, _head(k, x, s["classes"]))


def convnext(k: Any, tf: Any, s: S) -> Any:
    """A ConvNeXt-atto-like net: 4x4 stride-4 stem, LayerNorm over channels, 7x7 depthwise, Dense on the 4-D map
    (inverted bottleneck with GELU), layer scale, LayerNorm + 2x2 stride-2 downsampling."""
    inp = k.Input(s["input"])
    x = k.layers.Conv2D(s["widths"][0], 4, strides=4)(inp)
    x = k.layers.LayerNormalization(epsilon=1e-6)(x)
    for i, (width, depth) in enumerate(zip(s["widths"], s["depths"], strict=True)):
        if i:
            x = k.layers.LayerNormalization(epsilon=1e-6)(x)
            x = k.layers.Conv2D(width, 2, strides=2)(x)
        for _ in range(depth):
            y = k.layers.DepthwiseConv2D(7, padding="same")(x)
            y = k.layers.LayerNormalization(epsilon=1e-6)(y)
            y = k.layers.Dense(4 * width, activation="gelu")(y)
            y = k.layers.Dense(width)(y)
            y = k.layers.Multiply()([y, _learned(k, (1, 1, width))(y)])
            x = k.layers.Add()([x, y])
    x = k.layers.GlobalAveragePooling2D()(x)
    x = k.layers.LayerNormalization(epsilon=1e-6)(x)
    return k.Model(inp, k.layers.Dense(s["classes"], activation="softmax")(x))


# --- several inputs or outputs ----------------------------------------------------------------------------------

def siamese(k: Any, tf: Any, s: S) -> Any:
    """Siamese verifier: one shared tower on two inputs, |a - b| of the embeddings, Dense + sigmoid."""
    a, b = k.Input(s["input"], name="input_0"), k.Input(s["input"], name="input_1")
    tower_in = k.Input(s["input"])
    t = tower_in
    for width in (8, 16, 32):
        t = k.layers.Conv2D(width, 3, strides=2, padding="same", activation="relu")(t)
    t = k.layers.Dense(32)(k.layers.GlobalAveragePooling2D()(t))
    tower = k.Model(tower_in, t)
    diff = k.ops.abs(k.layers.Subtract()([tower(a), tower(b)]))
    return k.Model([a, b], k.layers.Dense(1, activation="sigmoid")(diff))


def multi_io(k: Any, tf: Any, s: S) -> Any:
    """Audio-visual model: an image tower and a keyword tower, fused by concatenation, two heads."""
    # Named so that the signature's (alphabetical) input order is the representative dataset's order.
    img, audio = k.Input(s["image"], name="input_0"), k.Input(s["audio"], name="input_1")
    x = _conv_bn(k, img, 16, 3, strides=2)
    x = _dw_bn(k, x, strides=2)
    x = _conv_bn(k, x, 32, 1)
    x = k.layers.GlobalAveragePooling2D()(x)
    y = _conv_bn(k, audio, 16, (10, 4), strides=2)
    y = _dw_bn(k, y)
    y = _conv_bn(k, y, 32, 1)
    y = k.layers.GlobalAveragePooling2D()(y)
    z = k.layers.Dense(32, activation="relu")(k.layers.Concatenate()([x, y]))
    return k.Model([img, audio], [k.layers.Dense(s["classes"], activation="softmax")(z),
                                  k.layers.Dense(1, activation="sigmoid")(z)])


def classifier_argmax(k: Any, tf: Any, s: S) -> Any:
    """A person-detection-style CNN that returns the class index (ARG_MAX, int32) instead of scores.

    tf.math.argmax in a Lambda, not keras.ops.argmax: Keras 3's adds NaN handling (BitwiseAnd) no TFLite builtin
    has."""
    inp = k.Input(s["input"])
    x = k.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(inp)
    x = k.layers.MaxPooling2D(2)(x)
    x = k.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
    x = k.layers.GlobalMaxPooling2D()(x)
    x = k.layers.Dense(s["classes"])(x)
    return k.Model(inp, k.layers.Lambda(lambda t: tf.math.argmax(t, axis=-1, output_type=tf.int32))(x))
