"""Concatenation inputs written in place: the pass that makes an input writes its slice of the OFM.

Vela's legacy graph copies every input of a concatenation into the OFM with a 1x1 AvgPool (a
``ConcatSliceWrite``). Where a convolution (a FullyConnected among them: Vela makes one of a 1x1 convolution on
a 1x1 map), a pooling (an up-sampling resize among them) or an
element-wise operation (on operands of the slice's shape) makes the input and nothing else reads it, the default
core has it write the slice itself, and the copy (a pass of its own, reading and writing the whole input) goes.
Vela's backend takes such a pass as the copy's write offset and shape on the writer, which its command stream
honours (``npusched.vela.backend`` makes the same change to Vela's graph, guided by ``IN_PLACE_OF``).

Only where it is exact: the input has this one producer and this one reader, is no subgraph output, and has the
OFM's type and quantisation (the copy would rescale otherwise). And only where memory allows. It never needs more
where the OFM is already written by an earlier pass of the same NPU run (its live range does not start sooner, the
input's goes), or where the copy runs right after the writer and what the writer frees is no bigger
than the input (the OFM then starts one step sooner, where it replaces the input). Otherwise the OFM starts
sooner, as in a U-Net whose skip input is copied after the up-sampled one, and the write is taken only while
every step it touches still fits the budget with every feature map resident (``budget_bytes``; None where
feature maps live off fast storage and the solver chooses what to keep there).
"""

from __future__ import annotations

import itertools

from npusched.ir import ResamplingMode, round_up
from npusched.lowering.netgraph import WorkingGraph, WorkingOp, WorkingTensor
from npusched.lowering.packing import Pass

IN_PLACE_OF = "in_place_of"  # attribute of a pass writing in place: the name of the copy it replaces
_WRITERS = frozenset({"Conv2DBias", "DepthwiseConv2DBias", "FullyConnected", "MaxPool", "AvgPool",
                      "ResizeNearestNeighbor", "ResizeBilinear"})
_ELEMENTWISE_WRITERS = frozenset({"Add", "Sub", "Mul", "Maximum", "Minimum"})  # only on operands of the OFM's shape


def write_concat_inputs_in_place(passes: list[Pass], sg: WorkingGraph, budget_bytes: int | None = 0) -> list[Pass]:
    """``passes`` (in execution order) with each copy that can go folded into the pass making its input;
    ``budget_bytes`` bounds the steps a write makes the OFM live sooner (0: none may)."""
    position = {id(ps): index for index, ps in enumerate(passes)}
    pass_of = {id(ps.primary_op): ps for ps in passes if ps.primary_op is not None}
    outputs = {id(t) for t in sg.output_tensors}
    live_bytes, first_written = _resident_live_bytes(passes, sg)
    removed: set[int] = set()
    for ps in passes:
        copy = ps.primary_op
        if copy is None or copy.memory_function != "ConcatSliceWrite" or copy.type != "AvgPool" \
                or copy.original_type not in ("Concat", "ConcatTFLite") or ps.placement != "Npu" or ps.ops != [copy] \
                or copy.activation is not None or copy.forced_output_quantization is not None:
            continue
        source, ofm = copy.inputs[0], copy.outputs[0]
        if source is None or id(source) in outputs or source.is_const or len(source.ops) != 1 \
                or source.consumers() != [copy]:
            continue
        producer = source.ops[0]
        made_by = pass_of.get(id(producer))
        if made_by is None or not _may_write_in_place(producer, made_by, source, ofm, copy):
            continue
        at, copied_at = position[id(made_by)], position[id(ps)]
        starts = min(first_written.get(id(ofm), copied_at), copied_at)
        if any(passes[i].placement != "Npu" for i in range(min(at, starts), copied_at + 1)):
            continue
        sooner = range(at, starts)
        ofm_bytes, source_bytes = _resident_bytes(ofm), _resident_bytes(source)
        never_more = copied_at == at + 1 and _freed_bytes(producer, at, pass_of, position) <= \
            source.shape4d().elements() * source.dtype.size_in_bytes
        if sooner and not never_more and budget_bytes is not None \
                and any(live_bytes[i] + ofm_bytes - source_bytes > budget_bytes for i in sooner):
            continue
        for i in sooner:
            live_bytes[i] += ofm_bytes
        for i in range(at, copied_at + 1):
            live_bytes[i] -= source_bytes
        first_written[id(ofm)] = min(starts, at)
        producer.outputs = [ofm]
        producer.write_offset, producer.write_shape = copy.write_offset, copy.write_shape
        producer.memory_function = "ConcatSliceWrite"
        producer.attrs[IN_PLACE_OF] = copy.name
        ofm.ops = [producer if writer is copy else writer for writer in ofm.ops]
        source.ops, source.consumer_list = [], []
        made_by.outputs, made_by.ofm_tensor = [ofm], ofm
        removed.add(id(ps))
    return [ps for ps in passes if id(ps) not in removed]


def _resident_bytes(tensor: WorkingTensor) -> int:
    """Bytes of a feature map in fast storage, depth padded to 16 (as its brick format may need)."""
    shape = tensor.shape4d()
    return shape.with_depth(round_up(shape.depth, 16)).elements() * tensor.dtype.size_in_bytes


def _resident_live_bytes(passes: list[Pass], sg: WorkingGraph) -> tuple[list[int], dict[int, int]]:
    """Per pass, the bytes of the feature maps live there with every one resident; and per tensor id, the
    position of its first writer."""
    first_written: dict[int, int] = {id(t): 0 for t in sg.input_tensors}
    last_read: dict[int, int] = {}
    tensors: dict[int, WorkingTensor] = {}
    for index, ps in enumerate(passes):
        for op in ps.ops:
            for tensor in op.outputs:
                if tensor is not None and not tensor.is_const:
                    first_written.setdefault(id(tensor), index)
                    tensors[id(tensor)] = tensor
            for read in op.inputs:
                if read is not None and not read.is_const:
                    last_read[id(read)] = index
                    tensors[id(read)] = read
    for tensor in sg.output_tensors:
        last_read[id(tensor)] = len(passes) - 1
    change = [0] * (len(passes) + 1)
    for key, tensor in tensors.items():
        start = first_written.get(key, 0)
        change[start] += _resident_bytes(tensor)
        change[max(start, last_read.get(key, start)) + 1] -= _resident_bytes(tensor)
    return list(itertools.accumulate(change[:-1])), first_written


def _freed_bytes(producer: WorkingOp, at: int, pass_of: dict[int, Pass], position: dict[int, int]) -> int:
    """Bytes of the feature maps ``producer`` (at position ``at``) is the last to read, depth padded to 16."""
    freed = 0
    for tensor in producer.inputs:
        if tensor is None or tensor.is_const:
            continue
        later = [position[id(pass_of[id(reader)])] for reader in tensor.consumers()
                 if reader is not None and reader is not producer and id(reader) in pass_of]
        if not any(index > at for index in later):
            freed += _resident_bytes(tensor)
    return freed


def _may_write_in_place(producer: WorkingOp, made_by: Pass, source: WorkingTensor, ofm: WorkingTensor,
                        copy: WorkingOp) -> bool:
    elementwise = producer.type in _ELEMENTWISE_WRITERS and len(producer.ifm_shapes) == 2 \
        and all(shape == copy.write_shape for shape in producer.ifm_shapes)
    return (made_by.placement == "Npu" and made_by.ops == [producer] and (producer.type in _WRITERS or elementwise)
            and _writes_whole_ofm(producer) and producer.memory_function is None
            and producer.resampling_mode in (ResamplingMode.NONE, ResamplingMode.NEAREST)
            and producer.activation_lut is None and producer.outputs == [source]
            and source.dtype == ofm.dtype
            and (source.quantization.scale, source.quantization.zero_point)
            == (ofm.quantization.scale, ofm.quantization.zero_point)
            and bool(producer.ofm_shapes) and producer.ofm_shapes[0] == copy.write_shape)


def _writes_whole_ofm(producer: WorkingOp) -> bool:
    """No write offset of its own, or (an up-sampling pass: Vela trims its 2x2 steps so) offset 0 and its OFM."""
    offset = producer.write_offset
    return offset is None or (producer.resampling_mode == ResamplingMode.NEAREST
                              and offset.as_list() == [0, 0, 0, 0] and bool(producer.ofm_shapes)
                              and producer.write_shape == producer.ofm_shapes[0])
