"""A floor is a bonus, never a failure: where a Vela core's own schedule cannot be made or read back (an
exception in the read-back, a read-back that pairs nothing, a time-out), the run goes on from the other floor and
says why, in the summary and in the JSON."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import CONFIGS, model_path

import npusched.app.floors as floors
from npusched.app.cli import main
from npusched.io.report_json import document
from npusched.vela.command import run_options_from_vela_args, vela_hardware_args


def _depth_slices_error(*_: object, **__: object) -> object:
    # What a MIRROR_PAD network's read-back raised (issue 47): an operation paired with another's block.
    raise ValueError("depth slices (0, 16) must rise strictly within [0, 3]")


def _timed_out(*_: object, **__: object) -> object:
    raise subprocess.TimeoutExpired(["vela"], 10.0)


def _nothing_read(*_: object, **__: object) -> list[object]:
    return []


FAILURES = {"read_back_raises": ("schedule_from_default_core", _depth_slices_error, "could not be read back"),
            "cli_times_out": ("run_default_core", _timed_out, "did not finish within"),
            "nothing_paired": ("read_default_core_ops", _nothing_read, "passes pairs with one of the default core")}


@pytest.mark.slow
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_default_core_floor_that_fails_is_reported_and_the_run_goes_on(failure: str, monkeypatch, tmp_path: Path,
                                                                         capsys) -> None:
    name, replacement, reason = FAILURES[failure]
    monkeypatch.setattr(floors, name, replacement)
    out = tmp_path / "run.json"
    model = model_path("kws_dscnn_int8")
    assert main([str(model), *vela_hardware_args(CONFIGS["u55-128_hee_shared"]), "--time-limit", "20",
                 "--workers", "1", "--deterministic", "--quiet", "--json", str(out)]) == 0
    summary = capsys.readouterr().out
    import json

    written = json.loads(out.read_text())
    cores = {floor["core"] for floor in written["floors"]}
    missing = {entry["core"]: entry["reason"] for entry in written["floors_missing"]}
    assert "vela-legacy" in cores  # the other floor still bounds the answer
    assert "vela-default" not in cores and reason in missing["vela-default"]
    assert f"Vela default core's own schedule: none ({missing['vela-default']}" in summary


def test_without_the_vela_cli_the_default_core_floor_is_missing_with_its_reason(monkeypatch) -> None:
    """No `vela` executable: the run makes Vela legacy's floor alone and names the missing one."""
    from npusched.app import cpsat_run
    from npusched.app.pipeline import run
    from npusched.vela.command import VelaError

    def no_vela() -> str:
        raise VelaError("the vela CLI is not installed")

    monkeypatch.setattr(cpsat_run, "vela_executable", no_vela)
    options = run_options_from_vela_args(model_path("kws_dscnn_int8"), CONFIGS["u55-128_hee_shared"],
                                         time_limit_seconds=5, workers=1)
    result = run(options)
    assert [floor.core for floor in result.floors] == ["vela-legacy"]
    assert [(m.core, m.reason) for m in result.missing_floors] == [("vela-default", "the vela CLI is not installed")]
    assert document(result)["floors_missing"] == [{"core": "vela-default", "reason": "the vela CLI is not installed"}]
