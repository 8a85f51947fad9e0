"""What a run is asked (``RunOptions``) and what it produces (``RunResult``).

These records sit between the solvers and everything that reports or deploys a run (``io``, ``vela``, ``app``,
``sweep``), so each of those can take a typed result without importing the pipeline that makes one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npusched.errors import ScheduleError
from npusched.frontend.normalise import Normalisation, RewriteRecord, Site, counted, split_bytes_for
from npusched.frontend.recipe import SOFTMAX_SPLIT_BYTES, GraphRecipe
from npusched.lowering.graph import Network
from npusched.schedule.evaluator import Evaluation
from npusched.schedule.schedule import Schedule
from npusched.target.arch import OptimisationStrategy
from npusched.target.estimators import Estimator, PricedArchitecture

# A fast-storage limit no schedule reaches: verifying against it checks everything but the limit.
UNLIMITED = 1 << 62


class GraphKind(enum.Enum):
    """Which graph of a model a solver schedules: npusched's own (the priced rewrites, in-place concatenation
    writes and softmax deep views), Vela legacy's (what the heuristic reproduces that core's schedule of), or Vela's
    default core's (what its schedule is read back onto)."""

    OWN = "own"
    VELA = "vela"
    DEFAULT_CORE = "default-core"


class Solver(str, enum.Enum):
    """``--solver``: what makes the schedule."""

    CPSAT = "cpsat"
    HEURISTIC = "heuristic"  # Vela legacy's own schedule, reproduced
    DP = "dp"
    VELA_DEFAULT = "vela-default"  # Vela's default core's own schedule, run by its CLI and read back

    def __str__(self) -> str:
        return self.value

    @property
    def graph(self) -> GraphKind:
        return {Solver.HEURISTIC: GraphKind.VELA, Solver.VELA_DEFAULT: GraphKind.DEFAULT_CORE}.get(self, GraphKind.OWN)

    @property
    def is_baseline(self) -> bool:
        """A Vela core's own schedule: priced and reported as that core made it, over the limit where it goes."""
        return self in (Solver.HEURISTIC, Solver.VELA_DEFAULT)


class ObjectiveKind(str, enum.Enum):
    """``--objective``: what CP-SAT minimises: "both" Vela cores' models, each relative to its own core's schedule
    (docs/guide/estimator.md), or "estimator", ``--estimator``'s model alone."""

    BOTH = "both"
    ESTIMATOR = "estimator"

    def __str__(self) -> str:
        return self.value


OBJECTIVES = tuple(kind.value for kind in ObjectiveKind)


@dataclass(frozen=True)
class Hardware:
    """The hardware options of Vela (and `solve-schedule`): accelerator, .ini files, system config, memory mode and
    arena size. Without ``config_files`` a named system config is looked up in Vela's own ``Arm/vela.ini``."""

    accelerator_config: str = "ethos-u55-256"
    system_config: str | None = None
    memory_mode: str | None = None
    arena_cache_size: int | None = None
    config_files: tuple[str, ...] = ()

    def config_files_or_default(self) -> tuple[str, ...]:
        named = self.system_config is not None or self.memory_mode is not None
        return self.config_files or ((VELA_INI,) if named else ())


# The configuration file shipped with ethos-u-vela, where a named system config is looked up by default.
VELA_INI = "Arm/vela.ini"


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
    estimator: str = Estimator.VELA_LEGACY.value
    # What CP-SAT minimises (``ObjectiveKind``). Every figure a run prints is --estimator's.
    objective: str = "both"
    # Normalise the model first (npusched.frontend.normalise); False schedules it as it is.
    normalise: bool = True
    # Rewrites switched off by name (``--disable-rewrite``; ``npusched.frontend.normalise.REWRITE_NAMES``).
    disabled_rewrites: frozenset[str] = frozenset()
    # Check every normalisation rewrite against the TFLite reference interpreter as it runs (``--verify-rewrites``).
    verify_rewrites: bool = False
    # Vela's backend compiles the schedule after the run (--output-dir): the time limit covers that compile too, so
    # the solve keeps back its estimated time (npusched.vela.backend.estimated_compile_seconds).
    compile_follows: bool = False
    # That compile was started before the run (``npusched.vela.backend.Compilation``, as the command line does):
    # only what is left of it once the schedule is known is kept back.
    compile_started_ahead: bool = False
    # Lower the default core's graph rather than Vela legacy's. None: for --solver vela-default only, which reads
    # that core's schedule; False there puts it on legacy's graph, as the comparisons with CP-SAT do
    # (scripts/bench/vs_vela.py), so both price the same passes.
    default_core_graph: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "disabled_rewrites", frozenset(self.disabled_rewrites))

    @classmethod
    def on(cls, model_path: Path, hardware: Hardware, **options: Any) -> RunOptions:
        """The options of a run of ``model_path`` on ``hardware``."""
        return cls(model_path=model_path, accelerator_config=hardware.accelerator_config,
                   config_files=hardware.config_files_or_default(), system_config=hardware.system_config,
                   memory_mode=hardware.memory_mode, arena_cache_size=hardware.arena_cache_size, **options)

    @property
    def hardware(self) -> Hardware:
        return Hardware(self.accelerator_config, self.system_config, self.memory_mode, self.arena_cache_size,
                        self.config_files)

    @property
    def architecture_arguments(self) -> dict[str, Any]:
        """The arguments of ``npusched.target.estimators.load_architecture`` for these options."""
        return {"accelerator_config": self.accelerator_config, "config_files": list(self.config_files) or None,
                "system_config": self.system_config, "memory_mode": self.memory_mode,
                "arena_cache_size": self.arena_cache_size, "optimise": self.optimise, "estimator": self.estimator}

    @property
    def graph(self) -> GraphKind:
        """The graph the options' solver schedules (Vela legacy's for a run that only lowers)."""
        if self.solver is None:
            return GraphKind.VELA
        if self.default_core_graph is not None and Solver(self.solver) is Solver.VELA_DEFAULT:
            return GraphKind.DEFAULT_CORE if self.default_core_graph else GraphKind.VELA
        return Solver(self.solver).graph


def recipe_for(options: RunOptions, arch: PricedArchitecture) -> GraphRecipe:
    """The recipe of the graph a run with ``options`` schedules on ``arch``, every priced site applied (a CP-SAT run
    prices them: ``npusched.app.graph_choice``). npusched's own graph writes concatenations in place (a write making
    its OFM live sooner by at most the arena, where feature maps live in fast storage), computes softmaxes on deep
    views, may split a large softmax into row bands (``split_bytes_for``) and stages channel-poor maps where
    feature maps live off fast storage; Vela legacy's graph and the default core's do none of that. The default
    core's cost model (``--estimator vela-default``) prices convolutions with their strides, as that core keeps
    them."""
    own = options.graph is GraphKind.OWN
    resident = arch.feature_map_storage_mem_area == arch.fast_storage_mem_area
    size = arch.optimise is OptimisationStrategy.SIZE
    return GraphRecipe(
        normalise=options.normalise,
        stage_maps=own and not resident,
        softmax_split_bytes=split_bytes_for(int(arch.arena_cache_size), size) if own else SOFTMAX_SPLIT_BYTES,
        disabled_rewrites=options.disabled_rewrites,
        in_place_writes=own,
        in_place_budget_bytes=arch.arena_cache_size if resident else None,
        softmax_deep_views=own,
        default_core=options.graph is GraphKind.DEFAULT_CORE,
        keep_strides=Estimator(options.estimator) is Estimator.VELA_DEFAULT)


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

    core: str  # the core's model's estimator: Estimator.VELA_LEGACY or VELA_DEFAULT
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
    # The model's operators (by TFLite output tensor) this core leaves on the CPU.
    cpu_operators: tuple[str, ...] = ()

    @property
    def total_cycles(self) -> float:
        """The core's total by its own model: its own figure where known, else npusched's pricing of it."""
        return self.own_cycles if self.own_cycles is not None else self.cycles_by_estimator[self.core]

    def as_json(self) -> dict[str, Any]:
        return {"core": self.core, "own_cycles": self.own_cycles, "cycles_by_estimator": dict(self.cycles_by_estimator),
                "peak_fast_storage_bytes": self.peak_fast_storage_bytes,
                "fast_storage_bytes": self.fast_storage_bytes, "fits": self.fits, "note": self.note,
                "returned": self.returned, "taught": list(self.taught), "cpu_operators": list(self.cpu_operators)}


@dataclass(frozen=True)
class MissingFloor:
    """A Vela core's own schedule a run could not make or read back (no `vela` CLI, a failure, a time-out, a
    decision npusched's read-back could not pair): the run goes on without that floor, and says why."""

    core: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"core": self.core, "reason": self.reason}


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
        """What normalising did to the partition, e.g. "26 NPU subgraphs → 1; 48 CPU operators → 0" (the record's
        own line says what each rewrite did)."""
        if self.subgraphs_before < 0:  # -1: the original model does not lower, so there is nothing to count
            return f"the original does not lower; normalised: {self.subgraphs_after} NPU subgraph(s)"
        return "; ".join((f"{counted(self.subgraphs_before, 'NPU subgraph')} → {self.subgraphs_after}",
                          f"{counted(self.cpu_ops_before, 'CPU operator')} → {self.cpu_ops_after}"))

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
    # models weighted ("both: legacy x 1 + default x 0.97"); and in words, as the summary says it.
    objective: str = ""
    objective_words: str = ""


@dataclass(frozen=True)
class RunResult:
    """A finished run: its inputs, the lowered network, and (when a solver ran) the verified schedule and its
    evaluation — the only source of the figures a report prints."""

    options: RunOptions
    arch: PricedArchitecture
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
    # Both Vela cores' own schedules, priced (CP-SAT runs only), and those that could not be made, with why.
    floors: tuple[FloorReport, ...] = ()
    missing_floors: tuple[MissingFloor, ...] = ()
    # The priced rewrites' sites (and the in-place writes and softmax deep views), each in the scheduled graph or
    # priced out (CP-SAT runs whose two graphs differ).
    sites: tuple[SiteDecision, ...] = ()
    # The recipe of the graph scheduled (``npusched.lowering.build.build_graph`` makes the same graph from it), and
    # what each rewrite did to it.
    recipe: GraphRecipe | None = None
    rewrites: tuple[RewriteRecord, ...] = ()

    def solved(self) -> tuple[Schedule, Evaluation]:
        """The schedule and its evaluation, for reports that need both (a run without a solver has neither)."""
        if self.schedule is None or self.evaluation is None:
            raise ScheduleError("the run made no schedule (it ran without a solver)")
        return self.schedule, self.evaluation
