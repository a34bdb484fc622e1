"""ScEdit's text level in runs of the ``lightning-edit`` command on the toy ScEdit-CF: scripts generated with the
paper's prompt and judged on the four Likert scales, with the token level and the Spearman heatmap beside them.

Two judges: a tiny local Hugging Face model (its rating is a function of the prompt's length, so every verdict is
valid and computable), and a test server on 127.0.0.1 (``chat_server``) whose canned replies give hand-computed means,
one missing verdict among them.
"""

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lightning_edit.cli import build_cli
from lightning_edit.data.scedit.datamodule import TEXT_METRICS
from lightning_edit.errors import ConfigError
from lightning_edit.judges import JudgeInput, LocalLMJudge
from lightning_edit.judges.llm import render
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.resources import resolve_path

ROOT = Path(__file__).resolve().parents[2]
TOY = json.loads(resolve_path("builtin:data/toy/scedit_cf.json").read_text())
QUICK = ["--trainer.enable_progress_bar=false", "--trainer.logger=false", "--trainer.accelerator=cpu"]
TEXT = list(TEXT_METRICS)  # Exec, Coh, Cons, Comp


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def length_judge(tmp_path_factory) -> Path:
    """A tiny GPT-2 judge (toy tokenizer) whose greedy answer to a prompt of L tokens is the digit (L - 1) % 7 + 1:
    token embeddings and both residual branches are zero, so the last position's output is its position embedding,
    one-hot at position % 7, which the unembedding maps to that digit."""
    directory = tmp_path_factory.mktemp("length-judge")
    _, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=2048, n_embd=7, n_layer=1, n_head=1, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for parameter in (model.transformer.wte.weight, model.lm_head.weight):
            parameter.zero_()
        for projection in (model.transformer.h[0].attn.c_proj, model.transformer.h[0].mlp.c_proj):
            projection.weight.zero_()
            projection.bias.zero_()
        model.transformer.wpe.weight.copy_(10 * torch.eye(7)[torch.arange(2048) % 7])
        for k in range(7):
            [digit] = tokenizer(str(k + 1)).input_ids
            model.lm_head.weight[digit, k] = 1.0
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def validate(tmp_path: Path, *args: str) -> dict:
    build_cli(["validate", *args, *QUICK, f"--trainer.default_root_dir={tmp_path}"])
    return json.loads((tmp_path / "results.json").read_text())


def test_the_length_judge_rates_by_prompt_length(length_judge, tmp_path):
    """The fixture's rating, computed by hand from the rendered template, is what the local judge gives."""
    judge = LocalLMJudge(str(length_judge), prompts_per_forward=1, template="scedit_executability", max_tokens=1)
    item = JudgeInput.of("How to visit the tower?", "Rome", "Step 1: Fly to Rome.", {})
    _, tokenizer = load_model_and_tokenizer(ModelSource(str(length_judge)))
    [system, user] = render(judge.template_text, item)
    length = len(tokenizer(f"{system['content']}\n\n{user['content']}\n").input_ids)
    [verdict] = judge.evaluate([item])
    assert verdict.raw == str((length - 1) % 7 + 1) and verdict.score == (length - 1) % 7 + 1


def test_a_judge_prompt_longer_than_the_local_model_is_an_error():
    judge = LocalLMJudge("builtin:models/toy-gpt2", template="scedit_executability", max_tokens=4)
    with pytest.raises(ConfigError, match=r"has 256 positions, but a prompt of the scedit_executability template is"):
        judge.evaluate([JudgeInput.of("How to visit the tower?", "Rome", "Step 1: Fly to Rome.")])


def test_toy_run_of_both_levels_judged_by_a_local_model(length_judge, tmp_path):
    """FT (2 steps) on the toy GPT-2, 3 toy ScEdit-CF cases of 2 Script Questions each: both levels and the heatmap."""
    judge = {
        "local_lm": {"path": str(length_judge), "prompts_per_forward": 1, "max_tokens": 1, "cache_dir": str(tmp_path)}
    }
    results = validate(
        tmp_path,
        f"--config={ROOT / 'configs/methods/ft.yaml'}",
        f"--config={ROOT / 'configs/models/toy-gpt2.yaml'}",
        f"--config={ROOT / 'configs/benchmarks/scedit.yaml'}",
        "--model.num_steps=2",
        "--data.limit=3",
        "--data.generation=true",
        "--data.text_level=true",
        "--data.script_prompt={question}",  # the toy GPT-2 writes scripts after a bare question, as it was trained
        "--data.script_max_new_tokens=24",
        f"--data.judge={json.dumps(judge)}",
    )
    metrics = results["metrics"]
    assert list(metrics) == ["ES", "S-ES", "S-NS", "GE", *TEXT]
    for name in TEXT:
        metric = metrics[name]
        assert (metric["n_cases"], metric["n_prompts"], metric["n_missing"]) == (3, 6, 0)
        assert 1 <= metric["macro"] <= 7 and metric["kind"] == TEXT_METRICS[name]
        assert "7-point Likert" in metric["convention"] and "sampled answer of at most 24" in metric["convention"]
    assert metrics["S-ES"]["n_prompts"] == 6 and metrics["GE"]["n_prompts"] == 6
    judges = results["judges"]
    assert sorted(judges) == sorted(TEXT_METRICS.values())
    for judge in judges.values():
        assert judge["class"].endswith("LocalLMJudge") and (judge["verdicts"], judge["missing"]) == (6, 0)
    assert (tmp_path / "scedit_spearman.png").stat().st_size > 0
    cases = [json.loads(line) for line in (tmp_path / "cases.jsonl").read_text().splitlines()]
    assert all(set(case["scores"]) == set(metrics) for case in cases)


def validate_judged_by_server(chat_server, tmp_path, monkeypatch, *flags: str) -> dict:
    """The unedited toy GPT-2's text level on the toy ScEdit-CF, judged by the loopback chat server."""
    monkeypatch.setenv("SCEDIT_JUDGE_KEY", "sk-test")
    judge = {"openai_chat": {"model": "judge-model", "base_url": chat_server.url, "api_key_env": "SCEDIT_JUDGE_KEY",
                             "max_retries": 0, "cache_dir": str(tmp_path / "cache")}}  # fmt: skip
    return validate(
        tmp_path,
        f"--config={ROOT / 'configs/methods/no_edit.yaml'}",
        "--model.lm.path=builtin:models/toy-gpt2",
        f"--config={ROOT / 'configs/benchmarks/scedit.yaml'}",
        "--data.text_level=true",
        "--data.script_max_new_tokens=16",
        f"--data.judge={json.dumps(judge)}",
        *flags,
    )


def test_text_level_judged_by_a_loopback_server(chat_server, tmp_path, monkeypatch):
    """Canned replies per scale and Script Question; the means are computed by hand."""
    questions = {q: (case, k) for case, r in enumerate(TOY[:3]) for k, q in enumerate(r["generation_prompts"])}
    seen: list[str] = []

    def respond(text: str, n: int):
        seen.append(text)
        scale = re.search(r"Dimension: (\w+)", text).group(1).lower()
        if scale == "executability":  # the paper's format, "executability:" then the rating
            return "reply", "executability:6, reason: every step can be done"
        case, k = questions[re.search(r"^- Question: (.*)$", text, re.MULTILINE).group(1)]
        if scale == "coherence":
            return "reply", json.dumps({"coherence": case + 1, "reason": "r"})
        if scale == "consistency":
            return "reply", "I cannot rate this." if (case, k) == (0, 0) else json.dumps({"consistency": 7 - 3 * k})
        return "reply", json.dumps({"completeness": 3 if "- Tag: post" in text else 9})

    chat_server.respond = respond
    results = validate_judged_by_server(chat_server, tmp_path, monkeypatch, "--data.limit=3")
    metrics = results["metrics"]
    assert chat_server.calls == 24  # 4 scales x 6 scripts
    assert (metrics["Exec"]["macro"], metrics["Exec"]["micro"], metrics["Exec"]["n_prompts"]) == (6.0, 6.0, 6)
    assert metrics["Coh"]["macro"] == metrics["Coh"]["micro"] == pytest.approx(2.0)  # cases rated 1, 2, 3
    assert metrics["Comp"]["macro"] == 3.0 and metrics["Comp"]["n_missing"] == 0  # every prompt tagged post
    cons = metrics["Cons"]  # case 0: (missing, 4); cases 1, 2: (7, 4)
    assert (cons["n_prompts"], cons["n_missing"], cons["n_cases"]) == (5, 1, 3)
    assert cons["macro"] == pytest.approx((4 + 5.5 + 5.5) / 3) and cons["micro"] == pytest.approx(26 / 5)
    report = results["judges"]["scedit_consistency"]
    assert (report["verdicts"], report["missing"], report["failed"], report["model"]) == (6, 1, 0, "judge-model")
    record = TOY[1]  # what the coherence judge reads of case 1 (the paper's Figure 9 fields)
    [text] = [t for t in seen if "Dimension: Coherence" in t and record["generation_prompts"][0] in t]
    prompt = record["prompt"]
    assert f"- Prompt: {prompt}\n- Target true: {record['ground_truth']}\n- Target new: {record['target_new']}" in text
    assert (tmp_path / "scedit_spearman.png").exists()


def test_the_unedited_models_scripts_are_judged_with_the_tag_pre(chat_server, tmp_path, monkeypatch):
    """Completeness judges by the true object for the ``_pre`` scores (tag "pre") and by the new one after editing."""

    def respond(text: str, n: int):
        scale = re.search(r"Dimension: (\w+)", text).group(1).lower()
        tag = re.search(r"^- Tag: (\w+)$", text, re.MULTILINE)
        return "reply", json.dumps({scale: 5 if tag and tag.group(1) == "pre" else 3})

    chat_server.respond = respond
    results = validate_judged_by_server(
        chat_server, tmp_path, monkeypatch, "--data.limit=1", "--model.scoring.pre_edit=true"
    )
    metrics = results["metrics"]
    assert (metrics["Comp"]["macro"], metrics["Comp_pre"]["macro"]) == (3.0, 5.0)
    assert (metrics["Exec"]["macro"], metrics["Exec_pre"]["macro"]) == (3.0, 3.0)  # the other templates have no tag
