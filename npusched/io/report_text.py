"""The text summary printed by `solve-schedule`."""

from __future__ import annotations

from typing import Any

from npusched.model.ir import NpuOp


def format_summary(result: Any, per_layer: bool = True) -> str:
    network = result.network
    arch = result.arch
    npu_ops = [op for op in network.ops if isinstance(op, NpuOp)]
    total = len(network.ops)
    cpu = len(network.cpu_ops)
    lines = [
        f"Network summary for {network.name}",
        f"Accelerator configuration {arch.accelerator_config:>30}",
        f"System configuration      {arch.system_config:>30}",
        f"Memory mode               {arch.memory_mode:>30}",
        "",
        f"CPU operators = {cpu} ({_percent(cpu, total):.1f}%)",
        f"NPU operators = {len(npu_ops)} ({_percent(len(npu_ops), total):.1f}%)",
        f"Neural network macs {sum(op.macs for op in npu_ops):>20} MACs/batch",
        "",
    ]
    for sg in network.subgraphs:
        lines.append(f"NPU subgraph {sg.name}: {len(sg.ops)} passes")
    for op in network.cpu_ops:
        lines.append(f"CPU operator {op.tflite_op} '{op.name}': {op.reason}")
    return "\n".join(lines)


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0
