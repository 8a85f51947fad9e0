"""Channel-poor maps the NPU writes for the CPU, written to a map of their own and copied out in full bursts
(priced; Dedicated_Sram only).

The mirror of ``staged_inputs``: a map [1, H, W, C] (C < 16) that the NPU makes and only CPU operators read must
end in DRAM, which the pass making it would write in bursts of its depth (a PyTorch-style U-Net's 4-channel
64 x 64 output, read by the CPU's TRANSPOSE to NCHW: 70,178 cycles on u65-512). The making pass writes a map of
its own, which may stay in fast storage, and one NPU pass over a 16-deep view copies it into the original tensor
(4,369 cycles there). The original tensor keeps its index and name. Vela's default core gets there by running
the TRANSPOSE on the NPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npusched.frontend.normalise.flatbuffer import (
    DEEP_CHANNELS,
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    deep_copy,
    ints,
    name,
    parsed_subgraph,
    readers,
    static_shape,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.frontend.normalise.staged_inputs import STAGE_MIN_BYTES
from npusched.frontend.supported import npu_support


@dataclass(frozen=True)
class StageOutPlan:
    site: Site
    position: int
    index: int
    shape: tuple[int, ...]
    operators: int = 1


def find_staged_outputs(model: ModelT, subgraph: SubGraphT) -> list[StageOutPlan]:
    """Maps of fewer than 16 channels, 4 KiB or more, made by an NPU operator and read by CPU operators only. Where
    the rule stops was measured (CP-SAT, 15 s, both U65s, both estimators): a network output (a Keras U-Net's,
    already written 16 deep by its widened convolution) cost 0.5-3% more staged, and so did 24- and 40-channel
    maps the CPU reads in the `mixed` network; neither is a site."""
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    read = readers(operators)
    parsed = None
    plans = []
    for position, op in enumerate(operators):
        out = ints(op.outputs)
        if len(out) != 1 or not well_formed(subgraph, op):
            continue
        index = out[0]
        shape = static_shape(tensors[index])
        size = int(np.prod(shape)) if shape is not None else 0
        following = read.get(index, [])
        if shape is None or len(shape) != 4 or shape[0] != 1 or shape[3] >= DEEP_CHANNELS \
                or size % DEEP_CHANNELS or size < STAGE_MIN_BYTES or not following:
            continue
        if parsed is None:
            parsed = parsed_subgraph(model, subgraph)
        if npu_support(parsed.operators[position], parsed) is not None \
                or any(npu_support(parsed.operators[p], parsed) is None for p in following):
            continue  # made by the CPU, or read by the NPU too
        plans.append(StageOutPlan(Site("staged_output", name(tensors[index])), position, index, shape))
    return plans


def stage_outputs(model: ModelT, subgraph: SubGraphT, plans: Sequence[StageOutPlan]) -> None:
    operators = list(subgraph.operators or [])
    copies: dict[int, list[OperatorT]] = {}
    for plan in plans:
        like = subgraph.tensors[plan.index]
        made = add_tensor(subgraph, like, "/unstaged", plan.shape)
        operators[plan.position].outputs = np.asarray([made], dtype=np.int32)
        copies[plan.position] = deep_copy(model, subgraph, made, plan.index, plan.shape, like)[0]
    subgraph.operators = [new for position, op in enumerate(operators) for new in [op, *copies.get(position, [])]]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'output')} copied out in full bursts after the NPU writes it"


STAGED_OUTPUTS = Rewrite("staged_output", priced=True, find=find_staged_outputs, apply=stage_outputs,
                         describe=_describe,
                         for_recipe=lambda rewrite, recipe: rewrite if recipe.stage_maps else None)
