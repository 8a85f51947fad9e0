"""Pass packing and NPU-subgraph extraction, as Vela's pass_packing.py and extract_npu_subgraphs.py do them.

A pass is one primary operation plus what the hardware can fuse into it (an activation that only reads the
primary's output, a standalone activation given an AvgPool no-op as primary). Passes are discovered by a
depth-first walk from the subgraph outputs, where a producer is visited once all its consumers have been;
the reversed discovery order is the execution order. CPU passes are then regrouped to reduce NPU/CPU
switches, and runs of NPU passes become NPU subgraphs.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from npusched.lowering.netgraph import (
    BINARY_ELEMENTWISE,
    CONCAT_TYPES,
    RELU_TYPES,
    UNARY_ELEMENTWISE,
    WorkingGraph,
    WorkingOp,
    WorkingTensor,
    block_kind,
)
from npusched.lowering.rewrite_helpers import avgpool_nop

# Pass flags (bit set)
EMPTY, MAIN, POST, MAC, ELEMENTWISE, NPU, CPU, STARTUP, MEMORY_ONLY, POST_LIMITED, MEMCPY = (
    0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)

_MAC_MAIN = frozenset({"Conv2DBias", "Conv2D", "QuantizedConv2D", "Conv2DBackpropInputSwitchedBias",
                       "DepthwiseConv2DBias", "QuantizedMatMul", "MatMul", "FullyConnected", "QuantizedMaxPool",
                       "QuantizedAvgPool", "AvgPool", "MaxPool", "ReduceSum", "ResizeBilinear",
                       "ResizeNearestNeighbor", "Transpose"})  # Transpose: only the default core's on the NPU
_ELEMWISE_MAIN = BINARY_ELEMENTWISE | UNARY_ELEMENTWISE
_POST = RELU_TYPES
_POST_LIMITED = frozenset({"Sigmoid", "Tanh", "Quantize"})
_ELEMWISE_OPS = _ELEMWISE_MAIN | _POST | frozenset({"Sigmoid", "Tanh"})
_STARTUP = frozenset({"Const", "Placeholder", "SubgraphInput"})
_MEMORY_ONLY = frozenset({"Squeeze", "Reshape", "QuantizedReshape", "ExpandDims"})
_MEMCPY = frozenset({"Memcpy"})
_CPU_OPS = frozenset({"Softmax", "LRN", "Shape", "Pad", "AddN", "Dequantize", "Max", "Min"})

# (op set or None for "anything", incompatible flags, flags to set)
_SEQUENCE: list[tuple[frozenset | None, int, int]] = [
    (_POST, CPU | MEMORY_ONLY | MAIN, NPU | POST),
    (_POST_LIMITED, CPU | MEMORY_ONLY | MAIN | POST_LIMITED, NPU | POST_LIMITED),
    (_MAC_MAIN, CPU | MEMORY_ONLY | ELEMENTWISE | MAIN | POST_LIMITED, NPU | MAC | MAIN),
    (_ELEMWISE_MAIN, CPU | MEMORY_ONLY | MAC | MAIN | POST_LIMITED, NPU | ELEMENTWISE | MAIN),
    (_STARTUP, NPU | CPU | MEMORY_ONLY, STARTUP | MAIN),
    (_MEMORY_ONLY, NPU | CPU, MEMORY_ONLY | MAIN),
    (_MEMCPY, CPU | MEMORY_ONLY | MAC | MAIN | POST_LIMITED, NPU | MEMCPY | MAIN),
    (_CPU_OPS, NPU | MEMORY_ONLY | MAIN, CPU | MAIN),
    (None, NPU | MEMORY_ONLY | MAIN, CPU | MAIN),
]


@dataclass(eq=False)
class Pass:
    name: str
    placement: str  # "Npu", "Cpu", "MemoryOnly", "StartupInit"
    ops: list[WorkingOp]
    primary_op: WorkingOp | None
    inputs: list[WorkingTensor]
    outputs: list[WorkingTensor]
    ifm_tensor: WorkingTensor | None = None
    ifm2_tensor: WorkingTensor | None = None
    ofm_tensor: WorkingTensor | None = None
    ifm_shapes: list = field(default_factory=list)
    ofm_shapes: list = field(default_factory=list)
    npu_block_type: str = "Default"


def pack_into_passes(sg: WorkingGraph) -> list[Pass]:
    """The subgraph's passes in Vela's execution order (startup pass excluded)."""
    reverse_passes: list[Pass] = []
    op_refs: dict[int, int] = collections.defaultdict(int)
    tens_refs: dict[int, int] = collections.defaultdict(int)

    def visit_op(op: WorkingOp) -> None:
        op_refs[id(op)] += 1
        if op_refs[id(op)] == 1:
            for t in op.outputs:
                if len(t.consumers()) == 0:
                    op_refs[id(op)] += 1
        if op_refs[id(op)] == len(op.outputs):
            if op.type in _STARTUP:
                return
            ofm = op.ofm if op.ofm is not None else op.outputs[0]
            ofm_shape = op.ofm_shapes[0] if op.run_on_npu and op.ofm_shapes else None
            build_pass(op, ofm, ofm_shape)

    def visit_tensor(tens: WorkingTensor) -> None:
        tens_refs[id(tens)] += 1
        if tens_refs[id(tens)] == len(tens.consumers()):
            for op in reversed(tens.ops):
                visit_op(op)

    def can_pack(inp: WorkingTensor, cur: WorkingOp) -> bool:
        if len(inp.ops) != 1:
            return False
        nxt = inp.ops[0]
        for out in nxt.outputs:
            cons = out.consumers()
            if len(cons) > 1 or (len(cons) == 1 and cons[0] is not cur):
                return False
        if cur.ifm_shapes and nxt.ofm_shapes:
            if inp is cur.ifm and nxt.ofm_shapes[0] != cur.ifm_shapes[0]:
                return False
            if cur.ifm2 is not None and inp is cur.ifm2 and nxt.ofm_shapes[0] != cur.ifm_shapes[1]:
                return False
        return True

    def build_pass(start: WorkingOp, ofm: WorkingTensor, ofm_shape) -> Pass:
        reverse_ops: list[WorkingOp] = []
        flags = EMPTY
        block = "Default"
        input_set: list[WorkingTensor] = []
        ifm_tensor: WorkingTensor | None = None
        ifm_shapes: list = []
        primary: WorkingOp | None = None
        queue: collections.deque[tuple[WorkingOp, WorkingTensor | None]] = collections.deque([(start, None)])

        def add_input(t: WorkingTensor) -> None:
            if not any(t is x for x in input_set):
                input_set.append(t)

        while queue:
            cur, tens = queue.popleft()
            if any(cur is o for o in reverse_ops):
                continue
            for op_set, incompatible, to_set in _SEQUENCE:
                if op_set is not None and cur.type not in op_set:
                    continue
                if flags & incompatible:
                    continue
                if to_set & NPU and not cur.run_on_npu:
                    continue
                reverse_ops.append(cur)
                kind = block_kind(cur.type)
                if kind != "Default":
                    block = kind
                    primary = cur
                flags |= to_set
                if to_set & NPU and to_set & (MAC | ELEMENTWISE | POST | POST_LIMITED | MEMCPY):
                    ifm_tensor = cur.ifm
                    ifm_shapes = list(cur.ifm_shapes)
                for inp in reversed(cur.inputs):
                    if inp is None:
                        continue
                    if can_pack(inp, cur):
                        queue.append((inp.ops[0], inp))
                    else:
                        add_input(inp)
                break
            else:
                add_input(tens)

        if flags & NPU and not flags & (ELEMENTWISE | MAC):
            flags |= ELEMENTWISE
        placement = "Npu" if flags & NPU else "Cpu" if flags & CPU else "MemoryOnly" if flags & MEMORY_ONLY \
            else "StartupInit"
        ops_list = list(reversed(reverse_ops))
        refcounts: dict[int, int] = collections.defaultdict(int)
        ordered: list[WorkingTensor] = []
        luts: list[WorkingTensor] = []

        if primary is None and any(o.type in (_POST | _POST_LIMITED) and o.run_on_npu for o in ops_list):
            # A standalone activation: give it a 1x1 AvgPool as primary op.
            first = ops_list[0]
            inp = first.inputs[0]
            pool = avgpool_nop(first.name + "_avgpool")
            pool.original_type = first.original_type
            pool.tflite_op = first.tflite_op
            pool.op_index = first.op_index
            pool.inputs = [inp]
            inp.consumer_list.append(pool)
            pooled = inp.clone("_avgpooled")
            pooled.consumer_list.append(first)
            pool.set_output(pooled)
            pool.ifm_shapes = list(first.ifm_shapes)
            pool.ofm_shapes = list(first.ofm_shapes)
            pool.read_offsets = list(first.read_offsets)
            pool.read_shapes = list(first.read_shapes)
            first.inputs[0] = pooled
            ops_list.insert(0, pool)
            primary = pool
            tens_refs[id(inp)] += 1
            block = "Pooling"
            for t in pool.inputs:
                add_input(t)

        def add_ordered(t: WorkingTensor | None) -> None:
            if t is None or not any(t is x for x in input_set):
                return
            if refcounts[id(t)] == 0:
                if t.purpose == "LUT":
                    luts.append(t)
                else:
                    ordered.append(t)
            refcounts[id(t)] += 1

        others = list(ops_list)
        if primary is not None:
            for t in primary.inputs:
                add_ordered(t)
            others = [o for o in ops_list if o is not primary]
        for o in others:
            for t in o.inputs:
                add_ordered(t)

        ps = Pass(name=ops_list[0].name, placement=placement, ops=ops_list, primary_op=primary, inputs=ordered,
                  outputs=list(ops_list[-1].outputs), npu_block_type=block)
        if primary is not None and primary.type in BINARY_ELEMENTWISE:
            ps.ifm_tensor = ps.inputs[0]
            ps.ifm2_tensor = ps.inputs[-1]
            if len(ps.inputs) > 2:
                ps.ifm_tensor = ps.inputs[-2]
            for o in others + [primary]:
                if not o.run_on_npu:
                    continue
                if ps.ifm_tensor is o.ifm:
                    ps.ifm_shapes.append(o.ifm_shapes[0])
                elif ps.ifm_tensor is o.ifm2:
                    ps.ifm_shapes.append(o.ifm_shapes[1])
                if ps.ifm2_tensor is o.ifm:
                    ps.ifm_shapes.append(o.ifm_shapes[0])
                elif ps.ifm2_tensor is o.ifm2:
                    ps.ifm_shapes.append(o.ifm_shapes[1])
        else:
            ps.ifm_tensor = ifm_tensor
            if primary is not None and primary.run_on_npu:
                ps.ifm_shapes.append(ifm_shapes[0] if ifm_shapes else primary.ifm_shapes[0])
        ps.ofm_tensor = ofm
        ps.ofm_shapes.append(ofm_shape)
        ps.inputs.extend(luts)
        for o in ps.ops:
            o.scheduled_pass = ps
        reverse_passes.append(ps)
        for key_t in list(ordered) + luts:
            for _ in range(refcounts[id(key_t)]):
                visit_tensor(key_t)
        return ps

    for tens in sg.output_tensors:
        visit_tensor(tens)

    return _reorder_cpu_passes(sg, list(reversed(reverse_passes)))


def _reorder_cpu_passes(sg: WorkingGraph, passes: list[Pass]) -> list[Pass]:
    """Vela's regrouping: CPU passes that only read graph inputs go first (in model order), concat slices
    split by a CPU pass are grouped, and CPU passes sink towards later CPU passes when nothing in between
    depends on them."""
    top: list[Pass] = []
    rest: list[Pass] = []
    inputs = sg.input_tensors
    for ps in passes:
        first = ps.ops[0]
        ifm2 = first.ifm2
        if ifm2 is None and first.type == "FullyConnected" and first.weights is not None \
                and first.weights.purpose == "FeatureMap" and not first.weights.is_const:
            ifm2 = first.weights
        only_inputs = all(any(i is x for x in inputs) for i in first.inputs if i is not None) and \
            (ifm2 is None or any(ifm2 is x for x in inputs))
        if ps.placement == "Cpu" and (only_inputs or first.type in ("VarHandle", "ReadVariable", "CallOnce")):
            top.append(ps)
        else:
            rest.append(ps)
    top.sort(key=lambda p: -1 if p.ops[0].op_index is None else p.ops[0].op_index)

    for npu_ps in list(reversed(rest)):
        if npu_ps.placement == "Cpu" or npu_ps.ops[0].original_type not in CONCAT_TYPES:
            continue
        idx = rest.index(npu_ps)
        split_by_cpu = False
        for nxt in rest[idx + 1:]:
            if nxt.placement == "Cpu":
                split_by_cpu = True
            if nxt.ops[0].original_type in CONCAT_TYPES and nxt.ops[0].ofm is npu_ps.ops[0].ofm and split_by_cpu:
                rest.remove(npu_ps)
                rest.insert(rest.index(nxt), npu_ps)
                break

    last_idx = len(rest) - 1
    for cpu_ps in list(reversed(rest)):
        if cpu_ps.placement != "Cpu":
            continue
        idx = rest.index(cpu_ps)
        for nxt in rest[idx + 1:]:
            if nxt.placement == "Cpu":
                rest.remove(cpu_ps)
                rest.insert(rest.index(nxt), cpu_ps)
                break
            readers = [nxt.ops[0].ifm, nxt.ops[0].ifm2]
            if any(any(o is r for r in readers if r is not None) for o in cpu_ps.ops[0].outputs) \
                    or nxt.placement == "MemoryOnly":
                break
            if rest.index(nxt) == last_idx:
                rest.remove(cpu_ps)
                rest.append(cpu_ps)
                break
    return top + rest


def npu_runs(passes: list[Pass]) -> list[list[Pass]]:
    """Maximal runs of NPU passes, after Vela's re-homing of memory-only passes next to NPU passes."""
    place = [p.placement for p in passes]
    for reverse in (False, True):
        last = "Cpu"
        order = range(len(place) - 1, -1, -1) if reverse else range(len(place))
        for i in order:
            pl = place[i]
            if pl == "MemoryOnly" and passes[i].ops[0].run_on_npu and last == "Npu":
                pl = "Npu"
                place[i] = pl
            if pl != "MemoryOnly":
                last = pl
    place = ["Cpu" if p in ("MemoryOnly", "StartupInit") else p for p in place]
    runs: list[list[Pass]] = []
    prev = "Cpu"
    for ps, pl in zip(passes, place, strict=True):
        if pl == "Npu":
            if prev != "Npu":
                runs.append([])
            runs[-1].append(ps)
        prev = pl
    return runs
