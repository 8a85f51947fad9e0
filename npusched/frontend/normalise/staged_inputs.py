"""Channel-poor maps the NPU reads from DRAM, copied first in full bursts (priced; Dedicated_Sram only).

Where feature maps live off fast storage, a map [1, H, W, C] (C not a multiple of 16) that comes from outside the
NPU's work is in DRAM, which a convolution reads in bursts of its block's depth, not the map's, once per OFM block
column (mobilenet_v2 on the U65: a 3-channel 128 x 128 input costs its first convolution 270,000 cycles of DRAM
access). One NPU pass over a 16-deep view copies it in full bursts once (RESHAPE -> 1x1 MAX_POOL -> RESHAPE), and
the scheduler may place the copy in fast storage. The copy writes the whole map again, though: on a large input
whose first convolution reads it only once (a 320 x 320 detector) it costs more than it saves, which is why it
is priced (``npusched.app.graph_choice``).
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
    constant,
    deep_copy,
    ints,
    name,
    opcode,
    parsed_subgraph,
    readers,
    static_shape,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.frontend.supported import npu_support

# Maps smaller than this are not staged: on the corpus, 3 KiB inputs (32 x 32 x 3) staged gained 4-16% on u65-512
# but lost 0.15-0.3% on u65-256, where the copy's own pass costs about what it saves.
STAGE_MIN_BYTES = 4096
# Operators that may read a staged map, as their first input.
_STAGED_READERS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D", "PAD"})


@dataclass(frozen=True)
class StagePlan:
    site: Site
    index: int
    shape: tuple[int, ...]
    readers: tuple[int, ...]
    operators: int = 1

    @property
    def position(self) -> int:
        return min(self.readers)


def find_staged_inputs(model: ModelT, subgraph: SubGraphT) -> list[StagePlan]:
    """Maps read only by convolutions, pools or a PAD (as their first input) that are a network input or the
    CPU's re-layout of one (a PyTorch export's NCHW -> NHWC TRANSPOSE). A CPU operator's output deeper in the
    network is left: on a Keras-style `mixed` network on u65-256 staging two of them cost 1.7% more."""
    tensors = subgraph.tensors
    operators = list(subgraph.operators or [])
    read = readers(operators)
    produced = {index: position for position, op in enumerate(operators) for index in ints(op.outputs)}
    inputs = set(ints(subgraph.inputs))
    parsed = None
    plans = []
    for index in sorted(read):
        if index >= len(tensors):
            continue
        shape = static_shape(tensors[index])
        following = read[index]
        size = int(np.prod(shape)) if shape is not None else 0
        if shape is None or len(shape) != 4 or shape[0] != 1 or not shape[3] % DEEP_CHANNELS \
                or size % DEEP_CHANNELS or size < STAGE_MIN_BYTES or constant(model, tensors[index]) is not None \
                or not all(_reads_first(model, subgraph, operators[p], index) for p in following):
            continue
        if index in produced:  # only the CPU's re-layout of a network input
            producer = operators[produced[index]]
            if not well_formed(subgraph, producer) or not all(
                    i in inputs or constant(model, tensors[i]) is not None for i in ints(producer.inputs) if i >= 0):
                continue
            if parsed is None:
                parsed = parsed_subgraph(model, subgraph)
            if npu_support(parsed.operators[produced[index]], parsed) is None:
                continue
        plans.append(StagePlan(Site("staged_input", name(tensors[index])), index, shape, tuple(following)))
    return plans


def _reads_first(model: ModelT, subgraph: SubGraphT, op: OperatorT, index: int) -> bool:
    inputs = ints(op.inputs)
    return opcode(model, op) in _STAGED_READERS and well_formed(subgraph, op) and bool(inputs) \
        and inputs[0] == index


def stage_inputs(model: ModelT, subgraph: SubGraphT, plans: Sequence[StagePlan]) -> None:
    """The copy goes just before the first reader, and every reader reads the copy."""
    operators = list(subgraph.operators or [])
    first_reader: dict[int, list[OperatorT]] = {}
    for plan in plans:
        first_reader[min(plan.readers)], staged_map = deep_copy(model, subgraph, plan.index, None, plan.shape,
                                                                subgraph.tensors[plan.index])
        for position in plan.readers:
            op = operators[position]
            op.inputs = np.asarray([staged_map if i == plan.index else i for i in ints(op.inputs)], dtype=np.int32)
    subgraph.operators = [new for position, op in enumerate(operators)
                          for new in [*first_reader.get(position, []), op]]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'input')} copied in full bursts before the NPU reads it"


STAGED_INPUTS = Rewrite("staged_input", priced=True, find=find_staged_inputs, apply=stage_inputs,
                        describe=_describe,
                        for_recipe=lambda rewrite, recipe: rewrite if recipe.stage_maps else None)
