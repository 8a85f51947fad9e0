"""Grid expansion: models x hardware configurations x arena sizes x optimise x solvers x seeds -> cells.

A cell is named by a hash of every input that can change its result (the model's bytes, the configuration files'
bytes, all options, the npusched/Vela/OR-Tools versions), so a rerun recognises the cells it already has, and a
moved or renamed model file keeps its results.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path

from npusched import __version__
from npusched.errors import NpuschedError
from npusched.run import RunOptions, Solver
from npusched.target.arch import resolve_config_file


class GridError(NpuschedError):
    """The grid (flags or grid file) names something that does not exist or cannot be combined."""


# npusched's solvers (``--solver``: "vela-default" is the default core's schedule read back and priced by
# npusched, as on the command line), and the `vela` CLI's own runs of each core, priced by that core.
NPUSCHED_SOLVERS = tuple(solver.value for solver in Solver)
VELA_SOLVERS = ("vela-cli-legacy", "vela-cli-default")
SOLVERS = NPUSCHED_SOLVERS + VELA_SOLVERS
# Earlier grid files' names of the `vela` CLI's legacy run (their "vela-default" was the CLI's default core, which
# is now "vela-cli-default": the name means the read-back everywhere).
SOLVER_ALIASES = {"vela-legacy": "vela-cli-legacy"}


def solver_name(name: str) -> str:
    """``name`` as the sweep knows it (an earlier name resolved); a ``GridError`` for one it does not know."""
    name = SOLVER_ALIASES.get(name, name)
    if name not in SOLVERS:
        raise GridError(f"unknown solver '{name}' (known: {', '.join(SOLVERS)})")
    return name
DEFAULT_CONFIG_FILE = "Arm/vela.ini"
# The store's bytes-moved column of each memory area.
AREA_COLUMNS = {"Sram": "bytes_sram", "Dram": "bytes_dram", "OnChipFlash": "bytes_onchipflash",
                "OffChipFlash": "bytes_offchipflash"}


@dataclass(frozen=True)
class HardwareConfig:
    """One accelerator + system config + memory mode. ``arena_cache_sizes``/``optimise`` pin those axes for this
    configuration (as golden/configs.json does); empty means the grid's lists apply."""

    name: str
    accelerator_config: str
    system_config: str | None = None
    memory_mode: str | None = None
    config_files: tuple[str, ...] = ()
    arena_cache_sizes: tuple[int | None, ...] = ()
    optimise: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grid:
    """Everything a sweep varies; ``cells()`` is its expansion."""

    models: tuple[Path, ...]
    configurations: tuple[HardwareConfig, ...]
    solvers: tuple[str, ...]
    arena_cache_sizes: tuple[int | None, ...] = (None,)
    optimise: tuple[str, ...] = ("Performance",)
    time_limit_seconds: float = 30.0
    seeds: int = 1
    workers: int = 1


@dataclass(frozen=True)
class Cell:
    """One run: the inputs of `pipeline.run` (or of the `vela` CLI) and what they are named by in the store.

    Inputs a solver ignores are None (the heuristic has no seed, time limit or workers), so they neither split
    nor duplicate cells.
    """

    model_path: str
    model_sha256: str
    hardware: str
    configuration: str
    accelerator_config: str
    system_config: str | None
    memory_mode: str | None
    config_files: tuple[str, ...]
    config_sha256: str
    arena_cache_size: int | None
    optimise: str
    solver: str
    time_limit_seconds: float | None
    seed: int | None
    workers: int | None
    versions: tuple[tuple[str, str], ...] = field(default_factory=lambda: _versions())

    @property
    def model(self) -> str:
        return Path(self.model_path).stem

    @property
    def cell_id(self) -> str:
        """Hash of every input but the model's path and the display names."""
        identity = {key: value for key, value in self.__dict__.items()
                    if key not in ("model_path", "hardware", "configuration")}
        text = json.dumps(identity, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def run_options(self) -> RunOptions:
        """The options of `pipeline.run` (or the hardware of the `vela` CLI) for this cell."""
        return RunOptions(
            model_path=Path(self.model_path), accelerator_config=self.accelerator_config,
            config_files=self.config_files, system_config=self.system_config, memory_mode=self.memory_mode,
            arena_cache_size=self.arena_cache_size, optimise=self.optimise, solver=self.solver,
            time_limit_seconds=self.time_limit_seconds or 30.0, workers=self.workers, seed=self.seed or 0,
            deterministic=self.solver == "cpsat",
        )

    @property
    def label(self) -> str:
        """Short human name for progress lines and errors."""
        seed = "" if self.seed is None else f" seed={self.seed}"
        return f"{self.model} {self.configuration} {self.solver}{seed}"


def _versions() -> tuple[tuple[str, str], ...]:
    return software_versions()


@cache
def software_versions() -> tuple[tuple[str, str], ...]:
    """The versions a result depends on: npusched's, Vela's (the reference and its mlw_codec) and OR-Tools'."""
    versions = [("npusched", __version__)]
    for package in ("ethos-u-vela", "ortools"):
        try:
            versions.append((package, metadata.version(package)))
        except metadata.PackageNotFoundError:
            versions.append((package, "absent"))
    return tuple(versions)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def find_models(paths: tuple[Path, ...]) -> tuple[Path, ...]:
    """Model files as given, directories expanded to their *.tflite files (sorted); duplicates dropped."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            models = sorted(path.glob("*.tflite"))
            if not models:
                raise GridError(f"no .tflite files in directory {path}")
            found += models
        elif path.is_file():
            found.append(path)
        else:
            raise GridError(f"model {path} does not exist")
    if not found:
        raise GridError("no models given")
    return tuple(dict.fromkeys(p.resolve() for p in found))


def parse_size_bytes(text: str | int | None) -> int | None:
    """'131072', '128k', '128KiB', '1M' -> bytes; 'default' or None -> None (the memory mode's arena size)."""
    if text is None or isinstance(text, int):
        return text
    if str(text).strip().lower() in ("default", "none"):
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)(i?[bB])?\s*", str(text))
    if not match:
        raise GridError(f"expected a size in bytes such as 131072, 128k or 1M, got '{text}'")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
    return int(match.group(1)) * scale


def configurations_from_axes(accelerators: tuple[str, ...], system_configs: tuple[str | None, ...],
                             memory_modes: tuple[str | None, ...], config_files: tuple[str, ...]
                             ) -> tuple[HardwareConfig, ...]:
    """Every accelerator x system config x memory mode, named 'accelerator/system/mode'."""
    configs = []
    for accel, system, mode in itertools.product(accelerators, system_configs, memory_modes):
        files = config_files or ((DEFAULT_CONFIG_FILE,) if system or mode else ())
        name = "/".join(part for part in (accel, system, mode) if part)
        configs.append(HardwareConfig(name=name, accelerator_config=accel, system_config=system, memory_mode=mode,
                                      config_files=files))
    return tuple(configs)


def expand(grid: Grid) -> tuple[Cell, ...]:
    """The grid's cells in a stable order (model-major), without duplicates."""
    solvers = tuple(solver_name(solver) for solver in grid.solvers)
    if not grid.configurations:
        raise GridError("no hardware configuration given")
    model_hashes = {model: file_sha256(model) for model in grid.models}
    cells: dict[str, Cell] = {}
    for config in grid.configurations:
        config_hash = _config_files_sha256(config.config_files)
        arenas = config.arena_cache_sizes or grid.arena_cache_sizes
        optimise = config.optimise or grid.optimise
        for model, arena, strategy, solver, seed in itertools.product(
                grid.models, arenas, optimise, solvers, range(grid.seeds)):
            cpsat = solver == "cpsat"
            cell = Cell(
                model_path=str(model), model_sha256=model_hashes[model], hardware=config.name,
                configuration=_configuration_label(config, arena, strategy),
                accelerator_config=config.accelerator_config, system_config=config.system_config,
                memory_mode=config.memory_mode, config_files=config.config_files, config_sha256=config_hash,
                arena_cache_size=arena, optimise=strategy, solver=solver,
                time_limit_seconds=grid.time_limit_seconds if cpsat else None,
                seed=seed if cpsat else None, workers=grid.workers if cpsat else None,
            )
            cells.setdefault(cell.cell_id, cell)
    return tuple(cells.values())


def _configuration_label(config: HardwareConfig, arena: int | None, optimise: str) -> str:
    """The configuration's name, plus the grid-level arena size and strategy when the configuration leaves them
    open (a configuration that pins them is named for them already)."""
    label = config.name
    if not config.arena_cache_sizes and arena is not None:
        label += f" arena={arena // 1024}KiB" if arena % 1024 == 0 else f" arena={arena}B"
    if not config.optimise and optimise != "Performance":
        label += f" optimise={optimise}"
    return label


def _config_files_sha256(config_files: tuple[str, ...]) -> str:
    """Hash of the configuration files' contents (as Vela resolves their names), so an edited .ini reruns."""

    digest = hashlib.sha256()
    for name in config_files:
        digest.update(name.encode() + b"\0")
        digest.update(file_sha256(Path(resolve_config_file(name))).encode())
    return digest.hexdigest()
