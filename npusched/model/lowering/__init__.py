"""Lowering of TFLite operators to NPU passes, mirroring Vela 5.2.0's legacy graph optimiser.

Contract with the decomposition modules (softmax.py, mean.py, lstm.py — written by the DECOMP helper)
-------------------------------------------------------------------------------------------------------
Each module exports one function with this exact signature::

    lower_softmax(op: TfliteOperator, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]
    lower_mean(op: TfliteOperator, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]
    lower_lstm(op: TfliteOperator, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]

* ``op`` is the reader's TfliteOperator (``op.inputs``/``op.outputs`` are tensor indices into
  ``ctx.subgraph.tensors``; use ``ctx.tensor(i)`` for a TfliteTensor and ``ctx.feature_map(i)`` for the
  FeatureMap of a non-constant tensor). ``ifm``/``ofm`` are the FeatureMaps of the operator's first
  input / first output (already the tensors the rest of the graph uses: aliases of RESHAPE etc. resolved).
* The returned NpuOps are in the final form Vela's pass packing sees (i.e. AFTER every later graph-optimiser
  rewrite Vela applies to the ops a decomposition creates — convert_conv_to_fc renaming "<name>_fc",
  Tanh/Sigmoid -> LUT, activation fusion, bias fixups — since graph.py does not re-run those rewrites on
  decomposition output) but BEFORE SchedulerOperation conversion:
  ``index=-1`` (graph.py re-indexes with dataclasses.replace), ``ifm``/``ifm2`` in the order of Vela's
  ``op.inputs`` (graph.py applies the IFM/IFM2 swap and sets ``uses_scalar``/``reversed_operands``
  uniformly for every binary elementwise pass — do NOT do it yourself).
* ``name`` = Vela's op name (e.g. f"{softmax_ofm_name}_sub{pass_number}"); ``op_type`` = Vela's Op
  name as printed by ``--verbose-schedule`` ("Sub", "SHR", "ReduceSum", "MaxPool", "CLZ",
  "FullyConnected", "AvgPool", "DepthwiseConv2DBias", "Mul", "Add", "SHL", "Memcpy", ...);
  ``tflite_op`` = the builtin being decomposed ("SOFTMAX", "MEAN", "UNIDIRECTIONAL_SEQUENCE_LSTM").
* ``ifm.shape``/``ifm2.shape``/``ofm.shape`` (OperandAccess.shape) = Vela's ``op.ifm_shapes[i]`` /
  ``op.ofm_shapes[0]``; ``OperandAccess.tensor`` = the FeatureMap (``FeatureMap.shape`` = the tensor's
  own 4-D shape). Use ``offset``/``access_shape`` for Vela's read_offsets/read_shapes (ifm) or
  write_offset/write_shape (ofm) when a pass touches only part of a tensor.
* Intermediate tensors: create them with ``ctx.new_feature_map(name, shape, dtype, quantization)``
  (Vela's names, e.g. f"{op_name}_tens0"). Constant operands (scalars, LUT-less constant IFM2s):
  ``ctx.const_operand(name, values, dtype, quantization, shape)`` returns a FeatureMap whose
  ``constant`` holds the ConstTensor (``is_const`` True). Weights/bias/LUTs are ``ctx.const_tensor(...)``
  (ConstTensor; weights in HWIO as Vela holds them after its own transposition; bias 1-D).
* Fused activation: ``activation`` = Vela's ActivationFunction op type name ("Clip", "Relu", "Sigmoid",
  "Tanh", "LUT", ...); LUT values in ``activation_lut``; put min/max (unquantised floats, as Vela's
  ActivationFunction.min/max) in ``attrs`` as ("activation_min", v) / ("activation_max", v). Other Vela
  op attributes the cost model or the encoder may need go in ``attrs`` too (e.g. ("explicit_scaling",
  (per_channel, shifts, multipliers)), ("forced_output_quantization", Quantization), ("rounding", "NATURAL")
  — or use ``rounding_mode``). ``has_scaling`` False only where Vela's op has no scaling.
* Convenience builders for these are in ``npusched.model.lowering.common`` (``elementwise_op``,
  ``pool_op``, ``weighted_op``, ``fully_connected_op``, ``depthwise_op``, ``conv_op``, ``memcpy_op``, ``access``);
  prefer them.
* The op list must be in an order where every op's inputs are produced earlier (or are graph inputs /
  constants): graph.py reproduces Vela's pass order from the data dependencies (Vela's depth-first pass
  packing), so the list order itself only breaks ties the way Vela's op-creation order would.

LoweringContext (npusched.model.lowering.context): frozen; ``model`` (TfliteModel), ``subgraph``
(TfliteSubgraph), ``arch`` (ArchitectureFeatures or None), and the helper methods named above.

Module layout
-------------
* ``netgraph``  — the private working graph (VOp/VTensor with producer/consumer links, Vela's traversals).
* ``importer``  — TfliteSubgraph -> working graph with Vela's read-time conversions (HWIO weights, ...).
* ``rewrites``  — Vela's graph-optimiser rewrites, run in Vela's order (``Optimiser.optimise``).
* ``packing``   — pass packing (Vela's depth-first order, CPU-pass regrouping) and NPU-subgraph runs.
* ``formats``   — NHWC vs NHCWB16 for every NPU feature map (Vela's format restrictions + scheduler setup).
* ``luts``      — activation lookup tables; ``common``/``context`` — builders and the decomposition context.
* ``softmax``/``mean``/``lstm`` — decompositions (DECOMP helper).

Extra NpuOp ``attrs`` keys set by graph.py: ``ofm_consumers`` (Vela's consumer-list length of the OFM, incl. the
graph/subgraph-output marker), ``original_type``, ``skirt``, ``memory_function`` ("ConcatSliceWrite"...),
``explicit_scaling``, ``forced_output_quantization``, ``ifm_stride_multiplier``, ``ofm_stride_multiplier``,
``tile_base_offset_ofm``, ``activation_min``/``activation_max`` and ``pass_activation`` (a standalone
activation packed into the pass; Vela's SchedulerOperation.activation — what its cost model reads — stays the
primary op's, i.e. ``NpuOp.activation``).
"""

from npusched.model.lowering.context import LoweringContext

__all__ = ["LoweringContext"]
