"""Turn a reader TfliteSubgraph into the working graph, applying the conversions Vela makes while reading.

Those conversions: constant convolution weights become HWIO (fully-connected weights IO), constant biases
become 1-D copies, optional absent operands stay ``None``, every tensor without a producer gets a
Placeholder (graph inputs and variables) or Const op, and op attributes get Vela's derived keys
(``strides``, ``ksize``, ``dilation``, the implicit depth multiplier, the fused activation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from npusched.lowering.netgraph import (
    BUILTIN_TO_VELA,
    CONV_TYPES,
    DEPTHWISE_TYPES,
    FUSED_ACTIVATION,
    WorkingGraph,
    WorkingOp,
    WorkingTensor,
    activation_for,
)

if TYPE_CHECKING:
    from npusched.frontend.tflite_reader import TfliteOperator, TfliteSubgraph


def _vela_type(opcode: str) -> str:
    if opcode in BUILTIN_TO_VELA:
        return BUILTIN_TO_VELA[opcode]
    # Unknown to our table: a CPU-only op; keep a readable, distinct type name.
    return "".join(part.capitalize() for part in opcode.split("_"))


def _reordered_weights(src: WorkingTensor, axes: tuple[int, ...]) -> WorkingTensor:
    """A constant copy of ``src`` with its axes permuted (Vela names the copy ``<name>_reshape``)."""
    vals = np.transpose(np.asarray(src.values), axes)
    tens = WorkingTensor(name=src.name + "_reshape", shape=list(vals.shape), dtype=src.dtype,
                   quantization=src.quantization, values=vals, uid=src.uid)
    WorkingOp("Const", tens.name).set_output(tens)
    return tens


def _flat_bias(src: WorkingTensor) -> WorkingTensor:
    vals = np.asarray(src.values).reshape(-1)
    tens = WorkingTensor(name=src.name + "_reshape", shape=[int(vals.size)], dtype=src.dtype,
                   quantization=src.quantization, values=vals, uid=src.uid)
    WorkingOp("Const", tens.name).set_output(tens)
    return tens


def _attrs_from_options(op: WorkingOp, options: dict) -> None:
    attrs = dict(options)
    if "stride_w" in attrs:
        attrs["stride_w"] = int(attrs["stride_w"])
        attrs["stride_h"] = int(attrs["stride_h"])
        attrs["strides"] = (1, attrs["stride_h"], attrs["stride_w"], 1)
    if "filter_width" in attrs:
        attrs["filter_width"] = int(attrs["filter_width"])
        attrs["filter_height"] = int(attrs["filter_height"])
        attrs["ksize"] = (1, attrs["filter_height"], attrs["filter_width"], 1)
    if "dilation_w_factor" in attrs:
        attrs["dilation_w_factor"] = int(attrs["dilation_w_factor"])
        attrs["dilation_h_factor"] = int(attrs["dilation_h_factor"])
        attrs["dilation"] = (1, attrs["dilation_h_factor"], attrs["dilation_w_factor"], 1)
    if "depth_multiplier" in attrs:
        attrs["depth_multiplier"] = int(attrs["depth_multiplier"])
        attrs["channel_multiplier"] = attrs["depth_multiplier"]
    op.attrs = attrs
    if op.type == "DepthwiseConv2DBias" and attrs.get("depth_multiplier") == 0:
        # Implicit multiplier: weight channels over IFM channels (weights are already [H, W, C*M, 1]).
        op.attrs["depth_multiplier"] = int(op.weights.shape[2]) // int(op.ifm.shape[-1])
    faf = attrs.get("fused_activation_function")
    if faf is not None and faf != "NONE" and faf in FUSED_ACTIVATION:
        op.activation = activation_for(FUSED_ACTIVATION[faf])


def import_subgraph(tsg: TfliteSubgraph) -> tuple[WorkingGraph, dict[int, TfliteOperator]]:
    """The working graph of one TFLite subgraph, plus a map from op_index to the reader's operator."""
    tensors = [
        WorkingTensor(name=t.name, shape=[int(d) for d in t.shape], dtype=t.dtype, quantization=t.quantization,
                values=None if t.data is None else np.asarray(t.data), is_variable=bool(t.is_variable), uid=t.index)
        for t in tsg.tensors
    ]
    by_index: dict[int, TfliteOperator] = {}
    virtual_outputs: list[WorkingTensor] = []
    for top in tsg.operators:
        by_index[top.index] = top
        inputs: list[WorkingTensor | None] = [tensors[i] if i >= 0 else None for i in top.inputs]
        outputs = [tensors[i] for i in top.outputs if i >= 0]
        vtype = _vela_type(top.opcode)
        name = outputs[0].name if outputs else "unknown_op_name"
        op = WorkingOp(vtype, name, inputs=inputs, outputs=outputs, op_index=top.index, tflite_op=top.opcode)
        for out in outputs:
            out.ops = [op]
        if vtype in ("AssignVariable", "CallOnce"):
            # Ops without outputs would never be reached from the subgraph outputs: give them a virtual one.
            op.name = f"{vtype}_{top.index}"
            virt = WorkingTensor(name=op.name, shape=[], dtype=tensors[0].dtype if tensors else None)
            op.set_output(virt)
            virtual_outputs.append(virt)
        if vtype in CONV_TYPES | DEPTHWISE_TYPES or vtype == "FullyConnected":
            w = op.weights
            if w is not None and w.values is not None:
                axes = (1, 0) if vtype == "FullyConnected" else (1, 2, 3, 0)
                op.inputs[INDEX_OF_WEIGHTS[vtype]] = _reordered_weights(w, axes)
                bias_idx = INDEX_OF_BIAS[vtype]
                if len(op.inputs) <= bias_idx:
                    op.inputs.append(None)
                last = op.inputs[-1]
                if last is not None and last.values is not None:
                    op.inputs[-1] = _flat_bias(last)
        _attrs_from_options(op, top.options)
        if top.custom_code is not None:
            op.attrs["custom_code"] = top.custom_code

    def dedupe(indices: tuple[int, ...]) -> list[WorkingTensor]:
        out: list[WorkingTensor] = []
        for i in indices:
            if tensors[i] not in out:
                out.append(tensors[i])
        return out

    outs = dedupe(tsg.outputs) + virtual_outputs
    ins = dedupe(tsg.inputs)
    for tens in ins:
        if not tens.ops:
            WorkingOp("Placeholder" if tens.values is None else "Const", tens.name).set_output(tens)
    for tens in tensors:
        if not tens.ops:
            WorkingOp("Placeholder" if tens.is_variable else "Const", tens.name).set_output(tens)
    sg = WorkingGraph(name=tsg.name, output_tensors=outs, original_inputs=ins)
    return sg, by_index


INDEX_OF_WEIGHTS = {"Conv2DBias": 1, "DepthwiseConv2DBias": 1, "FullyConnected": 1, "Conv2DBackpropInput": 1,
                    "Conv2D": 1, "QuantizedConv2D": 1, "Conv2DBackpropInputSwitchedBias": 1}
INDEX_OF_BIAS = {"Conv2DBias": 2, "DepthwiseConv2DBias": 2, "FullyConnected": 2, "Conv2DBackpropInput": 3,
                 "Conv2D": 2, "QuantizedConv2D": 2, "Conv2DBackpropInputSwitchedBias": 3}
