"""Vela 5.2.0's scheduling step with npusched's decisions: the part of the backend bridge that patches Vela.

``patched_vela`` swaps Vela's ``schedule_passes`` for a ``ForcedScheduler`` for one compilation and records Vela's
per-op estimate, and replays each command stream for reads of rolling-buffer rows no longer held
(``rolling_check``); the scheduler takes every decision from npusched's ``Schedule`` (block configs, stripes,
cascades and rolling buffers, weight encodings and buffering, feature-map placement, in-place writes, the
softmax passes' deeper views) and refuses, with a ``VelaRefusal`` naming the op, a decision Vela's rules do not
accept. Only Vela's public modules are used.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from npusched.errors import ScheduleError
from npusched.ir import NpuOp
from npusched.lowering.graph import Network
from npusched.lowering.in_place import IN_PLACE_OF
from npusched.lowering.softmax import DEEP_VIEW
from npusched.schedule.allocation import allocate_ranges
from npusched.schedule.evaluator import cascade_rolling_buffers, placement_of
from npusched.schedule.memory_layout import LiveRange
from npusched.schedule.schedule import OpSchedule, Schedule
from npusched.target import codec
from npusched.target.arch import OptimisationStrategy
from npusched.target.estimators import PricedArchitecture
from npusched.vela.lessons import vela_taught
from npusched.vela.rolling_check import rolling_buffer_problems


class VelaRefusal(ScheduleError):
    """Vela's backend does not accept one of the schedule's decisions (nothing is written)."""


@dataclass(frozen=True)
class Plan:
    """What Vela's scheduling step takes from a run: the network, the hardware and the schedule."""

    network: Network
    arch: PricedArchitecture
    schedule: Schedule



def op_in_traceback(exc: BaseException) -> str:
    """' at op NAME' (or tensor) for the innermost frame of Vela's that was handling an operation or tensor."""
    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        for key, what in (("sched_op", "op"), ("op", "op"), ("tens", "tensor"), ("tensor", "tensor")):
            name = getattr(frame.f_locals.get(key), "name", None)
            if isinstance(name, str):
                return f" at {what} '{name}'"
    return ""


@contextlib.contextmanager
def patched_vela(forcing: ForcedScheduler) -> Iterator[None]:
    """Vela's scheduling step replaced by ``forcing``, and its per-op estimate recorded, for one compilation.

    Vela caches encoded weight tensors process-wide; a tensor of an earlier compilation would be allocated twice,
    so each compilation starts, as the ``vela`` command does, with an empty cache. So with the equivalence ids of
    LUT tensors (keyed by their values): one kept from an earlier compilation failed Vela's allocator ("Two
    different addresses cannot be assigned to the same tensor"). Vela's main sets the recursion limit; the
    caller's is restored. Vela's weight compressor encodes through npusched's codec memo
    (``npusched.target.codec``), which holds the streams the run encoded while scheduling."""
    from ethosu.vela import high_level_command_stream_generator as hlcs
    from ethosu.vela import npu_performance, scheduler, weight_compressor
    from ethosu.vela.tensor import create_equivalence_id
    from ethosu.vela.weight_compressor import CompressedWeightCache

    original_schedule, original_estimate = scheduler.schedule_passes, npu_performance.estimate_full_op_performance

    def recording_estimate(arch: Any, schedule: Any, sched_op: Any, prev_op: Any, block_config: Any) -> Any:
        bws, macs, cycles = original_estimate(arch, schedule, sched_op, prev_op, block_config)
        forcing.record(sched_op, float(cycles[npu_performance.PassCycles.Total]))
        return bws, macs, cycles

    original_stream = hlcs.generate_high_level_command_stream_for_schedule

    def checked_stream(nng: Any, sg: Any, arch: Any, verbose: bool) -> None:
        original_stream(nng, sg, arch, verbose)
        problems = rolling_buffer_problems(sg.high_level_command_stream)
        if problems:
            raise VelaRefusal(f"a rolling buffer is too shallow: {problems[0]}"
                              + (f" (and {len(problems) - 1} more reads)" if len(problems) > 1 else ""))

    scheduler.schedule_passes = forcing.schedule_passes
    hlcs.generate_high_level_command_stream_for_schedule = checked_stream
    npu_performance.estimate_full_op_performance = recording_estimate
    original_codec = weight_compressor.mlw_codec
    weight_compressor.mlw_codec = types.SimpleNamespace(reorder_encode=codec.reorder_encode)
    CompressedWeightCache.cache.clear()
    create_equivalence_id.cache_clear()
    recursion_limit = sys.getrecursionlimit()
    try:
        with vela_taught():
            yield
    finally:
        scheduler.schedule_passes, npu_performance.estimate_full_op_performance = original_schedule, original_estimate
        hlcs.generate_high_level_command_stream_for_schedule = original_stream
        weight_compressor.mlw_codec = original_codec
        CompressedWeightCache.cache.clear()
        create_equivalence_id.cache_clear()
        sys.setrecursionlimit(recursion_limit)


class ForcedScheduler:
    """Vela's scheduling step with npusched's decisions: one forced ``Schedule`` per NPU subgraph.

    Stateful only for the length of one compilation: it remembers which Vela operation is which npusched pass so
    that Vela's per-op estimate can be read back.
    """

    def __init__(self, plan: Callable[[], Plan]) -> None:
        self._plan = plan
        self.network: Any = None
        self.arch: Any = None
        self.schedule: Schedule = Schedule(())
        self.op_of: dict[Any, NpuOp] = {}
        self.vela_cycles: dict[int, float] = {}
        self.vela_allocation_bytes: int | None = None
        self.hillclimb_bytes: int | None = None  # what Vela's own allocator needed for the fast storage
        self.allocator = "vela"  # or "npusched", when Vela's own allocation did not fit and npusched's did

    def _allocate(self, own: Any, fast_area: Any, lrs: list[Any], max_iterations: Any, memory_limit: int
                  ) -> list[int]:
        """Vela's HillClimb allocator; for the fast storage, where its allocation exceeds the limit or the run
        optimises for Size (the bytes are what it minimises), npusched's allocator on the same live ranges when that
        needs less (so Vela writes npusched's offsets)."""
        addresses: list[int] = own(lrs, max_iterations, memory_limit)
        if not lrs or any(lr.mem_area != fast_area for lr in lrs):
            return addresses
        size = max(address + lr.size for address, lr in zip(addresses, lrs, strict=True))
        self.hillclimb_bytes = size
        if size <= int(self.arch.arena_cache_size) and self.arch.optimise is not OptimisationStrategy.SIZE:
            return addresses
        ours = allocate_ranges([LiveRange((lr.name,), lr.start_time, lr.end_time, lr.size) for lr in lrs],
                               alignment_bytes=max(lr.get_alignment() for lr in lrs))
        if ours.size_bytes >= size:
            return addresses
        self.allocator = "npusched"
        return [buffer.offset_bytes for buffer in ours.buffers]

    def record(self, sched_op: Any, cycles: float) -> None:
        op = self.op_of.get(sched_op)
        if op is not None:
            self.vela_cycles[op.index] = cycles

    def schedule_passes(self, nng: Any, vela_arch: Any, options: Any, scheduler_options: Any) -> None:
        from ethosu.vela import scheduler
        from ethosu.vela.nn_graph import CascadedPass, PassPlacement, SchedulingStrategy

        plan = self._plan()
        self.network, self.arch, self.schedule = plan.network, plan.arch, plan.schedule
        npu_subgraphs = [sg for sg in nng.subgraphs if sg.placement == PassPlacement.Npu]
        if len(npu_subgraphs) != len(self.network.subgraphs):
            raise VelaRefusal(f"Vela makes {len(npu_subgraphs)} NPU subgraphs of the model, npusched "
                              f"{len(self.network.subgraphs)}")
        ours = iter(self.network.subgraphs)
        schedulers = {}
        for sg in nng.subgraphs:
            if sg.placement != PassPlacement.Npu:
                # A CPU subgraph: each pass is a cascaded pass of its own, in order.
                sg.cascaded_passes = []
                for time, ps in enumerate(sg.passes):
                    cps = CascadedPass(ps.name, SchedulingStrategy.WeightStream, ps.inputs, [], ps.outputs, [ps],
                                       ps.placement, False)
                    cps.time, ps.cascade = time, cps
                    sg.cascaded_passes.append(cps)
                continue
            subgraph = next(ours)
            in_place = _write_in_place(sg, subgraph)
            _see_deeper(sg, subgraph, vela_arch)
            vela_scheduler = scheduler.Scheduler(nng, sg, vela_arch, scheduler_options)
            vela_scheduler.create_scheduler_representation(vela_arch)
            for sched_op in vela_scheduler.sched_ops:
                if sched_op.parent_op.name in in_place:  # it computes its slice: the pass npusched prices
                    sched_op.ofm.shape = sched_op.parent_op.write_shape
            sg.sched_ops = vela_scheduler.sched_ops
            sg.schedule = self._subgraph_schedule(vela_scheduler, subgraph)
            vela_scheduler.apply_schedule(sg.schedule)
            self._place_feature_maps(vela_scheduler, sg.schedule)
            vela_scheduler.update_op_memory_snapshot(sg.schedule)
            if scheduler_options.verbose_schedule:
                vela_scheduler.print_schedule(sg.schedule)
            schedulers[sg] = vela_scheduler
        scheduler._update_memory_snapshot_for_all_npu_graphs(nng, vela_arch, schedulers)
        from ethosu.vela import hillclimb_allocation

        own_allocator = hillclimb_allocation.allocate_live_ranges
        hillclimb_allocation.allocate_live_ranges = functools.partial(
            self._allocate, own_allocator, vela_arch.fast_storage_mem_area)
        try:
            scheduler._update_tensor_allocation(nng, vela_arch, options)
        finally:
            hillclimb_allocation.allocate_live_ranges = own_allocator
        # Only the scratch memories are allocated yet: the fast storage's figure is the allocator's size of it.
        self.vela_allocation_bytes = int(nng.get_root_subgraph().memory_used.get(vela_arch.fast_storage_mem_area, 0))

    # -- one subgraph -----------------------------------------------------------------------------------------

    def _subgraph_schedule(self, vela_scheduler: Any, subgraph: Any) -> Any:
        from ethosu.vela import scheduler

        sched_ops = vela_scheduler.sched_ops
        if len(sched_ops) != len(subgraph.ops):
            raise VelaRefusal(f"subgraph {subgraph.name}: Vela has {len(sched_ops)} NPU operations, npusched "
                              f"{len(subgraph.ops)} passes")
        forced = scheduler.Schedule(vela_scheduler.sg, self.schedule.label or "NPUSCHED")
        vela_id: dict[int, int] = {}  # npusched cascade id -> Vela's (the index of the cascade's last operation)
        for sched_op, op in zip(sched_ops, subgraph.ops, strict=True):
            if sched_op.op_type.name != op.op_type or list(sched_op.ofm.shape) != op.ofm.shape.as_list():
                raise VelaRefusal(f"op {op.index} '{op.name}': Vela's operation {sched_op.index} is a "
                                  f"{sched_op.op_type.name} with OFM {list(sched_op.ofm.shape)}, npusched's pass a "
                                  f"{op.op_type} with OFM {op.ofm.shape.as_list()}")
            self.op_of[sched_op] = op
            choice = self.schedule.op(op.index)
            if choice.cascade is not None:
                vela_id[choice.cascade] = sched_op.index
        for sched_op, op in zip(sched_ops, subgraph.ops, strict=True):
            choice = self.schedule.op(op.index)
            info = self._op_info(vela_scheduler, sched_op, op, choice)
            info.cascade = vela_id[choice.cascade] if choice.cascade is not None else 0
            forced.cost_map[sched_op] = info
        forced.cascades = self._cascades(sched_ops, subgraph, vela_id)
        return forced

    def _op_info(self, vela_scheduler: Any, sched_op: Any, op: NpuOp, choice: OpSchedule) -> Any:
        """Vela's per-op record of a schedule, holding npusched's choices for ``op``. Built here rather than by
        Vela's ``create_scheduler_info``, which would also search for its own block config and encode the weights
        at full depth, both replaced at once (a fifth of a large network's compile)."""
        from ethosu.vela import weight_compressor
        from ethosu.vela.scheduler import SchedulerOpInfo
        from ethosu.vela.tensor import TensorSubPurpose

        stripe = _vela_shape(choice.ofm_stripe)
        ifm, ifm2 = sched_op.ifm.shape, sched_op.ifm2.shape if sched_op.ifm2 is not None else None
        if stripe != sched_op.ofm.shape:  # the IFM area the stripe reads, as Vela computes it, within the IFM
            width, height = sched_op._get_stripe_input_requirement(stripe)
            ifm = ifm.with_hw(min(height, ifm.height), min(width, ifm.width))
            if ifm2 is not None:
                ifm2 = ifm2.with_hw(min(height, ifm2.height), min(width, ifm2.width))
        if ifm.as_list() != choice.ifm_stripe.as_list():
            raise VelaRefusal(f"op {op.index} '{op.name}': for OFM stripe {list(stripe)} Vela reads an IFM stripe "
                              f"{ifm.as_list()}, npusched {choice.ifm_stripe.as_list()}")
        info = SchedulerOpInfo(self._block_config(sched_op, op, stripe, ifm, ifm2, choice), 0, ifm, ifm2, stripe)
        sched_op.parent_ps.block_config = info.block_config.old_style_representation()
        weights = sched_op.parent_op.weights
        shift = sched_op.parent_op.write_offset.depth if sched_op.parent_op.write_offset is not None else 0
        if weights is None and shift and op.attr(IN_PLACE_OF):
            # A pooling or element-wise pass writing its slice of a concatenation: its one depth slice in the
            # OFM's channels, where Vela's command stream clips it to the write box.
            info.ofm_depth_slices = [depth + shift for depth in info.ofm_depth_slices]
        if weights is not None:
            slices = list(choice.depth_slices)
            info.ofm_depth_slices = slices
            info.npu_weights_tensor, info.npu_scales_tensor = weight_compressor.encode_weight_and_scale_tensor(
                vela_scheduler.arch, sched_op.parent_op, weights, sched_op.parent_op.bias, sched_op.kernel,
                info.block_config, slices)
            if shift:
                # A convolution writing its slice of a concatenation: Vela's command stream clips each depth slice
                # to the write box and finds the slice's weights by its first OFM channel, both in the OFM's
                # channels; its estimate finds the first slice at channel 0. The same ranges under both.
                # (A copy of the stream's record: Vela caches encoded weights, and another op may share them.)
                info.ofm_depth_slices = [depth + shift for depth in slices]
                info.npu_weights_tensor = _depth_shifted(info.npu_weights_tensor, shift)
                if info.npu_scales_tensor is not None:  # scales encoded apart from their cached weights
                    info.npu_scales_tensor = _depth_shifted(info.npu_scales_tensor, shift)
            buffering = choice.weight_buffering
            if buffering.is_buffered:
                encoded = info.npu_weights_tensor
                purpose = TensorSubPurpose.DoubleBuffer if buffering.kind == "double" else TensorSubPurpose.Standard
                count = 2 if buffering.kind == "double" else 1
                sizes = [encoded.double_buffer_sizes[i] for i in range(count)]
                if tuple(sizes) != tuple(buffering.buffer_sizes):
                    raise VelaRefusal(f"op {op.index} '{op.name}': Vela encodes weight buffers of {sizes} bytes for "
                                      f"depth slices {slices}, npusched {list(buffering.buffer_sizes)}")
                names = [f"{weights.name}_buffer", f"{weights.name}_buffer2"]
                info.buffered_weight_tensors = [vela_scheduler.buffer_tensor(encoded, purpose, size, name)
                                                for size, name in zip(sizes, names[:count], strict=True)]
                info.buffered_weight_tensors[0].pre_buffer = buffering.pre_buffered
                if choice.cascade is None:  # Vela times the whole unsliced stream, outside cascades only
                    info.full_weight_transfer_cycles = self._full_transfer_cycles(vela_scheduler, sched_op, info)
        info.slack_buffering_cycles = self._prefetch_window_cycles(vela_scheduler, sched_op, info, choice)
        return info

    @staticmethod
    def _full_transfer_cycles(vela_scheduler: Any, sched_op: Any, info: Any) -> float:
        """Vela's DMA time of the op's whole weight stream encoded unsliced (by Vela's encoder, so that Vela's
        estimate checks npusched's; the codec's part is a look-up in npusched's memo when the run encoded it)."""
        from ethosu.vela import npu_performance, weight_compressor

        parent, arch = sched_op.parent_op, vela_scheduler.arch
        whole_depth = [0, sched_op.ofm.shape.depth]
        full, _ = weight_compressor.encode_weight_and_scale_tensor(
            arch, parent, parent.weights, parent.bias, sched_op.kernel, info.block_config, whole_depth)
        return npu_performance.measure_mem2mem_cycles(arch, parent.weights.mem_area, arch.fast_storage_mem_area,
                                                      len(full.buffer))

    @staticmethod
    def _prefetch_window_cycles(vela_scheduler: Any, sched_op: Any, info: Any, choice: OpSchedule) -> float:
        """The NPU time the next op may prefetch its first weights under, priced by Vela's scheduler estimate: of
        the schedule's ``slack_ofm_depth``, else its ``tail_slack_cycles``, else of the last weight slice (the
        whole op when its weights are not sliced). The feature maps are still where Vela's scheduler prices them."""
        depth = choice.slack_ofm_depth
        if depth is None and choice.tail_slack_cycles is not None:
            return choice.tail_slack_cycles
        if depth is None:
            slices = info.ofm_depth_slices
            depth = slices[-1] - slices[-2] if len(slices) > 2 else sched_op.ofm.shape.depth
        return vela_scheduler.estimate_op_performance(sched_op, info.block_config, depth).op_cycles

    def _block_config(self, sched_op: Any, op: NpuOp, stripe: Any, ifm: Any, ifm2: Any, choice: OpSchedule) -> Any:
        """Vela's record of npusched's block config for the stripe, or a refusal when Vela's rules reject it."""
        from ethosu.vela.architecture_allocator import try_block_config
        from ethosu.vela.architecture_features import Block

        chosen = choice.block_config
        if chosen is None:
            raise ScheduleError(f"op {op.index} ({op.name}) has no block config to compile")
        wanted = chosen.old_style()
        ofm_block = chosen.ofm_block
        parent = sched_op.parent_op
        config = try_block_config(
            Block(ofm_block.width, ofm_block.height, ofm_block.depth), sched_op.arch,
            sched_op.op_type.npu_block_type, stripe, ifm, ifm2, sched_op.uses_scalar,
            sched_op.ifm.dtype.size_in_bits(), chosen.is_partkernel, sched_op.kernel,
            2 if parent.activation_lut else 0, parent.has_scaling(), sched_op.resampling_mode)
        if config is not None:  # Vela keeps the OFM block as a shape
            config.ofm_block = _vela_shape(ofm_block)
        if config is None or config.old_style_representation() != wanted:
            got = "does not fit it" if config is None else f"makes it {config.old_style_representation()}"
            raise VelaRefusal(f"op {op.index} '{op.name}': Vela rejects block config {wanted} ({got})")
        return config

    def _cascades(self, sched_ops: list[Any], subgraph: Any, vela_id: dict[int, int]) -> dict[int, Any]:
        from ethosu.vela.cascade_builder import CascadeInfo

        rolling = cascade_rolling_buffers(subgraph, self.schedule)
        members: dict[int, list[tuple[Any, NpuOp]]] = {}
        for sched_op, op in zip(sched_ops, subgraph.ops, strict=True):
            cascade = self.schedule.op(op.index).cascade
            if cascade is not None:
                members.setdefault(vela_id[cascade], []).append((sched_op, op))
        cascades = {}
        for end, group in members.items():
            indices = [sched_op.index for sched_op, _ in group]
            if indices != list(range(indices[0], end + 1)) or len(group) < 2:
                raise VelaRefusal(f"op {group[0][1].index} '{group[0][1].name}': cascade of operations {indices} "
                                  "is not a run of two or more consecutive operations")
            buffers = {}
            for sched_op, op in group[1:]:
                if op.index not in rolling:
                    raise VelaRefusal(f"op {op.index} '{op.name}': cascaded without a rolling buffer for its IFM")
                buffers[sched_op] = _vela_shape(rolling[op.index])
            # Vela records the cascade's own fast-storage need only to print it; the buffers are what it allocates.
            size = sum(shape.elements() for shape in buffers.values())
            cascades[end] = CascadeInfo(indices[0], end, buffers, size)
        return cascades

    def _place_feature_maps(self, vela_scheduler: Any, forced: Any) -> None:
        """Put every OFM where npusched's schedule does (rolling buffers are placed by Vela's apply step)."""
        from ethosu.vela.tensor import MemArea, MemType

        fast = vela_scheduler.arch.fast_storage_mem_area
        for sched_op in vela_scheduler.sched_ops:
            op = self.op_of[sched_op]
            tensor = sched_op.ofm.connection.parent_tens
            wanted = placement_of(self.arch, self.schedule, op.ofm.tensor)
            cascade = forced.cost_map[sched_op].cascade  # Vela's id: the index of the cascade's last operation
            if cascade in (0, sched_op.index):  # not a rolling buffer
                if wanted.mem_area.value == fast.name and tensor.mem_area != fast:
                    tensor.mem_area, tensor.mem_type = fast, MemType.Scratch_fast
            if tensor.mem_area != MemArea[wanted.mem_area.value] or tensor.format.name != wanted.format.value:
                raise VelaRefusal(f"op {op.index} '{op.name}': Vela keeps its OFM in {tensor.mem_area.name} "
                                  f"{tensor.format.name}, npusched in {wanted.mem_area.value} {wanted.format.value}")


def _depth_shifted(stream: Any, shift: int) -> Any:
    """A copy of an encoded weight stream whose ranges are also found ``shift`` OFM channels on."""
    from ethosu.vela.weight_compressor import WeightKey

    shifted = copy.copy(stream)
    shifted.encoded_ranges = {**stream.encoded_ranges, **{WeightKey(key.core, key.depth + shift): found
                                                           for key, found in stream.encoded_ranges.items()}}
    return shifted


def _write_in_place(sg: Any, subgraph: Any) -> set[str]:
    """Make Vela's graph of one NPU subgraph npusched's where a pass writes its slice of a concatenation
    (``npusched.lowering.in_place``): the copy Vela made of its output goes, the pass takes the copy's write offset
    and shape and writes the concatenation's OFM. Returns the names of those passes."""
    from ethosu.vela.operation import Op

    wanted = {str(op.attr(IN_PLACE_OF)): op for op in subgraph.ops if op.attr(IN_PLACE_OF)}
    if not wanted:
        return set()
    writers = {op.name for op in wanted.values()}
    kept = []
    for ps in sg.passes:
        slice_copy = ps.primary_op
        op = wanted.pop(slice_copy.name, None) if slice_copy is not None else None
        if op is None:
            kept.append(ps)
            continue
        source, ofm = slice_copy.ifm, slice_copy.ofm
        producer: Any = source.ops[0] if len(source.ops) == 1 else None
        made_by = next((other for other in kept if producer is not None and other.primary_op is producer), None)
        if made_by is None or producer.name != op.name or source.consumer_list != [slice_copy]:
            raise VelaRefusal(f"op {op.index} '{op.name}': in Vela's graph it does not make the input of "
                              f"'{slice_copy.name}' alone, so it cannot write that slice itself")
        producer.outputs = [ofm]
        producer.write_offset, producer.write_shape = slice_copy.write_offset, slice_copy.write_shape
        producer.memory_function = Op.ConcatSliceWrite
        ofm.ops = [producer if writer is slice_copy else writer for writer in ofm.ops]
        source.consumer_list = []
        made_by.outputs, made_by.ofm_tensor = [ofm], ofm
        made_by.ofm_shapes = [slice_copy.ofm_shapes[0]]  # a stripe's OFM box is checked against the whole OFM
    if wanted:
        raise VelaRefusal(f"Vela's graph has no copy '{next(iter(wanted))}' for a pass to write in place of")
    sg.passes = kept
    return writers


def _see_deeper(sg: Any, subgraph: Any, vela_arch: Any) -> None:
    """Make Vela's graph of one NPU subgraph npusched's where a softmax's pass sees its maps at a deeper view of the
    same bytes (``npusched.lowering.softmax.deep_view``): each such pass sees its operands and OFM at
    npusched's shapes, a map it makes takes npusched's shape, and the formats of the maps touched are decided again
    by Vela's own rule (a map seen at two shapes stays linear, so every view reads the same bytes)."""
    from ethosu.vela.graph_optimiser_util import check_format_restrictions
    from ethosu.vela.shape4d import Shape4D

    wanted = {op.name: op for op in subgraph.ops if op.attr(DEEP_VIEW)}
    if not wanted:
        return
    touched: dict[int, Any] = {}  # the maps whose views changed, each once
    for ps in sg.passes:
        vela_op = ps.primary_op
        op = wanted.pop(vela_op.name, None) if vela_op is not None else None
        if op is None:
            continue
        views = {operand.tensor.name: _vela_shape(operand.shape) for operand in (op.ifm, op.ifm2, op.ofm)
                 if operand is not None}
        maps = [t for t in (vela_op.ifm, vela_op.ifm2, vela_op.ofm) if t is not None and not t.is_const]
        if any(t.name not in views or views[t.name].elements() != Shape4D(t.shape).elements() for t in maps):
            raise VelaRefusal(f"op {op.index} '{op.name}': Vela's pass has other operands than npusched's, so it "
                              "cannot see them at npusched's views")
        # constants ([1, 1, 1, 1]) keep their shape
        seen = {t.name: Shape4D(t.shape) if t.is_const else views[t.name]
                for t in (*vela_op.inputs, vela_op.ofm, ps.ifm_tensor, ps.ifm2_tensor) if t is not None}
        vela_op.ifm_shapes = [seen[t.name] for t in vela_op.inputs if t is not None]
        vela_op.ofm_shapes = [seen[vela_op.ofm.name]]
        ps.ifm_shapes = [seen[t.name] for t in (ps.ifm_tensor, ps.ifm2_tensor) if t is not None]
        ps.ofm_shapes = list(vela_op.ofm_shapes)
        vela_op.ofm.set_all_shapes(op.ofm.tensor.shape.as_list())
        touched.update((id(t), t) for t in maps)
    if wanted:
        raise VelaRefusal(f"Vela's graph has no pass '{next(iter(wanted))}' to compute at npusched's deeper view")
    for tens in touched.values():
        tens.force_linear_format = None
        check_format_restrictions(tens, vela_arch)


def _vela_shape(shape: Any) -> Any:
    from ethosu.vela.shape4d import Shape4D

    return Shape4D(shape.batch, shape.height, shape.width, shape.depth)


