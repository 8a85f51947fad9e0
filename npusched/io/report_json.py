"""The JSON schedule document (format npusched.schedule/2; fields are documented in docs/guide/schedule-format.md;
``npusched.io.schedule_document`` reads it back).

Later versions add fields; they never rename or remove one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from npusched.errors import OutputError
from npusched.io.schedule_document import FORMAT
from npusched.ir import CpuOp, NpuOp
from npusched.run import RunResult
from npusched.schedule.evaluator import cascade_rolling_buffers, placement_of, slack_buffering_cycles
from npusched.target.performance import ACCESS_AREAS, Direction


def op_record(op: NpuOp | CpuOp) -> dict[str, Any]:
    """The schedule-independent description of one operator."""
    if isinstance(op, CpuOp):
        return {
            "name": op.name,
            "tflite_op": op.tflite_op,
            "placement": "cpu",
            "npu_block_type": None,
            "ifm_shape": list(op.input_shapes[0]) if op.input_shapes else [],
            "ofm_shape": list(op.output_shapes[0]) if op.output_shapes else [],
            "macs": 0,
            "cpu_reason": op.reason,
        }
    return {
        "name": op.name,
        "tflite_op": op.tflite_op,
        "placement": "npu",
        "npu_block_type": op.npu_block_type.value,
        "op_type": op.op_type,
        "ifm_shape": op.ifm.shape.as_list(),
        "ifm2_shape": op.ifm2.shape.as_list() if op.ifm2 is not None else None,
        "ofm_shape": op.ofm.shape.as_list(),
        "macs": op.macs,
    }


def scheduled_op_record(op: NpuOp, result: RunResult, rolling_buffer: Any = None) -> dict[str, Any]:
    """What the schedule chose for one NPU pass and what the evaluator says it costs: every choice is here, so
    ``npusched.app.replay`` rebuilds the same schedule from it. ``rolling_buffer`` is the shape of the
    cascade buffer the pass reads its IFM from (the evaluator's, also where the schedule leaves it implicit)."""
    schedule, evaluation = result.solved()
    choice = schedule.op(op.index)
    cost = evaluation.op(op.index)
    block = choice.block_config
    assert block is not None  # a verified schedule has a block config for every pass
    buffering = choice.weight_buffering
    operands = {"ifm": op.ifm, "ifm2": op.ifm2, "ofm": op.ofm}
    return {
        "block_config": block.old_style(),
        "block_config_part_kernel": block.is_partkernel,
        "ofm_stripe": choice.ofm_stripe.as_list(),
        "ifm_stripe": choice.ifm_stripe.as_list(),
        "ifm2_stripe": choice.ifm2_stripe.as_list() if choice.ifm2_stripe is not None else None,
        "cascade": choice.cascade,
        "rolling_buffer": rolling_buffer.as_list() if rolling_buffer is not None else None,
        "weight_buffering": {
            "kind": buffering.kind,
            "depth_slices": list(choice.depth_slices),
            "buffer_bytes": list(buffering.buffer_sizes),
            "pre_buffered": buffering.pre_buffered,
        },
        "prefetch_window": {
            "slack_ofm_depth": choice.slack_ofm_depth,
            "tail_slack_cycles": choice.tail_slack_cycles,
            "cycles": slack_buffering_cycles(result.arch, op, choice, schedule),
        },
        "placements": {role: _placement_record(result, access.tensor)
                       for role, access in operands.items() if access is not None},
        "ofm_mem_area": _placement(result, op.ofm.tensor).mem_area.value,
        "ofm_format": _placement(result, op.ofm.tensor).format.value,
        "cycles": cost.total_cycles,
        "npu_cycles": cost.npu_cycles,
        "access_cycles": {area.value: cost.access_cycles.get(area, 0.0) for area in ACCESS_AREAS},
        "sram_used_bytes": cost.sram_used,
    }


def _placement_record(result: RunResult, fm: Any) -> dict[str, str]:
    place = _placement(result, fm)
    return {"mem_area": place.mem_area.value, "format": place.format.value}


def _placement(result: RunResult, fm: Any) -> Any:
    return placement_of(result.arch, result.solved()[0], fm)


def document(result: RunResult, vela_backend: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the whole document from a finished run; ``vela_backend`` is what
    compiling it with Vela's backend gave (``BackendResult.as_json``), when that was asked for."""
    arch = result.arch
    options = result.options
    positions = {op.index: (index, sg.name, position)
                 for index, sg in enumerate(result.network.subgraphs) for position, op in enumerate(sg.ops)}
    rolling: dict[int, Any] = {}
    if result.schedule is not None:
        for sg in result.network.subgraphs:
            rolling.update(cascade_rolling_buffers(sg, result.schedule))
    return {
        "format": FORMAT,
        "model": str(options.model_path),
        "accelerator_config": arch.accelerator_config,
        "system_config": arch.system_config,
        "memory_mode": arch.memory_mode,
        "arena_cache_size": int(arch.arena_cache_size),
        "solver": options.solver if result.schedule is not None else None,
        "status": result.status,
        "label": result.schedule.label if result.schedule is not None else None,
        "totals": _totals(result),
        "fast_storage_allocation": _allocation_record(result),
        "normalised": options.normalise,
        "normalisation": result.normalisation.as_json() if result.normalisation is not None else None,
        "sites": [site.as_json() for site in result.sites],
        "recipe": result.recipe.as_json() if result.recipe is not None else None,
        "rewrites": [record.as_json() for record in result.rewrites],
        **_solver_fields(result),
        "warnings": list(result.warnings),
        "vela_backend": vela_backend,
        "timings_seconds": {phase: round(seconds, 3) for phase, seconds in result.timings_seconds.items()},
        "ops": [_record(op, result, positions.get(op.index), rolling.get(op.index)) for op in result.network.ops],
    }


def _record(op: NpuOp | CpuOp, result: RunResult, position: tuple[int, str, int] | None, rolling_buffer: Any
            ) -> dict[str, Any]:
    record = {"op_index": op.index, **op_record(op)}
    if position is not None:
        record.update(zip(("subgraph_index", "subgraph", "subgraph_op_index"), position, strict=True))
    if isinstance(op, NpuOp) and result.schedule is not None:
        record.update(scheduled_op_record(op, result, rolling_buffer))
    return record


def _totals(result: RunResult) -> dict[str, Any]:
    network = result.network
    npu_ops = [op for op in network.ops if isinstance(op, NpuOp)]
    totals: dict[str, Any] = {
        "npu_ops": len(npu_ops),
        "cpu_ops": len(network.cpu_ops),
        "npu_subgraphs": len(network.subgraphs),
        "macs": sum(op.macs for op in npu_ops),
    }
    evaluation = result.evaluation
    if evaluation is not None:
        totals.update({
            "cycles": evaluation.total_cycles,
            "estimator": result.arch.estimator.value,
            "cycles_by_estimator": dict(result.cycles_by_estimator),
            "npu_cycles": evaluation.npu_cycles,
            "access_cycles": {area.value: evaluation.access_cycles.get(area, 0.0) for area in ACCESS_AREAS},
            "bytes_read": {area.value: evaluation.bytes_moved(area, direction=Direction.Read) for area in ACCESS_AREAS},
            "bytes_written": {area.value: evaluation.bytes_moved(area, direction=Direction.Write)
                              for area in ACCESS_AREAS},
            "peak_fast_storage_bytes": evaluation.peak_fast_storage,
        })
    return totals


def _allocation_record(result: RunResult) -> dict[str, Any] | None:
    """Every fast-storage buffer's address (the evaluation's allocation), with the allocation's size."""
    if result.evaluation is None:
        return None
    allocation = result.evaluation.allocation
    names = {op.index: op.name for op in result.network.ops}
    buffers = sorted(allocation.buffers, key=lambda b: (b.range.start, b.offset_bytes))
    return {"size_bytes": allocation.size_bytes, "live_peak_bytes": allocation.live_peak_bytes,
            "limit_bytes": int(result.arch.arena_cache_size), "method": allocation.method,
            "buffers": [{"tensors": list(b.range.tensors), "kind": b.range.kind,
                         "weights_of": names.get(b.range.weight_of) if b.range.weight_of is not None else None,
                         "start_step": b.range.start, "end_step": b.range.end, "size_bytes": b.range.size,
                         "offset_bytes": b.offset_bytes} for b in buffers]}


def _solver_fields(result: RunResult) -> dict[str, Any]:
    report = result.solver_report
    if report is None:
        return {"strategy": result.options.optimise, "objective": None, "bound_cycles": None,
                "any_schedule_bound_cycles": None, "gap": None, "peak_fast_storage_bound_bytes": None,
                "peak_proven_minimal": None, "solve_seconds": result.timings_seconds.get("solve"), "heuristic": None,
                "floors": [], "floors_missing": []}
    heuristic = None
    if report.heuristic_cycles is not None:
        heuristic = {"cycles": report.heuristic_cycles,
                     "peak_fast_storage_bytes": report.heuristic_peak_fast_storage_bytes}
    # Size is lexicographic: the peak first (its proven bound over the candidate space), then the cycles at that
    # peak (``bound_cycles`` and ``gap`` hold among schedules no larger).
    # ``bound_cycles`` and ``gap`` are in the objective's units (under "both", the weighted sum of both models).
    return {"strategy": report.strategy, "objective": report.objective or None,
            "bound_cycles": _finite_or_none(report.bound_cycles),
            "any_schedule_bound_cycles": _finite_or_none(report.any_schedule_bound_cycles),
            "gap": _finite_or_none(report.gap),
            "peak_fast_storage_bound_bytes": report.peak_bound_bytes,
            "peak_proven_minimal": report.peak_proven_minimal if report.strategy == "Size" else None,
            "solve_seconds": report.solve_seconds,
            "status_reason": report.reason or None, "model_stats": report.model_stats, "heuristic": heuristic,
            "floors": [floor.as_json() for floor in result.floors],
            "floors_missing": [missing.as_json() for missing in result.missing_floors]}


def _finite_or_none(value: float | None) -> float | None:
    """CP-SAT reports NaN for a bound or gap it does not have; the format says null (JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None


def check_output_path(path: Path, inputs: Iterable[Path | str] = ()) -> None:
    """Refuse, before any work, a path the document cannot or must not be written to: an existing directory or
    non-regular file (a device such as /dev/full), a read-only file, or one of the run's ``inputs``."""
    label = f"--json {path}"
    if path.is_dir():
        raise OutputError(f"{label}: is a directory")
    if not path.exists():
        if path.parent.exists() and not path.parent.is_dir():
            raise OutputError(f"{label}: {path.parent} is not a directory")
        return
    if not path.is_file():
        raise OutputError(f"{label}: is not a regular file")
    for source in inputs:
        if Path(source).exists() and os.path.samefile(path, source):
            raise OutputError(f"{label}: would overwrite the input file {source}")
    if path.stat().st_mode & 0o222 == 0:
        raise OutputError(f"{label}: the file is read-only")


def write_json(result: RunResult, path: Path, inputs: Iterable[Path | str] = (),
               vela_backend: dict[str, Any] | None = None) -> None:
    """Write the document atomically: a temporary file beside ``path`` renamed over it, so a failed write (full
    disk, killed process) leaves no half-written document and never touches an input."""
    check_output_path(path, (result.options.model_path, *inputs))
    text = json.dumps(document(result, vela_backend), indent=1, allow_nan=False) + "\n"
    temporary: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        # Created as a plain new file would be (mode 0666 less the umask); an existing document keeps its mode.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        if path.exists():
            os.fchmod(descriptor, path.stat().st_mode & 0o777)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
        temporary = None
    except OSError as exc:
        raise OutputError(f"--json {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
