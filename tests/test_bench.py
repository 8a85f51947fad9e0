"""The benchmark harness (``npusched.bench``) the published figures come from: the configurations are the commands
the golden output was made with, the golden totals read back are Vela's, the ratios and their summaries count as
the docs say, a CSV grid resumes with what it wrote, and a timed run reads the run's own document back."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from conftest import CONFIGS, GOLDEN_ROOT, MODELS, VELA_FAILED

from npusched.bench.golden import (
    constrained,
    is_size,
    legacy_total,
    load_configs,
    select,
    size_variant,
    sweep_configuration,
    vela_hardware_args,
    without_arena,
)
from npusched.bench.paths import corpus_dir, corpus_models
from npusched.bench.process import solve_schedule
from npusched.bench.stats import TOLERANCE, number, ratio, spread
from npusched.bench.table import CsvLog, markdown, read_csv, write_csv
from npusched.errors import ConfigError

LEGACY = GOLDEN_ROOT / "vela-5.2.0-legacy"


def _option_pairs(arguments: list[str]) -> set[tuple[str, str]]:
    return {(flag, value) for flag, value in zip(arguments, arguments[1:], strict=False) if flag.startswith("--")
            and not value.startswith("--")}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_configuration_is_the_command_its_golden_output_was_made_with(name: str) -> None:
    """The options the harness gives Vela (and solve-schedule) for a configuration are those Vela's own golden run of
    that configuration was given (its flags without a value, the verbose reports, aside)."""
    ours = _option_pairs(vela_hardware_args(load_configs()[name]))
    for model in MODELS:
        if (name, model) in VELA_FAILED:
            continue
        assert ours == _option_pairs((LEGACY / name / model / "command.txt").read_text().split()), model


def test_the_configurations_groups_are_what_their_options_say() -> None:
    configs = load_configs()
    assert list(configs) == list(CONFIGS)  # the file's order
    assert [name for name, c in configs.items() if is_size(c)] == ["u55-128_hee_shared_size"]
    assert [name for name, c in configs.items() if not constrained(c)] == ["u55-128_hee_shared"]
    arena = configs["u55-256_hee_shared_arena128k"]
    assert without_arena(arena) == [] and size_variant(arena)["extra_args"] == ["--optimise", "Size"]
    assert sweep_configuration("x", arena).arena_cache_sizes == (131072,)
    assert select(configs, ["all"]) == list(configs) and select(configs, None) == list(configs)
    with pytest.raises(ConfigError, match="unknown configuration 'u55'"):
        select(configs, ["u55-128_hee_shared", "u55"])


def test_a_golden_total_is_velas_summary_and_none_where_vela_failed() -> None:
    for name in CONFIGS:
        for model in MODELS:
            total = legacy_total(name, model)
            if (name, model) in VELA_FAILED:
                assert total is None
                continue
            with (LEGACY / name / model / "summary.csv").open() as handle:
                assert total == float(next(csv.DictReader(handle))["cycles_total"])
    assert [path.stem for path in corpus_models()] == sorted(MODELS)
    assert [path.name for path in corpus_models(["dtln"])] == ["dtln.tflite"]


def test_ratios_and_their_spread_count_as_the_docs_say() -> None:
    assert ratio(90, "100") == 0.9
    assert [number(v) for v in ("", None, True, "nan", "inf", "x", "3")] == [None] * 6 + [3.0]
    assert [ratio(a, b) for a, b in ((0, 1), (1, 0), (-1, 2), ("", 2))] == [None] * 4
    values = [0.5, 2.0, TOLERANCE, TOLERANCE * 1.0001, None, math.nan]
    found = spread(values)
    assert (found.count, found.over, found.worst) == (4, 2, 2.0)
    assert found.mean == pytest.approx(math.exp(sum(map(math.log, values[:4])) / 4))
    assert str(spread([])) == "-"


def test_a_csv_grid_resumes_with_the_rows_it_wrote(tmp_path: Path) -> None:
    """Rows come back with their types (the CSV is how a long grid resumes); a row is on disk as soon as it is
    added (an interrupted grid keeps it); the rows of the run before come first."""
    path = tmp_path / "grid.csv"
    columns = ["model", "passes", "ratio", "agreed", "error"]
    first = {"model": "ad01_int8", "passes": 12, "ratio": 0.875, "agreed": True, "error": None, "other": 1}
    write_csv(path, [first], columns)
    kept = read_csv(path)
    assert kept == [{"model": "ad01_int8", "passes": 12, "ratio": 0.875, "agreed": True, "error": ""}]
    with CsvLog(path, columns, kept) as log:
        log.add({"model": "dtln", "passes": 3, "ratio": 1.5, "agreed": False})
        assert [row["model"] for row in read_csv(path)] == ["ad01_int8", "dtln"]
    assert read_csv(path)[1] == {"model": "dtln", "passes": 3, "ratio": 1.5, "agreed": False, "error": ""}
    table = markdown(read_csv(path), ["model", "ratio"], ["network", "ratio"], align="lr").splitlines()
    assert table[:2] == ["| network | ratio |", "|---|---:|"] and table[2].startswith("| ad01_int8 | 0.875")


def test_a_timed_run_reads_its_own_document_and_error_back(tmp_path: Path) -> None:
    model = corpus_dir() / "ad01_int8.tflite"
    done = solve_schedule(model, ["--solver", "heuristic"], tmp_path)
    assert done.error == "" and done.doc is not None and done.peak_rss_megabytes > 0
    assert done.cycles == done.doc["totals"]["cycles"] and done.passes == done.doc["totals"]["npu_ops"]
    failed = solve_schedule(model, ["--accelerator-config", "ethos-u99"], tmp_path)
    assert failed.done.returncode == 2 and failed.doc is None
    assert failed.error.startswith("error: ") and "ethos-u99" in failed.error


def test_a_grid_row_prices_each_run_against_each_cores_own_total() -> None:
    """A row of a versus grid (both cores' columns given, as from an earlier grid): Vela legacy's own schedule (the
    heuristic) priced by Vela legacy's model is that core's golden total, so its ratio against it is 1; every ratio
    is the run's total under that core's model over the core's own; the summaries count the row once."""
    from npusched.bench.versus import RunSpec, Settings, cell, columns, specs_in
    from npusched.bench.versus_summary import core_summary, failures, grids_table, pair_summary
    from npusched.vela.report import read_summary

    name, model = "u55-128_hee_shared", "kws_dscnn_int8"
    cores = {}
    for core, folder in (("legacy", "vela-5.2.0-legacy"), ("default", "vela-5.2.0-regor")):
        summary = read_summary(GOLDEN_ROOT / folder / name / model / "summary.csv")
        cores |= {f"{core}_cycles": float(summary["cycles_total"]), f"{core}_cpu": 0}
    specs = [RunSpec.parse("cpsat"), RunSpec.parse("heuristic")]
    identity = {"source": "corpus", "model": model, "style": "tflite", "config": name}
    row = cell(identity, corpus_dir() / f"{model}.tflite", load_configs()[name], specs,
               Settings(time_limit_seconds=5, workers=1, deterministic=True), cores=cores)
    assert set(row) <= set(columns(specs)) and specs_in(list(row)) == specs
    assert row["heuristic_vs_legacy"] == 1.0
    for spec in specs:
        for core in ("legacy", "default"):
            assert row[f"{spec.key}_vs_{core}"] == round(row[f"{spec.key}_by_{core}"] / cores[f"{core}_cycles"], 4)
        assert row[f"{spec.key}_vs_worse"] == max(row[f"{spec.key}_vs_legacy"], row[f"{spec.key}_vs_default"])
        assert row[f"{spec.key}_excluded"] == "" and row[f"{spec.key}_peak_vs_min"] == ""
    summary = core_summary([row], specs)
    assert f"vs_legacy: {row['cpsat_vs_legacy']:.3f} (worst {row['cpsat_vs_legacy']:.3f};" in summary[1]
    assert "excluded: 0" in summary and failures([row], specs) == ["0 failed runs"]
    pairs = pair_summary([row], specs, cores=True)
    assert "\n| cpsat / heuristic | " in "\n".join(pairs)
    assert "1 cells" in grids_table({"this": [row]})
    broken = cell(identity, corpus_dir() / "missing.tflite", load_configs()[name], specs[1:], Settings(), cores=cores)
    assert broken["heuristic_status"] == "error" and failures([broken], specs[1:])[0] == "1 failed runs:"


def test_a_scripts_command_line_is_its_docstring_and_the_shared_options(tmp_path: Path) -> None:
    """A script's --help is its docstring (first paragraph above the options, the rest after); the options every
    grid takes are spelt and defaulted alike; a generated network is written under a name that says what it is
    and reads back as a model."""
    from npusched.bench.cli import add_budget, add_config, add_configs, parser
    from npusched.bench.netgen_models import ARCHITECTURES, check, write_network
    from npusched.frontend.tflite_reader import read_tflite

    script = parser("What it measures,\n  in two lines.\n\n    python x.py --configs all\n")
    add_configs(script)
    add_config(script)
    add_budget(script, time_limit=10.0)
    assert script.description == "What it measures, in two lines."
    assert script.epilog is not None and script.epilog.strip() == "python x.py --configs all"
    given = script.parse_args(["--configs", "u55-128_hee_shared", "--deterministic"])
    assert (given.configs, given.config, given.time_limit, given.workers, given.deterministic) == \
        ("u55-128_hee_shared", "u55-128_hee_shared", 10.0, None, True)
    assert check(["all"]) == (list(ARCHITECTURES), ["plain"])
    with pytest.raises(ConfigError, match="'vgg'"):
        check(["vgg"])
    with pytest.raises(ConfigError, match="'onnx'"):
        check(None, ["plain", "onnx"])
    arch = next(iter(ARCHITECTURES))
    path = write_network(tmp_path, arch, 8, 3, style="keras")
    assert path.name == f"{arch}-8-s3-keras.tflite"
    assert read_tflite(path).subgraphs
