"""A TRANSPOSE between NCHW and NHWC as the two transpose passes Vela's default core runs on the NPU.

PyTorch exports (through ONNX) put a TRANSPOSE of the NCHW input to NHWC at the start of a network, and back at
the end. Vela's legacy core runs only the permutations that swap H and W (or W and C with a unit dimension) and
leaves these to the CPU; the default core runs them as two passes that each swap two neighbouring axes (its debug
database calls them NWHC and NHCW transposes). Only the default core's graph (``--solver vela-default``) has them:
npusched prices them as that core does (``npusched.target.performance_default``), and Vela legacy's backend,
which cannot make them, never compiles them.
"""

from __future__ import annotations

import numpy as np

from npusched.ir import FeatureMap, NpuOp, Shape4D
from npusched.lowering.common import pool_op
from npusched.lowering.context import LoweringContext

TFLITE_OP = "TRANSPOSE"
# permutation -> the neighbouring axes each pass swaps, in order
_SWAPS = {(0, 2, 3, 1): ((1, 2), (2, 3)),  # NCHW -> NHWC
          (0, 3, 1, 2): ((2, 3), (1, 2))}  # NHWC -> NCHW


def lower_transpose(op, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]:
    """The default core's passes for a TRANSPOSE between NCHW and NHWC; none (Vela legacy's own handling, or the
    CPU) for any other permutation or graph."""
    perm = tuple(int(p) for p in np.asarray(ctx.tensor(op.inputs[1]).data).reshape(-1))
    shape = list(ctx.tensor(op.inputs[0]).shape)
    if not ctx.default_core or perm not in _SWAPS or len(shape) != 4 or shape[0] != 1:
        return []
    name = ctx.tensor(op.outputs[0]).name
    passes: list[NpuOp] = []
    src = ifm
    for step, (a, b) in enumerate(_SWAPS[perm]):
        shape[a], shape[b] = shape[b], shape[a]
        last = step == len(_SWAPS[perm]) - 1
        dst = ofm if last else ctx.new_feature_map(f"{name}_transpose{step}", shape, ifm.dtype, ifm.quantization)
        passes.append(pool_op("Transpose", name if last else f"{name}_transpose{step}", src, dst,
                              tflite_op=TFLITE_OP, ifm_shape=src.shape, ofm_shape=Shape4D.from_list(shape),
                              attrs=(("swapped_axes", (a, b)),)))
        src = dst
    return passes
