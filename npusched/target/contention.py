"""The contention-aware estimate: a prefetch can only use memory bandwidth the pass it hides under leaves idle.

Vela's estimate lets a pass's first weight transfer (and its LUT or memcpy DMA) hide under the previous pass's
compute, up to that pass's *slack-buffering cycles*, without charging the transfer to anybody's memory time. A
pass that keeps the memories busy for its whole duration has no room for that traffic, yet the next pass is
credited as if it did. Under ``Estimator.CONTENTION`` the slack a pass hands on is capped by its idle time in both
memories the transfer touches (the permanent storage it reads, the fast storage it writes), counting the pass's
own buffered weight traffic as busy time. The pass's own figures do not change (the prefetch fits in its idle
time); the next pass pays for whatever did not fit, through Vela's own formula.
"""

from __future__ import annotations

from npusched.target.arch import ArchitectureFeatures
from npusched.target.performance import OpPerformance


def contention_slack(arch: ArchitectureFeatures, estimate: OpPerformance, slack_cycles: float,
                     buffered_weight_bytes: int) -> float:
    """The part of ``slack_cycles`` the next pass's prefetch can use without slowing this pass down.

    ``buffered_weight_bytes`` is this pass's own weight stream when it is copied into a buffer: Vela keeps that
    traffic out of the access cycles, but it occupies both memories all the same.
    """
    idle = slack_cycles
    for area in {arch.permanent_storage_mem_area, arch.fast_storage_mem_area}:
        busy = estimate.access_cycles.get(area, 0.0)
        if buffered_weight_bytes:
            busy += buffered_weight_bytes / arch.memory_bandwidths_per_cycle[area]
        idle = min(idle, estimate.total_cycles - busy)
    return max(idle, 0.0)
