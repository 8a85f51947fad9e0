"""Figures of a store (matplotlib, PNG and SVG): cycles against the fast-storage limit per model and solver, and
box plots of the cycle ratios to a baseline per configuration."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from npusched.sweep.report import case_rows, geomean, key, solvers_in


def write_plots(rows: list[dict[str, Any]], baseline: str, directory: Path) -> list[Path]:
    """Write every figure into ``directory``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    # Reproducible SVGs: the same store gives byte-identical files.
    matplotlib.rcParams.update({"svg.hashsalt": "npusched", "svg.fonttype": "none"})
    directory.mkdir(parents=True, exist_ok=True)
    done = [r for r in rows if r["outcome"] == "done"]
    written = []
    for model in dict.fromkeys(r["model"] for r in done):
        written += _save(_cycles_vs_sram(model, [r for r in done if r["model"] == model]), directory,
                         f"cycles_vs_sram_{model}")
    ratios = _ratio_boxes(rows, baseline)
    if ratios is not None:
        written += _save(ratios, directory, f"ratios_vs_{key(baseline)}")
    return written


def _cycles_vs_sram(model: str, rows: list[dict[str, Any]]) -> Any:
    """One panel per hardware configuration (and optimise strategy): cycles (geomean over seeds) against the
    fast-storage limit, a line per solver."""
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["hardware"], r["optimise"]) for r in rows))
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (name, optimise) in zip(axes[0], panels, strict=True):
        points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for row in rows:
            if (row["hardware"], row["optimise"]) == (name, optimise):
                points[row["solver"]][row["fast_storage_limit_bytes"]].append(row["cycles"])
        for solver in solvers_in(rows):
            if solver in points:
                sizes = sorted(points[solver])
                ax.plot([s / 1024 for s in sizes], [geomean(points[solver][s]) for s in sizes], marker="o",
                        label=solver)
        ax.set_xscale("log", base=2)
        ticks = sorted({size / 1024 for sizes in points.values() for size in sizes})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_title(name if optimise == "Performance" else f"{name} (optimise {optimise})", fontsize=9)
        ax.set_xlabel("fast-storage limit (KiB)")
        ax.set_ylabel("cycles")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(f"{model}: cycles against SRAM")
    figure.tight_layout()
    return figure


def _ratio_boxes(rows: list[dict[str, Any]], baseline: str) -> Any | None:
    """Per configuration, a box per solver of its cycles / the baseline's over the models."""
    import matplotlib.pyplot as plt

    solvers = [s for s in solvers_in(rows) if s != baseline]
    cases = case_rows(rows, baseline)
    configs = list(dict.fromkeys(c["config"] for c in cases))
    if not solvers or not configs:
        return None
    figure, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(configs) * len(solvers)), 4.5))
    width = 0.8 / len(solvers)
    for index, solver in enumerate(solvers):
        column = f"{key(solver)}_vs_{key(baseline)}"
        data = [[c[column] for c in cases if c["config"] == config and c.get(column)] for config in configs]
        positions = [i + (index - (len(solvers) - 1) / 2) * width for i in range(len(configs))]
        kept = [(p, d) for p, d in zip(positions, data, strict=True) if d]
        if not kept:
            continue
        boxes = ax.boxplot([d for _, d in kept], positions=[p for p, _ in kept], widths=width * 0.9,
                           patch_artist=True, manage_ticks=False)
        colour = f"C{index}"
        for patch in boxes["boxes"]:
            patch.set_facecolor(colour)
            patch.set_alpha(0.6)
        ax.plot([], [], color=colour, linewidth=8, alpha=0.6, label=solver)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels(configs, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"cycles / {baseline} cycles")
    ax.set_title(f"Cycle ratios to {baseline} per configuration (one point per model)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    return figure


def _save(figure: Any, directory: Path, stem: str) -> list[Path]:
    import matplotlib.pyplot as plt

    paths = [directory / f"{stem}.png", directory / f"{stem}.svg"]
    figure.savefig(paths[0], dpi=110)
    figure.savefig(paths[1], metadata={"Date": None})
    plt.close(figure)
    return paths
