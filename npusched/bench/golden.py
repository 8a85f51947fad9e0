"""The golden configurations (``tests/data/golden/configs.json``): the five hardware set-ups the corpus's golden
Vela output was made with, and every comparison's grid.

An entry names Vela's accelerator, system config and memory mode, and Vela's extra arguments (``--optimise Size``,
``--arena-cache-size N``). ``npusched.vela.command`` turns one into ``RunOptions``
(``run_options_from_vela_args``) or command-line arguments (``vela_hardware_args``): they are re-exported here
under those names so that a script finds them beside the loading. The sweep's form and the golden totals are here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npusched.bench.paths import configs_path, golden_dir
from npusched.errors import ConfigError
from npusched.sweep.grid import HardwareConfig
from npusched.vela.command import run_options_from_vela_args, vela_hardware_args
from npusched.vela.report import read_summary

__all__ = ["Config", "config", "constrained", "is_size", "legacy_total", "load_configs", "run_options_from_vela_args",
           "select", "size_variant", "sweep_configuration", "vela_hardware_args", "without_arena"]

Config = dict[str, Any]


def load_configs(path: Path | None = None) -> dict[str, Config]:
    """Every configuration by name (of ``path``, default the checkout's configs.json), in the file's order."""
    configs: dict[str, Config] = json.loads((path or configs_path()).read_text())
    return configs


def select(configs: dict[str, Config], names: Sequence[str] | None) -> list[str]:
    """``names`` checked against ``configs`` (a ``ConfigError`` for one it lacks); every one when None or
    ``["all"]``."""
    if names is None or list(names) == ["all"]:
        return list(configs)
    unknown = [name for name in names if name not in configs]
    if unknown:
        raise ConfigError(f"unknown configuration '{unknown[0]}' (known: {', '.join(configs)})")
    return list(names)


def config(name: str, path: Path | None = None) -> Config:
    """The configuration ``name`` (a ``ConfigError`` when configs.json has none)."""
    configs = load_configs(path)
    return configs[select(configs, [name])[0]]


def _flag(config: Config, flag: str) -> str | None:
    extra = list(config.get("extra_args", ()))
    return extra[extra.index(flag) + 1] if flag in extra else None


def is_size(config: Config) -> bool:
    """Does the configuration schedule for the least fast storage (``--optimise Size``)?"""
    return _flag(config, "--optimise") == "Size"


def constrained(config: Config) -> bool:
    """Is fast storage scarce: an arena limit, ``--optimise Size`` or a dedicated SRAM (the results' "SRAM-constrained"
    group)?"""
    return (_flag(config, "--arena-cache-size") is not None or is_size(config)
            or str(config["memory_mode"]).startswith("Dedicated_Sram"))


def _without(extra: list[str], flag: str) -> list[str]:
    if flag in extra:
        at = extra.index(flag)
        return extra[:at] + extra[at + 2:]
    return extra


def without_arena(config: Config) -> list[str]:
    """``config``'s extra Vela arguments without its arena limit."""
    return _without(list(config.get("extra_args", ())), "--arena-cache-size")


def size_variant(config: Config) -> Config:
    """``config`` under ``--optimise Size`` without its arena limit, so that every core reports its own peak."""
    return {**config, "extra_args": [*_without(without_arena(config), "--optimise"), "--optimise", "Size"]}


def sweep_configuration(name: str, config: Config) -> HardwareConfig:
    """The configuration as a sweep's (``npusched.sweep``), its arena and strategy pinned, labelled ``name``."""
    arena, optimise = _flag(config, "--arena-cache-size"), _flag(config, "--optimise")
    return HardwareConfig(name=name, accelerator_config=config["accelerator_config"],
                          system_config=config["system_config"], memory_mode=config["memory_mode"],
                          config_files=("Arm/vela.ini",), arena_cache_sizes=(int(arena) if arena else None,),
                          optimise=(optimise or "Performance",))


def legacy_total(config_name: str, model: str, golden: Path | None = None) -> float | None:
    """Vela legacy's total cycles for ``model`` in its golden output (None where that core failed: no folder)."""
    summary = (golden or golden_dir("legacy")) / config_name / model / "summary.csv"
    return float(read_summary(summary)["cycles_total"]) if summary.is_file() else None
