"""The report of a validate run: results files, per-case table, plots, and what reaches W&B (offline)."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from lightning_edit.cli import build_cli
from lightning_edit.judges.agreement import agreement_table
from lightning_edit.metrics.prompt_mean import aggregate
from lightning_edit.redaction import REDACTED, redact, secret_values
from lightning_edit.results import write_results

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)


def test_secret_values_are_redacted_at_any_depth():
    config = {"model": {"init_args": {"judge": {"api_key": "sk-123", "api_key_env": "OPENAI_API_KEY"}}}, "x": [{}]}
    config["trainer"] = {"logger": [{"init_args": {"password": "p", "project": "edit"}}]}
    cleaned = redact(config)
    assert cleaned["model"]["init_args"]["judge"] == {"api_key": REDACTED, "api_key_env": "OPENAI_API_KEY"}
    assert cleaned["trainer"]["logger"][0]["init_args"] == {"password": REDACTED, "project": "edit"}
    assert "sk-123" not in json.dumps(cleaned)


SECRET_FIELDS = ("token", "hf_token", "private_key", "credentials", "password", "secret", "client_secret", "API_KEY")
#: fields that end like a secret's but are settings of the editors, benchmarks and tokenizers
TEXT_TOKEN_FIELDS = {"fact_token": "subject_last", "new_tokens_per_answer_token": 3, "eos_token": "</s>"}


def test_every_secret_shaped_field_is_redacted_and_text_tokens_are_not():
    fields = {name: f"value-of-{name}" for name in SECRET_FIELDS}
    config = {"a": {"b": [fields | TEXT_TOKEN_FIELDS]}, "max_new_tokens": 8, "key": "verdict"}
    config["judge"] = {"api_key_env": "sk-pasted-here-123", "other_env": "MY_KEY"}  # a key pasted for a variable
    cleaned = redact(config)
    assert cleaned["a"]["b"][0] == dict.fromkeys(SECRET_FIELDS, REDACTED) | TEXT_TOKEN_FIELDS
    assert cleaned["judge"] == {"api_key_env": REDACTED, "other_env": "MY_KEY"}
    assert (cleaned["max_new_tokens"], cleaned["key"]) == (8, "verdict")
    assert secret_values(config) == set(fields.values()) | {"sk-pasted-here-123"}


def test_sequential_run_logs_metrics_table_and_plot_to_offline_wandb(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_API_KEY", "local-0123456789abcdef0123456789abcdef01234567")  # must never be written
    try:
        cli = build_cli(
            [
                "validate",
                f"--config={ROOT / 'configs/quickstart.yaml'}",
                "--data.limit=6",
                "--model.protocol=sequential",
                "--model.eval_at=[3]",
                "--model.stats.n_samples=300",
                f"--model.stats.cache_dir={tmp_path / 'stats'}",
                "--trainer.logger=WandbLogger",
                "--trainer.logger.init_args.offline=true",
                "--trainer.logger.init_args.project=lightning-edit-test",
                f"--trainer.logger.init_args.save_dir={tmp_path}",
                "--trainer.enable_progress_bar=false",
                f"--trainer.default_root_dir={tmp_path}",
            ]
        )
        run = cli.trainer.logger.experiment  # wandb 0.31 keeps an offline run's summary in its .wandb log
        summary, config = dict(run.summary), dict(run.config)
    finally:
        wandb.finish()
    assert summary["val/ES_macro"] == pytest.approx(1.0) and "val/ES@3_macro" in summary and "val/NS_micro" in summary
    assert summary["val/cases"]["_type"] == "table-file" and summary["val/retention"]["_type"] == "images/separated"
    assert config["config"]["model"]["class_path"] == "lightning_edit.editors.ROME"
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    (table_file,) = (run_dir / "files" / "media" / "table" / "val").glob("cases_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"][:5] == ["case_id", "subject", "prompt", "target_new", "target_true"]
    assert {"ES", "ES@3", "NS"} <= set(table["columns"]) and len(table["data"]) == 6
    assert list((run_dir / "files" / "media" / "images" / "val").glob("retention_*.png"))

    # the same report in the log directory, and no API key anywhere
    (log_dir,) = {path.parent for path in tmp_path.rglob("results.json")}
    assert (log_dir / "retention.png").is_file() and len((log_dir / "cases.jsonl").read_text().splitlines()) == 6
    for path in [*run_dir.rglob("*"), *log_dir.iterdir()]:
        if path.is_file():
            assert b"0123456789abcdef0123456789abcdef" not in path.read_bytes(), path


def test_values_that_could_not_be_computed_are_null_in_strict_json(tmp_path):
    def metric(case_ids: list[int], scores: list[float]) -> dict:
        result = aggregate(torch.tensor(case_ids), torch.tensor(scores, dtype=torch.double))
        del result["case_means"]
        return {**result, "kind": "prob", "convention": "test"}

    metrics = {"all_missing": metric([0, 1], [math.nan, math.nan]), "one_case": metric([0, 0], [1.0, 0.0])}
    constant = {"a": ("likert7", {"x": 5.0, "y": 5.0}), "b": ("likert7", {"x": 3.0, "y": 6.0})}
    judges = {"judge_agreement": agreement_table(constant)}
    path = write_results(tmp_path, metrics, {}, {}, benchmark={"ratio": math.inf}, judges=judges)

    def refuse(constant: str):
        raise AssertionError(f"results.json holds {constant}")

    results = json.loads(path.read_text(), parse_constant=refuse)
    missing, one_case = results["metrics"]["all_missing"], results["metrics"]["one_case"]
    assert missing["macro"] is None and missing["micro"] is None and missing["n_missing"] == 2
    assert one_case["macro"] == 0.5 and one_case["macro_ci95"] == [None, None]
    assert results["judge_agreement"][0]["spearman"] is None and results["benchmark"] == {"ratio": None}
    assert "| all_missing | n/a | n/a | 0 |" in (tmp_path / "results.md").read_text()
