"""Concatenation inputs written in place: the convolution that makes an input writes its slice of the OFM.

Vela's legacy graph copies every input of a concatenation into the OFM with a 1x1 AvgPool (a
``ConcatSliceWrite``). Where a convolution makes the input and nothing else reads it, the default core has the
convolution write the slice itself, and the copy (a pass of its own, reading and writing the whole input) goes.
Vela's backend takes such a pass as the copy's write offset and shape on the convolution, which its command
stream honours (``npusched.vela.backend`` makes the same change to Vela's graph, guided by ``IN_PLACE_OF``).

Only where it is exact and never needs more memory: the input has this one producer and this one reader, is no
subgraph output, has the OFM's type and quantisation (the copy would rescale otherwise); and either the OFM is
already written by an earlier pass of the same NPU run, so its live range does not start sooner (the input's
goes), or the copy runs right after the convolution and what the convolution frees is no bigger than the input
(the OFM then starts one step sooner, where it replaces the input; a step later the input and the OFM were both
live).
"""

from __future__ import annotations

from npusched.ir import round_up
from npusched.lowering.netgraph import WorkingGraph, WorkingOp, WorkingTensor
from npusched.lowering.packing import Pass

IN_PLACE_OF = "in_place_of"  # attribute of a pass writing in place: the name of the copy it replaces
_WRITERS = frozenset({"Conv2DBias", "DepthwiseConv2DBias"})


def write_concat_inputs_in_place(passes: list[Pass], sg: WorkingGraph) -> list[Pass]:
    """``passes`` (in execution order) with each copy that can go folded into the pass making its input."""
    position = {id(ps): index for index, ps in enumerate(passes)}
    pass_of = {id(ps.primary_op): ps for ps in passes if ps.primary_op is not None}
    outputs = {id(t) for t in sg.output_tensors}
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
        at = position[id(made_by)]
        earlier = [position[id(pass_of[id(w)])] for w in ofm.ops
                   if w is not copy and id(w) in pass_of and position[id(pass_of[id(w)])] < at]
        if earlier:
            if any(passes[i].placement != "Npu" for i in range(min(earlier), position[id(ps)] + 1)):
                continue
        elif position[id(ps)] != at + 1 or _freed_bytes(producer, at, pass_of, position) > \
                source.shape4d().elements() * source.dtype.size_in_bytes:
            continue
        producer.outputs = [ofm]
        producer.write_offset, producer.write_shape = copy.write_offset, copy.write_shape
        producer.memory_function = "ConcatSliceWrite"
        producer.attrs[IN_PLACE_OF] = copy.name
        ofm.ops = [producer if writer is copy else writer for writer in ofm.ops]
        source.ops, source.consumer_list = [], []
        made_by.outputs, made_by.ofm_tensor = [ofm], ofm
        removed.add(id(ps))
    return [ps for ps in passes if id(ps) not in removed]


def _freed_bytes(producer: WorkingOp, at: int, pass_of: dict[int, Pass], position: dict[int, int]) -> int:
    """Bytes of the feature maps ``producer`` (at position ``at``) is the last to read, depth padded to 16."""
    freed = 0
    for tensor in producer.inputs:
        if tensor is None or tensor.is_const:
            continue
        later = [position[id(pass_of[id(reader)])] for reader in tensor.consumers()
                 if reader is not None and reader is not producer and id(reader) in pass_of]
        if not any(index > at for index in later):
            shape = tensor.shape4d()
            freed += shape.with_depth(round_up(shape.depth, 16)).elements() * tensor.dtype.size_in_bytes
    return freed


def _may_write_in_place(producer: WorkingOp, made_by: Pass, source: WorkingTensor, ofm: WorkingTensor,
                        copy: WorkingOp) -> bool:
    return (made_by.placement == "Npu" and made_by.ops == [producer] and producer.type in _WRITERS
            and producer.write_offset is None and producer.memory_function is None
            and producer.activation_lut is None and producer.outputs == [source]
            and source.dtype == ofm.dtype
            and (source.quantization.scale, source.quantization.zero_point)
            == (ofm.quantization.scale, ofm.quantization.zero_point)
            and bool(producer.ofm_shapes) and producer.ofm_shapes[0] == copy.write_shape)
