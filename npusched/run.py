"""What a run is asked (``RunOptions``), what that names (its ``architecture``, the ``scheduled_model``) and what
it produces (``RunResult``).

These records sit between the solvers and everything that reports or deploys a run (``io``, ``vela``, ``app``,
``sweep``), so each of those can take a typed result without importing the pipeline that makes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from npusched.errors import ConfigError, ScheduleError
from npusched.frontend.normalise import Normalisation, counted, normalise
from npusched.lowering.graph import Network
from npusched.schedule.evaluator import Evaluation
from npusched.schedule.schedule import Schedule
from npusched.target.arch import ArchitectureFeatures, Estimator, load_architecture

# A fast-storage limit no schedule reaches: verifying against it checks everything but the limit.
UNLIMITED = 1 << 62


@dataclass(frozen=True)
class RunOptions:
    """Everything a run depends on; the same options give the same schedule."""

    model_path: Path
    accelerator_config: str = "ethos-u55-256"
    config_files: tuple[str, ...] = ()
    system_config: str | None = None
    memory_mode: str | None = None
    arena_cache_size: int | None = None
    optimise: str = "Performance"
    solver: str | None = "cpsat"
    time_limit_seconds: float = 30.0
    workers: int | None = None
    seed: int = 0
    deterministic: bool = False
    estimator: str = "vela"
    # Fold the model's static shape arithmetic first (npusched.frontend.normalise); False schedules it as it is.
    normalise: bool = True
    # Vela's backend compiles the schedule after the run (--output-dir): the time limit covers that compile too, so
    # the solve keeps back its estimated time (npusched.vela.backend.estimated_compile_seconds).
    compile_follows: bool = False
    # That compile was started before the run (``npusched.vela.backend.Compilation``, as the command line does):
    # only what is left of it once the schedule is known is kept back.
    compile_started_ahead: bool = False
    # Lower the default core's graph (``lower_model``'s ``default_core``) rather than Vela legacy's. None: for
    # --solver vela-default only, which reads that core's schedule; False there puts it on legacy's graph, as the
    # comparisons with CP-SAT do (scripts/estimator_matrix.py), so both price the same passes.
    default_core_graph: bool | None = None


def architecture(options: RunOptions) -> ArchitectureFeatures:
    """The hardware description the options name, pricing passes with the options' estimator."""
    arch = load_architecture(
        accelerator_config=options.accelerator_config,
        config_files=list(options.config_files) or None,
        system_config=options.system_config,
        memory_mode=options.memory_mode,
        arena_cache_size=options.arena_cache_size,
        optimise=options.optimise,
    )
    try:
        estimator = Estimator(options.estimator)
    except ValueError:
        raise ConfigError(f"unknown estimator '{options.estimator}' (known: "
                          f"{', '.join(Estimator.names())})") from None
    return arch if estimator is arch.estimator else replace(arch, estimator=estimator)


def rewrites_vela_graph(options: RunOptions) -> bool:
    """Whether the run schedules npusched's own graph, where passes write their slice of a concatenation
    (``lower_model``'s ``in_place``) and channel-poor maps are staged (``normalise``'s ``stage``): not for
    the two Vela cores' own schedules, which are of Vela's graphs (the heuristic reproduces the legacy core's; the
    default core's is read back by op name)."""
    return options.solver not in (None, "heuristic", "vela-default")


def lowers_default_core_graph(options: RunOptions) -> bool:
    """Whether the run lowers Vela's default core's graph (see ``RunOptions.default_core_graph``)."""
    if options.default_core_graph is None:
        return options.solver == "vela-default"
    return options.default_core_graph


def scheduled_model(data: bytes, options: RunOptions, arch: ArchitectureFeatures) -> tuple[bytes, Normalisation]:
    """The model the run schedules, and what normalisation changed: ``data`` normalised, its channel-poor inputs
    staged where npusched's own graph keeps feature maps off fast storage; as it is with --no-normalise."""
    if not options.normalise:
        return data, Normalisation()
    stage = rewrites_vela_graph(options) and arch.feature_map_storage_mem_area != arch.fast_storage_mem_area
    return normalise(data, str(options.model_path), stage=stage)


@dataclass(frozen=True)
class NormalisationReport:
    """What normalising the model changed, and what that did to the partition (both models lowered).

    ``model_bytes`` is the normalised model: what was scheduled, what ``--output-dir`` gives Vela's backend and
    ``--write-model`` writes.
    """

    normalisation: Normalisation
    subgraphs_before: int  # -1 (and cpu_ops_before -1) where the original model does not lower
    subgraphs_after: int
    cpu_ops_before: int
    cpu_ops_after: int
    model_bytes: bytes = field(repr=False, default=b"")

    def describe(self) -> str:
        """E.g. "folded 48 shape operators; 26 NPU subgraphs → 1; 48 CPU operators → 0" (a large SOFTMAX split into
        row bands is said after the folding)."""
        n = self.normalisation
        parts = [f"folded {counted(n.folded_operators, 'shape operator')}"] if n.folded else []
        if n.split_softmaxes:
            parts.append(n.describe_softmax_bands())
        if self.subgraphs_before < 0:  # -1: the original model does not lower, so there is nothing to count
            parts.append(f"the original does not lower; normalised: {self.subgraphs_after} NPU subgraph(s)")
        else:
            parts += [f"{counted(self.subgraphs_before, 'NPU subgraph')} → {self.subgraphs_after}",
                      f"{counted(self.cpu_ops_before, 'CPU operator')} → {self.cpu_ops_after}"]
        if n.relaid_passes:
            parts.append(f"{counted(n.relaid_passes, 'element-wise pass', 'es')} re-laid out")
        if n.fixed_batch_inputs:
            parts.append("dynamic batch fixed to 1")
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {**self.normalisation.as_json(), "npu_subgraphs_before": self.subgraphs_before,
                "npu_subgraphs_after": self.subgraphs_after, "cpu_ops_before": self.cpu_ops_before,
                "cpu_ops_after": self.cpu_ops_after}


@dataclass(frozen=True)
class SolverReport:
    """What CP-SAT says about its answer, next to the heuristic it started from (both priced by the evaluator)."""

    status: str
    bound_cycles: float
    gap: float
    solve_seconds: float
    reason: str
    model_stats: dict[str, Any]
    heuristic_cycles: float | None
    heuristic_peak_fast_storage_bytes: int | None
    # ``bound_cycles`` holds over the candidate space CP-SAT searched; this one for any schedule at all.
    any_schedule_bound_cycles: float = float("nan")
    # "Performance" or "Size" (least peak fast storage, then fewest cycles); for Size a proven lower bound on the
    # peak over the candidate space (None where none was proven) and whether the schedule's peak meets it.
    strategy: str = "Performance"
    peak_bound_bytes: int | None = None
    peak_proven_minimal: bool = False


@dataclass(frozen=True)
class RunResult:
    """A finished run: its inputs, the lowered network, and (when a solver ran) the verified schedule and its
    evaluation — the only source of the figures a report prints."""

    options: RunOptions
    arch: ArchitectureFeatures
    network: Network
    status: str
    schedule: Schedule | None = None
    evaluation: Evaluation | None = None
    timings_seconds: dict[str, float] = field(default_factory=dict)
    solver_report: SolverReport | None = None
    warnings: tuple[str, ...] = ()
    # The schedule's total under each estimator (the chosen one is ``evaluation.total_cycles``).
    cycles_by_estimator: dict[str, float] = field(default_factory=dict)
    # What normalisation changed (None: nothing to fold, or --no-normalise): the network is the normalised model's.
    normalisation: NormalisationReport | None = None

    def solved(self) -> tuple[Schedule, Evaluation]:
        """The schedule and its evaluation, for reports that need both (a run without a solver has neither)."""
        if self.schedule is None or self.evaluation is None:
            raise ScheduleError("the run made no schedule (it ran without a solver)")
        return self.schedule, self.evaluation
