"""Where the repository's data is: the corpus, the golden Vela output and its configurations.

The scripts run from a checkout with npusched installed from it (``pip install -e .``), so the repository is the
package's parent when that holds ``tests/data``, else the first folder at or above the working directory that
does; a script that takes a data or model folder passes it instead. Nothing here edits ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from npusched.errors import ConfigError

_DATA = Path("tests") / "data"
# The golden output of each Vela core (tests/data/golden/README.md).
GOLDEN_CORES = {"legacy": "vela-5.2.0-legacy", "default": "vela-5.2.0-regor"}


def repo_root(start: Path | None = None) -> Path:
    """The checkout whose ``tests/data`` the scripts read: the installed package's, else ``start``'s (default: the
    working directory) or the first folder above it with one."""
    package_parent = Path(__file__).resolve().parents[2]
    if start is None and (package_parent / _DATA).is_dir():
        return package_parent
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / _DATA).is_dir():
            return folder
    raise ConfigError(f"no {_DATA} at or above {here}: run from a checkout of npusched")


def data_dir(root: Path | None = None) -> Path:
    """``tests/data`` of the checkout (``root``, else ``repo_root()``)."""
    return (root or repo_root()) / _DATA


def corpus_dir(root: Path | None = None) -> Path:
    return data_dir(root) / "corpus"


def zoo_dir(root: Path | None = None) -> Path:
    """The zoo of real converter exports (docs/zoo.md)."""
    return data_dir(root) / "exports"


def configs_path(root: Path | None = None) -> Path:
    """The golden configurations, ``tests/data/golden/configs.json``."""
    return data_dir(root) / "golden" / "configs.json"


def golden_dir(core: str = "legacy", root: Path | None = None) -> Path:
    """The golden output of Vela 5.2.0's ``core`` ("legacy" or "default"): one folder per configuration, then one
    per model."""
    return data_dir(root) / "golden" / GOLDEN_CORES[core]


def corpus_models(names: Iterable[str] | None = None, directory: Path | None = None) -> list[Path]:
    """The corpus's ``.tflite`` files (of ``directory``, default the checkout's corpus), sorted by name, or those
    named (in that order); a ``ConfigError`` names one that is missing."""
    folder = directory or corpus_dir()
    if names is None:
        return sorted(folder.glob("*.tflite"))
    paths = [folder / f"{name}.tflite" for name in names]
    missing = [path.stem for path in paths if not path.is_file()]
    if missing:
        raise ConfigError(f"no model {', '.join(missing)} in {folder}")
    return paths


def split_names(text: str | None) -> list[str] | None:
    """A comma-separated option's names (None when the option was not given: every one)."""
    return None if text is None else [name for name in text.split(",") if name]
