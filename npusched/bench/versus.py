"""npusched's runs against Vela's two cores on the same file: one row per model x configuration.

A row holds, for each Vela core run through its CLI (``legacy``: ``--debug-force-legacy-core``; ``default``), its
own summary total, SRAM used, CPU operators and NPU subgraphs (``vela_cli.core_run``); and for each npusched run
(a ``RunSpec``: a solver under an estimator) its status, its schedule's total priced by every cost model
(``by_legacy``, ``by_default``, ``by_contention``: the run's ``cycles_by_estimator``), its fast storage, CPU
operators and subgraphs, and optionally whether Vela's backend compiles it. ``derive`` adds the ratios: a run
priced by a core's model over that core's own total (``<run>_vs_legacy``, ``_vs_default``, the worse of the two
``_vs_worse``), and under ``--optimise Size`` its fast storage over the smaller of the cores' (``_peak_vs_min``). A
run whose graph leaves more operators to the CPU than the default core's is marked ``<run>_excluded``: the
default core then runs work npusched cannot express yet, and its total leaves that out.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from npusched.app.pipeline import run
from npusched.bench.golden import Config, is_size, run_options_from_vela_args
from npusched.bench.stats import number, ratio
from npusched.bench.vela_cli import core_run
from npusched.errors import NpuschedError
from npusched.run import RunResult
from npusched.target.estimators import Estimator
from npusched.vela.backend import compile_schedule

__all__ = ["CORES", "ESTIMATOR_KEYS", "IDENTITY", "RunSpec", "Settings", "cell", "columns", "compile_verdict",
           "derive", "run_one", "settings_from", "specs_in", "with_cores_from"]

CoreName = Literal["legacy", "default"]
# Each Vela core, and the cost model that prices as it does.
CORES: dict[CoreName, str] = {"legacy": Estimator.VELA_LEGACY.value, "default": Estimator.VELA_DEFAULT.value}
# A run's total under each single cost model, as a column suffix.
ESTIMATOR_KEYS = {**{name: core for core, name in CORES.items()}, Estimator.CONTENTION.value: "contention"}
_CORE_FIELDS = ("cycles", "sram", "cpu", "subgraphs", "error")
_RUN_FIELDS = ("status", "note", *(f"by_{k}" for k in ESTIMATOR_KEYS.values()), "sram", "cpu", "subgraphs",
               "compiled", "seconds")
_RATIOS = ("vs_legacy", "vs_default", "vs_worse", "peak_vs_min", "excluded")
IDENTITY = ("source", "model", "style", "config", "optimise")


@dataclass(frozen=True)
class RunSpec:
    """One npusched run of each cell: ``solver`` under ``estimator`` (None: the run's default), written
    ``SOLVER[@ESTIMATOR]`` on the command line."""

    solver: str
    estimator: str | None = None

    @classmethod
    def parse(cls, text: str) -> RunSpec:
        solver, _, estimator = text.partition("@")
        if solver not in ("cpsat", "heuristic", "dp", "vela-default"):
            raise NpuschedError(f"run '{text}': the solver is one of cpsat, heuristic, dp, vela-default")
        if estimator and estimator not in ESTIMATOR_KEYS:
            raise NpuschedError(f"run '{text}': the estimator is one of {', '.join(ESTIMATOR_KEYS)}")
        return cls(solver, estimator or None)

    @classmethod
    def from_key(cls, key: str) -> RunSpec | None:
        """The run whose columns ``key`` prefixes (None: no run's)."""
        for solver in ("vela-default", "heuristic", "cpsat", "dp"):
            head = solver.replace("-", "_")
            if key == head:
                return cls(solver)
            for estimator in ESTIMATOR_KEYS:
                if key == f"{head}_{estimator.replace('-', '_')}":
                    return cls(solver, estimator)
        return None

    @property
    def label(self) -> str:
        return self.solver + (f"@{self.estimator}" if self.estimator else "")

    @property
    def key(self) -> str:
        """The prefix of the run's columns ('cpsat@vela-default' -> 'cpsat_vela_default')."""
        return self.label.replace("@", "_").replace("-", "_")


@dataclass(frozen=True)
class Settings:
    """How every run of a grid is made (as ``solve-schedule``'s flags of the same names)."""

    time_limit_seconds: float = 30.0
    workers: int | None = None
    deterministic: bool = False
    objective: str | None = None
    disabled_rewrites: frozenset[str] = field(default_factory=frozenset)
    compile: bool = False


def columns(specs: Sequence[RunSpec], cores: bool = True) -> list[str]:
    """Every column of a grid's rows, in order."""
    core_columns = [f"{c}_{f}" for c in CORES for f in _CORE_FIELDS] if cores else []
    run_columns = [f"{s.key}_{f}" for s in specs for f in _RUN_FIELDS]
    ratio_columns = [f"{s.key}_{r}" for s in specs for r in _RATIOS] if cores else []
    return [*IDENTITY, *core_columns, *run_columns, *ratio_columns, "seconds"]


def cell(identity: dict[str, Any], model: Path, config: Config, specs: Sequence[RunSpec], settings: Settings,
         cores: dict[str, Any] | None = None, run_cores: bool = True) -> dict[str, Any]:
    """One model under one configuration; ``cores``: both cores' columns from an earlier grid (not run again)."""
    start = time.monotonic()
    row: dict[str, Any] = {**identity, "optimise": "Size" if is_size(config) else "Performance"}
    if cores is not None:
        row.update({k: v for k, v in cores.items() if k.startswith(tuple(CORES)) and v not in (None, "")})
    elif run_cores:
        options = run_options_from_vela_args(model, config)
        for core in CORES:
            row.update({f"{core}_{k}": v for k, v in core_run(options, core).items()})
    for spec in specs:
        row.update({f"{spec.key}_{k}": v for k, v in run_one(model, config, spec, settings).items()})
    row["seconds"] = round(time.monotonic() - start, 1)
    return derive(row, specs)


def run_one(model: Path, config: Config, spec: RunSpec, settings: Settings) -> dict[str, Any]:
    """``spec``'s run of ``model``: its status and figures, or its error as the note."""
    overrides: dict[str, Any] = {"solver": spec.solver, "time_limit_seconds": settings.time_limit_seconds,
                                 "workers": settings.workers, "deterministic": settings.deterministic,
                                 "disabled_rewrites": settings.disabled_rewrites}
    if spec.estimator:
        overrides["estimator"] = spec.estimator
    if settings.objective and spec.solver == "cpsat":
        overrides["objective"] = settings.objective
    if spec.solver == "vela-default":
        # on the graph CP-SAT schedules: the default core's own also runs on the NPU what that one leaves to the
        # CPU (an int16 softmax, NCHW transposes), which would count against it
        overrides["default_core_graph"] = False
    start = time.monotonic()
    try:
        result = run(run_options_from_vela_args(model, config, **overrides))
    except NpuschedError as exc:
        return {"status": "error", "note": " ".join(str(exc).split())[:200]}
    _, evaluation = result.solved()
    totals = result.cycles_by_estimator
    report = result.solver_report
    # a deterministic search the wall clock ended before its work budget differs from run to run: said first
    clock = "stopped by the clock; " if report is not None and report.model_stats.get("stopped_by_clock") else ""
    figures: dict[str, Any] = {
        "status": result.status, "note": (clock + (report.reason if report is not None else ""))[:200],
        **{f"by_{key}": totals[name] for name, key in ESTIMATOR_KEYS.items()},
        "sram": max(evaluation.allocation.size_bytes, evaluation.network_peak_fast_storage),
        "cpu": len(result.network.cpu_ops), "subgraphs": len(result.network.subgraphs),
        "seconds": round(time.monotonic() - start, 1)}
    if settings.compile and spec.solver in ("cpsat", "heuristic", "dp"):
        figures["compiled"] = compile_verdict(result)[0]
    return figures


def compile_verdict(result: RunResult) -> tuple[str, int | None]:
    """Vela's backend compiling ``result`` (``--output-dir``, into a scratch folder): "yes" when Vela's estimate
    agrees and its allocation is within the limit, else why not; and the fast storage Vela's allocator used."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = compile_schedule(result, Path(tmp))
        except NpuschedError as exc:
            return f"refused: {exc}"[:200], None
    verdict = "yes" if done.agreed and done.allocation_fits else \
        "; ".join(done.warnings())[:200] or "allocation over the limit"
    return verdict, done.vela_allocation_bytes


def derive(row: dict[str, Any], specs: Sequence[RunSpec]) -> dict[str, Any]:
    """``row`` with each run's ratios against the cores and its exclusion (the module docstring); idempotent, so
    rows read back from a CSV are derived again."""
    row = dict(row)
    for spec in specs:
        k = spec.key
        for core in CORES:
            row[f"{k}_vs_{core}"] = _rounded(ratio(row.get(f"{k}_by_{core}"), row.get(f"{core}_cycles")))
        both = [row[f"{k}_vs_{core}"] for core in CORES if row[f"{k}_vs_{core}"] != ""]
        row[f"{k}_vs_worse"] = max(both) if len(both) == 2 else ""
        srams = [s for s in (number(row.get(f"{core}_sram")) for core in CORES) if s]
        row[f"{k}_peak_vs_min"] = _rounded(ratio(row.get(f"{k}_sram"), min(srams))) \
            if row.get("optimise") == "Size" and srams else ""
        theirs, ours = number(row.get("default_cpu")), number(row.get(f"{k}_cpu"))
        row[f"{k}_excluded"] = f"default core runs {ours - theirs:.0f} more operators on the NPU" \
            if theirs is not None and ours is not None and theirs < ours else ""
    return row


def _rounded(value: float | None) -> float | str:
    return "" if value is None else round(value, 4)


def with_cores_from(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Both cores' columns of an earlier grid's rows, by (model, style, configuration)."""
    return {(r["model"], r["style"], r["config"]): {k: v for k, v in r.items() if k.startswith(tuple(CORES))}
            for r in rows}


def specs_in(columns: Sequence[str]) -> list[RunSpec]:
    """The runs a grid's columns hold (read back from its CSV)."""
    keys = dict.fromkeys(c[: -len("_status")] for c in columns if c.endswith("_status"))
    return [spec for spec in map(RunSpec.from_key, keys) if spec is not None]


def settings_from(values: dict[str, Any]) -> Settings:
    """``Settings`` from a script's parsed options of the same names (the others ignored)."""
    known = {f: values[f] for f in Settings.__dataclass_fields__ if f in values}
    return replace(Settings(), **known)
