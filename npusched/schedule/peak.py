"""Why a schedule needs the fast storage it needs: the step where its use peaks and what is live there.

Errors about a limit no schedule meets quote this for the smallest schedule found, so an engineer sees which
feature maps and buffers to attack (a layer to split, an operator to move, weights to read in place).
"""

from __future__ import annotations

from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.evaluator import Evaluation, evaluate, subgraphs_of
from npusched.schedule.memory_breakdown import PARTS, memory_breakdown
from npusched.schedule.schedule import Schedule
from npusched.target.estimators import PricedArchitecture

LISTED = 4  # allocations named at the peak step, largest first


def explain_peak(network: Network | NpuSubgraph, arch: PricedArchitecture, schedule: Schedule,
                 evaluation: Evaluation | None = None) -> str:
    """Where ``schedule``'s fast-storage use peaks, how it splits into feature maps, rolling buffers and weight
    buffers there, and the largest allocations live at that step (``evaluation``: the schedule's, where known)."""
    evaluation = evaluation or evaluate(network, arch, schedule)
    if not evaluation.memory or evaluation.peak_fast_storage == 0:
        return "it uses no fast storage"
    index, memory = max(enumerate(evaluation.memory), key=lambda item: item[1].peak)
    breakdown = memory_breakdown(network, schedule, evaluation)[index]
    step = memory.usage.index(memory.peak)
    names = {op.index: op.name for op in subgraphs_of(network)[index].ops}
    running = breakdown.op_at_step.get(step)
    if running and len(running) > 1:
        where = f"the cascade of {len(running)} ops '{running[0]}' .. '{running[-1]}'"
    elif running:
        where = f"op '{running[0]}'"
    else:
        before = breakdown.op_at_step.get(step - 1, ("-",))[-1]
        after = breakdown.op_at_step.get(step + 1, ("-",))[0]
        where = f"between ops '{before}' and '{after}'"
    split = ", ".join(f"{part} {values[step]} B" for part, values in zip(PARTS, breakdown.parts, strict=True)
                      if values[step])
    live = sorted((r for r in memory.live_ranges if r.start <= step <= r.end), key=lambda r: -r.size)
    largest = ", ".join(
        (f"weights of '{names.get(r.weight_of, r.weight_of)}'" if r.weight_of is not None else "/".join(r.tensors))
        + f" {r.size} B" for r in live[:LISTED])
    return (f"its use peaks at step {step} ({where}) with {memory.peak} bytes: {split}; largest live there: "
            f"{largest}")
