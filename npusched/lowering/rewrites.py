"""Vela's TFLite graph-optimiser rewrites, applied to the working graph in Vela's order.

Each rewrite is a small function of one op (or tensor) that either returns it unchanged or returns the op
that now produces its output. ``optimise`` runs the same traversals, in the same sequence, as Vela's
``tflite_optimise_graph``; because the final pass order depends on the graph shape, matching the sequence
(not just the end result of each rewrite) is what makes the lowered order match Vela's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from npusched.ir import (
    DataType,
    FeatureMap,
    NpuOp,
    Quantization,
    ResamplingMode,
    Shape4D,
)
from npusched.lowering import luts
from npusched.lowering.netgraph import (
    BINARY_ELEMENTWISE,
    CONCAT_TYPES,
    CONV_TYPES,
    DEPTHWISE_TYPES,
    MEMORY_ONLY_TYPES,
    RELU_TYPES,
    SPLIT_TYPES,
    Activation,
    VOp,
    VSubgraph,
    VTensor,
    activation_for,
    block_kind,
    const_tensor,
    rewrite_pre_order,
    update_consumers,
    visit_post_order,
)
from npusched.target.arch import ArchitectureFeatures

SupportFn = Callable[[VOp], str | None]
DecomposeFn = Callable[[VOp], list[NpuOp] | None]


# --- small numeric helpers (facts from Vela's padding and scaling code) -----------------------------------

def needed_total_padding(input_size: int, stride: int, filter_size: int) -> int:
    if input_size % stride == 0:
        return max(filter_size - stride, 0)
    return max(0, filter_size - input_size % stride)


def explicit_hw_padding(input_size: int, stride: int, filter_size: int, before: int, after: int) -> tuple[int, int]:
    """Hardware padding equivalent to an explicit PAD: the trailing side may shrink to match the stride."""
    total = needed_total_padding(input_size, stride, filter_size)
    rest = total - before
    out_after = after
    while out_after > 0 and out_after % stride != rest % stride:
        out_after -= 1
    return before, out_after


def padding_and_skirt(padding: str, kernel_wh: tuple[int, int], stride_xy: tuple[int, int],
                      dilation_xy: tuple[int, int], ifm: Shape4D,
                      explicit: tuple[int, ...] | None) -> tuple[tuple[int, int, int, int], tuple[int, ...]]:
    k_w = dilation_xy[0] * (kernel_wh[0] - 1) + 1
    k_h = dilation_xy[1] * (kernel_wh[1] - 1) + 1
    s_x, s_y = stride_xy
    ypad = needed_total_padding(ifm.height, s_y, k_h)
    xpad = needed_total_padding(ifm.width, s_x, k_w)
    if padding == "SAME":
        top, left, bottom, right = ypad // 2, xpad // 2, (ypad + 1) // 2, (xpad + 1) // 2
    elif padding == "VALID":
        top = left = bottom = right = 0
    elif padding == "EXPLICIT":
        t, lf, b, r = explicit
        top, bottom = explicit_hw_padding(ifm.height, s_y, k_h, t, b)
        left, right = explicit_hw_padding(ifm.width, s_x, k_w, lf, r)
    elif padding == "TILE":
        top, left, bottom, right = explicit
    else:
        raise ValueError(f"unsupported padding {padding}")
    return (top, left, bottom, right), (top, left, ypad - top, xpad - left)


def upscaled_padding(padding: str, kernel_hw: tuple[int, int], strides: tuple[int, ...], ifm: Shape4D,
                     up_y: int, up_x: int) -> tuple[int, int, int, int]:
    """Padding of a transpose convolution that upscales its IFM."""
    k_h, k_w = kernel_hw
    if padding == "SAME":
        ypad = needed_total_padding(ifm.height * up_y, int(strides[1]), k_h)
        xpad = needed_total_padding(ifm.width * up_x, int(strides[2]), k_w)
        right = max(((xpad + 1) // up_x) - 1, 0)
        bottom = max(((ypad + 1) // up_y) - 1, 0)
        left = max(k_w - 1 - right, 0)
        top = max(k_h - 1 - bottom, 0)
    else:
        right = max(k_w - 2, 0)
        bottom = max(k_h - 2, 0)
        left = k_w - 1
        top = k_h - 1
    return top, left, bottom, right


def quantise_scale(scale: float) -> tuple[int, int]:
    significand, exponent = math.frexp(scale)
    mult = int(luts.round_away_from_zero(significand * (1 << 31)))
    shift = 31 - exponent
    if not 0 <= shift < 64:
        return 0, 16
    return mult, shift


def is_quantized(t: VTensor) -> bool:
    return t.dtype in (DataType.int8, DataType.uint8, DataType.int16, DataType.int32, DataType.int64) and \
        bool(t.quantization.scale) and bool(t.quantization.zero_point)


def scaling_equal(a: VTensor, b: VTensor) -> bool:
    return is_quantized(a) and is_quantized(b) and a.quantization.scale == b.quantization.scale and \
        a.quantization.zero_point == b.quantization.zero_point


def _avgpool_nop(name: str) -> VOp:
    """Vela's 1x1 AvgPool that copies (and rescales/activates) its input."""
    return VOp("AvgPool", name, attrs={"padding": "VALID", "stride_w": 1, "stride_h": 1, "filter_width": 1,
                                       "filter_height": 1, "strides": (1, 1, 1, 1), "ksize": (1, 1, 1, 1),
                                       "skirt": (0, 0, 0, 0), "explicit_padding": (0, 0, 0, 0)})


def calc_resize_factor(ifm_w: int, stride_x: int) -> tuple[int, int]:
    """How far a strided convolution's IFM can be folded into depth (Vela's calc_resize_factor)."""
    factor = stride_x
    if ifm_w % factor != 0:
        candidates = [s for s in (2, 3) if factor % s == 0 and ifm_w % (stride_x // s) == 0]
        new_factor = factor // (candidates[0] if candidates else 1)
        factor = new_factor if factor != new_factor else 1
    return factor, stride_x // factor


@dataclass
class Optimiser:
    """Runs the rewrites over one subgraph. ``support`` says why an op must stay on the CPU (or None);
    ``decompose`` lowers SOFTMAX/MEAN/LSTM into NpuOps (None when it cannot)."""

    arch: ArchitectureFeatures
    support: SupportFn
    decompose: DecomposeFn

    # === driver =========================================================================================
    def optimise(self, sg: VSubgraph) -> None:
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
            self.convert_lrelu,
            self.convert_avg_pool_to_conv2d,
            self.fixup_strided_conv,
            self.convert_hardswish_to_lut,
            self.rewrite_fully_connected_input,
            self.convert_batched_fc_shape,
            self.fixup_conv2d_backprop,
            self.fixup_relus_with_differing_scaling,
            self.reorder_depthwise_weights,
            self.fixup_resize,
            self.fixup_bias_tensors,
            self.convert_tanh_sigmoid_to_lut,
            self.convert_quantize,
            self.replace_pad_by_hw_pad,
            self.fixup_dilation_gt2,
        )], rewrite_unsupported=False)
        rewrite_pre_order(sg, [self.fuse_activation_with_prev, self._skip_prebuilt(self.convert_pad),
                               self._skip_prebuilt(self.add_padding_fields)], [self.remove_passthrough_tensor])
        visit_post_order(sg, [self.remove_split_slice_read])
        update_consumers(sg)

    @staticmethod
    def _skip_prebuilt(fn: Callable[[VOp], VOp]) -> Callable[[VOp], VOp]:
        def wrapped(op: VOp) -> VOp:
            return op if op.prebuilt is not None else fn(op)
        return wrapped

    # === compile-time constant folding ==================================================================
    def optimise_quantize(self, op: VOp) -> VOp:
        if op.type != "Quantize" or not op.run_on_npu:
            return op
        ifm, ofm = op.ifm, op.ofm
        if not ifm.is_const or ifm.values is None:
            return op
        vals = np.atleast_1d(np.asarray(ifm.values))
        if ifm.dtype == ofm.dtype and ifm.dtype in (DataType.int8, DataType.int16):
            ratio = float(np.float64(ifm.quantization.scale[0]) / np.float64(ofm.quantization.scale[0]))
            lo, hi = (-128, 127) if ofm.dtype == DataType.int8 else (-32768, 32767)
            out = [min(hi, max(lo, int(round((int(v) - _zp(ifm)) * ratio)) + _zp(ofm))) for v in vals.flatten()]
            ofm.values = np.array(out).reshape(vals.shape)
        elif ifm.dtype == DataType.float32:
            ofm.values = np.array([v / ofm.quantization.scale[0] + _zp(ofm) for v in vals.flatten()])
        else:
            return op
        ifm.consumer_list = [c for c in ifm.consumer_list if c is None or c.op_index != op.op_index]
        op.inputs = []
        op.type = "Const"
        return op

    def shape_to_constant(self, op: VOp) -> VOp:
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

    def check_asymmetric_weights(self, op: VOp) -> VOp:
        """Convolutions with int8/int16 IFMs and non-zero weight zero points stay on the CPU (Vela only
        adjusts them with --force-symmetric-int-weights)."""
        if op.type in CONV_TYPES | DEPTHWISE_TYPES and op.ifm is not None and op.weights is not None:
            if op.ifm.dtype in (DataType.int8, DataType.int16) and any(op.weights.quantization.zero_point):
                if op.run_on_npu:
                    op.run_on_npu = False
                    op.cpu_reason = "has asymmetric weights (non-zero weight zero point)"
        return op

    def fixup_pool_strides(self, op: VOp) -> VOp:
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
    def supported_operator_check(self, op: VOp) -> VOp:
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

    def set_shapes(self, op: VOp) -> VOp:
        if op.run_on_npu and op.needs_shapes() and not (op.ifm_shapes or op.ofm_shapes):
            op.set_ifm_ofm_shapes()
        return op

    # === concatenation and split ========================================================================
    def rewrite_concat(self, op: VOp) -> None:
        if not op.run_on_npu or op.type not in CONCAT_TYPES:
            return
        ofm = op.ofm
        ofm.ops = []
        if op.type == "ConcatTFLite" and op.activation is not None:
            # The activation cannot be fused into the per-input copies: it becomes its own op.
            act = VOp(op.activation.op_type, op.name + op.activation.op_type, original_type=op.activation.op_type)
            act.activation = None
            op.activation = None
            inter = ofm.clone("_act_intermediate")
            act.set_output(ofm)
            act.add_input(inter)
            op.set_output(inter)
            act.set_ifm_ofm_shapes()
            ofm = inter
            ofm.ops = []
        axis_4d = 0
        if op.type == "Pack":
            axis = int(op.attrs["axis"])
            if axis < 0:
                axis = len(op.inputs[0].shape) + 1 + axis
            desired = op.inputs[0].shape[:axis] + [1] + op.inputs[0].shape[axis:]
            axis_4d = axis + (4 - len(desired))
            op.ifm_shapes = [Shape4D.from_list(desired) for _ in op.inputs]
            op.type = "PackReshaped"
            inputs = op.inputs
        else:
            inputs = list(op.inputs)
            axis = int(op.attrs.get("axis", 0))
        offset = 0
        for idx, inp in enumerate(inputs):
            if op.type != "PackReshaped":
                op.ifm_shapes[idx] = Shape4D.from_list(inp.shape)
                axis_4d = axis + (4 - len(inp.shape)) if axis >= 0 else axis
            write_offset = [0, 0, 0, 0]
            write_offset[axis_4d] = offset
            end = offset + op.ifm_shapes[idx].as_list()[axis_4d]
            self._concat_slice_writer(op, ofm, f"{op.name}{idx}_avgpool", inp, op.ifm_shapes[idx],
                                      Shape4D.from_list(write_offset))
            offset = end

    @staticmethod
    def _concat_slice_writer(concat: VOp, ofm: VTensor, name: str, ifm: VTensor, ifm_shape: Shape4D,
                             write_offset: Shape4D) -> VOp:
        """One AvgPool writing ``ifm`` into a slice of the concatenation's OFM."""
        pool = _avgpool_nop(name)
        pool.original_type = concat.type if concat.type != "Pad" else "ConcatTFLite"
        pool.tflite_op = concat.tflite_op
        pool.op_index = None
        pool.inputs = [ifm]
        pool.outputs = [ofm]
        pool.write_offset = write_offset
        pool.write_shape = ifm_shape
        ofm.ops.append(pool)
        pool.ifm_shapes.append(ifm_shape)
        pool.ofm_shapes.append(concat.ofm_shapes[0])
        pool.memory_function = "ConcatSliceWrite"
        return pool

    def rewrite_unpack_output(self, op: VOp) -> VOp:
        if op.run_on_npu and op.type == "Unpack":
            axis = int(op.attrs["axis"])
            if axis < 0:
                axis = len(op.inputs[0].shape) + 1 + axis
            op.type = "UnpackReshaped"
            desired = op.outputs[0].shape[:axis] + [1] + op.outputs[0].shape[axis:]
            op.attrs["split_axis_4D"] = [axis + (4 - len(desired))] * len(op.outputs)
            op.ofm_shapes = [Shape4D.from_list(desired) for _ in op.outputs]
        return op

    def rewrite_stridedslice_output(self, op: VOp) -> VOp:
        if not op.run_on_npu or op.type != "StridedSlice":
            return op
        new_axis_mask = int(op.attrs.get("new_axis_mask", 0))
        shrink_axis_mask = int(op.attrs.get("shrink_axis_mask", 0))
        if not shrink_axis_mask and not new_axis_mask:
            return op
        axis_4d = [0] * len(op.outputs)
        for idx, out in enumerate(op.outputs):
            shape = list(out.shape)
            axis = 0
            if shrink_axis_mask:
                mask = shrink_axis_mask
                while mask:
                    prev = mask
                    mask &= mask - 1
                    axis = int(math.log2(prev - mask))
                    shape = shape[:axis] + [1] + shape[axis:]
                op.attrs["shrink_axis_mask"] = 0
            else:
                mask = new_axis_mask
                while mask:
                    prev = mask
                    mask &= mask - 1
                    axis = int(math.log2(prev - mask))
                    shape = shape[:axis] + shape[axis + 1:]
                    mask >>= 1
                op.attrs["new_axis_mask"] = 0
            axis_4d[idx] = axis + (4 - len(shape)) if axis >= 0 else axis
            op.ofm_shapes[idx] = Shape4D.from_list(shape)
        op.attrs["split_axis_4D"] = axis_4d
        return op

    def nop_split_to_identity(self, op: VOp) -> VOp:
        if op.type == "Split" and op.attrs.get("num_splits") == 1:
            op.inputs = [i for i in op.inputs if i is not None and i.shape == op.outputs[0].shape]
            op.type = "Identity"
        return op

    def _split_geometry(self, op: VOp) -> tuple[VTensor, list[VTensor], int | None, list[int] | None,
                                                 list[int] | None, VTensor | None]:
        start = end = axis = strides = None
        if op.type == "Split":
            axis = int(np.asarray(op.inputs[0].values).reshape(-1)[0])
            inp = op.inputs[1]
        elif op.type == "SplitV":
            inp = op.inputs[0]
            axis = int(np.asarray(op.inputs[2].values).reshape(-1)[0])
        elif op.type == "Slice":
            inp, begin, size = op.inputs[:3]
            start = [0] * len(inp.shape)
            end = [0] * len(inp.shape)
            for i, b in enumerate(np.asarray(begin.values).reshape(-1)):
                start[i] = int(b)
                sz = int(np.asarray(size.values).reshape(-1)[i])
                end[i] = (inp.shape[i] if sz == -1 else sz + int(b))
        elif op.type == "StridedSlice":
            inp = op.inputs[0]
            strides = op.inputs[3]
            start, end = strided_slice_bounds(op)
        else:  # UnpackReshaped
            inp = op.inputs[0]
            axis = int(op.attrs["axis"])
        if axis is not None and axis < 0:
            axis += len(inp.shape)
        return inp, op.outputs, axis, start, end, strides

    def rewrite_split(self, tens: VTensor) -> VTensor:
        if len(tens.ops) != 1 or tens.ops[0].type not in SPLIT_TYPES or tens.ops[0].type == "Unpack":
            return tens
        split = tens.ops[0]
        if not split.run_on_npu:
            return tens
        inp, outputs, axis, start, end, strides = self._split_geometry(split)
        tens.ops = []
        read = VOp("SplitSliceRead", split.name, original_type=split.type, tflite_op=split.tflite_op)
        read.inputs = [inp]
        idx_of_out = 0
        if start is None or end is None:
            read_shape = None
        else:
            ifm_dims = split.ifm_shapes[0].as_list()
            e4 = Shape4D.from_list(end).as_list()
            s4 = Shape4D.from_list(start).as_list()
            read_shape = Shape4D(*[min(e, d) - s for e, s, d in zip(e4, s4, ifm_dims, strict=True)])
        if axis is not None:
            start = [0] * 4
            axis_list = split.attrs.get("split_axis_4D")
            for idx, out in enumerate(outputs):
                if axis_list is not None:
                    axis_4d = axis_list[idx]
                else:
                    split.ofm_shapes[idx] = Shape4D.from_list(out.shape)
                    axis_4d = axis + (4 - len(out.shape)) if axis >= 0 else axis
                if out is tens:
                    idx_of_out = idx
                    read_shape = split.ofm_shapes[idx]
                    break
                start[axis_4d] += split.ofm_shapes[idx].as_list()[axis_4d]
        start = list(start)[-4:]
        read.read_offsets[0] = Shape4D(*([0] * (4 - len(start)) + start))
        read.read_shapes[0] = read_shape
        read.run_on_npu = True
        read.set_output(tens)
        read.ifm_shapes.append(Shape4D.from_list(inp.shape))
        read.ofm_shapes.append(split.ofm_shapes[idx_of_out])
        if strides is not None:
            full = [1] * (4 - len(strides.values.reshape(-1))) + [int(v) for v in strides.values.reshape(-1)]
            read.ifm_stride_multiplier[0] = [1, full[1], full[2]]
        return tens

    def remove_split_slice_read(self, op: VOp) -> None:
        if op.type != "SplitSliceRead":
            return
        ofm = op.ofm

        def fits(cons: VOp) -> bool:
            if cons.ifm is ofm:
                cons_shape = cons.ifm_shapes[0].as_list()
            elif cons.type in BINARY_ELEMENTWISE and cons.ifm2 is ofm:
                cons_shape = cons.ifm_shapes[1].as_list()
            else:
                return False
            return all(r <= c for r, c in zip(op.ofm_shapes[0].as_list(), cons_shape, strict=True))

        movable = (
            op.ofm_shapes[0] == Shape4D.from_list(ofm.shape)
            and all(m == 1 for m in op.ifm_stride_multiplier[0])
            and all(
                c is not None and c.run_on_npu and c.type not in MEMORY_ONLY_TYPES and c.type != "Memcpy"
                and c.original_type not in ("Transpose", "SplitSliceRead") and c.prebuilt is None and fits(c)
                and not (c.type in BINARY_ELEMENTWISE and Shape4D.from_list(c.ofm.shape) != op.ofm_shapes[0])
                for c in ofm.consumer_list
            )
        )
        if movable:
            for cons in list(ofm.consumer_list):
                if cons.ifm is ofm:
                    cons.read_offsets[0] = op.read_offsets[0]
                    cons.read_shapes[0] = op.read_shapes[0]
                    cons.inputs[_ifm_index(cons, 0)] = op.ifm
                    cons.ifm_shapes[0] = op.ifm_shapes[0]
                elif cons.type in BINARY_ELEMENTWISE and cons.ifm2 is ofm:
                    cons.read_offsets[1] = op.read_offsets[0]
                    cons.read_shapes[1] = op.read_shapes[0]
                    cons.inputs[_ifm_index(cons, 1)] = op.ifm
                    cons.ifm_shapes[1] = op.ifm_shapes[0]
                ofm.consumer_list.remove(cons)
                op.ifm.consumer_list.append(cons)
            ofm.ops = []
            if op in op.ifm.consumer_list:
                op.ifm.consumer_list.remove(op)
        else:
            pool = _avgpool_nop(op.name + "_avgpool")
            pool.original_type = op.original_type
            pool.tflite_op = op.tflite_op
            pool.add_input(op.ifm)
            pool.outputs = [ofm]
            ofm.ops.remove(op)
            ofm.ops.append(pool)
            pool.ifm_shapes.append(op.ifm_shapes[0])
            pool.ofm_shapes.append(op.ofm_shapes[0])
            pool.read_offsets[0] = op.read_offsets[0]
            pool.read_shapes[0] = op.read_shapes[0]
            if any(m != 1 for m in op.ifm_stride_multiplier[0]):
                pool.ifm_stride_multiplier[0] = list(op.ifm_stride_multiplier[0])
            if op in op.ifm.consumer_list:
                op.ifm.consumer_list.remove(op)

    # === memory-only ops ================================================================================
    def bypass_memory_only(self, op: VOp) -> VOp:
        """RESHAPE/SQUEEZE/EXPAND_DIMS: make the producer write the OFM directly, or copy with a DMA when the
        IFM has other readers, comes from the CPU or a graph input, or is a MEAN's output."""
        if not op.run_on_npu or op.type not in MEMORY_ONLY_TYPES:
            return op
        ifm, ofm = op.ifm, op.ofm
        multiple = len(ifm.consumer_list) > 1
        cpu_produced = any(p is not None and not p.run_on_npu for p in ifm.ops)
        not_replaceable = any(p is not None and p.type == "Mean" for p in ifm.ops)
        if multiple or cpu_produced or not_replaceable:
            op.type = "Memcpy"
        else:
            ofm.ops = []
            for prev in ifm.ops:
                prev.outputs = [ofm]
                ofm.ops.append(prev)
        return op

    def remove_passthrough_tensor(self, tens: VTensor) -> VTensor:
        if len(tens.ops) == 1 and tens.ops[0].type == "Identity":
            return tens.ops[0].inputs[0]
        return tens

    # === operator rewrites ==============================================================================
    def _to_lut(self, op: VOp, values: list[int], lut_name: str) -> VOp:
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

    def convert_exp_rsqrt_to_lut(self, op: VOp) -> VOp:
        if op.type == "Exp" and op.ifm.dtype in (DataType.int8, DataType.int16):
            vals = luts.activation_lut("exp", op.ifm.quantization, op.ofm.quantization, op.ifm.dtype)
            return self._to_lut(op, vals, "exp")
        if op.type == "Rsqrt":
            vals = luts.lut16_values(lambda x: 1.0 / math.sqrt(x) if x > 0 else 0.0, op.ifm.quantization,
                                     op.ofm.quantization)
            res = self._to_lut(op, vals, "rsqrt")
            res.activation_lut = luts.lut_tensor(res.name + "_values", vals, DataType.int16)
            return res
        return op

    def convert_decomposable(self, op: VOp) -> VOp:
        """SOFTMAX, MEAN and UNIDIRECTIONAL_SEQUENCE_LSTM become chains of simpler NPU ops (decomposition
        modules); the returned op is the one now producing the original OFM."""
        if op.type not in ("Softmax", "Mean", "UnidirectionalSequenceLstm") or not op.run_on_npu:
            return op
        npu_ops = self.decompose(op)
        if not npu_ops:
            return op
        return splice_prebuilt(op, npu_ops)

    def convert_depthwise_to_conv(self, op: VOp) -> VOp:
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

    def convert_conv_to_fc(self, op: VOp) -> VOp:
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

    def convert_lrelu(self, op: VOp) -> VOp:
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
            vals = luts.activation_lut("lrelu", ifm.quantization, ofm.quantization, ifm.dtype, alpha)
            return self._to_lut(op, vals, "lrelu")
        return op

    def convert_avg_pool_to_conv2d(self, op: VOp) -> VOp:
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

    def fixup_strided_conv(self, op: VOp) -> VOp:
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
                and not _keeps_strides(self.arch):
            k_w, _ = op.kernel_size()
            padding_type = op.attrs.get("padding")
            if padding_type in (None, "EXPLICIT", "TILE"):
                return op
            cur_pad_x = needed_total_padding(ifm_shape.width, s_x, k_w)
            left, right = _filter_padding(padding_type, cur_pad_x, final_stride, factor, k_w, ifm_shape.width)
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

    def convert_hardswish_to_lut(self, op: VOp) -> VOp:
        if op.type == "HardSwish":
            vals = luts.activation_lut("hardswish", op.ifm.quantization, op.ofm.quantization, op.ifm.dtype)
            return self._to_lut(op, vals, "hardswish")
        return op

    def rewrite_fully_connected_input(self, op: VOp) -> VOp:
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

    def convert_batched_fc_shape(self, op: VOp) -> VOp:
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

    def fixup_conv2d_backprop(self, op: VOp) -> VOp:
        if op.type == "Conv2DBackpropInput":
            op.inputs[2], op.inputs[0] = op.inputs[0], op.inputs[2]
            op.type = "Conv2DBackpropInputSwitchedBias"
            s_x, s_y = op.stride()
            if s_x > 1 or s_y > 1:
                op.resampling_mode = ResamplingMode.TRANSPOSE
            op.attrs.update({"strides": (1, 1, 1, 1), "stride_w": 1, "stride_h": 1})
        return op

    def fixup_relus_with_differing_scaling(self, op: VOp) -> VOp:
        if op.run_on_npu and op.type in RELU_TYPES:
            ifm, ofm = op.inputs[0], op.outputs[0]
            if not scaling_equal(ifm, ofm):
                fused = _avgpool_nop(op.name + "_avgpool")
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

    def reorder_depthwise_weights(self, op: VOp) -> VOp:
        if op.type in DEPTHWISE_TYPES:
            w = op.inputs[1]
            if not getattr(w, "_dw_reordered", False):
                w.values = np.transpose(np.asarray(w.values), (0, 1, 3, 2))
                w.shape = list(w.values.shape)
                w._dw_reordered = True  # type: ignore[attr-defined]
        return op

    def fixup_resize(self, op: VOp) -> VOp:
        if op.type not in ("ResizeBilinear", "ResizeNearestNeighbor") or not op.run_on_npu:
            return op
        if op.ifm_shapes[0] == op.ofm_shapes[0]:
            op.inputs = op.inputs[:1]
            op.type = "Identity"
            return op
        if op.ifm_shapes[0].height == 1 and op.ifm_shapes[0].width == 1:
            return self._resize_1x1_to_add(op)
        if op.type == "ResizeBilinear" and op.attrs.get("half_pixel_centers", False):
            return self._resize_bilinear_hpc(op)
        return self._resize_to_upscale_and_pool(op)

    def _resize_1x1_to_add(self, op: VOp) -> VOp:
        op.type = "Add"
        op.name = op.name + "_add"
        shape = op.ofm_shapes[0].as_list()
        quant = Quantization(scale=(1.0,), zero_point=(0,), min=(0.0,), max=(255.0,))
        zeros = const_tensor(op.inputs[1].name + "_add", shape, op.inputs[0].dtype, np.zeros(shape), quant)
        op.inputs = [zeros, op.inputs[0]]
        zeros.consumer_list.append(op)
        op.set_ifm_ofm_shapes()
        return op

    def _resize_to_upscale_and_pool(self, op: VOp) -> VOp:
        """Repeated x2 nearest-neighbour upscaling 1x1 AvgPools, then a final pool (or depthwise select)."""
        outputs = op.outputs
        orig_ofm_shape = op.ofm_shapes[0]
        op.attrs.update({"strides": (1, 1, 1, 1), "ksize": (1, 1, 1, 1), "padding": "SAME"})
        op.resampling_mode = ResamplingMode.NEAREST
        ifm_h, ifm_w = op.ifm_shapes[0].height, op.ifm_shapes[0].width
        ofm_h, ofm_w = op.ofm_shapes[0].height, op.ofm_shapes[0].width
        factor = int(op.attrs.get("upscale_factor") or max(ofm_h // max(ifm_h, 1), ofm_w // max(ifm_w, 1)))
        up_h = 1 if ofm_h == ifm_h == 1 else factor
        up_w = 1 if ofm_w == ifm_w == 1 else factor
        n = int(np.log2(factor)) if factor > 0 else 0
        up_shape = [ifm_h, ifm_w]
        pre = op
        scaled = op
        for count in range(n - 1):
            if count > 0:
                scaled = _clone_op(op, f"_{count}")
                scaled.inputs[0] = pre.outputs[0]
            up_shape[0] *= 2 if up_h != 1 else 1
            up_shape[1] *= 2 if up_w != 1 else 1
            shape = op.ofm_shapes[0].as_list()
            shape[1:3] = up_shape
            out = VTensor(name=f"{op.outputs[0].name}_{count}", shape=shape, dtype=op.ifm.dtype,
                          quantization=op.outputs[0].quantization)
            scaled.set_output(out)
            scaled.write_shape = Shape4D.from_list(shape)
            scaled.write_offset = Shape4D(0, 0, 0, 0)
            pre = scaled
            scaled.set_ifm_ofm_shapes()
        if n > 1:
            scaled = _clone_op(op, f"_{n - 1}")
            scaled.inputs[0] = pre.outputs[0]
        if scaled.original_type == "ResizeBilinear":
            if scaled.attrs.get("align_corners"):
                scaled.attrs["padding"] = "VALID"
            else:
                scaled.attrs["padding"] = "EXPLICIT"
                scaled.attrs["explicit_padding"] = (0, 0, up_h - 1, up_w - 1)
            scaled.attrs["ksize"] = (1, up_h, up_w, 1)
        elif scaled.attrs.get("align_corners"):
            scaled = self._resize_nn_ac_to_depthwise(scaled, up_h, up_w)
        scaled.write_shape = orig_ofm_shape
        scaled.write_offset = Shape4D(0, 0, 0, 0)
        scaled.outputs = outputs
        outputs[0].ops = [scaled]
        scaled.set_ifm_ofm_shapes()
        return op

    def _resize_nn_ac_to_depthwise(self, op: VOp, up_h: int, up_w: int) -> VOp:
        depth = op.ofm.shape[-1]
        op.type = "DepthwiseConv2DBias"
        op.attrs.update({"padding": "VALID", "stride_h": 1, "stride_w": 1, "strides": (1, 1, 1, 1),
                         "depth_multiplier": 1, "channel_multiplier": 1, "dilation_h_factor": 1,
                         "dilation_w_factor": 1, "dilation": (1, 1, 1, 1)})
        op.activation = None
        op.resampling_mode = ResamplingMode.NEAREST
        shape = [up_h, up_w, depth, depth]
        vals = np.zeros(shape)
        vals[up_h // 2, up_w // 2, :, :] = 1
        quant = Quantization(scale=(1.0,), zero_point=(0,))
        op.inputs = [op.inputs[0], const_tensor("weights", shape, op.ofm.dtype, vals, quant), None]
        op._dw_reordered = True  # type: ignore[attr-defined]
        op.inputs[1]._dw_reordered = True  # type: ignore[attr-defined]
        self.fixup_bias_tensors(op, DataType.int32)
        op.set_ifm_ofm_shapes()
        return op

    def _resize_bilinear_hpc(self, op: VOp) -> VOp:
        """Half-pixel-centre x2 bilinear resize: a 1x1 AvgPool copy of the IFM, then four 2x2 depthwise
        convolutions (one per output phase: TL, TR, BL, BR) whose outputs interleave in the OFM through a
        doubled OFM stride and a per-phase tile base offset; each pads by one edge value on two sides."""
        ifm, ofm = op.ifm, op.ofm
        n, h, w, c = ifm.shape
        _, oh, ow, _ = ofm.shape
        kernels = _bilinear_phase_kernels(h, w, oh, ow)
        ofm.ops = []
        elem_size = ofm.dtype.size_in_bytes
        inter = VTensor(name="intermediate_tens", shape=list(ifm.shape), dtype=ifm.dtype,
                        quantization=ofm.quantization)
        op.name = "rb_init_avgpool"
        op.type = "AvgPool"
        op.attrs.update({"padding": "VALID", "stride_w": 1, "stride_h": 1, "filter_width": 1, "filter_height": 1,
                         "strides": (1, 1, 1, 1), "ksize": (1, 1, 1, 1)})
        op.add_input(ifm)  # Vela appends the IFM again after the size operand (it then reads it twice)
        op.set_output(inter)
        op.set_ifm_ofm_shapes()
        directions = [(1, 1, 0, 0), (1, 0, 0, 1), (0, 1, 1, 0), (0, 0, 1, 1)]
        for i in (0, 1):
            for j in (0, 1):
                index = i * 2 + j
                dw = VOp("DepthwiseConv2DBias", f"depthwise_conv_{index}", original_type="ResizeBilinear",
                         tflite_op=op.tflite_op)
                dw.attrs = {"padding": "TILE", "stride_h": 1, "stride_w": 1, "strides": (1, 1, 1, 1),
                            "depth_multiplier": 1, "channel_multiplier": 1, "dilation_h_factor": 1,
                            "dilation_w_factor": 1, "dilation": (1, 1, 1, 1), "explicit_padding": directions[index],
                            "ofm_stride_multiplier": (1, 2, 2),
                            "tile_base_offset_ofm": (i * ow + j) * c * elem_size}
                dw.write_shape = Shape4D(n, h, w, c)
                dw.write_offset = Shape4D(0, 0, 0, 0)
                dw.rounding_mode = "AwayZero"
                ofm.ops.append(dw)
                dw.outputs = [ofm]
                shape = [2, 2, 1, c]
                values = np.dstack([kernels[index]] * c).reshape(shape)
                weights = const_tensor("weights", shape, inter.dtype, values,
                                       Quantization(scale=(1.0 / 16,), zero_point=(0,)))
                weights._dw_reordered = True  # type: ignore[attr-defined]
                dw.add_input(inter)
                dw.add_input(weights)
                dw.inputs.append(None)
                self.fixup_bias_tensors(dw, DataType.int32)
                dw.set_ifm_ofm_shapes()
        return op

    def fixup_bias_tensors(self, op: VOp, dtype: DataType | None = None) -> VOp:
        if op.needs_bias() and op.bias is None and op.inputs[1] is not None:
            n = op.inputs[1].shape[-1]
            if dtype is None:
                dtype = DataType.int32 if op.ifm.dtype != DataType.int16 else DataType.int64
            bias = const_tensor(op.name + "_bias", [n], dtype, [0] * n)
            idx = {"Conv2DBackpropInputSwitchedBias": 3, "Conv2DBackpropInput": 3}.get(op.type, 2)
            while len(op.inputs) < idx:
                op.inputs.append(None)
            if idx < len(op.inputs):
                op.set_input(bias, idx)
            else:
                op.add_input(bias)
        return op

    def convert_tanh_sigmoid_to_lut(self, op: VOp) -> VOp:
        if op.type in ("Sigmoid", "Tanh"):
            ifm, ofm = op.ifm, op.ofm
            if ifm.dtype != ofm.dtype or ifm.dtype not in (DataType.int8, DataType.uint8):
                return op
            kind = "sigmoid" if op.type == "Sigmoid" else "tanh"
            vals = luts.activation_lut(kind, ifm.quantization, ofm.quantization, ifm.dtype)
            return self._to_lut(op, vals, kind)
        return op

    def convert_quantize(self, op: VOp) -> VOp:
        if op.type == "Quantize":
            nop = _avgpool_nop(op.name + "_avgpool")
            op.type = "AvgPool"
            op.attrs = dict(nop.attrs)
        return op

    def replace_pad_by_hw_pad(self, op: VOp) -> VOp:
        """Fold a preceding PAD into the convolution's/pool's hardware padding where that is exact."""
        if not ((op.type in CONV_TYPES or op.type in DEPTHWISE_TYPES or op.type == "AvgPool")
                and op.type not in ("Conv2DBackpropInput", "Conv2DBackpropInputSwitchedBias")
                and op.run_on_npu and op.attrs.get("padding") == "VALID"):
            return op
        pad = op.ifm.ops[0] if op.ifm.ops else None
        if pad is None or pad.type != "Pad" or not pad.run_on_npu:
            return op
        if pad.ifm.dtype != pad.ofm.dtype or not scaling_equal(pad.ofm, pad.ifm):
            return op
        top, left, bottom, right, near, far = pad_values(pad.inputs[1].values)
        if near > 0 or far > 0:
            return op
        k_w0, k_h0 = op.kernel_size()
        d_w, d_h = op.dilation()
        k_w, k_h = d_w * (k_w0 - 1) + 1, d_h * (k_h0 - 1) + 1
        s_x, s_y = op.stride()
        if max(left, right) > k_w // 2 or max(top, bottom) > k_h // 2:
            return op
        if not _leading_pad_ok(top, s_y, k_h) or not _leading_pad_ok(left, s_x, k_w):
            return op
        if op.type == "AvgPool":
            for p, k in ((left, k_w), (right, k_w), (top, k_h), (bottom, k_h)):
                if p not in (0, k // 2):
                    return op
            k_w, k_h = k_w0, k_h0
            ifm = op.ifm
            others = op.inputs[1:]
            shape = [k_h, k_w, 1, op.ofm.shape[-1]]
            quant = Quantization(scale=(1.0 / (k_w * k_h),), zero_point=(0,), min=(0.0,), max=(255.0,))
            weights = const_tensor(op.name + "_weights", shape, op.ifm.dtype, np.full(shape, 1), quant)
            weights._dw_reordered = True  # type: ignore[attr-defined]
            op.type = "DepthwiseConv2DBias"
            op.inputs = []
            op.add_input(ifm)
            op.add_input(weights)
            if op.ifm.dtype == DataType.uint8:
                op.rounding_mode = "HalfUp"
                op.inputs.append(None)
                self.fixup_bias_tensors(op, DataType.int32)
            else:
                op.rounding_mode = "AwayZero"
                n = shape[-1]
                zp = _zp(op.ifm)
                op.add_input(const_tensor(op.name + "_bias", [n], DataType.int32, [zp * k_h * k_w] * n))
            op.inputs.extend(others)
        op.set_input(pad.ifm, 0)
        op.attrs["padding"] = "EXPLICIT"
        op.attrs["explicit_padding"] = (top, left, bottom, right)  # HW padding
        op.set_ifm_ofm_shapes()
        return op

    def fixup_dilation_gt2(self, op: VOp) -> VOp:
        if op.type not in ("Conv2DBias", "DepthwiseConv2DBias"):
            return op
        d_w, d_h = op.dilation()
        if d_w <= 2 and d_h <= 2:
            return op
        k_w, k_h = op.kernel_size()
        w = op.weights
        ic, oc = w.shape[-2], w.shape[-1]
        hw_h = 1 if d_h & 1 else 2
        hw_w = 1 if d_w & 1 else 2
        sc_h, sc_w = d_h // hw_h, d_w // hw_w
        new_h, new_w = (k_h - 1) * sc_h + 1, (k_w - 1) * sc_w + 1
        zp = w.quantization.zero_point[0] if w.quantization.zero_point else 0
        vals = np.zeros([new_h, new_w, ic, oc], dtype=np.asarray(w.values).dtype) + zp
        for y in range(k_h):
            for x in range(k_w):
                vals[y * sc_h, x * sc_w] = np.asarray(w.values)[y, x]
        w.values = vals
        w.shape = list(vals.shape)
        op.attrs["dilation"] = (1, hw_h, hw_w, 1)
        op.attrs["dilation_h_factor"] = hw_h
        op.attrs["dilation_w_factor"] = hw_w
        return op

    # === late rewrites ==================================================================================
    def fuse_activation_with_prev(self, op: VOp) -> VOp:
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

    def convert_pad(self, op: VOp) -> VOp:
        """A PAD that could not become hardware padding: one AvgPool copies the IFM into the middle of the
        OFM and up to six more write the constant borders."""
        if op.type != "Pad" or not op.run_on_npu:
            return op
        top, left, bottom, right, near, far = pad_values(op.inputs[1].values)
        ifm, ofm = op.ifm, op.ofm
        ifm_shape = op.ifm_shapes[0]
        ofm.ops = []
        main = self._concat_slice_writer(op, ofm, op.name + "_main", ifm, ifm_shape,
                                         Shape4D(0, top, left, near))
        main.activation = op.activation
        quant = ofm.quantization
        pad_value = _zp(ofm)
        cur = ifm_shape

        def border(suffix: str, shape: Shape4D, offset: Shape4D) -> None:
            zeros = const_tensor(op.name + suffix, shape.as_list(), ofm.dtype, [pad_value] * shape.elements(),
                                 quant)
            self._concat_slice_writer(op, ofm, op.name + suffix, zeros, shape, offset)

        if top > 0:
            border("_top", cur.with_height(top), Shape4D(0, 0, left, near))
            cur = cur.with_height(cur.height + top)
        if bottom > 0:
            border("_bottom", cur.with_height(bottom), Shape4D(0, cur.height, left, near))
            cur = cur.with_height(cur.height + bottom)
        if left > 0:
            border("_left", cur.with_width(left), Shape4D(0, 0, 0, near))
            cur = cur.with_width(cur.width + left)
        if right > 0:
            border("_right", cur.with_width(right), Shape4D(0, 0, cur.width, near))
            cur = cur.with_width(cur.width + right)
        if near > 0:
            border("_near", cur.with_depth(near), Shape4D(0, 0, 0, 0))
            cur = cur.with_depth(cur.depth + near)
        if far > 0:
            border("_far", cur.with_depth(far), Shape4D(0, 0, 0, cur.depth))
            cur = cur.with_depth(cur.depth + far)
        op.type = "ConcatTFLite"
        return main

    def add_padding_fields(self, op: VOp) -> VOp:
        if not op.run_on_npu or "padding" not in op.attrs:
            return op
        ifm_shape, ofm_shape = op.ifm_shapes[0], op.ofm_shapes[0]
        if op.type in CONV_TYPES or op.type in DEPTHWISE_TYPES:
            kernel_hw = (op.inputs[1].shape[0], op.inputs[1].shape[1])
        elif block_kind(op.type) in ("Pooling", "ReduceSum"):
            kernel_hw = (op.attrs["ksize"][1], op.attrs["ksize"][2])
        else:
            return op
        if op.type == "Conv2DBackpropInputSwitchedBias" and op.resampling_mode == ResamplingMode.TRANSPOSE:
            padding = upscaled_padding(op.attrs["padding"], kernel_hw, op.attrs["strides"], ifm_shape,
                                       ofm_shape.height // ifm_shape.height, ofm_shape.width // ifm_shape.width)
            skirt: tuple[int, ...] = padding
        else:
            padding, skirt = padding_and_skirt(op.attrs["padding"], op.kernel_size(), op.stride(), op.dilation(),
                                               ifm_shape, op.attrs.get("explicit_padding"))
        op.attrs["explicit_padding"] = padding
        op.attrs["skirt"] = skirt
        return op


# --- helpers used by the rewrites -----------------------------------------------------------------------

def _zp(t: VTensor) -> int:
    return int(t.quantization.zero_point[0]) if t.quantization.zero_point else 0


def _keeps_strides(arch: object) -> bool:
    """Vela's default core does not fold a convolution's stride into depth; priced as it prices (``--estimator
    vela-default``), the graph keeps the stride too, so its passes are the ones that core schedules."""
    return str(getattr(arch, "estimator", "")) == "vela-default"


def _ifm_index(op: VOp, which: int) -> int:
    from npusched.lowering.netgraph import INDICES
    return INDICES[op.type][0][which]


def _leading_pad_ok(pad: int, stride: int, kernel: int) -> bool:
    half = kernel // 2
    return pad == half or half <= stride or pad % stride == 0


def pad_values(padding: Any) -> tuple[int, int, int, int, int, int]:
    """(top, left, bottom, right, near, far) from a PAD's [[before, after], ...] constant."""
    p = np.asarray(padding)
    return (int(p[-3][0]), int(p[-2][0]), int(p[-3][1]), int(p[-2][1]), int(p[-1][0]), int(p[-1][1]))


def _filter_padding(padding_type: str, cur_pad_x: int, post_stride: int, factor: int, filter_w: int,
                    ifm_w: int) -> tuple[int, int]:
    """Zero columns added to a strided convolution's filter so that folding width into depth is exact."""
    size = 0
    left, right = 0, 0
    if padding_type and padding_type != "VALID":
        pre_stride = post_stride * factor
        post_ifm_w = ifm_w // factor
        if ifm_w % pre_stride == 0:
            expected = cur_pad_x + post_stride
        else:
            expected = cur_pad_x + (post_ifm_w % post_stride)
        size = expected * factor - filter_w
        if cur_pad_x == 0:
            left = size // 2
        else:
            left = size // cur_pad_x * (cur_pad_x // 2)
        right = size - left
    if filter_w % factor != 0 and (size == 0 or cur_pad_x == 0):
        left, right = 0, factor - (filter_w % factor)
    return left, right


def _bilinear_phase_kernels(in_h: int, in_w: int, out_h: int, out_w: int) -> list[np.ndarray]:
    """2x2 interpolation weights (scaled by 16) for the four output phases of a half-pixel x2 resize."""
    def sample(index: int, in_size: int, out_size: int) -> tuple[float, float]:
        pos = (index + 0.5) * (in_size / out_size) - 0.5
        return pos, max(np.floor(pos), 0)

    kernels = []
    for y in (1, 2):
        for x in (1, 2):
            sy, ly = sample(y, in_h, out_h)
            sx, lx = sample(x, in_w, out_w)
            fy, fx = sy - ly, sx - lx
            k = np.zeros((2, 2))
            k[1, 1] = (1 - fy) * (1 - fx)
            k[0, 1] = fy * (1 - fx)
            k[1, 0] = (1 - fy) * fx
            k[0, 0] = fy * fx
            kernels.append(k * 16)
    return kernels


def _clone_op(op: VOp, suffix: str) -> VOp:
    res = VOp(op.type, op.name + suffix, inputs=list(op.inputs), outputs=list(op.outputs), attrs=dict(op.attrs),
              run_on_npu=op.run_on_npu, original_type=op.original_type, tflite_op=op.tflite_op,
              activation=op.activation, resampling_mode=op.resampling_mode, rounding_mode=op.rounding_mode,
              read_offsets=list(op.read_offsets), read_shapes=list(op.read_shapes),
              write_offset=op.write_offset, write_shape=op.write_shape, memory_function=op.memory_function)
    return res


def strided_slice_bounds(op: VOp) -> tuple[list[int], list[int]]:
    """Begin/end of a STRIDED_SLICE after applying its begin/end masks (no ellipsis/new-axis support)."""
    inp = op.inputs[0]
    begin = [int(v) for v in np.asarray(op.inputs[1].values).reshape(-1)]
    end = [int(v) for v in np.asarray(op.inputs[2].values).reshape(-1)]
    strides = [int(v) for v in np.asarray(op.inputs[3].values).reshape(-1)]
    begin_mask = int(op.attrs.get("begin_mask", 0))
    end_mask = int(op.attrs.get("end_mask", 0))
    shrink = int(op.attrs.get("offset_shrink_mask", op.attrs.get("shrink_axis_mask", 0)))
    out_b, out_e = [], []
    for i, dim in enumerate(inp.shape):
        b = begin[i] if i < len(begin) else 0
        e = end[i] if i < len(end) else dim
        s = strides[i] if i < len(strides) else 1
        if begin_mask & (1 << i):
            b = 0 if s > 0 else dim - 1
        if end_mask & (1 << i):
            e = dim if s > 0 else -1
        if b < 0:
            b += dim
        if e < 0 and not (end_mask & (1 << i)):
            e += dim
        if shrink & (1 << i):
            e = b + 1
        out_b.append(max(0, min(b, dim)))
        out_e.append(max(0, min(e, dim)))
    return out_b, out_e


def splice_prebuilt(op: VOp, npu_ops: list[NpuOp]) -> VOp:
    """Replace ``op`` by already-lowered NpuOps, linking their feature maps to the working graph's tensors.

    Feature maps equal to the op's own (current) inputs/outputs map to those tensors; any other non-constant
    feature map is an intermediate created by the decomposition; constants get a Const producer.
    """
    known: dict[FeatureMap, VTensor] = {}
    for t in list(op.inputs) + list(op.outputs):
        if t is not None:
            known.setdefault(t.feature_map(), t)
    made: dict[FeatureMap, VTensor] = {}

    def tensor_for(fm: FeatureMap) -> VTensor:
        if fm in known:
            return known[fm]
        if fm in made:
            return made[fm]
        t = VTensor(name=fm.name, shape=list(fm.orig_shape) if fm.orig_shape is not None else fm.shape.as_list(),
                    dtype=fm.dtype, quantization=fm.quantization, uid=fm.uid, fm_override=fm)
        if fm.constant is not None:
            t.values = np.asarray(fm.constant.values)
            t.const_override = fm.constant
            VOp("Const", fm.name).set_output(t)
        made[fm] = t
        return t

    ofm_tensor = op.ofm
    last: VOp | None = None
    for nop in npu_ops:
        inputs = [tensor_for(nop.ifm.tensor)]
        if nop.ifm2 is not None:
            inputs.append(tensor_for(nop.ifm2.tensor))
        out = tensor_for(nop.ofm.tensor)
        vop = VOp(nop.op_type, nop.name, inputs=inputs, outputs=[out], run_on_npu=True,
                  original_type=op.original_type, tflite_op=op.tflite_op, prebuilt=nop)
        if nop.op_type in BINARY_ELEMENTWISE or nop.ifm2 is not None:
            vop.ifm_shapes = [nop.ifm.shape] + ([nop.ifm2.shape] if nop.ifm2 is not None else [])
        else:
            vop.ifm_shapes = [nop.ifm.shape]
        vop.ofm_shapes = [nop.ofm.shape]
        vop.read_offsets = [nop.ifm.offset, nop.ifm2.offset if nop.ifm2 is not None else None]
        vop.read_shapes = [nop.ifm.access_shape, nop.ifm2.access_shape if nop.ifm2 is not None else None]
        vop.write_offset, vop.write_shape = nop.ofm.offset, nop.ofm.access_shape
        if out is ofm_tensor:
            # Several ops may write slices of the final OFM; keep them all as its producers.
            out.ops = [o for o in out.ops if o.prebuilt is not None] + [vop]
        else:
            out.ops = [vop]
        for t in inputs:
            t.consumer_list.append(vop)
        if out is ofm_tensor:
            last = vop
    if last is None:
        raise ValueError(f"decomposition of {op.name!r} does not write its output")
    return last
