"""Rewrites that change how an operator reads its input: resize as upscale and pool or depthwise, explicit
padding folded into the hardware's, large dilations. A mixin of ``GraphRewriter``."""

from __future__ import annotations

import numpy as np

from npusched.ir import (
    NPU_MAX_DILATION,
    DataType,
    Quantization,
    ResamplingMode,
    Shape4D,
)
from npusched.lowering.netgraph import (
    CONV_TYPES,
    DEPTHWISE_TYPES,
    WorkingOp,
    WorkingTensor,
    block_kind,
    const_tensor,
)
from npusched.lowering.rewrite_helpers import (
    avgpool_nop,
    bilinear_phase_kernels,
    clone_op,
    concat_slice_writer,
    leading_pad_ok,
    pad_values,
    padding_and_skirt,
    scaling_equal,
    upscaled_padding,
    without_padding_only_taps,
    zero_point,
)
from npusched.target.arch import ArchitectureFeatures


class ShapeRewrites:
    """Resize, padding and dilation rewrites."""

    arch: ArchitectureFeatures

    def fixup_resize(self, op: WorkingOp) -> WorkingOp:
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

    def _resize_1x1_to_add(self, op: WorkingOp) -> WorkingOp:
        op.type = "Add"
        op.name = op.name + "_add"
        shape = op.ofm_shapes[0].as_list()
        quant = Quantization(scale=(1.0,), zero_point=(0,), min=(0.0,), max=(255.0,))
        zeros = const_tensor(op.inputs[1].name + "_add", shape, op.inputs[0].dtype, np.zeros(shape), quant)
        op.inputs = [zeros, op.inputs[0]]
        zeros.consumer_list.append(op)
        op.set_ifm_ofm_shapes()
        return op

    def _resize_to_upscale_and_pool(self, op: WorkingOp) -> WorkingOp:
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
                scaled = clone_op(op, f"_{count}")
                scaled.inputs[0] = pre.outputs[0]
            up_shape[0] *= 2 if up_h != 1 else 1
            up_shape[1] *= 2 if up_w != 1 else 1
            shape = op.ofm_shapes[0].as_list()
            shape[1:3] = up_shape
            out = WorkingTensor(name=f"{op.outputs[0].name}_{count}", shape=shape, dtype=op.ifm.dtype,
                          quantization=op.outputs[0].quantization)
            scaled.set_output(out)
            scaled.write_shape = Shape4D.from_list(shape)
            scaled.write_offset = Shape4D(0, 0, 0, 0)
            pre = scaled
            scaled.set_ifm_ofm_shapes()
        if n > 1:
            scaled = clone_op(op, f"_{n - 1}")
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

    def _resize_nn_ac_to_depthwise(self, op: WorkingOp, up_h: int, up_w: int) -> WorkingOp:
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

    def _resize_bilinear_hpc(self, op: WorkingOp) -> WorkingOp:
        """Half-pixel-centre x2 bilinear resize: a 1x1 AvgPool copy of the IFM, then four 2x2 depthwise
        convolutions (one per output phase: TL, TR, BL, BR) whose outputs interleave in the OFM through a
        doubled OFM stride and a per-phase tile base offset; each pads by one edge value on two sides."""
        ifm, ofm = op.ifm, op.ofm
        n, h, w, c = ifm.shape
        _, oh, ow, _ = ofm.shape
        kernels = bilinear_phase_kernels(h, w, oh, ow)
        ofm.ops = []
        elem_size = ofm.dtype.size_in_bytes
        inter = WorkingTensor(name="intermediate_tens", shape=list(ifm.shape), dtype=ifm.dtype,
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
                dw = WorkingOp("DepthwiseConv2DBias", f"depthwise_conv_{index}", original_type="ResizeBilinear",
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

    def replace_pad_by_hw_pad(self, op: WorkingOp) -> WorkingOp:
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
        if not leading_pad_ok(top, s_y, k_h) or not leading_pad_ok(left, s_x, k_w):
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
                zp = zero_point(op.ifm)
                op.add_input(const_tensor(op.name + "_bias", [n], DataType.int32, [zp * k_h * k_w] * n))
            op.inputs.extend(others)
        op.set_input(pad.ifm, 0)
        op.attrs["padding"] = "EXPLICIT"
        op.attrs["explicit_padding"] = (top, left, bottom, right)  # HW padding
        op.set_ifm_ofm_shapes()
        return op

    @staticmethod
    def fixup_transpose(op: WorkingOp) -> WorkingOp:
        """TRANSPOSE as a 1x1 AvgPool that reads the IFM as it is and writes the OFM with H and W strides swapped
        (so the OFM must stay linear): the pass works on a 4-D view where the swapped axes are H and W, and its
        OFM shape is that IFM view. The permutations are those the NPU rules let through."""
        if op.type != "Transpose":
            return op
        op.name = f"{op.name}_avgpool"
        op.type = "AvgPool"
        op.attrs.update(padding="VALID", stride_w=1, stride_h=1, filter_width=1, filter_height=1,
                        strides=(1, 1, 1, 1), ksize=(1, 1, 1, 1))
        op.ofm.force_linear = True
        shape = op.ifm.shape
        perm = [int(p) for p in np.asarray(op.inputs[1].values).reshape(-1)]
        if len(shape) == 2:
            op.ifm_shapes[0] = Shape4D(1, shape[0], shape[1], 1)
        elif len(shape) == 3:
            if perm[0] == 1 and perm[1] == 0:
                op.ifm_shapes[0] = Shape4D(1, shape[0], shape[1], shape[2])
            elif shape[0] == 1 and perm[1] == 2 and perm[2] == 1:
                op.ifm_shapes[0] = Shape4D(1, shape[1], shape[2], 1)
            elif shape[1] == 1 and perm[0] == 2 and perm[2] == 0:
                op.ifm_shapes[0] = Shape4D(1, shape[0], shape[2], 1)
        elif len(shape) == 4 and not (perm[1] == 2 and perm[2] == 1):
            if shape[1] == 1 and perm[2] == 3 and perm[3] == 2:
                op.ifm_shapes[0] = Shape4D(1, shape[2], shape[3], 1)
            elif shape[2] == 1 and perm[1] == 3 and perm[3] == 1:
                op.ifm_shapes[0] = Shape4D(1, shape[1], shape[3], 1)
        op.ofm_shapes[0] = op.ifm_shapes[0]
        return op

    def fixup_dilation_gt2(self, op: WorkingOp) -> WorkingOp:
        if op.type not in ("Conv2DBias", "DepthwiseConv2DBias"):
            return op
        d_w, d_h = op.dilation()
        if d_w <= NPU_MAX_DILATION and d_h <= NPU_MAX_DILATION:
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

    def convert_mirror_pad(self, op: WorkingOp) -> WorkingOp:
        """MIRROR_PAD as Vela makes it: one AvgPool copies the IFM into the middle rows of a map as tall as the OFM,
        one per padded edge reads the rows next to that edge (past it when reflecting) and writes them upwards or
        downwards (a negative OFM height stride) above or below; when the width is padded too, two more read that
        map's edge columns and write them leftwards or rightwards into the OFM, and a last AvgPool copies the map
        into the OFM's middle columns. The negative strides need linear (NHWC) maps."""
        if op.type != "MirrorPad" or not op.run_on_npu:
            return op
        top, left, bottom, right, _, _ = pad_values(op.ifm2.values)
        symmetric = op.attrs.get("mode") in ("SYMMETRIC", 1)
        ifm, ofm = op.ifm, op.ofm
        ofm.ops = []
        element_bytes = 2 if ofm.dtype == DataType.int16 else 1
        n, h, w, c = Shape4D.from_list(ifm.shape).as_list()
        _, out_h, out_w, _ = Shape4D.from_list(ofm.shape).as_list()
        tall = h + top + bottom
        ofm.force_linear = True
        columns = bool(left or right)
        middle = ofm
        if columns:
            middle = WorkingTensor(name="intermediate_ofm_tens", shape=[n, tall, w, c], dtype=ofm.dtype,
                                   quantization=ofm.quantization, force_linear=True)

        def copy(name: str, source: WorkingTensor, target: WorkingTensor, shape: Shape4D,
                 write_offset: Shape4D) -> WorkingOp:
            pool = avgpool_nop(name)
            pool.tflite_op = op.tflite_op
            pool.write_shape, pool.write_offset = shape, write_offset
            pool.read_shapes[0], pool.read_offsets[0] = shape, Shape4D(0, 0, 0, 0)
            pool.add_input(source)
            target.ops.append(pool)
            pool.outputs = [target]
            pool.set_ifm_ofm_shapes()
            return pool

        copy("init_pool", ifm, middle, Shape4D(n, h, w, c), Shape4D(0, top, 0, 0))
        skip = 0 if symmetric else 1  # reflecting leaves the edge row or column itself out
        edges = (  # (amount, read shape, read offset, tile base offset, stride multiplier C/H/W, reads the IFM)
            (top, Shape4D(n, top, w, c), Shape4D(0, skip, 0, 0), (top - 1) * w * c, (1, -1, 1), True),
            (bottom, Shape4D(n, bottom, w, c), Shape4D(0, h - bottom - skip, 0, 0), (out_h - 1) * w * c,
             (1, -1, 1), True),
            (left, Shape4D(n, tall, left, c), Shape4D(0, 0, skip, 0), (left - 1) * c, (1, 1, -1), False),
            (right, Shape4D(n, tall, right, c), Shape4D(0, 0, w - right - skip, 0), (out_w - 1) * c, (1, 1, -1),
             False),
        )
        pool = avgpool_nop("pad_pool")
        pool.tflite_op = op.tflite_op
        for i, (amount, shape, read_offset, base, strides, from_ifm) in enumerate(edges):
            pool.inputs = []
            if not amount:
                continue
            pool.write_shape, pool.read_shapes[0], pool.read_offsets[0] = shape, shape, read_offset
            pool.write_offset = Shape4D(0, 0, 0, 0)
            pool.attrs["tile_base_offset_ofm"] = base * element_bytes
            pool.attrs["ofm_stride_multiplier"] = strides
            pool.add_input(ifm if from_ifm else middle)
            target = middle if from_ifm else ofm
            target.ops.append(pool)
            pool.outputs = [target]
            pool.set_ifm_ofm_shapes()
            pool = clone_op(pool, f"_{i}")
        if columns:
            copy("avg_pool_final_copy", middle, ofm, Shape4D(n, tall, w, c), Shape4D(0, 0, left, 0))
        return op

    def convert_pad(self, op: WorkingOp) -> WorkingOp:
        """A PAD that could not become hardware padding: one AvgPool copies the IFM into the middle of the
        OFM and up to six more write the constant borders."""
        if op.type != "Pad" or not op.run_on_npu:
            return op
        top, left, bottom, right, near, far = pad_values(op.inputs[1].values)
        ifm, ofm = op.ifm, op.ofm
        ifm_shape = op.ifm_shapes[0]
        ofm.ops = []
        main = concat_slice_writer(op, ofm, op.name + "_main", ifm, ifm_shape,
                                         Shape4D(0, top, left, near))
        main.activation = op.activation
        quant = ofm.quantization
        pad_value = zero_point(ofm)
        cur = ifm_shape

        def border(suffix: str, shape: Shape4D, offset: Shape4D) -> None:
            zeros = const_tensor(op.name + suffix, shape.as_list(), ofm.dtype, [pad_value] * shape.elements(),
                                 quant)
            concat_slice_writer(op, ofm, op.name + suffix, zeros, shape, offset)

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

    def add_padding_fields(self, op: WorkingOp) -> WorkingOp:
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
            if self._drop_padding_only_taps(op, padding):
                padding, skirt = padding_and_skirt("EXPLICIT", op.kernel_size(), op.stride(), op.dilation(),
                                                   ifm_shape, op.attrs["explicit_padding"])
        op.attrs["explicit_padding"] = padding
        op.attrs["skirt"] = skirt
        return op

    @staticmethod
    def _drop_padding_only_taps(op: WorkingOp, padding: tuple[int, int, int, int]) -> bool:
        """Whether the convolution's kernel lost zero taps that read only ``padding`` (with that padding, now
        explicit); as the backend bridge teaches Vela (``npusched.vela.lessons``)."""
        if op.type not in CONV_TYPES | DEPTHWISE_TYPES \
                or op.type in ("Conv2DBackpropInput", "Conv2DBackpropInputSwitchedBias"):
            return False
        weights = op.inputs[1]
        if weights is None or weights.values is None or len(weights.consumers()) != 1:
            return False
        trimmed = without_padding_only_taps(weights.values, weights.quantization.zero_point, op.stride(),
                                            op.dilation(), padding)
        if trimmed is None:
            return False
        weights.values, op.attrs["explicit_padding"] = trimmed
        weights.shape = list(weights.values.shape)
        op.attrs["padding"] = "EXPLICIT"
        return True

    def fixup_bias_tensors(self, op: WorkingOp, dtype: DataType | None = None) -> WorkingOp:
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
