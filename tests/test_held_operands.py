"""Cascades through MULs whose second operand is a feature map, held whole (a swish or squeeze-excite gate):
CP-SAT's candidate space has them, as the default core does; Vela's rules, which the heuristic follows, do not.
The oracle for the backend is Vela's command stream: each stripe of such a pass must read the rows of the held
map that match the OFM rows it writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import CONFIGS

from npusched.app.pipeline import run
from npusched.netgen import generate
from npusched.schedule.cascades import elementwise_cascadable
from npusched.vela.backend import compile_schedule
from npusched.vela.command import run_options_from_vela_args

CONFIG = "u65-512_high_dedicated384k"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("held") / "mixed.tflite"
    path.write_bytes(generate("mixed", 40, 1, keras_style=True))
    return path


def _held(op: Any) -> bool:
    return op.ifm2 is not None and not op.ifm2.tensor.is_const and not elementwise_cascadable(op)


def test_only_npuscheds_own_schedules_cascade_through_a_held_operand(mixed: Path) -> None:
    """The heuristic (Vela's rules) never cascades such a pass; CP-SAT's candidate space does (below)."""
    heuristic = run(run_options_from_vela_args(mixed, CONFIGS[CONFIG], solver="heuristic"))
    ops = {op.index: op for op in heuristic.network.npu_ops}
    assert sum(_held(op) for op in ops.values()) >= 3
    assert not any(_held(ops[o.op_index]) for o in heuristic.schedule.ops if o.cascade is not None)


@pytest.mark.slow
def test_vela_reads_the_held_rows_each_stripe_writes(mixed: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """CP-SAT (deterministic) cascades a swish MUL and a squeeze-excite MUL on this network; Vela's backend
    compiles the schedule, its estimate agrees, and every NPU stripe of those passes reads the held map
    at the OFM stripe's rows (a broadcast gate: all of it, every time)."""
    import ethosu.vela.high_level_command_to_npu_op as commands

    options = run_options_from_vela_args(mixed, CONFIGS[CONFIG], solver="cpsat", estimator="vela-default",
                                         time_limit_seconds=120, workers=1, deterministic=True)
    result = run(options)
    ops = {op.index: op for op in result.network.npu_ops}
    held = {ops[o.op_index].name: ops[o.op_index] for o in result.schedule.ops
            if o.cascade is not None and _held(ops[o.op_index])}
    assert len(held) >= 2 and any(op.ifm2.shape == op.ofm.shape for op in held.values())
    reads: dict[str, list[tuple[int, int, Any, Any]]] = {}
    convert = commands.convert_command_to_npu_op

    def recording(cmd: Any, arch: Any) -> Any:
        npu_op = convert(cmd, arch)
        ps = getattr(cmd, "ps", None)
        if ps is not None and ps.primary_op is not None and ps.primary_op.name in held:
            reads.setdefault(ps.primary_op.name, []).append(
                (cmd.ofm_box.start_coord[-3], npu_op.ifm2.tiles.addresses[0] - cmd.ifm2_tensor.address,
                 npu_op.ifm2, npu_op.ofm.shape))
        return npu_op

    monkeypatch.setattr(commands, "convert_command_to_npu_op", recording)
    backend = compile_schedule(result, tmp_path / "out")
    assert backend.agreed, backend.warnings()
    for name, op in held.items():
        stripes = reads[name]
        assert len(stripes) > 1  # striped: it is in a cascade
        for row, offset, ifm2, ofm_shape in stripes:
            if op.ifm2.shape == op.ofm.shape:  # the OFM stripe's rows of the held map, one row stride apart
                assert (ifm2.shape.height, offset) == (ofm_shape.height, row * ifm2.strides.height)
            else:  # a broadcast gate: read whole each time
                assert (offset, ifm2.shape.height, ifm2.shape.width) == (0, 1, 1)
