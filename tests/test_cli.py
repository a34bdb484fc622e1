"""End-to-end runs of the ``lightning-edit`` command on the embedded model and data."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from lightning_edit.cli import build_cli

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--trainer.enable_progress_bar=false", "--trainer.logger=false", "--trainer.accelerator=cpu"]


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)


def validate(tmp_path, *args: str) -> dict:
    build_cli(["validate", *args, *QUICK, f"--trainer.default_root_dir={tmp_path}"])
    return json.loads((tmp_path / "results.json").read_text())


def test_validate_flat_counterfact(tmp_path):
    results = validate(
        tmp_path,
        "--model=NoEdit",
        "--model.lm.path=builtin:models/tiny-gpt2",
        "--data=CounterFact",
        "--data.path=builtin:data/counterfact-flat.json",
        "--data.limit=5",
    )
    metrics = results["metrics"]
    assert set(metrics) == {"ES", "PS", "NS", "rewrite_acc", "rephrase_acc", "locality_acc"}
    assert all(m["n_cases"] == 5 and m["n_prompts"] == 5 for m in metrics.values())
    assert metrics["locality_acc"]["macro"] == 1.0  # the unedited model agrees with itself
    assert 0.0 <= metrics["ES"]["macro"] <= 1.0 and metrics["ES"]["kind"] == "prob"
    assert "probability comparison" in metrics["ES"]["convention"]
    assert results["counts"] == {"cases": 5, "skipped_records": [], "target_equals_true": [], "skipped_requests": []}
    assert results["config"]["model"]["init_args"]["lm"]["path"] == "builtin:models/tiny-gpt2"
    assert results["versions"]["torch"] and "git_hash" in results
    table = (tmp_path / "results.md").read_text()
    assert table.startswith("| metric | macro (95% CI) | micro (95% CI)") and "| ES |" in table


def test_validate_rome_counterfact_with_generation(tmp_path):
    results = validate(
        tmp_path,
        "--config",
        str(ROOT / "configs/methods/no_edit.yaml"),
        "--config",
        str(ROOT / "configs/benchmarks/counterfact.yaml"),
        "--model.lm.path=builtin:models/tiny-gpt2",
        "--data.path=builtin:data/counterfact-rome.json",
        "--data.generation=true",
        "--data.limit=2",
        "--model.scoring.generation_max_length=30",
    )
    metrics = results["metrics"]
    assert {"ES", "PS", "NS", "GE"} <= set(metrics)
    assert metrics["PS"]["n_prompts"] == 4 and metrics["NS"]["n_prompts"] == 6 and metrics["GE"]["n_prompts"] == 6
    assert metrics["GE"]["macro"] > 0


def test_validate_zsre_reports_skipped_records(tmp_path):
    """Also the unedited baseline of a composed editing run: method, preset, benchmark, then ``--model NoEdit``."""
    results = validate(
        tmp_path,
        "--config",
        str(ROOT / "configs/methods/memit.yaml"),
        "--config",
        str(ROOT / "configs/models/tiny-gpt2.yaml"),
        "--config",
        str(ROOT / "configs/benchmarks/zsre.yaml"),
        "--model=NoEdit",
    )
    assert results["config"]["model"]["class_path"] == "lightning_edit.editors.NoEdit"
    assert results["config"]["model"]["init_args"]["lm"]["path"] == "builtin:models/tiny-gpt2"
    assert set(results["metrics"]) == {"rewrite_acc", "rephrase_acc", "locality_acc", "neighborhood_acc"}
    assert results["counts"]["cases"] == 11
    assert [s["record"] for s in results["counts"]["skipped_records"]] == [5]


def test_help_and_print_config(capsys):
    with pytest.raises(SystemExit):
        build_cli(["validate", "--help"])
    assert "--model" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        build_cli(["validate", "--model=NoEdit", "--model.lm.path=x", "--data=ZsRE", "--data.path=y", "--print_config"])
    printed = capsys.readouterr().out
    assert "lightning_edit.editors.NoEdit" in printed and "edit_target: alt" in printed


def test_console_script_and_module_entry_point(tmp_path):
    """``python -m lightning_edit`` runs and exits 0 (the console script calls the same ``main``)."""
    done = subprocess.run(
        [sys.executable, "-m", "lightning_edit", "validate", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "--data" in done.stdout


#: What Lightning, torch and transformers printed before the quickstart's table, and Lightning's own metrics table.
NOISE = [
    "tensorboardX",
    "litlogger",
    "isinstance(treespec, LeafSpec)",
    "transfer_batch_to_device",
    "We strongly recommend passing in an `attention_mask`",
    "Validate metric",
]


def test_an_in_process_run_shows_none_of_the_noise(tmp_path, capfd, caplog):
    """``build_cli`` in a Python process (the benchmark scripts, a notebook) keeps the :data:`NOISE` out as the
    command does: no warning of the known ones, no LitLogger tip."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_cli([
            "validate", "--model=NoEdit", "--model.lm.path=builtin:models/tiny-gpt2", "--data=CounterFact",
            "--data.path=builtin:data/counterfact-flat.json", "--data.limit=2", "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ])  # fmt: skip
    printed = "".join(capfd.readouterr()) + caplog.text + "".join(str(warning.message) for warning in caught)
    assert [noise for noise in NOISE if noise in printed] == [], printed[-3000:]
    assert list(tmp_path.rglob("results.json"))  # in the default logger's folder


def test_quickstart_prints_progress_and_one_table(tmp_path):
    """The quickstart as a user runs it (default logger and progress bars; fewer cases): none of the :data:`NOISE`,
    and the metrics table once."""
    done = subprocess.run(
        [
            sys.executable, "-m", "lightning_edit", "validate", "--config", str(ROOT / "configs/quickstart.yaml"),
            "--data.limit=2", f"--model.stats.cache_dir={tmp_path / 'cache'}", f"--trainer.default_root_dir={tmp_path}",
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr
    assert [noise for noise in NOISE if noise in printed] == [], printed[-3000:]
    assert printed.count("| metric | macro (95% CI) |") == 1
    assert "key statistics" in printed  # the progress bars still show
