"""Vela's backend compiling npusched's schedules (--output-dir), and the JSON document reproducing a schedule.

The oracle is Vela itself: its own estimate of the compiled schedule must equal the evaluator's op by op, and for
the heuristic (Vela's legacy scheduler reproduced) the ``_vela.tflite`` must be the one plain ``vela`` writes.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import CONFIGS, EXPORTS_DIR, model_path, run_options

from npusched.app.api import solve_options
from npusched.app.cli import main
from npusched.app.pipeline import run
from npusched.app.replay import as_compiled, read_schedule
from npusched.frontend.normalise import repack
from npusched.io.report_json import document
from npusched.schedule.evaluator import evaluate
from npusched.solvers.cpsat import SearchBudget
from npusched.vela import backend
from npusched.vela.backend import Compilation, VelaRefusal, compile_schedule, output_paths, tflite_contents
from npusched.vela.command import run_options_from_vela_args, vela_executable, vela_hardware_args

MODELS = ("keyword_scrambled_8bit", "kws_dscnn_int8", "ad01_int8")
BACKEND_CONFIGS = ("u55-128_hee_shared_size", "u65-256_mid_dedicated256k")
CASES = [(config, model) for config in BACKEND_CONFIGS for model in MODELS]


def _plain_vela(model: str, config: str, output_dir: Path) -> Path:
    subprocess.run([vela_executable(), str(model_path(model)), *vela_hardware_args(CONFIGS[config]),
                    "--debug-force-legacy-core", "--output-dir", str(output_dir)],
                   check=True, capture_output=True, cwd=output_dir.parent)
    return output_dir / f"{model}_vela.tflite"


@pytest.mark.slow
@pytest.mark.parametrize(("config", "model"), CASES)
def test_heuristic_compiles_to_velas_own_file(config: str, model: str, tmp_path: Path) -> None:
    """Forced into Vela's backend, the heuristic's schedule gives Vela's own .tflite and Vela's own estimate."""
    result = run(run_options(config, model, solver="heuristic"))
    compiled = compile_schedule(result, tmp_path / "ours")
    assert all(path.is_file() for path in (compiled.tflite_path, compiled.summary_csv_path,
                                           compiled.per_layer_csv_path))
    assert compiled.agreed, compiled.warnings()
    assert len(compiled.ops) == len(result.network.npu_ops)
    assert tflite_contents(compiled.tflite_path) == tflite_contents(_plain_vela(model, config, tmp_path / "vela"))


@pytest.mark.slow
@pytest.mark.parametrize(("config", "model"), CASES)
def test_cpsat_schedule_compiles_and_vela_agrees(config: str, model: str, tmp_path: Path) -> None:
    result = run(run_options(config, model, solver="cpsat", time_limit_seconds=5, deterministic=True, workers=1))
    compiled = compile_schedule(result, tmp_path)
    assert compiled.agreed, compiled.warnings()
    assert compiled.vela_total_cycles == pytest.approx(result.evaluation.total_cycles, rel=1e-4)
    assert {op.op_index for op in compiled.ops} == {op.index for op in result.network.npu_ops}


@pytest.mark.parametrize("ahead", [False, True])
def test_a_refused_decision_names_the_op_and_writes_nothing(tmp_path: Path, ahead: bool) -> None:
    """In this process or in the process started ahead, a decision Vela rejects is the same refusal."""
    result = run(run_options("u65-256_mid_dedicated256k", "kws_dscnn_int8", solver="heuristic"))
    buffered = next(op for op in result.schedule.ops if op.weight_buffering.is_buffered)
    wrong = replace(buffered, weight_buffering=replace(
        buffered.weight_buffering, buffer_sizes=tuple(size + 16 for size in buffered.weight_buffering.buffer_sizes)))
    earlier = output_paths(result.options.model_path, result.arch.system_config, tmp_path)[0]
    earlier.write_bytes(b"an earlier compilation")
    with pytest.raises(VelaRefusal, match=f"op {buffered.op_index} "), \
            Compilation(result.options, tmp_path, ahead=ahead) as compilation:
        compilation.finish(replace(result, schedule=result.schedule.with_ops([wrong])))
    assert sorted(p.name for p in tmp_path.iterdir()) == [earlier.name]
    assert earlier.read_bytes() == b"an earlier compilation"


@pytest.mark.slow
@pytest.mark.parametrize(("config", "model", "solver"), [
    ("u55-128_hee_shared_size", "str_ww_int8", "heuristic"),
    ("u65-256_mid_dedicated256k", "kws_dscnn_int8", "cpsat"),
    ("u55-128_hee_shared", "keyword_scrambled_8bit", "cpsat"),
])
def test_the_document_reproduces_the_schedule(config: str, model: str, solver: str) -> None:
    result = run(run_options(config, model, solver=solver, time_limit_seconds=5, deterministic=True, workers=1))
    doc = json.loads(json.dumps(document(result)))
    schedule = read_schedule(doc, result.network, result.arch)
    evaluation = evaluate(result.network, result.arch, schedule)
    assert evaluation.total_cycles == result.evaluation.total_cycles
    assert evaluation.peak_fast_storage == result.evaluation.peak_fast_storage
    for op in result.network.npu_ops:
        assert evaluation.op(op.index).total_cycles == result.evaluation.op(op.index).total_cycles
    npu = [record for record in doc["ops"] if record["placement"] == "npu"]
    assert all(record["subgraph"] and record["subgraph_index"] >= 0 for record in npu)


def test_the_prefetch_window_is_needed_to_reproduce_a_schedule() -> None:
    """str_ww_int8 under Size leaves smaller prefetch windows than its ops' last slices: without them the same
    choices re-price differently, so the document must carry them."""
    result = run(run_options("u55-128_hee_shared_size", "str_ww_int8", solver="heuristic"))
    doc = json.loads(json.dumps(document(result)))
    for record in doc["ops"]:
        record.get("prefetch_window", {}).update(slack_ofm_depth=None, tail_slack_cycles=None)
    schedule = read_schedule(doc, result.network, result.arch)
    assert evaluate(result.network, result.arch, schedule).total_cycles != result.evaluation.total_cycles


@pytest.mark.slow
def test_cli_output_dir_and_saved_schedule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--output-dir writes Vela's three files; --schedule compiles a saved schedule to the same .tflite."""
    model = model_path("kws_dscnn_int8")
    hardware = vela_hardware_args(CONFIGS["u55-128_hee_shared"])
    saved = tmp_path / "kws.json"
    # A limit the compile of the answer meets on a busy machine too (else the run writes the fallback's file).
    assert main([str(model), *hardware, "--solver", "cpsat", "--time-limit", "30", "--deterministic", "--workers",
                 "1", "--quiet", "--json", str(saved), "--output-dir", str(tmp_path / "a")]) == 0
    assert "agrees with npusched's" in capsys.readouterr().out
    doc = json.loads(saved.read_text())
    assert doc["vela_backend"]["agreed"] is True and doc["vela_backend"]["written"] == "answer"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        p.name for p in output_paths(model, "Ethos_U55_High_End_Embedded", tmp_path / "a"))
    assert main([str(model), *hardware, "--schedule", str(saved), "--quiet", "--output-dir", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    name = f"{model.stem}_vela.tflite"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_cli_bad_output_dir_and_schedule_are_one_line_errors(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    model = str(model_path("kws_dscnn_int8"))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for argv, fragment in (([model, "--solver", "heuristic", "--output-dir", str(a_file)], "is not a directory"),
                           ([model, "--schedule", str(a_file)], "cannot read the schedule document")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0]


def test_a_refused_deployment_keeps_the_summary_and_the_json(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A schedule Vela's backend refuses (a saved document whose weight buffer is 16 bytes larger than Vela encodes
    it) still gives the summary, the JSON and the plot; the deployment error is one line naming the op and Vela's
    reason, the exit status 2, and nothing is left in --output-dir."""
    model = str(model_path("kws_dscnn_int8"))
    hardware = vela_hardware_args(CONFIGS["u65-256_mid_dedicated256k"])
    saved = tmp_path / "saved.json"
    assert main([model, *hardware, "--solver", "heuristic", "--quiet", "--json", str(saved)]) == 0
    capsys.readouterr()
    doc = json.loads(saved.read_text())
    record = next(r for r in doc["ops"] if r.get("weight_buffering", {}).get("kind", "none") != "none")
    record["weight_buffering"]["buffer_bytes"] = [size + 16 for size in record["weight_buffering"]["buffer_bytes"]]
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(doc))
    out, plot, output_dir = tmp_path / "out.json", tmp_path / "memory.svg", tmp_path / "vela"
    assert main([model, *hardware, "--schedule", str(tampered), "--quiet", "--json", str(out),
                 "--plot-memory", str(plot), "--output-dir", str(output_dir)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: Vela's backend refuses op ") and f"op {record['op_index']} '" in line
    assert "Vela encodes weight buffers of" in line and f"the schedule is in {out}" in line
    assert "Total cycles" in captured.out and f"schedule written to {out}" in captured.out
    kept = json.loads(out.read_text())
    kept_record = next(r for r in kept["ops"] if r.get("op_index") == record["op_index"])
    assert kept_record["weight_buffering"]["buffer_bytes"] == record["weight_buffering"]["buffer_bytes"]
    assert kept["vela_backend"] is None and plot.stat().st_size > 0
    assert not output_dir.exists()


def test_a_compile_started_ahead_is_the_compile_in_this_process(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Started before the schedule exists, the forked process's compile writes the file this process's compile
    writes and reads back the same estimate; this process does not compile again (its compile is made to fail)."""
    result = run(run_options("u65-256_mid_dedicated256k", "kws_dscnn_int8", solver="heuristic"))
    here = compile_schedule(result, tmp_path / "here")
    with Compilation(result.options, tmp_path / "ahead", ahead=True) as compilation:
        def no_compile_here(*args: object) -> None:
            raise AssertionError("compiled again in the run's own process")

        compilation.begin(result.model_bytes)  # as the run does once it has read the model
        monkeypatch.setattr(backend, "_vela_compile", no_compile_here)
        compilation.submit(result.network, result.arch, result.schedule, result.model_bytes)  # and hands it over
        ahead = compilation.finish(result)
    assert ahead.agreed and ahead.ops == here.ops
    assert ahead.vela_allocation_bytes == here.vela_allocation_bytes
    assert tflite_contents(ahead.tflite_path) == tflite_contents(here.tflite_path)


def test_a_compile_finished_with_another_schedule_than_submitted_compiles_the_finished_one(tmp_path: Path) -> None:
    """The schedule handed over early is the one compiled only if it is the one finished: here the submitted one
    (with weight buffers Vela rejects) is dropped, and the run's own is compiled."""
    result = run(run_options("u65-256_mid_dedicated256k", "kws_dscnn_int8", solver="heuristic"))
    buffered = next(op for op in result.schedule.ops if op.weight_buffering.is_buffered)
    wrong = replace(buffered, weight_buffering=replace(
        buffered.weight_buffering, buffer_sizes=tuple(size + 16 for size in buffered.weight_buffering.buffer_sizes)))
    with Compilation(result.options, tmp_path, ahead=True) as compilation:
        compilation.begin(result.model_bytes)
        compilation.submit(result.network, result.arch, result.schedule.with_ops([wrong]), result.model_bytes)
        compiled = compilation.finish(result)
    assert compiled.agreed and compiled.tflite_path.is_file()


def test_a_compile_whose_process_dies_is_made_in_this_process(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The process started ahead is an optimisation: should it end without an answer, the run compiles itself."""
    result = run(run_options("u65-256_mid_dedicated256k", "kws_dscnn_int8", solver="heuristic"))
    monkeypatch.setattr(backend, "_compile_ahead", lambda *args: os._exit(3))
    with Compilation(result.options, tmp_path, ahead=True) as compilation:
        compilation.begin(result.model_bytes)
        compiled = compilation.finish(result)
    assert compiled.agreed and compiled.tflite_path.is_file()


def test_a_run_that_ends_without_a_schedule_stops_the_compile_and_leaves_no_trace(tmp_path: Path) -> None:
    """The processes begun for the graphs a run may schedule (two here) stop when it ends without a schedule."""
    output_dir = tmp_path / "new"
    compilation = Compilation(run_options("u55-128_hee_shared", "kws_dscnn_int8"), output_dir, ahead=True)
    data = model_path("kws_dscnn_int8").read_bytes()
    compilation.begin(data)
    compilation.begin(repack(data))
    processes = [ahead._process for ahead in compilation._processes.values()]
    assert len(processes) == 2 and all(p is not None and p.is_alive() for p in processes) and output_dir.is_dir()
    compilation.close()
    assert not any(p.is_alive() for p in processes if p is not None) and not output_dir.exists()


@pytest.mark.slow
def test_compilations_in_one_process_do_not_share_velas_weight_cache(tmp_path: Path) -> None:
    """Vela caches encoded weights process-wide: mobilenet_v2's Size schedule, compiled after its Performance one,
    reused the earlier compilation's weight tensors and failed in Vela's allocator before each compilation started
    with an empty cache."""
    for config in ("u55-128_hee_shared", "u55-128_hee_shared_size"):
        result = run(run_options(config, "mobilenet_v2_224_int8", solver="heuristic"))
        assert compile_schedule(result, tmp_path / config).agreed


@pytest.mark.slow
def test_compilations_in_one_process_do_not_share_velas_lut_tensors(tmp_path: Path) -> None:
    """Vela keys a LUT tensor's equivalence id by its values in a process-wide cache: a generated network with
    sigmoids, compiled for a second configuration in the same process, failed Vela's allocator ("Two different
    addresses cannot be assigned to the same tensor") before each compilation started with an empty cache."""
    from npusched.netgen import generate

    path = tmp_path / "mixed.tflite"
    path.write_bytes(generate("mixed", 50, 11))
    for config in ("u55-128_hee_shared", "u65-256_mid_dedicated256k"):
        result = run(run_options_from_vela_args(path, CONFIGS[config], solver="heuristic"))
        assert compile_schedule(result, tmp_path / config).agreed


class _Stop(Exception):
    """Raised by the stand-in for CP-SAT once it has seen the time it was given."""


def _cpsat_time_limit(monkeypatch: pytest.MonkeyPatch, **overrides: object) -> float:
    """The time limit the pipeline gives CP-SAT for kws_dscnn_int8 under a 1000 s run (no solve is made)."""
    from npusched.app import cpsat_run

    given: list[float] = []

    def stand_in(network: object, objective: object, budget: SearchBudget, **kwargs: object) -> None:
        given.append(budget.time_limit_seconds)
        raise _Stop

    monkeypatch.setattr(cpsat_run, "solve_cpsat", stand_in)
    with pytest.raises(_Stop):
        run(run_options("u55-128_hee_shared", "kws_dscnn_int8", solver="cpsat", time_limit_seconds=1000.0,
                        **overrides))
    return given[0]


def test_a_compile_that_follows_is_kept_back_from_the_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    """--output-dir's compile counts in --time-limit: with compile_follows the solve is given the limit less the
    compile's estimate (here made 500 s, so the margins below are hangs, not machine speed)."""
    from npusched.app import cpsat_run

    monkeypatch.setattr(cpsat_run, "estimated_compile_seconds", lambda network, **kwargs: 500.0)
    assert _cpsat_time_limit(monkeypatch, compile_follows=True) <= 1000.0 - 500.0
    assert _cpsat_time_limit(monkeypatch) > 1000.0 - 500.0


def test_the_public_api_keeps_the_compile_back_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """npusched.solve(..., compile_follows=True) then Result.compile(): the same keep-back as --output-dir."""
    import npusched
    from npusched.app import cpsat_run

    monkeypatch.setattr(cpsat_run, "estimated_compile_seconds", lambda network, **kwargs: 500.0)
    given: list[float] = []

    def stand_in(network: object, objective: object, budget: SearchBudget, **kwargs: object) -> None:
        given.append(budget.time_limit_seconds)
        raise _Stop

    monkeypatch.setattr(cpsat_run, "solve_cpsat", stand_in)
    for follows in (True, False):
        with pytest.raises(_Stop):
            npusched.solve(model_path("kws_dscnn_int8"), time_limit_seconds=1000.0, compile_follows=follows)
    assert given[0] <= 1000.0 - 500.0 < given[1]


def test_the_compile_estimate_grows_with_the_network() -> None:
    """Vela's compile time grows with passes and weights: MobileNet-V2 (66 passes, 3.5 MB of weights) is estimated
    well above a keyword spotter of 42 small passes, and both above the fixed part."""
    from npusched.vela.backend import COMPILE_SECONDS_FIXED, estimated_compile_seconds

    small = run(run_options("u55-128_hee_shared", "kws_dscnn_int8", solver=None)).network
    large = run(run_options("u55-128_hee_shared", "mobilenet_v2_224_int8", solver=None)).network
    assert COMPILE_SECONDS_FIXED < estimated_compile_seconds(small) < estimated_compile_seconds(large) / 2


@pytest.mark.parametrize("model", ["kws_dscnn_int8", "vww_96_int8"])
def test_a_schedule_priced_as_the_default_core_compiles_where_vela_folds_a_stride(model: str, tmp_path: Path) -> None:
    """Under vela-default the graph keeps the first convolution's stride (the default core does) while Vela's
    backend folds it into depth: the schedule is carried onto the folded pass, compiled, and Vela agrees with
    the evaluator there; the note names the folded pass and the total the compiled graph has."""
    result = solve_options(run_options("u65-256_mid_dedicated256k", model, solver="heuristic",
                                       estimator="vela-default"))
    legacy = run(run_options("u65-256_mid_dedicated256k", model, solver=None))
    first, folded = result.network.npu_ops[0], legacy.network.npu_ops[0]
    assert first.ifm.shape.depth < folded.ifm.shape.depth  # the premise: the two graphs differ there
    compiled = result.compile(tmp_path)
    assert compiled.agreed, compiled.warnings()
    assert {op.op_index for op in compiled.ops} == {op.index for op in legacy.network.npu_ops}
    assert len(compiled.notes) == 1 and f"op 0 '{first.name}'" in compiled.notes[0]
    carried, _ = as_compiled(result.run)
    assert carried.schedule.op(0).ifm_stripe.depth == folded.ifm.shape.depth
    assert carried.schedule.op(0).ofm_stripe == result.run.schedule.op(0).ofm_stripe


def test_cli_output_dir_under_vela_default_says_the_compiled_graph_differs(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    model = model_path("kws_dscnn_int8")
    hardware = vela_hardware_args(CONFIGS["u65-256_mid_dedicated256k"])
    saved = tmp_path / "kws.json"
    assert main([str(model), *hardware, "--solver", "heuristic", "--estimator", "vela-default", "--quiet",
                 "--json", str(saved), "--output-dir", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    assert "agrees with npusched's" in out
    assert "warning: Vela's backend folds the stride of op 0" in err
    assert json.loads(saved.read_text())["vela_backend"]["notes"][0].startswith("Vela's backend folds the stride")


@pytest.mark.slow
@pytest.mark.parametrize("config", ["u55-128_hee_shared", "u65-256_mid_dedicated256k"])
def test_time_steps_sharing_their_weights_are_priced_as_velas_cache_makes_them(tmp_path: Path, config: str) -> None:
    """An unrolled GRU's time steps share their kernels and biases: Vela encodes them once and hands the later
    steps the cached stream, and its estimate then reads their bias at 4 bytes a channel where an encoded scale is
    10. The Vela-faithful schedule of a Keras 3 GRU (its input kernels read from flash on ethos-u55) is priced as
    Vela's backend prices it, op by op, and so is CP-SAT's."""
    from npusched.lowering.graph import WEIGHT_TWINS
    from npusched.netgen import generate

    path = tmp_path / "gru.tflite"
    path.write_bytes(generate("gru", 50, 0, keras_style=True))
    for solver in ("heuristic", "cpsat"):
        result = run(run_options_from_vela_args(path, CONFIGS[config], solver=solver, time_limit_seconds=10.0,
                                                workers=1, deterministic=True))
        assert any(op.attr(WEIGHT_TWINS) for op in result.network.npu_ops)
        compiled = compile_schedule(result, tmp_path / solver)
        assert compiled.agreed, compiled.warnings()


@pytest.mark.slow
def test_a_refused_answer_leaves_the_fallback_compiled_beside_the_run(tmp_path: Path, monkeypatch, capsys) -> None:
    """--output-dir compiles Vela legacy's own schedule beside the run from the start: where Vela's backend
    refuses the answer, that fallback is written, and the output and the JSON say so (and why)."""
    import json as json_module

    from npusched.app.cli import main
    from npusched.vela import backend as backend_module
    from npusched.vela.command import vela_hardware_args
    from npusched.vela.forced_scheduler import VelaRefusal

    real = backend_module._vela_compile

    def refusing_cpsat(options, model_bytes, staging, plan):  # type: ignore[no-untyped-def]
        def checked():  # type: ignore[no-untyped-def]
            given = plan()
            if given.schedule.solver == "cpsat":
                raise VelaRefusal("op 0 'x': refused by this test")
            return given
        return real(options, model_bytes, staging, checked)

    monkeypatch.setattr(backend_module, "_vela_compile", refusing_cpsat)
    out, document = tmp_path / "out", tmp_path / "run.json"
    assert main([str(model_path("resnet8_ic_int8")), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]),
                 "--time-limit", "30", "--workers", "1", "--deterministic", "--quiet", "--output-dir", str(out),
                 "--json", str(document)]) == 0
    printed = capsys.readouterr().out
    written = json_module.loads(document.read_text())["vela_backend"]
    assert written["written"] == "fallback" and "refused by this test" in written["fallback_reason"]
    assert written["agreed"] and (out / "resnet8_ic_int8_vela.tflite").is_file()
    assert "of the fallback, Vela legacy's own schedule" in printed


@pytest.mark.slow
@pytest.mark.parametrize(("slow_compile", "written"), [("answer", "fallback"), ("fallback", "answer")])
def test_past_the_deadline_the_compile_done_first_is_written(tmp_path: Path, monkeypatch, slow_compile: str,
                                                             written: str) -> None:
    """Past the compile's deadline (here from the start) the run writes whichever of the answer's compile and the
    fallback's is done first. It used to wait for the fallback's alone: started at a lower priority beside the
    search, it kept kws_lstm_stacked_fused_49x40 on ethos-u65-512 1.9 s over --time-limit 30."""
    import time

    from npusched.app import pipeline

    real = backend._vela_compile

    def one_slowed(options, model_bytes, staging, plan):  # type: ignore[no-untyped-def]
        def delayed():  # type: ignore[no-untyped-def]
            given = plan()
            if (given.schedule.solver == "cpsat") == (slow_compile == "answer"):
                time.sleep(120)  # never done first: the run stops this process once the other has answered
            return given
        return real(options, model_bytes, staging, delayed)

    monkeypatch.setattr(backend, "_vela_compile", one_slowed)
    monkeypatch.setattr(pipeline, "WRITING_SECONDS", 1e6)  # the deadline is past when the compile is asked for
    out, saved = tmp_path / "out", tmp_path / "run.json"
    assert main([str(model_path("resnet8_ic_int8")), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]),
                 "--time-limit", "30", "--workers", "1", "--deterministic", "--quiet", "--output-dir", str(out),
                 "--json", str(saved)]) == 0
    record = json.loads(saved.read_text())["vela_backend"]
    assert record["written"] == written and record["agreed"] and (out / "resnet8_ic_int8_vela.tflite").is_file()
    assert ("not done within the time limit" in (record["fallback_reason"] or "")) == (written == "fallback")


@pytest.mark.slow
@pytest.mark.parametrize(("model", "order"), [("resnet8_ic_int8", ["bound", "submit"]),
                                              ("densenet_netgen", ["submit", "bound"])])
def test_the_any_schedule_bound_is_timed_first_or_runs_beside_the_compile(model: str, order: list[str],
                                                                          tmp_path: Path, monkeypatch) -> None:
    """Where one graph is searched (resnet8: nothing to rewrite) its any-schedule bound is worked out before the
    search and timed (its prediction is kept back no longer: a many-pass RNN's is a tenth of it); where two are (a
    DenseNet's in-place writes make npusched's graph another), the answer is handed to its compile as soon as it
    is chosen and the bound of its graph runs beside the compile."""
    from npusched.app import cpsat_run
    from npusched.netgen import generate

    path = model_path(model)
    if model == "densenet_netgen":
        path = tmp_path / "densenet.tflite"
        path.write_bytes(generate("densenet", 40, 1))
    events: list[str] = []
    real_submit, real_bound = backend.Compilation.submit, cpsat_run.any_schedule_bound

    def submit(self, *args):  # type: ignore[no-untyped-def]
        events.append("submit")
        return real_submit(self, *args)

    def bound(*args):  # type: ignore[no-untyped-def]
        events.append("bound")
        return real_bound(*args)

    monkeypatch.setattr(backend.Compilation, "submit", submit)
    monkeypatch.setattr(cpsat_run, "any_schedule_bound", bound)
    saved = tmp_path / "run.json"
    assert main([str(path), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]),
                 "--time-limit", "30", "--workers", "1", "--deterministic", "--quiet",
                 "--output-dir", str(tmp_path / "out"), "--json", str(saved)]) == 0
    written = json.loads(saved.read_text())
    assert events[:2] == order and written["model_stats"]["graphs_searched"] == (1 if order[0] == "bound" else 2)
    assert ("bound" in written["timings_seconds"]) == (order[0] == "bound")
    assert written["vela_backend"]["written"] == "answer"


@pytest.mark.slow
def test_past_the_deadline_a_failed_fallback_leaves_the_answers_compile_to_finish(tmp_path: Path, monkeypatch) -> None:
    """Past the compile's deadline, where the fallback's compile answers first but failed, the run waits for the
    answer's compile ahead (it stopped it and compiled again in its own process, from the start)."""
    import time

    from npusched.app import pipeline

    real, run_pid = backend._vela_compile, os.getpid()

    def fallback_fails(options, model_bytes, staging, plan):  # type: ignore[no-untyped-def]
        if os.getpid() == run_pid:
            raise AssertionError("compiled again in the run's own process")

        def slowed():  # type: ignore[no-untyped-def]
            given = plan()
            if given.schedule.solver != "cpsat":
                raise RuntimeError("the fallback's compile fails")
            time.sleep(2)  # the answer's is done after the fallback's has failed
            return given
        return real(options, model_bytes, staging, slowed)

    monkeypatch.setattr(backend, "_vela_compile", fallback_fails)
    monkeypatch.setattr(pipeline, "WRITING_SECONDS", 1e6)  # the deadline is past when the compile is asked for
    saved = tmp_path / "run.json"
    assert main([str(model_path("resnet8_ic_int8")), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]),
                 "--time-limit", "30", "--workers", "1", "--deterministic", "--quiet",
                 "--output-dir", str(tmp_path / "out"), "--json", str(saved)]) == 0
    record = json.loads(saved.read_text())["vela_backend"]
    assert record["written"] == "answer" and record["agreed"]


def _no_graph_searched(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The run's time plan searches no graph: the answer is the better of the cores' own schedules."""
    from npusched.app import cpsat_run

    real_plan = cpsat_run.plan_run

    def no_search(*args, **kwargs):  # type: ignore[no-untyped-def]
        return replace(real_plan(*args, **kwargs), vela_graph_search=False, own_graph_search=False)

    monkeypatch.setattr(cpsat_run, "plan_run", no_search)


@pytest.mark.slow
def test_a_cores_own_schedule_answered_without_searching_vela_graph_compiles_ahead(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """Where Vela's graph is not searched, a core's own schedule of it is the answer if the search finds nothing
    better: its compile is started ahead like a searched graph's. Begun only once the answer was known, it compiled
    whole in the run's process, past its deadline (pt_kws_lstm on ethos-u65-512 wrote the fallback at 30.2 s of
    --time-limit 30). Here the plan searches no graph, and the default core's schedule is the better."""
    real_compile, run_pid = backend._vela_compile, os.getpid()

    def ahead_only(options, model_bytes, staging, plan):  # type: ignore[no-untyped-def]
        if os.getpid() == run_pid:
            raise AssertionError("compiled in the run's own process")
        return real_compile(options, model_bytes, staging, plan)

    _no_graph_searched(monkeypatch)
    monkeypatch.setattr(backend, "_vela_compile", ahead_only)
    saved = tmp_path / "run.json"
    assert main([str(EXPORTS_DIR / "kws_tcn_49x40.tflite"), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]),
                 "--time-limit", "30", "--quiet", "--output-dir", str(tmp_path / "out"), "--json", str(saved)]) == 0
    document = json.loads(saved.read_text())
    assert [floor["core"] for floor in document["floors"] if floor["returned"]] == ["vela-default"]
    assert document["vela_backend"]["written"] == "answer" and document["vela_backend"]["agreed"]


@pytest.mark.slow
def test_an_answer_that_is_the_fallbacks_schedule_is_compiled_once(tmp_path: Path, monkeypatch) -> None:
    """Where the answer is Vela legacy's own schedule, which the fallback compiles beside the run, no process
    ahead is handed it too (it compiled the same schedule again, beside the any-schedule bound): they stop, and
    the fallback's compile is written as the answer. Here the plan searches no graph, and Vela legacy's schedule
    is the better."""
    handed: list[str] = []

    def submit(self, plan):  # type: ignore[no-untyped-def]
        handed.append(plan.schedule.solver)

    _no_graph_searched(monkeypatch)
    monkeypatch.setattr(backend._AheadProcess, "submit", submit)
    saved = tmp_path / "run.json"
    assert main([str(model_path("kws_dscnn_int8")), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]),
                 "--time-limit", "30", "--quiet", "--output-dir", str(tmp_path / "out"), "--json", str(saved)]) == 0
    document = json.loads(saved.read_text())
    assert [floor["core"] for floor in document["floors"] if floor["returned"]] == ["vela-legacy"]
    assert handed == [] and document["vela_backend"]["written"] == "answer" and document["vela_backend"]["agreed"]
