"""The results store: one SQLite row per cell, written by the sweep's driver only (schema in docs/guide/sweep.md).

WAL mode and one transaction per finished cell: a killed driver loses at most the cells in flight (they have no
row yet) and never leaves a half-written row; readers (``report``, pandas) can read while a sweep writes.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npusched.errors import NpuschedError
from npusched.sweep.grid import Cell

SCHEMA_VERSION = 1

# Input columns, copied from the cell; then the measured columns a runner may fill.
INPUT_COLUMNS = {
    "cell_id": "TEXT PRIMARY KEY", "model": "TEXT NOT NULL", "model_path": "TEXT NOT NULL",
    "model_sha256": "TEXT NOT NULL", "hardware": "TEXT NOT NULL", "configuration": "TEXT NOT NULL",
    "accelerator_config": "TEXT NOT NULL", "system_config": "TEXT", "memory_mode": "TEXT",
    "config_files": "TEXT NOT NULL", "config_sha256": "TEXT NOT NULL", "arena_cache_size": "INTEGER",
    "optimise": "TEXT NOT NULL", "solver": "TEXT NOT NULL", "time_limit_seconds": "REAL", "seed": "INTEGER",
    "workers": "INTEGER", "npusched_version": "TEXT NOT NULL", "vela_version": "TEXT NOT NULL",
    "ortools_version": "TEXT NOT NULL",
}
RESULT_COLUMNS = {
    "outcome": "TEXT NOT NULL", "status": "TEXT NOT NULL", "cycles": "REAL", "npu_cycles": "REAL",
    "bound_cycles": "REAL", "gap": "REAL", "heuristic_cycles": "REAL", "peak_fast_storage_bytes": "INTEGER",
    "fast_storage_limit_bytes": "INTEGER", "bytes_sram": "REAL", "bytes_dram": "REAL",
    "bytes_onchipflash": "REAL", "bytes_offchipflash": "REAL", "load_seconds": "REAL", "solve_seconds": "REAL",
    "wall_seconds": "REAL", "error": "TEXT", "details": "TEXT", "host": "TEXT",
}
BOOK_COLUMNS = {"sweep_id": "TEXT NOT NULL", "attempt": "INTEGER NOT NULL", "finished_at": "TEXT NOT NULL"}
COLUMNS = {**INPUT_COLUMNS, **RESULT_COLUMNS, **BOOK_COLUMNS}

_VERSION_COLUMNS = {"npusched": "npusched_version", "ethos-u-vela": "vela_version", "ortools": "ortools_version"}


class StoreError(NpuschedError):
    """The store file cannot be opened, or is not an npusched sweep store."""


@dataclass(frozen=True)
class Store:
    """An open store; ``sweep_id`` names the invocation that writes through it."""

    path: Path
    connection: sqlite3.Connection
    sweep_id: str


def open_store(path: Path, *, create: bool = True) -> Store:
    """Open (and, for a sweep, create) the store; raises StoreError for a file that is not one."""
    if not create and not path.is_file():
        raise StoreError(f"store {path} does not exist")
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a commit survives a killed process
        if create:
            _create_schema(connection)
        _check_schema(connection, path)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a usable SQLite store: {exc}") from None
    return Store(path=path, connection=connection, sweep_id=uuid.uuid4().hex[:16])


def _create_schema(connection: sqlite3.Connection) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
    with _transaction(connection):
        connection.execute(f"CREATE TABLE IF NOT EXISTS cells ({columns})")
        connection.execute("CREATE TABLE IF NOT EXISTS sweeps (sweep_id TEXT PRIMARY KEY, started_at TEXT NOT NULL,"
                           " command TEXT NOT NULL, cells INTEGER NOT NULL)")
        connection.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        connection.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


def _check_schema(connection: sqlite3.Connection, path: Path) -> None:
    try:
        row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:
        row = None
    if row is None or row[0] != str(SCHEMA_VERSION):
        raise StoreError(f"{path} is not an npusched sweep store (schema version {SCHEMA_VERSION})")


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): one atomic write."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> None:
        self.connection.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        self.connection.execute("COMMIT" if kind is None else "ROLLBACK")


def begin_sweep(store: Store, command: str, cells: int) -> None:
    """Record the invocation (what was asked, when), so rows can be traced to the sweep that wrote them."""
    with _transaction(store.connection):
        store.connection.execute("INSERT INTO sweeps VALUES (?, ?, ?, ?)",
                                 (store.sweep_id, _now(), command, cells))


def settled_ids(store: Store, cell_ids: Iterable[str], *, retry_failed: bool) -> set[str]:
    """The cells a rerun skips: every cell with a row, or only the done ones with ``retry_failed``."""
    wanted = set(cell_ids)
    query = "SELECT cell_id FROM cells" + (" WHERE outcome = 'done'" if retry_failed else "")
    return {cell_id for (cell_id,) in store.connection.execute(query) if cell_id in wanted}


def record(store: Store, cell: Cell, result: dict[str, Any]) -> None:
    """Write one finished cell in one transaction; a retried cell's row is replaced and its attempt counted."""
    values = input_values(cell)
    values.update({name: result.get(name) for name in RESULT_COLUMNS})
    values.update(sweep_id=store.sweep_id, attempt=1, finished_at=_now())
    names = list(COLUMNS)
    updates = ", ".join(f"{name} = excluded.{name}" for name in names if name not in ("cell_id", "attempt"))
    sql = (f"INSERT INTO cells ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
           f"ON CONFLICT(cell_id) DO UPDATE SET {updates}, attempt = cells.attempt + 1")
    with _transaction(store.connection):
        store.connection.execute(sql, [values[name] for name in names])


def input_values(cell: Cell) -> dict[str, Any]:
    values: dict[str, Any] = {name: getattr(cell, name) for name in INPUT_COLUMNS
                              if name not in ("config_files", *_VERSION_COLUMNS.values())}
    values["cell_id"] = cell.cell_id
    values["model"] = cell.model
    values["config_files"] = json.dumps(list(cell.config_files))
    versions = dict(cell.versions)
    values.update({column: versions.get(package, "absent") for package, column in _VERSION_COLUMNS.items()})
    return values


def rows(store: Store, where: str = "", parameters: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """The store's cell rows as dicts (``where``: an SQL condition over the columns)."""
    cursor = store.connection.execute("SELECT * FROM cells" + (f" WHERE {where}" if where else "")
                                      + " ORDER BY rowid", parameters)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]


def _now() -> str:
    """UTC time to the millisecond, ISO 8601."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
