"""Named network architectures assembled from blocks, each sized to roughly a requested number of NPU passes.

Every architecture splits its pass budget over its stages and repeats its block in each stage until the builder's
running estimate reaches the stage's share. Bigger budgets get smaller inputs and narrower layers so Vela still
compiles the network in reasonable time. ``cpu_splits`` operators that Vela leaves to the CPU are spread evenly
between blocks; "mixed" has them by default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from npusched.netgen import blocks
from npusched.netgen.graph import Act, GraphBuilder

# Passes a classifier head costs with its SOFTMAX; smaller budgets end with the FULLY_CONNECTED layer instead.
_SOFTMAX_HEAD_MIN_PASSES = 80


@dataclass(frozen=True)
class Sizing:
    """What a budget of NPU passes turns into: input side (pixels), width scale, and where CPU splits go."""

    passes: int
    resolution: int
    width: float
    split_interval_passes: int  # 0: no CPU operators
    cpu_splits: int
    softmax_head: bool = False  # unet: a per-pixel SOFTMAX over the classes (segmentation) instead of LOGISTIC

    def channels(self, base: int) -> int:
        """``base`` channels scaled by the width, rounded to a multiple of 8 as the reference networks do."""
        return max(8, int(base * self.width + 4) // 8 * 8)


class _Filler:
    """Repeats blocks until the builder's pass estimate reaches a mark, inserting the CPU splits on the way."""

    def __init__(self, g: GraphBuilder, sizing: Sizing) -> None:
        self.g = g
        self.sizing = sizing
        self.next_split = sizing.split_interval_passes
        self.splits_left = sizing.cpu_splits

    def fill(self, x: Act, until_passes: float, block: Callable[[Act, bool], Act]) -> Act:
        """Call ``block(x, first)`` at least once and then while the estimate is below ``until_passes``."""
        first = True
        while first or self.g.npu_passes < until_passes:
            x = self.split(block(x, first))
            first = False
        return x

    def split(self, x: Act) -> Act:
        """``x`` through a CPU operator when the estimate has passed the next split mark, else ``x``."""
        if self.splits_left and self.g.npu_passes >= self.next_split:
            x = blocks.cpu_split(self.g, x)
            self.splits_left -= 1
            self.next_split += self.sizing.split_interval_passes
        return x

    def stage_end(self, target: int, stages_left: int, reserve: int) -> float:
        """The pass mark where the current stage should stop: an equal share of what is left before ``reserve``."""
        return self.g.npu_passes + max(0.0, (target - reserve - self.g.npu_passes) / stages_left)


def _head(g: GraphBuilder, x: Act, passes: int, classes: int = 10) -> Act:
    if passes >= _SOFTMAX_HEAD_MIN_PASSES:
        return blocks.classifier_head(g, x, classes)
    pooled = g.global_pool(x)
    return g.fully_connected(g.reshape(pooled, (1, x.channels)), classes)


def _head_reserve(passes: int) -> int:
    return 34 if passes >= _SOFTMAX_HEAD_MIN_PASSES else 2


def _staged(g: GraphBuilder, s: Sizing, x: Act, stages: list[tuple[int, int]], reserve: int,
            block: Callable[[Act, int, int, int], Act], block_passes: int) -> Act:
    """Run ``stages`` of (base channels, first stride): ``block(x, channels, stride, stage)`` repeated to budget.

    A budget too small for one block of ``block_passes`` per stage keeps only the first stages.
    """
    stages = stages[:max(1, (s.passes - reserve) // block_passes)]
    filler = _Filler(g, s)
    for position, (base, stride) in enumerate(stages):
        until = filler.stage_end(s.passes, len(stages) - position, reserve)
        channels = s.channels(base)

        def step(y: Act, first: bool, c: int = channels, st: int = stride, p: int = position) -> Act:
            return block(y, c, st if first else 1, p)

        x = filler.fill(x, until, step)
    return x


def mobilenet_v2(g: GraphBuilder, s: Sizing) -> Act:
    x = blocks.stem(g, g.input((1, s.resolution, s.resolution, 3)), s.channels(32))
    stages = [(16, 1), (24, 2), (32, 2), (64, 2), (96, 1), (160, 2), (320, 1)]
    x = _staged(g, s, x, stages, _head_reserve(s.passes) + 1, lambda y, c, st, p: blocks.inverted_residual(
        g, y, c, st, 1 if p == 0 else 6, activation="RELU6"), block_passes=4)
    return _head(g, g.conv(x, s.channels(1280), activation="RELU6"), s.passes)


def mobilenet_v3(g: GraphBuilder, s: Sizing) -> Act:
    x = g.hard_swish(blocks.stem(g, g.input((1, s.resolution, s.resolution, 3)), s.channels(16), None))
    stages = [(16, 2), (24, 2), (40, 2), (80, 2), (112, 1), (160, 2)]

    def block(y: Act, c: int, stride: int, position: int) -> Act:
        kernel = int(g.rng.choice([3, 5]))
        activation = "RELU" if position < 2 else "HARD_SWISH"
        se = 0.25 if position in (0, 2, 4, 5) else 0.0
        return blocks.inverted_residual(g, y, c, stride, int(g.rng.choice([3, 4, 6])), kernel, activation, se)

    x = _staged(g, s, x, stages, _head_reserve(s.passes) + 4, block, block_passes=6)
    x = g.hard_swish(g.conv(x, s.channels(576), activation=None))
    pooled = g.global_pool(x)
    x = g.hard_swish(g.conv(pooled, s.channels(1024), activation=None))
    flat = g.fully_connected(g.reshape(x, (1, x.channels)), 10)
    return g.softmax(flat) if s.passes >= _SOFTMAX_HEAD_MIN_PASSES else flat


def efficientnet(g: GraphBuilder, s: Sizing) -> Act:
    x = g.input((1, s.resolution, s.resolution, 3))
    x = g.mul(*(lambda y: (y, g.logistic(y)))(blocks.stem(g, x, s.channels(32), None)))  # swish
    stages = [(16, 1), (24, 2), (40, 2), (80, 2), (112, 1), (192, 2), (320, 1)]
    x = _staged(g, s, x, stages, _head_reserve(s.passes) + 3, lambda y, c, st, p: blocks.inverted_residual(
        g, y, c, st, 1 if p == 0 else 6, 5 if p in (2, 4, 5) else 3, "SWISH", 0.25), block_passes=12)
    x = g.conv(x, s.channels(1280), activation=None)
    return _head(g, g.mul(x, g.logistic(x)), s.passes)


def densenet(g: GraphBuilder, s: Sizing) -> Act:
    x = g.conv(g.input((1, s.resolution, s.resolution, 3)), s.channels(64), (7, 7), (2, 2))
    x = g.pool(x, "MAX", (3, 3), (2, 2))
    growth = s.channels(32) // 2
    filler = _Filler(g, s)
    reserve = _head_reserve(s.passes)
    stages = min(4, max(1, s.passes // 16))
    for stage in range(stages):
        until = filler.stage_end(s.passes, stages - stage, reserve + 2 * (stages - 1 - stage))
        # A dense layer costs four passes (two convolutions, the concatenation's two writes).
        layers = max(1, round((until - g.npu_passes) / 4))
        chunks = max(1, layers // 8)  # long blocks are split so the concatenated width stays moderate
        for _ in range(chunks):
            x = filler.split(blocks.dense_block(g, x, max(1, layers // chunks), growth))
            if x.channels > 8 * growth:
                x = g.conv(x, 4 * growth, activation="RELU")
        if stage < stages - 1:
            x = blocks.dense_transition(g, x, max(8, x.channels // 16 * 8))
    return _head(g, x, s.passes)


def nasnet(g: GraphBuilder, s: Sizing) -> Act:
    x = blocks.stem(g, g.input((1, s.resolution, s.resolution, 3)), s.channels(32), "RELU")
    stages = [(32, 1), (64, 2), (128, 2), (256, 2)]
    x = _staged(g, s, x, stages, _head_reserve(s.passes), lambda y, c, st, p: blocks.nasnet_cell(
        g, y, c, reduction=st == 2), block_passes=20)
    return _head(g, x, s.passes)


def unet(g: GraphBuilder, s: Sizing) -> Act:
    """Stacked U-Nets (hourglasses): each one halves the map ``levels`` times and comes back with skips."""
    x = g.conv(g.input((1, s.resolution, s.resolution, 3)), s.channels(16), (3, 3))
    levels = max(1, min(3 if s.resolution < 64 else 4, s.passes // 12))
    filler = _Filler(g, s)
    hourglass_passes = 10 * levels + 2

    def hourglass(y: Act, _first: bool) -> Act:
        skips = []
        for level in range(levels):
            skip, y = blocks.unet_encoder(g, y, s.channels(16 << level))
            skips.append(skip)
        y = g.conv(y, s.channels(16 << levels), (3, 3))
        for level in reversed(range(levels)):
            y = blocks.unet_decoder(g, y, skips[level], s.channels(16 << level))
        return y

    x = filler.fill(x, s.passes - hourglass_passes - 1, hourglass)
    logits = g.conv(x, 4, activation=None)
    return g.softmax(logits) if s.softmax_head else g.logistic(logits)


def resnet(g: GraphBuilder, s: Sizing) -> Act:
    x = g.conv(g.input((1, s.resolution, s.resolution, 3)), s.channels(32), (3, 3))
    stages = [(32, 1), (64, 2), (128, 2), (256, 2)]
    x = _staged(g, s, x, stages, _head_reserve(s.passes), lambda y, c, st, p: blocks.resnet_basic(g, y, c, st),
                block_passes=4)
    return _head(g, x, s.passes)


def regnet(g: GraphBuilder, s: Sizing) -> Act:
    """RegNetX/Y-like (Keras's RegNetX002..., RegNetY...): a 3x3 s2 stem, four stages of blocks with grouped 3x3
    convolutions, the group width (8, 16 or 24) and squeeze-excite (Y) drawn once; widths multiples of it."""
    group_width = int(g.rng.choice([8, 16, 24]))
    se = bool(g.rng.integers(2))
    x = blocks.stem(g, g.input((1, s.resolution, s.resolution, 3)), s.channels(32), "RELU")
    stages = [(24, 2), (56, 2), (152, 2), (368, 2)]

    def block(y: Act, c: int, stride: int, position: int) -> Act:
        width = max(group_width, c // group_width * group_width)
        return blocks.regnet_block(g, y, width, stride, group_width, se)

    x = _staged(g, s, x, stages, _head_reserve(s.passes), block, block_passes=12 if se else 8)
    return _head(g, x, s.passes)


def audio1d(g: GraphBuilder, s: Sizing) -> Act:
    """Keyword-spotting style: [1, 1, time, features] input, 1-D convolutions along time."""
    x = g.input((1, 1, 4 * s.resolution, 40))
    x = g.conv(x, s.channels(64), (1, 10), (1, 2))
    stages = [(64, 1), (96, 2), (128, 2), (160, 2)]
    x = _staged(g, s, x, stages, _head_reserve(s.passes), lambda y, c, st, p: blocks.audio_block(
        g, y, c, int(g.rng.choice([3, 5, 9])), st), block_passes=3)
    return _head(g, x, s.passes, classes=12)


def mixed(g: GraphBuilder, s: Sizing) -> Act:
    """Blocks of every family in turn, with CPU operators between them."""
    x = blocks.stem(g, g.input((1, s.resolution, s.resolution, 3)), s.channels(24))
    stages = [(24, 1), (40, 2), (64, 2), (96, 2)]

    def block(y: Act, c: int, stride: int, _position: int) -> Act:
        kind = int(g.rng.integers(5))
        if kind == 0:
            return blocks.inverted_residual(g, y, c, stride, 4, 3, "HARD_SWISH", 0.25)
        if kind == 1:
            return blocks.resnet_basic(g, y, c, stride)
        if kind == 2 and stride == 1:
            return g.conv(blocks.dense_block(g, y, 2, max(8, c // 4)), c, activation="RELU")
        if kind == 3:
            return blocks.nasnet_cell(g, y, max(8, c // 2), reduction=stride == 2)
        return blocks.inverted_residual(g, y, c, stride, 6, 5, "SWISH", 0.25)

    x = _staged(g, s, x, stages, _head_reserve(s.passes), block, block_passes=8)
    return _head(g, x, s.passes)


# InceptionV3's widths, about halved. Per stage: the grid reduction before it (3x3 s2, double-3x3 reduce and
# output; none before the first) and its blocks' branches (1x1, 5x5 or 1x7 -> 7x1 reduce and output, double-3x3
# reduce and output, pool projection): 128, 384 and 512 channels out at full width.
_INCEPTION_STAGES: list[tuple[tuple[int, int, int] | None, tuple[int, int, int, int, int, int]]] = [
    (None, (32, 24, 32, 32, 48, 16)),
    ((96, 32, 48), (96, 64, 96, 64, 96, 96)),
    ((160, 64, 96), (128, 96, 128, 96, 128, 128)),
]


def inception(g: GraphBuilder, s: Sizing) -> Act:
    """InceptionV3-like: a VALID stem (3x3 s2, 3x3, 3x3 convolutions, 3x3 s2 max pool), Inception blocks with a
    5x5 branch in the first stage and a factorised 1x7 -> 7x1 one later, a grid reduction opening each later stage.

    A block is 12 passes (13 factorised: five or six convolutions, the pool, the concatenation's four writes), a
    reduction 8 (four convolutions, the pool, three writes). The budget is shared as ``_staged`` shares it, but
    the reductions still to come are set aside and a stage stops at the block boundary nearest its mark: blocks
    this coarse would otherwise overshoot a small budget by a block per stage.
    """
    x = g.conv(g.input((1, s.resolution, s.resolution, 3)), s.channels(32), (3, 3), (2, 2), padding="VALID")
    x = g.conv(x, s.channels(32), (3, 3), padding="VALID")
    x = g.pool(g.conv(x, s.channels(64), (3, 3)), "MAX", (3, 3), (2, 2), "VALID")
    reserve = _head_reserve(s.passes)
    stages = _INCEPTION_STAGES[:max(1, (s.passes - reserve) // 18)]  # the first blocks average 18 passes
    filler = _Filler(g, s)
    for position, (reduction, branches) in enumerate(stages):
        later_reductions = 8 * (len(stages) - 1 - position)
        until = filler.stage_end(s.passes, len(stages) - position, reserve + later_reductions) - 6
        widths = tuple(s.channels(c) for c in branches)

        def block(y: Act, first: bool, r: tuple[int, int, int] | None = reduction, w: tuple[int, ...] = widths,
                  factorised: bool = position > 0) -> Act:
            if first and r is not None:
                y = blocks.inception_reduction(g, y, *(s.channels(c) for c in r))
            return blocks.inception_block(g, y, w, factorised)

        x = filler.fill(x, until, block)
    return _head(g, x, s.passes)


def transformer(g: GraphBuilder, s: Sizing) -> Act:
    """Keyword-spotting transformer (KWT-like): [1, 49, 40] audio features, a dense embedding to [1, 49, D],
    pre-norm encoder blocks, then a layer norm, the mean over time and a dense classifier. Each block draws its
    export variant: the GELU form, the layer norm's squares, and how the key is transposed."""
    width = s.channels(64)
    x = g.dense(g.input((1, 49, 40)), width)

    def block(y: Act, _first: bool) -> Act:
        gelu = str(g.rng.choice(["GELU", "GELU_APPROXIMATE", "TANH"]))
        squared_difference, transpose_key = bool(g.rng.integers(2)), bool(g.rng.integers(2))
        return blocks.transformer_block(g, y, max(1, width // 16), 2, gelu, squared_difference, transpose_key)

    x = _Filler(g, s).fill(x, s.passes - _head_reserve(s.passes) - 14, block)
    pooled = g.mean_axis(blocks.layer_norm(g, x), 1, keep_dims=False)
    logits = g.fully_connected(pooled, 12)
    return g.softmax(logits) if s.passes >= _SOFTMAX_HEAD_MIN_PASSES else logits


def tcn(g: GraphBuilder, s: Sizing) -> Act:
    """A temporal convolutional network (keyword spotting, anomaly detection): [1, time, features] audio, stages of
    residual blocks of causal convolutions dilated 1, 2, 4, 8 ..., global average pooling over time and a dense
    classifier. Plain exports run it 4-D as [1, 1, T, F]; Keras-style ones as TF writes Conv1D (3-D, with
    SPACE_TO_BATCH_ND around the dilated convolutions)."""
    steps, features = 4 * s.resolution, 40
    x = g.input((1, steps, features) if g.keras_style else (1, 1, steps, features))
    kernel = int(g.rng.choice([2, 3]))
    dilations = (1, 2, 4, 8) if steps >= 256 else (1, 2, 4)
    stages = [(32, 0), (48, 0), (64, 0)]
    block_index = [0]

    def block(y: Act, c: int, _stride: int, _position: int) -> Act:
        dilation = dilations[block_index[0] % len(dilations)]
        block_index[0] += 1
        return blocks.tcn_block(g, y, c, kernel, dilation)

    x = _staged(g, s, x, stages, 2, block, block_passes=3)
    if g.keras_style:  # GlobalAveragePooling1D
        pooled = g.mean_axis(x, 1, keep_dims=False, quant=x.quant)
    else:
        pooled = g.reshape(g.global_pool(x), (1, x.shape[-1]))
    return g.fully_connected(pooled, 12)


def yolo(g: GraphBuilder, s: Sizing) -> Act:
    """A YOLOv8-style detector: a backbone of strided convolutions and C2f blocks, SPPF, and a neck that up-samples
    (nearest, which Keras 3 writes as EXPAND_DIMS -> TILE -> RESHAPE) and concatenates the backbone's maps back
    to stride 8, where a 1x1 convolution predicts boxes and classes. Small budgets keep the first two stages."""
    x = blocks.conv_swish(g, g.input((1, s.resolution, s.resolution, 3)), s.channels(16), 3, 2)
    # A stage is about 16 passes with one bottleneck per C2f, a bottleneck about 8 more in each of the C2fs.
    widths = [s.channels(c) for c in (32, 64, 128, 256)][:min(4, max(2, (s.passes - 20) // 30))]
    bottlenecks = max(1, min(16, (s.passes - 60) // 40))
    features = []
    for width in widths:
        x = blocks.c2f(g, blocks.conv_swish(g, x, width, 3, 2), width, bottlenecks)
        features.append(x)
    x = blocks.sppf(g, x, widths[-1])
    neck = slice(min(1, len(widths) - 2), -1)  # back to stride 8 (stride 4 with two stages)
    for skip, width in zip(reversed(features[neck]), reversed(widths[neck]), strict=True):
        lateral = g.conv(x, width, activation=None, quant=skip.quant)  # to the skip's quantisation
        x = blocks.c2f(g, g.concat([g.upsample_nearest(lateral, 2), skip], quant=skip.quant), width, bottlenecks, False)
    return g.conv(x, 4 + 12, activation=None)


def deeplab(g: GraphBuilder, s: Sizing) -> Act:
    """A DeepLab-v3-style encoder on a MobileNet-V2 backbone at output stride 8: the last stages dilated instead of
    strided (their depthwise convolutions dilated 2), ASPP with atrous rates 2, 4, 6 and per-pixel logits. Keras-
    style exports write every dilated convolution in SPACE_TO_BATCH_ND ... BATCH_TO_SPACE_ND."""
    x = blocks.stem(g, g.input((1, s.resolution, s.resolution, 3)), s.channels(32))
    stages = [(16, 1, 1), (24, 2, 1), (32, 2, 1), (64, 1, 2), (96, 1, 2)]
    filler = _Filler(g, s)
    reserve = 12
    for position, (base, stride, dilation) in enumerate(stages):
        until = filler.stage_end(s.passes, len(stages) - position, reserve)
        channels = s.channels(base)

        def step(y: Act, first: bool, c: int = channels, st: int = stride, d: int = dilation, p: int = position
                 ) -> Act:
            return blocks.inverted_residual(g, y, c, st if first else 1, 1 if p == 0 else 6, activation="RELU6",
                                            dilation=d)

        x = filler.fill(x, until, step)
    x = blocks.aspp(g, x, s.channels(64), (2, 4, 6))
    return g.conv(x, 4, activation=None)


def gru(g: GraphBuilder, s: Sizing) -> Act:
    """A keyword-spotting GRU unrolled over time (Keras's GRU(unroll=True)): [1, T, 40] features, two GRU layers
    (the first returning its sequence), a dense classifier. A step of both layers is about 20 passes, so the
    budget sets the number of time steps."""
    steps = max(2, (s.passes - 4) // 20)
    units = s.channels(64)
    x = blocks.gru(g, g.input((1, steps, 40)), units, return_sequences=True)
    return g.fully_connected(blocks.gru(g, x, units, return_sequences=False), 12)


ARCHITECTURES: dict[str, Callable[[GraphBuilder, Sizing], Act]] = {
    "mobilenet_v2": mobilenet_v2, "mobilenet_v3": mobilenet_v3, "efficientnet": efficientnet, "densenet": densenet,
    "nasnet": nasnet, "unet": unet, "resnet": resnet, "audio1d": audio1d, "mixed": mixed,
    "transformer": transformer, "inception": inception, "regnet": regnet, "tcn": tcn, "yolo": yolo,
    "deeplab": deeplab, "gru": gru,
}
# Architectures with CPU operators by default (so several NPU subgraphs).
SPLIT_BY_DEFAULT = frozenset({"mixed"})


def sizing(arch: str, passes: int, cpu_splits: int | None, segmentation: bool = False) -> Sizing:
    """Input side and width for a budget: full size for small networks, smaller as the budget grows.

    A U-Net gets half the side, unless it is a ``segmentation`` one (a per-pixel SOFTMAX head at the full side:
    128 x 128 up to 60 passes, the segmentation heads whose softmax needs most fast storage).
    """
    if passes <= 60:
        resolution, width = 128, 1.0
    elif passes <= 300:
        resolution, width = 96, 0.75
    elif passes <= 1000:
        resolution, width = 64, 0.5
    else:
        resolution, width = 32, 0.25
    if arch == "unet" and not segmentation:
        resolution = max(32, resolution // 2)
    if cpu_splits is None:
        cpu_splits = max(2, passes // 100) if arch in SPLIT_BY_DEFAULT else 0
    return Sizing(passes, resolution, width, max(1, passes // (cpu_splits + 1)), cpu_splits, segmentation)
