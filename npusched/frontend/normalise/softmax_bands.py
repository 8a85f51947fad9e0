"""A SOFTMAX on a large map computed in row bands: SPLIT_V -> one SOFTMAX per band -> CONCATENATION (priced).

The NPU has no exp or divide, so Vela's legacy core lowers an 8-bit SOFTMAX into 31 passes whose temporaries are
int32 maps of the whole input (lowering/softmax.py), five of them live at once and each stored 16 deep: a 128 x
128 x 4 segmentation head needs 5 MiB of fast storage at one step, five times its U-Net body's peak. Softmax is
over the last axis only, so each row is computed alone: a band's SOFTMAX gives exactly the rows the whole one
gives. Vela's graph optimiser makes the split a read at an offset and the concatenation a write at one (each a
cheap int8 copy per band), and orders the passes band by band, so each band's temporaries die before the next
band's are made. Each band adds two copies, though, which is why it is priced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    concatenation_op,
    const_int32,
    constant,
    ints,
    name,
    new_operator,
    opcode,
    parsed_subgraph,
    replace_operators,
    static_shape,
    tensor_at,
    well_formed,
)
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.frontend.recipe import SOFTMAX_SPLIT_BYTES, GraphRecipe
from npusched.frontend.supported import npu_support

# Each band's int32 map is at most this. At 32 KiB a 128 x 128 x 4 segmentation head becomes 8 bands and its peak
# falls from 5 MiB to below its U-Net body's (docs/results/exporters.md), for 33 passes a band (the decomposition's
# 31, a slice copy, a concatenation copy); 16 KiB doubles the passes and lowers no peak there.
SOFTMAX_BAND_BYTES = 32 * 1024
_SOFTMAX_TYPES = frozenset({schema.TensorType.INT8, schema.TensorType.UINT8, schema.TensorType.INT16})


def split_bytes_for(fast_storage_limit_bytes: int, least_memory: bool) -> int:
    """The int32 map over which a SOFTMAX may be split (the site is priced either way): every one larger than a band
    under `--optimise Size`; else those whose decomposition would not fit the fast storage (at its peak about four
    of its int32 maps are live). npusched's own lowering keeps those maps linear, 4 bytes an element
    (``lowering.softmax.deep_view``), where Vela legacy stores them 16 deep; in a larger arena the bands' copies
    cost more than the memory they save. An attention layer's softmax, a band of heads each, takes a
    transformer's peak below both cores' (docs/results/size.md)."""
    if least_memory:
        return SOFTMAX_BAND_BYTES
    return max(SOFTMAX_BAND_BYTES, fast_storage_limit_bytes // 4)


@dataclass(frozen=True)
class BandPlan:
    """One SOFTMAX to split: its position, its input's shape and the rows of each band."""

    site: Site
    position: int
    shape: tuple[int, ...]
    rows: tuple[int, ...]

    @property
    def operators(self) -> int:
        return len(self.rows)


def softmax_bands(height: int, row_bytes: int, band_bytes: int = SOFTMAX_BAND_BYTES) -> tuple[int, ...]:
    """The rows of each band of a softmax over ``height`` rows whose int32 map holds ``row_bytes`` per row: the
    fewest bands each within ``band_bytes``, as equal as the rows allow (larger ones first); one band (no split)
    when the whole map fits."""
    per_band = max(1, band_bytes // max(1, row_bytes))
    count = min(height, -(-height // per_band))
    return tuple(height // count + (k < height % count) for k in range(count))


def find_large_softmaxes(model: ModelT, subgraph: SubGraphT, split_bytes: int = SOFTMAX_SPLIT_BYTES
                         ) -> list[BandPlan]:
    """8- and 16-bit SOFTMAXes over [1, H, W, C] or [1, N, C] of one batch whose int32 map exceeds
    ``split_bytes``, split along H (or N: an attention layer's heads), and only those Vela runs on the NPU (one left
    to the CPU gains nothing, and NPU copies around it would split the NPU work)."""
    plans: list[BandPlan] = []
    for position, op in enumerate(subgraph.operators or []):
        inputs, outputs = ints(op.inputs), ints(op.outputs)
        if opcode(model, op) != "SOFTMAX" or len(inputs) != 1 or len(outputs) != 1 or inputs[0] < 0 \
                or not well_formed(subgraph, op):
            continue
        source, target = tensor_at(subgraph, inputs[0]), tensor_at(subgraph, outputs[0])
        shape = static_shape(source)
        if source is None or shape is None or len(shape) not in (3, 4) or shape[0] != 1 or shape[1] < 2 \
                or static_shape(target) != shape or source.type not in _SOFTMAX_TYPES \
                or constant(model, source) is not None:
            continue
        row_bytes = int(np.prod(shape[2:], dtype=np.int64)) * 4
        rows = softmax_bands(shape[1], row_bytes)
        if shape[1] * row_bytes > split_bytes and len(rows) > 1:
            plans.append(BandPlan(Site("softmax_bands", name(subgraph.tensors[outputs[0]])), position, shape, rows))
    if plans:
        # Vela's placement, judged on the model as it is now (folded).
        parsed = parsed_subgraph(model, subgraph)
        plans = [p for p in plans if npu_support(parsed.operators[p.position], parsed) is None]
    return plans


def band_softmaxes(model: ModelT, subgraph: SubGraphT, plans: Sequence[BandPlan]) -> None:
    replaced = {plan.position: _bands(model, subgraph, subgraph.operators[plan.position], plan) for plan in plans}
    replace_operators(subgraph, replaced)


def _bands(model: ModelT, subgraph: SubGraphT, op: OperatorT, plan: BandPlan) -> list[OperatorT]:
    tensors = subgraph.tensors
    source_index, target_index = ints(op.inputs)[0], ints(op.outputs)[0]
    stem = name(tensors[source_index])
    sizes = const_int32(model, subgraph, f"{stem}/band_rows", list(plan.rows), (len(plan.rows),))
    axis = const_int32(model, subgraph, f"{stem}/band_axis", [1], ())
    band_ops, band_outputs, band_inputs = [], [], []
    for band, rows in enumerate(plan.rows):
        band_shape = (1, rows, *plan.shape[2:])
        band_inputs.append(add_tensor(subgraph, tensors[source_index], f"/band{band}", band_shape))
        band_outputs.append(add_tensor(subgraph, tensors[target_index], f"/band{band}", band_shape))
        softmax = schema.OperatorT()
        softmax.opcodeIndex, softmax.builtinOptionsType = op.opcodeIndex, op.builtinOptionsType
        softmax.builtinOptions = op.builtinOptions
        softmax.inputs = np.asarray(band_inputs[-1:], dtype=np.int32)
        softmax.outputs = np.asarray(band_outputs[-1:], dtype=np.int32)
        band_ops.append(softmax)
    split_options = schema.SplitVOptionsT()
    split_options.numSplits = len(plan.rows)
    split = new_operator(model, schema.BuiltinOperator.SPLIT_V, [source_index, sizes, axis], band_inputs,
                         schema.BuiltinOptions.SplitVOptions, split_options)
    return [split, *band_ops, concatenation_op(model, band_outputs, target_index, 1)]


def _describe(sites: int, operators: int) -> str:
    return f"{sites} SOFTMAX split into {counted(operators, 'row band')}"


def _splitting(rewrite: Rewrite, recipe: GraphRecipe) -> Rewrite:
    """``rewrite`` splitting the softmaxes whose int32 map is over the recipe's ``softmax_split_bytes`` (the same
    sites, by name)."""
    if recipe.softmax_split_bytes == SOFTMAX_SPLIT_BYTES:
        return rewrite
    return replace(rewrite, find=partial(find_large_softmaxes, split_bytes=recipe.softmax_split_bytes),
                   for_recipe=None)


SOFTMAX_BANDS = Rewrite("softmax_bands", priced=True, find=find_large_softmaxes, apply=band_softmaxes,
                        describe=_describe, for_recipe=_splitting)
