"""The two Vela cores' own schedules, the floors of every CP-SAT run.

A run's answer counts only if it is no slower than either Vela core, each priced by its own model. So every CP-SAT
run also makes both cores' schedules of the model as Vela reads it (``graph_choice``'s Vela graph: the unconditional
rewrites only, no priced site, no in-place write): Vela legacy's by the heuristic, which reproduces it; the default
core's by running the `vela` CLI in the background while the run prices and lowers, read back by op name
(``npusched.vela.default_core``). Both are evaluated under every estimator, so the report compares them without a
Vela run; both hint the search on that graph, so its answer is never worse than either by the run's objective.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from npusched.errors import NpuschedError, ScheduleError, one_line
from npusched.frontend.op_view import TAUGHT_OPERATORS
from npusched.lowering.graph import Network
from npusched.lowering.luts import GELU_TABLE
from npusched.run import FloorReport, RunOptions
from npusched.schedule.evaluator import Evaluation, evaluate, verify
from npusched.schedule.schedule import Schedule, TensorPlacement
from npusched.solvers.heuristic import heuristic_schedule
from npusched.solvers.max_schedule import vela_tensor_placements
from npusched.target.estimators import Estimator, PricedArchitecture, with_estimator
from npusched.vela.default_core import (
    DefaultCoreOp,
    read_default_core_ops,
    run_default_core,
    schedule_from_default_core,
)
from npusched.vela.report import read_summary

LEGACY = Estimator.VELA_LEGACY.value
DEFAULT = Estimator.VELA_DEFAULT.value


@dataclass(frozen=True)
class Floor:
    """One core's own schedule of the Vela graph, its evaluation under each single model and what the report says
    of it (``report.fits``: it fits the limit and npusched's rules accept it). ``start`` is the schedule a search
    may start from and return: the same decisions with each feature map in the layout Vela legacy's backend gives
    it (the default core lays some maps out otherwise: Vela's backend refuses those)."""

    network: Network
    schedule: Schedule
    by_estimator: dict[str, Evaluation]
    report: FloorReport
    start: Schedule


def legacy_floor(network: Network, arch: PricedArchitecture) -> Floor | ScheduleError:
    """Vela legacy's own schedule (the heuristic, deciding under the legacy model), or the error where Vela stops
    with "Allocation exceeds staging limit" (it names the size that would fit)."""
    legacy = with_estimator(arch, Estimator.VELA_LEGACY)
    try:
        schedule = heuristic_schedule(network, legacy, arch.optimise)
    except ScheduleError as exc:
        return exc
    floor = _floor(LEGACY, network, arch, schedule, "")
    return replace(floor, report=replace(floor.report, taught=taught_operators(network),
                                         cpu_operators=tuple(op.name for op in network.cpu_ops)))


def taught_operators(network: Network) -> tuple[str, ...]:
    """The operators of ``network``'s NPU passes Vela legacy runs only as npusched's bridge teaches it: passes of
    their own, or a GELU's table fused onto the pass before it (its table is named so: ``luts.GELU_TABLE``)."""
    found = {op.tflite_op for op in network.npu_ops if op.tflite_op in TAUGHT_OPERATORS}
    if any(op.activation_lut is not None and op.activation_lut.name.endswith(GELU_TABLE) for op in network.npu_ops):
        found.add("GELU")
    return tuple(sorted(found))


class DefaultCoreRun:
    """The `vela` CLI's default core on a model, started now in the background (a subprocess: the run goes on),
    its schedule read back by :meth:`floor`. ``timeout_seconds`` bounds the CLI."""

    def __init__(self, options: RunOptions, model_bytes: bytes, timeout_seconds: float) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="npusched-vela-default-")
        model_path = Path(self._tmp.name) / Path(options.model_path).name
        model_path.write_bytes(model_bytes)
        self.timeout_seconds = timeout_seconds
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._future = self._executor.submit(self._ops, replace(options, model_path=model_path))
        self._answer: tuple[list[DefaultCoreOp] | None, str] | None = None
        self.own_cycles: float | None = None  # the default core's own total (its summary), once it has run

    def _ops(self, options: RunOptions) -> tuple[list[DefaultCoreOp], float | None]:
        output = Path(self._tmp.name) / "output"
        ops = read_default_core_ops(run_default_core(options, output, self.timeout_seconds))
        summaries = sorted(output.glob("*_summary_*.csv"))
        return ops, float(read_summary(summaries[0])["cycles_total"]) if summaries else None

    def ops(self) -> tuple[list[DefaultCoreOp] | None, str]:
        """The default core's scheduled ops, or None and why there are none (Vela missing, failing, too slow)."""
        if self._answer is None:
            try:
                ops, self.own_cycles = self._future.result()
                self._answer = ops, ""
            except subprocess.TimeoutExpired:
                self._answer = None, f"the vela CLI did not finish within {self.timeout_seconds:.0f} s"
            except (NpuschedError, OSError) as exc:
                self._answer = None, str(exc)
            except Exception as exc:  # noqa: BLE001 - a floor is a bonus: whatever stops it is its reason
                self._answer = None, f"its output could not be read ({type(exc).__name__}: {one_line(str(exc))[:200]})"
            finally:
                self._executor.shutdown(wait=True)
                self._tmp.cleanup()
        return self._answer

    def schedule_onto(self, network: Network, arch: PricedArchitecture) -> Schedule | None:
        """The default core's decisions read onto another graph of the same model (npusched's own, where its
        passes have the same names), as a start for the search there; None where there are none (or they cannot
        be read onto it: a start is a bonus)."""
        ops, _ = self.ops()
        if ops is None:
            return None
        try:
            imported = schedule_from_default_core(network, with_estimator(arch, Estimator.VELA_DEFAULT), ops)
            return with_vela_formats(imported.schedule, network, arch)
        except Exception:  # noqa: BLE001 - whatever the read-back trips on, the search starts from the others
            return None

    def floor(self, network: Network, arch: PricedArchitecture) -> tuple[Floor | None, str]:
        """The default core's schedule read onto ``network`` (Vela legacy's graph), or None and why."""
        ops, why = self.ops()
        if ops is None:
            return None, why
        try:
            imported = schedule_from_default_core(network, with_estimator(arch, Estimator.VELA_DEFAULT), ops)
            if network.npu_ops and not imported.matched:
                return None, (f"none of the {len(network.npu_ops)} passes pairs with one of the default core's "
                              f"{len(ops)} operations")
            note = f"{len(imported.warnings)} decision(s) npusched cannot express as the default core made them" \
                if imported.warnings else ""
            floor = _floor(DEFAULT, network, arch, imported.schedule, note)
            start = with_vela_formats(imported.schedule, network, arch)
        except Exception as exc:  # noqa: BLE001 - a floor is a bonus: the run goes on without it, and says why
            return None, f"its schedule could not be read back ({type(exc).__name__}: {one_line(str(exc))[:200]})"
        cpu = _left_to_the_cpu(network, {core_op.name for core_op in ops})
        return replace(floor, report=replace(floor.report, own_cycles=self.own_cycles, cpu_operators=cpu),
                       start=start), ""


def _left_to_the_cpu(network: Network, names: set[str]) -> tuple[str, ...]:
    """The operators of ``network`` (Vela legacy's graph) left on the CPU that the default core, whose operations
    are ``names``, leaves on the CPU too: it runs one it names by the operator's output (or by that name and a
    suffix, where it decomposes the operator), or, for a reshape it removes, by the name of the map it reads."""
    kept = []
    for op in network.cpu_ops:
        runs = op.name in names or any(name.startswith(f"{op.name}_") for name in names)
        if op.tflite_op in _RESHAPES:
            runs = runs or any(fm.name in names for fm in op.inputs)
        if not runs:
            kept.append(op.name)
    return tuple(kept)


_RESHAPES = frozenset({"RESHAPE", "EXPAND_DIMS", "SQUEEZE"})


def _floor(name: str, network: Network, arch: PricedArchitecture, schedule: Schedule, note: str) -> Floor:
    by_estimator = {estimator.value: evaluate(network, with_estimator(arch, estimator), schedule)
                    for estimator in Estimator.single()}
    legacy = by_estimator[LEGACY]
    problems = verify(network, with_estimator(arch, Estimator.VELA_LEGACY), schedule, legacy)
    report = FloorReport(name, {key: e.total_cycles for key, e in by_estimator.items()}, legacy.peak_fast_storage,
                         max(legacy.allocation.size_bytes, legacy.network_peak_fast_storage), fits=not problems,
                         note=problems[0] if problems else note)
    return Floor(network, schedule, by_estimator, report, schedule)


def with_vela_formats(schedule: Schedule, network: Network, arch: PricedArchitecture) -> Schedule:
    """``schedule`` with every feature map laid out as Vela legacy's scheduler lays it out (its memory kept), and
    placed as Vela places it where ``schedule`` says nothing (a map of npusched's graph the read-back did not pair
    with one of the default core's: a softmax band's)."""
    vela = dict(vela_tensor_placements(network, arch))
    given = dict(schedule.tensors)
    kept = tuple((fm, TensorPlacement(place.mem_area, vela[fm].format if fm in vela else place.format))
                 for fm, place in schedule.tensors)
    return replace(schedule, tensors=kept + tuple((fm, place) for fm, place in vela.items() if fm not in given))
