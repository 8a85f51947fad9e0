"""The one table writer of the scripts: Markdown (whole, or a row at a time as results come in) and CSV (whole,
or appended a row at a time so that an interrupted grid keeps what it ran, and read back to resume it).

Cells are formatted by ``fmt`` (the sweep report's: ratios to 3 decimals, larger numbers whole) unless a script
passes its own.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from npusched.sweep.report import fmt

__all__ = ["CsvLog", "MarkdownPrinter", "fmt", "key_values", "markdown", "plain", "read_csv", "write_csv"]

Row = dict[str, Any]
Cell = Callable[[str, Any], str]


def _default_cell(_: str, value: Any) -> str:
    return fmt(value)


def plain(_: str, value: Any) -> str:
    """A cell as the row holds it (rounded by its script): floats without trailing zeros, None empty."""
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _line(values: Iterable[str]) -> str:
    return "| " + " | ".join(values) + " |"


def markdown(rows: Iterable[Row], columns: Sequence[str], headers: Sequence[str] | None = None,
             cell: Cell = _default_cell, align: str = "") -> str:
    """A Markdown table of ``rows``' ``columns`` (``headers`` above them); ``align`` gives each column's rule
    ("r" right, "c" centre, anything else left), default all left."""
    return "\n".join([*_head(columns, headers, align), *(_line(cell(c, r.get(c)) for c in columns) for r in rows)])


def _head(columns: Sequence[str], headers: Sequence[str] | None, align: str) -> list[str]:
    rules = {"r": "---:", "c": ":---:"}
    return [_line(headers or columns), "|" + "|".join(rules.get(a, "---") for a in align.ljust(len(columns))) + "|"]


class MarkdownPrinter:
    """A Markdown table printed a row at a time (a long grid shows its results as they come)."""

    def __init__(self, columns: Sequence[str], headers: Sequence[str] | None = None, cell: Cell = _default_cell,
                 align: str = "") -> None:
        self.columns, self.cell = list(columns), cell
        print("\n".join(_head(columns, headers, align)), flush=True)

    def row(self, row: Row) -> None:
        print(_line(self.cell(c, row.get(c)) for c in self.columns), flush=True)


def key_values(row: Row, columns: Iterable[str] | None = None) -> str:
    """A progress line: ``key=value`` for the row's (or ``columns``') keys that it has."""
    return "  ".join(f"{k}={row[k]}" for k in (columns or row) if k in row)


def _columns(rows: Sequence[Row], columns: Sequence[str] | None) -> list[str]:
    return list(columns) if columns is not None else list(dict.fromkeys(k for row in rows for k in row))


def write_csv(path: Path, rows: Sequence[Row], columns: Sequence[str] | None = None) -> None:
    """``rows`` as CSV (``columns``, default every key in first-seen order; other keys left out)."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=_columns(rows, columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _value(text: str) -> Any:
    """A CSV cell as written: whole numbers int, other numbers float, True/False bool, the rest text."""
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_csv(path: Path) -> list[Row]:
    """The rows of a CSV ``write_csv`` or ``CsvLog`` wrote, numbers as numbers (empty cells stay '')."""
    with path.open(newline="") as handle:
        return [{k: _value(v) if v != "" else "" for k, v in row.items()} for row in csv.DictReader(handle)]


class CsvLog:
    """A CSV written a row at a time and flushed, beginning with the rows of an earlier run (``kept``)."""

    def __init__(self, path: Path | None, columns: Sequence[str], kept: Sequence[Row] = ()) -> None:
        self.path, self.columns, self.kept = path, list(columns), list(kept)
        self._handle: TextIO | None = None
        self._writer: csv.DictWriter[str] | None = None

    def __enter__(self) -> CsvLog:
        if self.path is not None:
            self._handle = self.path.open("w", newline="")
            self._writer = csv.DictWriter(self._handle, fieldnames=self.columns, extrasaction="ignore")
            self._writer.writeheader()
            for row in self.kept:
                self.add(row)
        return self

    def add(self, row: Row) -> None:
        if self._writer is not None and self._handle is not None:
            self._writer.writerow(row)
            self._handle.flush()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.close()
