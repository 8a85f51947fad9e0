"""Hardware description of an Ethos-U55/U65 system: the accelerator's fixed features plus the memory system.

The accelerator tables and the memory-system rules follow Vela 5.2.0's legacy ``ArchitectureFeatures`` so that
the cost model, the block search and the scheduler can transcribe Vela's formulas attribute for attribute.
Vela's numpy arrays indexed by its ``MemArea`` enum become plain dicts keyed by :class:`npusched.ir.MemArea`;
memory latencies are ``(read, write)`` tuples indexed by :class:`BandwidthDirection`.

The memory system comes from Vela-format ``.ini`` files (``[System_Config.NAME]`` / ``[Memory_Mode.NAME]``
sections, ``inherit=`` chains). ``Arm/vela.ini`` and other two-part relative paths resolve to the ini files
shipped with the installed ``ethos-u-vela`` package, located without importing ``ethosu.vela``.
"""

from __future__ import annotations

import configparser
import enum
import functools
import importlib.util
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from npusched.errors import ConfigError
from npusched.ir import MemArea, NpuBlockType, Shape4D, TensorFormat

__all__ = [
    "AcceleratorConfig",
    "ArchitectureFeatures",
    "BandwidthDirection",
    "OptimisationStrategy",
    "MemPort",
    "ShramConfig",
    "ShramElement",
    "DEFAULT_CONFIG",
    "known_accelerator_configs",
    "list_memory_modes",
    "list_system_configs",
    "load_hardware",
    "resolve_config_file",
    "vela_config_dir",
]

DEFAULT_CONFIG = "internal-default"
"""Vela's name for "pick the accelerator's default system config / memory mode"."""


class OptimisationStrategy(str, enum.Enum):
    """What ``--optimise`` asks the scheduler for (Vela's two strategies): the fewest cycles within the fast
    storage, or the least fast storage."""

    PERFORMANCE = "Performance"
    SIZE = "Size"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> OptimisationStrategy:
        """The strategy named ``text`` in any case (Vela's spelling is "Performance"/"Size"); ConfigError if none."""
        for strategy in cls:
            if strategy.value.lower() == str(text).lower():
                return strategy
        raise ConfigError(f"unknown optimise strategy '{text}' (known: Performance, Size)")


class BandwidthDirection(enum.IntEnum):
    """Index into a ``memory_latency[area]`` pair."""

    Read = 0
    Write = 1


class MemPort(enum.Enum):
    """The two AXI ports a memory mode assigns constants, the arena and the cache to."""

    Axi0 = "Axi0"
    Axi1 = "Axi1"


class ShramElement(enum.IntEnum):
    """Kinds of SHRAM occupant; the value indexes an accelerator's ``shram_granules`` table."""

    IFM8 = 0
    IFM16 = 1
    IFM8_Elementwise = 2
    IFM16_Elementwise = 3
    IFM32 = 4
    Acc16 = 5
    Acc32 = 6
    Acc40 = 7

    @property
    def bits(self) -> int:
        return (8, 16, 8, 16, 32, 16, 32, 40)[self.value]


@dataclass(frozen=True)
class AcceleratorConfig:
    """Fixed features of one accelerator variant (Vela's ``ArchitectureConfig`` plus its perf tables)."""

    name: str
    macs: int
    cores: int
    ofm_ublock: Shape4D
    ifm_ublock: Shape4D
    shram_banks: int
    shram_granules: tuple[int, ...]
    elem_units: int
    output_cycles_per_elem: tuple[float, ...]
    activation_cycles_per_elem: tuple[float, ...]


@dataclass(frozen=True)
class ShramConfig:
    """SHRAM geometry used by the block allocator (Vela's ``SHRAMConfig``)."""

    reserved_output_banks: int
    bank_size_bytes: int
    total_banks: int
    reserved_end_banks: int


def _ublock(width: int, height: int, depth: int) -> Shape4D:
    return Shape4D(1, height, width, depth)


# Granule tables are ordered as ShramElement: IFM8, IFM16, IFM8 elementwise, IFM16 elementwise, IFM32,
# Acc16, Acc32, Acc40.
_GRANULES_48 = (8, 8, 8, 8, 16, 8, 16, 20)
_OUT_256 = (0.625, 1.125, 0.5, 0.375, 0.5, 0.75, 0.125, 0.25)

_ACCELERATORS: dict[str, AcceleratorConfig] = {
    cfg.name: cfg
    for cfg in (
        AcceleratorConfig("ethos-u55-32", 32, 1, _ublock(1, 1, 4), _ublock(1, 1, 8), 16,
                          (2, 2, 2, 2, 4, 4, 4, 4), 1,
                          (2.0, 3.0, 3.0, 3.0, 4.0, 6.0, 1.0, 2.0), (1.0, 1.0, 0.0)),
        AcceleratorConfig("ethos-u55-64", 64, 1, _ublock(1, 1, 8), _ublock(1, 1, 8), 16,
                          (2, 2, 2, 2, 4, 4, 4, 8), 2,
                          (1.0, 1.5, 1.5, 1.5, 2.0, 3.0, 0.5, 1.0), (1.0, 1.0, 0.0)),
        AcceleratorConfig("ethos-u55-128", 128, 1, _ublock(2, 1, 8), _ublock(2, 1, 8), 24,
                          (4, 4, 4, 4, 8, 4, 8, 12), 4,
                          (0.75, 1.25, 0.75, 0.75, 1.0, 1.5, 0.25, 0.5), (1.0, 0.5, 0.0)),
        AcceleratorConfig("ethos-u55-256", 256, 1, _ublock(2, 2, 8), _ublock(2, 2, 8), 48, _GRANULES_48, 8,
                          _OUT_256, (1.0, 0.25, 0.0)),
        AcceleratorConfig("ethos-u65-256", 256, 1, _ublock(2, 2, 8), _ublock(2, 2, 8), 48, _GRANULES_48, 8,
                          _OUT_256, (1.0, 0.25, 0.0)),
        AcceleratorConfig("ethos-u65-512", 256, 2, _ublock(2, 2, 8), _ublock(2, 2, 8), 48, _GRANULES_48, 8,
                          (0.3125, 0.5625, 0.25, 0.1875, 0.25, 0.375, 0.0625, 0.125), (0.5, 0.125, 0.0)),
    )
}

# Memory areas an AXI port may be connected to.
_PORT_AREAS = (MemArea.Sram, MemArea.Dram, MemArea.OnChipFlash, MemArea.OffChipFlash)

# Per-accelerator defaults Vela substitutes for "internal-default".
_DEFAULT_SYSTEM_CONFIG = {"u55": "Ethos_U55_High_End_Embedded", "u65": "Ethos_U65_Client_Server"}
_DEFAULT_MEMORY_MODE = {"u55": "Shared_Sram", "u65": "Dedicated_Sram_384KB"}


def known_accelerator_configs() -> tuple[str, ...]:
    """Accelerator names the legacy scheduler supports, smallest first."""
    return tuple(_ACCELERATORS)


# ----------------------------------------------------------------------------------------------------------------
# Config files


def vela_config_dir() -> str | None:
    """The ``config_files`` folder of the installed ethos-u-vela package, or None if it is not installed."""
    try:
        spec = importlib.util.find_spec("ethosu")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "config_files")
        if os.path.isdir(candidate):
            return candidate
    return None


def resolve_config_file(path: str) -> str:
    """Map a ``--config`` argument to a readable file, as Vela does.

    A relative path of exactly two parts (``Arm/vela.ini``) names a file in the package's config folder;
    when no such packaged file exists it is tried relative to the working directory instead.
    """
    if os.path.splitext(path)[1] != ".ini":
        raise ConfigError(f"config file '{path}' must use the .ini extension")
    norm = os.path.normpath(path)
    parts = norm.split(os.path.sep)
    packaged = None
    if len(parts) == 2 and not os.path.isabs(norm) and not path.startswith((".", "~")):
        base = vela_config_dir()
        if base is not None:
            packaged = os.path.join(base, norm)
        if packaged is not None and os.access(packaged, os.R_OK):
            return packaged
        if parts[0] == "Arm" and base is None:
            raise ConfigError(f"config file '{path}' needs the ethos-u-vela package, which is not installed")
    expanded = os.path.expanduser(path)
    if os.path.isfile(expanded) and os.access(expanded, os.R_OK):
        return expanded
    raise ConfigError(f"config file '{path}' not found or not readable")


def _default_config_files() -> tuple[str, ...]:
    return (resolve_config_file(os.path.join("Arm", "vela.ini")),)


def _resolve_all(config_files: Iterable[str] | None) -> tuple[str, ...]:
    if config_files is None:
        return _default_config_files()
    if isinstance(config_files, str):
        config_files = [config_files]
    resolved = tuple(resolve_config_file(str(p)) for p in config_files)
    if not resolved:
        raise ConfigError("no config file given")
    return resolved


def _file_stamp(path: str) -> tuple[str, float, int]:
    st = os.stat(path)
    return (path, st.st_mtime, st.st_size)


@functools.lru_cache(maxsize=64)
def _parse_ini(stamps: tuple[tuple[str, float, int], ...]) -> configparser.ConfigParser:
    """Read the files as one ConfigParser (later files add to / override earlier ones, as Vela reads them)."""
    parser = configparser.ConfigParser()
    for path, _, _ in stamps:
        try:
            with open(path, encoding="utf-8") as handle:
                parser.read_file(handle, source=path)
        except configparser.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"malformed config file '{path}': {first}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file '{path}': {exc}") from None
    return parser


def _load_ini(files: tuple[str, ...]) -> configparser.ConfigParser:
    return _parse_ini(tuple(_file_stamp(p) for p in files))


def _sections_with_prefix(parser: configparser.ConfigParser, prefix: str) -> tuple[str, ...]:
    return tuple(s[len(prefix):] for s in parser.sections() if s.startswith(prefix))


def list_system_configs(config_files: Sequence[str] | None = None) -> tuple[str, ...]:
    """Names of the ``[System_Config.NAME]`` sections, in file order."""
    return _sections_with_prefix(_load_ini(_resolve_all(config_files)), "System_Config.")


def list_memory_modes(config_files: Sequence[str] | None = None) -> tuple[str, ...]:
    """Names of the ``[Memory_Mode.NAME]`` sections, in file order."""
    return _sections_with_prefix(_load_ini(_resolve_all(config_files)), "Memory_Mode.")


class _Section:
    """Key lookup in one section that honours ``inherit=``: a key set in a child wins over its parents'."""

    def __init__(self, parser: configparser.ConfigParser, name: str) -> None:
        self.parser = parser
        self.name = name
        chain = [name]
        current = name
        while True:
            if not parser.has_section(current):
                raise ConfigError(f"section [{current}] (inherited by [{chain[-2]}]) not found in the config files")
            parent = self._raw(current, "inherit")
            if parent is None:
                break
            if parent == current:
                raise ConfigError(f"[{current}] inherits from itself")
            if parent in chain:
                raise ConfigError(f"inheritance loop: {' -> '.join(chain + [parent])}")
            chain.append(parent)
            current = parent
        self.chain = tuple(chain)  # child first

    def _raw(self, section: str, key: str) -> str | None:
        try:
            if self.parser.has_option(section, key):
                return self.parser.get(section, key)
        except configparser.Error as exc:
            raise ConfigError(f"[{section}] {key}: {str(exc).strip().splitlines()[0]}") from None
        return None

    def get(self, key: str) -> str | None:
        for section in self.chain:
            value = self._raw(section, key)
            if value is not None:
                return value.strip()
        return None

    def number(self, key: str, kind: type, default: float | int, minimum: float | None = None,
               strict_min: bool = False) -> float | int:
        text = self.get(key)
        if text is None:
            return default
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise ConfigError(f"[{self.name}] {key}={text} is not {what}") from None
        if not math.isfinite(value):  # float() accepts 'nan' and 'inf'; no clock or scale may be either
            raise ConfigError(f"[{self.name}] {key}={text} is not a finite number")
        if minimum is not None and (value <= minimum if strict_min else value < minimum):
            bound = f"> {minimum:g}" if strict_min else f">= {minimum:g}"
            raise ConfigError(f"[{self.name}] {key}={text} is out of range (must be {bound})")
        return value


# ----------------------------------------------------------------------------------------------------------------
# The architecture


def _hashable(value: object) -> object:
    if isinstance(value, dict):
        return tuple((_hashable(k), _hashable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


@dataclass(frozen=True, eq=False)
class ArchitectureFeatures:
    """Everything about the target hardware the compiler consults, and nothing of how a schedule on it is priced or
    scored (``npusched.target.estimators.PricedArchitecture`` adds that). Build it with :func:`load_hardware`.

    Names mirror Vela's ``ArchitectureFeatures``. Equality and hashing go by value, so an instance can key
    ``functools.lru_cache`` tables; its dict attributes must never be mutated.
    """

    # identity
    accelerator_config: str
    system_config: str
    memory_mode: str
    vela_config_files: tuple[str, ...]
    optimise: OptimisationStrategy
    config: AcceleratorConfig
    is_ethos_u55_system: bool
    is_ethos_u65_system: bool

    # compute
    ncores: int
    num_macs_per_cycle: int
    num_elem_wise_units: int
    ofm_ublock: Shape4D
    ifm_ublock: Shape4D
    ofm_block_max: Shape4D
    sub_kernel_max: Shape4D
    ofm_split_depth: int
    max_blockdep: int
    max_outstanding_kernels: int
    max_outstanding_dma: int
    output_cycles_per_elem: tuple[float, ...]
    activation_cycles_per_elem: tuple[float, ...]
    min_block_sizes: dict[NpuBlockType, tuple[int, int]]
    sub_kernel_limits: dict[NpuBlockType, tuple[int, int]]
    storage_rounding_quantums: dict[TensorFormat, tuple[int, int, int, int]]
    brick_sizes: dict[TensorFormat, tuple[int, int, int, int]]
    default_feature_map_format: TensorFormat

    # SHRAM
    shram: ShramConfig
    accumulator_granules: dict[ShramElement, int]
    ifm_bank_granules: dict[int, int]
    ifm_ew_bank_granules: dict[int, int]
    shram_bank_size: int
    shram_size_bytes: int
    shram_reserved_output_banks: int
    shram_reserved_weight_banks: int
    shram_reserved_unused_banks: int
    shram_total_banks: int
    shram_bank_granules: tuple[int, ...]
    shram_lut_size: int
    shram_lut_slot_size: int
    shram_lut_address: int

    # memory system
    core_clock: float
    axi0_port: MemArea
    axi1_port: MemArea
    max_address_offset: int
    memory_clock_scales: dict[MemArea, float]
    memory_ports_used: dict[MemArea, int]
    memory_burst_length: dict[MemArea, int]
    memory_latency: dict[MemArea, tuple[int, int]]
    memory_max_reads: dict[MemArea, int | None]
    memory_max_writes: dict[MemArea, int | None]
    memory_bandwidths_per_cycle: dict[MemArea, float]
    memory_bandwidths_per_second: dict[MemArea, float]
    const_mem_area: MemPort
    arena_mem_area: MemPort
    cache_mem_area: MemPort
    arena_cache_size: int
    arena_cache_size_source: str
    permanent_storage_mem_area: MemArea
    feature_map_storage_mem_area: MemArea
    fast_storage_mem_area: MemArea
    tensor_storage_mem_area: dict[str, MemArea | None]

    # scheduler weights
    bandwidth_weights: dict[MemArea, float]
    cycles_weight: float
    max_sram_used_weight: float

    _key: tuple = field(init=False, repr=False, compare=False)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = tuple(_hashable(getattr(self, f.name)) for f in fields(self) if f.name not in ("_key", "_hash"))
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, ArchitectureFeatures) and self._hash == other._hash and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        # Rebuild through __init__ so the cached hash is recomputed in the receiving process.
        return (type(self), tuple(getattr(self, f.name) for f in fields(self) if f.init))

    # --- helpers Vela's passes call -------------------------------------------------------------------------

    @property
    def accelerator_name(self) -> str:
        """Vela's enum name of the accelerator, as its summary.csv prints it (``Ethos_U55_128``)."""
        return self.accelerator_config.replace("ethos-u", "Ethos_U").replace("-", "_")

    def port_area(self, port: MemPort) -> MemArea:
        """The memory area behind an AXI port."""
        return self.axi0_port if port is MemPort.Axi0 else self.axi1_port

    def is_spilling_enabled(self) -> bool:
        """True when a dedicated SRAM acts as a cache in front of the arena (Dedicated_Sram modes)."""
        return self.port_area(self.cache_mem_area) is MemArea.Sram and self.cache_mem_area != self.arena_mem_area

    def mem_type_size(self, mem_type: str) -> int:
        """Hard size limit of a memory type (``Scratch_fast`` is bounded by the cache size when spilling)."""
        if mem_type == "Scratch_fast" and self.is_spilling_enabled():
            return self.arena_cache_size
        return self.max_address_offset

    def memory_summary(self) -> dict[str, object]:
        """The configuration figures Vela's summary.csv reports (bandwidths in GiB/s, cache size in KiB)."""
        gib = 1024.0 ** 3
        return {
            "core_clock": self.core_clock,
            "arena_cache_size": self.arena_cache_size / 1024,
            "sram_bandwidth": self.memory_bandwidths_per_second[MemArea.Sram] / gib,
            "dram_bandwidth": self.memory_bandwidths_per_second[MemArea.Dram] / gib,
            "on_chip_flash_bandwidth": self.memory_bandwidths_per_second[MemArea.OnChipFlash] / gib,
            "off_chip_flash_bandwidth": self.memory_bandwidths_per_second[MemArea.OffChipFlash] / gib,
        }


def _family(accelerator: str) -> str:
    return "u65" if accelerator.startswith("ethos-u65") else "u55"


def _parse_port(section: _Section, key: str) -> MemPort:
    text = section.get(key)
    if text is None:
        return MemPort.Axi0
    try:
        return MemPort(text)
    except ValueError:
        raise ConfigError(f"[{section.name}] {key}={text} is not a port (must be Axi0 or Axi1)") from None


def _parse_area(section: _Section, key: str) -> MemArea:
    text = section.get(key)
    if text is None:
        return MemArea.Sram
    names = ", ".join(a.value for a in _PORT_AREAS)
    try:
        area = MemArea(text)
    except ValueError:
        raise ConfigError(f"[{section.name}] {key}={text} is not a memory area (must be one of {names})") from None
    if area not in _PORT_AREAS:
        raise ConfigError(f"[{section.name}] {key}={text} is not a memory area (must be one of {names})")
    return area


def load_hardware(
    accelerator_config: str = "ethos-u55-128",
    config_files: Sequence[str] | None = None,
    system_config: str | None = None,
    memory_mode: str | None = None,
    arena_cache_size: int | None = None,
    optimise: str = "Performance",
) -> ArchitectureFeatures:
    """Build the hardware as Vela 5.2.0 would for the same command-line options (how its passes are priced is
    ``npusched.target.estimators.load_architecture``'s).

    ``system_config``/``memory_mode`` None (or ``"internal-default"``) pick the accelerator's Vela defaults
    (U55: Ethos_U55_High_End_Embedded + Shared_Sram; U65: Ethos_U65_Client_Server + Dedicated_Sram_384KB)
    from ``Arm/vela.ini``. ``config_files`` None means ``Arm/vela.ini``. Raises :class:`ConfigError`.
    """
    files = None if config_files is None else tuple(
        [config_files] if isinstance(config_files, str) else [str(p) for p in config_files])
    return _load_architecture(accelerator_config, files, system_config, memory_mode, arena_cache_size, optimise)


@functools.lru_cache(maxsize=32)
def _load_architecture(accelerator_config: str, config_files: tuple[str, ...] | None, system_config: str | None,
                       memory_mode: str | None, arena_cache_size: int | None,
                       optimise: str) -> ArchitectureFeatures:
    accel = str(accelerator_config).lower()
    if accel not in _ACCELERATORS:
        raise ConfigError(f"unknown accelerator config '{accelerator_config}' "
                          f"(known: {', '.join(known_accelerator_configs())})")
    if optimise not in tuple(OptimisationStrategy):
        raise ConfigError(f"unknown optimise strategy '{optimise}' (known: Performance, Size)")
    cfg = _ACCELERATORS[accel]
    family = _family(accel)
    is_u65 = family == "u65"

    default_sys = system_config is None or system_config == DEFAULT_CONFIG
    default_mode = memory_mode is None or memory_mode == DEFAULT_CONFIG
    if config_files is not None and (default_sys or default_mode):
        which = "system config" if default_sys else "memory mode"
        raise ConfigError(f"a config file was given, so a {which} must be named too (Vela allows no default here)")
    files = _resolve_all(config_files)
    parser = _load_ini(files)
    sys_name = _DEFAULT_SYSTEM_CONFIG[family] if default_sys else str(system_config)
    mode_name = _DEFAULT_MEMORY_MODE[family] if default_mode else str(memory_mode)

    if not parser.has_section("System_Config." + sys_name):
        known = ", ".join(_sections_with_prefix(parser, "System_Config.")) or "none"
        raise ConfigError(f"unknown system config '{sys_name}' (known: {known})")
    if not parser.has_section("Memory_Mode." + mode_name):
        known = ", ".join(_sections_with_prefix(parser, "Memory_Mode.")) or "none"
        raise ConfigError(f"unknown memory mode '{mode_name}' (known: {known})")

    address_bits = 40 if is_u65 else 32
    max_address_offset = 1 << address_bits
    port_bytes_per_cycle = 16.0 if is_u65 else 8.0

    # --- system config -----------------------------------------------------------------------------------
    sys_sec = _Section(parser, "System_Config." + sys_name)
    core_clock = float(sys_sec.number("core_clock", float, 1.0, minimum=0.0, strict_min=True))
    axi0 = _parse_area(sys_sec, "axi0_port")
    axi1 = _parse_area(sys_sec, "axi1_port")
    areas = list(MemArea)
    clock_scales = {a: 1.0 for a in areas}
    ports_used = {a: 1 for a in areas}
    burst = {a: 1 for a in areas}
    latency = {a: (0, 0) for a in areas}
    max_reads: dict[MemArea, int | None] = {a: None for a in areas}
    max_writes: dict[MemArea, int | None] = {a: None for a in areas}
    for area in dict.fromkeys((axi0, axi1)):
        name = area.value
        clock_scales[area] = float(sys_sec.number(f"{name}_clock_scale", float, 1.0, minimum=0.0, strict_min=True))
        ports_used[area] = int(sys_sec.number(f"{name}_ports_used", int, 1, minimum=1))
        burst[area] = int(sys_sec.number(f"{name}_burst_length", int, 1, minimum=1))
        latency[area] = (int(sys_sec.number(f"{name}_read_latency", int, 0, minimum=0)),
                         int(sys_sec.number(f"{name}_write_latency", int, 0, minimum=0)))
        if sys_sec.get(f"{name}_max_reads") is not None:
            max_reads[area] = int(sys_sec.number(f"{name}_max_reads", int, 0, minimum=0))
        if sys_sec.get(f"{name}_max_writes") is not None:
            max_writes[area] = int(sys_sec.number(f"{name}_max_writes", int, 0, minimum=0))

    # --- memory mode -------------------------------------------------------------------------------------
    mode_sec = _Section(parser, "Memory_Mode." + mode_name)
    const_port = _parse_port(mode_sec, "const_mem_area")
    arena_port = _parse_port(mode_sec, "arena_mem_area")
    cache_port = _parse_port(mode_sec, "cache_mem_area")
    cache_size = max_address_offset
    cache_source = "Default"
    if mode_sec.get("arena_cache_size") is not None:
        cache_size = int(mode_sec.number("arena_cache_size", int, max_address_offset))
        cache_source = "Configuration file"

    def port_area(port: MemPort) -> MemArea:
        return axi0 if port is MemPort.Axi0 else axi1

    # SRAM-only systems: constants move to the other port, renamed on-chip flash with SRAM's characteristics.
    if port_area(const_port) is MemArea.Sram and const_port == arena_port == cache_port:
        if const_port is MemPort.Axi0:
            const_port, axi1 = MemPort.Axi1, MemArea.OnChipFlash
        else:
            const_port, axi0 = MemPort.Axi0, MemArea.OnChipFlash
        clock_scales[MemArea.OnChipFlash] = clock_scales[MemArea.Sram]
        burst[MemArea.OnChipFlash] = burst[MemArea.Sram]
        ports_used[MemArea.OnChipFlash] = ports_used[MemArea.Sram]
        latency[MemArea.OnChipFlash] = latency[MemArea.Sram]

    if arena_cache_size is not None:
        cache_size = int(arena_cache_size)
        cache_source = "CLI option"

    mode_label = f"memory mode '{mode_name}' with system config '{sys_name}'"
    if port_area(const_port) not in (MemArea.Dram, MemArea.OnChipFlash, MemArea.OffChipFlash):
        raise ConfigError(f"{mode_label}: const_mem_area is {port_area(const_port).value} "
                          "(must be Dram or OnChipFlash or OffChipFlash)")
    if port_area(arena_port) not in (MemArea.Sram, MemArea.Dram):
        raise ConfigError(f"{mode_label}: arena_mem_area is {port_area(arena_port).value} (must be Sram or Dram)")
    if port_area(cache_port) is not MemArea.Sram:
        raise ConfigError(f"{mode_label}: cache_mem_area is {port_area(cache_port).value} (must be Sram)")
    if cache_size < 0:
        raise ConfigError(f"arena_cache_size={cache_size} is out of range (must be >= 0)")
    if cache_size > max_address_offset:
        raise ConfigError(f"arena_cache_size={cache_size} is out of range (maximum is {max_address_offset})")

    permanent = port_area(const_port)
    feature_maps = port_area(arena_port)
    fast = port_area(cache_port)

    bw_cycle = {a: port_bytes_per_cycle * ports_used[a] * clock_scales[a] for a in areas}
    bw_second = {a: bw_cycle[a] * core_clock for a in areas}

    # --- accelerator -------------------------------------------------------------------------------------
    ub = cfg.ofm_ublock
    num_macs = ub.height * ub.width * 8 * ub.depth
    assert num_macs == cfg.macs, (num_macs, cfg.macs)
    granules = cfg.shram_granules
    reserved_unused = 2 if cfg.shram_banks > 16 else 0
    bank_size = 1024
    total_banks = cfg.shram_banks - reserved_unused
    lut_banks_free = total_banks - (2 if reserved_unused == 0 else 0)
    default_min = (ub.height, ub.width)
    spilling = fast is MemArea.Sram and cache_port != arena_port

    return ArchitectureFeatures(
        accelerator_config=accel,
        system_config=sys_name,
        memory_mode=mode_name,
        vela_config_files=files,
        optimise=OptimisationStrategy(optimise),
        config=cfg,
        is_ethos_u55_system=not is_u65,
        is_ethos_u65_system=is_u65,
        ncores=cfg.cores,
        num_macs_per_cycle=num_macs,
        num_elem_wise_units=cfg.elem_units,
        ofm_ublock=cfg.ofm_ublock,
        ifm_ublock=cfg.ifm_ublock,
        ofm_block_max=Shape4D(1, 32, 64, 128),
        sub_kernel_max=Shape4D(1, 8, 8, 65536),
        ofm_split_depth=16,
        max_blockdep=3,
        max_outstanding_kernels=2,
        max_outstanding_dma=2 if is_u65 else 1,
        output_cycles_per_elem=cfg.output_cycles_per_elem,
        activation_cycles_per_elem=cfg.activation_cycles_per_elem,
        min_block_sizes={
            NpuBlockType.Default: default_min,
            NpuBlockType.VectorProduct: (1, 1),
            NpuBlockType.ConvolutionMxN: default_min,
            NpuBlockType.Pooling: default_min,
            NpuBlockType.ConvolutionDepthWise: default_min,
            NpuBlockType.ElementWise: (1, 1),
            NpuBlockType.ReduceSum: default_min,
        },
        sub_kernel_limits={
            NpuBlockType.Default: (8, 8),
            NpuBlockType.VectorProduct: (1, 1),
            NpuBlockType.ConvolutionMxN: (8, 8),
            NpuBlockType.Pooling: (8, 8),
            NpuBlockType.ConvolutionDepthWise: (8, 8),
            NpuBlockType.ElementWise: (1, 1),
            NpuBlockType.ReduceSum: (8, 8),
        },
        storage_rounding_quantums={TensorFormat.NHWC: (1, 1, 1, 1), TensorFormat.NHCWB16: (1, 1, 1, 16)},
        brick_sizes={TensorFormat.NHWC: (1, 1, 1, 1), TensorFormat.NHCWB16: (1, 1, 1, 16)},
        default_feature_map_format=TensorFormat.NHWC,
        shram=ShramConfig(reserved_output_banks=2, bank_size_bytes=bank_size, total_banks=cfg.shram_banks,
                          reserved_end_banks=reserved_unused),
        accumulator_granules={e: granules[e] for e in (ShramElement.Acc16, ShramElement.Acc32, ShramElement.Acc40)},
        ifm_bank_granules={8: granules[ShramElement.IFM8], 16: granules[ShramElement.IFM16],
                           32: granules[ShramElement.IFM32]},
        ifm_ew_bank_granules={8: granules[ShramElement.IFM8_Elementwise],
                              16: granules[ShramElement.IFM16_Elementwise], 32: granules[ShramElement.IFM32]},
        shram_bank_size=bank_size,
        shram_size_bytes=cfg.shram_banks * bank_size,
        shram_reserved_output_banks=2,
        shram_reserved_weight_banks=0,
        shram_reserved_unused_banks=reserved_unused,
        shram_total_banks=total_banks,
        shram_bank_granules=granules,
        shram_lut_size=2048,
        shram_lut_slot_size=256,
        shram_lut_address=bank_size * lut_banks_free,
        core_clock=core_clock,
        axi0_port=axi0,
        axi1_port=axi1,
        max_address_offset=max_address_offset,
        memory_clock_scales=clock_scales,
        memory_ports_used=ports_used,
        memory_burst_length=burst,
        memory_latency=latency,
        memory_max_reads=max_reads,
        memory_max_writes=max_writes,
        memory_bandwidths_per_cycle=bw_cycle,
        memory_bandwidths_per_second=bw_second,
        const_mem_area=const_port,
        arena_mem_area=arena_port,
        cache_mem_area=cache_port,
        arena_cache_size=cache_size,
        arena_cache_size_source=cache_source,
        permanent_storage_mem_area=permanent,
        feature_map_storage_mem_area=feature_maps,
        fast_storage_mem_area=fast,
        tensor_storage_mem_area={
            "Unknown": None,
            "Weights": permanent,
            "FeatureMap": feature_maps,
            "LUT": permanent,
            "Scratch": feature_maps,
            "ScratchFast": fast,
        },
        bandwidth_weights={MemArea.Sram: 1.0, MemArea.Dram: 10.0, MemArea.OnChipFlash: 2.0,
                           MemArea.OffChipFlash: 20.0, MemArea.Shram: 0.0},
        cycles_weight=40,
        max_sram_used_weight=0 if spilling else 1000,
    )
