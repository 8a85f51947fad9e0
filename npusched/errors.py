"""Errors that reach the user as one line (`error: ...`, exit status 2)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


class NpuschedError(Exception):
    """Base of every error caused by the user's input rather than by a bug."""


class ModelError(NpuschedError):
    """The model file cannot be read or is not a valid TFLite flatbuffer."""


class ConfigError(NpuschedError):
    """A hardware configuration (.ini file, system config, memory mode, accelerator) is unknown or invalid."""


class ScheduleError(NpuschedError):
    """No schedule meets the constraints (for example the fast-storage limit). ``needed_bytes`` is the smallest
    fast storage a schedule was found to fit in, when the solver determined it."""

    def __init__(self, message: str, needed_bytes: int | None = None) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes


class StagingLimitError(ScheduleError):
    """Where Vela's legacy scheduler stops too ("Allocation exceeds staging limit"), so its reproduction does."""


class OutputError(NpuschedError):
    """An output file cannot be written where the user asked (a directory, an input file, a full disk)."""


def one_line(text: str) -> str:
    return " ".join(text.split())


def exit_status(command: Callable[[], int], about: str = "") -> int:
    """Run a command-line tool's ``command`` and turn whatever stops it into one `error: ...` line on stderr
    and an exit status: 2 for bad input (and, unless NPUSCHED_DEBUG is set, for a bug: still no traceback), 130
    when interrupted, 0 when the reader of a pipe has seen enough. ``about`` names the input in internal errors."""
    try:
        return command()
    except NpuschedError as exc:
        sys.stderr.write(f"error: {one_line(str(exc))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:  # `... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug, or input we failed to classify
        if os.environ.get("NPUSCHED_DEBUG"):
            raise
        on = f" on {about}" if about else ""
        sys.stderr.write(f"error: internal error{on}: {type(exc).__name__}: {one_line(str(exc))} "
                         "(set NPUSCHED_DEBUG=1 for a traceback)\n")
        return 2
