"""A softmax's per-element passes on deeper views of its maps (``lowering.softmax.deep_view``): npusched's own
graph (the priced pseudo-site ``softmax_deep_views``) against Vela legacy's decomposition at depth 1, and Vela's
backend compiling the same views."""

from __future__ import annotations

from pathlib import Path

import pytest

from npusched.app.graph_choice import SOFTMAX_DEEP_VIEWS
from npusched.app.pipeline import architecture, run
from npusched.frontend.normalise import GraphRecipe, normalise
from npusched.frontend.tflite_reader import parse_tflite
from npusched.ir import Shape4D, TensorFormat
from npusched.lowering.graph import Network, lower_model
from npusched.lowering.softmax import DEEP_VIEW, deep_view
from npusched.netgen import generate
from npusched.run import RunOptions
from npusched.schedule.evaluator import evaluate
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.max_schedule import vela_tensor_placements
from npusched.target.estimators import Estimator, with_estimator
from npusched.vela.backend import compile_schedule

HARDWARE = {"accelerator_config": "ethos-u55-128", "config_files": ("Arm/vela.ini",),
            "system_config": "Ethos_U55_High_End_Embedded", "memory_mode": "Shared_Sram"}


def _segmentation_unet(tmp_path: Path, int16: bool = False) -> Path:
    """A U-Net ending in a per-pixel SOFTMAX over 4 classes on a 128 x 128 map (netgen --segmentation)."""
    path = tmp_path / "unet_seg.tflite"
    path.write_bytes(generate("unet", 40, 0, segmentation=True, int16=int16))
    return path


def test_a_deep_view_holds_the_same_elements_up_to_16_deep() -> None:
    assert deep_view(Shape4D(1, 128, 128, 1)) == Shape4D(1, 32, 32, 16)
    view = deep_view(Shape4D(1, 16, 128, 4))
    assert view is not None and view.depth == 16 and view.elements() == 16 * 128 * 4
    assert deep_view(Shape4D(1, 4, 49, 1)) == Shape4D(1, 7, 7, 4)  # an attention layer's rows: 196, 4 deep
    assert deep_view(Shape4D(1, 4, 49, 49)) is None  # its map fills 49 of 64 lanes; 4 deep would fill fewer
    assert deep_view(Shape4D(1, 8, 8, 32)) is None  # already whole bricks
    assert deep_view(Shape4D(1, 1, 1, 10)) is None  # a classifier's softmax


def _softmax_cycles(network: Network, arch, estimator: Estimator) -> float:
    arch = with_estimator(arch, estimator)
    evaluation = evaluate(network, arch, heuristic_schedule(network, arch))
    return sum(evaluation.op(op.index).total_cycles for op in network.npu_ops if op.tflite_op == "SOFTMAX")


@pytest.mark.parametrize("int16, viewed_passes, fraction", [
    (False, 26, 0.2),  # the 8-bit decomposition's 25 per-row passes and the shift of its exp map
    (True, 9, 0.4),  # the 16-bit one's 7 per-row passes and the scaling and exp table of its map
])
def test_deep_views_price_the_segmentation_head_a_fraction_of_vela_legacys(tmp_path: Path, int16: bool,
                                                                            viewed_passes: int,
                                                                            fraction: float) -> None:
    """The same passes, some seeing their maps at a view of the same bytes; the per-row passes at depth 1 and the
    whole map at depth 4 fill a sixteenth and a quarter of the NPU's blocks, so under both cores' models the
    viewed head costs a fraction. Every map a pass sees at another shape than its own is linear (NHWC), which is
    what makes every view read the same bytes."""
    path = _segmentation_unet(tmp_path, int16)
    arch = architecture(RunOptions(model_path=path, **HARDWARE))
    whole, _ = normalise(path.read_bytes(), GraphRecipe(softmax_split_bytes=1 << 40), str(path))  # one, no bands
    model = parse_tflite(whole, str(path))
    vela_graph, own = lower_model(model, arch), lower_model(model, arch, GraphRecipe(softmax_deep_views=True))
    assert [op.name for op in own.npu_ops] == [op.name for op in vela_graph.npu_ops]
    viewed = [op for op in own.npu_ops if op.attr(DEEP_VIEW)]
    assert len(viewed) == viewed_passes and not any(op.attr(DEEP_VIEW) for op in vela_graph.npu_ops)
    assert all(op.ofm.shape.depth == 16 for op in viewed)
    for estimator in (Estimator.VELA_LEGACY, Estimator.VELA_DEFAULT):
        assert _softmax_cycles(own, arch, estimator) < fraction * _softmax_cycles(vela_graph, arch, estimator)
    formats = dict(vela_tensor_placements(own, arch))
    for op in own.npu_ops:
        for operand in (op.ifm, op.ifm2, op.ofm):
            if operand is not None and not operand.tensor.is_const and operand.shape != operand.tensor.shape:
                assert formats[operand.tensor].format == TensorFormat.NHWC, (op.name, operand.tensor.name)


@pytest.mark.slow
@pytest.mark.parametrize("int16", [False, True])
def test_a_segmentation_unet_on_deep_views_is_faster_than_both_cores_and_compiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, int16: bool) -> None:
    """CP-SAT's answer on npusched's graph (the softmax on deep views) is faster than both Vela cores' own
    schedules, each priced by its own model; Vela's backend, given the same views, compiles it with its estimate
    equal to npusched's, and in its command stream every pass that reads or writes a map seen at two shapes
    addresses the map's bytes in one linear order: NHWC, dense strides for the pass's view, one base address."""
    from ethosu.vela import high_level_command_to_npu_op as to_npu_op
    from ethosu.vela.high_level_command_stream import NpuStripe

    path = _segmentation_unet(tmp_path, int16)
    result = run(RunOptions(model_path=path, **HARDWARE, solver="cpsat", time_limit_seconds=30.0, workers=1,
                            deterministic=True))
    assert any(d.site == SOFTMAX_DEEP_VIEWS and d.applied for d in result.sites)
    floors = {floor.core: floor.total_cycles for floor in result.floors}
    assert set(floors) == {"vela-legacy", "vela-default"}
    for core, own in floors.items():
        assert result.cycles_by_estimator[core] < own, core

    stripes: list = []
    convert = to_npu_op.convert_command_to_npu_op

    def recording(cmd, arch):
        npu_op = convert(cmd, arch)
        if isinstance(cmd, NpuStripe):
            stripes.append((cmd, npu_op))
        return npu_op

    monkeypatch.setattr(to_npu_op, "convert_command_to_npu_op", recording)
    compiled = compile_schedule(result, tmp_path / "out")
    assert compiled.agreed, compiled.warnings()
    viewed = {operand.tensor.name for op in result.network.npu_ops if op.attr(DEEP_VIEW)
              for operand in (op.ifm, op.ifm2, op.ofm) if operand is not None and not operand.tensor.is_const}
    seen: dict[str, list[tuple]] = {}
    for cmd, npu_op in stripes:
        ps = cmd.ps
        for fm, tensor, box, view in ((npu_op.ifm, cmd.ifm_tensor, cmd.ifm_box, ps.ifm_shapes[0]),
                                      (npu_op.ifm2, cmd.ifm2_tensor, cmd.ifm2_box,
                                       ps.ifm_shapes[1] if len(ps.ifm_shapes) > 1 else None),
                                      (npu_op.ofm, cmd.ofm_tensor, cmd.ofm_box, ps.ofm_shapes[0])):
            if tensor is None or tensor.name not in viewed:
                continue
            element = tensor.element_size()
            n, y, x, c = box.start_coord
            first = ((n * view.height + y) * view.width + x) * view.depth + c  # the stripe's first element
            seen.setdefault(tensor.name, []).append(
                (ps.name, view, fm.layout.name, fm.strides, fm.region, fm.tiles.addresses[0] - first * element,
                 (view.width * view.depth * element, view.depth * element, element)))
    assert len(seen) == len(viewed)
    # 8 bits: the exp map, its shifted copy, the exp sum, the right shift and the scale factor are seen at two
    # shapes; 16 bits: the map less its maximum, the exp map, the exp sum, the right shift and the reciprocal
    twice_seen = {name: uses for name, uses in seen.items() if len({use[1] for use in uses}) > 1}
    assert len(twice_seen) == 5, sorted(twice_seen)
    for name, uses in twice_seen.items():
        for ps_name, _, layout, strides, _, _, dense in uses:
            assert layout == "NHWC" and (strides.height, strides.width, strides.depth) == dense, (name, ps_name)
        assert len({(region, base) for _, _, _, _, region, base, _ in uses}) == 1, (name, uses)
