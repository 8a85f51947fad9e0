"""A causal convolution dilated by more than 2 along a sequence computed undilated on a [T / d, d] view (priced).

The NPU dilates a kernel by 1 or 2; Vela legacy runs a larger dilation d by spreading the kernel with zero taps
(d / 2 - 1 between real ones: a TCN's 2-tap kernel dilated 32 becomes 17 taps, 15 of them zeros), so the pass makes
d / 2 times the multiply-accumulates it needs. Vela's default core decomposes such a convolution instead. The same
outputs without zero taps: a sequence of T steps viewed as T / d rows of d steps (the same bytes), step t at row
t // d, column t % d, puts the steps a dilation apart one row apart; the k taps become a (k x 1) kernel over rows,
undilated, and the causal padding (k - 1) x d steps before the sequence becomes k - 1 rows above it, which Vela
folds into the convolution's hardware padding. RESHAPE -> PAD (rows) -> CONV_2D or DEPTHWISE_CONV_2D (k x 1,
VALID) -> RESHAPE: every output sums the same products as before. Priced (``npusched.app.graph_choice``): the
views may keep the maps around the convolution in the linear layout, which can cost more than the zero taps save.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ai_edge_litert import schema_py_generated as schema

from npusched.frontend.normalise.flatbuffer import (
    ModelT,
    OperatorT,
    SubGraphT,
    add_tensor,
    const_int32,
    constant,
    copied_operator,
    derived_constant,
    ints,
    name,
    new_operator,
    replace_chains,
    reshape_op,
    static_shape,
)
from npusched.frontend.normalise.padded_convolutions import PaddedPlan, pads_vela_copies
from npusched.frontend.normalise.rewrite import Rewrite, Site, counted
from npusched.ir import NPU_MAX_DILATION


def find_dilated_sequences(model: ModelT, subgraph: SubGraphT) -> list[PaddedPlan]:
    """Causal convolutions along a sequence ([1, 1, T, C], width T) dilated by d > 2 where d divides T."""
    plans = []
    for plan in pads_vela_copies(model, subgraph):
        _, rows, steps, _ = plan.view
        dilation = plan.dilation[1]
        if plan.causal_axis == 2 and rows == 1 and dilation > NPU_MAX_DILATION and steps % dilation == 0:
            plans.append(replace(plan, site=Site("dilated_sequence", plan.site.tensor)))
    return plans


def rewrite_dilated_sequences(model: ModelT, subgraph: SubGraphT, plans: Sequence[PaddedPlan]) -> None:
    replace_chains(subgraph, plans, lambda plan: _rows(model, subgraph, plan))


def _rows(model: ModelT, subgraph: SubGraphT, plan: PaddedPlan) -> list[OperatorT]:
    """RESHAPE to [1, T / d, d, C] -> PAD k - 1 rows before -> the convolution (k x 1, undilated) -> RESHAPE."""
    tensors = subgraph.tensors
    conv = subgraph.operators[plan.positions[-1]]
    conv_inputs, output = ints(conv.inputs), ints(conv.outputs)[0]
    _, _, steps, depth = plan.view
    d, taps = plan.dilation[1], plan.taps[1]
    rows = steps // d
    out_depth = (static_shape(tensors[output]) or (0,))[-1]
    grid = add_tensor(subgraph, tensors[plan.source], "/rows", (1, rows, d, depth))
    padded = add_tensor(subgraph, tensors[plan.source], "/rows_padded", (1, rows + taps - 1, d, depth))
    made = add_tensor(subgraph, tensors[output], "/rows", (1, rows, d, out_depth))
    weights = constant(model, tensors[conv_inputs[1]])
    assert weights is not None  # checked when found
    # [O, 1, k, I] (or depthwise [1, 1, k, C]) as [O, k, 1, I]: the same bytes, the taps now along the rows.
    kernel = derived_constant(model, subgraph, conv_inputs[1],
                              weights.reshape(weights.shape[0], taps, 1, weights.shape[3]), "/rows")
    paddings = const_int32(model, subgraph, f"{name(tensors[grid])}/paddings", [0, 0, taps - 1, 0, 0, 0, 0, 0],
                           (4, 2))
    pad = new_operator(model, schema.BuiltinOperator.PAD, [grid, paddings], [padded],
                       schema.BuiltinOptions.PadOptions, schema.PadOptionsT())
    undilated = copied_operator(conv, [padded, kernel, *conv_inputs[2:]], [made], dilationWFactor=1,
                                dilationHFactor=1)
    return [reshape_op(model, subgraph, plan.source, grid, (1, rows, d, depth)), pad, undilated,
            reshape_op(model, subgraph, made, output, static_shape(tensors[output]) or (1, 1, steps, out_depth))]


def _describe(sites: int, operators: int) -> str:
    return f"{counted(sites, 'dilated convolution')} computed undilated on a view of the sequence"


DILATED_SEQUENCES = Rewrite("dilated_sequence", priced=True, find=find_dilated_sequences,
                            apply=rewrite_dilated_sequences, describe=_describe)
