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
import io
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from npusched.errors import OutputError
from npusched.frontend.tflite_reader import read_model_bytes
from npusched.lowering.build import normalised_bytes
from npusched.lowering.graph import RECURSION_LIMIT, Network
from npusched.run import RunOptions, RunResult, recipe_for
from npusched.schedule.evaluator import evaluate
from npusched.schedule.schedule import Schedule
from npusched.target import codec
from npusched.target.estimators import Estimator, PricedArchitecture, with_estimator
from npusched.vela.command import vela_arguments
from npusched.vela.forced_scheduler import ForcedScheduler, Plan, VelaRefusal, op_in_traceback, patched_vela
from npusched.vela.live_range_index import indexed_live_ranges
from npusched.vela.report import tflite_contents

__all__ = ["WRITING_SECONDS", "BackendResult", "Compilation", "OpAgreement", "VelaRefusal", "check_output_dir",
           "compile_schedule", "estimated_compile_seconds", "output_paths", "scheduled_model_bytes", "tflite_contents"]

# Estimates agree when they differ by at most this fraction (relative to the larger of the two).
AGREEMENT_TOLERANCE = 1e-4
# Vela's backend compile time (estimated_compile_seconds), fitted by scripts/bench/time_limit.py fit on 46
# compilations (corpus models and netgen networks of 6-730 passes, 2 configurations, each in a process that has
# just scheduled the network, as a run does; load average 1-3 on 2 cores): least squares 0.07 s + 5.6 ms per pass
# + 0.32 s per MB of weights (feature-map size adds nothing measurable since the per-op record is built without
# Vela's block-config search); these constants are that line scaled by 2.2, over every measurement.
COMPILE_SECONDS_FIXED = 0.5
COMPILE_SECONDS_PER_PASS = 0.012
COMPILE_SECONDS_PER_WEIGHT_MEGABYTE = 0.7
# The same for a compile started ahead, what is left of it once the schedule is known (``fit --ahead``, 164
# compilations of the corpus, the zoo, the full-size keras.applications exports and generated networks of 50-700
# passes): least squares 0.16 s + 1.0 ms per pass + 0.08 s per MB of weights + 0.007 s per million OFM elements,
# scaled by 1.95 to be over 19 in 20 (a compile past it leaves the fallback compiled beside the run as the file).
AHEAD_COMPILE_SECONDS_FIXED = 0.32
AHEAD_COMPILE_SECONDS_PER_PASS = 0.002
AHEAD_COMPILE_SECONDS_PER_WEIGHT_MEGABYTE = 0.16
AHEAD_COMPILE_SECONDS_PER_OFM_MEGAELEMENT = 0.014
# After the answer's compile (or the fallback's, when that is not done by then): its files and the schedule's JSON
# written, and the process's exit. The compile's deadline is this much before the limit, and its estimate this more.
WRITING_SECONDS = 0.5
# Where no fallback is compiled beside the run (Vela legacy's own schedule does not fit), the same line over every
# compile (x4.22, not x1.95): nothing else could be written at the limit.
AHEAD_COMPILE_EVERY_FACTOR = 4.22 / 1.95
# How much lower the fallback's compile runs than the run (os.nice).
FALLBACK_NICENESS = 10


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
    # Whose offsets Vela wrote for the fast storage ("npusched" where Vela's HillClimb needed more than the limit,
    # or the run optimises for Size, and npusched's allocator less) and what Vela's HillClimb needed.
    allocator: str = "vela"
    hillclimb_bytes: int | None = None
    # Said before the comparison: where the compiled graph is not the one the run priced (npusched.app.replay).
    notes: tuple[str, ...] = ()
    # What the written file is: the run's answer, or the fallback compiled beside the run (Vela legacy's own
    # schedule) where the answer's compile was refused or not done by the limit, and why.
    written: str = "answer"
    fallback_reason: str = ""

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
                "hillclimb_bytes": self.hillclimb_bytes, "notes": list(self.notes), "written": self.written,
                "fallback_reason": self.fallback_reason or None}


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


def estimated_compile_seconds(network: Network, *, started_ahead: bool = False, no_fallback: bool = False) -> float:
    """How long ``compile_schedule`` may take on ``network``, Vela's imports included (a run compiles once): what
    a run with --output-dir keeps back from its time limit so that the compile ends within it too. Vela's time
    grows with the passes and with the weights it encodes (a MobileNet-V2 of 66 passes and 3.5 MB takes longer
    than a 100-pass network of small weights); the constants make a line over every measurement of
    scripts/bench/time_limit.py fit. ``started_ahead``: what is left of a :class:`Compilation` started before the
    run once the schedule is known (its own line, from ``fit --ahead``, over 19 compiles in 20, and the files
    written after it); ``no_fallback``: where no fallback is compiled beside it, over every compile measured."""
    ops = network.npu_ops
    weight_megabytes = sum(op.weights.size_in_bytes for op in ops if op.weights is not None) / 1e6
    if started_ahead:
        ofm_megaelements = sum(op.ofm.shape.elements() for op in ops) / 1e6
        return (AHEAD_COMPILE_SECONDS_FIXED + AHEAD_COMPILE_SECONDS_PER_PASS * len(ops)
                + AHEAD_COMPILE_SECONDS_PER_WEIGHT_MEGABYTE * weight_megabytes
                + AHEAD_COMPILE_SECONDS_PER_OFM_MEGAELEMENT * ofm_megaelements) \
            * (AHEAD_COMPILE_EVERY_FACTOR if no_fallback else 1.0) + WRITING_SECONDS
    return COMPILE_SECONDS_FIXED + COMPILE_SECONDS_PER_PASS * len(ops) \
        + COMPILE_SECONDS_PER_WEIGHT_MEGABYTE * weight_megabytes


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

    Started ``ahead`` (the command line with --output-dir), :meth:`begin` forks a process per graph the run may
    schedule (npusched's own and Vela legacy's, which the run prices against each other): each reads its model
    and runs Vela's graph optimisation and pass packing while npusched schedules (about half of Vela's compile of
    a large network), then waits at Vela's scheduling step. :meth:`submit` hands the schedule to the process of
    its graph (the others stop) and :meth:`finish` waits for its answer. Otherwise, or should that process fail,
    :meth:`finish` compiles in this process, which stays the reference. Use it as a context manager: leaving it
    stops the processes and removes what a compile that did not finish left behind.
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
        self._ahead = ahead and "fork" in multiprocessing.get_all_start_methods()  # not on Windows
        self._processes: dict[bytes, _AheadProcess] = {}
        self._fallback: tuple[_AheadProcess, Plan, bytes] | None = None
        # Where the answer's compile must be done by (a ``time.monotonic`` reading): past it, the fallback.
        self.deadline: float | None = None

    def __enter__(self) -> Compilation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for process in self._processes.values():
            process.stop()
        self._processes.clear()
        if self._fallback is not None:
            self._fallback[0].stop()
            self._fallback = None
        shutil.rmtree(self._staging, ignore_errors=True)
        if self._created and self.output_dir.is_dir() and not any(self.output_dir.iterdir()):
            self.output_dir.rmdir()  # a refused compilation leaves no trace

    def begin(self, model_bytes: bytes, *, likely: bool = True) -> None:
        """Start compiling ``model_bytes`` (a graph the run may schedule) ahead, when this compilation is started
        ahead: a forked process each (see the class docstring); where its answer is not ``likely`` (a core's own
        schedule, should the search find nothing better), at the fallback's lower priority."""
        if self._ahead and model_bytes not in self._processes:
            staging = self._staging / f"ahead{len(self._processes)}"
            staging.mkdir()
            self._processes[model_bytes] = _AheadProcess(self.options, model_bytes, staging,
                                                         niceness=0 if likely else FALLBACK_NICENESS)

    def start_fallback(self, network: Network, arch: PricedArchitecture, schedule: Schedule,
                       model_bytes: bytes) -> None:
        """Compile ``schedule`` of ``model_bytes`` (Vela legacy's own schedule of its graph) in the background now,
        so that a compiled model exists at the limit whatever becomes of the answer's compile (started ahead
        only)."""
        if not self._ahead or self._fallback is not None:
            return
        staging = self._staging / "fallback"
        staging.mkdir()
        plan = Plan(network, _legacy(arch), schedule)
        # At a lower priority: insurance, it takes the CPU the search leaves idle.
        process = _AheadProcess(self.options, model_bytes, staging, niceness=FALLBACK_NICENESS, plan=plan)
        self._fallback = (process, plan, model_bytes)

    def submit(self, network: Network, arch: PricedArchitecture, schedule: Schedule, model_bytes: bytes) -> None:
        """Hand the schedule of ``model_bytes`` to the process compiling that graph as soon as it exists, so that
        Vela compiles it while the run works out its bound, evaluates and reports (the other graphs' processes
        stop); :meth:`finish` then waits for the answer. Where it is the fallback's schedule, the fallback's
        compile is the answer's, and every process ahead stops."""
        fallback_is_answer = self._is_fallback(schedule, model_bytes)
        for other, process in self._processes.items():
            if other == model_bytes and not fallback_is_answer:
                process.submit(Plan(network, _legacy(arch), schedule))
            else:
                process.stop()

    def finish(self, result: RunResult) -> BackendResult:
        """Compile ``result``'s schedule and move Vela's files into the output directory. Where Vela refuses it,
        or its compile ahead is not done by ``deadline``, the fallback compiled beside the run (``start_fallback``)
        is written instead, and the result says so and why."""
        schedule, _ = result.solved()
        # Vela's figures are Vela's estimator's; the evaluator is asked the same question.
        plan = Plan(result.network, _legacy(result.arch), schedule)
        model_bytes = result.model_bytes or scheduled_model_bytes(result.options, result.arch)
        if self._fallback is not None and self._is_fallback(schedule, model_bytes):
            # The answer is the fallback's schedule (the search found nothing better than Vela legacy's own).
            process, _, _ = self._fallback
            self._fallback = None
            return self._written(plan, process.answer(), process.staging)
        try:
            compiled, staging = self._compile(plan, model_bytes)
        except VelaRefusal as exc:
            fallback = self._fallback_written(f"Vela's backend refuses the answer: {exc}")
            if fallback is None:
                raise
            return fallback
        if compiled is None:  # the answer's compile was not done by the deadline
            fallback = self._fallback_written("the answer's compile was not done within the time limit")
            if fallback is not None:
                return fallback
            compiled, staging = self._compile_here(plan, model_bytes)
        return self._written(plan, compiled, staging)

    def _is_fallback(self, schedule: Schedule, model_bytes: bytes) -> bool:
        """Whether ``schedule`` of ``model_bytes`` is what the fallback compiles."""
        return self._fallback is not None and self._fallback[2] == model_bytes \
            and _same_choices(self._fallback[1].schedule, schedule)

    def _compile(self, plan: Plan, model_bytes: bytes) -> tuple[_Compiled | None, Path]:
        """The answer compiled: by its process ahead, else here; None where it is not done by the deadline and the
        fallback's compile is done first (past the deadline the run waits for whichever answers first, and for the
        answer where the fallback's compile fails)."""
        process = self._processes.get(model_bytes)
        if process is not None:
            process.submit(plan)
            if self._fallback is not None and self.deadline is not None \
                    and not process.answered(self.deadline - time.monotonic()) \
                    and _first_to_answer(process, self._fallback[0]) is not process \
                    and self._fallback_compiled() is not None:
                process.stop()  # late, and the fallback compiled first: it is written
                return None, process.staging
            # In time, or the fallback failed: the answer, however late (nothing else could be written sooner).
            compiled = process.answer()
            if compiled is not None:
                return compiled, process.staging
        return self._compile_here(plan, model_bytes)

    def _compile_here(self, plan: Plan, model_bytes: bytes) -> tuple[_Compiled, Path]:
        staging = self._staging / "here"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        return _vela_compile(self.options, model_bytes, staging, lambda: plan), staging

    def _fallback_compiled(self) -> _Compiled | None:
        """The fallback's compile, waited for (None where there is none, it failed or Vela refused it)."""
        if self._fallback is None:
            return None
        try:
            return self._fallback[0].answer()
        except VelaRefusal:
            return None

    def _fallback_written(self, reason: str) -> BackendResult | None:
        """The fallback's compile written (None where there is none, it failed or Vela refused it too)."""
        compiled = self._fallback_compiled()
        if compiled is None or self._fallback is None:
            return None
        process, plan, _ = self._fallback
        self._fallback = None
        return self._written(plan, compiled, process.staging, "fallback", reason)

    def _written(self, plan: Plan, compiled: _Compiled | None, staging: Path, written: str = "answer",
                 reason: str = "") -> BackendResult:
        """Vela's files of ``compiled`` moved into the output directory, and Vela's estimate against the
        evaluator's."""
        if compiled is None:
            raise VelaRefusal("Vela's backend stopped without compiling the schedule")
        network, arch, schedule = plan.network, plan.arch, plan.schedule
        evaluation = evaluate(network, arch, schedule)
        try:
            staged = output_paths(self.options.model_path, arch.system_config, staging)
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
                             hillclimb_bytes=compiled.hillclimb_bytes, written=written, fallback_reason=reason)


def scheduled_model_bytes(options: RunOptions, arch: PricedArchitecture) -> bytes:
    """The model a run with ``options`` schedules with every priced site applied: the options' file, normalised
    where the options normalise (for the heuristic, Vela's graph: the file `vela` compiles to the same schedule).
    A CP-SAT run may leave sites out: its ``RunResult.model_bytes`` says what it scheduled; this is what a result
    made without them (by hand, in a script) is compiled from."""
    return normalised_bytes(read_model_bytes(options.model_path), str(options.model_path),
                            recipe_for(options, arch))[0]


def _legacy(arch: PricedArchitecture) -> PricedArchitecture:
    """``arch`` under Vela's (legacy) estimator, the one whose figures Vela's backend writes."""
    return with_estimator(arch, Estimator.VELA_LEGACY)


@dataclass(frozen=True)
class _Compiled:
    """What a compile read back from Vela: its per-op cycles and what its allocator did with the fast storage."""

    vela_cycles: dict[int, float]
    vela_allocation_bytes: int | None
    hillclimb_bytes: int | None
    allocator: str


class _AheadProcess:
    """A forked process compiling one model ahead: Vela's compile up to its scheduling step, then the plan it is
    sent, then the answer back."""

    def __init__(self, options: RunOptions, model_bytes: bytes, staging: Path, *, niceness: int = 0,
                 plan: Plan | None = None) -> None:
        """``plan``: the plan already known, which the forked process inherits (not sent: pickling a network of a
        thousand passes, and waiting for a process at a lower priority to read it, took the run seconds)."""
        context = multiprocessing.get_context("fork")
        self.staging = staging
        self._connection: Connection | None
        self._connection, child_end = context.Pipe()
        self._process: BaseProcess | None = context.Process(
            target=_compile_ahead, args=(options, model_bytes, staging, child_end, niceness, plan), daemon=True)
        self._process.start()
        child_end.close()
        self._submitted: Plan | None = plan
        self._received: tuple[str, Any] | None = None

    def submit(self, plan: Plan) -> None:
        """Send ``plan`` (once: a later, different schedule stops the process, and the run compiles in its own)."""
        if self._submitted is not None:
            if not _same_choices(self._submitted.schedule, plan.schedule):
                self.stop()
            return
        if self._connection is not None:
            self._submitted = plan
            with contextlib.suppress(OSError):  # it may have stopped already, its answer waiting
                self._connection.send((plan, codec.remembered_streams()))

    def answered(self, timeout_seconds: float) -> bool:
        """Whether the answer (or the process's end) is there within ``timeout_seconds``."""
        return self._connection is None or self._process is None or self._connection.poll(max(0.0, timeout_seconds))

    def answer(self) -> _Compiled | None:
        """The compile of the submitted plan, waited for (asked again, the same); None when the process is gone or
        failed otherwise than by Vela refusing (the caller then compiles in its own process)."""
        if self._received is None:
            connection, self._connection = self._connection, None
            self._received = ("stopped", None)
            if connection is not None:
                try:
                    if self._process is not None:
                        self._received = connection.recv()
                except (EOFError, OSError):
                    self._received = ("failed", None)
                finally:
                    connection.close()
            self.stop()  # it has answered, or never will
        kind, answer = self._received
        if kind == "refused":
            raise VelaRefusal(str(answer))
        if kind == "output":
            raise OutputError(str(answer))
        return answer if kind == "compiled" else None

    def stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join()
            self._process = None


def _same_choices(a: Schedule, b: Schedule) -> bool:
    """Whether two schedules decide alike (what Vela compiles: each op's and tensor's choices; status and solver
    aside)."""
    return a is b or (a.ops, a.tensors) == (b.ops, b.tensors)


def _first_to_answer(*processes: _AheadProcess) -> _AheadProcess:
    """Whichever of ``processes`` answers (or ends) first, waited for."""
    while not any(p.answered(0) for p in processes):
        wait([p._connection for p in processes if p._connection is not None])
    return next(p for p in processes if p.answered(0))


def _compile_ahead(options: RunOptions, model_bytes: bytes, staging: Path, connection: Connection,
                   niceness: int = 0, known: Plan | None = None) -> None:
    """The forked process of an :class:`_AheadProcess` (the end of the connection before a plan means the run
    stopped without one, and so does this process); ``niceness`` lowers its priority (the fallback's: the search
    comes first); ``known``: the plan, where it was known when the process was forked."""
    if niceness:
        with contextlib.suppress(OSError):
            os.nice(niceness)

    def plan() -> Plan:
        if known is not None:
            return known
        try:
            received, streams = connection.recv()
        except (EOFError, OSError):
            os._exit(0)
        codec.remember_streams(streams)
        return received

    answer: tuple[str, object]
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the run's stderr carries only its own errors
            answer = ("compiled", _vela_compile(options, model_bytes, staging, plan))
    except VelaRefusal as exc:
        answer = ("refused", str(exc))
    except OutputError as exc:
        answer = ("output", str(exc))
    except BaseException:  # noqa: BLE001 - the run compiles again in its own process, where a bug shows
        answer = ("failed", None)
    with contextlib.suppress(OSError):
        connection.send(answer)


def _vela_compile(options: RunOptions, model_bytes: bytes, staging: Path, plan: Callable[[], Plan]) -> _Compiled:
    """Vela's compile of ``model_bytes`` (written into ``staging`` under the options' file name, so that Vela's
    output files are named as for it) into ``staging``; its scheduling step asks ``plan`` for the schedule (so
    the compile may start before the schedule exists)."""
    path = staging / "model" / Path(options.model_path).name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model_bytes)
    forcing = ForcedScheduler(plan)
    log = io.StringIO()
    with patched_vela(forcing), indexed_live_ranges(), contextlib.redirect_stdout(log):
        from ethosu.vela import vela

        try:
            # Vela sets the process's recursion limit (default 1000, too few for its graph walks on a few
            # hundred passes: RecursionError); ours, as deep as the lowering allows, restored afterwards.
            status = vela.main(vela_arguments(replace(options, model_path=path), staging, verbose=(
                "--verbose-performance", "--recursion-limit", str(max(RECURSION_LIMIT, sys.getrecursionlimit())))))
        except VelaRefusal:
            raise
        except Exception as exc:  # an assertion or error deep in Vela's backend: name the op it was at
            raise VelaRefusal(f"Vela's backend rejects the schedule{op_in_traceback(exc)}: "
                              f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
    if status != 0:
        lines = [line for line in log.getvalue().splitlines() if line.strip()]
        raise VelaRefusal(f"Vela's backend stopped: {lines[-1] if lines else f'exit status {status}'}")
    return _Compiled(dict(forcing.vela_cycles), forcing.vela_allocation_bytes, forcing.hillclimb_bytes,
                     forcing.allocator)
