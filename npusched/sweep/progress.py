"""Live progress of a sweep (a tqdm bar: cells finished, failed, running, ETA) and its one-line summary.

Progress goes to stdout like `solve-schedule`'s; stderr carries only errors.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm


@dataclass(frozen=True)
class SweepSummary:
    """How a sweep went: ``skipped`` cells were in the store already; ``interrupted`` if it stopped early."""

    cells: int
    skipped: int
    done: int
    failed: int
    seconds: float
    interrupted: bool = False

    def line(self, store: str) -> str:
        state = "interrupted" if self.interrupted else "finished"
        left = self.cells - self.skipped - self.done - self.failed
        tail = f", {left} left (rerun to resume)" if left else ""
        return (f"sweep {state}: {self.cells} cells: {self.done} run, {self.failed} failed, {self.skipped} already "
                f"in the store{tail}; {self.seconds:.1f} s -> {store}")


class Progress:
    """The bar over the cells to run; failures are printed above it as they happen."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.quiet = quiet
        self.done = self.failed = self.running = 0
        self.bar: Any = tqdm(total=total, unit="cell", file=sys.stdout, disable=quiet, dynamic_ncols=True,
                             desc="sweep")

    def started(self) -> None:
        self.running += 1
        self._show()

    def finished(self, label: str, result: dict[str, Any]) -> None:
        self.running -= 1
        if result.get("outcome") == "done":
            self.done += 1
        else:
            self.failed += 1
            if not self.quiet:
                self.bar.write(f"failed: {label}: {result.get('status')}: {result.get('error')}", file=sys.stdout)
        self._show()
        self.bar.update(1)

    def _show(self) -> None:
        self.bar.set_postfix_str(f"done={self.done} failed={self.failed} running={self.running}", refresh=False)

    def close(self) -> None:
        self.bar.close()
