"""Compile npusched's schedule with Vela 5.2.0's backend (legacy core) and read Vela's own estimate back.

Vela's compiler driver runs its scheduler, then allocates tensors, generates the command streams and packs the
``_vela.tflite``. This module swaps the scheduling step for one that takes every decision from npusched's
``Schedule`` instead (block config, OFM stripes and cascades with their rolling buffers, the weight encoding and
its buffering, where each feature map lives) and leaves the rest of Vela untouched, so the files Vela writes are
Vela's own: the ``_vela.tflite``, ``_summary_<system config>.csv`` and ``_per-layer.csv``.

Only Vela's public modules are used, patched for the duration of one compilation. Vela is not thread-safe and
keeps global state (its debug database), so one compilation runs at a time in a process.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import multiprocessing
import os
import shutil
import sys
import tempfile
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from npusched.errors import OutputError, ScheduleError
from npusched.frontend.tflite_reader import read_model_bytes
from npusched.ir import NpuOp
from npusched.lowering.graph import RECURSION_LIMIT, Network
from npusched.lowering.in_place import IN_PLACE_OF
from npusched.run import RunOptions, RunResult, architecture, scheduled_model
from npusched.schedule.allocation import allocate_ranges
from npusched.schedule.evaluator import cascade_rolling_buffers, evaluate, placement_of
from npusched.schedule.memory_layout import LiveRange
from npusched.schedule.schedule import OpSchedule, Schedule
from npusched.target import codec
from npusched.target.arch import ArchitectureFeatures, Estimator
from npusched.vela.command import vela_arguments
from npusched.vela.live_range_index import indexed_live_ranges

# Estimates agree when they differ by at most this fraction (relative to the larger of the two).
AGREEMENT_TOLERANCE = 1e-4
# Vela's backend compile time (estimated_compile_seconds), fitted by scripts/deploy_time_limit.py fit on 46
# compilations (corpus models and netgen networks of 6-730 passes, 2 configurations, each in a process that has
# just scheduled the network, as a run does; load average 1-3 on 2 cores): least squares 0.07 s + 5.6 ms per pass
# + 0.32 s per MB of weights (feature-map size adds nothing measurable since the per-op record is built without
# Vela's block-config search); these constants are that line scaled by 2.2, over every measurement.
COMPILE_SECONDS_FIXED = 0.5
COMPILE_SECONDS_PER_PASS = 0.012
COMPILE_SECONDS_PER_WEIGHT_MEGABYTE = 0.7
# The same for a compile started ahead, what is left of it once the schedule is known (``fit --ahead``, 62
# compilations, load average about 2): least squares 0.04 s + 2.9 ms per pass + 0.14 s per MB; with 0.5 s fixed,
# the variable terms scaled by 1.7 to be over every measurement.
AHEAD_COMPILE_SECONDS_FIXED = 0.5
AHEAD_COMPILE_SECONDS_PER_PASS = 0.005
AHEAD_COMPILE_SECONDS_PER_WEIGHT_MEGABYTE = 0.23


class VelaRefusal(ScheduleError):
    """Vela's backend does not accept one of the schedule's decisions (nothing is written)."""


@dataclass(frozen=True)
class OpAgreement:
    """One NPU pass: Vela's estimated op cycles next to the evaluator's."""

    op_index: int
    name: str
    subgraph: str
    vela_cycles: float
    npusched_cycles: float

    @property
    def agrees(self) -> bool:
        return _close(self.vela_cycles, self.npusched_cycles)


@dataclass(frozen=True)
class BackendResult:
    """What one compilation wrote and how Vela's estimate compares with the evaluator's (Vela's estimator)."""

    tflite_path: Path
    summary_csv_path: Path
    per_layer_csv_path: Path
    ops: tuple[OpAgreement, ...]
    vela_total_cycles: float
    npusched_total_cycles: float
    # Fast storage Vela's own allocator needed for the compiled schedule, npusched's allocation and the limit.
    vela_allocation_bytes: int | None = None
    npusched_allocation_bytes: int | None = None
    limit_bytes: int | None = None
    # Whose offsets Vela wrote for the fast storage ("npusched" where Vela's HillClimb needed more than the limit
    # and npusched's allocator less) and what Vela's HillClimb needed.
    allocator: str = "vela"
    hillclimb_bytes: int | None = None
    # Said before the comparison: where the compiled graph is not the one the run priced (npusched.app.replay).
    notes: tuple[str, ...] = ()

    @property
    def allocation_fits(self) -> bool:
        """Vela's allocation of the fast storage is within the limit (True when it was not measured)."""
        return self.vela_allocation_bytes is None or self.limit_bytes is None or \
            self.vela_allocation_bytes <= self.limit_bytes

    @property
    def total_agrees(self) -> bool:
        return _close(self.vela_total_cycles, self.npusched_total_cycles)

    @property
    def agreed(self) -> bool:
        return self.total_agrees and all(op.agrees for op in self.ops)

    def warnings(self) -> tuple[str, ...]:
        """One line per disagreeing op and for the total: a difference means one of the two estimates is wrong."""
        lines = list(self.notes)
        lines += [f"Vela's estimate of op {op.op_index} '{op.name}' ({op.subgraph}) is {op.vela_cycles:,.1f} cycles, "
                  f"npusched's {op.npusched_cycles:,.1f} ({_relative(op.vela_cycles, op.npusched_cycles):+.4%})"
                  for op in self.ops if not op.agrees]
        if not self.total_agrees:
            lines.append(f"Vela's estimate of the network is {self.vela_total_cycles:,.1f} cycles, npusched's "
                         f"{self.npusched_total_cycles:,.1f} "
                         f"({_relative(self.vela_total_cycles, self.npusched_total_cycles):+.4%})")
        if not self.allocation_fits:
            lines.append(f"Vela's allocator places the fast storage in {self.vela_allocation_bytes} bytes, "
                         f"{(self.vela_allocation_bytes or 0) - (self.limit_bytes or 0)} bytes over the limit of "
                         f"{self.limit_bytes} bytes (npusched's allocation: {self.npusched_allocation_bytes} bytes)")
        return tuple(lines)

    def as_json(self) -> dict[str, Any]:
        return {"tflite": str(self.tflite_path), "summary_csv": str(self.summary_csv_path),
                "per_layer_csv": str(self.per_layer_csv_path), "agreed": self.agreed,
                "vela_cycles": self.vela_total_cycles, "npusched_cycles": self.npusched_total_cycles,
                "disagreeing_ops": [op.op_index for op in self.ops if not op.agrees],
                "vela_allocation_bytes": self.vela_allocation_bytes,
                "npusched_allocation_bytes": self.npusched_allocation_bytes,
                "allocation_fits": self.allocation_fits, "allocator": self.allocator,
                "hillclimb_bytes": self.hillclimb_bytes, "notes": list(self.notes)}


def _relative(a: float, b: float) -> float:
    return (a - b) / max(abs(b), 1e-9)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= AGREEMENT_TOLERANCE * max(abs(a), abs(b), 1.0)


def output_paths(model_path: Path, system_config: str, output_dir: Path) -> tuple[Path, Path, Path]:
    """Where Vela writes for ``model_path``: ``<model>_vela.tflite``, ``<model>_summary_<system config>.csv``
    and ``<model>_per-layer.csv``."""
    stem = model_path.stem
    return (output_dir / f"{stem}_vela.tflite", output_dir / f"{stem}_summary_{system_config}.csv",
            output_dir / f"{stem}_per-layer.csv")


def estimated_compile_seconds(network: Network, *, started_ahead: bool = False) -> float:
    """How long ``compile_schedule`` may take on ``network``, Vela's imports included (a run compiles once): what
    a run with --output-dir keeps back from its time limit so that the compile ends within it too. Vela's time
    grows with the passes and with the weights it encodes (a MobileNet-V2 of 66 passes and 3.5 MB takes longer
    than a 100-pass network of small weights); the constants make a line over every measurement of
    scripts/deploy_time_limit.py fit. ``started_ahead``: what is left of a :class:`Compilation` started before the
    run once the schedule is known (its own line, from ``fit --ahead``)."""
    ops = network.npu_ops
    weight_megabytes = sum(op.weights.size_in_bytes for op in ops if op.weights is not None) / 1e6
    fixed, per_pass, per_megabyte = (
        (AHEAD_COMPILE_SECONDS_FIXED, AHEAD_COMPILE_SECONDS_PER_PASS, AHEAD_COMPILE_SECONDS_PER_WEIGHT_MEGABYTE)
        if started_ahead else
        (COMPILE_SECONDS_FIXED, COMPILE_SECONDS_PER_PASS, COMPILE_SECONDS_PER_WEIGHT_MEGABYTE))
    return fixed + per_pass * len(ops) + per_megabyte * weight_megabytes


def check_output_dir(output_dir: Path) -> None:
    """Refuse, before any work, an output directory that is a file."""
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputError(f"--output-dir {output_dir}: is not a directory")


def compile_schedule(result: RunResult, output_dir: Path) -> BackendResult:
    """Compile ``result``'s schedule with Vela's backend into ``output_dir``, in this process.

    Vela writes into a private directory first; the three files are moved into ``output_dir`` only when the
    whole compilation succeeded, so a refusal leaves nothing behind (and earlier files of the same name whole).
    """
    with Compilation(result.options, output_dir) as compilation:
        return compilation.finish(result)


class Compilation:
    """One compile of a run's model by Vela's backend into ``output_dir``, begun before the schedule exists.

    Started ``ahead`` (the command line with --output-dir), a forked process reads the model and runs Vela's graph
    optimisation and pass packing while npusched schedules (about half of Vela's compile of a large network), then
    waits at Vela's scheduling step for the schedule :meth:`finish` sends it. Otherwise, or should that process
    fail, :meth:`finish` compiles in this process, which stays the reference. Use it as a context manager: leaving
    it stops the process and removes what a compile that did not finish left behind.
    """

    def __init__(self, options: RunOptions, output_dir: Path, *, ahead: bool = False) -> None:
        check_output_dir(output_dir)
        self.options, self.output_dir = options, output_dir
        self._created = not output_dir.exists()
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
            self._staging = Path(tempfile.mkdtemp(prefix=".npusched-vela-", dir=output_dir))
        except OSError as exc:
            raise OutputError(f"--output-dir {output_dir}: cannot write ({exc.strerror or exc})") from None
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._submitted: _Plan | None = None
        if ahead and "fork" in multiprocessing.get_all_start_methods():  # not on Windows: compiled at the end
            context = multiprocessing.get_context("fork")
            self._connection, child_end = context.Pipe()
            self._process = context.Process(target=_compile_ahead, args=(options, self._staging, child_end),
                                            daemon=True)
            self._process.start()
            child_end.close()

    def __enter__(self) -> Compilation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._stop_process()
        shutil.rmtree(self._staging, ignore_errors=True)
        if self._created and self.output_dir.is_dir() and not any(self.output_dir.iterdir()):
            self.output_dir.rmdir()  # a refused compilation leaves no trace

    def submit(self, network: Network, arch: ArchitectureFeatures, schedule: Schedule) -> None:
        """Hand the schedule to the process started ahead as soon as it exists, so that Vela compiles it while the
        run evaluates and reports; :meth:`finish` then waits for the answer."""
        if self._connection is not None and self._submitted is None:
            self._submitted = _Plan(network, _legacy(arch), schedule)
            with contextlib.suppress(OSError):  # it may have stopped already, its answer waiting
                self._connection.send((self._submitted, codec.remembered_streams()))

    def finish(self, result: RunResult) -> BackendResult:
        """Compile ``result``'s schedule (which must be of this compilation's model) and move Vela's files into
        the output directory."""
        network = result.network
        schedule, evaluation = result.solved()
        # Vela's figures are Vela's estimator's; the evaluator is asked the same question.
        arch = _legacy(result.arch)
        if arch is not result.arch:
            evaluation = evaluate(network, arch, schedule)
        if self._submitted is not None and self._submitted.schedule is not schedule:
            self._stop_process()  # it compiles another schedule than the one to write
        self.submit(network, arch, schedule)
        plan = _Plan(network, arch, schedule)
        compiled = self._compiled_ahead()
        try:
            if compiled is None:
                shutil.rmtree(self._staging, ignore_errors=True)
                self._staging.mkdir()
                compiled = _vela_compile(self.options, self._staging, lambda: plan)
            staged = output_paths(self.options.model_path, arch.system_config, self._staging)
            final = output_paths(self.options.model_path, arch.system_config, self.output_dir)
            for source, target in zip(staged, final, strict=True):
                source.replace(target)
        except OSError as exc:
            raise OutputError(f"--output-dir {self.output_dir}: cannot write ({exc.strerror or exc})") from None
        agreements = tuple(
            OpAgreement(op.index, op.name, sg.name, compiled.vela_cycles[op.index],
                        evaluation.op(op.index).total_cycles)
            for sg in network.subgraphs for op in sg.ops)
        return BackendResult(*final, ops=agreements, vela_total_cycles=sum(op.vela_cycles for op in agreements),
                             npusched_total_cycles=evaluation.total_cycles,
                             vela_allocation_bytes=compiled.vela_allocation_bytes,
                             npusched_allocation_bytes=evaluation.allocation.size_bytes,
                             limit_bytes=int(arch.arena_cache_size), allocator=compiled.allocator,
                             hillclimb_bytes=compiled.hillclimb_bytes)

    def _stop_process(self) -> None:
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join()
            self._process = None

    def _compiled_ahead(self) -> _Compiled | None:
        """The forked process's compile of the submitted plan; None when there is no such process or it failed
        otherwise than by Vela refusing (the caller then compiles in this process)."""
        connection, self._connection = self._connection, None
        if connection is None:
            return None
        try:
            kind, answer = connection.recv() if self._process is not None else ("stopped", None)
        except (EOFError, OSError):
            kind, answer = "failed", None
        finally:
            connection.close()
        self._stop_process()  # it has answered, or never will
        if kind == "refused":
            raise VelaRefusal(str(answer))
        if kind == "output":
            raise OutputError(str(answer))
        return answer if kind == "compiled" else None


def _legacy(arch: ArchitectureFeatures) -> ArchitectureFeatures:
    """``arch`` under Vela's (legacy) estimator, the one whose figures Vela's backend writes."""
    return arch if arch.estimator is Estimator.VELA else replace(arch, estimator=Estimator.VELA)


@dataclass(frozen=True)
class _Plan:
    """What Vela's scheduling step takes from a run: the network, the hardware and the schedule."""

    network: Network
    arch: ArchitectureFeatures
    schedule: Schedule


@dataclass(frozen=True)
class _Compiled:
    """What a compile read back from Vela: its per-op cycles and what its allocator did with the fast storage."""

    vela_cycles: dict[int, float]
    vela_allocation_bytes: int | None
    hillclimb_bytes: int | None
    allocator: str


def _compile_ahead(options: RunOptions, staging: Path, connection: Connection) -> None:
    """The forked process of a :class:`Compilation`: Vela's compile up to its scheduling step, then the plan
    from ``connection`` (the end of it means the run stopped without a schedule, and so does this process), then
    the answer back."""

    def plan() -> _Plan:
        try:
            received, streams = connection.recv()
        except (EOFError, OSError):
            os._exit(0)
        codec.remember_streams(streams)
        return received

    answer: tuple[str, object]
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the run's stderr carries only its own errors
            answer = ("compiled", _vela_compile(options, staging, plan))
    except VelaRefusal as exc:
        answer = ("refused", str(exc))
    except OutputError as exc:
        answer = ("output", str(exc))
    except BaseException:  # noqa: BLE001 - the run compiles again in its own process, where a bug shows
        answer = ("failed", None)
    with contextlib.suppress(OSError):
        connection.send(answer)


def _vela_compile(options: RunOptions, staging: Path, plan: Callable[[], _Plan]) -> _Compiled:
    """Vela's compile of ``options``' model into ``staging``; its scheduling step asks ``plan`` for the schedule
    (so the compile may start before the schedule exists)."""
    vela_options = _scheduled_model(options, staging)
    forcing = _ForcedScheduler(plan)
    log = io.StringIO()
    with _patched_vela(forcing), indexed_live_ranges(), contextlib.redirect_stdout(log):
        from ethosu.vela import vela

        try:
            # Vela sets the process's recursion limit (default 1000, too few for its graph walks on a few
            # hundred passes: RecursionError); ours, as deep as the lowering allows, restored afterwards.
            status = vela.main(vela_arguments(vela_options, staging, verbose=(
                "--verbose-performance", "--recursion-limit", str(max(RECURSION_LIMIT, sys.getrecursionlimit())))))
        except VelaRefusal:
            raise
        except Exception as exc:  # an assertion or error deep in Vela's backend: name the op it was at
            raise VelaRefusal(f"Vela's backend rejects the schedule{_op_in_traceback(exc)}: "
                              f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
    if status != 0:
        lines = [line for line in log.getvalue().splitlines() if line.strip()]
        raise VelaRefusal(f"Vela's backend stopped: {lines[-1] if lines else f'exit status {status}'}")
    return _Compiled(dict(forcing.vela_cycles), forcing.vela_allocation_bytes, forcing.hillclimb_bytes,
                     forcing.allocator)


def _scheduled_model(options: RunOptions, staging: Path) -> RunOptions:
    """``options`` naming the model that was scheduled: the normalised one (written into ``staging`` under the
    original's file name, so Vela's output files are named as for the original) where normalisation changed it."""
    normalised, record = scheduled_model(read_model_bytes(options.model_path), options, architecture(options))
    if not record.changed:
        return options
    path = staging / "normalised" / Path(options.model_path).name
    path.parent.mkdir()
    path.write_bytes(normalised)
    return replace(options, model_path=path)


def _op_in_traceback(exc: BaseException) -> str:
    """' at op NAME' (or tensor) for the innermost frame of Vela's that was handling an operation or tensor."""
    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        for key, what in (("sched_op", "op"), ("op", "op"), ("tens", "tensor"), ("tensor", "tensor")):
            name = getattr(frame.f_locals.get(key), "name", None)
            if isinstance(name, str):
                return f" at {what} '{name}'"
    return ""


@contextlib.contextmanager
def _patched_vela(forcing: _ForcedScheduler) -> Iterator[None]:
    """Vela's scheduling step replaced by ``forcing``, and its per-op estimate recorded, for one compilation.

    Vela caches encoded weight tensors process-wide; a tensor of an earlier compilation would be allocated twice,
    so each compilation starts, as the ``vela`` command does, with an empty cache. So with the equivalence ids of
    LUT tensors (keyed by their values): one kept from an earlier compilation failed Vela's allocator ("Two
    different addresses cannot be assigned to the same tensor"). Vela's main sets the recursion limit; the
    caller's is restored. Vela's weight compressor encodes through npusched's codec memo
    (``npusched.target.codec``), which holds the streams the run encoded while scheduling."""
    from ethosu.vela import npu_performance, scheduler, weight_compressor
    from ethosu.vela.tensor import create_equivalence_id
    from ethosu.vela.weight_compressor import CompressedWeightCache

    original_schedule, original_estimate = scheduler.schedule_passes, npu_performance.estimate_full_op_performance

    def recording_estimate(arch: Any, schedule: Any, sched_op: Any, prev_op: Any, block_config: Any) -> Any:
        bws, macs, cycles = original_estimate(arch, schedule, sched_op, prev_op, block_config)
        forcing.record(sched_op, float(cycles[npu_performance.PassCycles.Total]))
        return bws, macs, cycles

    scheduler.schedule_passes = forcing.schedule_passes
    npu_performance.estimate_full_op_performance = recording_estimate
    original_codec = weight_compressor.mlw_codec
    weight_compressor.mlw_codec = types.SimpleNamespace(reorder_encode=codec.reorder_encode)
    CompressedWeightCache.cache.clear()
    create_equivalence_id.cache_clear()
    recursion_limit = sys.getrecursionlimit()
    try:
        yield
    finally:
        scheduler.schedule_passes, npu_performance.estimate_full_op_performance = original_schedule, original_estimate
        weight_compressor.mlw_codec = original_codec
        CompressedWeightCache.cache.clear()
        create_equivalence_id.cache_clear()
        sys.setrecursionlimit(recursion_limit)


class _ForcedScheduler:
    """Vela's scheduling step with npusched's decisions: one forced ``Schedule`` per NPU subgraph.

    Stateful only for the length of one compilation: it remembers which Vela operation is which npusched pass so
    that Vela's per-op estimate can be read back.
    """

    def __init__(self, plan: Callable[[], _Plan]) -> None:
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
        """Vela's HillClimb allocator; for the fast storage, where its allocation exceeds the limit, npusched's
        allocator on the same live ranges when that needs less (so Vela writes npusched's offsets)."""
        addresses: list[int] = own(lrs, max_iterations, memory_limit)
        if not lrs or any(lr.mem_area != fast_area for lr in lrs):
            return addresses
        size = max(address + lr.size for address, lr in zip(addresses, lrs, strict=True))
        self.hillclimb_bytes = size
        if size <= int(self.arch.arena_cache_size):
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


def _vela_shape(shape: Any) -> Any:
    from ethosu.vela.shape4d import Shape4D

    return Shape4D(shape.batch, shape.height, shape.width, shape.depth)


def tflite_contents(path: Path) -> tuple[Any, ...]:
    """What a ``_vela.tflite`` holds, independent of the order its tensors are listed in: per subgraph the
    tensors (name, shape, type, data) and operators (operator code, input and output tensor names, custom
    options, which carry nothing for Vela's custom operator; its command stream is a tensor), and the metadata.
    Two files with equal contents run the same command streams on the same data."""
    import numpy as np
    import tflite

    model = tflite.Model.GetRootAs(Path(path).read_bytes(), 0)

    def data(index: int) -> bytes:
        buffer = model.Buffers(index)
        return buffer.DataAsNumpy().tobytes() if buffer is not None and buffer.DataLength() else b""

    subgraphs, tensor_names = [], []
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        tensors = [graph.Tensors(t) for t in range(graph.TensorsLength())]
        names = [t.Name().decode() for t in tensors]
        tensor_names += [(s, name) for name in names]

        def named(indices: Any, names: list[str] = names) -> tuple[str, ...]:
            return tuple(names[i] if i >= 0 else "" for i in indices)

        operators = []
        for o in range(graph.OperatorsLength()):
            op = graph.Operators(o)
            code = model.OperatorCodes(op.OpcodeIndex())
            custom = op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b""
            operators.append((max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), code.CustomCode(),
                              named(op.InputsAsNumpy() if op.InputsLength() else ()),
                              named(op.OutputsAsNumpy() if op.OutputsLength() else ()), custom))
        tensor_set = sorted((name, tuple(t.ShapeAsNumpy().tolist()) if t.ShapeLength() else (), t.Type(),
                             data(t.Buffer())) for name, t in zip(names, tensors, strict=True))
        subgraphs.append((tuple(tensor_set), tuple(operators), named(graph.InputsAsNumpy()),
                          named(graph.OutputsAsNumpy())))
    metadata = []
    for m in range(model.MetadataLength()):
        name, raw = model.Metadata(m).Name().decode(), data(model.Metadata(m).Buffer())
        payload: bytes | tuple[Any, ...] = raw
        if name == "OfflineMemoryAllocation":  # [version, subgraphs, tensors, one arena offset per tensor in order]
            offsets = np.frombuffer(raw, dtype="<i4")
            payload = tuple(offsets[:3].tolist()) + tuple(sorted(zip(tensor_names, offsets[3:].tolist(), strict=True)))
        metadata.append((name, payload))
    return tuple(subgraphs), tuple(sorted(metadata))
