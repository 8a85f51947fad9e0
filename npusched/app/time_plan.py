"""The time plan of a CP-SAT run: what each phase is predicted to take, what fits the limit, and what is dropped.

A run reads and lowers npusched's graph first (``spent``), then plans the rest from the network's size: Vela
legacy's own schedule (the heuristic, on Vela's graph, lowered too where the graphs differ), the default core's
own schedule (the `vela` CLI, a process beside the run), the search of npusched's graph and of Vela's, the
any-schedule bound, the final evaluation, and Vela's compile where ``--output-dir`` follows. Each is predicted
from measured rates (``PhaseRates``: per pass, per weight byte, per OFM element; ``scripts/bench/time_plan.py``
measures them and fits them).

The answer's search (npusched's graph's) gets at least ``SEARCH_SHARE_MIN`` of what is left after loading, lowering
and the compile, and more than ``OWN_GRAPH_SHARE`` of the search time where that takes it; where the searches
together would get less, the optional phases are dropped in this order, what they are worth to the answer: the
any-schedule bound (a figure of the report; the search's own bound over its candidate space stays), the search of
Vela's graph (where what npusched's leaves it is under a tenth: its floors stay), then the default core's CLI floor
(what keeps the answer no slower than that core's own schedule: dropped last, though it is the slowest phase and a
process competing for the CPUs). Vela legacy's own schedule is never dropped; the answer is never worse than the
cores' schedules made, which are returned where the search finds nothing better. Where loading,
lowering and the compile alone exceed the limit, the plan says so and names the least limit that works. In
``--deterministic`` runs every figure is a prediction (the measured time of loading and lowering is not used), so
the plan depends on the inputs alone, and each search's work is its share of the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from npusched.lowering.graph import Network

# Of what is left after loading, lowering and the compile, the least the answer's search gets.
SEARCH_SHARE_MIN = 0.5
# Of the search time, what npusched's graph gets when Vela's is searched too (Vela's gets the rest): Vela's starts
# from the better floor, mostly the better start already where a rewrite does not pay.
OWN_GRAPH_SHARE = 2 / 3
# The phases that may be dropped, in the order they are.
DROP_ORDER = ("any_schedule_bound", "vela_graph_search", "default_core_floor")


@dataclass(frozen=True)
class PhaseRates:
    """Seconds per unit of each phase on one core of this project's reference machine: the CPU time each took
    (which a busy machine does not inflate) on the corpus, the zoo of real exports, generated networks of 100-850
    passes and the full-size keras.applications exports (NASNetMobile, EfficientNetB0, DenseNet121, ResNet50,
    MobileNetV2/V3) under a shared-SRAM and a dedicated-SRAM configuration. Each phase is a line through the median
    network (over passes, weight megabytes and, where it pays, OFM elements: a pass of an unrolled LSTM's one row
    costs a fraction of a convolution's); then all are scaled by one factor so that the run's predicted phases
    together cover nine networks in ten (``scripts/bench/time_plan.py measure`` and ``fit``;
    docs/results/data/time_plan_phases.csv). Covering each phase apart would add up nine-in-ten margins: the
    sum of them over-predicted a typical network 2.4-fold."""

    # Reading the model, per operator; lowering it (npusched's graph or Vela's), per NPU pass and weight megabyte.
    read_seconds_per_operator: float = 0.000867
    lower_seconds_per_pass: float = 0.003
    lower_seconds_per_weight_megabyte: float = 0.0537
    # Vela legacy's own schedule (the heuristic) on Vela's graph: per pass, per million OFM elements (its stripes
    # and block configs) and per megabyte of weights it encodes.
    heuristic_seconds_per_pass: float = 0.00121
    heuristic_seconds_per_ofm_megaelement: float = 0.084
    heuristic_seconds_per_weight_megabyte: float = 0.521
    # The default core's CLI on the model: starting Vela, then per pass, per weight megabyte and per million OFM
    # elements; the same line for shared and dedicated SRAM, covering nine runs in ten. A few networks take it far
    # longer (NASNetMobile on a U65: 35 s, 21x the line; a stacked fused LSTM: 15 s): the CLI is stopped at twice
    # its prediction (``cpsat_run._start_default_core``).
    default_core_fixed_seconds: float = 0.717
    default_core_seconds_per_pass: float = 0.000356
    default_core_seconds_per_weight_megabyte: float = 0.250
    default_core_seconds_per_ofm_megaelement: float = 0.0109
    # An evaluation as a run makes it, per pass: a floor's under each single model and the objective's blend, on
    # average (the memory over time and the single-model prices are worked out once per schedule).
    evaluation_seconds_per_pass: float = 0.000456
    # The any-schedule bound, for each cost model: a fixed part, then per pass and per million OFM elements.
    bound_fixed_seconds_per_model: float = 0.0767
    bound_seconds_per_pass_and_model: float = 0.00204
    bound_seconds_per_ofm_megaelement_and_model: float = 0.23
    # The least a search is given to be worth starting.
    min_search_seconds: float = 0.5


RATES = PhaseRates()


@dataclass(frozen=True)
class NetworkSize:
    """What the predictions are made from: the NPU passes, the operators of the model, the weight bytes Vela
    encodes, the OFM elements the passes write, and whether Vela's graph differs from npusched's (a second
    lowering)."""

    passes: int
    operators: int
    weight_bytes: int
    graphs_differ: bool
    cost_models: int = 1
    ofm_elements: int = 0

    @property
    def weight_megabytes(self) -> float:
        return self.weight_bytes / 1e6

    @property
    def ofm_megaelements(self) -> float:
        return self.ofm_elements / 1e6

    @classmethod
    def of(cls, network: Network, graphs_differ: bool, cost_models: int) -> NetworkSize:
        weights = sum(op.weights.size_in_bytes for op in network.npu_ops if op.weights is not None)
        ofm_elements = sum(op.ofm.shape.elements() for op in network.npu_ops)
        return cls(len(network.npu_ops), len(network.ops), weights, graphs_differ, cost_models, ofm_elements)


@dataclass(frozen=True)
class TimePlan:
    """The phases of a run and their predicted seconds, what is kept and what dropped (with why), and the search's
    seconds. ``spent_seconds`` is what loading and lowering npusched's graph took (predicted in a deterministic
    run)."""

    limit_seconds: float
    spent_seconds: float
    compile_seconds: float
    # What each phase but the searches costs the run (the default core's CLI: what the run waits for it, and the
    # share of the CPUs it takes meanwhile); and what the CLI itself takes.
    predicted: dict[str, float] = field(default_factory=dict)
    default_core_cli_seconds: float = 0.0
    default_core_floor: bool = True
    vela_graph_search: bool = True
    # npusched's own graph searched (its start, the heuristic's schedule of that graph, made): else only Vela's, from
    # the cores' own schedules, which a large network's time limit may afford where two heuristics it does not.
    own_graph_search: bool = True
    any_schedule_bound: bool = True
    dropped: tuple[tuple[str, str], ...] = ()
    warning: str = ""

    @property
    def kept_back_seconds(self) -> float:
        """Everything but the searches: the floors, the bound, the final evaluation, the compile."""
        return sum(seconds for phase, seconds in self.predicted.items() if self._kept(phase)) + self.compile_seconds

    @property
    def search_seconds(self) -> float:
        """What the searches get together."""
        return max(0.0, self.limit_seconds - self.spent_seconds - self.kept_back_seconds)

    @property
    def own_share(self) -> float:
        """Of the search time, what npusched's graph's search gets: ``OWN_GRAPH_SHARE`` where Vela's is searched
        too, more where that would leave it under half of what the plan shares out; all of it otherwise (none where
        only Vela's graph is searched)."""
        if not self.own_graph_search:
            return 0.0
        if not self.vela_graph_search or self.search_seconds <= 0:
            return 1.0
        return min(1.0, max(OWN_GRAPH_SHARE, SEARCH_SHARE_MIN * self.available_seconds / self.search_seconds))

    @property
    def answer_search_seconds(self) -> float:
        """What the search of the answer's graph gets: npusched's (as a rule), or Vela's where it is searched alone."""
        return self.search_seconds * (self.own_share if self.own_graph_search else 1.0)

    @property
    def searches(self) -> bool:
        """Whether there is time to search at all (else the answer is the better of the cores' own schedules)."""
        return self.search_seconds >= RATES.min_search_seconds

    @property
    def vela_search_seconds(self) -> float:
        """What the search of Vela's graph gets (the rest)."""
        return self.search_seconds * (1.0 - self.own_share) if self.vela_graph_search else 0.0

    @property
    def available_seconds(self) -> float:
        """The limit less loading, lowering and the compile: what the plan shares out."""
        return max(0.0, self.limit_seconds - self.spent_seconds - self.compile_seconds)

    def _kept(self, phase: str) -> bool:
        return {"default_core_floor": self.default_core_floor, "vela_graph_search": self.vela_graph_search,
                "starts": self.own_graph_search, "any_schedule_bound": self.any_schedule_bound}.get(phase, True)

    def as_json(self) -> dict[str, Any]:
        return {"limit_seconds": self.limit_seconds, "spent_seconds": round(self.spent_seconds, 3),
                "compile_seconds": round(self.compile_seconds, 3),
                "default_core_cli_seconds": round(self.default_core_cli_seconds, 3),
                "predicted_seconds": {phase: round(seconds, 3) for phase, seconds in self.predicted.items()},
                "search_seconds": round(self.search_seconds, 3), "own_share": round(self.own_share, 3),
                "answer_search_seconds": round(self.answer_search_seconds, 3),
                "dropped": [{"phase": phase, "why": why} for phase, why in self.dropped],
                "warning": self.warning or None}


def predicted_spent_seconds(size: NetworkSize, rates: PhaseRates = RATES) -> float:
    """Loading and lowering npusched's graph, predicted (what a deterministic run plans with)."""
    return rates.read_seconds_per_operator * size.operators + lowering_seconds(size, rates)


def lowering_seconds(size: NetworkSize, rates: PhaseRates = RATES) -> float:
    """Lowering one graph of the network."""
    return rates.lower_seconds_per_pass * size.passes + rates.lower_seconds_per_weight_megabyte * size.weight_megabytes


def heuristic_seconds(size: NetworkSize, rates: PhaseRates = RATES, *, weights_encoded: bool = False) -> float:
    """Vela legacy's own schedule (the heuristic) of one graph of the network. ``weights_encoded``: the other
    graph's heuristic ran first, and this one reads its weights' encodings from the codec's cache (ResNet50 at 96 x
    96, 25 MB of weights: the first 7.3 s, the second 0.12 s), so the weight term is not paid again."""
    weights = 0.0 if weights_encoded else rates.heuristic_seconds_per_weight_megabyte * size.weight_megabytes
    return rates.heuristic_seconds_per_pass * size.passes + rates.heuristic_seconds_per_ofm_megaelement \
        * size.ofm_megaelements + weights


def default_core_seconds(size: NetworkSize, rates: PhaseRates = RATES) -> float:
    """The default core's CLI on the model."""
    return rates.default_core_fixed_seconds + rates.default_core_seconds_per_pass * size.passes \
        + rates.default_core_seconds_per_weight_megabyte * size.weight_megabytes \
        + rates.default_core_seconds_per_ofm_megaelement * size.ofm_megaelements


def plan_run(limit_seconds: float, size: NetworkSize, spent_seconds: float, compile_seconds: float, *,
             cpus: int, default_core_available: bool = True, rates: PhaseRates = RATES) -> TimePlan:
    """The plan of a CP-SAT run (module docstring). ``spent_seconds``: loading and lowering npusched's graph so far;
    ``cpus``: what the run's processes share (CP-SAT's workers, the default core's CLI, the compile's fork)."""
    passes, models = size.passes, size.cost_models
    heuristic = heuristic_seconds(size, rates)
    lower_vela = lowering_seconds(size, rates) if size.graphs_differ else 0.0
    # The default core's CLI runs beside the run from the start: the run waits for what it has not done by the
    # time the other floor is made, and it takes one of the CPUs from the search meanwhile.
    cli = default_core_seconds(size, rates)
    cli_wait = max(0.0, cli - lower_vela - heuristic)
    cli_cost = cli_wait + (cli - cli_wait) / max(1, cpus)
    evaluation = rates.evaluation_seconds_per_pass * passes
    # ``evaluation``: what one costs a run on average, a schedule priced under each single model and the objective's
    # blend sharing its memory over time and its single-model prices (a run of both models on two graphs: 20).
    predicted = {
        "lower_vela_graph": lower_vela,
        # Vela legacy's own schedule, evaluated under every estimator.
        "legacy_floor": heuristic + 4 * evaluation,
        # The starts evaluated under the objective: the floors' again (their prices known), and where the graphs
        # differ the heuristic's schedule of npusched's graph (its weights encoded by the floor's) and the default
        # core's read onto it.
        "starts": heuristic_seconds(size, rates, weights_encoded=True) + 4 * models * evaluation
        if size.graphs_differ else models * evaluation,
        # The default core's schedule read back and evaluated under every estimator.
        "default_core_floor": cli_cost + 4 * evaluation if default_core_available else 0.0,
        "any_schedule_bound": models * (rates.bound_fixed_seconds_per_model
                                        + rates.bound_seconds_per_pass_and_model * passes
                                        + rates.bound_seconds_per_ofm_megaelement_and_model * size.ofm_megaelements),
        # The answer under the objective, then under every estimator.
        "evaluation": 2 * models * evaluation + 0.2,
    }
    plan = TimePlan(limit_seconds, spent_seconds, compile_seconds, predicted, cli,
                    default_core_floor=default_core_available, vela_graph_search=size.graphs_differ)
    dropped: list[tuple[str, str]] = []
    if not default_core_available:
        dropped.append(("default_core_floor", "the vela CLI is not installed"))
    floor = max(SEARCH_SHARE_MIN * plan.available_seconds, rates.min_search_seconds)

    def vela_graph_short(plan: TimePlan) -> bool:
        # Its search is what npusched's leaves: not worth a model of its own under a tenth of what is shared.
        return plan.vela_graph_search \
            and plan.vela_search_seconds < max(rates.min_search_seconds, 0.1 * plan.available_seconds)

    for phase in DROP_ORDER:
        # A phase goes where the answer's search would get less than its share; the bound also where Vela's graph's
        # search would be short (the order holds). Dropping that search frees nothing for the answer's: it goes
        # only where it is short itself.
        short = plan.search_seconds < floor or (phase == "any_schedule_bound" and vela_graph_short(plan))
        if phase == "vela_graph_search":
            short = vela_graph_short(plan)
        if not short or not plan._kept(phase):
            continue
        dropped.append((phase, f"the searches would get {plan.search_seconds:.1f} s of the "
                               f"{plan.available_seconds:.1f} s left after loading, lowering and the compile (Vela's "
                               f"graph's {plan.vela_search_seconds:.1f} s)"))
        plan = _without(plan, phase)
    if size.graphs_differ and not plan.vela_graph_search \
            and plan.search_seconds < max(rates.min_search_seconds, 0.1 * plan.available_seconds):
        # Even npusched's graph alone is hardly searched, its start being a second heuristic: Vela's graph alone,
        # whose start (the cores' own schedules) is made already, is searched instead where that is longer.
        alone = replace(plan, vela_graph_search=True, own_graph_search=False)
        if alone.search_seconds > plan.search_seconds:
            dropped = [("own_graph_search", f"{why}; npusched's graph's start would take {predicted['starts']:.1f} s")
                       if phase == "vela_graph_search" else (phase, why) for phase, why in dropped]
            plan = alone
    warning = ""
    needed = spent_seconds + compile_seconds + predicted["legacy_floor"] + predicted["evaluation"] \
        + rates.min_search_seconds
    if needed > limit_seconds:
        warning = (f"--time-limit {limit_seconds:g} is too short for this network: loading, lowering, Vela legacy's "
                   f"own schedule{' and the compile' if compile_seconds else ''} alone need about "
                   f"{math.ceil(needed)} s; the least limit that works is about {math.ceil(needed / 0.8)} s")
    return replace(plan, dropped=tuple(dropped), warning=warning)


def _without(plan: TimePlan, phase: str) -> TimePlan:
    return replace(plan, default_core_floor=plan.default_core_floor and phase != "default_core_floor",
                   vela_graph_search=plan.vela_graph_search and phase != "vela_graph_search",
                   any_schedule_bound=plan.any_schedule_bound and phase != "any_schedule_bound")
