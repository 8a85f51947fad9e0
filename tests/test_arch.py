"""Architecture features and memory system against what Vela 5.2.0 reported for the golden runs."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

import pytest
from conftest import CONFIGS, golden_arch, golden_cases, golden_path

from npusched.errors import ConfigError
from npusched.ir import MemArea
from npusched.target.arch import (
    BandwidthDirection,
    MemPort,
    known_accelerator_configs,
    list_memory_modes,
    list_system_configs,
)
from npusched.target.estimators import load_architecture


def _summary_rows(config_name: str) -> list[dict[str, str]]:
    rows = []
    for _, model in golden_cases((config_name,)):
        with open(golden_path(config_name, model) / "summary.csv", newline="") as handle:
            rows.extend(csv.DictReader(handle))
    return rows


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_memory_figures_match_golden_summary(config_name: str) -> None:
    arch = golden_arch(config_name)
    rows = _summary_rows(config_name)
    assert rows, f"no summary.csv for {config_name}"
    ours = arch.memory_summary()
    for row in rows:
        for column, value in ours.items():
            assert float(row[column]) == pytest.approx(value, rel=1e-12), (config_name, row["network"], column)
        assert row["accelerator_configuration"] == arch.accelerator_name
        assert row["system_config"] == arch.system_config
        assert row["memory_mode"] == arch.memory_mode
        assert row["weights_storage_area"] == arch.permanent_storage_mem_area.display_name()
        assert row["feature_map_storage_area"] == arch.feature_map_storage_mem_area.display_name()


def test_golden_configs_cover_both_families_and_spilling() -> None:
    """Dedicated_Sram modes put the arena in DRAM and use SRAM as a cache; Shared_Sram does not spill."""
    u65 = golden_arch("u65-512_high_dedicated384k")
    assert u65.ncores == 2 and u65.is_ethos_u65_system
    assert u65.is_spilling_enabled() and u65.max_sram_used_weight == 0
    assert u65.mem_type_size("Scratch_fast") == 384 * 1024
    assert u65.mem_type_size("Scratch") == 1 << 40
    assert u65.fast_storage_mem_area is MemArea.Sram
    assert u65.memory_latency[MemArea.Dram][BandwidthDirection.Read] == 500
    assert u65.memory_latency[MemArea.Dram][BandwidthDirection.Write] == 250
    assert u65.memory_burst_length[MemArea.Dram] == 128
    u55 = golden_arch("u55-128_hee_shared")
    assert not u55.is_spilling_enabled() and u55.max_sram_used_weight == 1000
    assert u55.mem_type_size("Scratch_fast") == 1 << 32
    assert u55.memory_burst_length[MemArea.OffChipFlash] == 128
    assert u55.memory_latency[MemArea.OffChipFlash] == (64, 0)
    # Areas on no port keep Vela's neutral defaults.
    assert u55.memory_burst_length[MemArea.Dram] == 1 and u55.memory_latency[MemArea.Dram] == (0, 0)


def test_accelerator_tables() -> None:
    assert known_accelerator_configs() == ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
                                           "ethos-u65-256", "ethos-u65-512")
    expected = {  # macs, cores, ofm ublock (h, w, d), shram banks, lut address
        "ethos-u55-32": (32, 1, (1, 1, 4), 16, 14 * 1024),
        "ethos-u55-64": (64, 1, (1, 1, 8), 16, 14 * 1024),
        "ethos-u55-128": (128, 1, (1, 2, 8), 24, 22 * 1024),
        "ethos-u55-256": (256, 1, (2, 2, 8), 48, 46 * 1024),
        "ethos-u65-256": (256, 1, (2, 2, 8), 48, 46 * 1024),
        "ethos-u65-512": (256, 2, (2, 2, 8), 48, 46 * 1024),
    }
    for name, (macs, cores, ublock, banks, lut_address) in expected.items():
        arch = load_architecture(name)
        assert arch.num_macs_per_cycle == macs
        assert arch.ncores == cores
        assert (arch.ofm_ublock.height, arch.ofm_ublock.width, arch.ofm_ublock.depth) == ublock
        assert arch.shram.total_banks == banks
        assert arch.shram_lut_address == lut_address
        assert arch.is_ethos_u65_system == name.startswith("ethos-u65")
    assert load_architecture("ethos-u55-32").ifm_ublock.depth == 8


def test_internal_defaults() -> None:
    u55 = load_architecture("ethos-u55-256")
    assert (u55.system_config, u55.memory_mode) == ("Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert u55.arena_cache_size == 1 << 32 and u55.arena_cache_size_source == "Default"
    u65 = load_architecture("ETHOS-U65-256", system_config="internal-default", memory_mode="internal-default")
    assert (u65.system_config, u65.memory_mode) == ("Ethos_U65_Client_Server", "Dedicated_Sram_384KB")
    assert u65.arena_cache_size == 393216 and u65.arena_cache_size_source == "Configuration file"
    assert u65.core_clock == 1e9
    assert u65.memory_bandwidths_per_cycle[MemArea.Dram] == 16.0 * 0.75
    assert load_architecture("ethos-u65-256", arena_cache_size=1000).arena_cache_size == 1000
    assert load_architecture() == load_architecture("ethos-u55-128")
    assert hash(load_architecture()) == hash(load_architecture("ethos-u55-128", None, None, None))


def test_packaged_config_listing() -> None:
    systems = list_system_configs()
    assert systems[:2] == ("Ethos_U55_Deep_Embedded", "Ethos_U55_High_End_Embedded")
    assert "Ethos_U65_High_End" in systems
    assert list_memory_modes(["Arm/vela.ini"]) == ("Sram_Only", "Shared_Sram", "Dedicated_Sram",
                                                   "Dedicated_Sram_256KB", "Dedicated_Sram_384KB",
                                                   "Dedicated_Sram_512KB")


def test_sram_only_moves_constants_to_on_chip_flash() -> None:
    arch = load_architecture("ethos-u55-128", ["Arm/vela.ini"], "Ethos_U55_Deep_Embedded", "Sram_Only")
    assert arch.const_mem_area is MemPort.Axi1 and arch.axi1_port is MemArea.OnChipFlash
    assert arch.permanent_storage_mem_area is MemArea.OnChipFlash
    assert arch.feature_map_storage_mem_area is MemArea.Sram
    assert arch.memory_burst_length[MemArea.OnChipFlash] == 32
    assert arch.memory_latency[MemArea.OnChipFlash] == (32, 32)
    assert arch.memory_bandwidths_per_second[MemArea.OnChipFlash] == 8.0 * 200e6


def _write(tmp_path: Path, text: str, name: str = "sys.ini") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


BASE_INI = """
    [System_Config.Base]
    core_clock=400e6
    axi0_port=Sram
    axi1_port=Dram
    Sram_clock_scale=1.0
    Sram_burst_length=32
    Dram_clock_scale=0.5
    Dram_burst_length=64
    Dram_read_latency=100
    Dram_write_latency=50

    [System_Config.Child]
    inherit=System_Config.Base
    core_clock=800e6
    Dram_burst_length=128

    [System_Config.GrandChild]
    inherit=System_Config.Child
    Sram_ports_used=2

    [Memory_Mode.Dedicated]
    const_mem_area=Axi1
    arena_mem_area=Axi1
    cache_mem_area=Axi0

    [Memory_Mode.Dedicated_64K]
    inherit=Memory_Mode.Dedicated
    arena_cache_size=65536
"""


def test_ini_inheritance(tmp_path: Path) -> None:
    ini = _write(tmp_path, BASE_INI)
    arch = load_architecture("ethos-u65-256", [ini], "GrandChild", "Dedicated_64K")
    assert arch.core_clock == 800e6  # child overrides base
    assert arch.memory_burst_length[MemArea.Dram] == 128
    assert arch.memory_latency[MemArea.Dram] == (100, 50)  # from the base, two levels up
    assert arch.memory_ports_used[MemArea.Sram] == 2
    assert arch.memory_bandwidths_per_cycle[MemArea.Sram] == 32.0
    assert arch.memory_bandwidths_per_second[MemArea.Dram] == 16.0 * 0.5 * 800e6
    assert arch.arena_cache_size == 65536
    assert arch.feature_map_storage_mem_area is MemArea.Dram and arch.fast_storage_mem_area is MemArea.Sram
    assert list_system_configs([ini]) == ("Base", "Child", "GrandChild")
    # A second file adds sections; files are read as one configuration.
    extra = _write(tmp_path, "[Memory_Mode.Shared]\nconst_mem_area=Axi1\narena_mem_area=Axi0\ncache_mem_area=Axi0\n",
                   "extra.ini")
    shared = load_architecture("ethos-u55-64", [ini, extra], "Base", "Shared")
    assert shared.permanent_storage_mem_area is MemArea.Dram and not shared.is_spilling_enabled()


def _error(*args: object) -> str:
    with pytest.raises(ConfigError) as info:
        load_architecture(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_names() -> None:
    assert _error("ethos-u99-1") == ("unknown accelerator config 'ethos-u99-1' (known: ethos-u55-32, ethos-u55-64, "
                                     "ethos-u55-128, ethos-u55-256, ethos-u65-256, ethos-u65-512)")
    msg = _error("ethos-u55-128", ["Arm/vela.ini"], "Nope", "Shared_Sram")
    assert msg.startswith("unknown system config 'Nope' (known: Ethos_U55_Deep_Embedded, Ethos_U55_High_End_Embedded")
    msg = _error("ethos-u55-128", ["Arm/vela.ini"], "Ethos_U55_High_End_Embedded", "Nope")
    assert msg == ("unknown memory mode 'Nope' (known: Sram_Only, Shared_Sram, Dedicated_Sram, Dedicated_Sram_256KB, "
                   "Dedicated_Sram_384KB, Dedicated_Sram_512KB)")


def test_file_errors(tmp_path: Path) -> None:
    assert "not found" in _error("ethos-u55-128", [str(tmp_path / "missing.ini")], "A", "B")
    assert "not found" in _error("ethos-u55-128", ["Arm/missing.ini"], "A", "B")
    assert ".ini extension" in _error("ethos-u55-128", [str(tmp_path / "x.txt")], "A", "B")
    bad = _write(tmp_path, "[System_Config.A]\ncore_clock=1\n[System_Config.A]\n", "dup.ini")
    assert "malformed config file" in _error("ethos-u55-128", [bad], "A", "B")
    garbage = _write(tmp_path, "core_clock=1\n", "nosection.ini")
    assert "malformed config file" in _error("ethos-u55-128", [garbage], "A", "B")
    # Vela allows no default system config / memory mode together with explicit config files.
    assert "must be named" in _error("ethos-u55-128", ["Arm/vela.ini"], None, "Shared_Sram")


@pytest.mark.parametrize(
    ("system_lines", "mode_lines", "fragment"),
    [
        ("core_clock=fast", "", "core_clock=fast is not a number"),
        ("Sram_burst_length=0", "", "Sram_burst_length=0 is out of range"),
        ("Sram_burst_length=3.5", "", "Sram_burst_length=3.5 is not an integer"),
        ("Sram_read_latency=-1", "", "Sram_read_latency=-1 is out of range"),
        ("axi1_port=Disk", "", "axi1_port=Disk is not a memory area"),
        ("axi1_port=Shram", "", "axi1_port=Shram is not a memory area"),
        ("", "const_mem_area=Axi2", "const_mem_area=Axi2 is not a port"),
        ("", "const_mem_area=Axi0\narena_mem_area=Axi1",
         "const_mem_area is Sram (must be Dram or OnChipFlash or OffChipFlash)"),
        ("axi1_port=OffChipFlash", "arena_mem_area=Axi1", "arena_mem_area is OffChipFlash (must be Sram or Dram)"),
        ("", "cache_mem_area=Axi1", "cache_mem_area is Dram (must be Sram)"),
        ("", "arena_cache_size=-5", "arena_cache_size=-5 is out of range"),
        ("", "arena_cache_size=8589934592", "arena_cache_size=8589934592 is out of range (maximum is 4294967296)"),
        ("inherit=System_Config.S", "", "inherits from itself"),
        ("inherit=System_Config.Gone", "", "section [System_Config.Gone]"),
    ],
)
def test_invalid_values(tmp_path: Path, system_lines: str, mode_lines: str, fragment: str) -> None:
    def section(defaults: dict[str, str], lines: str) -> str:
        merged = dict(defaults)
        for line in filter(None, lines.splitlines()):
            key, value = line.split("=", 1)
            merged[key] = value
        return "\n".join(f"{k}={v}" for k, v in merged.items())

    system = section({"axi0_port": "Sram", "axi1_port": "Dram"}, system_lines)
    mode = section({"const_mem_area": "Axi1", "arena_mem_area": "Axi0", "cache_mem_area": "Axi0"}, mode_lines)
    text = f"[System_Config.S]\n{system}\n\n[Memory_Mode.M]\n{mode}\n"
    path = tmp_path / "bad.ini"
    path.write_text(text)
    message = _error("ethos-u55-128", [str(path)], "S", "M")
    assert fragment in message


def test_inheritance_loop(tmp_path: Path) -> None:
    ini = _write(tmp_path, """
        [System_Config.A]
        inherit=System_Config.B
        [System_Config.B]
        inherit=System_Config.A
        [Memory_Mode.M]
        const_mem_area=Axi1
    """)
    assert "inheritance loop" in _error("ethos-u55-128", [ini], "A", "M")


def test_cli_arena_cache_size_bounds() -> None:
    assert "out of range" in _error("ethos-u55-128", None, None, None, 1 << 33)
    assert "out of range" in _error("ethos-u55-128", None, None, None, -1)
