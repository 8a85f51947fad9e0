"""What an executor tells the driver: a cell started, or finished with its row's measurements."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from npusched.sweep.grid import Cell


@dataclass(frozen=True)
class Started:
    cell: Cell


@dataclass(frozen=True)
class Finished:
    cell: Cell
    result: dict[str, Any]


Event = Started | Finished
# An executor runs the cells (in any order, some at once) and reports each start and finish.
Executor = Callable[[list[Cell]], Generator[Event, None, None]]
# What runs one cell in a worker: `runner.run_cell`, or a stand-in in tests of the executors themselves.
CellWork = Callable[[Cell], dict[str, Any]]
