"""The scripts' command lines: a parser whose ``--help`` is the script's own docstring (its usage and what it
measures), and the options every grid of golden configurations takes, spelt the same in every script.
"""

from __future__ import annotations

import argparse

__all__ = ["Options", "add_budget", "add_config", "add_configs", "parser"]

# A parser or one of its argument groups.
Options = argparse._ActionsContainer


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first paragraph, the rest of it (usage, details) after the options."""
    head, _, rest = (doc or "").strip().partition("\n\n")
    return argparse.ArgumentParser(description=" ".join(head.split()), epilog=rest or None,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_configs(parser: Options, default: str | None = None) -> None:
    """``--configs c1,c2``: golden configurations by name, read by ``paths.split_names`` (None: every one)."""
    parser.add_argument("--configs", default=default,
                        help=f"comma-separated golden configurations, or 'all' (default: {default or 'all'})")


def add_config(parser: Options, default: str = "u55-128_hee_shared") -> None:
    """``--config NAME``: the one golden configuration (the hardware) a measurement of one set-up runs on."""
    parser.add_argument("--config", default=default, help="golden configuration (default: %(default)s)")


def add_budget(parser: Options, time_limit: float = 30.0, workers: int | None = None) -> None:
    """CP-SAT's budget, as solve-schedule's flags: ``--time-limit``, ``--workers``, ``--deterministic``."""
    parser.add_argument("--time-limit", type=float, default=time_limit,
                        help="CP-SAT's seconds per run (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=workers, help="CP-SAT's workers (default: %(default)s)")
    parser.add_argument("--deterministic", action="store_true", help="CP-SAT stops after a fixed amount of work")
