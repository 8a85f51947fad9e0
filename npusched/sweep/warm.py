"""Imported once by the local executor's fork server, so that every cell process starts with npusched loaded."""

import importlib

for _module in ("npusched.sweep.runner", "npusched.app.pipeline", "npusched.solvers.heuristic",
                "npusched.solvers.cpsat.model"):
    try:
        importlib.import_module(_module)
    except Exception:  # noqa: S110 - a module that fails to import fails each cell instead, where it is recorded
        pass
