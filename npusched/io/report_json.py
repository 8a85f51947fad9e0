"""The JSON schedule document (format npusched.schedule/1; fields are documented in docs/schedule-format.md).

Later versions add fields; they never rename or remove one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npusched.model.ir import CpuOp, NpuOp

FORMAT = "npusched.schedule/1"


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


def document(result: Any) -> dict[str, Any]:
    """Build the whole document from a finished run (npusched.pipeline.RunResult)."""
    arch = result.arch
    options = result.options
    return {
        "format": FORMAT,
        "model": str(options.model_path),
        "accelerator_config": arch.accelerator_config,
        "system_config": arch.system_config,
        "memory_mode": arch.memory_mode,
        "arena_cache_size": int(arch.arena_cache_size),
        "solver": options.solver if result.schedules else None,
        "status": result.status,
        "totals": _totals(result),
        "ops": [op_record(op) for op in result.network.ops],
    }


def _totals(result: Any) -> dict[str, Any]:
    network = result.network
    npu_ops = [op for op in network.ops if isinstance(op, NpuOp)]
    return {
        "npu_ops": len(npu_ops),
        "cpu_ops": len(network.cpu_ops),
        "npu_subgraphs": len(network.subgraphs),
        "macs": sum(op.macs for op in npu_ops),
    }


def write_json(result: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document(result), indent=1) + "\n")
