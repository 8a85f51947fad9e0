"""Lowering of TFLite operators to NPU passes, mirroring Vela 5.2.0's legacy graph optimiser.

TFLite operators become the NPU passes Vela's graph optimiser and pass packing would make, so that every
later stage (pricing, scheduling, reports) sees the passes Vela schedules. ``npusched.lowering.graph.lower_model``
drives the stages below in Vela's order.

Modules
-------
* ``netgraph`` — the private working graph (ops and tensors with producer/consumer links, Vela's traversals).
* ``importer`` — a TFLite subgraph as a working graph, with Vela's read-time conversions (HWIO weights, ...).
* ``rewrites`` — Vela's graph-optimiser rewrites, run in Vela's order; its mixins ``rewrites_memory``
  (concatenation, split, PACK, UNPACK), ``rewrites_shape`` (resize, padding, MIRROR_PAD, dilation),
  ``rewrites_prelu`` and ``rewrites_argmax``.
* ``packing`` — pass packing (Vela's depth-first order, CPU-pass regrouping) and the runs of NPU passes that
  become NPU subgraphs.
* ``formats`` — NHWC or NHCWB16 for every NPU feature map (Vela's format restrictions).
* ``luts`` — activation lookup tables; ``common`` — builders for NPU ops; ``context`` — ``LoweringContext``.
* ``softmax``, ``mean``, ``lstm`` — decompositions of operators the NPU runs as several passes.

Decompositions
--------------
A decomposition is a function ``lower_x(op, ifm, ofm, ctx) -> list[NpuOp]`` (``op`` the TFLite operator,
``ifm``/``ofm`` the feature maps of its first input and output with aliases already resolved, ``ctx`` a
``LoweringContext`` for reading tensors and creating intermediate feature maps and constants). Its ops are in the
final form Vela's pass packing sees, since graph.py does not re-run the graph optimiser on them: names and
op types as Vela prints them in ``--verbose-schedule``, activations fused, ``index=-1`` (graph.py numbers the
ops), IFM and IFM2 in Vela's input order (graph.py applies the operand swap of binary elementwise passes), and
in an order where every op's inputs are produced earlier. Raising ``NotImplementedError`` leaves the operator
on the CPU. ``decomposers.DECOMPOSERS`` maps operator types to these functions.

Extra NpuOp ``attrs`` keys set by graph.py: ``ofm_consumers`` (Vela's consumer-list length of the OFM, incl. the
graph/subgraph-output marker), ``original_type``, ``skirt``, ``memory_function`` ("ConcatSliceWrite"...),
``explicit_scaling``, ``forced_output_quantization``, ``ifm_stride_multiplier``, ``ofm_stride_multiplier``,
``tile_base_offset_ofm``, ``activation_min``/``activation_max`` and ``pass_activation`` (a standalone
activation packed into the pass; Vela's SchedulerOperation.activation — what its cost model reads — stays the
primary op's, i.e. ``NpuOp.activation``).
"""

from npusched.lowering.context import LoweringContext

__all__ = ["LoweringContext"]
