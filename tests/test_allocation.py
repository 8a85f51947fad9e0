"""Fast-storage addresses: the allocator places every live buffer without overlap, in no more than Vela's own
allocation, and where the live bytes fit the limit but a naive placement does not, it fits."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import CONFIGS, golden_cases, golden_path, load_corpus, run_options

from npusched.schedule.allocation import allocate, allocate_ranges, live_peak, overlapping_buffers
from npusched.schedule.evaluator import evaluate, verify
from npusched.schedule.memory_layout import LiveRange
from npusched.solvers.heuristic import heuristic_schedule

DEDICATED = "u65-256_mid_dedicated256k"


def _first_fit_in_order(ranges: tuple[LiveRange, ...]) -> int:
    """The naive allocation: ranges in the order they start, each at the lowest free 16-byte address."""
    placed: list[tuple[LiveRange, int]] = []
    top = 0
    for r in sorted(ranges, key=lambda r: r.start):
        address = 0
        for other, at in sorted(((o, a) for o, a in placed if o.start <= r.end and r.start <= o.end),
                                key=lambda item: item[1]):
            if at >= address + r.size:
                break
            address = max(address, -(-(at + other.size) // 16) * 16)
        placed.append((r, address))
        top = max(top, address + r.size)
    return top


def _heuristic(config: str, model: str, **overrides: object) -> tuple[object, object, object, object]:
    arch, network = load_corpus(model, config, **overrides)
    schedule = heuristic_schedule(network, arch, run_options(config, model).optimise)
    return arch, network, schedule, evaluate(network, arch, schedule)


def test_small_case_naive_fragments() -> None:
    """Three buffers: the short one first leaves a hole the late large one cannot use; the peak is reachable."""
    ranges = (LiveRange(("a",), 0, 1, 16), LiveRange(("b",), 0, 3, 16), LiveRange(("c",), 2, 3, 32))
    assert live_peak(ranges) == 48
    assert _first_fit_in_order(ranges) == 64
    allocation = allocate_ranges(ranges)
    assert allocation.size_bytes == 48
    assert not overlapping_buffers(allocation.buffers)


def test_live_bytes_fit_where_a_naive_allocation_does_not() -> None:
    """kws_dscnn on the U65 with its dedicated SRAM cut to the heuristic's own peak: the live bytes fit at every
    step, placing the buffers in the order they appear needs more than the limit, the allocator needs no more."""
    arch, network, schedule, evaluation = _heuristic(DEDICATED, "kws_dscnn_int8")
    peak = evaluation.network_peak_fast_storage
    arch, network, schedule, evaluation = _heuristic(DEDICATED, "kws_dscnn_int8", arena_cache_size=peak)
    assert evaluation.network_peak_fast_storage <= peak
    ranges = evaluation.network_memory.live_ranges
    assert _first_fit_in_order(ranges) > peak
    allocation = allocate(network, arch, schedule, evaluation)
    assert allocation.size_bytes <= peak
    assert not overlapping_buffers(allocation.buffers)
    assert not verify(network, arch, schedule, evaluation, limit=peak)


def test_allocation_is_deterministic() -> None:
    from npusched.schedule import allocation as allocation_module

    arch, network, schedule, evaluation = _heuristic(DEDICATED, "mobilenet_v2_224_int8")
    first = allocate(network, arch, schedule, evaluation)
    allocation_module._offsets.cache_clear()  # worked out again, not the answer kept
    second = allocate(network, arch, schedule, evaluation)
    assert [b.offset_bytes for b in first.buffers] == [b.offset_bytes for b in second.buffers]


def test_an_allocation_kept_for_its_geometry_places_the_ranges_asked_about() -> None:
    """The search's answer is kept per (start, end, size) of the ranges: ranges of the same geometry but other
    tensors get the same offsets, on their own ranges."""
    geometry = ((0, 1, 16), (0, 3, 16), (2, 3, 32))
    first = allocate_ranges([LiveRange((f"a{i}",), *span) for i, span in enumerate(geometry)])
    other = [LiveRange((f"b{i}",), *span) for i, span in enumerate(geometry)]
    second = allocate_ranges(other)
    assert [b.range for b in second.buffers] == other
    assert [b.offset_bytes for b in second.buffers] == [b.offset_bytes for b in first.buffers]
    assert second.size_bytes == first.size_bytes == 48


@pytest.mark.slow
@pytest.mark.parametrize(("config", "model"), golden_cases())
def test_heuristic_allocation_no_larger_than_velas(config: str, model: str) -> None:
    """On every corpus model and configuration the allocation of the heuristic's (Vela legacy's) schedule never
    overlaps two live buffers and needs no more than Vela's own allocation (its summary's sram_memory_used)."""
    arch, network, schedule, evaluation = _heuristic(config, model)
    allocation = allocate(network, arch, schedule, evaluation)
    assert not overlapping_buffers(allocation.buffers)
    assert all(b.offset_bytes % 16 == 0 for b in allocation.buffers)
    assert allocation.size_bytes >= allocation.live_peak_bytes
    with (golden_path(config, model) / "summary.csv").open() as handle:
        vela_bytes = float(next(csv.DictReader(handle))["sram_memory_used"]) * 1024
    assert allocation.size_bytes <= vela_bytes + 0.5


def test_random_ranges_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded random lifetimes and sizes (including unaligned ones, as rolling buffers are): every allocation is
    valid, aligned, and no smaller than the peak. Validity does not rest on how long the searches look, so they
    look a tenth as long here (every stage, greedy, climb and CP-SAT, still runs)."""
    import random

    from npusched.schedule import allocation as allocation_module

    monkeypatch.setattr(allocation_module, "CLIMB_WORK", allocation_module.CLIMB_WORK // 10)
    monkeypatch.setattr(allocation_module, "CLIMB_WORK_PER_START", allocation_module.CLIMB_WORK_PER_START // 10)
    monkeypatch.setattr(allocation_module, "CPSAT_SECONDS", allocation_module.CPSAT_SECONDS / 10)
    allocation_module._offsets.cache_clear()  # no answer kept from the full-length searches
    rng = random.Random(7)
    for _ in range(60):
        ranges = []
        for i in range(rng.randint(2, 40)):
            start = rng.randint(0, 30)
            ranges.append(LiveRange((str(i),), start, start + rng.randint(0, 6), rng.choice((16, 48, 100, 1000, 4096))))
        allocation = allocate_ranges(ranges)
        assert not overlapping_buffers(allocation.buffers)
        assert all(b.offset_bytes % 16 == 0 for b in allocation.buffers)
        assert allocation.size_bytes >= live_peak(ranges) == allocation.live_peak_bytes


def test_vela_backend_reports_its_own_allocation(tmp_path: Path) -> None:
    """Compiling a schedule, Vela's own allocator's size of the fast storage is read back: it is what Vela's
    summary reports as sram_memory_used, within the limit, and no smaller than npusched's allocation."""
    from npusched.app.pipeline import run
    from npusched.vela.backend import compile_schedule

    result = run(run_options(DEDICATED, "kws_dscnn_int8", solver="heuristic"))
    compiled = compile_schedule(result, tmp_path)
    assert compiled.vela_allocation_bytes is not None and compiled.npusched_allocation_bytes is not None
    with compiled.summary_csv_path.open() as handle:
        assert float(next(csv.DictReader(handle))["sram_memory_used"]) * 1024 == compiled.vela_allocation_bytes
    assert compiled.allocation_fits and not any("allocator" in line for line in compiled.warnings())
    assert compiled.npusched_allocation_bytes <= compiled.vela_allocation_bytes


def _fragmenting_allocator(overhead_bytes: int) -> Any:
    """An allocator that always loses ``overhead_bytes`` to fragmentation above the live peak."""
    def allocate_with_overhead(ranges: Any, **_: Any) -> Any:
        return SimpleNamespace(size_bytes=live_peak(tuple(ranges)) + overhead_bytes)
    return allocate_with_overhead


def _cpsat_under_tight_limit(monkeypatch: pytest.MonkeyPatch, overhead_bytes: int) -> tuple[Any, Any, int]:
    """resnet8 on the U65 with its dedicated SRAM at 85% of the heuristic's peak, solved by CP-SAT with answers
    judged by an allocator that loses ``overhead_bytes``."""
    import npusched.solvers.cpsat.repair as repair
    from npusched.solvers.cpsat import SearchBudget, solve_cpsat

    _, network, _, evaluation = _heuristic(DEDICATED, "resnet8_ic_int8")
    limit = int(0.85 * evaluation.network_peak_fast_storage) // 16 * 16
    arch, network, hint, hint_evaluation = _heuristic(DEDICATED, "resnet8_ic_int8", arena_cache_size=limit)
    monkeypatch.setattr(repair, "allocate_ranges", _fragmenting_allocator(overhead_bytes))
    result = solve_cpsat(network, arch,
                         SearchBudget(time_limit_seconds=60, workers=1, deterministic=True),
                         hint=hint, hint_evaluation=hint_evaluation)
    return result, evaluate(network, arch, result.schedule), limit


def test_cpsat_repairs_an_answer_whose_allocation_overflows(monkeypatch: pytest.MonkeyPatch) -> None:
    """When CP-SAT's answer does not fit at addresses, it solves again with the limit tightened by the excess
    until one does, and says how many rounds that took and what it cost."""
    overhead = 8192
    result, evaluation, limit = _cpsat_under_tight_limit(monkeypatch, overhead)
    repairs = result.model_stats["allocation_repairs"]
    assert repairs["rounds"] >= 1 and repairs["first_excess_bytes"] > 0 and repairs["fits"]
    assert result.status == "feasible"  # the first solve's bound no longer proves the tightened answer optimal
    assert evaluation.network_peak_fast_storage + overhead <= limit
    assert repairs["cost_cycles"] >= 0


def test_cpsat_falls_back_when_no_repair_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer that can never fit at addresses is never emitted: the heuristic's schedule, which does, is."""
    result, _, limit = _cpsat_under_tight_limit(monkeypatch, 1 << 30)
    repairs = result.model_stats["allocation_repairs"]
    assert result.status == "fallback" and not repairs["fits"] and repairs["first_excess_bytes"] > 0
    assert "over the limit" in result.reason


def test_cpsat_names_the_floor_when_no_schedule_fits_at_addresses(tmp_path: Path) -> None:
    """A 40-pass transformer as exported (not normalised: its layer norms' MULs on the CPU, its attention softmax
    whole) in the 128 KB arena: at the attention softmax its int32 temporaries (125,440 bytes) and the two maps
    the CPU side keeps live around that subgraph (6,272) need 131,712 bytes whatever the schedule; Vela legacy
    uses as much, 640 over. CP-SAT's per-step limits count only the subgraph's own maps, so
    tightening them cannot help: the error says no schedule fits and names the size, without repairs."""
    from npusched.app.graph_choice import SOFTMAX_DEEP_VIEWS
    from npusched.app.pipeline import load
    from npusched.errors import ScheduleError
    from npusched.netgen import generate
    from npusched.solvers.cpsat import SearchBudget, solve_cpsat
    from npusched.vela.command import run_options_from_vela_args

    model = tmp_path / "transformer.tflite"
    model.write_bytes(generate("transformer", 40, 0))
    # Vela legacy's softmax decomposition: without npusched's deeper views, which need less
    loaded = load(run_options_from_vela_args(model, CONFIGS["u55-256_hee_shared_arena128k"], normalise=False))
    arch, network = loaded.arch, loaded.build(loaded.recipe.without({SOFTMAX_DEEP_VIEWS.key})).network
    hint = heuristic_schedule(network, arch, "Performance")
    assert evaluate(network, arch, hint).allocation.size_bytes == 131712  # as Vela legacy: 128.62 KiB
    logged: list[str] = []
    with pytest.raises(ScheduleError) as raised:
        solve_cpsat(network, arch,
                    SearchBudget(time_limit_seconds=60, workers=1, deterministic=True, log=logged.append), hint=hint)
    assert raised.value.needed_bytes == 131712
    assert str(raised.value).startswith("no schedule fits 131072 bytes of fast storage; the smallest that fits "
                                        "needs 131712 bytes")
    assert "(op 'net/softmax_" in str(raised.value)
    assert not any("repair" in line for line in logged)


def test_vela_backend_takes_npuscheds_offsets_where_its_own_do_not_fit(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Vela's allocator needs more than the limit (here a stand-in that lays every buffer end to end),
    Vela is handed npusched's offsets for the same live ranges: the compiled fast storage fits the limit."""
    from ethosu.vela import hillclimb_allocation

    from npusched.app.pipeline import run
    from npusched.vela.backend import compile_schedule

    def end_to_end(live_ranges: list[Any], max_iterations: Any, memory_limit: int) -> list[int]:
        addresses, top = [], 0
        for lr in live_ranges:
            addresses.append(top)
            top += -(-lr.size // 16) * 16
        return addresses

    _, _, _, evaluation = _heuristic(DEDICATED, "kws_dscnn_int8")
    peak = evaluation.network_peak_fast_storage
    result = run(run_options(DEDICATED, "kws_dscnn_int8", solver="heuristic", arena_cache_size=peak))
    monkeypatch.setattr(hillclimb_allocation, "allocate_live_ranges", end_to_end)
    compiled = compile_schedule(result, tmp_path)
    assert compiled.hillclimb_bytes is not None and compiled.hillclimb_bytes > peak
    assert compiled.allocator == "npusched" and compiled.allocation_fits
    assert compiled.vela_allocation_bytes == compiled.npusched_allocation_bytes <= peak


@pytest.mark.slow
def test_no_larger_than_velas_hillclimb_on_a_generated_unet(tmp_path: Path) -> None:
    """A generated 400-pass U-Net in Shared_Sram, whose buffers fragment (Vela's HillClimb needed 49,904 bytes
    for a peak of 49,440 when this was written): on the same live ranges npusched's allocator needs no more.
    The graph is Vela's (the heuristic's: CP-SAT's writes the U-Net's concatenations in place, and on its ranges
    the allocator needs 50,656 bytes within its default work against HillClimb's 50,576, with 4x the work
    50,576)."""
    from ethosu.vela import hillclimb_allocation

    from npusched.app.pipeline import load_network
    from npusched.netgen import generate
    from npusched.schedule.allocation import fast_storage_ranges
    from npusched.vela.command import run_options_from_vela_args

    model = tmp_path / "unet.tflite"
    model.write_bytes(generate("unet", 400, 0))
    arch, network, _ = load_network(run_options_from_vela_args(model, CONFIGS["u55-128_hee_shared"],
                                                               solver="heuristic"))
    schedule = heuristic_schedule(network, arch, "Performance")
    ranges = fast_storage_ranges(evaluate(network, arch, schedule))

    class VelaRange:
        def __init__(self, r: LiveRange) -> None:
            self.start_time, self.end_time, self.size = r.start, r.end, r.size

        def get_alignment(self) -> int:
            return 16

    vela_ranges = [VelaRange(r) for r in ranges]
    addresses = hillclimb_allocation.allocate_live_ranges(vela_ranges, None, 1 << 40)
    vela_bytes = max(a + r.size for a, r in zip(addresses, vela_ranges, strict=True))
    allocation = allocate_ranges(ranges)
    assert not overlapping_buffers(allocation.buffers)
    assert allocation.size_bytes <= vela_bytes


@pytest.mark.slow
def test_verify_rejects_a_schedule_whose_buffers_fit_per_step_but_not_at_addresses(tmp_path: Path) -> None:
    """A generated 400-pass ResNet in Shared_Sram: with the limit at its live peak every step fits, but no
    allocation found places the buffers within it; verify says so, naming the allocation and its excess."""
    from npusched.app.pipeline import load_network
    from npusched.netgen import generate
    from npusched.vela.command import run_options_from_vela_args

    model = tmp_path / "resnet.tflite"
    model.write_bytes(generate("resnet", 400, 0))
    arch, network, _ = load_network(run_options_from_vela_args(model, CONFIGS["u55-128_hee_shared"]))
    schedule = heuristic_schedule(network, arch, "Performance")
    evaluation = evaluate(network, arch, schedule)
    allocation = evaluation.allocation
    assert not overlapping_buffers(allocation.buffers)
    peak = allocation.live_peak_bytes
    assert allocation.size_bytes > peak  # fragmentation no search here removes
    assert not verify(network, arch, schedule, evaluation, limit=peak, addresses=False)
    problems = verify(network, arch, schedule, evaluation, limit=peak)
    assert len(problems) == 1 and "allocation" in problems[0] and f"over the limit of {peak} bytes" in problems[0]
    assert not verify(network, arch, schedule, evaluation, limit=allocation.size_bytes)


@pytest.mark.slow
def test_a_size_compile_writes_npuscheds_addresses_where_they_need_less(tmp_path: Path) -> None:
    """Under --optimise Size the bytes are what a run minimises, so Vela writes npusched's offsets of the fast
    storage wherever they need less than its HillClimb's, within the limit too: kws_lstm_unrolled on ethos-u55-128,
    whose Size schedule is Vela legacy's own, takes 848 bytes with HillClimb's and 816 with npusched's, the default
    core's own figure for the file."""
    import gzip

    from conftest import EXPORTS_DIR

    from npusched.app.pipeline import run
    from npusched.vela.backend import compile_schedule
    from npusched.vela.command import run_options_from_vela_args

    config = "u55-128_hee_shared_size"
    options = run_options_from_vela_args(EXPORTS_DIR / "kws_lstm_unrolled.tflite", CONFIGS[config],
                                         solver="heuristic")
    compiled = compile_schedule(run(options), tmp_path)
    assert compiled.agreed, compiled.warnings()
    with compiled.summary_csv_path.open() as handle:
        compiled_bytes = float(next(csv.DictReader(handle))["sram_memory_used"]) * 1024
    assert compiled_bytes == compiled.vela_allocation_bytes == compiled.npusched_allocation_bytes
    assert compiled.allocator == "npusched" and compiled.hillclimb_bytes is not None
    assert compiled.hillclimb_bytes > compiled_bytes
    default_core = EXPORTS_DIR / "golden" / "vela-5.2.0-regor" / config / "kws_lstm_unrolled" / "summary.csv.gz"
    with gzip.open(default_core, "rt") as handle:
        assert compiled_bytes <= float(next(csv.DictReader(handle))["sram_memory_used"]) * 1024
