"""Rewrites of memory-only operators (concatenation, split, unpack, strided slice, reshapes) in Vela's way:
slices written or read in place, pass-throughs bypassed. A mixin of ``GraphRewriter``."""

from __future__ import annotations

import math

import numpy as np

from npusched.ir import (
    Shape4D,
)
from npusched.lowering.netgraph import (
    BINARY_ELEMENTWISE,
    CONCAT_TYPES,
    MEMORY_ONLY_TYPES,
    SPLIT_TYPES,
    WorkingOp,
    WorkingTensor,
)
from npusched.lowering.rewrite_helpers import avgpool_nop, concat_slice_writer, ifm_index, strided_slice_bounds
from npusched.target.arch import ArchitectureFeatures


class MemoryOpRewrites:
    """Concatenation, split, unpack and strided-slice rewrites, and the bypass of memory-only ops."""

    arch: ArchitectureFeatures

    # === concatenation and split ========================================================================
    def rewrite_concat(self, op: WorkingOp) -> None:
        if not op.run_on_npu or op.type not in CONCAT_TYPES:
            return
        ofm = op.ofm
        ofm.ops = []
        if op.type == "ConcatTFLite" and op.activation is not None:
            # The activation cannot be fused into the per-input copies: it becomes its own op.
            act = WorkingOp(op.activation.op_type, op.name + op.activation.op_type, original_type=op.activation.op_type)
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
            concat_slice_writer(op, ofm, f"{op.name}{idx}_avgpool", inp, op.ifm_shapes[idx],
                                Shape4D.from_list(write_offset))
            offset = end

    def rewrite_unpack_output(self, op: WorkingOp) -> WorkingOp:
        if op.run_on_npu and op.type == "Unpack":
            axis = int(op.attrs["axis"])
            if axis < 0:
                axis = len(op.inputs[0].shape) + 1 + axis
            op.type = "UnpackReshaped"
            desired = op.outputs[0].shape[:axis] + [1] + op.outputs[0].shape[axis:]
            op.attrs["split_axis_4D"] = [axis + (4 - len(desired))] * len(op.outputs)
            op.ofm_shapes = [Shape4D.from_list(desired) for _ in op.outputs]
        return op

    def rewrite_stridedslice_output(self, op: WorkingOp) -> WorkingOp:
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

    def nop_split_to_identity(self, op: WorkingOp) -> WorkingOp:
        if op.type == "Split" and op.attrs.get("num_splits") == 1:
            op.inputs = [i for i in op.inputs if i is not None and i.shape == op.outputs[0].shape]
            op.type = "Identity"
        return op

    def _split_geometry(self, op: WorkingOp) -> tuple[WorkingTensor, list[WorkingTensor], int | None, list[int] | None,
                                                 list[int] | None, WorkingTensor | None]:
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

    def rewrite_split(self, tens: WorkingTensor) -> WorkingTensor:
        if len(tens.ops) != 1 or tens.ops[0].type not in SPLIT_TYPES or tens.ops[0].type == "Unpack":
            return tens
        split = tens.ops[0]
        if not split.run_on_npu:
            return tens
        inp, outputs, axis, start, end, strides = self._split_geometry(split)
        tens.ops = []
        read = WorkingOp("SplitSliceRead", split.name, original_type=split.type, tflite_op=split.tflite_op)
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

    def remove_split_slice_read(self, op: WorkingOp) -> None:
        if op.type != "SplitSliceRead":
            return
        ofm = op.ofm

        def fits(cons: WorkingOp) -> bool:
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
                    cons.inputs[ifm_index(cons, 0)] = op.ifm
                    cons.ifm_shapes[0] = op.ifm_shapes[0]
                elif cons.type in BINARY_ELEMENTWISE and cons.ifm2 is ofm:
                    cons.read_offsets[1] = op.read_offsets[0]
                    cons.read_shapes[1] = op.read_shapes[0]
                    cons.inputs[ifm_index(cons, 1)] = op.ifm
                    cons.ifm_shapes[1] = op.ifm_shapes[0]
                ofm.consumer_list.remove(cons)
                op.ifm.consumer_list.append(cons)
            ofm.ops = []
            if op in op.ifm.consumer_list:
                op.ifm.consumer_list.remove(op)
        else:
            pool = avgpool_nop(op.name + "_avgpool")
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
    def bypass_memory_only(self, op: WorkingOp) -> WorkingOp:
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

    def remove_passthrough_tensor(self, tens: WorkingTensor) -> WorkingTensor:
        if len(tens.ops) == 1 and tens.ops[0].type == "Identity":
            return tens.ops[0].inputs[0]
        return tens
