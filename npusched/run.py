"""What a run is asked (``RunOptions``) and what it produces (``RunResult``).

These records sit between the solvers and everything that reports or deploys a run (``io``, ``vela``, ``app``,
``sweep``), so each of those can take a typed result without importing the pipeline that makes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npusched.errors import ScheduleError
from npusched.frontend.normalise import SOFTMAX_SPLIT_BYTES, Normalisation, Site, counted, split_bytes_for
from npusched.lowering.graph import Network
from npusched.schedule.evaluator import Evaluation
from npusched.schedule.schedule import Schedule
from npusched.target.arch import ArchitectureFeatures, OptimisationStrategy

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
    # What CP-SAT minimises: "both" Vela cores' models, each relative to its own core's schedule (docs/estimator.md),
    # or "estimator", --estimator's model alone. Every figure a run prints is --estimator's.
    objective: str = "both"
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

    @property
    def hardware(self) -> dict[str, Any]:
        """The arguments of ``npusched.target.arch.load_architecture`` for these options' hardware and estimator."""
        return {"accelerator_config": self.accelerator_config, "config_files": list(self.config_files) or None,
                "system_config": self.system_config, "memory_mode": self.memory_mode,
                "arena_cache_size": self.arena_cache_size, "optimise": self.optimise, "estimator": self.estimator}

    @property
    def schedules_own_graph(self) -> bool:
        """Whether the run schedules npusched's own graph, where passes may write their slice of a concatenation
        (``lower_model``'s ``in_place``) and the priced rewrites may apply (``npusched.app.graph_choice``): not for
        the two Vela cores' own schedules, which are of Vela's graphs (the heuristic reproduces the legacy core's;
        the default core's is read back by op name)."""
        return self.solver not in (None, "heuristic", "vela-default")

    def stages_maps(self, arch: ArchitectureFeatures) -> bool:
        """Whether the run's own graph may stage channel-poor maps (``normalise``'s ``stage``): where feature maps
        live off fast storage, for the solvers that schedule npusched's own graph."""
        return self.schedules_own_graph and arch.feature_map_storage_mem_area != arch.fast_storage_mem_area

    def softmax_split_bytes(self, arch: ArchitectureFeatures) -> int:
        """The int32 map over which the run's own graph may compute a SOFTMAX in row bands (``normalise``'s
        ``softmax_split_bytes``; Vela's graph keeps Vela's)."""
        if not self.schedules_own_graph:
            return SOFTMAX_SPLIT_BYTES
        return split_bytes_for(int(arch.arena_cache_size), arch.optimise is OptimisationStrategy.SIZE)

    @property
    def lowers_default_core_graph(self) -> bool:
        """Whether the run lowers Vela's default core's graph (see ``default_core_graph``)."""
        return self.solver == "vela-default" if self.default_core_graph is None else self.default_core_graph


OBJECTIVES = ("both", "estimator")


@dataclass(frozen=True)
class SiteDecision:
    """A priced rewrite's site (``Site.key``; "in_place_writes:*" and "softmax_deep_views:*" for the lowering's
    in-place writes and softmax deep views) and whether the run's graph has it, with why
    (``npusched.app.graph_choice``)."""

    site: Site
    applied: bool
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"site": self.site.key, "applied": self.applied, "reason": self.reason}


@dataclass(frozen=True)
class FloorReport:
    """One Vela core's own schedule of the model as Vela reads it, priced by npusched's evaluator under every
    estimator (``npusched.app.floors``): what the run's answer is never slower than."""

    core: str  # "vela-legacy" or "vela-default"
    cycles_by_estimator: dict[str, float]
    peak_fast_storage_bytes: int
    fast_storage_bytes: int  # what it needs at addresses (or the whole network's peak, where larger)
    fits: bool  # within the limit and accepted by npusched's rules
    note: str = ""
    returned: bool = False  # the run's answer is this schedule (the search ended no better)
    # The core's own total for its own graph, as it reports it (the default core's summary), where known.
    own_cycles: float | None = None
    # Operators of the schedule Vela legacy runs only as npusched's bridge teaches it (``TAUGHT_OPERATORS``).
    taught: tuple[str, ...] = ()

    @property
    def total_cycles(self) -> float:
        """The core's total by its own model: its own figure where known, else npusched's pricing of it."""
        return self.own_cycles if self.own_cycles is not None else self.cycles_by_estimator[self.core]

    def as_json(self) -> dict[str, Any]:
        return {"core": self.core, "own_cycles": self.own_cycles, "cycles_by_estimator": dict(self.cycles_by_estimator),
                "peak_fast_storage_bytes": self.peak_fast_storage_bytes,
                "fast_storage_bytes": self.fast_storage_bytes, "fits": self.fits, "note": self.note,
                "returned": self.returned, "taught": list(self.taught)}


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
        if n.constant_operators:
            parts.append(f"computed {counted(n.constant_operators, 'operator')} of constants")
        if n.broadcast_operands:
            parts.append(f"{counted(n.broadcast_operands, 'broadcast constant')} written at the output's shape")
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
    # What the search minimised (``bound_cycles`` and ``gap`` are in its units): the estimator's model, or both
    # models weighted ("both: legacy x 1 + default x 0.97").
    objective: str = ""


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
    # The model that was scheduled (what --output-dir compiles and --write-model writes); empty (a result made by
    # hand): the options' file normalised with every priced site (``npusched.vela.backend.scheduled_model_bytes``).
    model_bytes: bytes = field(repr=False, default=b"")
    # Both Vela cores' own schedules, priced (CP-SAT runs only).
    floors: tuple[FloorReport, ...] = ()
    # The priced rewrites' sites (and the in-place writes and softmax deep views), each in the scheduled graph or
    # priced out (CP-SAT runs whose two graphs differ).
    sites: tuple[SiteDecision, ...] = ()

    @property
    def skipped_sites(self) -> frozenset[str]:
        """The priced rewrite sites the run left out of its graph (``Site.key``)."""
        return frozenset(d.site.key for d in self.sites if not d.applied)

    def solved(self) -> tuple[Schedule, Evaluation]:
        """The schedule and its evaluation, for reports that need both (a run without a solver has neither)."""
        if self.schedule is None or self.evaluation is None:
            raise ScheduleError("the run made no schedule (it ran without a solver)")
        return self.schedule, self.evaluation
