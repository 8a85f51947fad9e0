"""npusched from Python: one call from a model file to a verified, evaluated schedule, for notebooks and
research scripts.

    import npusched
    result = npusched.solve("model.tflite", npusched.Hardware("ethos-u55-128", system_config=..., memory_mode=...),
                            solver="cpsat", time_limit_seconds=30)
    result.cycles, result.peak_fast_storage_bytes, result.document(), result.plot_memory("memory.png")

Every figure comes from the evaluator, as on the command line (which calls the same pipeline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npusched.app.pipeline import run
from npusched.app.replay import compile_as_deployed, replay
from npusched.io.plots import plot_memory
from npusched.io.report_json import document, write_json
from npusched.io.report_text import format_summary
from npusched.lowering.graph import Network
from npusched.run import Hardware, ObjectiveKind, RunOptions, RunResult
from npusched.schedule.evaluator import Evaluation
from npusched.schedule.memory_breakdown import memory_breakdown
from npusched.schedule.schedule import Schedule
from npusched.target.estimators import Estimator
from npusched.vela.backend import BackendResult, compile_schedule


@dataclass(frozen=True)
class Result:
    """A finished run with the views a notebook wants; ``run`` is the record the reports are made from."""

    run: RunResult

    @property
    def schedule(self) -> Schedule:
        return self.run.solved()[0]

    @property
    def evaluation(self) -> Evaluation:
        return self.run.solved()[1]

    @property
    def network(self) -> Network:
        return self.run.network

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def cycles(self) -> float:
        """Estimated inference cycles under the run's estimator."""
        return self.evaluation.total_cycles

    @property
    def cycles_by_estimator(self) -> dict[str, float]:
        return dict(self.run.cycles_by_estimator)

    @property
    def peak_fast_storage_bytes(self) -> int:
        return self.evaluation.peak_fast_storage

    def document(self) -> dict[str, Any]:
        """The JSON schedule document (docs/guide/schedule-format.md) as a dict."""
        return document(self.run)

    def write_json(self, path: str | Path) -> None:
        write_json(self.run, Path(path))

    def summary(self, per_layer: bool = True) -> str:
        """The text `solve-schedule` prints."""
        return format_summary(self.run, per_layer=per_layer)

    def plot_memory(self, path: str | Path) -> None:
        """Fast storage per step, stacked by what holds it (.png or .svg)."""
        schedule, evaluation = self.run.solved()
        plot_memory(memory_breakdown(self.network, schedule, evaluation), evaluation.staging_limit,
                    f"{self.network.name}: fast storage per step ({self.run.options.solver})", Path(path))

    def compile(self, output_dir: str | Path) -> BackendResult:
        """Compile the schedule with Vela's backend into ``output_dir`` (what `--output-dir` does)."""
        return compile_as_deployed(self.run, lambda run: compile_schedule(run, Path(output_dir)))


def solve(model: str | Path, hardware: Hardware | None = None, *, solver: str = "cpsat",
          optimise: str = "Performance", time_limit_seconds: float = 30.0, workers: int | None = None,
          seed: int = 0, deterministic: bool = False, estimator: str = Estimator.VELA_LEGACY.value,
          objective: str = ObjectiveKind.BOTH.value, compile_follows: bool = False,
          log: Callable[[str], None] | None = None) -> Result:
    """Schedule ``model`` on ``hardware`` (default: an ethos-u55-256 with Vela's internal defaults).

    ``solver`` is 'cpsat', 'heuristic' (Vela legacy's choices) or 'dp'; ``objective`` what CP-SAT minimises
    ('both' Vela cores' models, or 'estimator', ``estimator``'s alone); bad input raises a subclass of
    ``npusched.errors.NpuschedError`` with a one-line message. With ``compile_follows`` the time limit also covers
    a ``Result.compile`` made right after: the search keeps back Vela's estimated compile time, as --output-dir.
    """
    options = RunOptions.on(Path(model), hardware or Hardware(), optimise=optimise, solver=solver,
                            time_limit_seconds=time_limit_seconds, workers=workers, seed=seed,
                            deterministic=deterministic, estimator=estimator, objective=objective,
                            compile_follows=compile_follows)
    return solve_options(options, log)


def solve_options(options: RunOptions, log: Callable[[str], None] | None = None) -> Result:
    """`solve` for a ready ``RunOptions`` (a sweep cell's, or a golden configuration's)."""
    return Result(run(options, log=log))


def load_schedule(options: RunOptions, path: str | Path) -> Result:
    """A schedule document written by `--json`, read back on the model and hardware of ``options``, evaluated and
    verified."""
    return Result(replay(options, Path(path)))
