"""Errors that reach the user as one line (`error: ...`, exit status 2)."""


class NpuschedError(Exception):
    """Base of every error caused by the user's input rather than by a bug."""


class ModelError(NpuschedError):
    """The model file cannot be read or is not a valid TFLite flatbuffer."""


class ConfigError(NpuschedError):
    """A hardware configuration (.ini file, system config, memory mode, accelerator) is unknown or invalid."""


class ScheduleError(NpuschedError):
    """No schedule meets the constraints (for example the fast-storage limit)."""


class StagingLimitError(ScheduleError):
    """Where Vela's legacy scheduler stops too ("Allocation exceeds staging limit"), so its reproduction does."""


class OutputError(NpuschedError):
    """An output file cannot be written where the user asked (a directory, an input file, a full disk)."""
