"""Ratios and their geometric means: how every comparison sums up "how much faster, over how many cells".

A ratio is ours / theirs, so below 1 is better; a cell counts as slower only above ``TOLERANCE`` (rounding in a
summary total is not a loss). The geometric mean is the sweep report's (``npusched.sweep.report.geomean``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from npusched.sweep.report import geomean

__all__ = ["TOLERANCE", "Spread", "geomean", "number", "ratio", "spread"]

TOLERANCE = 1.001


def number(value: object) -> float | None:
    """``value`` as a finite float (a CSV cell, a count, a total), or None (empty, text, NaN)."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def ratio(ours: object, theirs: object) -> float | None:
    """ours / theirs when both are positive numbers, else None (a failed run, a missing total)."""
    a, b = number(ours), number(theirs)
    return a / b if a is not None and b is not None and a > 0 and b > 0 else None


@dataclass(frozen=True)
class Spread:
    """Ratios over a set of cells: their geometric mean, the worst and how many are over the tolerance."""

    count: int
    mean: float
    worst: float
    over: int

    def __str__(self) -> str:
        if not self.count:
            return "-"
        return f"{self.mean:.3f} (worst {self.worst:.3f}; {self.over} over 1; {self.count} cells)"


def spread(values: Iterable[float | None]) -> Spread:
    """The ``Spread`` of the values that are numbers."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    return Spread(len(known), geomean(known), max(known, default=math.nan), sum(v > TOLERANCE for v in known))
