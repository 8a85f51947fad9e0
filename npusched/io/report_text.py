"""The text summary printed by `solve-schedule`, laid out like Vela's `--verbose-performance` output.

Every figure comes from the run's Evaluation (the single judge); nothing is recomputed here.
"""

from __future__ import annotations

import math

from npusched.ir import NpuOp
from npusched.run import RunResult
from npusched.target.estimators import Estimator
from npusched.target.performance import ACCESS_AREAS, Direction, Purpose

_COLUMNS = (
    ("TFLite_operator", 20, "<"), ("NNG Operator", 20, "<"), ("SRAM Usage", 10, ">"), ("Peak%", 6, ">"),
    ("Op Cycles", 10, ">"), ("Network%", 8, ">"), ("NPU", 10, ">"), ("SRAM AC", 10, ">"), ("DRAM AC", 10, ">"),
    ("OnFlash AC", 10, ">"), ("OffFlash AC", 11, ">"), ("MAC Count", 10, ">"), ("Network%", 8, ">"),
    ("Util%", 6, ">"), ("Name", 20, "<"),
)


def _row(values: list[str]) -> str:
    return " ".join(f"{v:{align}{width}}" for v, (_, width, align) in zip(values, _COLUMNS, strict=True))


def per_layer_table(result: RunResult) -> list[str]:
    """One block per NPU subgraph: Vela's per-layer columns, figures from the evaluation."""
    _, evaluation = result.solved()
    arch = result.arch
    total_cycles = evaluation.total_cycles or 1.0
    total_macs = evaluation.macs or 1
    peak = evaluation.network_peak_fast_storage or 1
    costs = {cost.op_index: cost for cost in evaluation.ops}
    lines: list[str] = []
    for sg in result.network.subgraphs:
        lines += ["", f"Performance for NPU Subgraph {sg.name}", _row([name for name, _, _ in _COLUMNS]),
                  _row(["-" * width for _, width, _ in _COLUMNS])]
        for op in sg.ops:
            cost = costs[op.index]
            util = 100.0 * cost.macs / (cost.total_cycles * arch.num_macs_per_cycle) if cost.total_cycles else 0.0
            lines.append(_row([
                op.tflite_op, op.op_type, str(cost.network_sram_used),
                f"{100.0 * cost.network_sram_used / peak:.2f}", f"{cost.total_cycles:.0f}",
                f"{100.0 * cost.total_cycles / total_cycles:.2f}", f"{cost.npu_cycles:.0f}",
                *(f"{cost.access_cycles.get(area, 0.0):.0f}" for area in ACCESS_AREAS),
                str(cost.macs), f"{100.0 * cost.macs / total_macs:.2f}", f"{util:.2f}", op.name,
            ]))
    return lines


def cascade_lines(result: RunResult) -> list[str]:
    """Cascades per NPU subgraph as Vela's verbose schedule lists them: first op -> last op (positions in the
    subgraph) and the fast storage in use while the cascade runs."""
    schedule, evaluation = result.solved()
    costs = {cost.op_index: cost for cost in evaluation.ops}
    lines: list[str] = []
    for sg in result.network.subgraphs:
        groups: dict[int, list[int]] = {}
        for position, op in enumerate(sg.ops):
            cascade = schedule.op(op.index).cascade
            if cascade is not None:
                groups.setdefault(cascade, []).append(position)
        if not groups:
            continue
        lines.append(f"Cascades of {sg.name}:")
        for number, positions in enumerate(groups.values()):
            size = max(costs[sg.ops[p].index].sram_used for p in positions)
            lines.append(f"  {number}: {positions[0]} -> {positions[-1]}, size: {size}")
    return lines


def format_summary(result: RunResult, per_layer: bool = True) -> str:
    network = result.network
    arch = result.arch
    npu_ops = [op for op in network.ops if isinstance(op, NpuOp)]
    total = len(network.ops)
    cpu = len(network.cpu_ops)
    lines: list[str] = []
    if per_layer and result.evaluation is not None:
        lines += per_layer_table(result) + [""]
    lines += [
        f"Network summary for {network.name}",
        _kv("Accelerator configuration", arch.accelerator_name),
        _kv("System configuration", arch.system_config),
        _kv("Memory mode", arch.memory_mode),
        _kv("Accelerator clock", f"{arch.core_clock / 1e6:.0f} MHz"),
        _kv("Arena cache size (fast-storage limit)", f"{arch.arena_cache_size} bytes"),
        "",
        f"CPU operators = {cpu} ({_percent(cpu, total):.1f}%)",
        f"NPU operators = {len(npu_ops)} ({_percent(len(npu_ops), total):.1f}%)",
    ]
    lines += [f"  CPU: {op.reason}{_cores_running(result, op.name)}" for op in network.cpu_ops]
    lines += [f"NPU subgraph {sg.name}: {len(sg.ops)} passes" for sg in network.subgraphs]
    if result.normalisation is not None:
        lines += [f"Normalised: {result.normalisation.describe()}",
                  f"  {result.normalisation.normalisation.describe()}"]
    priced_out = [d for d in result.sites if not d.applied]
    if priced_out:
        lines.append(f"Rewrite sites priced out: {len(priced_out)} of {len(result.sites)} "
                     f"({priced_out[0].reason.removeprefix('priced out: ')})")
        lines += [f"  {d.site.key}" for d in priced_out]
    if result.schedule is None:
        lines += ["", _kv("Neural network macs", f"{sum(op.macs for op in npu_ops)} MACs/batch")]
        return "\n".join(lines)
    schedule, evaluation = result.solved()
    lines += cascade_lines(result) + [""]
    for area in ACCESS_AREAS:
        moved = evaluation.bytes_moved(area)
        if not moved:
            continue
        name = area.display_name()
        for label, purpose, direction in (("Input  ", Purpose.FeatureMap, Direction.Read),
                                          ("Weight ", None, Direction.Read),
                                          ("Output ", Purpose.FeatureMap, Direction.Write)):
            if purpose is None:
                value = sum(evaluation.bytes_moved(area, p, direction) for p in Purpose if p != Purpose.FeatureMap)
            else:
                value = evaluation.bytes_moved(area, purpose, direction)
            lines.append(_kv(f"{label} {name} bandwidth", f"{value / 1e6:.2f} MB/batch"))
        lines.append(_kv(f"Total   {name} bandwidth", f"{moved / 1e6:.2f} MB/batch"))
    lines += [
        "",
        _kv("Neural network macs", f"{evaluation.macs} MACs/batch"),
        "",
        f"Schedule ({result.options.solver}, {schedule.label or 'unnamed'}): {result.status}",
        _kv("Total cycles", f"{evaluation.total_cycles:.0f} ({arch.estimator.value} estimate)"),
        *(_kv(f"Total cycles, {name} estimate", f"{cycles:.0f}")
          for name, cycles in result.cycles_by_estimator.items() if name not in (arch.estimator.value, "vela")),
        _kv("NPU cycles", f"{evaluation.npu_cycles:.0f}"),
        *(_kv(f"{area.display_name()} access cycles", f"{evaluation.access_cycles.get(area, 0.0):.0f}")
          for area in ACCESS_AREAS if evaluation.access_cycles.get(area, 0.0)),
        _kv("Peak fast storage", f"{evaluation.peak_fast_storage} bytes"),
        _kv("Fast storage allocation", f"{evaluation.allocation.size_bytes} bytes (addresses; limit "
            f"{int(arch.arena_cache_size)} bytes)"),
        _kv("Inference time", f"{1e3 * evaluation.total_cycles / arch.core_clock:.3f} ms"),
    ]
    lines += solver_lines(result)
    return "\n".join(lines)


def solver_lines(result: RunResult) -> list[str]:
    """CP-SAT's verdict: the heuristic it started from, the improvement, the proven bound and the gap."""
    report = result.solver_report
    if report is None:
        return []
    lines = []
    if report.heuristic_cycles is not None:
        lines += [_kv("Heuristic (Vela) cycles", f"{report.heuristic_cycles:.0f}"),
                  _kv("Heuristic peak fast storage", f"{report.heuristic_peak_fast_storage_bytes} bytes")]
        if report.heuristic_cycles > 0:  # a network without NPU passes costs 0 cycles either way
            gain = 100.0 * (1.0 - result.solved()[1].total_cycles / report.heuristic_cycles)
            lines.append(_kv("Improvement over heuristic", f"{gain:.2f}%"))
    lines += floor_lines(result)
    if report.objective_words or report.objective:
        lines.append(f"Objective: {report.objective_words or report.objective}")
    # CP-SAT has no bound or gap when it fell back before searching (NaN): say so rather than print "nan".
    bound = f"{report.bound_cycles:.0f}" if _finite(report.bound_cycles) else "none"
    if _finite(report.bound_cycles) and report.objective.startswith("both"):
        bound += " (of that weighted sum, not the cycles above)"
    gap = f"{100.0 * report.gap:.2f}%" if _finite(report.gap) else "none"
    any_bound = (f"{report.any_schedule_bound_cycles:.0f}" if _finite(report.any_schedule_bound_cycles)
                 else "none")
    if report.strategy == "Size":
        # Lexicographic: the peak first, then the cycles among schedules with no larger peak.
        peak_bound = f"{report.peak_bound_bytes} bytes" if report.peak_bound_bytes is not None else "none"
        lines += [_kv("Objective", "least peak, then cycles"), _kv("Peak lower bound, candidate space", peak_bound),
                  _kv("Peak proven least", "yes" if report.peak_proven_minimal else "no")]
    bound_label = "Cycles bound at that peak (proven)" if report.strategy == "Size" else \
        "Lower bound, candidate space (proven)"
    lines += [_kv(bound_label, bound), _kv("Gap to that bound", gap),
              _kv("Lower bound, any schedule", any_bound), _kv("Solve time", f"{report.solve_seconds:.2f} s")]
    repairs = report.model_stats.get("allocation_repairs")
    if repairs and repairs.get("rounds"):
        lines.append(_kv("Allocation repairs", f"{repairs['rounds']} (cost {repairs['cost_cycles']:.0f} cycles)"))
    if report.reason:
        lines.append(f"Note: {report.reason}")
    return lines


def _cores_running(result: RunResult, name: str) -> str:
    """Where each Vela core whose own schedule the run made runs the operator (a CP-SAT run's floors)."""
    where = [f"{'Vela legacy' if floor.core == Estimator.VELA_LEGACY.value else 'the default core'} runs it on the "
             f"{'CPU' if name in floor.cpu_operators else 'NPU'}" for floor in result.floors]
    return f" ({'; '.join(where)})" if where else ""


def floor_lines(result: RunResult) -> list[str]:
    """Both Vela cores' own schedules, each priced by its own model, against the answer priced the same way."""
    names = {Estimator.VELA_LEGACY.value: "Vela legacy's own schedule",
             Estimator.VELA_DEFAULT.value: "Vela default core's own schedule"}
    lines = []
    for floor in result.floors:
        own = floor.total_cycles
        ours = result.cycles_by_estimator.get(floor.core)
        ratio = f", answer {ours / own:.3f}x" if ours is not None and own > 0 else ""
        fits = "" if floor.fits else ", does not fit"
        taught = f", taught {' and '.join(floor.taught)}" if floor.taught else ""
        lines.append(_kv(names.get(floor.core, floor.core), f"{own:.0f} ({floor.core}{taught}{ratio}{fits})"))
    lines += [f"{names.get(missing.core, missing.core)}: none ({missing.reason})" for missing in result.missing_floors]
    return lines


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _kv(label: str, value: object) -> str:
    return f"{label:<38}{value!s:>20}"


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0
