"""Block configs against Vela 5.2.0: the golden verbose schedules and reference cases computed by Vela itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import CONFIGS, golden_arch, golden_cases, golden_path

from npusched.ir import (
    DataType,
    FeatureMap,
    Kernel,
    NpuBlockType,
    NpuOp,
    OperandAccess,
    ResamplingMode,
    Shape4D,
)
from npusched.target.block_config import (
    BlockConfig,
    enumerate_block_configs,
    find_block_config,
    find_block_config_for_op,
    get_ifm_area_required,
    try_block_config,
    vela_choice,
)
from npusched.target.estimators import load_architecture
from npusched.vela.report import read_verbose_schedule

# ----------------------------------------------------------------------------------------------------------------
# Golden verbose schedules

# Vela's op type -> NPU block type (operation.py's OperatorInfo); every other printed type is elementwise.
BLOCK_TYPES = {
    "Conv2DBias": NpuBlockType.ConvolutionMxN,
    "DepthwiseConv2DBias": NpuBlockType.ConvolutionDepthWise,
    "FullyConnected": NpuBlockType.VectorProduct,
    "AvgPool": NpuBlockType.Pooling,
    "MaxPool": NpuBlockType.Pooling,
    "ReduceSum": NpuBlockType.ReduceSum,
    "Memcpy": NpuBlockType.Dma,
}
ELEMENTWISE_TYPES = {"Add", "Sub", "Mul", "SHL", "SHR", "CLZ", "Minimum", "Maximum", "LeakyRelu", "Abs"}

_SOFTMAX_PASS = re.compile(r"(.*)_(maxpool|sub|shr|reduce_sum|clz|shl|add|mul)(\d+)$")


def _shape(values: list[int] | None) -> Shape4D | None:
    return None if values is None else Shape4D(*values)


def parse_schedule(path: Path) -> list[dict]:
    """Every op of every NPU schedule in a verbose vela_stdout.txt."""
    return [
        {"index": op.index, "name": op.name, "type": op.op_type, "kernel": Kernel(*op.kernel),
         "block": op.block_config, "ifm": _shape(op.ifm_stripe), "ifm2": _shape(op.ifm2_stripe),
         "ofm": _shape(op.ofm_stripe)}
        for schedule in read_verbose_schedule(path)
        for op in schedule.ops
    ]


def block_inputs(op: dict, softmax_prefixes: set[str]) -> dict:
    """The find_block_config inputs the text does not print, reconstructed as Vela sets them.

    * IFM bits: 8 (the corpus is int8), except inside Vela's int8 softmax decomposition (softmax.py): passes 0
      (max pool) and 1 (sub + exp LUT) read the int8 input, passes 2.. read int32 intermediates.
    * LUT banks: 2 for softmax pass 1 (its exp table) and for ops Vela renamed ``*_lut_*`` (standalone
      sigmoid/tanh/... turned into Add + LUT); fused LUT activations are not visible in the text, and are
      irrelevant on 48-bank accelerators (whose 2 reserved end banks already hold the LUT).
    * uses_scalar: False. Vela sets it only for rank-0 operands; the printed [1, 1, 1, 1] IFM2 stripes are
      rank-1+ constants (softmax constants are [1, 1, 1, 1] tensors).
    * scaled: True (every corpus tensor is quantised); resampling: none (the corpus has no resize ops).
    """
    bits, lut = 8, 0
    match = _SOFTMAX_PASS.match(op["name"])
    if match and match.group(1) in softmax_prefixes:
        number = int(match.group(3))
        bits = 32 if number >= 2 else 8
        lut = 2 if number == 1 else 0
    if "_lut_" in op["name"]:
        lut = 2
    kind = op["type"]
    assert kind in BLOCK_TYPES or kind in ELEMENTWISE_TYPES, f"unmapped op type {kind}"
    return {
        "npu_block_type": BLOCK_TYPES.get(kind, NpuBlockType.ElementWise),
        "ofm_shape": op["ofm"],
        "ifm_shape": op["ifm"],
        "ifm2_shape": op["ifm2"],
        "uses_scalar": False,
        "ifm_bits": bits,
        "kernel": op["kernel"],
        "lut_banks": lut,
        "scaled": True,
        "resampling_mode": ResamplingMode.NONE,
    }


def golden_ops(config_name: str) -> list[tuple[str, dict, dict]]:
    """(model, parsed op, find_block_config inputs) for every op of a configuration's golden schedules."""
    result = []
    for _, model in golden_cases((config_name,)):
        ops = parse_schedule(golden_path(config_name, model) / "vela_stdout.txt")
        prefixes = {m.group(1) for o in ops if (m := re.match(r"(.*)_clz4$", o["name"]))}
        for op in ops:
            result.append((model, op, block_inputs(op, prefixes)))
    return result


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_golden_block_configs(config_name: str) -> None:
    """Every op of every golden schedule gets Vela's printed Block Config (measured: 2159/2159 ops)."""
    arch = golden_arch(config_name)
    ops = golden_ops(config_name)
    assert len(ops) > 300
    kinds = {op["type"] for _, op, _ in ops}
    assert {"Conv2DBias", "DepthwiseConv2DBias", "FullyConnected", "AvgPool", "MaxPool", "Add"} <= kinds
    mismatches = []
    for model, op, inputs in ops:
        got = find_block_config(arch, **inputs)
        if got is None or got.old_style() != op["block"]:
            mismatches.append(f"{model} #{op['index']} {op['type']}: vela {op['block']}, ours {got}")
    assert not mismatches, f"{len(mismatches)}/{len(ops)} differ:\n" + "\n".join(mismatches[:20])


@pytest.mark.parametrize("config_name", ["u55-128_hee_shared", "u65-512_high_dedicated384k"])
def test_enumeration_contains_vela_choice(config_name: str) -> None:
    """The solver-facing enumeration ranks Vela's choice first, and each candidate re-validates on its own."""
    arch = golden_arch(config_name)
    distinct = {tuple(sorted((k, v) for k, v in inputs.items())) for _, _, inputs in golden_ops(config_name)}
    assert len(distinct) > 50
    for key in sorted(distinct, key=str)[:200]:
        inputs = dict(key)
        candidates = enumerate_block_configs(arch, **inputs)
        chosen = vela_choice(candidates)
        assert chosen is not None and chosen.config == find_block_config(arch, **inputs)
        assert chosen.cost == min(c.cost for c in candidates if c.searched)
        for cand in candidates[:: max(1, len(candidates) // 10)]:
            cfg = cand.config
            again = try_block_config(cfg.ofm_block, arch, inputs["npu_block_type"], inputs["ofm_shape"],
                                     inputs["ifm_shape"], inputs["ifm2_shape"], inputs["uses_scalar"],
                                     inputs["ifm_bits"], cfg.is_partkernel, inputs["kernel"], inputs["lut_banks"],
                                     inputs["scaled"], inputs["resampling_mode"])
            assert again == cfg
            lay = cfg.layout
            assert arch.shram.reserved_output_banks == lay.ib_start <= lay.ib_end <= lay.ab_start <= lay.lut_start
            assert lay.lut_start <= arch.shram.total_banks


# ----------------------------------------------------------------------------------------------------------------
# Reference cases computed by Vela 5.2.0 itself
#
# Each line: accelerator, block type, OFM, IFM, IFM2 (HxWxD, "B:" prefix for batch > 1), "S" if uses_scalar,
# IFM bits, kernel (WxH, sN,M strides, dN,M dilations), LUT banks, scaled, resampling (N nearest, T transpose)
# | Vela's OFM block, IFM block, accumulator type (6 = 32-bit, 7 = 40-bit), part-kernel flag and SHRAM layout
# (ib_start, ib_end, ib_start2, ab_start, lut_start), or "-" for no fitting block. The first part was logged
# from Vela's find_block_config while it compiled the corpus models for all six accelerators (Performance and
# Size, several memory modes); the second part are randomised inputs fed to the same function.
VELA_CASES = """
u55-256 MxN 1x3x256 1x3x128 - - 8 1x1 0 1 - | 2x4x128 2x4x32 6 0 2,10,10,30,46
u55-256 MxN 1x14x384 1x14x64 - - 8 1x1 0 1 - | 2x14x128 2x14x32 6 0 2,10,10,30,46
u55-256 MxN 1x28x192 1x28x32 - - 8 1x1 0 1 - | 2x28x96 2x28x32 6 0 2,10,10,14,46
u55-256 EW 1x8x64 1x8x64 1x8x64 - 8 1x1 0 1 - | 2x4x64 2x4x64 6 0 2,46,10,46,46
u55-256 EW 1x1x1 1x1x1 1x1x1 - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,46,18,46,46
u55-256 EW 1x1x3 1x1x3 1x1x1 - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,46,18,46,46
u55-256 Pool 1x1x1 1x4x1 - - 8 4x1 0 1 - | 2x2x8 2x6x8 6 0 2,10,10,30,46
u55-256 Pool 1x1x128 1x1x128 - - 8 1x1 0 1 - | 2x2x128 2x2x128 6 0 2,10,10,30,46
u55-256 Pool 1x1x1 1x10x1 - - 8 10x1 0 1 - | 2x2x8 2x10x8 6 0 2,10,10,30,46
u55-256 RS 1x1x1 1x1x10 - - 32 1x1 0 1 - | 2x2x8 2x2x16 6 0 2,18,18,30,46
u55-256 RS 1x1x1 1x1x3 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u55-256 VP 1x1x128 1x1x8 - - 8 1x1 0 1 - | 2x2x128 2x2x8 6 0 2,10,10,30,46
u55-256 VP 1x1x10 1x1x160 - - 8 1x1 0 1 - | 2x2x16 2x2x32 6 0 2,10,10,30,46
u65-256 MxN 1x14x64 1x14x192 - - 8 1x1 0 1 - | 2x14x64 2x14x32 6 0 2,10,10,30,46
u65-256 MxN 1x14x576 1x14x96 - - 8 1x1 0 1 - | 2x14x128 2x14x32 6 0 2,10,10,30,46
u65-256 MxN 1x7x160 1x7x576 - - 8 1x1 0 1 - | 2x8x80 2x8x32 6 0 2,10,10,30,46
u65-256 EW 1x1x12 1x1x12 1x1x1 - 8 1x1 2 1 - | 2x2x16 2x2x16 6 0 2,46,10,46,46
u65-256 EW 1x1x1280 1x1x1280 1x1x1 - 32 1x1 0 1 - | 2x2x128 2x2x128 6 0 2,46,18,46,46
u65-256 EW 1x1x4 1x1x4 1x1x1 - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,46,18,46,46
u65-256 Pool 1x1x1 1x4x1 - - 8 4x1 0 1 - | 2x2x8 2x6x8 6 0 2,10,10,30,46
u65-256 Pool 1x1x128 1x1x128 - - 8 1x1 0 1 - | 2x2x128 2x2x128 6 0 2,10,10,30,46
u65-256 RS 1x1x1 1x1x2 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u65-256 RS 1x1x1 1x1x10 - - 32 1x1 0 1 - | 2x2x8 2x2x16 6 0 2,18,18,30,46
u65-256 VP 1x1x2 1x1x32 - - 8 1x1 0 1 - | 2x2x8 2x2x32 6 0 2,10,10,30,46
u65-256 VP 1x1x32 1x1x128 - - 8 1x1 0 1 - | 2x2x32 2x2x32 6 0 2,10,10,30,46
u65-512 MxN 1x28x32 1x28x144 - - 8 1x1 0 1 - | 2x28x32 2x28x32 6 0 2,10,10,30,46
u65-512 MxN 1x12x64 1x12x32 - - 8 1x1 0 1 - | 2x12x64 2x12x32 6 0 2,10,10,30,46
u65-512 MxN 1x16x32 1x31x16 - - 8 1x1s2,2 0 1 - | 2x16x32 4x32x16 6 0 2,10,10,30,46
u65-512 EW 1x14x96 1x14x96 1x14x96 - 8 1x1 0 1 - | 2x14x48 2x14x48 6 0 2,46,10,46,46
u65-512 Pool 1x1x1 1x10x1 - - 8 10x1 0 1 - | 2x2x8 2x10x8 6 0 2,10,10,30,46
u65-512 Pool 1x1x1 1x4x1 - - 8 4x1 0 1 - | 2x2x8 2x6x8 6 0 2,10,10,30,46
u65-512 RS 1x1x1 1x1x2 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u65-512 RS 1x1x1 1x1x4 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u65-512 VP 1x1x128 1x1x8 - - 8 1x1 0 1 - | 2x2x128 2x2x8 6 0 2,10,10,30,46
u65-512 VP 1x1x128 1x1x257 - - 8 1x1 0 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u55-128 DW 5x5x64 7x5x64 - - 8 3x3 0 1 - | 5x6x32 7x8x32 6 0 2,6,6,14,22
u55-128 DW 1x56x144 3x56x144 - - 8 3x3 0 1 - | 1x56x16 3x58x16 6 0 2,10,10,14,22
u55-128 MxN 28x28x192 28x28x32 - - 8 1x1 0 1 - | 3x14x48 3x14x32 6 0 2,6,6,6,22
u55-128 MxN 2x112x96 2x112x16 - - 8 1x1 0 1 - | 2x58x16 2x58x16 6 0 2,6,6,6,22
u55-128 Dma 49x40x1 1x1x1960 - - 8 1x1 0 1 - | 1x38x8 1x38x32 6 0 2,6,6,14,22
u55-128 Dma 1x1x1280 1x1x1280 - - 8 1x1 0 1 - | 1x2x128 1x2x32 6 0 2,6,6,14,22
u55-128 EW 1x1x128 1x1x128 1x1x128 - 16 1x1 0 1 - | 1x2x128 1x2x128 7 0 2,22,6,22,22
u55-128 EW 1x1x2 1x1x2 1x1x1 - 32 1x1 0 1 - | 1x2x8 1x2x8 6 0 2,22,10,22,22
u55-128 EW 1x1x1 1x1x1 1x1x1 - 32 1x1 0 1 - | 1x2x8 1x2x8 6 0 2,22,10,22,22
u55-128 EW 2x32x40 2x32x40 2x32x40 - 8 1x1 0 1 - | 2x32x40 2x32x40 6 0 2,22,10,22,22
u55-128 EW 1x14x96 1x14x96 1x14x96 - 8 1x1 0 1 - | 1x14x96 1x14x96 6 0 2,22,6,22,22
u55-128 EW 1x1x3 1x1x3 1x1x1 - 8 1x1 2 1 - | 1x2x8 1x2x8 6 0 2,22,6,22,22
u55-128 EW 1x1x4 1x1x4 1x1x1 - 8 1x1 2 1 - | 1x2x8 1x2x8 6 0 2,22,6,22,22
u55-128 Pool 1x1x96 1x1x96 - - 16 1x1 0 1 - | 1x2x96 1x2x96 6 0 2,6,6,14,22
u55-128 Pool 1x1x128 1x1x128 - - 16 1x1 0 1 - | 1x2x128 1x2x128 6 0 2,6,6,14,22
u55-128 Pool 1x1x1 1x12x1 - - 8 12x1 0 1 - | 1x2x8 1x10x8 6 0 2,6,6,14,22
u55-128 Pool 1x1x1 1x3x1 - - 8 3x1 0 1 - | 1x2x8 1x4x8 6 0 2,6,6,14,22
u55-128 RS 1x1x1 1x1x12 - - 32 1x1 0 1 - | 1x2x8 1x2x16 6 0 2,10,10,14,22
u55-128 RS 1x1x1 1x1x10 - - 32 1x1 0 1 - | 1x2x8 1x2x16 6 0 2,10,10,14,22
u55-128 VP 1x1x128 1x1x128 - - 8 1x1 0 1 - | 1x2x128 1x2x32 6 0 2,6,6,14,22
u55-128 VP 1x1x16 1x1x64 - - 8 1x1 0 1 - | 1x2x16 1x2x32 6 0 2,6,6,14,22
u55-128 VP 1x1x257 1x1x128 - - 8 1x1 2 1 - | 1x2x128 1x2x32 6 0 2,6,6,14,22
u55-256 DW 3x3x256 3x3x256 - - 8 3x3 0 1 - | 4x4x128 6x6x128 6 0 2,18,18,30,46
u55-256 DW 56x56x96 112x112x96 - - 8 3x3s2,2 0 1 - | 10x12x16 22x26x16 6 0 2,26,26,30,46
u55-256 MxN 16x16x32 32x32x16 - - 8 3x3s2,2 0 1 - | 8x16x16 18x34x16 6 1 2,26,26,30,46
u55-256 MxN 1x112x32 3x224x3 - - 8 3x3s2,2 0 1 - | 2x40x32 6x82x8 6 1 2,10,10,14,46
u55-256 Dma 1x1x1280 1x1x1280 - - 8 1x1 0 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u55-256 Dma 49x40x1 1x1x1960 - - 8 1x1 0 1 - | 2x30x8 2x30x32 6 0 2,10,10,30,46
u55-256 EW 1x1x128 1x1x128 1x1x128 - 16 1x1 0 1 - | 2x2x128 2x2x128 7 0 2,46,10,46,46
u55-256 EW 1x1x1 1x1x1 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,46,18,46,46
u55-256 EW 1x1x4 1x1x4 1x1x1 - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,46,18,46,46
u55-256 EW 2x16x32 2x16x32 2x16x32 - 8 1x1 0 1 - | 2x16x32 2x16x32 6 0 2,46,10,46,46
u55-256 EW 32x32x40 32x32x40 32x32x40 - 8 1x1 0 1 - | 16x32x16 16x32x16 6 0 2,46,18,46,46
u55-256 EW 1x1x10 1x1x10 1x1x1 - 8 1x1 2 1 - | 2x2x16 2x2x16 6 0 2,46,10,46,46
u55-256 EW 1x1x2 1x1x2 1x1x1 - 8 1x1 2 1 - | 2x2x8 2x2x8 6 0 2,46,10,46,46
u55-256 Pool 1x1x128 1x1x128 - - 16 1x1 0 1 - | 2x2x128 2x2x128 6 0 2,10,10,30,46
u55-256 Pool 1x1x96 1x1x96 - - 16 1x1 0 1 - | 2x2x96 2x2x96 6 0 2,10,10,30,46
u55-256 Pool 1x1x256 3x3x256 - - 8 3x3 0 1 - | 2x2x128 4x4x128 6 0 2,10,10,30,46
u55-256 Pool 1x1x64 8x8x64 - - 8 8x8 0 1 - | 2x2x64 10x10x64 6 0 2,18,18,30,46
u55-256 RS 1x1x1 1x1x12 - - 32 1x1 0 1 - | 2x2x8 2x2x16 6 0 2,18,18,30,46
u55-256 RS 1x1x1 1x1x2 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u55-256 VP 1x1x32 1x1x128 - - 8 1x1 0 1 - | 2x2x32 2x2x32 6 0 2,10,10,30,46
u55-256 VP 1x1x16 1x1x64 - - 8 1x1 0 1 - | 2x2x16 2x2x32 6 0 2,10,10,30,46
u55-256 VP 1x1x257 1x1x128 - - 8 1x1 2 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u55-32 DW 1x12x64 3x12x64 - - 8 3x3 0 1 - | 1x12x32 3x14x32 6 0 2,6,6,12,16
u55-32 DW 1x12x32 3x24x32 - - 8 3x3s2,2 0 1 - | 1x12x16 3x25x16 6 0 2,6,6,12,16
u55-32 MxN 7x7x960 7x7x160 - - 8 1x1 0 1 - | 4x7x48 4x7x32 6 0 2,4,4,4,16
u55-32 MxN 2x56x24 2x56x144 - - 8 1x1 0 1 - | 1x56x16 1x56x32 6 0 2,6,6,8,16
u55-32 Dma 1x1x1280 1x1x1280 - - 8 1x1 0 1 - | 1x1x128 1x1x32 6 0 2,4,4,12,16
u55-32 Dma 2x40x1 1x1x1960 - - 8 1x1 0 1 - | 1x31x4 1x31x32 6 0 2,4,4,12,16
u55-32 EW 1x1x128 1x1x128 1x1x128 - 16 1x1 0 1 - | 1x1x128 1x1x128 7 0 2,16,4,16,16
u55-32 EW 1x1x1 1x1x1 - - 32 1x1 0 1 - | 1x1x4 1x1x4 6 0 2,16,6,16,16
u55-32 EW 1x1x2 1x1x2 1x1x1 - 32 1x1 0 1 - | 1x1x4 1x1x4 6 0 2,16,6,16,16
u55-32 EW 2x32x40 2x32x40 2x32x40 - 8 1x1 0 1 - | 2x32x32 2x32x32 6 0 2,16,6,16,16
u55-32 EW 14x14x96 14x14x96 14x14x96 - 8 1x1 0 1 - | 8x12x32 8x12x32 6 0 2,16,8,16,16
u55-32 EW 1x1x3 1x1x3 1x1x1 - 8 1x1 2 1 - | 1x1x4 1x1x4 6 0 2,14,4,14,14
u55-32 EW 1x1x4 1x1x4 1x1x1 - 8 1x1 2 1 - | 1x1x4 1x1x4 6 0 2,14,4,14,14
u55-32 EW 1x1x257 1x1x257 1x1x1 S 8 1x1 2 1 - | 1x1x128 1x1x128 6 0 2,14,4,14,14
u55-32 Pool 1x1x128 1x1x128 - - 16 1x1 0 1 - | 1x1x128 1x1x128 6 0 2,4,4,12,16
u55-32 Pool 1x1x96 1x1x96 - - 16 1x1 0 1 - | 1x1x96 1x1x96 6 0 2,4,4,12,16
u55-32 Pool 1x1x1 1x12x1 - - 8 12x1 0 1 - | 1x1x4 1x8x4 6 0 2,4,4,12,16
u55-32 Pool 1x1x256 3x3x256 - - 8 3x3s2,2 0 1 - | 1x1x128 3x3x128 6 0 2,6,6,12,16
u55-32 RS 1x1x1 1x1x4 - - 32 1x1 0 1 - | 1x1x4 1x1x8 6 0 2,6,6,12,16
u55-32 RS 1x1x1 1x1x3 - - 32 1x1 0 1 - | 1x1x4 1x1x8 6 0 2,6,6,12,16
u55-32 VP 1x1x128 1x1x128 - - 8 1x1 0 1 - | 1x1x128 1x1x32 6 0 2,4,4,12,16
u55-32 VP 1x1x2 1x1x32 - - 8 1x1 0 1 - | 1x1x4 1x1x32 6 0 2,4,4,12,16
u55-64 DW 3x28x144 7x56x144 - - 8 3x3s2,2 0 1 - | 3x13x16 7x27x16 6 0 2,8,8,8,16
u55-64 DW 2x56x144 4x56x144 - - 8 3x3 0 1 - | 2x32x16 4x34x16 6 0 2,8,8,8,16
u55-64 MxN 32x32x16 32x32x16 - - 8 3x3 0 1 - | 8x8x16 10x10x16 6 1 2,6,6,8,16
u55-64 MxN 4x24x32 4x24x16 - - 8 1x1 0 1 - | 4x13x16 4x13x16 6 0 2,4,4,8,16
u55-64 Dma 49x40x1 1x1x1960 - - 8 1x1 0 1 - | 1x38x8 1x38x32 6 0 2,6,6,12,16
u55-64 Dma 2x40x1 1x1x1960 - - 8 1x1 0 1 - | 1x31x8 1x31x32 6 0 2,4,4,12,16
u55-64 EW 1x1x128 1x1x128 1x1x128 - 16 1x1 0 1 - | 1x1x128 1x1x128 7 0 2,16,4,16,16
u55-64 EW 1x1x12 1x1x12 1x1x1 - 32 1x1 0 1 - | 1x1x16 1x1x16 6 0 2,16,6,16,16
u55-64 EW 1x1x10 1x1x10 1x1x1 - 32 1x1 0 1 - | 1x1x16 1x1x16 6 0 2,16,6,16,16
u55-64 EW 1x56x24 1x56x24 1x56x24 - 8 1x1 0 1 - | 1x56x24 1x56x24 6 0 2,16,6,16,16
u55-64 EW 32x32x16 32x32x16 32x32x16 - 8 1x1 0 1 - | 6x32x16 6x32x16 6 0 2,16,8,16,16
u55-64 EW 1x1x4 1x1x4 1x1x1 - 8 1x1 2 1 - | 1x1x8 1x1x8 6 0 2,14,4,14,14
u55-64 EW 1x1x10 1x1x10 1x1x1 - 8 1x1 2 1 - | 1x1x16 1x1x16 6 0 2,14,4,14,14
u55-64 EW 1x1x257 1x1x257 1x1x1 S 8 1x1 2 1 - | 1x1x128 1x1x128 6 0 2,14,4,14,14
u55-64 Pool 1x1x96 1x1x96 - - 16 1x1 0 1 - | 1x1x96 1x1x96 6 0 2,4,4,12,16
u55-64 Pool 1x1x128 1x1x128 - - 16 1x1 0 1 - | 1x1x128 1x1x128 6 0 2,4,4,12,16
u55-64 Pool 1x1x256 3x3x256 - - 8 3x3s2,2 0 1 - | 1x1x128 3x3x128 6 0 2,6,6,12,16
u55-64 Pool 1x1x128 1x1x128 - - 8 1x1 0 1 - | 1x1x128 1x1x128 6 0 2,4,4,12,16
u55-64 RS 1x1x1 1x1x2 - - 32 1x1 0 1 - | 1x1x8 1x1x8 6 0 2,6,6,12,16
u55-64 RS 1x1x1 1x1x3 - - 32 1x1 0 1 - | 1x1x8 1x1x8 6 0 2,6,6,12,16
u55-64 VP 1x1x3 1x1x32 - - 8 1x1 0 1 - | 1x1x8 1x1x32 6 0 2,4,4,12,16
u55-64 VP 1x1x8 1x1x128 - - 8 1x1 0 1 - | 1x1x8 1x1x32 6 0 2,4,4,12,16
u65-256 DW 16x48x8 18x48x8 - - 8 3x3 0 1 - | 16x26x8 18x28x8 6 1 2,10,10,14,46
u65-256 DW 3x24x32 5x24x32 - - 8 3x3 0 1 - | 4x24x16 6x26x16 6 0 2,10,10,30,46
u65-256 MxN 2x32x40 4x32x40 - - 8 3x3 0 1 - | 2x32x40 4x34x16 6 1 2,10,10,14,46
u65-256 MxN 28x28x32 28x28x144 - - 8 1x1 0 1 - | 4x28x32 4x28x32 6 0 2,10,10,14,46
u65-256 Dma 2x40x1 1x1x1960 - - 8 1x1 0 1 - | 2x16x8 2x16x32 6 0 2,10,10,30,46
u65-256 Dma 1x1x1280 1x1x1280 - - 8 1x1 0 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u65-256 EW 1x1x128 1x1x128 1x1x128 - 16 1x1 0 1 - | 2x2x128 2x2x128 7 0 2,46,10,46,46
u65-256 EW 1x1x10 1x1x10 1x1x1 - 32 1x1 0 1 - | 2x2x16 2x2x16 6 0 2,46,18,46,46
u65-256 EW 1x1x1 1x1x1 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,46,18,46,46
u65-256 EW 1x7x160 1x7x160 1x7x160 - 8 1x1 0 1 - | 2x8x80 2x8x80 6 0 2,46,10,46,46
u65-256 EW 16x16x80 16x16x80 16x16x80 - 8 1x1 0 1 - | 16x16x32 16x16x32 6 0 2,46,18,46,46
u65-256 EW 1x1x2 1x1x2 1x1x1 - 8 1x1 2 1 - | 2x2x8 2x2x8 6 0 2,46,10,46,46
u65-256 EW 1x1x3 1x1x3 1x1x1 - 8 1x1 2 1 - | 2x2x8 2x2x8 6 0 2,46,10,46,46
u65-256 Pool 1x1x96 1x1x96 - - 16 1x1 0 1 - | 2x2x96 2x2x96 6 0 2,10,10,30,46
u65-256 Pool 1x1x128 1x1x128 - - 16 1x1 0 1 - | 2x2x128 2x2x128 6 0 2,10,10,30,46
u65-256 Pool 1x1x1 1x10x1 - - 8 10x1 0 1 - | 2x2x8 2x10x8 6 0 2,10,10,30,46
u65-256 Pool 1x1x1 1x12x1 - - 8 12x1 0 1 - | 2x2x8 2x10x8 6 0 2,10,10,30,46
u65-256 RS 1x1x1 1x1x3 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u65-256 RS 1x1x1 1x1x4 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u65-256 VP 1x1x2 1x1x256 - - 8 1x1 0 1 - | 2x2x8 2x2x32 6 0 2,10,10,30,46
u65-256 VP 1x1x10 1x1x64 - - 8 1x1 0 1 - | 2x2x16 2x2x32 6 0 2,10,10,30,46
u65-256 VP 1x1x257 1x1x128 - - 8 1x1 2 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u65-512 DW 8x56x144 10x56x144 - - 8 3x3 0 1 - | 8x22x16 10x24x16 6 0 2,10,10,14,46
u65-512 DW 3x24x32 5x24x32 - - 8 3x3 0 1 - | 4x24x16 6x26x16 6 0 2,10,10,30,46
u65-512 MxN 1x3x256 1x3x256 - - 8 1x1 0 1 - | 2x4x128 2x4x32 6 0 2,10,10,30,46
u65-512 MxN 2x48x16 2x48x8 - - 8 1x1 0 1 - | 2x48x16 2x48x8 6 1 2,10,10,30,46
u65-512 Dma 2x40x1 1x1x1960 - - 8 1x1 0 1 - | 2x16x8 2x16x32 6 0 2,10,10,30,46
u65-512 Dma 1x1x1280 1x1x1280 - - 8 1x1 0 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u65-512 EW 1x1x128 1x1x128 1x1x128 - 16 1x1 0 1 - | 2x2x128 2x2x128 7 0 2,46,10,46,46
u65-512 EW 1x1x10 1x1x10 1x1x1 - 32 1x1 0 1 - | 2x2x16 2x2x16 6 0 2,46,18,46,46
u65-512 EW 1x1x3 1x1x3 1x1x1 - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,46,18,46,46
u65-512 EW 1x56x24 1x56x24 1x56x24 - 8 1x1 0 1 - | 2x42x16 2x42x16 6 0 2,46,10,46,46
u65-512 EW 8x8x160 8x8x160 8x8x160 - 8 1x1 0 1 - | 8x8x128 8x8x128 6 0 2,46,18,46,46
u65-512 EW 1x1x3 1x1x3 1x1x1 - 8 1x1 2 1 - | 2x2x8 2x2x8 6 0 2,46,10,46,46
u65-512 EW 1x1x2 1x1x2 1x1x1 - 8 1x1 2 1 - | 2x2x8 2x2x8 6 0 2,46,10,46,46
u65-512 Pool 1x1x128 1x1x128 - - 16 1x1 0 1 - | 2x2x128 2x2x128 6 0 2,10,10,30,46
u65-512 Pool 1x1x96 1x1x96 - - 16 1x1 0 1 - | 2x2x96 2x2x96 6 0 2,10,10,30,46
u65-512 Pool 1x1x1 1x2x1 - - 8 2x1 0 1 - | 2x2x8 2x4x8 6 0 2,10,10,30,46
u65-512 Pool 1x1x1 1x12x1 - - 8 12x1 0 1 - | 2x2x8 2x10x8 6 0 2,10,10,30,46
u65-512 RS 1x1x1 1x1x3 - - 32 1x1 0 1 - | 2x2x8 2x2x8 6 0 2,18,18,30,46
u65-512 RS 1x1x1 1x1x10 - - 32 1x1 0 1 - | 2x2x8 2x2x16 6 0 2,18,18,30,46
u65-512 VP 1x1x10 1x1x160 - - 8 1x1 0 1 - | 2x2x16 2x2x32 6 0 2,10,10,30,46
u65-512 VP 1x1x128 1x1x640 - - 8 1x1 0 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u65-512 VP 1x1x257 1x1x128 - - 8 1x1 2 1 - | 2x2x128 2x2x32 6 0 2,10,10,30,46
u55-128 DW 3x56x56 31x16x56 - S 16 1x10s1,2d3,3 2 1 N | 3x22x16 7x12x16 7 1 2,10,10,10,22
u55-128 DW 2:15x17x127 2:5x7x127 - - 32 9x1s2,1d3,1 2 1 - | 1x18x16 1x42x16 6 0 2,10,10,14,22
u55-128 DW 24x1x17 56x140x17 - - 8 7x5s1,3d2,1 0 1 - | 12x2x16 38x10x16 6 1 2,14,14,14,22
u55-128 MxN 2:12x4x24 2:17x127x64 - S 16 1x1d1,2 0 1 N | 12x4x24 7x4x16 7 0 2,6,6,10,22
u55-128 MxN 56x65x1024 129x8x31 - - 32 8x16s3,1d1,2 2 1 T | 3x2x128 5x6x32 6 0 2,10,10,14,22
u55-128 MxN 2:129x48x127 2:64x25x56 - - 8 10x8s1,2 0 1 T | 5x24x16 8x16x16 6 1 2,6,6,6,22
u55-128 Dma 2x56x1 33x16x3 - - 16 3x7s2,1d2,1 0 1 - | 2x30x8 8x64x4 7 0 2,10,10,10,22
u55-128 Dma 12x1x1 300x49x16 - - 32 16x2s1,3d3,2 0 1 - | 2x2x8 6x10x16 6 0 2,10,10,14,22
u55-128 Dma 49x300x300 4x24x512 - - 8 10x10s1,2d1,2 0 0 N | 4x4x128 8x6x32 6 0 2,6,6,6,22
u55-128 EW 2:9x129x48 2:256x9x48 2:256x9x1 - 16 5x1s1,2d1,2 0 1 - | 1x60x32 1x64x32 7 0 2,22,10,22,22
u55-128 EW 32x3x512 1x1x512 256x1x512 - 32 2x3s2,3 2 0 - | 1x2x80 3x4x80 6 0 2,22,10,22,22
u55-128 EW 2:40x128x16 2:17x512x16 1x1x1 S 8 1x10d2,1 0 1 - | 25x20x16 32x20x16 6 0 2,22,22,22,22
u55-128 Pool 65x24x8 96x96x8 - - 16 10x16s1,2d1,2 2 1 T | 8x16x8 11x12x8 6 0 2,10,10,14,22
u55-128 Pool 5x48x49 9x15x49 - - 32 2x3s1,3 0 0 N | 3x18x16 5x10x16 6 0 2,10,10,14,22
u55-128 Pool 1x96x64 25x25x64 - - 8 3x3s1,2d2,2 0 1 N | 1x62x16 3x34x16 6 0 2,6,6,14,22
u55-128 RS 48x64x129 129x48x112 - - 16 16x2d3,2 0 1 - | 2x6x80 4x14x16 7 0 2,6,6,10,22
u55-128 RS 2:9x300x56 2:512x224x24 - S 32 10x2s2,1d3,1 0 1 N | 4x4x56 3x8x24 6 0 2,10,10,14,22
u55-128 RS 12x128x512 64x128x63 - - 8 3x8 2 1 - | 7x2x128 14x4x32 6 0 2,6,6,6,22
u55-128 VP 4x25x1 32x8x48 - - 16 1x1 0 1 - | 3x4x8 3x4x16 7 0 2,6,6,10,22
u55-128 VP 2:96x200x512 2:31x224x12 - - 32 1x1 0 1 N | 3x2x128 2x2x16 6 0 2,10,10,14,22
u55-128 VP 56x8x1 128x127x129 - - 8 1x1 0 1 T | 10x4x8 5x2x32 6 0 2,6,6,14,22
u55-256 DW 7x8x48 16x1x48 - - 16 10x9s3,3 2 1 N | 8x8x16 16x16x16 7 0 2,18,18,26,46
u55-256 DW 48x4x25 31x5x25 - - 32 7x10s2,1 0 1 N | 24x4x16 16x8x16 6 0 2,18,18,30,46
u55-256 DW 15x70x31 31x24x31 - - 8 2x2s2,1d1,2 0 1 - | 16x8x16 18x16x16 6 0 2,18,18,30,46
u55-256 MxN 2x31x8 112x32x8 - S 16 1x7d1,2 0 1 N | 2x32x8 6x18x8 7 1 2,10,10,26,46
u55-256 MxN 9x4x5 65x1x49 - S 32 5x3s1,3 2 0 - | 6x2x8 18x6x16 6 1 2,18,18,30,46
u55-256 MxN 2:200x300x300 2:49x15x512 - S 8 2x10s2,1d3,2 0 1 - | 8x8x32 16x18x32 6 0 2,26,26,30,46
u55-256 Dma 40x63x15 9x127x96 - - 16 10x8s3,2d1,2 2 1 - | 6x4x16 18x18x16 7 0 2,26,26,26,46
u55-256 Dma 2:224x128x49 2:25x224x1 - - 32 8x3s3,3d3,3 0 1 N | 6x6x56 12x12x8 6 0 2,18,18,30,46
u55-256 Dma 2x512x4 48x4x65 - - 8 5x5s1,2 2 1 - | 2x44x8 8x48x32 6 0 2,26,26,30,46
u55-256 EW 7x129x8 56x56x8 64x56x1 - 16 1x8 0 1 - | 8x32x8 16x32x8 7 0 2,46,18,46,46
u55-256 EW 127x96x300 24x9x300 1x1x300 - 32 1x7s3,1d3,1 0 1 T | 10x10x16 8x14x16 6 0 2,46,18,46,46
u55-256 EW 129x33x33 33x2x33 1x2x1 - 8 9x3s1,3 0 1 - | 4x34x16 12x42x16 6 0 2,46,18,46,46
u55-256 Pool 25x9x16 5x65x16 - S 16 9x9 0 0 T | 24x8x16 16x8x16 6 0 2,10,10,14,46
u55-256 Pool 2:1x200x16 2:1x7x16 - - 32 1x16s2,2d1,2 2 0 N | 2x4x16 6x4x16 6 0 2,18,18,30,46
u55-256 Pool 40x49x12 300x56x12 - S 8 3x10s2,1d2,1 0 1 T | 28x8x16 18x10x16 6 0 2,10,10,14,46
u55-256 RS 33x300x17 200x512x127 - - 16 8x1s3,3d1,3 0 1 T | 2x42x24 2x66x16 7 0 2,18,18,26,46
u55-256 RS 256x128x12 90x300x63 - - 32 8x3d1,3 0 1 T | 6x12x16 6x10x32 6 0 2,18,18,30,46
u55-256 RS 2:32x24x15 2:2x48x8 - - 8 3x1s2,3d2,1 2 1 - | 2x24x16 4x52x8 6 0 2,10,10,30,46
u55-256 VP 2:9x63x49 2:63x5x48 - S 16 1x1 0 0 T | 4x4x56 2x2x16 6 0 2,10,10,30,46
u55-256 VP 2:96x127x1024 2:5x17x1024 - - 32 1x1 2 1 - | 4x4x128 4x4x32 6 0 2,18,18,30,46
u55-256 VP 8x129x7 90x512x96 - - 8 1x1 2 0 N | 6x62x8 4x32x32 6 0 2,10,10,14,46
u55-32 DW 2:63x25x65 2:96x5x65 - - 16 2x1s3,1 2 1 - | 32x1x16 32x2x16 7 1 2,6,6,6,14
u55-32 DW 56x5x12 300x9x12 - S 32 5x1s2,2d1,3 0 1 - | 1x5x12 1x13x12 6 0 2,6,6,12,16
u55-32 DW 9x112x200 300x56x200 - - 8 5x2 0 0 - | 3x21x16 4x25x16 6 0 2,6,6,8,16
u55-32 MxN 2:40x1024x112 2:112x9x24 - - 16 5x1s3,1d1,3 2 1 - | 1x20x32 1x62x16 7 1 2,6,6,6,14
u55-32 MxN 8x32x63 256x64x129 - - 32 16x2 0 1 N | 4x12x16 3x10x16 6 1 2,6,6,8,16
u55-32 MxN 127x32x64 17x128x127 - - 8 1x1s2,1 0 1 - | 32x1x32 32x1x32 6 0 2,4,4,8,16
u55-32 Dma 2:49x24x25 2:5x256x1 - - 16 1x5s3,3d2,1 2 1 - | 32x1x16 98x1x4 7 0 2,4,4,6,14
u55-32 Dma 33x127x12 1x17x127 - - 32 9x5d2,1 2 1 - | -
u55-32 Dma 56x65x112 3x1x56 - - 8 8x1 0 1 - | 1x13x112 1x20x32 6 0 2,4,4,4,16
u55-32 EW 7x2x25 12x129x25 1x1x25 - 16 2x3s2,1d2,1 0 1 - | 7x2x16 9x5x16 7 0 2,16,6,16,16
u55-32 EW 2:1024x70x256 2:1x48x256 - - 32 5x1 2 1 - | 1x28x16 1x32x16 6 0 2,14,6,14,14
u55-32 EW 12x33x3 1x140x3 48x1x1 - 8 1x1s2,1 0 1 T | 9x33x4 5x33x4 6 0 2,16,6,16,16
u55-32 Pool 24x7x56 1x1024x56 - - 16 7x7s2,2d1,2 2 1 T | 5x6x16 8x9x16 6 0 2,8,8,10,14
u55-32 Pool 2:32x7x32 2:512x7x32 - S 32 16x5s1,2d3,1 0 1 - | 1x5x16 5x12x16 6 0 2,10,10,12,16
u55-32 Pool 3x32x24 3x31x24 - - 8 3x5s3,1d3,1 0 1 - | 3x10x16 7x34x16 6 0 2,10,10,12,16
u55-32 RS 3x25x64 31x32x8 - - 16 7x3s3,3d2,1 0 1 N | 1x18x64 2x30x8 7 0 2,4,4,4,16
u55-32 RS 32x3x65 49x33x5 - - 32 8x2 2 1 - | 4x3x68 5x10x8 6 0 2,6,6,6,14
u55-32 RS 2x7x128 1024x112x15 - - 8 2x9 2 1 - | 2x4x128 9x5x16 6 0 2,4,4,6,14
u55-32 VP 2:1x24x65 2:63x224x1 - - 16 1x1 0 0 - | 1x4x68 1x4x4 6 0 2,4,4,12,16
u55-32 VP 3x17x7 24x140x32 - - 32 1x1 0 0 T | 2x4x8 1x2x32 6 0 2,6,6,12,16
u55-32 VP 2:1x17x128 2:512x63x1 - - 8 1x1 0 1 N | 1x11x128 1x6x8 6 0 2,4,4,4,16
u55-64 DW 129x4x17 15x96x17 - - 16 1x9s3,1d3,1 0 1 N | 32x1x16 20x1x16 7 1 2,4,4,8,16
u55-64 DW 2:65x512x300 2:256x31x300 - - 32 7x7d3,3 0 1 - | 1x1x16 8x8x16 6 0 2,10,10,12,16
u55-64 DW 300x2x1 224x3x1 - - 8 5x5s2,2d2,1 0 1 - | 30x2x8 63x10x8 6 1 2,12,12,12,16
u55-64 MxN 512x48x25 15x65x1 - - 16 2x7s3,3d1,2 0 0 T | 21x3x16 34x4x4 6 1 2,6,6,8,16
u55-64 MxN 2x65x1024 96x7x15 - - 32 9x16s1,3d2,3 2 1 T | 2x13x16 6x10x16 6 0 2,10,10,10,14
u55-64 MxN 24x24x200 25x512x16 - - 8 10x5s2,3 0 1 - | 4x8x16 14x22x16 6 1 2,12,12,12,16
u55-64 Dma 2:200x12x32 2:1x512x65 - - 16 8x9s3,3 0 0 - | 3x2x32 14x11x16 6 0 2,12,12,12,16
u55-64 Dma 2:112x33x256 2:7x9x16 - - 32 3x1d2,1 0 1 - | 1x8x128 1x12x16 6 0 2,6,6,8,16
u55-64 Dma 2:48x5x7 2:56x65x96 - - 8 1x1s1,3d1,2 0 1 - | 1x4x8 1x4x32 6 0 2,4,4,12,16
u55-64 EW 300x3x33 127x33x33 1x1x1 S 16 2x16s1,2d1,3 2 1 T | 32x3x40 35x2x40 7 0 2,14,14,14,14
u55-64 EW 8x31x17 48x7x17 1x1x1 S 32 3x1s1,3 2 1 - | 1x31x24 1x33x24 6 0 2,14,10,14,14
u55-64 EW 2:128x512x56 2:224x1x56 2:224x1x1 - 8 8x10s3,1d2,3 0 1 - | 4x4x16 11x17x16 6 0 2,16,8,16,16
u55-64 Pool 25x32x512 127x200x512 - S 16 8x7s2,1d1,2 2 1 - | 3x3x16 10x12x16 6 0 2,10,10,10,14
u55-64 Pool 112x128x4 300x32x4 - S 32 1x2s1,3 2 1 N | 2x41x8 3x21x8 6 0 2,6,6,6,14
u55-64 Pool 2:300x24x1 2:112x7x1 - - 8 1x3s1,2d1,3 0 1 N | 27x7x8 30x4x8 6 0 2,4,4,4,16
u55-64 RS 2:56x2x49 2:200x8x8 - - 16 16x10s3,1 0 1 - | 7x2x56 14x11x8 7 0 2,8,8,8,16
u55-64 RS 12x63x24 32x200x128 - - 32 1x9s3,1 0 0 - | 2x1x24 9x1x32 6 0 2,6,6,12,16
u55-64 RS 2:25x33x16 2:24x15x5 - S 8 8x1d2,3 0 1 T | 2x33x16 1x20x8 6 0 2,4,4,4,16
u55-64 VP 56x25x512 25x3x256 - - 16 1x1 2 1 - | 3x2x128 3x2x16 7 0 2,4,4,6,14
u55-64 VP 49x33x200 33x140x512 - - 32 1x1 0 1 - | 3x3x112 3x3x32 6 0 2,6,6,8,16
u55-64 VP 17x15x9 1024x96x17 - - 8 1x1 0 1 - | 1x13x16 1x13x24 6 0 2,4,4,12,16
u65-256 DW 17x300x63 33x24x63 - - 16 16x3s2,1d1,2 0 1 - | 10x10x16 14x26x16 7 0 2,26,26,26,46
u65-256 DW 2:40x2x129 2:31x17x129 - - 32 9x1d1,2 0 1 N | 30x2x16 16x6x16 6 0 2,18,18,30,46
u65-256 DW 9x512x8 49x224x8 - - 8 1x2s3,1d1,2 0 1 - | 10x2x8 12x4x8 6 1 2,10,10,30,46
u65-256 MxN 127x33x300 49x1x128 - - 16 3x1s3,1d1,2 2 1 N | 4x32x16 4x50x16 7 0 2,18,18,26,46
u65-256 MxN 1x9x25 4x33x9 - - 32 1x10 0 1 - | 2x10x32 10x10x16 6 0 2,18,18,30,46
u65-256 MxN 2:17x63x300 2:31x15x9 - S 8 10x1s3,2d3,1 0 1 T | 2x64x32 2x100x16 6 1 2,10,10,14,46
u65-256 Dma 48x70x49 16x128x256 - - 16 1x3s2,1 0 1 - | 18x2x56 20x4x16 7 0 2,10,10,26,46
u65-256 Dma 2x5x224 129x8x56 - - 32 9x5s1,3 0 1 - | -
u65-256 Dma 33x25x64 128x140x7 - - 8 10x2s2,1d2,1 0 1 N | 6x10x64 4x14x8 6 0 2,10,10,14,46
u65-256 EW 2:129x2x300 2:224x224x300 2:1x1x300 - 16 16x2s3,3 2 1 T | 4x2x112 6x6x112 7 0 2,46,18,46,46
u65-256 EW 17x70x200 15x300x200 1x300x200 - 32 8x7s3,2d1,3 0 1 N | 6x6x16 10x12x16 6 0 2,46,18,46,46
u65-256 EW 3x1x49 7x129x49 3x129x49 - 8 5x10s3,1d1,3 0 1 - | 4x2x56 12x8x56 6 0 2,46,18,46,46
u65-256 Pool 2:2x9x9 2:17x31x9 - - 16 5x3s2,1 0 0 - | 2x10x16 4x24x16 6 0 2,10,10,30,46
u65-256 Pool 24x128x129 224x128x129 - S 32 2x3s3,1d2,2 0 1 - | 6x2x16 10x6x16 6 0 2,18,18,30,46
u65-256 Pool 96x31x49 1024x128x49 - - 8 16x1s3,1d2,1 0 1 N | 14x18x16 8x30x16 6 0 2,10,10,14,46
u65-256 RS 1x7x9 48x7x2 - - 16 3x5s2,1d1,2 2 1 - | 2x8x16 10x18x4 7 0 2,10,10,26,46
u65-256 RS 2:256x128x17 2:7x1024x15 - - 32 3x1s2,1d2,1 0 0 - | 2x30x24 2x64x16 6 0 2,18,18,30,46
u65-256 RS 2:25x7x112 2:3x17x4 - S 8 16x5s3,2 2 1 N | 6x6x112 8x12x8 6 0 2,10,10,14,46
u65-256 VP 200x127x56 300x96x64 - - 16 1x1 0 1 - | 4x4x56 4x4x16 7 0 2,10,10,26,46
u65-256 VP 200x127x3 96x17x600 - - 32 1x1 0 1 T | 4x4x8 2x2x32 6 0 2,18,18,30,46
u65-256 VP 17x1024x1024 1x12x200 - - 8 1x1 0 1 T | 4x4x128 2x2x32 6 0 2,10,10,30,46
u65-512 DW 224x4x56 3x256x56 - - 16 10x9d1,2 0 0 - | 24x4x16 32x12x16 6 1 2,26,26,30,46
u65-512 DW 65x128x127 15x127x127 - - 32 1x1s2,2 0 1 - | 2x16x16 4x32x16 6 0 2,18,18,30,46
u65-512 DW 512x200x49 16x33x49 - - 8 16x3s3,1 0 1 T | 18x14x16 10x24x16 6 1 2,10,10,14,46
u65-512 MxN 31x1024x256 9x64x32 - - 16 10x2s2,1d1,3 0 1 T | 8x16x16 6x20x16 7 0 2,10,10,26,46
u65-512 MxN 256x33x17 65x56x64 - - 32 7x3s1,3d2,1 0 0 - | 2x2x24 6x10x32 6 0 2,18,18,30,46
u65-512 MxN 40x112x2 4x15x8 - - 8 1x16s1,2 0 1 - | 32x8x8 70x8x8 6 1 2,18,18,30,46
u65-512 Dma 300x7x12 7x128x32 - - 16 1x2s1,3 0 1 - | 4x4x16 12x4x16 7 0 2,10,10,26,46
u65-512 Dma 1x8x31 12x128x5 - - 32 3x9s3,1 0 1 - | 2x4x32 10x12x8 6 0 2,18,18,30,46
u65-512 Dma 224x512x128 31x96x512 - - 8 8x3d1,2 2 0 N | 2x16x128 4x12x32 6 0 2,10,10,14,46
u65-512 EW 7x8x31 17x140x31 - - 16 8x3d1,3 0 1 T | 8x8x32 8x8x32 7 0 2,46,10,46,46
u65-512 EW 2:512x5x2 2:17x65x2 2:48x65x2 - 32 1x5s3,2 0 0 N | 22x6x8 24x10x8 6 0 2,46,18,46,46
u65-512 EW 2:1x200x5 2:129x128x5 2:1x1x1 - 8 1x10s3,2d3,1 2 1 - | 2x34x8 10x100x8 6 0 2,46,18,46,46
u65-512 Pool 2:1x7x12 2:63x65x12 - - 16 1x7 0 0 - | 2x4x16 8x4x16 6 0 2,10,10,30,46
u65-512 Pool 12x3x9 65x140x9 - - 32 2x16d2,1 2 1 N | 12x4x16 10x4x16 6 0 2,18,18,30,46
u65-512 Pool 48x1x31 64x31x31 - - 8 16x16s1,2d2,1 2 0 - | 32x2x16 70x10x16 6 0 2,26,26,30,46
u65-512 RS 129x127x127 65x16x33 - - 16 2x16s2,1d3,3 0 1 N | 8x2x128 8x4x16 7 0 2,10,10,26,46
u65-512 RS 2:33x1024x1024 2:49x2x1 - - 32 2x5s1,3d3,1 2 0 N | 4x4x128 8x4x8 6 0 2,18,18,30,46
u65-512 RS 300x129x17 32x224x5 - - 8 1x16s3,3 0 1 T | 30x2x24 48x2x8 6 0 2,10,10,30,46
u65-512 VP 4x63x31 4x224x112 - - 16 1x1 0 1 - | 2x26x32 2x26x16 7 0 2,10,10,26,46
u65-512 VP 32x3x5 112x140x96 - - 32 1x1 2 1 N | 30x2x8 16x2x32 6 0 2,18,18,30,46
u65-512 VP 40x512x17 128x2x128 - - 8 1x1 2 0 N | 10x14x24 6x8x32 6 0 2,10,10,14,46
u55-128 MxN 15x12x48 128x4x129 - - 16 10x7d2,1 0 1 N | 6x12x16 7x10x16 7 1 2,10,10,10,22
u55-128 Dma 512x56x64 1x56x25 - S 16 7x8s3,1d1,2 0 1 N | 9x2x64 9x6x16 7 0 2,6,6,10,22
u55-128 EW 2:15x9x1 2:56x127x1 1x1x1 S 8 2x10 2 1 N | 4x10x8 6x6x8 6 0 2,22,6,22,22
u55-128 Pool 32x49x33 200x7x33 - S 8 8x10s3,1d3,1 0 0 N | 10x6x16 9x12x16 6 0 2,6,6,14,22
u55-128 RS 2:40x17x31 2:33x5x127 - - 32 1x1s1,2 2 1 N | 1x18x32 1x10x32 6 0 2,10,10,14,22
u55-128 VP 96x224x25 9x5x96 - - 32 1x1 0 1 N | 3x10x32 2x6x32 6 0 2,10,10,14,22
u55-128 DW 17x31x33 48x200x33 - - 8 5x8s2,3d2,3 0 1 T | 5x12x16 10x16x16 6 1 2,10,10,14,22
u55-128 MxN 63x65x24 4x512x7 - - 16 3x3s3,1 2 1 T | 18x4x16 10x6x8 7 1 2,6,6,10,22
u55-128 Dma 1024x12x64 96x8x9 - S 16 3x3d3,1 0 1 T | 2x6x64 2x6x12 7 0 2,6,6,10,22
u55-128 EW 128x4x48 32x1x48 32x1x1 - 8 1x5s1,2d3,1 2 1 T | 32x4x48 34x2x48 6 0 2,22,10,22,22
u55-128 Pool 2:1024x256x7 2:56x56x7 - - 8 5x10s3,1d1,2 0 1 T | 31x6x8 19x10x8 6 0 2,6,6,6,22
u55-128 RS 2:1x200x31 2:256x7x1 - - 16 9x16s3,3d2,3 2 1 T | 1x38x32 4x60x4 7 0 2,6,6,10,22
u55-128 VP 31x4x31 512x49x512 - - 8 1x1 2 1 T | 4x4x32 2x2x32 6 0 2,6,6,14,22
u55-256 DW 127x33x224 33x7x224 - - 8 5x2s3,1d2,1 0 1 N | 14x18x16 8x30x16 6 0 2,10,10,14,46
u55-256 MxN 2:25x96x5 2:9x4x12 - - 8 2x1d2,3 0 1 N | 14x36x8 8x20x16 6 0 2,10,10,14,46
u55-256 Dma 1x3x56 48x140x1024 - - 32 9x10s2,3 0 1 N | 2x4x56 6x8x32 6 0 2,18,18,30,46
u55-256 EW 256x16x31 224x15x31 - S 8 2x8d2,1 0 0 N | 32x16x32 20x10x32 6 0 2,46,18,46,46
u55-256 Pool 112x56x127 128x15x127 - - 32 1x9 0 0 N | 20x6x16 14x4x16 6 0 2,18,18,30,46
u55-256 RS 2:17x300x49 2:48x200x224 - - 16 10x9s3,1d2,3 0 1 N | 16x2x56 12x6x16 7 0 2,10,10,26,46
u55-256 VP 4x65x129 31x256x49 - - 16 1x1 0 1 N | 2x10x80 2x6x16 7 0 2,10,10,26,46
u55-256 DW 96x4x12 129x32x12 - - 32 1x3s2,1d3,1 0 1 T | 30x4x16 16x4x16 6 0 2,18,18,30,46
u55-256 MxN 512x256x4 127x112x24 - - 8 3x10s1,2d2,1 0 1 T | 14x24x8 18x14x16 6 1 2,10,10,14,46
u55-256 Dma 64x16x17 65x1024x65 - - 8 2x16s3,1 2 1 T | 32x4x24 20x6x32 6 0 2,10,10,14,46
u55-256 EW 2:25x300x56 2:8x49x56 - - 32 10x9d1,2 0 1 T | 8x24x16 8x16x16 6 0 2,46,18,46,46
u55-256 Pool 24x300x1024 96x129x1024 - - 8 9x1d3,1 0 1 T | 4x64x16 2x36x16 6 0 2,10,10,14,46
u55-256 RS 2:2x65x128 2:1x140x600 - - 32 16x5s3,1d2,1 2 1 T | 2x6x128 4x12x32 6 0 2,18,18,30,46
u55-256 VP 1x112x64 63x49x32 - S 8 1x1 0 1 T | 2x4x64 2x2x32 6 0 2,10,10,30,46
u55-32 DW 8x96x129 64x1x129 - - 8 16x2d2,3 2 1 N | 4x16x16 4x12x16 6 1 2,4,4,6,14
u55-32 MxN 2:512x25x7 2:8x17x32 - - 8 1x1s3,1d2,1 2 1 N | 31x1x8 16x1x32 6 0 2,4,4,10,14
u55-32 Dma 2:64x17x64 2:33x64x5 - - 8 2x1 0 1 N | 3x8x64 2x5x8 6 0 2,4,4,4,16
u55-32 EW 224x25x32 200x300x32 1x300x1 - 16 2x3s3,3d3,3 0 1 N | 5x5x16 10x9x16 7 0 2,16,8,16,16
u55-32 Pool 2:49x512x5 2:300x127x5 - - 16 7x9s2,1d2,1 0 1 N | 16x8x8 12x12x8 6 0 2,8,8,8,16
u55-32 RS 5x15x112 1x31x32 - - 32 16x2s3,1d3,3 0 1 N | 2x2x112 3x6x32 6 0 2,10,10,12,16
u55-32 VP 2:17x65x3 2:127x140x128 - - 16 1x1 2 1 N | 9x11x4 5x6x16 7 0 2,4,4,6,14
u55-32 DW 33x16x2 112x140x2 - - 8 9x3s2,3d1,2 2 1 T | 8x16x4 13x19x4 6 1 2,6,6,6,14
u55-32 MxN 112x25x96 8x56x63 - - 8 9x7d1,2 0 1 T | 7x9x16 7x8x32 6 0 2,6,6,8,16
u55-32 Dma 64x127x5 24x2x1 - - 8 9x2s2,1 2 0 T | 7x18x8 4x21x8 6 0 2,4,4,6,14
u55-32 EW 2:7x127x1 2:512x48x1 2:512x1x1 - 8 3x10s1,3 0 0 T | 7x56x4 13x29x4 6 0 2,16,8,16,16
u55-32 Pool 63x7x224 7x31x224 - - 32 9x7s3,2 0 1 T | 5x3x16 8x7x16 6 0 2,10,10,12,16
u55-32 RS 512x63x127 56x129x4 - - 32 10x2s3,2 0 1 T | 1x7x128 1x13x8 6 0 2,6,6,8,16
u55-32 VP 128x127x16 25x200x96 - - 8 1x1 0 0 T | 6x2x16 3x1x32 6 0 2,4,4,12,16
u55-64 DW 1024x17x24 300x300x24 - S 32 7x3s3,1d1,2 0 1 N | 9x3x16 7x7x16 6 1 2,10,10,12,16
u55-64 MxN 2x256x127 9x16x17 - - 16 3x7s3,3 0 0 N | 2x16x16 6x25x16 6 1 2,12,12,12,16
u55-64 Dma 224x49x25 512x48x1 - - 8 2x3s1,3d2,1 0 1 N | 3x15x32 5x9x8 6 0 2,4,4,4,16
u55-64 EW 127x2x224 5x24x224 1x1x1 - 8 2x3s1,3d1,2 2 1 N | 31x2x32 48x2x32 6 0 2,14,8,14,14
u55-64 Pool 2:4x49x1 2:7x56x1 - - 8 5x5s1,2d1,3 0 0 N | 4x31x8 8x18x8 6 0 2,6,6,8,16
u55-64 RS 2:65x5x31 2:256x7x5 - - 16 2x7s1,3d1,3 0 0 N | 12x4x32 21x3x8 6 0 2,4,4,4,16
u55-64 VP 300x1x56 16x1x112 - - 8 1x1 0 1 N | 27x1x56 14x1x32 6 0 2,4,4,4,16
u55-64 DW 7x8x224 129x17x224 - - 8 10x2s2,2d3,2 0 1 T | 7x8x16 8x11x16 6 0 2,6,6,8,16
u55-64 MxN 200x128x200 16x49x224 - - 8 3x8d3,1 0 1 T | 8x8x16 8x7x32 6 0 2,6,6,8,16
u55-64 Dma 25x56x200 512x96x64 - - 32 7x1s3,2 0 1 T | 1x8x112 1x14x32 6 0 2,6,6,8,16
u55-64 EW 2:33x15x7 2:3x224x7 2:65x1x1 - 8 8x9s1,2d3,1 2 1 T | 31x15x8 34x11x8 6 0 2,14,8,14,14
u55-64 Pool 2:1024x25x16 2:512x512x16 - - 8 1x8d1,3 0 1 T | 31x2x16 19x1x16 6 0 2,4,4,8,16
u55-64 RS 129x512x224 33x12x128 - - 8 3x1d2,1 2 1 T | 2x4x128 1x4x32 6 0 2,4,4,6,14
u55-64 VP 2:17x25x32 2:12x2x3 - - 16 1x1 0 1 T | 4x4x32 2x2x4 7 0 2,4,4,8,16
u65-256 DW 4x65x9 256x128x9 - - 16 1x3s3,1d2,1 2 1 N | 4x24x16 4x36x16 7 0 2,18,18,26,46
u65-256 MxN 1x1x96 12x1024x3 - S 8 5x7s2,1d2,1 0 1 N | 2x2x96 6x6x8 6 1 2,10,10,30,46
u65-256 Dma 2:128x200x300 2:17x33x65 - - 16 9x5s3,1 2 1 N | 6x2x112 6x6x16 7 0 2,10,10,26,46
u65-256 EW 128x70x2 1024x56x2 - - 8 16x10s2,1d1,3 2 1 N | 32x46x8 20x50x8 6 0 2,46,18,46,46
u65-256 Pool 2:65x1024x56 2:5x25x56 - - 16 7x2d3,1 0 1 N | 10x24x16 6x16x16 6 0 2,10,10,14,46
u65-256 VP 2:4x5x128 2:128x63x512 - - 8 1x1 2 1 N | 2x6x128 2x4x32 6 0 2,10,10,30,46
u65-256 DW 1x129x128 1024x12x128 - - 8 10x16s1,3 2 1 T | 2x64x16 6x36x16 6 0 2,10,10,30,46
u65-256 MxN 65x49x25 256x12x129 - - 8 1x3d1,2 0 1 T | 24x10x16 14x6x32 6 0 2,10,10,14,46
u65-256 Dma 32x16x9 24x16x600 - - 8 3x2s1,2 2 1 T | 2x14x16 2x8x32 6 0 2,10,10,30,46
u65-256 EW 32x17x24 49x12x24 1x1x1 S 8 3x16d1,2 2 1 T | 32x18x24 20x10x24 6 0 2,46,18,46,46
u65-256 Pool 256x32x63 1x1x63 - - 32 9x3d1,2 2 1 T | 8x16x16 6x12x16 6 0 2,18,18,30,46
u65-256 RS 2:33x25x200 2:112x64x64 - S 8 8x3s2,1 0 1 T | 6x6x112 4x10x32 6 0 2,10,10,14,46
u65-256 VP 2:65x4x3 2:65x1x25 - - 8 1x1 2 1 T | 4x4x8 2x2x32 6 0 2,10,10,30,46
u65-512 DW 24x17x127 512x4x127 - S 8 3x1s1,2d1,3 0 1 N | 12x16x16 12x10x16 6 0 2,10,10,14,46
u65-512 MxN 2:40x112x8 2:9x15x33 - - 8 3x2s2,2 0 0 N | 16x16x8 18x18x16 6 1 2,18,18,30,46
u65-512 Dma 9x70x48 128x140x56 - - 8 5x1s2,1d1,2 0 1 N | 10x8x48 6x10x32 6 0 2,10,10,14,46
u65-512 EW 56x300x300 65x48x300 65x1x300 - 8 5x1d2,1 0 1 N | 30x56x16 16x32x16 6 0 2,46,18,46,46
u65-512 Pool 512x48x112 128x12x112 - - 8 5x3s2,1 2 1 N | 24x10x16 14x12x16 6 0 2,10,10,14,46
u65-512 RS 33x49x16 8x1x64 - - 8 3x3s2,2 0 1 N | 10x12x16 12x14x32 6 0 2,18,18,30,46
u65-512 MxN 128x128x256 96x63x96 - - 8 8x3d2,1 0 1 T | 8x32x16 6x20x32 6 0 2,10,10,14,46
u65-512 Dma 2:49x128x15 2:129x25x4 - - 8 16x9s1,2 2 0 T | 10x24x16 14x16x8 6 0 2,10,10,14,46
u65-512 EW 2:127x49x127 2:224x63x127 2:1x1x1 - 8 3x9s3,3d3,1 0 1 T | 8x20x16 16x32x16 6 0 2,46,18,46,46
u65-512 Pool 129x24x24 31x127x24 - S 16 5x5 2 1 T | 16x16x16 10x10x16 6 0 2,10,10,14,46
u65-512 RS 2:129x8x31 2:128x5x1024 - - 8 9x7s3,3d2,1 2 0 T | 8x6x32 14x12x32 6 0 2,18,18,30,46
u65-512 VP 2:200x5x63 2:7x49x25 - S 32 1x1 0 1 T | 4x4x64 2x2x32 6 0 2,18,18,30,46
u65-512 DW 256x15x1 31x8x1 - - 16 8x16s1,2d1,2 0 0 T | 16x16x8 20x12x8 6 1 2,10,10,30,46
u55-32 DW 32x4x48 512x9x48 - - 32 9x9 0 0 - | 1x1x16 8x8x16 6 0 2,10,10,12,16
u65-256 DW 16x70x200 33x7x200 - - 8 1x2s3,2d3,2 0 0 T | 16x2x16 18x2x16 6 0 2,10,10,30,46
u55-256 MxN 96x1024x64 65x300x300 - - 16 1x5s1,2d2,1 0 0 N | 8x16x32 10x10x16 6 0 2,10,10,14,46
u65-512 MxN 4x3x129 17x128x64 - - 8 1x8s2,2d2,1 0 0 N | 4x4x128 8x4x32 6 0 2,10,10,30,46
u65-256 Dma 7x1x63 3x5x2 - - 16 9x2s1,2d3,1 0 0 - | 4x2x64 8x10x4 6 0 2,10,10,30,46
u55-64 Dma 24x224x16 17x112x25 - - 32 1x16s3,1 2 0 - | 2x1x16 9x1x32 6 0 2,6,6,10,14
u55-128 Dma 96x128x512 8x512x96 - - 8 1x2s1,2 0 0 - | 4x4x128 8x4x32 6 0 2,6,6,6,22
u55-64 EW 1x48x48 1x64x48 1x1x1 - 16 7x8s3,3d1,2 2 0 - | 1x2x16 8x10x16 6 0 2,14,8,14,14
u55-256 EW 300x32x3 24x7x3 1x7x3 - 32 3x1s1,3d3,3 0 0 - | 4x18x8 10x24x8 6 0 2,46,18,46,46
u55-128 EW 200x1024x16 128x4x16 128x4x16 - 8 10x5s3,2 0 0 - | 2x10x16 7x36x16 6 0 2,22,10,22,22
u65-512 Pool 65x32x16 300x96x16 - - 16 16x16 2 0 N | 16x12x16 12x10x16 6 0 2,10,10,14,46
u55-256 Pool 63x128x224 1024x300x224 - - 32 1x5s2,1d2,1 0 0 - | 10x2x16 14x4x16 6 0 2,18,18,30,46
u55-256 Pool 2:17x56x32 2:112x3x32 - - 8 1x3d1,3 0 0 - | 18x2x16 24x2x16 6 0 2,10,10,30,46
u55-32 RS 24x9x15 15x512x63 - S 16 16x9s1,2 0 0 - | 3x6x16 12x13x16 6 0 2,12,12,12,16
u65-256 RS 24x24x8 8x127x64 - - 32 3x16s1,3 2 0 T | 6x6x8 12x4x32 6 0 2,18,18,30,46
u55-128 RS 1024x224x96 31x63x200 - - 8 5x3d2,3 0 0 T | 5x4x96 6x6x32 6 0 2,6,6,6,22
u55-32 VP 2:1x49x5 2:256x8x300 - - 16 1x1 2 0 N | 1x49x8 1x25x16 6 0 2,4,4,10,14
u55-64 VP 3x12x49 300x49x512 - S 32 1x1 0 0 - | 3x4x56 3x4x32 6 0 2,6,6,8,16
u55-64 VP 512x65x127 8x9x129 - S 8 1x1 0 0 - | 3x4x128 3x4x32 6 0 2,4,4,4,16
u55-128 DW 15x65x127 25x24x127 - S 32 16x7 0 1 - | -
u55-128 Dma 128x127x64 256x224x600 - - 32 7x16d1,2 0 0 - | -
u55-128 EW 8x300x31 17x32x31 1x1x31 - 32 9x8d2,1 2 1 - | -
u55-128 Pool 5x65x15 17x16x15 - - 32 10x10s1,3d2,2 0 1 - | -
u55-128 RS 256x1024x224 56x112x65 - S 32 10x10s2,2 0 1 - | -
u55-256 MxN 4x8x512 129x25x96 - - 32 10x16 0 1 - | -
u55-256 Dma 224x63x2 8x8x31 - - 32 7x8s2,1d2,1 0 1 - | -
u55-32 RS 63x300x224 256x300x65 - - 32 10x8s1,3 0 1 - | -
u55-64 MxN 112x48x1 25x2x63 - - 32 7x16s3,1 0 0 - | -
u55-64 Dma 512x49x7 3x129x127 - - 32 16x8s2,3d1,3 2 1 - | -
u55-64 RS 65x224x1024 31x9x32 - - 32 7x9s1,3d3,1 2 0 - | -
u65-256 MxN 2:25x33x56 2:224x129x1024 - - 32 16x10s1,2d3,2 0 1 - | -
u65-256 RS 3x127x112 9x512x112 - - 32 16x9s2,2d3,1 0 1 - | -
u65-512 RS 1024x32x9 256x129x49 - - 32 7x10s2,3d3,1 0 1 - | -
u55-128 MxN 4x16x49 1x128x4 - S 16 10x1d1,3 2 1 - | 4x16x16 4x24x4 7 1 2,6,6,10,22
u55-128 Dma 96x129x128 24x112x12 - - 8 1x10d2,1 0 1 N | 8x2x128 8x2x16 6 0 2,6,6,6,22
u55-128 RS 200x1x33 96x63x512 - - 32 7x2d3,1 2 0 N | 8x2x40 5x6x32 6 0 2,10,10,14,22
u55-256 DW 96x9x64 64x300x64 - S 8 9x8d1,3 0 0 T | 24x10x16 16x10x16 6 0 2,10,10,14,46
u55-256 MxN 64x3x128 300x65x65 - S 8 9x2s1,2d3,2 0 1 - | 16x4x32 34x12x16 6 1 2,18,18,30,46
u55-256 Dma 96x65x63 129x127x2 - - 8 16x16s3,1d2,1 2 0 N | 16x4x64 12x10x8 6 0 2,10,10,14,46
u55-256 Pool 96x112x49 127x9x49 - S 32 16x3s1,2d1,3 2 1 - | 2x4x16 10x12x16 6 0 2,18,18,30,46
u55-256 RS 2:12x33x224 2:224x33x1024 - - 8 5x3s1,3d2,1 2 1 - | 2x12x112 6x20x32 6 0 2,10,10,14,46
u55-32 DW 2:24x300x1 2:200x56x1 - - 8 2x10d1,3 0 1 N | 24x8x4 16x5x4 6 1 2,4,4,4,16
u55-32 MxN 25x24x300 3x256x3 - - 16 2x2s3,1d1,2 0 1 - | 25x1x48 27x2x4 7 1 2,4,4,4,16
u55-32 Dma 49x12x256 224x32x2 - - 32 7x1s3,1d3,3 2 0 - | 1x8x128 1x29x8 6 0 2,6,6,6,14
u55-32 EW 7x33x65 1x2x65 - - 8 3x2s2,3d2,1 2 0 - | 1x22x32 2x47x32 6 0 2,14,8,14,14
u55-32 Pool 224x127x16 31x127x16 - - 8 1x10d1,2 2 1 - | 32x1x16 39x1x16 6 0 2,4,4,10,14
u55-64 DW 1x96x64 24x9x64 - - 32 8x3s1,3d1,3 2 1 - | 1x2x16 7x9x16 6 0 2,10,10,10,14
u55-64 MxN 2:129x5x1 2:90x5x112 - - 8 2x1s3,1d1,3 2 1 - | 26x1x8 26x2x32 6 0 2,6,6,10,14
u55-64 Dma 2:49x48x65 2:25x2x96 - - 8 5x7s2,1d2,3 0 1 N | 7x2x72 8x6x32 6 0 2,6,6,8,16
u55-64 EW 512x256x127 48x5x127 1x1x1 S 8 7x10s2,1d2,2 2 1 T | 21x24x16 14x27x16 6 0 2,14,14,14,14
u55-64 RS 2:25x16x127 2:90x1024x1024 - - 8 16x10s1,3d2,1 2 1 - | 1x4x128 8x11x32 6 0 2,8,8,10,14
u65-256 DW 2:24x127x12 2:224x3x12 - - 8 3x3s3,2d3,2 0 1 N | 12x10x16 14x18x16 6 1 2,10,10,30,46
u65-256 MxN 5x64x512 33x16x224 - - 16 3x10s1,2d1,3 0 1 - | 6x18x16 18x20x16 7 0 2,26,26,26,46
u65-256 Dma 2:127x7x4 2:17x31x96 - S 8 3x1s2,1d1,2 2 0 T | 20x8x8 10x10x32 6 0 2,10,10,30,46
u65-256 EW 2:5x112x2 2:56x48x2 2:56x48x1 - 16 3x7s2,2d3,1 0 1 N | 6x46x8 10x50x8 7 0 2,46,18,46,46
u65-256 Pool 56x16x9 49x300x9 - - 32 10x1d3,2 0 1 N | 10x12x16 6x10x16 6 0 2,18,18,30,46
u65-512 DW 2:5x2x129 2:9x96x129 - - 32 2x5s1,2d1,2 2 1 - | 6x2x16 18x4x16 6 1 2,18,18,30,46
u65-512 MxN 25x112x256 112x65x3 - - 16 10x10s3,1d1,3 0 1 N | 16x8x16 12x16x4 7 1 2,10,10,26,46
u65-512 Dma 2:127x25x25 2:112x31x9 - - 8 3x10s2,1d2,1 0 1 N | 20x6x32 14x8x16 6 0 2,10,10,14,46
u65-512 EW 2:24x24x128 2:1024x200x128 2:1024x1x128 - 8 9x1d2,1 2 1 - | 16x24x16 16x32x16 6 0 2,46,18,46,46
u65-512 Pool 64x31x128 7x32x128 - - 16 1x10s3,1d3,1 2 1 T | 32x2x16 20x2x16 6 0 2,10,10,30,46
u65-512 RS 24x31x112 17x12x3 - S 8 16x3d3,1 0 1 N | 6x6x112 6x8x8 6 0 2,10,10,14,46
"""

BLOCK_ABBREV = {"MxN": NpuBlockType.ConvolutionMxN, "DW": NpuBlockType.ConvolutionDepthWise,
                "VP": NpuBlockType.VectorProduct, "Pool": NpuBlockType.Pooling, "EW": NpuBlockType.ElementWise,
                "RS": NpuBlockType.ReduceSum, "Dma": NpuBlockType.Dma}
RESAMPLING = {"-": ResamplingMode.NONE, "N": ResamplingMode.NEAREST, "T": ResamplingMode.TRANSPOSE}


def _case_shape(text: str) -> Shape4D | None:
    if text == "-":
        return None
    batch = 1
    if ":" in text:
        head, text = text.split(":")
        batch = int(head)
    return Shape4D(batch, *(int(v) for v in text.split("x")))


def _case_kernel(text: str) -> Kernel:
    match = re.fullmatch(r"(\d+)x(\d+)(?:s(\d+),(\d+))?(?:d(\d+),(\d+))?", text)
    assert match, text
    w, h, sx, sy, dx, dy = (int(v) if v else 1 for v in match.groups())
    return Kernel(w, h, sx, sy, dx, dy)


def _vela_cases() -> list[tuple[str, str]]:
    return [tuple(part.strip() for part in line.split("|")) for line in VELA_CASES.strip().splitlines()]


def test_vela_reference_cases() -> None:
    cases = _vela_cases()
    assert len(cases) > 350
    failures = []
    for left, right in cases:
        acc, kind, ofm, ifm, ifm2, scalar, bits, kernel, lut, scaled, mode = left.split()
        arch = load_architecture("ethos-" + acc)
        got = find_block_config(arch, BLOCK_ABBREV[kind], _case_shape(ofm), _case_shape(ifm), _case_shape(ifm2),
                                scalar == "S", int(bits), _case_kernel(kernel), int(lut), scaled == "1",
                                RESAMPLING[mode])
        if right == "-":
            expected = None
        else:
            ofm_block, ifm_block, acc_type, part, layout = right.split()
            expected = (_case_shape(ofm_block), _case_shape(ifm_block), int(acc_type), part == "1",
                        tuple(int(v) for v in layout.split(",")))
        ours = None if got is None else (got.ofm_block, got.ifm_block, int(got.acc_type), got.is_partkernel,
                                         (got.layout.ib_start, got.layout.ib_end, got.layout.ib_start2,
                                          got.layout.ab_start, got.layout.lut_start))
        if ours != expected:
            failures.append(f"{left} | vela {right} | ours {ours}")
    assert not failures, f"{len(failures)}/{len(cases)} differ:\n" + "\n".join(failures[:10])


# Vela's get_ifm_area_required: OFM WxH, kernel, resampling | IFM WxH needed.
VELA_AREA_CASES = """
56x7 16x7d2,1 N | 44x7
48x200 16x3s3,1d3,1 N | 94x102
127x112 1x5s3,1 - | 379x116
15x112 1x8d3,2 - | 15x126
127x300 3x7s2,2d2,1 T | 129x303
129x1 10x5s3,1 T | 197x3
1x8 5x3 - | 5x10
1024x128 9x3s3,1 - | 3078x130
15x49 16x10s2,3 N | 23x78
17x128 10x3s3,1d3,3 - | 76x134
64x60 7x3 T | 35x31
127x2 2x2 - | 128x3
48x2 1x10 N | 25x6
48x1024 3x3s3,1d1,2 - | 144x1028
24x32 1x1 - | 24x32
49x96 9x3s2,1 - | 105x98
1x4 1x1 - | 1x4
9x48 1x9s2,1d3,1 - | 17x56
60x128 16x9d1,2 T | 38x72
25x5 2x3s3,1d2,3 - | 75x11
4x3 16x16d1,2 N | 10x17
24x128 3x3s2,2d1,2 - | 49x259
96x31 7x9d3,1 - | 114x39
129x512 3x1s3,3 N | 194x768
127x256 3x2s2,1d3,1 - | 259x257
8x1 1x1s1,2 - | 8x1
15x49 8x1s3,3d1,3 T | 25x73
4x16 10x7s3,2d3,3 N | 19x25
64x4 3x2s3,2d2,1 T | 97x4
1x31 3x5s1,3d3,2 T | 4x50
256x63 2x1s1,3d1,2 T | 129x94
32x96 5x7s2,1d2,1 N | 36x52
129x17 9x1 - | 137x17
4x128 1x1 - | 4x128
7x49 1x9s2,1 N | 7x29
56x56 1x1 T | 28x28
12x1 7x1d1,3 - | 18x1
128x300 10x1s1,2 N | 69x300
9x49 3x3d1,3 - | 11x55
48x9 1x1 N | 25x5
32x7 1x1 N | 17x4
33x32 1x7d3,2 - | 33x44
15x17 1x16s3,2d3,2 N | 22x32
9x9 1x1 T | 5x5
31x56 1x5s2,1 - | 61x60
112x33 5x16 N | 59x25
33x128 9x7s2,1d1,3 N | 37x74
12x9 2x7s1,2d1,3 N | 7x18
7x60 5x3d2,2 - | 15x64
96x127 10x3s1,2 - | 105x255
96x24 1x1 T | 48x12
200x60 1x1 N | 101x31
65x512 5x3d1,2 T | 35x258
48x60 1x1 T | 24x30
17x16 2x1s3,2 T | 25x16
128x49 3x3s3,2d1,2 T | 192x51
129x224 16x10s3,2 T | 200x228
24x129 7x10s2,2 T | 27x133
3x49 1x16s1,2 N | 2x57
32x25 1x1 N | 17x13
1024x2 1x1 T | 512x1
112x56 5x9s2,2 T | 114x60
256x31 10x9s1,3 N | 133x50
31x17 2x3s2,1 T | 31x10
64x65 3x1d2,1 T | 34x33
17x1024 3x2d2,1 T | 11x513
49x48 9x8d2,2 N | 33x32
48x96 2x7d1,2 N | 25x55
33x24 3x1d2,2 T | 19x12
64x63 8x1d2,3 T | 39x32
3x56 3x3d3,1 N | 5x30
112x25 1x10d1,2 N | 57x22
"""


def test_ifm_area_required() -> None:
    lines = VELA_AREA_CASES.strip().splitlines()
    assert len(lines) > 50
    for line in lines:
        left, right = (part.strip() for part in line.split("|"))
        ofm, kernel, mode = left.split()
        width, height = (int(v) for v in ofm.split("x"))
        expected = tuple(int(v) for v in right.split("x"))
        got = get_ifm_area_required(Shape4D(1, height, width, 1), _case_kernel(kernel), RESAMPLING[mode])
        assert got == expected, line


def test_npu_op_convenience_and_old_style() -> None:
    """find_block_config_for_op reads bits, LUT use and block type off the op (first kws_dscnn conv)."""
    arch = load_architecture("ethos-u55-128")

    def access(name: str, shape: Shape4D, dtype: DataType = DataType.int8) -> OperandAccess:
        return OperandAccess(FeatureMap(name, shape, dtype), shape)

    op = NpuOp(index=0, name="conv", tflite_op="CONV_2D", op_type="Conv2DBias",
               npu_block_type=NpuBlockType.ConvolutionMxN, ifm=access("in", Shape4D(1, 49, 5, 2)),
               ofm=access("out", Shape4D(1, 25, 5, 64)), kernel=Kernel(3, 10, 1, 2))
    config = find_block_config_for_op(arch, op)
    assert isinstance(config, BlockConfig)
    assert config.old_style() == [13, 6, 8, 16] and str(config) == "[13, 6, 8, 16]"  # golden u55-128 kws_dscnn #0
    assert config.ofm_block == Shape4D(1, 13, 6, 16) and config.is_partkernel
    # A 16-bit IFM switches to 40-bit accumulators and 16-bit IFM granules.
    wide = NpuOp(index=1, name="conv16", tflite_op="CONV_2D", op_type="Conv2DBias",
                 npu_block_type=NpuBlockType.ConvolutionMxN,
                 ifm=access("in16", Shape4D(1, 49, 5, 2), DataType.int16), ofm=access("o", Shape4D(1, 25, 5, 64)),
                 kernel=Kernel(3, 10, 1, 2))
    assert find_block_config_for_op(arch, wide) == find_block_config(
        arch, NpuBlockType.ConvolutionMxN, Shape4D(1, 25, 5, 64), Shape4D(1, 49, 5, 2), None, False, 16,
        Kernel(3, 10, 1, 2))
    assert find_block_config_for_op(arch, wide).acc_type.bits == 40
