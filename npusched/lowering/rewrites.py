"""Vela's TFLite graph-optimiser rewrites, applied to the working graph in Vela's order.

Each rewrite is a small function of one op (or tensor) that either returns it unchanged or returns the op
that now produces its output. ``optimise`` runs the same traversals, in the same sequence, as Vela's
``tflite_optimise_graph``; because the final pass order depends on the graph shape, matching the sequence
(not just the end result of each rewrite) is what makes the lowered order match Vela's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from npusched.ir import (
    DataType,
    NpuOp,
    Quantization,
    ResamplingMode,
    Shape4D,
)
from npusched.lowering import luts
from npusched.lowering.decomposers import DECOMPOSERS
from npusched.lowering.netgraph import (
    CONV_TYPES,
    DEPTHWISE_TYPES,
    RELU_TYPES,
    Activation,
    WorkingGraph,
    WorkingOp,
    WorkingTensor,
    activation_for,
    block_kind,
    const_tensor,
    rewrite_pre_order,
    update_consumers,
    visit_post_order,
)
from npusched.lowering.rewrite_helpers import (
    avgpool_nop,
    calc_resize_factor,
    filter_padding,
    needed_total_padding,
    padding_and_skirt,
    quantise_scale,
    scaling_equal,
    splice_prebuilt,
    zero_point,
)
from npusched.lowering.rewrites_argmax import ArgMaxRewrites
from npusched.lowering.rewrites_memory import MemoryOpRewrites
from npusched.lowering.rewrites_prelu import PRELU_ALPHA, PreluRewrites
from npusched.lowering.rewrites_shape import ShapeRewrites
from npusched.target.arch import ArchitectureFeatures

SupportFn = Callable[[WorkingOp], str | None]
DecomposeFn = Callable[[WorkingOp], list[NpuOp] | None]


@dataclass
class GraphRewriter(MemoryOpRewrites, ShapeRewrites, PreluRewrites, ArgMaxRewrites):
    """Runs the rewrites over one subgraph. ``support`` says why an op must stay on the CPU (or None);
    ``decompose`` lowers SOFTMAX/MEAN/LSTM into NpuOps (None when it cannot)."""

    arch: ArchitectureFeatures
    support: SupportFn
    decompose: DecomposeFn
    # the default core's graph: a convolution keeps its stride (``GraphRecipe.keep_strides``)
    keep_strides: bool = False
    # === driver =========================================================================================
    def optimise(self, sg: WorkingGraph) -> None:
        update_consumers(sg)
        rewrite_pre_order(sg, [self.optimise_quantize, self.shape_to_constant, self.check_asymmetric_weights,
                               self.fixup_pool_strides], rewrite_unsupported=False)
        rewrite_pre_order(sg, [self.supported_operator_check, self.set_shapes], rewrite_unsupported=False)
        visit_post_order(sg, [self.rewrite_concat])
        update_consumers(sg)
        rewrite_pre_order(sg, [self.rewrite_unpack_output, self.rewrite_stridedslice_output,
                               self.nop_split_to_identity], rewrite_unsupported=False)
        rewrite_pre_order(sg, [], [self.rewrite_split], rewrite_unsupported=False)
        rewrite_pre_order(sg, [self.bypass_memory_only], rewrite_unsupported=False)
        rewrite_pre_order(sg, [self._skip_prebuilt(f) for f in (
            self.convert_exp_rsqrt_to_lut,
            self.convert_decomposable,
            self.convert_depthwise_to_conv,
            self.convert_conv_to_fc,
            self.convert_prelu,
            self.convert_lrelu,
            self.convert_avg_pool_to_conv2d,
            self.convert_mirror_pad,
            self.fixup_strided_conv,
            self.convert_hardswish_to_lut,
            self.rewrite_fully_connected_input,
            self.convert_batched_fc_shape,
            self.fixup_conv2d_backprop,
            self.fixup_relus_with_differing_scaling,
            self.reorder_depthwise_weights,
            self.convert_argmax,
            self.fixup_resize,
            self.fixup_bias_tensors,
            self.convert_tanh_sigmoid_to_lut,
            self.convert_quantize,
            self.replace_pad_by_hw_pad,
            self.fixup_dilation_gt2,
            self.fixup_transpose,
        )], rewrite_unsupported=False)
        rewrite_pre_order(sg, [self.fuse_activation_with_prev, self._skip_prebuilt(self.convert_pad),
                               self._skip_prebuilt(self.add_padding_fields)], [self.remove_passthrough_tensor])
        visit_post_order(sg, [self.remove_split_slice_read])
        update_consumers(sg)

    @staticmethod
    def _skip_prebuilt(fn: Callable[[WorkingOp], WorkingOp]) -> Callable[[WorkingOp], WorkingOp]:
        def wrapped(op: WorkingOp) -> WorkingOp:
            return op if op.prebuilt is not None else fn(op)
        return wrapped

    # === compile-time constant folding ==================================================================
    def optimise_quantize(self, op: WorkingOp) -> WorkingOp:
        if op.type != "Quantize" or not op.run_on_npu:
            return op
        ifm, ofm = op.ifm, op.ofm
        if not ifm.is_const or ifm.values is None:
            return op
        vals = np.atleast_1d(np.asarray(ifm.values))
        if ifm.dtype == ofm.dtype and ifm.dtype in (DataType.int8, DataType.int16):
            ratio = float(np.float64(ifm.quantization.scale[0]) / np.float64(ofm.quantization.scale[0]))
            lo, hi = (-128, 127) if ofm.dtype == DataType.int8 else (-32768, 32767)
            out = [min(hi, max(lo, int(round((int(v) - zero_point(ifm)) * ratio)) + zero_point(ofm)))
                   for v in vals.flatten()]
            ofm.values = np.array(out).reshape(vals.shape)
        elif ifm.dtype == DataType.float32:
            ofm.values = np.array([v / ofm.quantization.scale[0] + zero_point(ofm) for v in vals.flatten()])
        else:
            return op
        ifm.consumer_list = [c for c in ifm.consumer_list if c is None or c.op_index != op.op_index]
        op.inputs = []
        op.type = "Const"
        return op

    def shape_to_constant(self, op: WorkingOp) -> WorkingOp:
        if op.type != "Shape" or not op.run_on_npu:
            return op
        ifm, ofm = op.ifm, op.ofm
        if not ofm.shape or len(ifm.shape) != ofm.shape[0]:
            return op
        ifm.consumer_list = [c for c in ifm.consumer_list if c is None or c.op_index != op.op_index]
        op.inputs = []
        op.type = "Const"
        ofm.values = np.array(ifm.shape)
        return op

    def check_asymmetric_weights(self, op: WorkingOp) -> WorkingOp:
        """Convolutions with int8/int16 IFMs and non-zero weight zero points stay on the CPU (Vela only
        adjusts them with --force-symmetric-int-weights)."""
        if op.type in CONV_TYPES | DEPTHWISE_TYPES and op.ifm is not None and op.weights is not None:
            if op.ifm.dtype in (DataType.int8, DataType.int16) and any(op.weights.quantization.zero_point):
                if op.run_on_npu:
                    op.run_on_npu = False
                    op.cpu_reason = "has asymmetric weights (non-zero weight zero point)"
        return op

    def fixup_pool_strides(self, op: WorkingOp) -> WorkingOp:
        if op.type in ("AvgPool", "MaxPool", "QuantizedAvgPool", "QuantizedMaxPool"):
            k_w, k_h = op.kernel_size()
            s_w, s_h = op.stride()
            ifm = op.ifm
            if len(ifm.shape) >= 3 and k_w == s_w == ifm.shape[2] and k_h == s_h == ifm.shape[1]:
                if "strides" in op.attrs:
                    n, _, _, c = op.attrs["strides"]
                    op.attrs["strides"] = (n, 1, 1, c)
                op.attrs["stride_w"] = 1
                op.attrs["stride_h"] = 1
                op.attrs["padding"] = "VALID"
        return op

    # === placement and shapes ===========================================================================
    def supported_operator_check(self, op: WorkingOp) -> WorkingOp:
        if op.type in ("Const", "Placeholder", "SubgraphInput"):
            op.run_on_npu = False
            return op
        if op.cpu_reason is not None:
            op.run_on_npu = False
            return op
        reason = self.support(op)
        op.run_on_npu = reason is None
        op.cpu_reason = reason
        return op

    def set_shapes(self, op: WorkingOp) -> WorkingOp:
        if op.run_on_npu and op.needs_shapes() and not (op.ifm_shapes or op.ofm_shapes):
            op.set_ifm_ofm_shapes()
        return op

    # === operator rewrites ==============================================================================
    def _to_lut(self, op: WorkingOp, values: list[int], lut_name: str) -> WorkingOp:
        """Turn ``op`` into an Add of scalar zero whose fused LUT activation does the work (Vela's
        convert_to_lut); marked as a no-op so that the LUT can move onto the producer."""
        ifm, ofm = op.ifm, op.ofm
        op.type = "Add"
        op.name = f"{op.name}_lut_{lut_name}"
        op.attrs["is_nop"] = True
        quant = Quantization(scale=ifm.quantization.scale[:1], zero_point=(0,),
                             min=(0.0,), max=(65536.0 if ifm.dtype == DataType.int16 else 255.0,))
        zero = const_tensor(ifm.name + "_scalar0", [], ifm.dtype, [0], quant)
        op.inputs = [ifm]
        op.add_input(zero)
        op.forced_output_quantization = ifm.quantization  # the LUT rescales
        op.activation = Activation("LUT")
        op.activation_lut = luts.lut_tensor(op.name + "_values", values, ofm.dtype)
        op.set_ifm_ofm_shapes()
        return op

    def convert_exp_rsqrt_to_lut(self, op: WorkingOp) -> WorkingOp:
        if op.type == "Gelu":  # not Vela legacy's: npusched's backend bridge teaches it the same table
            vals = luts.gelu_lut8_values(op.ifm.quantization, op.ofm.quantization, bool(op.attrs.get("approximate")))
            return self._to_lut(op, vals, "gelu")
        if op.type == "Exp" and op.ifm.dtype in (DataType.int8, DataType.int16):
            table = luts.exp_lut8_values if op.ifm.dtype == DataType.int8 else luts.exp_lut16_values
            return self._to_lut(op, table(op.ifm.quantization, op.ofm.quantization), "exp")
        if op.type == "Rsqrt":
            return self._to_lut(op, luts.rsqrt_lut8_values(op.ifm.quantization, op.ofm.quantization), "rsqrt")
        return op

    def convert_decomposable(self, op: WorkingOp) -> WorkingOp:
        """SOFTMAX, MEAN, UNIDIRECTIONAL_SEQUENCE_LSTM and SQUARED_DIFFERENCE become chains of simpler NPU ops
        (decomposition modules); the returned op is the one now producing the original OFM."""
        if op.type not in DECOMPOSERS or not op.run_on_npu:
            return op
        npu_ops = self.decompose(op)
        if not npu_ops:
            return op
        sources = [t for t in (op.ifm, op.ifm2) if t is not None] if op.type == "SquaredDifference" else []
        last = splice_prebuilt(op, npu_ops)
        _clones_keep_linear_format(last, sources)
        return last

    def convert_depthwise_to_conv(self, op: WorkingOp) -> WorkingOp:
        if op.type == "DepthwiseConv2DBias" and op.attrs.get("depth_multiplier", 1) != 1:
            ifm_shape, ofm_shape = op.ifm_shapes[0], op.ofm_shapes[0]
            if ifm_shape.depth == 1 and ofm_shape.depth == op.attrs["depth_multiplier"]:
                op.type = "Conv2DBias"
                op.attrs.pop("channel_multiplier", None)
                op.attrs.pop("depth_multiplier", None)
                w = op.weights
                w.values = np.transpose(w.values, (0, 1, 3, 2))
                w.shape = list(w.values.shape)
        return op

    def convert_conv_to_fc(self, op: WorkingOp) -> WorkingOp:
        if op.type == "Conv2DBias":
            ifm = op.ifm_shapes[0]
            kh, kw = op.inputs[1].shape[0], op.inputs[1].shape[1]
            if ifm.height == 1 and ifm.width == 1 and kh == 1 and kw == 1:
                op.name += "_fc"
                op.type = "FullyConnected"
                op.attrs = {"weights_format": 0}
                w = op.inputs[1]
                w.values = np.asarray(w.values).squeeze(axis=(0, 1))
                w.shape = list(w.values.shape)
        return op

    def convert_lrelu(self, op: WorkingOp) -> WorkingOp:
        if op.type != "LeakyRelu":
            return op
        ifm, ofm = op.ifm, op.ofm
        alpha = float(op.attrs.get("alpha", 0.0))
        if alpha == 0:
            op.type = "Relu"
            op.name = op.name.replace("LeakyRelu", "Relu")
            op.activation = None
            return op
        if ifm.dtype == ofm.dtype and ifm.dtype in (DataType.int8, DataType.uint8):
            if PRELU_ALPHA in op.attrs:  # a PRELU's single alpha: TFLite's PRELU arithmetic, exactly
                stored, alpha_quantization = op.attrs[PRELU_ALPHA]
                vals = luts.prelu_lut8_values(ifm.quantization, alpha_quantization, stored, ofm.quantization,
                                              ifm.dtype)
            else:
                vals = luts.activation_lut("lrelu", ifm.quantization, ofm.quantization, ifm.dtype, alpha)
            return self._to_lut(op, vals, "lrelu")
        keeps_int16 = scaling_equal(ifm, ofm) and ifm.dtype == ofm.dtype == DataType.int16 and alpha > 0
        if PRELU_ALPHA in op.attrs and not keeps_int16:
            return self.leaky_relu_as_maximum(op)
        return op

    def convert_avg_pool_to_conv2d(self, op: WorkingOp) -> WorkingOp:
        if op.type != "AvgPool":
            return op
        s_x, s_y = op.stride()
        if s_x <= 3:
            return op
        w, h = op.attrs["filter_width"], op.attrs["filter_height"]
        op.attrs.update({"stride_h": s_y, "stride_w": s_x, "dilation_h_factor": 1, "dilation_w_factor": 1,
                         "strides": (1, s_y, s_x, 1), "dilation": (1, 1, 1, 1)})
        op.type = "Conv2DBias"
        op.name += "_conv2d"
        op.rounding_mode = "AwayZero"
        shape = [h, w, 1, op.ofm.shape[-1]]
        quant = Quantization(scale=(1.0 / (h * w),), zero_point=(0,))
        op.add_input(const_tensor("weights", shape, op.ifm.dtype, np.full(shape, 1), quant))
        op.set_ifm_ofm_shapes()
        return op

    def fixup_strided_conv(self, op: WorkingOp) -> WorkingOp:
        """Fold a wide stride into depth (IFM W/f x C*f, kernel W/f x I*f) where Vela does; and drop the
        stride along an axis where the OFM is 1 wide, keeping the original padding explicitly."""
        if op.type != "Conv2DBias":
            return op
        s_x, s_y = op.stride()
        weights = op.weights
        ifm_shape = op.ifm_shapes[0]
        if op.op_index != 0 and s_x < 4:
            return op
        factor, final_stride = calc_resize_factor(ifm_shape.width, s_x)
        post_depth = ifm_shape.depth * factor
        if s_x > 1 and (post_depth <= 8 or s_x > 3) and factor != 1 and weights is not None \
                and not self.keep_strides:
            k_w, _ = op.kernel_size()
            padding_type = op.attrs.get("padding")
            if padding_type in (None, "EXPLICIT", "TILE"):
                return op
            cur_pad_x = needed_total_padding(ifm_shape.width, s_x, k_w)
            left, right = filter_padding(padding_type, cur_pad_x, final_stride, factor, k_w, ifm_shape.width)
            if padding_type == "SAME":
                opt_pad = needed_total_padding(ifm_shape.width // factor, final_stride,
                                               (k_w + 1 + left + right) // factor)
                if cur_pad_x != opt_pad:
                    return op
            op.ifm_shapes[0] = Shape4D(ifm_shape.batch, ifm_shape.height, ifm_shape.width // factor,
                                       ifm_shape.depth * factor)
            zp = weights.quantization.zero_point
            pad_value = zp[0] if len(zp) == 1 else 0
            pads = [(0, 0)] * len(weights.shape)
            pads[1] = (left, right)
            padded = np.pad(np.asarray(weights.values), pads, constant_values=pad_value)
            new_shape = list(weights.shape)
            new_shape[1] = padded.shape[1] // factor
            new_shape[2] = new_shape[2] * factor
            weights.values = np.reshape(padded, new_shape)
            weights.shape = new_shape
            s_x = final_stride
            op.attrs.update({"stride_w": s_x, "stride_h": s_y, "strides": (1, s_y, s_x, 1)})
        ofm_shape = op.ofm_shapes[0]
        if 1 in (ofm_shape.height, ofm_shape.width):
            padding, _ = padding_and_skirt(op.attrs["padding"], op.kernel_size(), op.stride(), op.dilation(),
                                           ifm_shape, op.attrs.get("explicit_padding"))
            op.attrs["padding"] = "EXPLICIT"
            op.attrs["explicit_padding"] = padding
            s_y = 1 if ofm_shape.height == 1 else s_y
            s_x = 1 if ofm_shape.width == 1 else s_x
            op.attrs.update({"stride_w": s_x, "stride_h": s_y, "strides": (1, s_y, s_x, 1)})
        return op

    def convert_hardswish_to_lut(self, op: WorkingOp) -> WorkingOp:
        if op.type == "HardSwish":
            vals = luts.activation_lut("hardswish", op.ifm.quantization, op.ofm.quantization, op.ifm.dtype)
            return self._to_lut(op, vals, "hardswish")
        return op

    def rewrite_fully_connected_input(self, op: WorkingOp) -> WorkingOp:
        if op.type == "FullyConnected" and not op.read_shapes[0]:
            depth = op.weights.shape[-2]
            elems = op.ifm.elements()
            rows = elems // depth
            if rows * depth == elems and len(op.ifm.shape) != 1:
                op.ifm_shapes[0] = Shape4D(rows, 1, 1, depth)
            if op.ofm_shapes[0].batch == 1 < op.ifm_shapes[0].batch:
                o = op.ofm_shapes[0]
                op.ofm_shapes[0] = Shape4D(o.height * o.width, 1, 1, o.depth)
        return op

    def convert_batched_fc_shape(self, op: WorkingOp) -> WorkingOp:
        if op.type == "FullyConnected" and op.ifm_shapes[0].batch > 1:
            split = {4: (2, 2), 6: (2, 3), 8: (2, 4), 9: (3, 3), 12: (3, 4), 16: (4, 4)}
            n = op.ifm_shapes[0].batch
            h, w = split.get(n, (1, n))
            op.ifm_shapes[0] = Shape4D(1, h, w, op.ifm_shapes[0].depth)
            wt = op.inputs[1]
            wt.values = np.asarray(wt.values)[np.newaxis, np.newaxis]
            wt.shape = list(wt.values.shape)
            n = op.ofm_shapes[0].batch
            h, w = split.get(n, (1, n))
            op.ofm_shapes[0] = Shape4D(1, h, w, op.ofm_shapes[0].depth)
            if h == 1 and w > 4:
                op.type = "Conv2DBias"
                op.attrs["padding"] = "SAME"
        return op

    def fixup_conv2d_backprop(self, op: WorkingOp) -> WorkingOp:
        if op.type == "Conv2DBackpropInput":
            op.inputs[2], op.inputs[0] = op.inputs[0], op.inputs[2]
            op.type = "Conv2DBackpropInputSwitchedBias"
            s_x, s_y = op.stride()
            if s_x > 1 or s_y > 1:
                op.resampling_mode = ResamplingMode.TRANSPOSE
            op.attrs.update({"strides": (1, 1, 1, 1), "stride_w": 1, "stride_h": 1})
        return op

    def fixup_relus_with_differing_scaling(self, op: WorkingOp) -> WorkingOp:
        if op.run_on_npu and op.type in RELU_TYPES:
            ifm, ofm = op.inputs[0], op.outputs[0]
            if not scaling_equal(ifm, ofm):
                fused = avgpool_nop(op.name + "_avgpool")
                fused.original_type = op.original_type
                fused.tflite_op = op.tflite_op
                fused.op_index = op.op_index
                fused.activation = activation_for(op.type)
                rescale = float(ifm.quantization.scale[0]) / float(ofm.quantization.scale[0]) \
                    if ifm.quantization.scale and ofm.quantization.scale else 1.0
                mult, shift = quantise_scale(rescale)
                fused.explicit_scaling = (False, (shift,), (mult,))
                if op in ifm.consumer_list:
                    ifm.consumer_list.remove(op)
                fused.add_input(ifm)
                fused.set_output(ofm)
                fused.ifm_shapes.append(op.ifm_shapes[0])
                fused.ofm_shapes.append(op.ofm_shapes[0])
                return fused
        return op

    def reorder_depthwise_weights(self, op: WorkingOp) -> WorkingOp:
        if op.type in DEPTHWISE_TYPES:
            w = op.inputs[1]
            if not getattr(w, "_dw_reordered", False):
                w.values = np.transpose(np.asarray(w.values), (0, 1, 3, 2))
                w.shape = list(w.values.shape)
                w._dw_reordered = True  # type: ignore[attr-defined]
        return op

    def convert_tanh_sigmoid_to_lut(self, op: WorkingOp) -> WorkingOp:
        if op.type in ("Sigmoid", "Tanh"):
            ifm, ofm = op.ifm, op.ofm
            if ifm.dtype != ofm.dtype or ifm.dtype not in (DataType.int8, DataType.uint8):
                return op
            kind = "sigmoid" if op.type == "Sigmoid" else "tanh"
            vals = luts.activation_lut(kind, ifm.quantization, ofm.quantization, ifm.dtype)
            return self._to_lut(op, vals, kind)
        return op

    def convert_quantize(self, op: WorkingOp) -> WorkingOp:
        if op.type == "Quantize":
            nop = avgpool_nop(op.name + "_avgpool")
            op.type = "AvgPool"
            op.attrs = dict(nop.attrs)
        return op

    # === late rewrites ==================================================================================
    def fuse_activation_with_prev(self, op: WorkingOp) -> WorkingOp:
        """Move a LUT no-op's activation onto the op producing its input, when nothing else reads it."""
        if op.activation is None or not op.attrs.get("is_nop", False):
            return op
        ifm, ofm = op.ifm, op.ofm
        if ifm is None or ofm is None or not ifm.ops:
            return op
        prev = ifm.ops[0]
        fuse = (prev.run_on_npu and prev.type != "Memcpy" and block_kind(prev.type) != "Default"
                and len(ifm.ops) == 1 and len(prev.outputs[0].consumers()) == 1 and prev.activation is None
                and (prev.prebuilt is None or prev.prebuilt.activation is None))
        if op.activation_lut is not None and getattr(self.arch, "shram_reserved_unused_banks", 2) == 0:
            fuse = False
        if not fuse:
            return op
        prev.activation = op.activation
        prev.forced_output_quantization = op.forced_output_quantization
        if op.activation_lut is not None:
            prev.activation_lut = op.activation_lut
        prev.set_output(ofm)
        if prev.prebuilt is not None:
            prev.prebuilt = replace(prev.prebuilt, activation=op.activation.op_type,
                                    activation_lut=op.activation_lut)
        return op


# The int32 maps of Vela's SQUARED_DIFFERENCE are clones of its inputs (``Tensor.clone``: ``<input>_ifm_32bit_shifted``,
# ``<input>_scaled``, ``<input>_raw_diff``, ``<input>_squared_raw``), and a clone carries its input's forced linear
# format: an input a TRANSPOSE wrote keeps its intermediates linear too.
_SQUARED_DIFFERENCE_CLONES = ("_ifm_32bit_shifted", "_ifm2_32bit_shifted", "_scaled", "_raw_diff", "_squared_raw")


def _clones_keep_linear_format(last: WorkingOp, sources: list[WorkingTensor]) -> None:
    """Mark the maps of a decomposition (ending at ``last``) cloned from a forced-linear source as forced linear."""
    linear = [t.name for t in sources if t.force_linear]
    if not linear:
        return
    seen: set[int] = set()
    stack = [last]
    while stack:
        op = stack.pop()
        if id(op) in seen or op.prebuilt is None:
            continue
        seen.add(id(op))
        for tens in [*op.inputs, *op.outputs]:
            if tens is not None and any(tens.name == f"{name}{suffix}" for name in linear
                                        for suffix in _SQUARED_DIFFERENCE_CLONES):
                tens.force_linear = True
        stack.extend(p for t in op.inputs if t is not None for p in t.ops)

