"""What npusched's backend bridge teaches Vela legacy: operators its legacy core leaves on the CPU that npusched runs
on the NPU, and one step of npusched's lowering, in Vela's graph exactly as npusched lowers them.

* **BATCH_MATMUL** of two activations. Vela 5.2.0's legacy core has no NPU form of it ("CPU only op"); its default
  core runs one column of the output at a time, an int32 MUL and a rescaling REDUCE_SUM per column, and npusched
  lowers it the same way (``npusched.lowering.batch_matmul``, where the passes and their arithmetic are described).
* **GELU** (int8): TFLite's kernel is a 256-entry table (``npusched.lowering.luts.gelu_lut8_values``), which the NPU
  applies as it applies Vela's own EXP or TANH tables.
* **Zero taps that read only padding** at a convolution kernel's edge go, with that padding
  (``npusched.lowering.rewrite_helpers.without_padding_only_taps``): npusched's normaliser gives a convolution after
  a PAD longer than half its kernel (a causal one's) zero taps and a longer PAD, which Vela folds into hardware
  padding (``npusched.frontend.normalise.padded_convolutions``); without the zero taps it is the convolution padded
  as the PAD padded, as Vela's default core runs it.

For one compilation, ``vela_taught`` makes Vela legacy agree: its support check accepts the operators npusched's
rules accept (``npusched.frontend.npu_rules``: ``batch_matmul_form``, ``gelu_form``, asked of Vela's own operation,
so both partition the network alike), and its operator rewrites build the same passes from Vela's own operations
(BATCH_MATMUL at the step that decomposes SOFTMAX, GELU at the one that turns EXP into a table): the same names,
shapes, operand views, scaling and tables, so the rest of Vela (formats, packing, command streams, its estimate)
treats them as any MUL, REDUCE_SUM or table lookup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from npusched.frontend.npu_rules import batch_matmul_form, gelu_form
from npusched.ir import DataType, Quantization
from npusched.lowering.batch_matmul import matmul_shape, output_scaling
from npusched.lowering.luts import gelu_lut8_values
from npusched.lowering.rewrite_helpers import without_padding_only_taps


def _data_type(tensor: Any) -> DataType | None:
    try:
        return DataType(str(tensor.dtype))
    except ValueError:
        return None


def _quantization(tensor: Any) -> Quantization | None:
    """A Vela tensor's quantisation as npusched's (None when it has none)."""
    quant = tensor.quantization
    if quant is None or quant.scale_f32 is None or quant.zero_point is None:
        return None
    return Quantization(scale=tuple(float(s) for s in np.atleast_1d(np.asarray(quant.scale_f32)).reshape(-1)),
                        zero_point=tuple(int(z) for z in np.atleast_1d(np.asarray(quant.zero_point)).reshape(-1)))


def batch_matmul_support(op: Any) -> str | None:
    """Why npusched leaves Vela's BatchMatMul ``op`` on the CPU, or None (npusched's rule, on Vela's operation)."""
    if len(op.inputs) != 2 or len(op.outputs) != 1 or any(t is None for t in (*op.inputs, *op.outputs)):
        return "malformed operator"
    tensors = (*op.inputs, op.outputs[0])
    quants = [_quantization(t) for t in tensors]
    if any(q is None or len(q.scale) != 1 for q in quants):
        return "per-axis or missing quantisation"
    dtypes = [_data_type(t) for t in tensors]
    if any(d is None for d in dtypes):
        return f"types {[str(t.dtype) for t in tensors]}"
    constant = any(t.values is not None for t in op.inputs)
    return batch_matmul_form(tuple(op.inputs[0].shape), tuple(op.inputs[1].shape),
                             tuple(d for d in dtypes if d is not None), bool(op.attrs.get("adj_x")),
                             bool(op.attrs.get("adj_y")), constant, op.inputs[0] is op.inputs[1])


def lowered(op: Any) -> Any:
    """Vela's operations for one BATCH_MATMUL (the column passes), wired into its graph; the last REDUCE_SUM is
    returned, the one Vela's rewrite walk puts in the operator's place (the others are the OFM's other writers)."""
    from ethosu.vela.data_type import DataType as VelaType
    from ethosu.vela.debug_database import DebugDatabase
    from ethosu.vela.operation import ExplicitScaling, Op, Operation, Padding
    from ethosu.vela.operation_util import create_mul
    from ethosu.vela.shape4d import Shape4D
    from ethosu.vela.tensor import QuantizationParameters

    lhs, rhs = op.inputs
    out = op.outputs[0]
    lhs_shape, rhs_shape = matmul_shape(lhs.shape), matmul_shape(rhs.shape)
    heads, rows, depth, columns = lhs_shape.height, lhs_shape.width, lhs_shape.depth, rhs_shape.width
    multiplier, shift = output_scaling(*(_quantization(t) for t in (lhs, rhs, out)))  # type: ignore[arg-type]
    for tensor in (lhs, rhs):
        tensor.consumer_list = [c for c in tensor.consumer_list if c is not op]
    last = None
    for column in range(columns):
        unit = QuantizationParameters(scale_f32=1.0, zero_point=0)
        mul = create_mul(f"{out.name}_mul{column}", lhs, rhs, unit, dtype=VelaType.int32,
                         ifm_shape=Shape4D(1, heads, rows, depth), ifm2_shape=Shape4D(1, heads, 1, columns * depth))
        mul.read_offsets[1] = Shape4D(0, 0, 0, column * depth)
        mul.read_shapes[1] = Shape4D(1, heads, 1, depth)
        mul.explicit_scaling = ExplicitScaling(False, [0], [1])
        total = Operation(Op.ReduceSum, f"{out.name}_sum{column}")
        total.attrs.update(padding=Padding.VALID, stride_w=1, stride_h=1, filter_width=1, filter_height=1,
                           strides=[1, 1, 1, 1], ksize=[1, 1, 1, 1])
        total.add_input_tensor(mul.ofm)
        total.outputs = [out]
        total.ifm_shapes = [Shape4D(1, heads, rows, depth)]
        total.ofm_shapes = [Shape4D(1, heads, rows, columns)]
        total.write_offset = Shape4D(0, 0, 0, column)
        total.write_shape = Shape4D(1, heads, rows, 1)
        total.explicit_scaling = ExplicitScaling(False, [shift], [multiplier])
        for made in (mul, total):
            made.run_on_npu = True
            DebugDatabase.add_optimised(op, made)
        if last is not None:
            out.ops.append(last)
        last = total
    return last


def gelu_support(op: Any) -> str | None:
    """Why npusched leaves Vela's Gelu ``op`` on the CPU, or None (npusched's rule, on Vela's operation)."""
    if len(op.inputs) != 1 or len(op.outputs) != 1 or any(_quantization(t) is None for t in (*op.inputs, *op.outputs)):
        return "malformed operator"
    return gelu_form(_data_type(op.inputs[0]), _data_type(op.outputs[0]))


def gelu_table(op: Any) -> Any:
    """Vela's GELU as the scalar-zero ADD whose table does the work (what Vela makes of an EXP), TFLite's table."""
    from ethosu.vela.lut import convert_to_lut
    from ethosu.vela.operation import Op

    ifm, ofm = (_quantization(t) for t in (op.inputs[0], op.outputs[0]))
    assert ifm is not None and ofm is not None  # checked by gelu_support
    values = gelu_lut8_values(ifm, ofm, bool(op.attrs.get("approximate")))
    op.type = Op.Add  # set first: Vela gives a GELU no operand roles, an ADD its IFM
    return convert_to_lut(op, values, "gelu")


def drop_padding_only_taps(op: Any, own_padding_fields: Callable[[Any, Any, Any], Any], arch: Any, nng: Any) -> Any:
    """Vela's convolution ``op``, its padding fields set, without the kernel's zero taps that read only padding,
    as npusched's lowering drops them (``npusched.lowering.rewrite_helpers.without_padding_only_taps``)."""
    from ethosu.vela.operation import Op, Padding

    weights = op.inputs[1] if len(op.inputs) > 1 else None
    if not (op.run_on_npu and (op.type.is_conv2d_op() or op.type.is_depthwise_conv2d_op())
            and op.type not in (Op.Conv2DBackpropInput, Op.Conv2DBackpropInputSwitchedBias)
            and weights is not None and weights.values is not None and len(weights.consumer_list) == 1
            and "explicit_padding" in op.attrs):
        return op
    trimmed = without_padding_only_taps(weights.values, weights.quantization.zero_point, op.get_kernel_stride(),
                                        op.get_kernel_dilation(), tuple(op.attrs["explicit_padding"]))
    if trimmed is None:
        return op
    weights.values, padding = trimmed
    weights.shape = list(weights.values.shape)
    op.attrs["padding"], op.attrs["explicit_padding"] = Padding.EXPLICIT, padding
    return own_padding_fields(op, arch, nng)


@contextlib.contextmanager
def vela_taught() -> Iterator[None]:
    """Vela legacy's support check and operator rewrites taught npusched's BATCH_MATMUL and GELU, and its padding
    fields npusched's dropping of zero taps that read only padding, for one compilation."""
    from ethosu.vela import tflite_graph_optimiser as optimiser
    from ethosu.vela.operation import Op
    from ethosu.vela.tflite_supported_operators import TFLiteSupportedOperators

    own_check = TFLiteSupportedOperators.is_operator_supported
    own_softmax, own_luts = optimiser.convert_softmax, optimiser.convert_ops_to_lut
    own_padding_fields = optimiser.add_padding_fields
    rules = {Op.BatchMatMul: ("BATCH_MATMUL", batch_matmul_support), Op.Gelu: ("GELU", gelu_support)}

    def is_operator_supported(self: Any, op: Any) -> bool:
        if op.type not in rules:
            return bool(own_check(self, op))
        operator, rule = rules[op.type]
        why = rule(op)
        if why is not None:  # said as Vela says why it places an operator on the CPU
            print(f"Warning: {operator} '{op.name}' is not supported on the NPU. Placing on CPU instead")
            print(f" - {why}")
        return why is None

    def convert_softmax(op: Any, arch: Any, nng: Any) -> Any:
        if op.type == Op.BatchMatMul and op.run_on_npu:
            return lowered(op)
        return own_softmax(op, arch, nng)

    def convert_ops_to_lut(op: Any, arch: Any, nng: Any) -> Any:
        if op.type == Op.Gelu and op.run_on_npu:
            return gelu_table(op)
        return own_luts(op, arch, nng)

    def add_padding_fields(op: Any, arch: Any, nng: Any) -> Any:
        return drop_padding_only_taps(own_padding_fields(op, arch, nng), own_padding_fields, arch, nng)

    TFLiteSupportedOperators.is_operator_supported = is_operator_supported
    optimiser.convert_softmax, optimiser.convert_ops_to_lut = convert_softmax, convert_ops_to_lut
    optimiser.add_padding_fields = add_padding_fields
    try:
        yield
    finally:
        TFLiteSupportedOperators.is_operator_supported = own_check
        optimiser.convert_softmax, optimiser.convert_ops_to_lut = own_softmax, own_luts
        optimiser.add_padding_fields = own_padding_fields
