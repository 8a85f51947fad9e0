"""Passes that price alike: an unrolled RNN repeats one time step's passes tens of times, each with its own names
and tensors (and quantisation, which no pricing reads) but the same shapes, formats, weights and settings. The CP-SAT
candidate space prices a pass's options and choices once per kind (``pass_kind``) rather than once per pass."""

from __future__ import annotations

from collections.abc import Hashable

from npusched.ir import ConstTensor, FeatureMap, NpuOp, OperandAccess
from npusched.lowering.graph import WEIGHT_TWINS
from npusched.target.weights import weights_digest

# Attributes that name other passes rather than say how this one runs: which earlier passes share its weights (what
# Vela's estimate makes of that is priced from the schedule: ``pricing._legacy_scale_element_bytes``).
_NAMING_ATTRIBUTES = frozenset({WEIGHT_TWINS})


def pass_kind(op: NpuOp) -> Hashable:
    """What pricing ``op`` reads, names and indices left out: two passes of one kind price alike under any choice
    with their operands placed alike."""
    return (op.tflite_op, op.op_type, op.npu_block_type, _access(op.ifm), _access(op.ofm),
            _access(op.ifm2) if op.ifm2 is not None else None, op.kernel, op.activation, _constant(op.activation_lut),
            op.resampling_mode, _constant(op.weights), _constant(op.bias), op.reversed_operands, op.uses_scalar,
            op.has_scaling, op.rounding_mode, tuple((k, v) for k, v in op.attrs if k not in _NAMING_ATTRIBUTES))


def _access(access: OperandAccess) -> tuple:
    return (_feature_map(access.tensor), access.shape, access.offset, access.access_shape)


def _feature_map(fm: FeatureMap) -> tuple:
    # No pricing reads a feature map's quantisation (the encoded scales are a fixed size per channel).
    return (fm.shape, fm.dtype, fm.format, fm.orig_shape, _constant(fm.constant))


def _constant(tensor: ConstTensor | None) -> tuple | None:
    if tensor is None:
        return None
    return (tensor.shape, tensor.dtype, tensor.quantization, weights_digest(tensor))
