"""Replay of Vela's high-level command stream: every row a stripe reads from a rolling buffer is still there.

A rolling buffer holds ``H`` rows of a feature map, row ``y`` at ``y mod H``; a stripe that writes row ``y + H``
overwrites row ``y``. Vela's generator orders the stripes of a cascade (pull-wise from its last pass) but never
checks that a buffer is deep enough, and neither Vela's estimate nor its allocator would notice one that is not:
the compiled network would compute wrong values. npusched sizes its buffers itself (deeper where a pass later in
the cascade reads the map lagged, ``rules.lagged_buffer_height``), so each compilation replays the stream and
refuses one whose stripe reads a row that is not, or no longer, in its buffer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def rolling_buffer_problems(commands: Iterable[Any]) -> list[str]:
    """Reads of rolling-buffer rows not written yet or overwritten since, in Vela's command order (its
    ``NpuStripe`` commands: ``ifm_box``/``ifm2_box`` read, ``ofm_box`` written; boxes are NHWC or shorter)."""
    from ethosu.vela.tensor import TensorSubPurpose

    rows_at: dict[int, dict[int, int]] = {}  # id(tensor) -> slot -> the row it holds
    problems: list[str] = []

    def depth(tensor: Any) -> int | None:
        if tensor is None or tensor.sub_purpose != TensorSubPurpose.RollingBufferY:
            return None
        return int(tensor.storage_shape[-3])

    for cmd in commands:
        if not cmd.is_npu_pass_command():
            continue
        for tensor, box in ((cmd.ifm_tensor, cmd.ifm_box), (cmd.ifm2_tensor, cmd.ifm2_box)):
            height = depth(tensor)
            if height is None or not box.start_coord:
                continue
            slots = rows_at.get(id(tensor), {})
            missing = [row for row in range(box.start_coord[-3], box.end_coord[-3])
                       if slots.get(row % height) != row]
            if missing:
                problems.append(f"'{cmd.ps.name}' reads rows {missing[0]}..{missing[-1]} of '{tensor.name}', which "
                                f"its {height}-row rolling buffer no longer (or not yet) holds")
        height = depth(cmd.ofm_tensor)
        if height is not None:
            slots = rows_at.setdefault(id(cmd.ofm_tensor), {})
            for row in range(cmd.ofm_box.start_coord[-3], cmd.ofm_box.end_coord[-3]):
                slots[row % height] = row
    return problems
