"""Priced options against Vela 5.2.0 (legacy core) golden output and the block-config search.

* On u55-128_hee_shared Vela ships its max schedule, so for every op the full-height option marked as Vela's
  choice must carry the golden block config, and its prices must be the golden per-layer access cycles and the
  evaluator's compute cycles for that schedule.
* The Size-optimised golden runs stripe ops in cascades: the option at each golden stripe height must pick the
  golden block config and read the golden IFM stripe.
* Every option's block config must be one the block search enumerates for its stripe, and the stripes must
  follow from the kernel geometry.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import golden_path, model_path

from npusched.frontend.tflite_reader import read_tflite
from npusched.ir import MemArea, NpuBlockType, ResamplingMode, ceil_div
from npusched.lowering.graph import lower_model
from npusched.schedule.evaluator import evaluate
from npusched.schedule.options import (
    ACCESS_AREAS,
    dominated,
    drop_dominated,
    price_options,
    striped_op_cycles,
    vela_choice,
)
from npusched.solvers.max_schedule import max_schedule
from npusched.target.block_config import enumerate_block_configs, find_block_config, op_block_inputs
from npusched.target.estimators import load_architecture
from npusched.vela.report import read_per_layer, read_verbose_schedule

CONFIGS = {
    "u55-128_hee_shared": ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", "Performance"),
    "u55-128_hee_shared_size": ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", "Size"),
    "u55-256_hee_shared": ("ethos-u55-256", "Ethos_U55_High_End_Embedded", "Shared_Sram", "Performance"),
}
AC_COLUMNS = {MemArea.Sram: "SRAM AC", MemArea.Dram: "DRAM AC", MemArea.OnChipFlash: "OnFlash AC",
              MemArea.OffChipFlash: "OffFlash AC"}


@functools.cache
def _arch(config: str):
    accel, system, mode, optimise = CONFIGS[config]
    return load_architecture(accel, ["Arm/vela.ini"], system, mode, optimise=optimise)


@functools.cache
def _network(config: str, model: str):
    return lower_model(read_tflite(model_path(model)), _arch(config))


def _npu_ops(config: str, model: str):
    return [op for sg in _network(config, model).subgraphs for op in sg.ops]


# --------------------------------------------------------------------------------------------------------------
# Vela's choice at full height = the golden max schedule


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mobilenet_v2_224_int8", "person_detect", "kws_dscnn_int8", "dtln"])
def test_vela_choice_is_golden_max_schedule(model: str) -> None:
    config = "u55-128_hee_shared"
    golden = golden_path(config, model)
    schedules = read_verbose_schedule(golden / "vela_stdout.txt")
    assert all(s.label.endswith("_MAX_BUFFERED") for s in schedules)
    vela_ops = [op for s in schedules for op in s.ops]
    rows = [row for group in read_per_layer(golden / "per_layer.csv") for row in group]
    arch = _arch(config)
    network = _network(config, model)
    ops = _npu_ops(config, model)
    assert len(ops) == len(vela_ops) == len(rows)
    schedule = max_schedule(network, arch)
    evaluation = evaluate(network, arch, schedule)
    placements = dict(schedule.tensors)

    for op, ref, row in zip(ops, vela_ops, rows, strict=True):
        label = f"{model} op {op.index} {op.name}"
        assert op.name == ref.name, label
        buffered = schedule.op(op.index).weight_buffering.is_buffered
        options = price_options(arch, op, stripe_heights=[op.ofm.shape.height], placements=placements,
                                weights_buffered=buffered)
        assert options, label
        assert sum(o.is_vela_choice for o in options) == 1, label
        chosen = vela_choice(options)
        assert chosen is not None, label
        assert chosen.block_config.old_style() == ref.block_config, label
        assert list(chosen.block_config.ofm_block.as_list()) == ref.ofm_block, label
        assert chosen.ofm_stripe.as_list() == ref.ofm_stripe and chosen.ifm_stripe.as_list() == ref.ifm_stripe
        assert chosen.num_stripes == 1
        # compute cycles: what the evaluator prices for Vela's schedule
        assert chosen.op_cycles == evaluation.op(op.index).op_cycles, label
        # memory access cycles: Vela's own per-layer figures
        for mem in ACCESS_AREAS:
            assert chosen.access_cycles[mem] == pytest.approx(float(row[AC_COLUMNS[mem]]), rel=1e-9, abs=1e-9), (
                label, mem)
        if ref.depth_slices == [0, op.ofm.shape.depth] and ref.encoded_weights_bytes is not None:
            assert chosen.encoded_weight_bytes == ref.encoded_weights_bytes, label
        if op.weights is None and op.activation_lut is None:
            # nothing to fetch first: the NPU time is the golden one
            assert chosen.npu_cycles == pytest.approx(float(row["NPU"]), abs=1e-9), label
        assert chosen.npu_cycles >= chosen.op_cycles
        assert chosen.total_cycles == max(chosen.npu_cycles, *chosen.access_cycles.values())


# --------------------------------------------------------------------------------------------------------------
# Striped ops: Vela's choice per stripe height


@pytest.mark.parametrize("model", ["mobilenet_v2_224_int8", "person_detect", "str_ww_int8"])
def test_vela_choice_per_stripe_is_golden(model: str) -> None:
    config = "u55-128_hee_shared_size"
    golden = golden_path(config, model)
    vela_ops = [op for s in read_verbose_schedule(golden / "vela_stdout.txt") for op in s.ops]
    arch = _arch(config)
    ops = _npu_ops(config, model)
    assert [op.name for op in ops] == [ref.name for ref in vela_ops]
    striped = 0
    for op, ref in zip(ops, vela_ops, strict=True):
        if ref.ofm_stripe == op.ofm.shape.as_list():
            continue
        striped += 1
        height = ref.ofm_stripe[1]
        options = price_options(arch, op, stripe_heights=[height])
        chosen = vela_choice(options, height)
        label = f"{model} op {op.index} {op.name} stripe {height}"
        assert chosen is not None, label
        assert chosen.block_config.old_style() == ref.block_config, label
        assert chosen.ofm_stripe.as_list() == ref.ofm_stripe, label
        assert chosen.ifm_stripe.as_list() == ref.ifm_stripe, label
        assert (chosen.ifm2_stripe.as_list() if chosen.ifm2_stripe else None) == ref.ifm2_stripe, label
        assert chosen.num_stripes == ceil_div(op.ofm.shape.height, height)
        assert vela_choice(options) is None  # only that height was asked for
    assert striped > 0


# --------------------------------------------------------------------------------------------------------------
# Every option, every stripe height


def _rows_needed(op, height: int) -> tuple[int, int]:
    """IFM (rows, columns) an OFM stripe reads, from the kernel geometry (no resampling)."""
    kernel = op.kernel
    rows = (height - 1) * kernel.stride_y + (kernel.height - 1) * kernel.dilation_y + 1
    cols = (op.ofm.shape.width - 1) * kernel.stride_x + (kernel.width - 1) * kernel.dilation_x + 1
    return min(rows, op.ifm.shape.height), min(cols, op.ifm.shape.width)


@pytest.mark.parametrize(("config", "model"), [("u55-256_hee_shared", "person_detect"),
                                               ("u55-128_hee_shared", "kws_dscnn_int8")])
def test_every_option_is_valid(config: str, model: str) -> None:
    arch = _arch(config)
    for op in _npu_ops(config, model):
        options = price_options(arch, op)
        full = op.ofm.shape
        groups: dict[int, list] = {}
        for option in options:
            groups.setdefault(option.stripe_height, []).append(option)
        assert sorted(groups) == list(range(1, full.height + 1)), op.name
        prices = {}
        prev_ifm_rows = 0
        for height, group in sorted(groups.items()):
            label = f"{model} op {op.index} {op.name} stripe {height}"
            stripe = group[0].stripe
            assert all(o.stripe is stripe for o in group)
            # every block config is one the search offers for this stripe, and all of them are offered
            offered = enumerate_block_configs(arch, ofm_shape=stripe.ofm, ifm_shape=stripe.ifm,
                                              ifm2_shape=stripe.ifm2, **op_block_inputs(op))
            assert [o.block_config for o in group] == [c.config for c in offered], label
            vela = find_block_config(arch, ofm_shape=stripe.ofm, ifm_shape=stripe.ifm, ifm2_shape=stripe.ifm2,
                                     **op_block_inputs(op))
            assert [o.block_config for o in group if o.is_vela_choice] == [vela], label
            # stripes follow from the kernel
            assert stripe.ofm == full.with_height(height)
            assert stripe.count == ceil_div(full.height, height)
            if height == full.height:
                assert stripe.ifm == op.ifm.shape
            elif op.resampling_mode is ResamplingMode.NONE:
                assert (stripe.ifm.height, stripe.ifm.width) == _rows_needed(op, height), label
            assert stripe.ifm.depth == op.ifm.shape.depth
            assert stripe.ifm.height >= prev_ifm_rows, label  # a smaller stripe never needs more IFM
            prev_ifm_rows = stripe.ifm.height
            for option in group:
                if op.npu_block_type is NpuBlockType.Dma:
                    assert option.op_cycles == 0
                else:
                    assert option.op_cycles > 0 and option.total_cycles > 0, label
                assert option.npu_cycles >= option.op_cycles
                assert all(v >= 0 for v in option.access_cycles.values())
                assert (option.encoded_weight_bytes > 0) == (op.weights is not None)
                # Vela prices the whole op whatever the stripe: one price per block config
                key = tuple(option.block_config.ofm_block.as_list())
                assert prices.setdefault(key, option.price) == option.price, label


def test_stripe_heights_are_clamped_and_unique() -> None:
    config = "u55-128_hee_shared"
    arch = _arch(config)
    op = _npu_ops(config, "kws_dscnn_int8")[0]
    full = op.ofm.shape.height
    options = price_options(arch, op, stripe_heights=[0, 2, 2, full + 5])
    assert sorted({o.stripe_height for o in options}) == [1, 2, full]
    assert price_options(arch, op, stripe_heights=[2, 0, full + 5]) is options  # memoised on the heights


# --------------------------------------------------------------------------------------------------------------
# Dominance filter


def _costs(option) -> np.ndarray:
    price, stripe = option.price, option.stripe
    return np.array([price.total_cycles, price.npu_cycles, price.op_cycles, *price.access_cycles,
                     price.encoded_weight_bytes, price.weight_buffer_bytes, stripe.ifm_bytes, stripe.ifm2_bytes,
                     stripe.ofm_bytes], dtype=float)


def test_drop_dominated_keeps_the_pareto_front_and_vela() -> None:
    config = "u55-128_hee_shared"
    arch = _arch(config)
    ops = _npu_ops(config, "mobilenet_v2_224_int8")
    for op in (ops[0], ops[1], ops[3]):  # a 3x3 conv, a depthwise conv and a 1x1 conv at 112x112
        options = price_options(arch, op, stripe_heights=[1, 8, op.ofm.shape.height])
        full = vela_choice(options)
        assert striped_op_cycles(arch, op, full) == full.op_cycles  # one stripe: Vela's price
        kept = drop_dominated(options)
        dropped = dominated(options)
        assert len(kept) + len(dropped) == len(options)
        assert 0 < len(kept) < len(options)
        assert all(o in kept for o in options if o.is_vela_choice)
        for height in {o.stripe_height for o in options}:
            front = [o for o in kept if o.stripe_height == height]
            table = np.array([_costs(o) for o in front])
            for i, option in enumerate(front):
                others = np.delete(table, i, axis=0)
                strictly = np.all(others <= table[i], axis=1) & np.any(others < table[i], axis=1)
                assert option.is_vela_choice or not strictly.any(), option
            for option in (o for o in dropped if o.stripe_height == height):
                assert np.any(np.all(table <= _costs(option), axis=1)), option
        # one figure, all heights together: only the fastest option (first of equals) and Vela's choices stay
        fastest = drop_dominated(options, costs=lambda o: (o.total_cycles,), group=None)
        best = min(o.total_cycles for o in options)
        assert [o for o in fastest if not o.is_vela_choice] in (
            [], [next(o for o in options if o.total_cycles == best)])
        assert any(o.total_cycles == best for o in fastest)


def _selected(options, count: int):
    """What a candidate space takes of ``price_options``' answer (``cheapest_options``' contract): the ``count``
    fastest full-height options drop_dominated keeps, with Vela's; per stripe height the fastest (Vela's on ties,
    else the first in search order). Options as (block, stripe height, price)."""
    def key(o):
        return (o.block_config, o.stripe.height, o.price)

    full = [o for o in options if o.stripe.is_full]
    ranked = sorted(drop_dominated(full), key=lambda o: (o.total_cycles, not o.is_vela_choice))
    chosen = {key(o) for o in ranked[:count] + [o for o in full if o.is_vela_choice]}
    fastest = {}
    for o in options:
        rank = (o.total_cycles, not o.is_vela_choice)
        if o.stripe.height not in fastest or rank < fastest[o.stripe.height][0]:
            fastest[o.stripe.height] = (rank, key(o))
    return chosen, {height: k for height, (_, k) in fastest.items()}


@pytest.mark.parametrize(("config", "model"), [("u55-128_hee_shared", "mobilenet_v2_224_int8"),
                                                ("u65-256_mid_dedicated256k", "dtln"),
                                                ("u55-256_hee_shared_arena128k", "person_detect")])
def test_cheapest_options_select_as_from_every_option(config: str, model: str) -> None:
    """Pricing block configs only while their compute time can still change the selection selects exactly what
    selecting from every option priced does, under each cost model, with weights buffered or not, at the stripe
    heights a cascade gives (ties included: dtln's elementwise passes price every block alike)."""
    from conftest import load_corpus

    from npusched.schedule.options import cheapest_options
    from npusched.schedule.rules import weights_need_dma
    from npusched.solvers.cpsat.candidates import BLOCK_CONFIGS_PER_OP
    from npusched.solvers.cpsat.model import NetworkFacts
    from npusched.target.estimators import Estimator, with_estimator

    base, network = load_corpus(model, config)
    compared = 0
    for estimator in (Estimator.BOTH, Estimator.VELA_DEFAULT, Estimator.VELA_LEGACY):
        arch = with_estimator(base, estimator)
        net = NetworkFacts(network, arch)
        for sgi in range(len(net.subgraphs)):
            facts = net.facts(sgi)
            for pos, op in enumerate(facts.sg.ops):
                for buffered in ((True, False) if weights_need_dma(arch, op) else (False,)):
                    heights = facts.stripe_heights[pos]
                    every = price_options(arch, op, stripe_heights=heights, weights_buffered=buffered)
                    full, fastest = cheapest_options(arch, op, stripe_heights=heights, weights_buffered=buffered,
                                                     count=BLOCK_CONFIGS_PER_OP)
                    # what single_candidates takes of the full-height answer, and the fastest per height
                    chosen, fastest_every = _selected(every, BLOCK_CONFIGS_PER_OP)
                    assert _selected(full, BLOCK_CONFIGS_PER_OP)[0] == chosen
                    assert {h: (o.block_config, h, o.price) for h, o in fastest.items()} == fastest_every
                    compared += 1
    assert compared > 3 * 20
