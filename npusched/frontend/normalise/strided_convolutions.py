"""A convolution whose kernel is its stride (a ViT's 8x8 stride-8 patch embedding, ConvNeXt's 4x4 stride-4 stem)
written as the 1x1 convolution of the patches laid out in depth.

The NPU strides a convolution by at most 3 rows; Vela legacy folds a wider column stride into the width, but
leaves a taller row stride to the CPU unless the output is one row high, and the ViT's and ConvNeXt's first layer
have 8 and 4. Vela's default core unrolls such a convolution into one convolution per output pixel, each reading
its own kernel-sized window (regor ``GraphIrOptimiser::UnrollKernelStrides``: 64 for an 8x8 grid, 256 for a
16x16 one). Where the kernel equals the stride and tiles the map exactly (no padding), every output pixel reads a
patch of its own, so the patches can be laid out in depth instead, by moves of bytes Vela legacy runs:
[1, H, W, C] read as [1, H, W / s, s C] (RESHAPE: the s pixels of a patch row side by side), that map's H and W
swapped (TRANSPOSE [0, 2, 1, 3]), read as [1, W / s, H / s, s s C] (RESHAPE: the s rows of a patch side by side).
A 1x1 convolution of that map with the kernel read as [O, 1, 1, s s C] (its OHWI bytes as they are: the depth
index (ky s + kx) C + c is the kernel's own order) multiplies and sums exactly the products of the original, with
the same bias and per-channel scales, so the int32 sums and every output are as before; a last H <-> W swap gives
the output its layout. Not priced: it changes what runs on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    const_int32,
    constant,
    convolution,
    copied_operator,
    derived_constant,
    ints,
    name,
    new_operator,
    opcode,
    replace_operators,
    reshape_op,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted

# The row stride the NPU runs; a taller one is what this rewrite is for.
MAX_NPU_STRIDE = 3
MAX_DIMENSION = 65536


@dataclass(frozen=True)
class PatchPlan:
    """The convolution at ``position``: stride ``stride`` (rows, columns) equal to its kernel, over ``shape``."""

    site: Site
    position: int
    stride: tuple[int, int]
    shape: tuple[int, int, int, int]
    operators: int = 1


def find_strided_convolutions(model: ModelT, subgraph: SubGraphT) -> list[PatchPlan]:
    """Every CONV_2D striding more than 3 rows whose kernel is its stride and tiles its static input exactly."""
    plans = []
    for position, op in enumerate(subgraph.operators or []):
        conv = convolution(model, subgraph, op) if opcode(model, op) == "CONV_2D" else None
        if conv is None:
            continue
        o = conv.options
        _, height, width, depth = conv.ifm_shape
        kernel = conv.weights.shape[1:3]
        stride = (int(o.strideH), int(o.strideW))
        if stride[0] <= MAX_NPU_STRIDE or tuple(kernel) != stride or (o.dilationHFactor, o.dilationWFactor) != (1, 1) \
                or conv.ifm_shape[0] != 1 or height % stride[0] or width % stride[1] \
                or conv.weights.shape[3] != depth \
                or conv.ofm_shape != (1, height // stride[0], width // stride[1], conv.weights.shape[0]) \
                or stride[0] * stride[1] * depth > MAX_DIMENSION:
            continue
        plans.append(PatchPlan(Site("strided_convolution", name(subgraph.tensors[conv.output])), position, stride,
                               (1, height, width, depth)))
    return plans


def rewrite_strided_convolutions(model: ModelT, subgraph: SubGraphT, plans: Sequence[PatchPlan]) -> None:
    replace_operators(subgraph, {plan.position: _patches(model, subgraph, plan) for plan in plans})


def _patches(model: ModelT, subgraph: SubGraphT, plan: PatchPlan) -> list[OperatorT]:
    """RESHAPE -> TRANSPOSE -> RESHAPE -> 1x1 CONV_2D -> TRANSPOSE, as the module docstring says."""
    op = subgraph.operators[plan.position]
    tensors = subgraph.tensors
    inputs, output = ints(op.inputs), ints(op.outputs)[0]
    source = inputs[0]
    _, height, width, depth = plan.shape
    rows, columns = plan.stride
    across = width // columns
    row_patches = (1, height, across, columns * depth)
    swapped = (1, across, height, columns * depth)
    patches = (1, across, height // rows, rows * columns * depth)
    out_shape = tuple(int(v) for v in tensors[output].shape)
    transposed_out = (1, out_shape[2], out_shape[1], out_shape[3])
    row_map = add_tensor(subgraph, tensors[source], "/patch_rows", row_patches)
    swapped_map = add_tensor(subgraph, tensors[source], "/patch_rows/t", swapped)
    patch_map = add_tensor(subgraph, tensors[source], "/patches", patches)
    result = add_tensor(subgraph, tensors[output], "/t", transposed_out)
    weights = derived_constant(model, subgraph, inputs[1], _flat_kernel(model, subgraph, inputs[1]), "/1x1")
    label = name(tensors[output])
    return [reshape_op(model, subgraph, source, row_map, row_patches),
            _swap_hw(model, subgraph, row_map, swapped_map, f"{label}/patch_rows/perm"),
            reshape_op(model, subgraph, swapped_map, patch_map, patches),
            copied_operator(op, [patch_map, weights, *inputs[2:]], [result], strideH=1, strideW=1,
                            padding=schema.Padding.VALID),
            _swap_hw(model, subgraph, result, output, f"{label}/perm")]


def _flat_kernel(model: ModelT, subgraph: SubGraphT, index: int) -> np.ndarray:
    """The OHWI kernel read as [O, 1, 1, H W I] (its bytes in order)."""
    kernel = constant(model, subgraph.tensors[index])
    assert kernel is not None  # checked when found
    return kernel.reshape(kernel.shape[0], 1, 1, -1)


def _swap_hw(model: ModelT, subgraph: SubGraphT, source: int, target: int, label: str) -> OperatorT:
    perm = const_int32(model, subgraph, label, [0, 2, 1, 3], (4,))
    return new_operator(model, schema.BuiltinOperator.TRANSPOSE, [source, perm], [target],
                        schema.BuiltinOptions.TransposeOptions, schema.TransposeOptionsT())


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'convolution')} striding over 3 rows written as 1x1 convolutions of its patches"


STRIDED_CONVOLUTIONS = Rewrite("strided_convolution", priced=False, find=find_strided_convolutions,
                               apply=rewrite_strided_convolutions, describe=_describe)
