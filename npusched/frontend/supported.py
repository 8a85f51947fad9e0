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

from npusched.frontend.npu_rules import (
    _LOWERING_SPECIFIC,
    _SUPPORT_GENERIC,
    _SUPPORT_SPECIFIC,
    _pool_stride_folds,
    batch_is_1,
    folds_to_constant,
    symmetric_weights,
)
from npusched.frontend.op_view import _BATCH_ANY, NPU_OPERATORS, VELA_NPU_OPERATORS, Constraint, OpView
from npusched.frontend.semantic_rules import _SEMANTIC_EXEMPT, _SEMANTIC_GENERIC, _SEMANTIC_SPECIFIC
from npusched.frontend.tflite_reader import TfliteOperator, TfliteSubgraph

# ---------------------------------------------------------------------------------------------------------------

def _rule(constraint: Constraint) -> str:
    return (constraint.__doc__ or constraint.__name__).strip().splitlines()[0]


def _first_failure(v: OpView, constraints: tuple[Constraint, ...]) -> str | None:
    for constraint in constraints:
        detail = constraint(v)
        if detail is not None:
            return f"{_rule(constraint)} ({detail})" if detail else _rule(constraint)
    return None


def _semantic_failure(v: OpView) -> str | None:
    exempt = _SEMANTIC_EXEMPT.get(v.opcode, ())
    semantic = tuple(c for c in _SEMANTIC_GENERIC if c not in exempt) + _SEMANTIC_SPECIFIC.get(v.opcode, ())
    return _first_failure(v, semantic)


def _vela_verdict(v: OpView) -> str | None:
    """Why Vela 5.2.0 would place the operator on the CPU, or None if Vela runs it on the NPU."""
    failure = _semantic_failure(v)
    if failure is not None:
        return f"fails the TFLite semantic rule: {failure}"
    failure = _first_failure(v, (symmetric_weights,))
    if failure is not None:
        return failure
    if v.opcode not in VELA_NPU_OPERATORS:
        return f"{v.opcode} is a CPU-only operator (Vela has no NPU implementation)"
    generic = tuple(c for c in _SUPPORT_GENERIC if not (c is batch_is_1 and v.opcode in _BATCH_ANY))
    failure = _first_failure(v, generic + _SUPPORT_SPECIFIC.get(v.opcode, ()))
    if failure is None:
        failure = _first_failure(v, _LOWERING_SPECIFIC.get(v.opcode, ()))
    return f"fails the NPU rule: {failure}" if failure is not None else None


def vela_cpu_reason(op: TfliteOperator, subgraph: TfliteSubgraph) -> str | None:
    """Why Vela 5.2.0 would leave ``op`` on the CPU, or None when Vela runs it on the NPU (or folds it away)."""
    view = OpView(op, subgraph)
    if _pool_stride_folds(view):
        view = OpView(op, subgraph, pool_stride_fixed=True)
    try:
        if folds_to_constant(op, subgraph) and _semantic_failure(view) is None:
            return None
        return _vela_verdict(view)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
        return f"malformed operator ({type(exc).__name__}: {exc})"


def npu_support(op: TfliteOperator, subgraph: TfliteSubgraph) -> str | None:
    """None if npusched runs ``op`` on the NPU (or it folds into a constant), else a one-line reason for the CPU."""
    reason = vela_cpu_reason(op, subgraph)
    if reason is None and op.opcode not in NPU_OPERATORS:
        reason = f"npusched does not lower {op.opcode} to the NPU"
    if reason is None and op.opcode == "CONV_2D" and _grouped(OpView(op, subgraph)):
        reason = ("npusched runs a grouped convolution once normalisation has split it into whole groups "
                  "(--no-normalise keeps it whole)")
    return None if reason is None else f"{op.opcode} '{OpView(op, subgraph).name}' runs on the CPU: {reason}"


def _grouped(v: OpView) -> bool:
    """A convolution whose kernel covers a fraction of the IFM depth (HWIO weights: the input depth is [-2])."""
    weight_shape = v.weight_shape
    return len(weight_shape) == 4 and v.ifm is not None and v.ifm.shape[-1] != weight_shape[-2]


def cpu_operators(subgraph: TfliteSubgraph) -> dict[int, str]:
    """Operator index -> reason, for every operator of ``subgraph`` that stays on the CPU."""
    reasons = {op.index: npu_support(op, subgraph) for op in subgraph.operators}
    return {index: reason for index, reason in reasons.items() if reason is not None}
