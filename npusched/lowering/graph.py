"""Lower a TFLite model to the NPU passes Vela 5.2.0's legacy core would schedule.

``lower_model`` reproduces Vela's import conversions, graph-optimiser rewrites, pass packing and NPU-subgraph
extraction (see ``npusched.lowering``) and returns a frozen ``Network``: every pass as an ``NpuOp``
(in Vela's SchedulerOperation form, with the IFM/IFM2 swap applied) or ``CpuOp``, in execution order,
grouped into NPU subgraphs named as Vela names them (``<subgraph>_split_<n>``).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property

import networkx as nx
import numpy as np

from npusched.errors import ModelError
from npusched.frontend.recipe import GraphRecipe
from npusched.frontend.supported import npu_support
from npusched.frontend.tflite_reader import TfliteModel, TfliteOperator, TfliteSubgraph
from npusched.ir import (
    CpuOp,
    FeatureMap,
    Kernel,
    NpuBlockType,
    NpuOp,
    OperandAccess,
    Quantization,
)
from npusched.lowering.context import LoweringContext
from npusched.lowering.decomposers import DECOMPOSERS
from npusched.lowering.formats import assign_formats, brick_allowed
from npusched.lowering.importer import import_subgraph
from npusched.lowering.in_place import IN_PLACE_OF, write_concat_inputs_in_place
from npusched.lowering.netgraph import (
    BINARY_ELEMENTWISE,
    CONV_TYPES,
    DEPTHWISE_TYPES,
    STARTUP_TYPES,
    WorkingOp,
    WorkingTensor,
    activation_for,
    block_kind,
)
from npusched.lowering.packing import Pass, npu_runs, pack_into_passes
from npusched.lowering.rewrites import GraphRewriter
from npusched.target.arch import ArchitectureFeatures


@dataclass(frozen=True, eq=False)
class NpuSubgraph:
    """A run of NPU passes Vela compiles into one command stream, in Vela's execution order (``ops``).

    ``inputs`` are the feature maps read from outside the subgraph (graph inputs or CPU results), ``outputs`` those
    read outside it. ``graph`` is the pass DAG the memory model reads its readers and writers from (and so every
    live range).
    """

    name: str
    ops: tuple[NpuOp, ...]
    inputs: tuple[FeatureMap, ...]
    outputs: tuple[FeatureMap, ...]

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The pass DAG as readers and writers: a node per pass (its op index; attributes ``op`` and
        ``position`` in ``ops``) and per feature map it reads or writes (constants are not feature maps); an edge
        from a map to each pass reading it (attribute ``role``: ifm or ifm2) and from a pass to the map it
        writes. ``ops`` is a topological order of it."""
        graph = nx.DiGraph()
        for position, op in enumerate(self.ops):
            graph.add_node(op.index, op=op, position=position)
            for role, access in (("ifm", op.ifm), ("ifm2", op.ifm2)):
                if access is not None and not access.tensor.is_const and not graph.has_edge(access.tensor, op.index):
                    graph.add_edge(access.tensor, op.index, role=role)
            graph.add_edge(op.index, op.ofm.tensor)
        return graph

    def readers(self, fm: FeatureMap) -> tuple[int, ...]:
        """Op indices of the passes that read ``fm``, in execution order."""
        return self._in_order(self.graph.successors(fm)) if fm in self.graph else ()

    def writers(self, fm: FeatureMap) -> tuple[int, ...]:
        """Op indices of the passes that write ``fm``, in execution order."""
        return self._in_order(self.graph.predecessors(fm)) if fm in self.graph else ()

    def _in_order(self, indices: Iterable[int]) -> tuple[int, ...]:
        nodes = self.graph.nodes
        return tuple(sorted(indices, key=lambda index: nodes[index]["position"]))


@dataclass(frozen=True, eq=False)
class Network:
    name: str
    subgraphs: tuple[NpuSubgraph, ...]
    ops: tuple[NpuOp | CpuOp, ...]
    cpu_ops: tuple[CpuOp, ...]

    @property
    def npu_ops(self) -> tuple[NpuOp, ...]:
        return tuple(op for op in self.ops if isinstance(op, NpuOp))


# ---------------------------------------------------------------------------------------------------------
# support and decomposition adapters

def _support_reason(top: TfliteOperator | None, tsg: TfliteSubgraph, default_core: bool) -> str | None:
    if top is None:
        return None
    return npu_support(top, tsg, default_core)


def _decompose(op: WorkingOp, top: TfliteOperator | None, model: TfliteModel, tsg: TfliteSubgraph,
               arch: ArchitectureFeatures, default_core: bool, deep_views: bool) -> list[NpuOp] | None:
    """Ask the decomposition module for ``op``'s NPU ops; None (op stays on the CPU) if it has none."""
    fn = DECOMPOSERS.get(op.type)
    if top is None or fn is None:
        return None
    aliases: dict[int, FeatureMap] = {}
    for pos, index in enumerate(top.inputs):
        if index >= 0 and pos < len(op.inputs) and op.inputs[pos] is not None:
            aliases[index] = op.inputs[pos].feature_map()
    for pos, index in enumerate(top.outputs):
        if index >= 0 and pos < len(op.outputs):
            aliases[index] = op.outputs[pos].feature_map()
    ctx = LoweringContext(model=model, subgraph=tsg, arch=arch, aliases=aliases, default_core=default_core,
                          deep_views=deep_views)
    try:
        ops = fn(top, op.ifm.feature_map(), op.ofm.feature_map(), ctx)
    except NotImplementedError:
        return None
    return list(ops) if ops else None


# ---------------------------------------------------------------------------------------------------------
# pass -> NpuOp

def _kernel(op: WorkingOp) -> Kernel:
    w, h = op.kernel_size()
    sx, sy = op.stride()
    dx, dy = op.dilation()
    pad = [int(p) for p in op.attrs.get("explicit_padding") or (0, 0, 0, 0)]
    return Kernel(width=w, height=h, stride_x=sx, stride_y=sy, dilation_x=dx, dilation_y=dy,
                  padding=(pad[0], pad[1], pad[2], pad[3]), valid_padding=op.attrs.get("padding") == "VALID")


def _packed_activation(ps: Pass) -> tuple[str | None, float | None, float | None]:
    """A standalone activation op packed into the pass after its primary op (applied by the hardware, but
    not part of Vela's SchedulerOperation.activation, which its cost model reads)."""
    prim = ps.primary_op
    for op in ps.ops:
        if op is prim:
            continue
        if op.type in ("Relu", "Relu6", "Relu0To1", "ReluN1To1", "ReluN", "Clip", "Clamp", "Sigmoid", "Tanh"):
            act = op.activation
            a = activation_for(op.type) if act is None else act
            return a.op_type, a.min, a.max
    return None, None, None


def _swap_and_scalar(prim: WorkingOp) -> tuple[bool, bool]:
    """(reversed_operands, uses_scalar) as Vela's SchedulerOperation decides them."""
    ifm, ifm2, ofm = prim.ifm, prim.ifm2, prim.ofm
    uses_scalar = ifm2 is not None and ifm is not None and (ifm.shape == [] or ifm2.shape == [])
    if prim.type not in BINARY_ELEMENTWISE or ifm2 is None or ifm is None:
        return False, uses_scalar
    ifm_can_swap = ifm.is_const or ifm.is_scalar
    ifm2_primary = not (ifm2.is_const or ifm2.is_scalar or ifm2.shape != ofm.shape)
    return ifm_can_swap and ifm2_primary, uses_scalar


def _access(tens: WorkingTensor, shape, offset=None, access_shape=None) -> OperandAccess:
    return OperandAccess(tensor=tens.feature_map(), shape=shape, offset=offset, access_shape=access_shape)


def _npu_op(ps: Pass, consumer_count: int, default_core: bool) -> NpuOp:
    prim = ps.primary_op
    rev, uses_scalar = _swap_and_scalar(prim)
    rev = rev and not default_core  # the default core keeps a constant first operand first
    ifm = _access(ps.ifm_tensor, ps.ifm_shapes[0], prim.read_offsets[0], prim.read_shapes[0])
    ifm2 = None
    if ps.ifm2_tensor is not None:
        ifm2 = _access(ps.ifm2_tensor, ps.ifm_shapes[1], prim.read_offsets[1], prim.read_shapes[1])
    ofm = _access(ps.ofm_tensor, ps.ofm_shapes[0], prim.write_offset, prim.write_shape)
    if rev:
        ifm, ifm2 = ifm2, ifm
        ifm = replace(ifm, offset=prim.read_offsets[1], access_shape=prim.read_shapes[1])
        ifm2 = replace(ifm2, offset=prim.read_offsets[0], access_shape=prim.read_shapes[0])
    consumers = ("ofm_consumers", consumer_count)
    if prim.prebuilt is not None:
        base = prim.prebuilt
        return replace(base, ifm=ifm, ifm2=ifm2, ofm=ofm, reversed_operands=rev, uses_scalar=uses_scalar,
                       attrs=base.attrs + (consumers,))

    act = prim.activation
    attrs: list[tuple[str, object]] = []
    if act is not None and act.min is not None:
        attrs.append(("activation_min", act.min))
    if act is not None and act.max is not None:
        attrs.append(("activation_max", act.max))
    packed, packed_min, packed_max = _packed_activation(ps)
    if packed is not None:
        attrs.append(("pass_activation", (packed, packed_min, packed_max)))
    if prim.explicit_scaling is not None:
        attrs.append(("explicit_scaling", prim.explicit_scaling))
    if prim.forced_output_quantization is not None:
        attrs.append(("forced_output_quantization", prim.forced_output_quantization))
    if prim.memory_function is not None:
        attrs.append(("memory_function", prim.memory_function))
    if IN_PLACE_OF in prim.attrs:
        attrs.append((IN_PLACE_OF, prim.attrs[IN_PLACE_OF]))
    if "skirt" in prim.attrs:
        attrs.append(("skirt", tuple(int(v) for v in prim.attrs["skirt"])))
    if any(m != 1 for m in prim.ifm_stride_multiplier[0]):
        attrs.append(("ifm_stride_multiplier", tuple(prim.ifm_stride_multiplier[0])))
    for key in ("ofm_stride_multiplier", "tile_base_offset_ofm"):
        if key in prim.attrs:
            attrs.append((key, prim.attrs[key]))
    attrs.append(("original_type", prim.original_type))
    attrs.append(consumers)

    weights = bias = None
    if prim.type in CONV_TYPES | DEPTHWISE_TYPES or prim.type == "FullyConnected":
        if prim.weights is not None:
            weights = prim.weights.const_tensor()
        if prim.bias is not None:
            bias = prim.bias.const_tensor()
    has_scaling = all(t is None or bool(t.quantization.scale) for t in (prim.ifm, prim.ifm2, prim.ofm))
    return NpuOp(
        index=-1, name=prim.name, tflite_op=prim.tflite_op or prim.original_type, op_type=prim.type,
        npu_block_type=NpuBlockType(block_kind(prim.type)), ifm=ifm, ofm=ofm, ifm2=ifm2, kernel=_kernel(prim),
        activation=None if act is None else act.op_type, activation_lut=prim.activation_lut,
        resampling_mode=prim.resampling_mode, weights=weights, bias=bias,
        reversed_operands=rev, uses_scalar=uses_scalar, has_scaling=has_scaling, rounding_mode=prim.rounding_mode,
        attrs=tuple(attrs),
    )


def _cpu_ops(ps: Pass) -> list[CpuOp]:
    out = []
    for op in ps.ops:
        if op.type in STARTUP_TYPES:
            continue
        reason = op.cpu_reason or f"{op.tflite_op or op.type} '{op.name}' runs on the CPU"
        out.append(CpuOp(index=-1, name=op.name, tflite_op=op.tflite_op or op.type, reason=reason,
                         inputs=tuple(t.feature_map() for t in op.inputs if t is not None),
                         outputs=tuple(t.feature_map() for t in op.outputs),
                         variables=tuple(t.feature_map() for t in op.inputs if t is not None and t.is_variable)))
    return out


# ---------------------------------------------------------------------------------------------------------

# The rewrites walk the working graph recursively from its outputs (as Vela's do), one frame pair per op and
# tensor on the longest path, so a long chain needs more than Python's default 1000 frames.
RECURSION_LIMIT = 200_000


# Attribute of a pass: the earlier passes with the same weights and scales (``_with_weight_twins``).
WEIGHT_TWINS = "weight_twins"


def _with_weight_twins(op: NpuOp, encoders: dict[tuple, list[NpuOp]]) -> NpuOp:
    """``op``, naming the earlier passes whose encoded weights and scales Vela's weight cache would hand it (the
    same weight and bias tensors, IFM and OFM scales, kind of pass and dilation: an unrolled RNN's time steps),
    which changes how Vela's estimate reads its bias (``npusched.schedule.pricing``)."""
    if op.weights is None or op.bias is None:
        return op
    key = (op.weights.name, op.bias.name, op.ifm.tensor.quantization.scale, op.ofm.tensor.quantization.scale,
           op.npu_block_type, op.kernel.dilation_x, op.kernel.dilation_y)
    earlier = [other.index for other in encoders.get(key, ())
               if np.array_equal(other.weights.values, op.weights.values)
               and np.array_equal(other.bias.values, op.bias.values)]
    encoders.setdefault(key, []).append(op)
    return replace(op, attrs=(*op.attrs, (WEIGHT_TWINS, tuple(earlier)))) if earlier else op


def lower_model(model: TfliteModel, arch: ArchitectureFeatures | None = None,
                recipe: GraphRecipe | None = None) -> Network:
    """Lower every subgraph of ``model``; NPU subgraphs are listed in Vela's order (per TFLite subgraph, in
    execution order). Time and memory grow linearly with the size of the model (scripts/bench/load.py --netgen).

    The recipe's lowering choices (default: Vela legacy's graph, copies and all):

    ``writes_in_place``: the passes making a concatenation's inputs write their slices themselves where that is
    exact and memory allows (``npusched.lowering.in_place``; ``in_place_budget_bytes`` bounds how much sooner a
    write may make its OFM live).

    ``deep_views``: a SOFTMAX computes its per-row arithmetic (and its per-element passes over its exp map) on a
    deeper view of the same bytes (``softmax.deep_view``), as the default core does; without it, at depth 1 as
    Vela legacy does.

    ``default_core``: the graph Vela's default core schedules, which ``--solver vela-default`` reads its schedule
    onto: its int8 -> int16 SOFTMAX and NCHW <-> NHWC TRANSPOSE on the NPU too, its own softmax and LSTM passes
    (``LoweringContext.default_core``), binary operands in TFLite order. Vela legacy's backend cannot compile it.
    ``keep_strides``: a convolution keeps its stride, as that core's graph does (Vela legacy folds some into
    depth)."""
    recipe = recipe or GraphRecipe()
    limit, collecting = sys.getrecursionlimit(), gc.isenabled()
    sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
    # The working graph is cyclic (ops and tensors link both ways) and grows to thousands of objects; Python's
    # cyclic collector re-scanning it while it grows makes lowering quadratic, and nothing in it is garbage yet.
    gc.disable()
    try:
        return _lower_model(model, arch, recipe)
    except RecursionError:
        raise ModelError(f"{model.path}: the graph is too deep to lower ({RECURSION_LIMIT} nested steps)") from None
    finally:
        sys.setrecursionlimit(limit)
        if collecting:
            gc.enable()


def _lower_model(model: TfliteModel, arch: ArchitectureFeatures, recipe: GraphRecipe) -> Network:
    default_core, deep_views = recipe.default_core, recipe.deep_views
    all_ops: list[NpuOp | CpuOp] = []
    subgraphs: list[NpuSubgraph] = []
    encoders: dict[tuple, list[NpuOp]] = {}  # passes with weights and scales, by what Vela's weight cache keys
    for tsg in model.subgraphs:
        vsg, by_index = import_subgraph(tsg)

        def support(op: WorkingOp, _tsg: TfliteSubgraph = tsg, _idx: dict = by_index) -> str | None:
            return _support_reason(_idx.get(op.op_index) if op.op_index is not None else None, _tsg, default_core)

        def decompose(op: WorkingOp, _tsg: TfliteSubgraph = tsg, _idx: dict = by_index) -> list[NpuOp] | None:
            top = _idx.get(op.op_index) if op.op_index is not None else None
            return _decompose(op, top, model, _tsg, arch, default_core, deep_views)

        GraphRewriter(arch=arch, support=support, decompose=decompose, keep_strides=recipe.keep_strides
                      ).optimise(vsg)
        allowed = brick_allowed(vsg, arch)
        passes = pack_into_passes(vsg)
        if recipe.writes_in_place:
            passes = write_concat_inputs_in_place(passes, vsg, recipe.in_place_budget_bytes)
        runs = npu_runs(passes)
        assign_formats(runs, allowed)
        run_of: dict[int, int] = {id(ps): i for i, run in enumerate(runs) for ps in run}
        built: dict[int, NpuOp] = {}
        readers = _readers_per_run(passes, run_of)
        read_in: dict[int, set[int]] = {}  # tensor id -> runs (or -1, the CPU) reading it
        for tensor_id, where in readers:
            read_in.setdefault(tensor_id, set()).add(where)
        outputs = {id(t) for t in vsg.output_tensors}
        for ps in passes:
            if id(ps) in run_of:
                if ps.primary_op is None:
                    continue
                ofm, run_index = ps.ofm_tensor, run_of[id(ps)]
                inside = readers.get((id(ofm), run_index), 0)
                outside = id(ofm) in outputs or bool(read_in.get(id(ofm), set()) - {run_index})
                op = replace(_npu_op(ps, inside + (1 if outside else 0), default_core), index=len(all_ops))
                op = _with_weight_twins(op, encoders)
                built[id(ps)] = op
                all_ops.append(op)
            else:
                for cop in _cpu_ops(ps):
                    all_ops.append(replace(cop, index=len(all_ops)))
        for i, run in enumerate(runs):
            subgraphs.append(_npu_subgraph(f"{tsg.name}_split_{i + 1}", run, built, vsg.output_tensors))
    cpu = tuple(op for op in all_ops if isinstance(op, CpuOp))
    name = model.path.rsplit("/", 1)[-1].rsplit(".", 1)[0] if getattr(model, "path", None) else "network"
    return Network(name=name, subgraphs=tuple(subgraphs), ops=tuple(all_ops), cpu_ops=cpu)


def _readers_per_run(passes: list[Pass], run_of: dict[int, int]) -> dict[tuple[int, int], int]:
    """(tensor id, run index or -1 for CPU) -> number of ops reading it there, counted the way Vela's
    consumer lists are rebuilt once the NPU subgraphs are cut (ops of the passes only)."""
    counts: dict[tuple[int, int], int] = {}
    for ps in passes:
        where = run_of.get(id(ps), -1)
        for op in ps.ops:
            for t in op.inputs:
                if t is not None:
                    counts[(id(t), where)] = counts.get((id(t), where), 0) + 1
    return counts


def _npu_subgraph(name: str, run: list[Pass], built: dict[int, NpuOp], sg_outputs: list[WorkingTensor]) -> NpuSubgraph:
    ops = [built[id(ps)] for ps in run if id(ps) in built]
    produced: set[int] = set()
    in_run = {id(ps) for ps in run}
    inputs: list[FeatureMap] = []
    outputs: list[FeatureMap] = []
    for ps in run:
        if id(ps) not in built:
            continue
        for t in ps.inputs:
            if t.is_const or t.purpose == "LUT":
                continue
            if id(t) not in produced and not any(t.feature_map() == x for x in inputs):
                inputs.append(t.feature_map())
        produced.update(id(t) for t in ps.outputs)
    for ps in run:
        if id(ps) not in built:
            continue
        for t in ps.outputs:
            external = any(c is None or c.scheduled_pass is None or id(c.scheduled_pass) not in in_run
                           for c in t.consumers()) or any(t is o for o in sg_outputs)
            if external and not any(t.feature_map() == x for x in outputs):
                outputs.append(t.feature_map())
    return NpuSubgraph(name=name, ops=tuple(ops), inputs=tuple(inputs), outputs=tuple(outputs))


__all__ = ["Network", "NpuSubgraph", "lower_model", "Quantization"]
