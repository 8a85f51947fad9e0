"""Which TFLite operators the NPU runs and which stay on the CPU, following Vela 5.2.0's placement rules.

Vela decides placement in four stages, and the first failing rule wins:

1. semantic checks of the TFLite graph (an op that breaks TFLite's own rules is left to the CPU);
2. a first graph-optimisation pass: constant QUANTIZE ops fold into constants, convolutions with asymmetric int8
   weights go to the CPU, and pooling whose kernel, stride and IFM size are all equal gets stride 1 / VALID;
3. the NPU support checks: the operator must be in Vela's supported set, then generic rules (data types,
   dimensions, batch, fused activation) and per-operator rules (strides, kernel sizes, broadcasts, ...);
4. lowering steps that can still give up (SOFTMAX with an unsupported data-type pair).

On top of Vela's verdict npusched only lowers the operators in ``NPU_OPERATORS``; anything else goes to the CPU
even when Vela would run it on the NPU (the reason says so).

Operand roles follow Vela's internal view of each operator (``_ROLES``), including its quirks, because the
generic rules only look at the IFM, IFM2, weights and OFM: CONCATENATION's "IFM" is its second input, SPLIT's is
its second input, TRANSPOSE's permutation counts as an IFM2, and the weights of convolutions are seen in HWIO
order (fully connected: IO) when they are constant.

Known gap: the LSTM "5 intermediate tensors" rule is only checked when the reader exposes
``TfliteOperator.intermediates``; until then a well-formed LSTM is assumed.
"""

from __future__ import annotations

import numpy as np

from npusched.frontend.npu_rules import (
    _LOWERING_SPECIFIC,
    _SUPPORT_GENERIC,
    _SUPPORT_SPECIFIC,
    _pool_stride_folds,
    batch_is_1,
    folds_to_constant,
    softmax_type_pair,
    supported_dtypes,
    symmetric_weights,
    transpose_permutation_supported,
)
from npusched.frontend.op_view import (
    _BATCH_ANY,
    DTYPE_RULE_EXEMPT,
    NPU_OPERATORS,
    VELA_NPU_OPERATORS,
    Constraint,
    OpView,
)
from npusched.frontend.semantic_rules import (
    _SEMANTIC_EXEMPT,
    _SEMANTIC_GENERIC,
    _SEMANTIC_SPECIFIC,
    in_out_types_match,
)
from npusched.frontend.tflite_reader import TfliteOperator, TfliteSubgraph
from npusched.ir import DataType

# ---------------------------------------------------------------------------------------------------------------

def _rule(constraint: Constraint) -> str:
    return (constraint.__doc__ or constraint.__name__).strip().splitlines()[0]


def _first_failure(v: OpView, constraints: tuple[Constraint, ...], waived: tuple[Constraint, ...] = ()
                   ) -> str | None:
    for constraint in constraints:
        if constraint in waived:
            continue
        detail = constraint(v)
        if detail is not None:
            return f"{_rule(constraint)} ({detail})" if detail else _rule(constraint)
    return None


def _semantic_failure(v: OpView, waived: tuple[Constraint, ...] = ()) -> str | None:
    exempt = _SEMANTIC_EXEMPT.get(v.opcode, ())
    semantic = tuple(c for c in _SEMANTIC_GENERIC if c not in exempt) + _SEMANTIC_SPECIFIC.get(v.opcode, ())
    return _first_failure(v, semantic, waived)


def _default_core_waives(v: OpView) -> tuple[Constraint, ...]:
    """The legacy core's rules the default core does not apply to ``v``: it runs an int8 -> int16 SOFTMAX on the
    NPU too (its semantic check allows that upcast; regor-5.2.0 tflite_model_semantics.cpp), and a TRANSPOSE
    between NCHW and NHWC."""
    if v.opcode == "SOFTMAX" and v.ifm is not None and v.ofm is not None and \
            (v.ifm.dtype, v.ofm.dtype) == (DataType.int8, DataType.int16):
        return in_out_types_match, softmax_type_pair
    if v.opcode == "TRANSPOSE" and _nchw_transpose(v):
        return (transpose_permutation_supported,)
    return ()


def _nchw_transpose(v: OpView) -> bool:
    """A TRANSPOSE of a single 4-D map between NCHW and NHWC (npusched.lowering.transpose)."""
    data, perm_t = v.inputs[0], v.inputs[1]
    perm = tuple(int(p) for p in np.asarray(perm_t.data).reshape(-1)) if perm_t.data is not None else ()
    return len(data.shape) == 4 and data.shape[0] == 1 and perm in ((0, 2, 3, 1), (0, 3, 1, 2))


def _vela_verdict(v: OpView, default_core: bool = False) -> str | None:
    """Why Vela 5.2.0 would place the operator on the CPU, or None if Vela runs it on the NPU (its legacy core's
    rules, or with ``default_core`` those its default core relaxes waived)."""
    waived = _default_core_waives(v) if default_core else ()
    failure = _semantic_failure(v, waived)
    if failure is not None:
        return f"fails the TFLite semantic rule: {failure}"
    failure = _first_failure(v, (symmetric_weights,))
    if failure is not None:
        return failure
    if v.opcode not in VELA_NPU_OPERATORS:
        return f"{v.opcode} is a CPU-only operator (Vela has no NPU implementation)"
    generic = tuple(c for c in _SUPPORT_GENERIC if not (c is batch_is_1 and v.opcode in _BATCH_ANY)
                    and not (c is supported_dtypes and v.opcode in DTYPE_RULE_EXEMPT))
    failure = _first_failure(v, generic + _SUPPORT_SPECIFIC.get(v.opcode, ()), waived)
    if failure is None:
        failure = _first_failure(v, _LOWERING_SPECIFIC.get(v.opcode, ()), waived)
    return f"fails the NPU rule: {failure}" if failure is not None else None


def vela_cpu_reason(op: TfliteOperator, subgraph: TfliteSubgraph, default_core: bool = False) -> str | None:
    """Why Vela 5.2.0 would leave ``op`` on the CPU, or None when Vela runs it on the NPU (or folds it away); its
    legacy core's placement, or with ``default_core`` its default core's where npusched lowers that."""
    view = OpView(op, subgraph)
    if _pool_stride_folds(view):
        view = OpView(op, subgraph, pool_stride_fixed=True)
    try:
        if folds_to_constant(op, subgraph) and _semantic_failure(view) is None:
            return None
        return _vela_verdict(view, default_core)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
        return f"malformed operator ({type(exc).__name__}: {exc})"


def npu_support(op: TfliteOperator, subgraph: TfliteSubgraph, default_core: bool = False) -> str | None:
    """None if npusched runs ``op`` on the NPU (or it folds into a constant), else a one-line reason for the CPU.
    ``default_core``: as in the default core's graph, which ``--solver vela-default`` reads its schedule onto."""
    reason = vela_cpu_reason(op, subgraph, default_core)
    if reason is None and op.opcode not in NPU_OPERATORS:
        reason = f"npusched does not lower {op.opcode} to the NPU"
    if reason is None and op.opcode == "UNPACK" and int(op.options.get("axis", 0)) < 0:
        reason = UNPACK_NEGATIVE_AXIS
    if reason is None and op.opcode == "CONV_2D" and _grouped(OpView(op, subgraph)):
        reason = ("npusched runs a grouped convolution once normalisation has split it into whole groups "
                  "(--no-normalise keeps it whole)")
    return None if reason is None else f"{op.opcode} '{OpView(op, subgraph).name}' runs on the CPU: {reason}"


# Vela legacy counts a negative UNPACK axis from the input's rank plus one (as for PACK), one past the real axis: at -1
# its graph optimiser fails, at -2 and below it would read the wrong elements. Normalisation writes an UNPACK of a
# static map as a SPLIT (``normalise.stacking``), which both run.
UNPACK_NEGATIVE_AXIS = ("Vela legacy mis-reads a negative UNPACK axis (it fails at -1 and reads the wrong elements "
                        "below), so npusched leaves it to the CPU")


def _grouped(v: OpView) -> bool:
    """A convolution whose kernel covers a fraction of the IFM depth (HWIO weights: the input depth is [-2])."""
    weight_shape = v.weight_shape
    return len(weight_shape) == 4 and v.ifm is not None and v.ifm.shape[-1] != weight_shape[-2]


def cpu_operators(subgraph: TfliteSubgraph) -> dict[int, str]:
    """Operator index -> reason, for every operator of ``subgraph`` that stays on the CPU."""
    reasons = {op.index: npu_support(op, subgraph) for op in subgraph.operators}
    return {index: reason for index, reason in reasons.items() if reason is not None}
