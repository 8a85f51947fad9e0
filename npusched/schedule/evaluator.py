"""The single judge of a schedule: what it costs and whether it is valid.

Every solver hands its ``Schedule`` here, and every number a report prints comes from here, so schedules from
different solvers are always compared on the same terms. The prices are Vela 5.2.0's legacy-core estimates:

* per pass, the full-op estimate of ``npusched.target.performance`` (compute, weight DMA, memory access time),
  fed with the schedule's block config, tensor placements and weight buffering;
* memory over time, built the way Vela's live-range pass builds it (``memory_model``). Two views are kept: per
  subgraph as Vela's scheduler sees it (its "SRAM Used"), and over the whole inference (its per-layer "SRAM
  Usage").

``verify`` then checks the schedule against the network and the evaluation: every pass has its choices, stripes,
cascades and weight slices are consistent, and fast storage never exceeds its limit.

This module is the front door; the work is done in ``tensor_use`` (readers, writers and placements),
``memory_model`` (memory over time, the only memory model of the project: the heuristic runs its candidates
through it; it steps through the positions of ``memory_layout``, the per-subgraph layout the DP and CP-SAT read
too), ``pricing`` (one pass), ``evaluation`` (the whole schedule) and ``verification``.
"""

from npusched.schedule.memory_layout import LiveRange
from npusched.schedule.memory_model import (
    PassMemory,
    SubgraphMemory,
    cascade_rolling_buffers,
    elementwise_reuse_source,
    network_memory,
    pass_memory_walk,
    reusable_ifm,
    scheduling_view,
    subgraph_memory,
)
from npusched.schedule.pass_costs import BandwidthKey, Evaluation, OpCost, evaluate
from npusched.schedule.pricing import (
    encoded_weights_for,
    full_weight_transfer_cycles,
    price_op,
    schedule_price_inputs,
    scheduler_op_cycles,
    slack_buffering_cycles,
    staging_limit,
)
from npusched.schedule.rules import ALLOCATION_QUANTUM, storage_size, weights_need_dma
from npusched.schedule.tensor_use import TensorUse, default_placement, placement_of, subgraphs_of, tensor_use
from npusched.schedule.verification import verify

__all__ = [
    "ALLOCATION_QUANTUM",
    "BandwidthKey",
    "Evaluation",
    "LiveRange",
    "OpCost",
    "PassMemory",
    "SubgraphMemory",
    "TensorUse",
    "cascade_rolling_buffers",
    "default_placement",
    "elementwise_reuse_source",
    "encoded_weights_for",
    "evaluate",
    "full_weight_transfer_cycles",
    "network_memory",
    "schedule_price_inputs",
    "pass_memory_walk",
    "placement_of",
    "price_op",
    "reusable_ifm",
    "scheduler_op_cycles",
    "scheduling_view",
    "slack_buffering_cycles",
    "staging_limit",
    "storage_size",
    "subgraph_memory",
    "subgraphs_of",
    "tensor_use",
    "verify",
    "weights_need_dma",
]
