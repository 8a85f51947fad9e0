"""The run behind `solve-schedule --pareto`: load the model, compute its frontier (``solvers.pareto``) and, when
asked, run Vela's legacy core at every limit of it."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from npusched.app.pipeline import architecture, load_network
from npusched.run import RunOptions
from npusched.solvers.pareto import DEFAULT_INNER_POINTS, Log, ParetoRun, VelaPoint, pareto_frontier
from npusched.target.estimators import PricedArchitecture
from npusched.vela.command import VelaError, last_line, run_vela
from npusched.vela.report import read_summary


def run_pareto(options: RunOptions, *, inner_points: int = DEFAULT_INNER_POINTS, with_vela: bool = False,
               log: Log | None = None, started: float | None = None) -> ParetoRun:
    """The frontier of ``options``' model (its arena size is ignored: the frontier varies it) within
    ``options.time_limit_seconds``; then, if ``with_vela``, Vela's legacy core at every limit of it (its runs are
    not counted in the time limit)."""
    started = time.monotonic() if started is None else started
    # The frontier's graph must suit its least limit too: no concatenation write that needs more memory.
    arch, network, _ = load_network(replace(options, arena_cache_size=0))

    def arch_at(limit: int) -> PricedArchitecture:
        return architecture(replace(options, arena_cache_size=limit, optimise="Performance"))

    frontier = pareto_frontier(network, arch_at, arch.max_address_offset, inner_points=inner_points,
                               time_limit_seconds=options.time_limit_seconds, started=started,
                               workers=options.workers, seed=options.seed, deterministic=options.deterministic,
                               log=log)
    vela = vela_points(options, [p.limit_bytes for p in frontier.points], log) if with_vela else ()
    hardware = f"{arch.accelerator_config} {arch.system_config} {arch.memory_mode}"
    return ParetoRun(Path(options.model_path).stem, hardware, frontier, vela)


def vela_points(options: RunOptions, limits: Sequence[int], log: Log | None = None) -> tuple[VelaPoint, ...]:
    """Vela legacy (the `vela` CLI with ``--debug-force-legacy-core``) at each arena size in ``limits``, with the
    hardware of ``options``."""
    points = []
    for limit in limits:
        at_limit = replace(options, arena_cache_size=limit, optimise="Performance")
        points.append(_vela_point(at_limit, limit))
        if log is not None:
            point = points[-1]
            log(f"vela legacy at {limit} bytes: " + (point.error or f"{point.cycles:.0f} cycles, "
                                                                    f"{point.sram_used_bytes} bytes of SRAM used"))
    return tuple(points)


def _vela_point(options: RunOptions, limit: int) -> VelaPoint:
    with tempfile.TemporaryDirectory(prefix="npusched-vela-") as tmp:
        try:
            done = run_vela(options, Path(tmp), core="legacy")
        except VelaError as exc:
            return VelaPoint(limit, error=str(exc))
        summaries = sorted(Path(tmp).glob("*_summary_*.csv"))
        if done.returncode != 0 or not summaries:
            return VelaPoint(limit, error=f"vela exited with status {done.returncode}: {last_line(done)}")
        summary = read_summary(summaries[0])
    # Vela reports the SRAM it allocated in KiB.
    return VelaPoint(limit, float(summary["cycles_total"]), round(float(summary["sram_memory_used"]) * 1024))
