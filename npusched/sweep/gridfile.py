"""Grid files: the sweep's flags as a YAML or TOML document (format in docs/guide/sweep.md).

Keys are the long flags' names ('-' or '_' alike); a list or a single value where the flag takes several.
``configurations`` lists named hardware configurations instead of the accelerator x system x memory-mode product.
Relative paths (models, config files, the store) are relative to the grid file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from npusched.sweep.grid import GridError, HardwareConfig, parse_size_bytes

LIST_KEYS = ("models", "accelerator_config", "config", "system_config", "memory_mode", "arena_cache_size",
             "optimise", "solver")
SCALAR_KEYS = ("time_limit", "seeds", "jobs", "workers", "cell_timeout", "store", "executor", "ray_address",
               "retry_failed", "quiet")
_CONFIGURATION_KEYS = ("name", "accelerator_config", "system_config", "memory_mode", "config", "arena_cache_size",
                       "optimise")


def load_grid_file(path: Path) -> dict[str, Any]:
    """The file's settings, keyed like argparse's namespace; lists for LIST_KEYS, plus 'configurations'."""
    document = _parse(path)
    if not isinstance(document, dict):
        raise GridError(f"grid file {path}: expected a mapping of option names to values")
    base = path.parent
    settings: dict[str, Any] = {}
    for raw_key, value in document.items():
        name = str(raw_key).replace("-", "_")
        name = {"solvers": "solver", "configs": "config"}.get(name, name)
        if name in LIST_KEYS:
            settings[name] = _as_list(value)
        elif name in SCALAR_KEYS:
            settings[name] = value
        elif name == "configurations":
            settings[name] = tuple(_configuration(path, entry) for entry in _as_list(value))
        else:
            raise GridError(f"grid file {path}: unknown key '{raw_key}' (see docs/guide/sweep.md)")
    if "models" in settings:
        settings["models"] = [_relative(base, m) for m in settings["models"]]
    if "config" in settings:
        settings["config"] = [_config_file(base, c) for c in settings["config"]]
    if "store" in settings:
        settings["store"] = _relative(base, settings["store"])
    return settings


def _parse(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise GridError(f"cannot read grid file {path}: {exc.strerror}") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise GridError(f"grid file {path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise GridError(f"grid file {path} is not valid TOML: {exc}") from None
    raise GridError(f"grid file {path}: expected a .yaml, .yml or .toml file")


def _configuration(path: Path, entry: Any) -> HardwareConfig:
    if not isinstance(entry, dict) or "accelerator_config" not in {str(k).replace("-", "_") for k in entry}:
        raise GridError(f"grid file {path}: each configuration needs at least an accelerator_config")
    values = {str(k).replace("-", "_"): v for k, v in entry.items()}
    unknown = [k for k in values if k not in _CONFIGURATION_KEYS]
    if unknown:
        raise GridError(f"grid file {path}: unknown configuration key '{unknown[0]}'")
    system, mode = values.get("system_config"), values.get("memory_mode")
    files = tuple(_config_file(path.parent, f) for f in _as_list(values.get("config", ())))
    name = values.get("name") or "/".join(str(p) for p in (values["accelerator_config"], system, mode) if p)
    return HardwareConfig(
        name=str(name), accelerator_config=str(values["accelerator_config"]), system_config=system,
        memory_mode=mode, config_files=files or (("Arm/vela.ini",) if system or mode else ()),
        arena_cache_sizes=tuple(parse_size_bytes(s) for s in _as_list(values.get("arena_cache_size", ()))),
        optimise=tuple(str(o) for o in _as_list(values.get("optimise", ()))),
    )


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _config_file(base: Path, value: Any) -> str:
    """A config file beside the grid file, else the name as Vela resolves it ('Arm/vela.ini' is packaged)."""
    beside = _relative(base, value)
    return str(beside) if beside.is_file() else str(value)


def _relative(base: Path, value: Any) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else base / path
