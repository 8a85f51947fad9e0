"""Seeded fuzzing: broken models, configurations and options end in a verified schedule or one clear error.

Each case mutates a real model (or Vela's .ini file) and runs the pipeline in-process with the heuristic solver;
a few run the command line with the default solver. A case passes when it either produces a schedule that
passes the evaluator's verification and serialises as strict JSON, or stops with an ``NpuschedError`` (the CLI's
one ``error:`` line, exit 2) that is not an internal error. A case still running long after its time limit is a
hang and fails; how close to the limit a run ends depends on the machine, so that is measured by
scripts/bench/time_limit.py rather than asserted here.

Models are mutated by patching values in place at the byte offsets where the flatbuffer stores them (found
through the ``tflite`` schema bindings), so the file stays a well-formed flatbuffer unless the case is about raw
bytes: bit flips and truncation. ``NPUSCHED_FUZZ_CASES`` raises the case count for a longer local run.
"""

from __future__ import annotations

import configparser
import functools
import inspect
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import flatbuffers
import pytest
import tflite
from conftest import CORPUS_DIR

from npusched.app.pipeline import run
from npusched.errors import NpuschedError
from npusched.frontend.tflite_reader import _OPTIONS_NAMES, _tflite_class
from npusched.io.report_json import document
from npusched.io.report_text import format_summary
from npusched.run import RunOptions
from npusched.target.arch import resolve_config_file

REPO = Path(__file__).resolve().parents[1]
CORPUS = CORPUS_DIR
SEED_MODELS = (CORPUS / "kws_dscnn_int8.tflite", CORPUS / "micro_speech_int8.tflite", CORPUS / "ad01_int8.tflite",
               CORPUS / "dtln.tflite", REPO / "examples" / "kws_dscnn_int8.tflite",
               *sorted((REPO / "tests" / "data" / "lowering").glob("ops_*.tflite")))
CASES = int(os.environ.get("NPUSCHED_FUZZ_CASES", "560"))
CLI_CASES = 6
TIME_LIMIT_SECONDS = 5.0
# Past its limit by this much a case hangs, on any machine: the guard only catches hangs, it times nothing.
HANG_SECONDS = 120.0
SYSTEM, MODE = "Ethos_U55_High_End_Embedded", "Shared_Sram"

# Slow tier (pytest -m 'not slow' skips it): hundreds of fuzzed runs.
pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------------------------------------------
# where the flatbuffer keeps the values worth changing

@dataclass(frozen=True)
class Site:
    """One stored scalar: what it is, its byte offset in the file and its struct format."""

    what: str
    offset: int
    fmt: str


_FORMATS = {"Int8": "<b", "Uint8": "<B", "Bool": "<?", "Int16": "<h", "Uint16": "<H", "Int32": "<i",
            "Uint32": "<I", "Int64": "<q", "Uint64": "<Q", "Float32": "<f", "Float64": "<d"}


@functools.cache
def _scalar_slots(cls: type) -> tuple[tuple[str, int, str], ...]:
    """(field, vtable slot, format) of an options table's scalar fields, read off the generated getters (the
    bindings carry no schema description to ask instead)."""
    slots = []
    for name, getter in vars(cls).items():
        if not inspect.isfunction(getter):
            continue
        match = re.search(r"Offset\((\d+)\).*?number_types\.(\w+)Flags, o \+ self\._tab\.Pos",
                          inspect.getsource(getter), re.S)
        if match and match.group(2) in _FORMATS:
            slots.append((name, int(match.group(1)), _FORMATS[match.group(2)]))
    return tuple(slots)


def _field(table: flatbuffers.table.Table, slot: int, what: str, fmt: str) -> list[Site]:
    offset = table.Offset(slot)
    return [Site(what, table.Pos + offset, fmt)] if offset else []


def _vector(table: flatbuffers.table.Table, slot: int, what: str, fmt: str) -> list[Site]:
    """Every element of a scalar vector, and its length word."""
    offset = table.Offset(slot)
    if not offset:
        return []
    start, size = table.Vector(offset), struct.calcsize(fmt)
    return ([Site(f"{what}[{k}]", start + k * size, fmt) for k in range(table.VectorLen(offset))]
            + [Site(f"len({what})", start - 4, "<I")])


@functools.cache
def model_sites(path: Path) -> dict[str, tuple[Site, ...]]:
    """Sites of one model by kind: structure (indices, lengths, operator codes), shape (dims, types),
    quantisation, options. Vtable slots are those of the TFLite schema (OperatorCode, SubGraph, Tensor,
    QuantizationParameters, Operator)."""
    model = tflite.Model.GetRootAs(path.read_bytes(), 0)
    kinds: dict[str, list[Site]] = {"structure": [], "shape": [], "quantisation": [], "options": []}
    for k in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(k)._tab
        kinds["structure"] += (_field(code, 4, f"opcode{k}.deprecated_builtin_code", "<b")
                               + _field(code, 10, f"opcode{k}.builtin_code", "<i"))
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        kinds["structure"] += (_vector(sg._tab, 6, f"sg{s}.inputs", "<i") + _vector(sg._tab, 8, f"sg{s}.outputs", "<i")
                               + [x for x in _vector(sg._tab, 10, f"sg{s}.operators", "<I") if "len(" in x.what])
        for t in range(sg.TensorsLength()):
            tensor = sg.Tensors(t)
            kinds["shape"] += _vector(tensor._tab, 4, f"t{t}.shape", "<i") + _field(tensor._tab, 6, f"t{t}.type", "<b")
            kinds["structure"] += _field(tensor._tab, 8, f"t{t}.buffer", "<I")
            q = tensor.Quantization()
            if q is not None:
                kinds["quantisation"] += (_vector(q._tab, 8, f"t{t}.scale", "<f")
                                          + _vector(q._tab, 10, f"t{t}.zero_point", "<q")
                                          + _field(q._tab, 16, f"t{t}.quantized_dimension", "<i"))
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            kinds["structure"] += (_field(op._tab, 4, f"op{i}.opcode_index", "<I")
                                   + _vector(op._tab, 6, f"op{i}.inputs", "<i")
                                   + _vector(op._tab, 8, f"op{i}.outputs", "<i"))
            cls = _tflite_class(_OPTIONS_NAMES.get(op.BuiltinOptionsType(), "")) if op.BuiltinOptionsType() else None
            table = op.BuiltinOptions()
            if cls is not None and table is not None:
                options = flatbuffers.table.Table(table.Bytes, table.Pos)
                for name, slot, fmt in _scalar_slots(cls):
                    kinds["options"] += _field(options, slot, f"op{i}.{cls.__name__}.{name}", fmt)
    return {kind: tuple(sites) for kind, sites in kinds.items()}


# ---------------------------------------------------------------------------------------------------------------
# mutations

_LIMITS = {"<b": (-128, 127), "<B": (0, 255), "<h": (-2 ** 15, 2 ** 15 - 1), "<H": (0, 2 ** 16 - 1),
           "<i": (-2 ** 31, 2 ** 31 - 1), "<I": (0, 2 ** 32 - 1), "<q": (-2 ** 63, 2 ** 63 - 1),
           "<Q": (0, 2 ** 64 - 1)}


def _new_value(site: Site, old: float | int, rnd: random.Random) -> float | int | bool:
    if site.fmt in ("<f", "<d"):
        return rnd.choice([float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e-45, 1e38, old * 2, -old])
    if site.fmt == "<?":
        return not old
    if site.what.startswith("len("):  # shorter only: a longer vector would read past its end, the bytes cases
        return rnd.choice([0, max(old - 1, 0)])
    value = rnd.choice([0, -1, -3, 1, 2, 3, 7, old + 1, old - 1, old * 2, old + 256, 65536, 2 ** 31 - 1,
                        rnd.randint(-5, 300)])
    low, high = _LIMITS[site.fmt]
    return min(max(value, low), high)


def _patch_sites(data: bytes, sites: tuple[Site, ...], rnd: random.Random) -> tuple[bytes, str]:
    buffer = bytearray(data)
    changes = []
    for site in rnd.sample(sites, k=min(len(sites), rnd.choice((1, 1, 1, 2, 3)))):
        old = struct.unpack_from(site.fmt, buffer, site.offset)[0]
        new = _new_value(site, old, rnd)
        struct.pack_into(site.fmt, buffer, site.offset, new)
        changes.append(f"{site.what}: {old} -> {new}")
    return bytes(buffer), "; ".join(changes)


def _flip_bits(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    buffer = bytearray(data)
    positions = [rnd.randrange(len(buffer)) for _ in range(rnd.choice((1, 1, 2, 8)))]
    for position in positions:
        buffer[position] ^= 1 << rnd.randrange(8)
    return bytes(buffer), f"bit flips at {positions}"


def _truncate(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    length = rnd.choice([rnd.randrange(len(data)), rnd.randrange(64), len(data) - rnd.randrange(1, 64)])
    return data[:max(length, 0)], f"truncated to {length} bytes"


# .ini keys worth breaking and values that break them.
_INI_KEYS = ("core_clock", "Sram_clock_scale", "Sram_ports_used", "Sram_burst_length", "Sram_read_latency",
             "Sram_max_reads", "OffChipFlash_clock_scale", "OffChipFlash_ports_used", "axi0_port", "axi1_port",
             "OffChipFlash_read_latency", "Dram_clock_scale")
_MODE_KEYS = ("arena_cache_size", "const_mem_area", "arena_mem_area", "cache_mem_area")
_INI_VALUES = ("nan", "inf", "-inf", "0", "-1", "-3", "1e400", "abc", "", "1e-300", "2", "65536", "99999999999999999",
               "Axi2", "Sram", "OnChipFlash", "500e6")


def _ini_case(rnd: random.Random, directory: Path) -> tuple[Path, str]:
    parser = configparser.ConfigParser()
    parser.optionxform = str  # keep the key case Vela's files use
    parser.read(resolve_config_file("Arm/vela.ini"))
    changes = []
    for _ in range(rnd.choice((1, 1, 2))):
        section, keys = rnd.choice(((f"System_Config.{SYSTEM}", _INI_KEYS), (f"Memory_Mode.{MODE}", _MODE_KEYS)))
        key, value = rnd.choice(keys), rnd.choice(_INI_VALUES)
        parser[section][key] = value
        changes.append(f"[{section}] {key}={value!r}")
    path = directory / "fuzz.ini"
    with path.open("w") as handle:
        parser.write(handle)
    return path, "; ".join(changes)


# ---------------------------------------------------------------------------------------------------------------
# the oracle

class _RanPastLimit(BaseException):
    """Raised by the alarm when a case is still running long past its time limit (a hang); not an
    Exception, so no `except Exception` in the code under test can swallow it."""


def _alarm(signum: int, frame: object) -> None:
    raise _RanPastLimit


def _check_in_process(options: RunOptions, what: str) -> str:
    """Run one case; return 'ok' or 'error', or fail the test with the case's description."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, options.time_limit_seconds + HANG_SECONDS)
    try:
        result = run(options)
    except _RanPastLimit:
        pytest.fail(f"{what}: still running {HANG_SECONDS:g} s after its limit of {options.time_limit_seconds} s")
    except NpuschedError as exc:
        message = " ".join(str(exc).split())
        assert message and "internal error" not in message, what
        outcome = "error"
    except Exception as exc:  # noqa: BLE001 - anything else is the bug this test exists to find
        pytest.fail(f"{what}: {type(exc).__name__}: {exc}")
    else:
        assert result.schedule is not None and result.evaluation is not None, what
        format_summary(result)
        json.dumps(document(result), allow_nan=False)  # strict JSON: no NaN or infinity anywhere
        outcome = "ok"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return outcome


def _model_case(rnd: random.Random, directory: Path) -> tuple[RunOptions, str]:
    source = rnd.choice(SEED_MODELS)
    data = source.read_bytes()
    kind = rnd.choice(("structure", "shape", "quantisation", "options", "options", "bytes", "truncate"))
    if kind == "bytes":
        mutated, change = _flip_bits(data, rnd)
    elif kind == "truncate":
        mutated, change = _truncate(data, rnd)
    else:
        sites = model_sites(source)[kind] or model_sites(source)["structure"]
        mutated, change = _patch_sites(data, sites, rnd)
    path = directory / "fuzz.tflite"
    path.write_bytes(mutated)
    options = RunOptions(model_path=path, accelerator_config="ethos-u55-128", config_files=("Arm/vela.ini",),
                         system_config=SYSTEM, memory_mode=MODE, solver="heuristic",
                         time_limit_seconds=TIME_LIMIT_SECONDS)
    return options, f"{source.name} ({kind}) {change}"


def _config_case(rnd: random.Random, directory: Path) -> tuple[RunOptions, str]:
    ini, change = _ini_case(rnd, directory)
    options = RunOptions(model_path=rnd.choice(SEED_MODELS[:2]), accelerator_config="ethos-u55-128",
                         config_files=(str(ini),), system_config=SYSTEM, memory_mode=MODE, solver="heuristic",
                         arena_cache_size=rnd.choice((None, None, 0, 1, 4096)), time_limit_seconds=TIME_LIMIT_SECONDS)
    return options, f"ini {change}, arena cache {options.arena_cache_size}"


def test_seed_models_are_present() -> None:
    missing = [str(path) for path in SEED_MODELS if not path.is_file()]
    assert not missing and len(SEED_MODELS) >= 8, f"fuzz seed models missing: {missing}"


def test_fuzzed_inputs_give_a_schedule_or_one_clear_error(tmp_path: Path) -> None:
    rnd = random.Random(20240917)
    outcomes = {"ok": 0, "error": 0}
    for number in range(CASES):
        make = _config_case if rnd.random() < 0.15 else _model_case
        options, what = make(rnd, tmp_path)
        outcomes[_check_in_process(options, f"case {number}: {what}")] += 1
    # Both outcomes occur: the mutations are neither all harmless nor all fatal.
    assert outcomes["ok"] >= CASES // 10 and outcomes["error"] >= CASES // 10, outcomes


def _cli(args: list[str], limit_seconds: float) -> subprocess.CompletedProcess[str]:
    # The timeout catches a hang only (subprocess.TimeoutExpired fails the test).
    return subprocess.run([sys.executable, "-m", "npusched.app.cli", *args], capture_output=True, text=True,
                          timeout=limit_seconds + HANG_SECONDS, cwd=REPO)


@pytest.mark.parametrize("number", range(CLI_CASES))
def test_fuzzed_command_lines_exit_0_or_2_with_one_error_line(number: int, tmp_path: Path) -> None:
    """The default solver (CP-SAT) behind the real command line, on mutated models and options."""
    rnd = random.Random(7000 + number)
    options, what = _model_case(rnd, tmp_path)
    extra = rnd.choice((["--seed", str(rnd.choice((-5, 2 ** 31 - 1, 2 ** 31, -(2 ** 40))))],
                        ["--time-limit", rnd.choice(("2", "inf", "nan", "-1", "0"))],
                        ["--workers", rnd.choice(("1", "0", "100000"))], ["--json", str(tmp_path / "out.json")]))
    limit = 2.0
    args = [str(options.model_path), "--accelerator-config", "ethos-u55-128", "--time-limit", str(limit), *extra]
    done = _cli(args, limit)
    lines = done.stderr.strip().splitlines()
    assert done.returncode in (0, 2), f"{what} {extra}: exit {done.returncode}: {done.stderr}"
    if done.returncode == 0:
        # The one warning allowed: on a slow machine, loading alone can take longer than the 2 s given.
        too_short = [line for line in lines if line.startswith("warning: --time-limit ") and "too short" in line]
        assert lines == too_short[:1], f"{what} {extra}: {done.stderr}"
        assert "Total cycles" in done.stdout
    else:
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{what} {extra}: {done.stderr}"
        assert "internal error" not in lines[0], f"{what} {extra}: {lines[0]}"
