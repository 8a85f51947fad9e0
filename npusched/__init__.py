"""npusched: a CP-SAT scheduler for Arm Ethos-U NPUs.

The public Python API is ``solve`` (with ``Hardware``, ``Result``, ``solve_options`` and ``load_schedule``); see
README.md, "From Python". It is loaded on first use: every ``npusched.*`` import runs this file, and the layers
below the API (the reader, the cost model, netgen) must not pull in the solvers, Vela and matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["Hardware", "Result", "__version__", "load_schedule", "solve", "solve_options"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("npusched.app.api"), name)
    raise AttributeError(f"module 'npusched' has no attribute '{name}'")
