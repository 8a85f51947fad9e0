"""Keras 3 builders of the zoo's "unit" models: a few layers each, for layer types no family covers naturally.

Same signature as ``keras_nets``: ``(keras, tf, settings) -> model``, random seeded weights.
"""

from __future__ import annotations

from typing import Any

S = dict[str, Any]


def unit_conv2d_variants(k: Any, tf: Any, s: S) -> Any:
    """Valid, dilated and separable 2-D convolutions with LeakyReLU and ELU between them."""
    inp = k.Input(s["input"])
    x = k.layers.Conv2D(16, 3, padding="valid")(inp)
    x = k.layers.LeakyReLU(negative_slope=0.1)(x)
    x = k.layers.Conv2D(16, 3, padding="same", dilation_rate=s["dilation"])(x)
    x = k.layers.ELU()(x)
    x = k.layers.SeparableConv2D(24, 3, padding="same", activation="relu")(x)
    return k.Model(inp, x)


def unit_conv1d_variants(k: Any, tf: Any, s: S) -> Any:
    """Conv1D valid, same, causal, dilated and strided, with tanh and sigmoid (a gated TCN unit)."""
    inp = k.Input(s["input"])
    x = k.layers.Conv1D(16, 5, padding="valid")(inp)
    x = k.layers.Conv1D(16, 3, padding="same", activation="relu")(x)
    f = k.layers.Conv1D(16, 3, padding="causal", dilation_rate=s["dilation"], activation="tanh")(x)
    g = k.layers.Conv1D(16, 3, padding="causal", dilation_rate=s["dilation"], activation="sigmoid")(x)
    x = k.layers.Multiply()([f, g])
    return k.Model(inp, k.layers.Conv1D(24, 3, strides=2, padding="same")(x))


def unit_pad_crop(k: Any, tf: Any, s: S) -> Any:
    """ZeroPadding2D, Cropping2D and reflect padding (MIRROR_PAD) around valid convolutions."""
    inp = k.Input(s["input"])
    x = k.layers.ZeroPadding2D(((1, 2), (2, 1)))(inp)
    x = k.layers.Conv2D(16, 3, padding="valid", activation="relu")(x)
    x = k.layers.Cropping2D(((2, 1), (1, 2)))(x)
    x = k.ops.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
    return k.Model(inp, k.layers.Conv2D(16, 3, padding="valid")(x))


def unit_upsample(k: Any, tf: Any, s: S) -> Any:
    """Nearest 4x, nearest non-square (2x1) and bilinear 2x up-sampling between 1x1 convolutions."""
    inp = k.Input(s["input"])
    x = k.layers.Conv2D(16, 1, activation="relu")(inp)
    x = k.layers.UpSampling2D(2, interpolation="bilinear")(x)
    x = k.layers.Conv2D(8, 1, activation="relu")(x)
    a = k.layers.UpSampling2D(4, interpolation="nearest")(x)
    b = k.layers.UpSampling2D((2, 1), interpolation="nearest")(x)
    return k.Model(inp, [k.layers.Conv2D(4, 1)(a), k.layers.Conv2D(4, 1)(b)])


def unit_norms(k: Any, tf: Any, s: S) -> Any:
    """BatchNormalization not after a convolution (at the input and after an add), GroupNormalization and
    LayerNormalization."""
    inp = k.Input(s["input"])
    x = k.layers.BatchNormalization()(inp)
    y = k.layers.Conv2D(s["input"][-1], 3, padding="same", activation="relu")(x)
    x = k.layers.BatchNormalization()(k.layers.Add()([x, y]))
    x = k.layers.GroupNormalization(groups=s["groups"])(x)
    x = k.layers.Conv2D(16, 1)(x)
    return k.Model(inp, k.layers.LayerNormalization()(x))


def unit_reductions(k: Any, tf: Any, s: S) -> Any:
    """Softmax over a non-last axis, exp, mean over the channel axis, global max pooling, multiply."""
    inp = k.Input(s["input"])
    x = k.layers.Conv2D(8, 1)(inp)
    att = k.layers.Softmax(axis=1)(x)
    e = k.ops.exp(k.layers.Conv2D(8, 1)(inp) * 0.25)
    m = k.ops.mean(k.layers.Multiply()([att, e]), axis=-1, keepdims=True)
    return k.Model(inp, [m, k.layers.GlobalMaxPooling2D()(x)])


def unit_activations(k: Any, tf: Any, s: S) -> Any:
    """Activations after convolutions: hard-swish, GELU, SiLU, ELU, tanh, sigmoid, LeakyReLU, ReLU6."""
    inp = k.Input(s["input"])
    x = inp
    for act in s["activations"]:
        x = k.layers.Conv2D(16, 3, padding="same")(x)
        x = k.layers.LeakyReLU(negative_slope=0.2)(x) if act == "leaky_relu" else k.layers.Activation(act)(x)
    return k.Model(inp, x)


def unit_dense_nd(k: Any, tf: Any, s: S) -> Any:
    """Dense on 4-D and 3-D tensors (FULLY_CONNECTED on the last axis), Reshape, Permute, Flatten, Dense."""
    inp = k.Input(s["input"])
    x = k.layers.Dense(16, activation="relu")(inp)
    x = k.layers.Reshape((-1, 16))(x)
    x = k.layers.Dense(24)(x)
    x = k.layers.Permute((2, 1))(x)
    x = k.layers.Dense(8, activation="relu")(x)
    x = k.layers.Flatten()(x)
    return k.Model(inp, k.layers.Dense(10, activation="softmax")(x))
