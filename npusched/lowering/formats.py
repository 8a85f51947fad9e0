"""Which feature maps Vela stores in the NPU's brick format (NHCWB16) and which stay linear (NHWC).

Vela decides this before scheduling, in two steps: after graph optimisation a tensor is allowed brick format
only if every producer and reader is an NPU op that sees it whole, unsliced on depth, at its own shape, and
not through a DMA copy (``check_format_restrictions``); NPU subgraph outputs are then forced linear. When
the scheduler is built, each NPU pass output that is allowed gets NHCWB16 — except the output of an
elementwise pass whose depth is not a multiple of 16 when it could overwrite a linear input in place.
This is npusched's one copy of the rule: the schedulers read the layouts it sets (``FeatureMap.format``, through
``solvers.max_schedule.vela_tensor_placements``) rather than judging the packed passes again, where a reshape
a map is read through is no longer seen.
"""

from __future__ import annotations

from npusched.ir import DataType, Shape4D, TensorFormat
from npusched.lowering.netgraph import BINARY_ELEMENTWISE, WorkingGraph, WorkingOp, WorkingTensor, block_kind
from npusched.lowering.packing import Pass
from npusched.target.arch import ArchitectureFeatures


def _memory_function(op: WorkingOp) -> str | None:
    if op.memory_function is not None:
        return op.memory_function
    if op.prebuilt is not None:
        return dict(op.prebuilt.attrs).get("memory_function")  # type: ignore[return-value]
    return None


def _brick_allowed(tens: WorkingTensor, arch: ArchitectureFeatures) -> bool:
    """Vela's check_format_restrictions: may ``tens`` leave linear format?"""
    if not tens.ops or tens.force_linear:
        return False
    if tens.ops[0].type in ("Placeholder", "SubgraphInput", "Const") or any(c is None for c in tens.consumer_list):
        return False
    if _memory_function(tens.ops[0]) == "VariableTensorWrite":
        return False
    if not all(c.run_on_npu for c in tens.consumer_list) or not all(p.run_on_npu for p in tens.ops):
        return False
    # Concat slices written at a depth offset that is not brick aligned.
    if any(p.write_offset is not None and p.write_offset.depth % 16 != 0 for p in tens.ops):
        return False
    # Split/slice reads at a depth offset that is not brick aligned.
    for c in tens.consumer_list:
        if c.ifm is tens and c.read_offsets[0] is not None and c.read_offsets[0].depth % 16 != 0:
            return False
        if c.ifm2 is not None and c.ifm2 is tens and c.read_offsets[1] is not None \
                and c.read_offsets[1].depth % 16 != 0:
            return False
    # Every reader and writer must see the tensor at its own shape.
    own = Shape4D.from_list(tens.shape)
    for c in tens.consumer_list:
        if c.ifm is tens:
            shape = c.ifm_shapes[0]
        elif c.type in BINARY_ELEMENTWISE and c.ifm2 is tens:
            shape = c.ifm_shapes[1]
        else:
            return False
        if shape != own:
            return False
    if any(p.ofm_shapes and p.ofm_shapes[0] != own for p in tens.ops):
        return False
    # DMA copies work on linear data.
    if any(o.type == "Memcpy" for o in list(tens.consumer_list) + list(tens.ops)):
        return False
    # Half-pixel bilinear resize strides its OFM writes.
    if any(o.original_type == "ResizeBilinear" and o.type == "DepthwiseConv2DBias" for o in tens.ops):
        return False
    is_u65_512 = str(getattr(arch, "accelerator_config", "")) == "ethos-u65-512"
    for c in tens.consumer_list:
        if c.type == "ReduceSum" and (tens.dtype == DataType.int32 or is_u65_512):
            return False
        if c.type == "Reshape":
            return False
    return True


def _avoid_brick_for_elementwise_ofm(ps: Pass, formats: dict[int, TensorFormat]) -> bool:
    """An elementwise pass whose OFM depth is not brick aligned keeps a linear OFM when it could overwrite
    a linear input of the same shape and type in place."""
    op = ps.primary_op
    if block_kind(op.type) != "ElementWise":
        return False
    if op.ofm_shapes[0].depth % 16 == 0:
        return False
    ofm = op.ofm
    ofm_format = formats.get(id(ofm), TensorFormat.NHWC)
    candidates = []
    if op.ifm is not None:
        candidates.append((op.ifm_shapes[0], op.ifm))
    if op.ifm2 is not None:
        candidates.append((op.ifm_shapes[1], op.ifm2))
    for shape, tens in candidates:
        if shape == op.ofm_shapes[0] and tens is not None and tens.shape != [] \
                and formats.get(id(tens), TensorFormat.NHWC) == ofm_format and tens.dtype == ofm.dtype:
            if formats.get(id(tens), TensorFormat.NHWC) == TensorFormat.NHWC:
                return True
    return False


def brick_allowed(sg: WorkingGraph, arch: ArchitectureFeatures) -> dict[int, bool]:
    """Tensor id -> may use brick format, judged on the optimised graph (before pass packing), as Vela
    does right after its graph optimiser."""
    allowed: dict[int, bool] = {}

    def visit(tens: WorkingTensor) -> None:
        allowed[id(tens)] = _brick_allowed(tens, arch)

    seen: set[int] = set()

    def walk(tens: WorkingTensor | None) -> None:
        if tens is None or id(tens) in seen:
            return
        seen.add(id(tens))
        for op in tens.ops:
            for t in op.inputs:
                walk(t)
        visit(tens)

    for t in sg.output_tensors:
        walk(t)
    return allowed


def assign_formats(runs: list[list[Pass]], allowed: dict[int, bool]) -> None:
    """Set ``WorkingTensor.format`` on the tensors of the NPU passes (NPU subgraph outputs stay linear)."""
    allowed = dict(allowed)
    for run in runs:
        members = {id(ps) for ps in run}
        for ps in run:
            for t in ps.outputs:
                external = any(c is None or c.scheduled_pass is None or id(c.scheduled_pass) not in members
                               for c in t.consumer_list)
                if external:
                    allowed[id(t)] = False
    formats: dict[int, TensorFormat] = {}
    for run in runs:
        for ps in run:
            if ps.primary_op is None:
                continue
            for out in ps.outputs:
                if out.purpose != "FeatureMap" or not allowed.get(id(out), False):
                    continue
                if _avoid_brick_for_elementwise_ofm(ps, formats):
                    continue
                formats[id(out)] = TensorFormat.NHCWB16
    for run in runs:
        for ps in run:
            for t in list(ps.outputs) + list(ps.inputs):
                t.format = formats.get(id(t), TensorFormat.NHWC)
