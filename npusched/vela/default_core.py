"""Vela 5.2.0's default (C++) core as a baseline: run it, read back its decisions, and express them as an npusched
``Schedule`` the evaluator can price (``--solver vela-default``).

The default core's ``--enable-debug-db`` database says, per scheduled op, everything the schedule needs: the OFM
and IFM blocks and traversal (``perf_debug_main``), the stripes, cascade, memories, formats and weight buffering
(``perf_debug``), and its own per-op estimate (``perf``). Ops are matched to npusched's passes by OFM tensor name,
which both sides keep from the TFLite file. What has no equivalent in npusched's schedule space is said, in one
warning line each (see ``DefaultCoreImport.warnings``):

* ops of the default core's graph that npusched's (legacy-Vela) lowering does not have, or the reverse: the two
  graph optimisers decompose some operators (softmax, LSTM, mean, ...) differently; an npusched pass the default
  core has no op for runs with Vela legacy's own choice of block config, unstriped, unbuffered;
* a block config npusched's SHRAM layout rules reject: kept as the default core chose it (its IFM block too);
* an op whose fused activations the default core ran as separate ops (no npusched pass to hold them).
"""

from __future__ import annotations

import csv
import difflib
import io
import re
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from npusched.errors import NpuschedError, ScheduleError
from npusched.ir import FeatureMap, MemArea, NpuBlockType, NpuOp, Shape4D, TensorFormat
from npusched.lowering.graph import Network
from npusched.run import RunOptions
from npusched.schedule.cascades import rolling_buffer_shape
from npusched.schedule.evaluator import Evaluation, evaluate, verify
from npusched.schedule.schedule import (
    EncodedWeightsRef,
    OpSchedule,
    Schedule,
    TensorPlacement,
    WeightBuffering,
)
from npusched.target.block_config import (
    BlockConfig,
    ShramLayout,
    accumulator_type,
    find_block_config_for_op,
    op_block_inputs,
    try_block_config,
)
from npusched.target.estimators import PricedArchitecture
from npusched.target.performance import BufferKind
from npusched.target.weights import encode_op_weights
from npusched.vela.command import VelaError, last_line, run_vela
from npusched.vela.fidelity import ModelComparison, OpComparison
from npusched.vela.report import read_summary

_COLUMN_PASS = re.compile(r"(.*)_(?:mul|sum)\d+")
_TABLE = re.compile(r'<table name="(\w+)">\s*<!\[CDATA\[(.*?)\]\]>', re.S)
_MEMORIES = {"Sram": MemArea.Sram, "Dram": MemArea.Dram, "OffChipFlash": MemArea.OffChipFlash,
             "OnChipFlash": MemArea.OnChipFlash}
_FORMATS = {"NHWC": TensorFormat.NHWC, "NHCWB16": TensorFormat.NHCWB16}


@dataclass(frozen=True)
class DefaultCoreOp:
    """One op the default core scheduled and priced (a row of its debug database)."""

    uid: int
    name: str  # the OFM tensor's name
    operator: str
    ofm_shape: Shape4D
    ofm_block: Shape4D
    ifm_block: Shape4D
    traversal: str
    ofm_stripe: Shape4D
    ifm_stripe: Shape4D
    ifm2_stripe: Shape4D | None
    memories: tuple[str, str, str]  # ifm, ifm2, ofm ("" where the op group keeps it internal)
    formats: tuple[str, str, str]
    cascade: int
    buffering: str  # "", "None", "Single" or "Double"
    pre_buffered: bool
    depth_slices: tuple[int, ...]
    op_cycles: float
    npu_cycles: float
    access_cycles: dict[str, float] = field(default_factory=dict)
    mac_cycles: int | None = None
    ao_cycles: int | None = None
    cmd_cycles: int | None = None


def read_tables(path: Path) -> dict[str, list[dict[str, str]]]:
    """Every table of a debug database (``--enable-debug-db`` XML), rows as dicts keyed by column."""
    tables: dict[str, list[dict[str, str]]] = {}
    for match in _TABLE.finditer(Path(path).read_text()):
        rows = list(csv.reader(io.StringIO(match.group(2).strip())))
        tables[match.group(1)] = [dict(zip(rows[0], row, strict=False)) for row in rows[1:]] if rows else []
    return tables


def _shape(row: dict[str, str], prefix: str) -> Shape4D | None:
    values = [int(row.get(f"{prefix}_{axis}") or 0) for axis in "nhwc"]
    return Shape4D(*values) if any(values) else None


def read_default_core_ops(debug_db: Path) -> list[DefaultCoreOp]:
    """The main (non-fused) NPU ops of a debug database, in the default core's schedule order."""
    tables = read_tables(debug_db)
    perf = {row["id"]: row for row in tables.get("perf", [])}
    main = {row["id"]: row for row in tables.get("perf_debug_main", [])}
    ops = []
    for row in tables.get("perf_debug", []):
        uid = row["id"]
        if uid not in main or uid not in perf:
            continue  # a fused sub-operation: priced with its parent
        block_row, perf_row = main[uid], perf[uid]
        ofm_block, ifm_block = _shape(block_row, "ofm_block"), _shape(block_row, "ifm_block")
        ofm_stripe, ifm_stripe = _shape(row, "ofm_stripe"), _shape(row, "ifm_stripe")
        ofm_shape = _shape(row, "ofm_shape")
        if ofm_block is None or ifm_block is None or ofm_stripe is None or ifm_stripe is None or ofm_shape is None:
            continue  # no block config: not an NPU op the schedule can hold
        access = {key[:-3]: float(value) for key, value in perf_row.items() if key.endswith("_ac") and value}
        ops.append(DefaultCoreOp(
            uid=int(uid), name=perf_row["name"], operator=perf_row["operator"], ofm_shape=ofm_shape,
            ofm_block=ofm_block, ifm_block=ifm_block, traversal=block_row.get("traversal", ""),
            ofm_stripe=ofm_stripe, ifm_stripe=ifm_stripe, ifm2_stripe=_shape(row, "ifm2_stripe"),
            memories=(row["ifm_memory"], row["ifm2_memory"], row["ofm_memory"]),
            formats=(row["ifm_format"], row["ifm2_format"], row["ofm_format"]),
            cascade=int(row["cascade"] or 0), buffering=row["weight_buffering"],
            pre_buffered=row["weight_pre_buffer"] == "1",
            depth_slices=tuple(int(v) for v in row["ofm_depth_slices"].split("|") if v),
            op_cycles=float(perf_row["op_cycles"]), npu_cycles=float(perf_row["npu_cycles"]), access_cycles=access,
            mac_cycles=int(block_row["mac_cycles"]) if block_row.get("mac_cycles") else None,
            ao_cycles=int(block_row["ao_cycles"]) if block_row.get("ao_cycles") else None,
            cmd_cycles=int(block_row["cmd_cycles"]) if block_row.get("cmd_cycles") else None,
        ))
    return ops


@dataclass(frozen=True)
class DefaultCoreImport:
    """The default core's schedule as npusched's, which default-core op each pass took its choices from (None
    where it has none), and what could not be expressed."""

    schedule: Schedule
    matched: dict[int, DefaultCoreOp]
    warnings: tuple[str, ...]


def _block_config(arch: PricedArchitecture, op: NpuOp, core_op: DefaultCoreOp) -> tuple[BlockConfig, bool]:
    """The default core's block config as npusched's (and whether npusched's SHRAM rules accept it)."""
    inputs = op_block_inputs(op)
    part = core_op.traversal == "PartKernel"
    ifm2 = core_op.ifm2_stripe if op.ifm2 is not None else None
    fitted = try_block_config(core_op.ofm_block, arch, ofm_shape=core_op.ofm_stripe, ifm_shape=core_op.ifm_stripe,
                              ifm2_shape=ifm2, is_partkernel=part, **inputs)
    if fitted is not None:
        ifm_block = core_op.ifm_block
        if ifm_block.height < fitted.ifm_block.height or ifm_block.width < fitted.ifm_block.width:
            # Smaller than this op reads for that OFM block: the core's op is another writer of the same map (an
            # up-sampling written in place into a concatenation, matched to the copy of its other input).
            ifm_block = fitted.ifm_block
        if op.npu_block_type == NpuBlockType.Dma:
            # The core runs the copy as an AvgPool (IFM block as deep as the OFM's); npusched's DMA copy takes Vela
            # legacy's IFM block for the copy's own IFM (its backend checks it: a reshape's copy reads another
            # shape than the core's AvgPool) and no block is priced.
            legacy = try_block_config(core_op.ofm_block, arch, ofm_shape=core_op.ofm_stripe, ifm_shape=op.ifm.shape,
                                      ifm2_shape=None, is_partkernel=part, **inputs)
            fitted = legacy if legacy is not None else fitted
            ifm_block = fitted.ifm_block
        return BlockConfig(ofm_block=fitted.ofm_block, ifm_block=ifm_block, acc_type=fitted.acc_type,
                           is_partkernel=part, bank_size=fitted.bank_size, layout=fitted.layout), True
    acc = accumulator_type(op.npu_block_type, inputs["ifm_bits"], inputs["scaled"])
    return BlockConfig(ofm_block=core_op.ofm_block, ifm_block=core_op.ifm_block, acc_type=acc, is_partkernel=part,
                       bank_size=0, layout=ShramLayout(0, 0, 0, 0, 0)), False


def _fallback(arch: PricedArchitecture, op: NpuOp) -> OpSchedule:
    """An npusched pass the default core has no op for: Vela legacy's block, whole OFM, weights in place."""
    block = find_block_config_for_op(arch, op)
    ifm2 = op.ifm2.shape if op.ifm2 is not None else None
    encoded = None
    if op.weights is not None and block is not None:
        enc = encode_op_weights(arch, op, block.ofm_block.depth, (0, op.ofm.shape.depth))
        encoded = EncodedWeightsRef.of(enc, block.ofm_block.depth)
    return OpSchedule(op_index=op.index, block_config=block, ofm_stripe=op.ofm.shape, ifm_stripe=op.ifm.shape,
                      ifm2_stripe=ifm2, encoded_weights=encoded)


# npusched's (legacy Vela's) op type names where the default core names the same operator differently
_CORE_TYPE = {"Conv2DBias": "Conv2D", "DepthwiseConv2DBias": "DepthwiseConv2D", "Memcpy": "AvgPool",
              "QuantizedAvgPool": "AvgPool", "QuantizedMaxPool": "MaxPool", "Quantize": "AvgPool", "SHR": "Asr"}


# default-core operators it runs as a 1x1 AvgPool (regor-5.2.0 ArchEthosU55::UseAvgPoolNop), as npusched's Memcpy
_AVGPOOL_NOPS = frozenset({"MemoryCopy", "Clamp", "Tanh", "Sigmoid"})


def _core_name(op: NpuOp) -> str:
    """The name the default core gives ``op``'s OFM: Vela legacy (and npusched) run a 1x1 convolution of a 1x1 map
    as a fully connected pass named with a ``_fc`` suffix; the default core keeps the convolution and its name."""
    return op.name.removesuffix("_fc") if op.op_type == "FullyConnected" else op.name


def _matmul_of(op: NpuOp, by_name: dict[str, list[DefaultCoreOp]]) -> DefaultCoreOp | None:
    """The default core's MatMul whose column ``op`` is (``<ofm>_mul<n>`` or ``<ofm>_sum<n>`` of a BATCH_MATMUL:
    ``npusched.lowering.batch_matmul``), or None."""
    found = _COLUMN_PASS.fullmatch(op.name) if op.tflite_op == "BATCH_MATMUL" else None
    core_ops = by_name.get(found.group(1), []) if found is not None else []
    return next((core_op for core_op in core_ops if core_op.operator == "MatMul"), None)


def match_ops(network: Network, core_ops: list[DefaultCoreOp]) -> dict[int, DefaultCoreOp]:
    """Which default-core op each npusched pass is (by op index): by OFM tensor name, then, for ops whose names
    differ or are missing (unnamed tensors), by aligning the remaining ops of both graphs in order on operator type
    and OFM shape."""
    ours = [op for sg in network.subgraphs for op in sg.ops]
    by_name: dict[str, list[DefaultCoreOp]] = defaultdict(list)
    for core_op in core_ops:
        if core_op.name and core_op.name != "<unnamed>":
            by_name[core_op.name].append(core_op)
    matched: dict[int, DefaultCoreOp] = {}
    taken: set[int] = set()
    for op in ours:
        compound = _matmul_of(op, by_name)
        if compound is not None:  # a column pass of the core's compound MatMul: all of them share it
            matched[op.index] = compound
            taken.add(compound.uid)
            continue
        queue = by_name.get(op.name) or by_name.get(_core_name(op))
        if op.name and queue:
            core_op = queue.pop(0)
            matched[op.index] = core_op
            taken.add(core_op.uid)
    rest_ours = [op for op in ours if op.index not in matched]
    rest_core = [c for c in core_ops if c.uid not in taken]

    def key_ours(op: NpuOp) -> tuple[str, tuple[int, ...]]:
        return _CORE_TYPE.get(op.op_type, op.op_type), tuple(op.ofm.shape.as_list())

    def key_core(core_op: DefaultCoreOp) -> tuple[str, tuple[int, ...]]:
        # npusched lowers a Quantize to the AvgPool rescale Vela legacy runs; the default core runs its copies,
        # clamps and standalone activations as 1x1 AvgPools too
        operator = "AvgPool" if core_op.operator in _AVGPOOL_NOPS else core_op.operator
        return _CORE_TYPE.get(operator, operator), tuple(core_op.ofm_shape.as_list())

    aligner = difflib.SequenceMatcher(None, [key_ours(op) for op in rest_ours], [key_core(c) for c in rest_core],
                                      autojunk=False)
    for block in aligner.get_matching_blocks():
        for k in range(block.size):
            matched[rest_ours[block.a + k].index] = rest_core[block.b + k]
    return matched


def _place(placements: dict[FeatureMap, TensorPlacement], core_op: DefaultCoreOp,
           operands: list[tuple[FeatureMap, int]], maps_live_in: tuple[MemArea, ...]) -> None:
    """Where the core keeps each operand (by its slot: IFM, IFM2, OFM), where that is a feature map's memory."""
    for fm, slot in operands:
        area = _MEMORIES.get(core_op.memories[slot])
        fmt = _FORMATS.get(core_op.formats[slot])
        if area in maps_live_in and fmt is not None and not fm.is_const:
            placements.setdefault(fm, TensorPlacement(area, fmt))


def schedule_from_default_core(network: Network, arch: PricedArchitecture,
                               core_ops: list[DefaultCoreOp]) -> DefaultCoreImport:
    """The default core's decisions, op by op, as an npusched ``Schedule`` (see the module notes for what is not
    expressible)."""
    matched = match_ops(network, core_ops)
    warnings: list[str] = []
    unmatched: list[str] = []
    unfitted: list[str] = []
    ops: list[OpSchedule] = []
    placements: dict[FeatureMap, TensorPlacement] = {}
    # Feature maps live in fast or feature-map storage: an operand the core reads from flash is one of its constants
    # where the op alignment pairs it with a map of npusched's (a fused pad's, say).
    maps_live_in = (arch.fast_storage_mem_area, arch.feature_map_storage_mem_area)
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)  # (subgraph, default-core cascade) -> op indices
    for sg_pos, sg in enumerate(network.subgraphs):
        for op in sg.ops:
            core_op = matched.get(op.index)
            if core_op is None:
                unmatched.append(op.name or f"#{op.index} {op.op_type}")
                ops.append(_fallback(arch, op))
                continue
            if core_op.operator == "MatMul" and op.op_type == "Mul":
                # The core's MatMul records its REDUCE_SUM's block: the MUL of a column takes Vela legacy's.
                ops.append(_fallback(arch, op))
                _place(placements, core_op, [(op.ifm.tensor, 0), *([(op.ifm2.tensor, 1)] if op.ifm2 else [])],
                       maps_live_in)
                continue
            block, fits = _block_config(arch, op, core_op)
            if not fits:
                unfitted.append(op.name)
            slices = core_op.depth_slices or (0, core_op.ofm_stripe.depth)
            buffering = WeightBuffering()
            encoded = None
            if op.weights is not None:
                enc = encode_op_weights(arch, op, block.ofm_block.depth, slices)
                encoded = EncodedWeightsRef.of(enc, block.ofm_block.depth)
                if core_op.buffering in ("Single", "Double"):
                    kind = BufferKind.DOUBLE if core_op.buffering == "Double" else BufferKind.SINGLE
                    sizes = tuple(enc.double_buffer_sizes) if kind is BufferKind.DOUBLE else (enc.total_bytes,)
                    buffering = WeightBuffering(kind=kind, depth_slices=tuple(enc.depth_slices), buffer_sizes=sizes,
                                                pre_buffered=core_op.pre_buffered)
            ifm2_stripe = core_op.ifm2_stripe if op.ifm2 is not None else None
            ofm_stripe, ifm_stripe = core_op.ofm_stripe, core_op.ifm_stripe
            if core_op.cascade:
                groups[(sg_pos, core_op.cascade)].append(op.index)
            else:
                # A whole pass. The core names the windows of sliced tensors it reads or writes (an unpacked
                # step, a packed state); npusched's schedules name the whole maps the pass sees.
                ofm_stripe, ifm_stripe = op.ofm.shape, op.ifm.shape
            ops.append(OpSchedule(op_index=op.index, block_config=block, ofm_stripe=ofm_stripe,
                                  ifm_stripe=ifm_stripe, ifm2_stripe=ifm2_stripe, weight_buffering=buffering,
                                  encoded_weights=encoded))
            operands = [(op.ifm.tensor, 0), (op.ofm.tensor, 2)]
            if op.ifm2 is not None:
                operands.append((op.ifm2.tensor, 1))
            if core_op.operator == "MatMul":  # its REDUCE_SUM reads the product map, the core's scratch
                operands = [(op.ofm.tensor, 2)]
            _place(placements, core_op, operands, maps_live_in)
    by_index = {o.op_index: o for o in ops}
    for members in groups.values():
        if len(members) < 2:
            continue
        last = max(members)
        for pos, index in enumerate(sorted(members)):
            rolling = None
            if pos > 0:
                producer = by_index[sorted(members)[pos - 1]]
                rolling = rolling_buffer_shape(producer.ofm_stripe, by_index[index].ifm_stripe)
            by_index[index] = replace(by_index[index], cascade=last, rolling_buffer=rolling)
    used = {core_op.uid for core_op in matched.values()}
    leftover = [f"{c.name} ({c.operator})" for c in core_ops if c.uid not in used]
    if unmatched:
        warnings.append(f"{len(unmatched)} npusched pass(es) have no op in the default core's graph (its graph "
                        f"optimiser decomposes them differently) and run with Vela legacy's block config, unstriped "
                        f"and unbuffered: {', '.join(unmatched[:3])}{' ...' if len(unmatched) > 3 else ''}")
    if leftover:
        warnings.append(f"{len(leftover)} default-core op(s) have no npusched pass (npusched runs them on the CPU "
                        f"or decomposes them differently); "
                        f"their cycles are not in npusched's total: {', '.join(leftover[:3])}"
                        f"{' ...' if len(leftover) > 3 else ''}")
    if unfitted:
        warnings.append(f"{len(unfitted)} default-core block config(s) break npusched's (legacy) SHRAM layout rules "
                        f"and are kept as the default core chose them: {', '.join(unfitted[:3])}"
                        f"{' ...' if len(unfitted) > 3 else ''}")
    schedule = Schedule(ops=tuple(by_index[i] for i in sorted(by_index)), tensors=tuple(placements.items()),
                        label="VELA_DEFAULT", status="imported", solver="vela-default", notes=tuple(warnings))
    return DefaultCoreImport(schedule=schedule, matched=matched, warnings=tuple(warnings))


def run_default_core(options: RunOptions, output_dir: Path, timeout_seconds: float | None = None) -> Path:
    """Run the `vela` CLI's default core on the options' model and hardware; the debug database's path."""
    output_dir.mkdir(parents=True, exist_ok=True)
    done = run_vela(options, output_dir, core="default",
                    verbose=("--verbose-schedule", "--verbose-performance", "--enable-debug-db"),
                    timeout_seconds=timeout_seconds)
    (output_dir / "vela_stdout.txt").write_text(done.stdout)
    if done.returncode != 0:
        raise VelaError(f"Vela's default core failed: {last_line(done)}")
    found = sorted(output_dir.glob("*debug*.xml"))
    if not found:
        raise VelaError(f"Vela's default core wrote no debug database in {output_dir}")
    return found[0]


def solve_with_default_core(network: Network, arch: PricedArchitecture, options: RunOptions,
                            model_bytes: bytes | None = None,
                            timeout_seconds: float | None = None) -> DefaultCoreImport:
    """``--solver vela-default``: the default core's schedule of the model, imported. ``model_bytes`` is the model
    npusched scheduled (the normalised one), which Vela then compiles too (default: the options' file)."""
    with tempfile.TemporaryDirectory(prefix="npusched-vela-default-") as tmp:
        if model_bytes is not None:
            model_path = Path(tmp) / Path(options.model_path).name
            model_path.write_bytes(model_bytes)
            options = replace(options, model_path=model_path)
        try:
            debug_db = run_default_core(options, Path(tmp) / "output", timeout_seconds)
        except subprocess.TimeoutExpired:
            raise ScheduleError(f"Vela's default core did not finish within {timeout_seconds:.0f} s") from None
        core_ops = read_default_core_ops(debug_db)
    return schedule_from_default_core(network, arch, core_ops)


def compare_default_core(network: Network, arch: PricedArchitecture, golden: Path, model: str) -> ModelComparison:
    """The default core's own schedule (from the golden folder's debug database), priced by npusched's evaluator
    under ``arch.estimator``, against the default core's own per-op and network figures in that folder."""
    core_ops = read_default_core_ops(golden / "debug_db.xml")
    imported = schedule_from_default_core(network, arch, core_ops)
    evaluation = evaluate(network, arch, imported.schedule)
    comparisons = []
    for cost in evaluation.ops:
        core_op = imported.matched.get(cost.op_index)
        if core_op is None:
            continue
        comparisons.append(OpComparison(model=model, name=cost.name or core_op.name, block_equal=True,
                                        npu_ours=cost.npu_cycles, npu_vela=core_op.npu_cycles,
                                        cycles_ours=cost.total_cycles, cycles_vela=core_op.op_cycles))
    cascades = frozenset(
        (0, min(members), max(members)) for members in _cascade_members(imported.schedule).values()
        if len(members) > 1)
    return ModelComparison(model=model, ops=comparisons, cycles_ours=evaluation.total_cycles,
                           cycles_vela=float(read_summary(golden / "summary.csv")["cycles_total"]),
                           cascades_ours=cascades, cascades_vela=cascades)


def _cascade_members(schedule: Schedule) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = defaultdict(list)
    for op_sched in schedule.ops:
        if op_sched.cascade is not None:
            groups[op_sched.cascade].append(op_sched.op_index)
    return groups


def default_core_hint(network: Network, arch: PricedArchitecture, options: RunOptions, model_bytes: bytes | None,
                      timeout_seconds: float) -> tuple[Schedule, Evaluation] | None:
    """The default core's own schedule and its evaluation, as a start for CP-SAT under ``--estimator
    vela-default`` (so CP-SAT is never worse than it), or None where Vela is missing, fails, takes longer than
    ``timeout_seconds``, or its schedule does not verify under npusched's rules."""
    try:
        imported = solve_with_default_core(network, arch, options, model_bytes, timeout_seconds)
    except (NpuschedError, OSError):
        return None
    evaluation = evaluate(network, arch, imported.schedule)
    if verify(network, arch, imported.schedule, evaluation):
        return None
    return imported.schedule, evaluation
