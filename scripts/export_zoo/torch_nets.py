"""PyTorch modules of the zoo's PyTorch path (torch.onnx.export, then onnx2tf's int8 full-integer quantisation).

Imported only by the onnx2tf worker, which runs in the venv that has torch. Each builder takes the settings and
returns an ``nn.Module`` in eval mode with seeded random weights (the worker seeds torch before calling it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

S = dict[str, Any]


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = nn.ReLU,
             dilation: int = 1) -> nn.Sequential:
    """Conv2d + BatchNorm2d (folded when exported in eval mode) + activation."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, dilation * (k // 2), dilation, groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def _randomise_bn(module: nn.Module) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics (fresh ones are the identity) from torch's seeded RNG."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d | nn.BatchNorm1d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return module.eval()


class KwsCnn(nn.Module):
    """A small keyword-spotting CNN on 1x49x10 MFCCs: conv-BN-ReLU, max pool, linear classifier."""

    def __init__(self, s: S) -> None:
        super().__init__()
        self.features = nn.Sequential(_conv_bn(1, 32, 3), nn.MaxPool2d(2), _conv_bn(32, 32, 3), nn.MaxPool2d(2))
        self.fc = nn.Linear(32 * 12 * 2, s["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc(torch.flatten(self.features(x), 1)), -1)


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand (ReLU6), depthwise 3x3 (ReLU6), 1x1 project, residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(_conv_bn(cin, mid, 1, act=nn.ReLU6), _conv_bn(mid, mid, 3, stride, mid, nn.ReLU6),
                                  _conv_bn(mid, cout, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.use_res else self.body(x)


class MobileNetV2Blocks(nn.Module):
    """A MobileNetV2 alpha-0.35-like net at 96 px (torchvision's block structure, fewer stages)."""

    def __init__(self, s: S) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 16, 3, 2, act=nn.ReLU6), _conv_bn(16, 16, 3, 1, 16, nn.ReLU6),
                                   _conv_bn(16, 8, 1, act=None)]
        cin = 8
        for cout, stride, repeats in s["stages"]:
            for r in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if r == 0 else 1, 6))
                cin = cout
        layers.append(_conv_bn(cin, s["last"], 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(s["last"], s["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class Espcn(nn.Module):
    """ESPCN super-resolution: 5x5 and 3x3 convs with PReLU, conv to r*r channels, PixelShuffle."""

    def __init__(self, s: S) -> None:
        super().__init__()
        r = s["scale"]
        self.body = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.PReLU(32), nn.Conv2d(32, 16, 3, padding=1),
                                  nn.PReLU(16), nn.Conv2d(16, r * r, 3, padding=1), nn.PixelShuffle(r))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class AttentionBlockNet(nn.Module):
    """A tiny ViT: 8x8 stride-8 patch embedding, learned positions, pre-norm blocks of hand-written multi-head
    attention (Linear q, k and v, matmul, softmax) and a GELU MLP, mean-pooled classifier."""

    def __init__(self, s: S) -> None:
        super().__init__()
        dim, tokens = s["dim"], (s["input"][1] // 8) * (s["input"][2] // 8)
        self.heads = s["heads"]
        self.embed = nn.Conv2d(s["input"][0], dim, 8, 8)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(s["depth"]):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(dim), "q": nn.Linear(dim, dim), "k": nn.Linear(dim, dim), "v": nn.Linear(dim, dim),
                "proj": nn.Linear(dim, dim),
                "ln2": nn.LayerNorm(dim), "fc1": nn.Linear(dim, 2 * dim), "fc2": nn.Linear(2 * dim, dim)}))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, s["classes"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Channels-last before flattening (not flatten(2).transpose(1, 2)): onnx2tf, which turns NCHW into NHWC,
        # then keeps the tokens' order; the other order mixes up its layouts ('Add' of (1, 8, 512) and (1, 64, 64)).
        x = self.embed(x).permute(0, 2, 3, 1).flatten(1, 2) + self.pos
        b, n, d = x.shape
        h = self.heads
        for blk in self.blocks:
            y = blk["ln1"](x)
            # Separate q/k/v projections: a fused qkv Linear is split by a SplitV that onnx2tf leaves as a Flex op.
            q, k, v = (blk[name](y).reshape(b, n, h, d // h).transpose(1, 2) for name in ("q", "k", "v"))
            att = torch.softmax(q @ k.transpose(-2, -1) * (d // h) ** -0.5, dim=-1)
            x = x + blk["proj"]((att @ v).transpose(1, 2).reshape(b, n, d))
            # GELU's tanh form: the exact (erf) one becomes a Flex Erf op in onnx2tf (pt_convnext keeps it).
            x = x + blk["fc2"](nn.functional.gelu(blk["fc1"](blk["ln2"](x)), approximate="tanh"))
        return self.head(self.norm(x).mean(1))


class RnnKws(nn.Module):
    """A recurrent keyword spotter on 49x10 MFCCs: nn.GRU or nn.LSTM (batch first), Linear on the last step."""

    def __init__(self, s: S) -> None:
        super().__init__()
        cell = {"gru": nn.GRU, "lstm": nn.LSTM}[s["cell"]]
        self.rnn = cell(s["input"][-1], s["units"], batch_first=True)
        self.fc = nn.Linear(s["units"], s["classes"])
        # An explicit zero state: without one the exporter writes Expand(zeros, batch), which onnx2tf cannot convert.
        self.register_buffer("h0", torch.zeros(1, 1, s["units"]))
        self.lstm = s["cell"] == "lstm"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x, (self.h0, self.h0) if self.lstm else self.h0)
        return torch.softmax(self.fc(out[:, -1]), -1)


class C2f(nn.Module):
    """Ultralytics' C2f: two halves, n bottlenecks on the second, concatenate all, 1x1 conv. Its first 1x1 conv
    and split are written as two 1x1 convs (YOLOv5's C3 does so): onnx2tf puts a channel slice or split of an
    NCHW map on the wrong axis of its NHWC map (an Add of (1, 24, 32, 16) and (1, 24, 32, 8)), chunk leaves it
    a dynamic axis, and split((c, c)) becomes a Flex SplitV, which is not a TFLite builtin."""

    def __init__(self, cin: int, cout: int, n: int, shortcut: bool) -> None:
        super().__init__()
        self.c = cout // 2
        self.cv1a = _conv_bn(cin, self.c, 1, act=nn.SiLU)
        self.cv1b = _conv_bn(cin, self.c, 1, act=nn.SiLU)
        self.m = nn.ModuleList(nn.Sequential(_conv_bn(self.c, self.c, 3, act=nn.SiLU),
                                             _conv_bn(self.c, self.c, 3, act=nn.SiLU)) for _ in range(n))
        self.shortcut = shortcut
        self.cv2 = _conv_bn((2 + n) * self.c, cout, 1, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1a(x), self.cv1b(x)]
        for m in self.m:
            y.append(y[-1] + m(y[-1]) if self.shortcut else m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class YoloNeck(nn.Module):
    """A YOLOv8-n-like detector at 128 px: C2f backbone, SPPF, PAN neck (nn.Upsample + torch.cat), two heads."""

    def __init__(self, s: S) -> None:
        super().__init__()
        w = s["widths"]
        self.stem = nn.Sequential(_conv_bn(3, w[0], 3, 2, act=nn.SiLU), _conv_bn(w[0], w[1], 3, 2, act=nn.SiLU),
                                  C2f(w[1], w[1], 1, True), _conv_bn(w[1], w[2], 3, 2, act=nn.SiLU),
                                  C2f(w[2], w[2], 1, True))
        self.down = nn.Sequential(_conv_bn(w[2], w[3], 3, 2, act=nn.SiLU), C2f(w[3], w[3], 1, True))
        self.sppf_cv1 = _conv_bn(w[3], w[3] // 2, 1, act=nn.SiLU)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.sppf_cv2 = _conv_bn(w[3] * 2, w[3], 1, act=nn.SiLU)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n3 = C2f(w[3] + w[2], w[2], 1, False)
        self.n3_down = _conv_bn(w[2], w[2], 3, 2, act=nn.SiLU)
        self.n4 = C2f(w[2] + w[3], w[3], 1, False)
        self.heads = nn.ModuleList(
            nn.ModuleList([nn.Sequential(_conv_bn(c, 32, 3, act=nn.SiLU), _conv_bn(32, 32, 3, act=nn.SiLU),
                                         nn.Conv2d(32, 64, 1)),
                           nn.Sequential(_conv_bn(c, 32, 3, act=nn.SiLU), _conv_bn(32, 32, 3, act=nn.SiLU),
                                         nn.Conv2d(32, s["classes"], 1))]) for c in (w[2], w[3]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p3 = self.stem(x)
        x = self.sppf_cv1(self.down(p3))
        y1 = self.pool(x)
        y2 = self.pool(y1)
        p4 = self.sppf_cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))
        n3 = self.n3(torch.cat([self.up(p4), p3], 1))
        n4 = self.n4(torch.cat([self.n3_down(n3), p4], 1))
        out = [torch.cat([box(f), cls(f)], 1) for f, (box, cls) in zip((n3, n4), self.heads, strict=True)]
        return out[0], out[1]


class ConvNextTiny(nn.Module):
    """A ConvNeXt-atto-like net: 4x4 stride-4 stem, channels-last LayerNorm, 7x7 depthwise, Linear MLP with GELU,
    layer scale; a 2x2 stride-2 downsampling between stages (torchvision's structure)."""

    def __init__(self, s: S) -> None:
        super().__init__()
        w, depths = s["widths"], s["depths"]
        self.stem = nn.Conv2d(3, w[0], 4, 4)
        self.stem_norm = nn.LayerNorm(w[0])
        self.stages = nn.ModuleList()
        self.downs = nn.ModuleList()
        for i, (width, depth) in enumerate(zip(w, depths, strict=True)):
            if i:
                self.downs.append(nn.ModuleList([nn.LayerNorm(w[i - 1]), nn.Conv2d(w[i - 1], width, 2, 2)]))
            self.stages.append(nn.ModuleList(nn.ModuleDict({
                "dw": nn.Conv2d(width, width, 7, padding=3, groups=width), "ln": nn.LayerNorm(width),
                "fc1": nn.Linear(width, 4 * width), "fc2": nn.Linear(4 * width, width)}) for _ in range(depth)))
        self.gammas = nn.ParameterList(nn.Parameter(torch.rand(width) * 0.5 + 0.25) for width in w)
        self.head = nn.Linear(w[-1], s["classes"])

    @staticmethod
    def _ln2d(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
        return norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._ln2d(self.stem_norm, self.stem(x))
        for i, stage in enumerate(self.stages):
            if i:
                norm, conv = self.downs[i - 1]
                x = conv(self._ln2d(norm, x))
            for blk in stage:
                y = blk["ln"](blk["dw"](x).permute(0, 2, 3, 1))
                y = blk["fc2"](nn.functional.gelu(blk["fc1"](y))) * self.gammas[i]
                x = x + y.permute(0, 3, 1, 2)
        return self.head(x.mean((2, 3)))


BUILDERS = {"kws_cnn": KwsCnn, "mobilenet_v2": MobileNetV2Blocks, "espcn": Espcn, "vit": AttentionBlockNet,
            "rnn": RnnKws, "yolo": YoloNeck, "convnext": ConvNextTiny}


def build(name: str, settings: S) -> nn.Module:
    """The seeded, eval-mode module of builder ``name`` (BatchNorm statistics randomised too)."""
    return _randomise_bn(BUILDERS[name](settings))
