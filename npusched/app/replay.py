"""A saved schedule run again (``--schedule``), and a schedule moved onto the graph Vela's backend compiles.

``replay`` rebuilds the graph a document's schedule is of from the recipe it stores (``build_graph``), reads the
schedule back (``npusched.io.schedule_document``) and evaluates and verifies it, as a solver's would be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from npusched.app.pipeline import load, normalisation_report, totals_by_estimator
from npusched.errors import ScheduleError
from npusched.io.schedule_document import load_document, read_schedule, site_decisions, stored_recipe
from npusched.ir import NpuOp, Shape4D
from npusched.lowering.graph import Network
from npusched.run import UNLIMITED, RunOptions, RunResult, recipe_for
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.rules import ifm_stripes
from npusched.schedule.schedule import EncodedWeightsRef, OpSchedule, Schedule
from npusched.target.block_config import op_block_inputs, try_block_config
from npusched.target.estimators import Estimator, PricedArchitecture
from npusched.target.weights import encode_op_weights
from npusched.vela.backend import BackendResult


def replay(options: RunOptions, path: Path) -> RunResult:
    """A finished run of the schedule saved at ``path`` instead of a solver's: the model and hardware of
    ``options`` (which must be the document's), the schedule evaluated and verified."""
    document = load_document(path)
    decisions = site_decisions(document)
    options = replace(options, solver=document["solver"])
    loaded = load(options, stored_recipe(document, path))
    recipe = loaded.recipe
    if "recipe" not in document:
        # A first-format document: the solver that made it chose the graph (only CP-SAT's and the DP's write
        # concatenations in place, and CP-SAT's prices the rewrites' sites: those it left out are listed).
        recipe = recipe.without(d.site.key for d in decisions if not d.applied)
    arch = loaded.arch
    ours = {"accelerator_config": arch.accelerator_config, "system_config": arch.system_config,
            "memory_mode": arch.memory_mode, "arena_cache_size": int(arch.arena_cache_size)}
    differing = [f"{key} {document.get(key)} (given: {value})" for key, value in ours.items()
                 if document.get(key) != value]
    if differing:
        raise ScheduleError(f"{path}: the schedule was made for other hardware: {', '.join(differing)}")
    graph = loaded.build(recipe)
    network = graph.network
    schedule = read_schedule(document, network, arch)
    evaluation = evaluate(network, arch, schedule)
    # A reproduction of Vela's legacy schedule may go over the arena as Vela does; the document says so.
    over_limit = document.get("status") == "over_limit"
    problems = verify(network, arch, schedule, evaluation, UNLIMITED if over_limit else None)
    if problems:
        raise ScheduleError(f"{path}: the saved schedule fails verification: {problems[0]}")
    cycles = totals_by_estimator(network, arch, schedule, evaluation)
    return RunResult(options=options, arch=arch, network=network, status=document.get("status", "feasible"),
                     schedule=schedule, evaluation=evaluation,
                     timings_seconds={"read": loaded.read_seconds, **graph.timings_seconds},
                     warnings=tuple(document.get("warnings", ())), cycles_by_estimator=cycles,
                     normalisation=normalisation_report(loaded, graph), model_bytes=graph.model_bytes,
                     sites=decisions, recipe=graph.recipe, rewrites=graph.rewrites)


def carry_schedule(schedule: Schedule, source: Network, target: Network, arch: PricedArchitecture) -> Schedule:
    """``schedule`` of ``source`` moved onto ``target``, another lowering of the same model with the same passes
    (Vela's backend folds a strided convolution into depth where the default core's graph keeps the stride).

    Every choice is kept; a pass whose IFM or weights ``target`` shapes differently gets its IFM stripes, block
    config and weight encoding rebuilt for that shape. A choice that does not fit there is a ``ScheduleError``.
    """
    if [(op.op_type, op.ofm.shape) for op in source.npu_ops] != [(op.op_type, op.ofm.shape) for op in target.npu_ops]:
        raise ScheduleError("the two lowerings of the model have different NPU passes")
    ops: list[OpSchedule] = []
    for before, op in zip(source.npu_ops, target.npu_ops, strict=True):
        choice = replace(schedule.op(before.index), op_index=op.index)
        if before.ifm.shape != op.ifm.shape or _weights_shape(before) != _weights_shape(op):
            choice = _reshaped_choice(op, choice, arch)
        ops.append(choice)
    by_name = {access.tensor.name: access.tensor for op in target.npu_ops
               for access in (op.ifm, op.ifm2, op.ofm) if access is not None}
    tensors = tuple((by_name.get(fm.name, fm), place) for fm, place in schedule.tensors)
    return replace(schedule, ops=tuple(ops), tensors=tensors)


def _weights_shape(op: NpuOp) -> tuple[int, ...] | None:
    return None if op.weights is None else op.weights.shape


def _reshaped_choice(op: NpuOp, choice: OpSchedule, arch: PricedArchitecture) -> OpSchedule:
    """``choice`` (made for another shape of the same pass) rebuilt for ``op``: its IFM stripes, block config
    and weights follow the op's shapes; stripe, cascade and buffering stay."""
    ifm_stripe, ifm2_stripe = ifm_stripes(op, choice.ofm_stripe)
    block = None
    if choice.block_config is not None:
        wanted = choice.block_config.old_style()
        block = try_block_config(Shape4D(1, wanted[0], wanted[1], wanted[3]), arch, ofm_shape=choice.ofm_stripe,
                                 ifm_shape=ifm_stripe, ifm2_shape=ifm2_stripe,
                                 is_partkernel=choice.block_config.is_partkernel, **op_block_inputs(op))
        if block is None or block.old_style() != wanted:
            raise ScheduleError(f"op {op.index} '{op.name}': block config {wanted} does not fit the pass as Vela's "
                                "backend lowers it")
    encoded, buffering = choice.encoded_weights, choice.weight_buffering
    if op.weights is not None and block is not None:
        weights = encode_op_weights(arch, op, block.ofm_block.depth, choice.depth_slices)
        encoded = EncodedWeightsRef.of(weights, block.ofm_block.depth)
        if buffering.is_buffered:
            sizes = weights.double_buffer_sizes[:len(buffering.buffer_sizes)]
            buffering = replace(buffering, buffer_sizes=tuple(sizes))
    return replace(choice, block_config=block, ifm_stripe=ifm_stripe, ifm2_stripe=ifm2_stripe, encoded_weights=encoded,
                   weight_buffering=buffering)


def as_compiled(result: RunResult) -> tuple[RunResult, str | None]:
    """``result`` on the graph Vela's (legacy) backend compiles, and a warning when that is not the graph the
    report priced.

    Under ``--estimator vela-default`` the graph keeps a strided convolution the legacy core folds into depth, as
    the default core does; Vela's backend folds it. The schedule is then carried onto the legacy lowering and
    verified there, and the warning gives the total the compiled graph has under the chosen estimator.
    """
    if result.arch.estimator is not Estimator.VELA_DEFAULT:
        return result, None
    schedule, reported = result.solved()
    recipe = result.recipe or recipe_for(result.options, result.arch)
    network = load(result.options).build(replace(recipe, keep_strides=False)).network
    folded = [op for before, op in zip(result.network.npu_ops, network.npu_ops, strict=False)
              if before.ifm.shape != op.ifm.shape]
    if not folded and len(network.npu_ops) == len(result.network.npu_ops):
        return result, None
    try:
        carried = carry_schedule(schedule, result.network, network, result.arch)
    except ScheduleError as exc:
        raise ScheduleError(f"the schedule does not carry over to the graph Vela's backend compiles: {exc}") from None
    evaluation = evaluate(network, result.arch, carried)
    problems = verify(network, result.arch, carried, evaluation, UNLIMITED if result.status == "over_limit" else None)
    if problems:
        raise ScheduleError(f"on the graph Vela's backend compiles the schedule fails verification: {problems[0]}")
    names = ", ".join(f"op {op.index} '{op.name}'" for op in folded[:3])
    warning = (f"Vela's backend folds the stride of {names} into depth, as the default core does not: the compiled "
               f"graph is {evaluation.total_cycles:,.0f} cycles under {result.arch.estimator.value}, the report's "
               f"{reported.total_cycles:,.0f}")
    return replace(result, network=network, schedule=carried, evaluation=evaluation), warning


def compile_as_deployed(result: RunResult, compile_run: Callable[[RunResult], BackendResult]) -> BackendResult:
    """``compile_run`` (Vela's backend) on ``result`` carried onto the graph that backend compiles, the warning
    ``as_compiled`` gives, if any, first among the backend's."""
    compiled, note = as_compiled(result)
    backend = compile_run(compiled)
    return replace(backend, notes=(note,)) if note else backend
