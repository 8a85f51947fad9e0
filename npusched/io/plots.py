"""Figures of one model (matplotlib; PNG or SVG by the file's suffix): the cycles-vs-fast-storage frontier and
fast-storage use over the steps of a schedule."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npusched.errors import OutputError
from npusched.schedule.memory_breakdown import PARTS, MemoryBreakdown
from npusched.solvers.pareto import ParetoRun

SUFFIXES = (".png", ".svg")
_PART_COLOURS = ("tab:blue", "tab:orange", "tab:green")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    # Reproducible SVGs: the same figure gives byte-identical files.
    matplotlib.rcParams.update({"svg.hashsalt": "npusched", "svg.fonttype": "none", "svg.id": "npusched"})
    import matplotlib.pyplot as plt

    return plt


def _save(figure: Any, paths: Sequence[Path], option: str) -> None:
    plt = _pyplot()
    try:
        for path in paths:
            if path.suffix.lower() not in SUFFIXES:
                raise OutputError(f"{option} {path}: the suffix must be .png or .svg")
            path.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(path, dpi=120, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        plt.close(figure)


def plot_pareto(run: ParetoRun, paths: Sequence[Path]) -> None:
    """Cycles against the fast storage a schedule needs: npusched's frontier as a staircase (each point at the
    peak of its schedule, which then holds at every larger limit up to the last tried) and, when run, Vela legacy
    at the SRAM it used with each arena size (hollow where that is more than the arena it was given)."""
    plt = _pyplot()
    frontier = run.frontier
    figure, ax = plt.subplots(figsize=(7, 4.2))
    kept = frontier.frontier
    kib = [p.peak_fast_storage_bytes / 1024 for p in kept]
    cycles = [p.cycles for p in kept]
    top_kib = frontier.points[-1].limit_bytes / 1024
    ax.plot([*kib, top_kib], [*cycles, cycles[-1]], drawstyle="steps-post", color="tab:blue", alpha=0.6)
    ax.plot(kib, cycles, "o", color="tab:blue", label="npusched CP-SAT (verified)")
    within = [v for v in run.vela if not v.error and v.sram_used_bytes <= v.limit_bytes]
    over = [v for v in run.vela if not v.error and v.sram_used_bytes > v.limit_bytes]
    if within:
        ax.plot([v.sram_used_bytes / 1024 for v in within], [v.cycles for v in within], "s", color="tab:red",
                label="Vela legacy, arena = each limit")
    if over:
        ax.plot([v.sram_used_bytes / 1024 for v in over], [v.cycles for v in over], "s", mfc="none",
                color="tab:red", label="Vela legacy, over its arena")
    failed = [v for v in run.vela if v.error]
    if failed:
        sizes = ", ".join(f"{v.limit_bytes / 1024:.4g}" for v in failed)
        ax.text(0.99, 0.98, f"Vela legacy failed with arenas of {sizes} KiB", transform=ax.transAxes, ha="right",
                va="top", fontsize=8, color="tab:red")
    if kib[0] > 0 and top_kib / kib[0] > 4:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ticks = _spread([*kib, top_kib])
        ax.set_xticks(ticks, [f"{t:.4g}" for t in ticks])
    ax.set_xlabel("fast storage used (KiB)")
    ax.set_ylabel("cycles")
    # The differences are a few percent of the total: the axis does not start at zero, the right one says how far
    # above the fastest point a cycle count is.
    fastest = min(p.cycles for p in frontier.points)
    right = ax.secondary_yaxis("right", functions=(lambda c: c / fastest, lambda r: r * fastest))
    right.set_ylabel("× the fastest point")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(f"{run.model_name}: cycles against fast storage\n{run.hardware}", fontsize=10)
    figure.tight_layout()
    _save(figure, paths, "--pareto")


def _spread(values: Sequence[float]) -> list[float]:
    """The tick values among ``values`` (ascending) at least ~15% apart on a log axis (close ones would
    overprint)."""
    ticks: list[float] = []
    for value in values:
        if not ticks or value / ticks[-1] >= 1.15:
            ticks.append(value)
    return ticks


def plot_memory(breakdowns: Sequence[MemoryBreakdown], limit_bytes: int, title: str, path: Path) -> None:
    """Fast-storage use per step, one panel per NPU subgraph, stacked by what holds it, with the limit drawn and
    the peak step named."""
    plt = _pyplot()
    figure, axes = plt.subplots(len(breakdowns), 1, figsize=(9, 3.6 * len(breakdowns)), squeeze=False)
    for ax, memory in zip(axes[:, 0], breakdowns, strict=True):
        steps = range(len(memory.total))
        bottom = [0.0] * len(memory.total)
        for name, values, colour in zip(PARTS, memory.parts, _PART_COLOURS, strict=True):
            ax.bar(steps, [v / 1024 for v in values], width=1.0, bottom=bottom, label=name, color=colour,
                   linewidth=0)
            bottom = [b + v / 1024 for b, v in zip(bottom, values, strict=True)]
        total = memory.total
        peak = max(total, default=0)
        # A limit far above the use (Vela's default arena is the whole address space) would flatten the bars.
        limit_shown = limit_bytes <= 2 * max(peak, 1)
        label = f"limit ({_size(limit_bytes)}{'' if limit_shown else ', off the chart'})"
        if limit_shown:
            ax.axhline(limit_bytes / 1024, color="tab:red", linestyle="--", linewidth=1, label=label)
        else:
            ax.plot([], [], " ", label=label)
        if peak > 0:
            peak_step = max(steps, key=lambda t: total[t])
            names = memory.op_at_step.get(peak_step) or memory.op_at_step.get(peak_step - 1, ())
            where = f" at {_shorten(names)}" if names else ""
            ax.annotate(f"peak {total[peak_step]} bytes{where}", (peak_step, total[peak_step] / 1024),
                        xytext=(0, 6), textcoords="offset points", fontsize=8,
                        ha="left" if peak_step < len(total) / 3 else "right" if peak_step > 2 * len(total) / 3
                        else "center")
        ax.set_ylim(0, max(peak, limit_bytes if limit_shown else 0) / 1024 * 1.15 or 1)
        ax.set_xlim(-0.5, len(total) - 0.5)
        ax.set_xlabel("step (each pass, or cascade of passes, takes two)")
        ax.set_ylabel("fast storage (KiB)")
        ax.set_title(f"{title} — subgraph {memory.subgraph}" if len(breakdowns) > 1 else title, fontsize=10)
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    _save(figure, [path], "--plot-memory")


def _size(size_bytes: int) -> str:
    """A byte count in the largest binary unit that keeps it at least 1 (KiB at least)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.4g} {unit}"
    return f"{size_bytes / 1024:.4g} KiB"


def _shorten(names: Sequence[str], width: int = 40) -> str:
    """The pass at a step (TFLite tensor names are long paths: their end is kept), or the cascade's last."""
    last = names[-1] if len(names[-1]) <= width else f"…{names[-1][-width:]}"
    return last if len(names) == 1 else f"the cascade of {len(names)} ending at {last}"
