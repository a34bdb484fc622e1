"""Judged score kinds in real runs of the ``lightning-edit`` command (this module is imported by name).

A toy benchmark scores the unedited toy GPT-2's greedy answer to each rewrite prompt against the true object (the
toy model gives it) and against the new one (it does not), with judges a config picks: exact match and sympy (their
agreement table lands in results.json), and an LLM judge behind a test server (the cache makes a rerun ask nothing;
no file or log of either run holds the API key).
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lightning_edit.data import CounterFact
from lightning_edit.data.schema import EditCase, PromptGroup
from lightning_edit.judges.agreement import cohen_kappa, spearman
from lightning_edit.judges.kind import Generation, register_judged_kind

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-run-8d0a61f3c5"


class JudgedFacts(CounterFact):
    """Toy CounterFact scored only by judged kinds, one per entry of ``judges`` (metric name -> judge spec)."""

    def __init__(self, path: str, judges: dict[str, Any], limit: int | None = None, batch_size: int = 8):
        super().__init__(path, limit=limit, batch_size=batch_size)
        self.judges = judges
        for metric, spec in judges.items():
            register_judged_kind(f"judged_{metric}", spec, Generation(max_new_tokens=4, stop=(".", ",", "\n")))

    def load_cases(self) -> list[EditCase]:
        metrics = {f"judged_{metric}": metric for metric in self.judges}
        cases = []
        for case in super().load_cases():
            request = case.requests[0]
            prompts, expected = (request.filled_prompt,) * 2, (request.target_true, request.target_new)
            cases.append(replace(case, groups={"answer": PromptGroup(prompts, expected, metrics=metrics)}))
        return cases

    def declared_metrics(self) -> dict[str, str]:
        return {metric: f"judged_{metric}" for metric in self.judges}


def validate(
    tmp_path: Path,
    name: str,
    judges: dict,
    env: dict | None = None,
    devices: int = 1,
    status: int = 0,
    flags: tuple[str, ...] = (),
) -> tuple[dict, str, Path]:
    """A run's results.json (anywhere in its folder), its output and its folder; ``status``: its exit status."""
    directory = tmp_path / name
    command = [
        sys.executable, "-m", "lightning_edit", "validate",
        f"--config={ROOT / 'configs/methods/no_edit.yaml'}",
        "--model.lm.path=builtin:models/toy-gpt2",
        f"--data={Path(__file__).stem}.JudgedFacts",
        "--data.path=builtin:data/toy/counterfact.json",
        f"--data.judges={json.dumps(judges)}",
        "--data.limit=6",
        "--data.batch_size=3",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={directory}",
        f"--trainer.devices={devices}",
        *(["--trainer.strategy=ddp"] if devices > 1 else []),
        *flags,
    ]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parent), "HF_HUB_OFFLINE": "1"} | (env or {})
    done = subprocess.run(command, cwd=tmp_path, env=env, timeout=600, capture_output=True, text=True)
    assert done.returncode == status, done.stderr[-3000:]
    [results] = directory.rglob("results.json")
    return json.loads(results.read_text()), done.stdout + done.stderr, directory


def loopback_judge(chat_server, tmp_path) -> tuple[dict, dict]:
    """(judge spec, environment) of an openai_chat judge at the loopback server, its key in the environment."""
    spec = {
        "class_path": "openai_chat",
        "init_args": {
            "model": "judge-model",
            "base_url": chat_server.url,
            "api_key_env": "JUDGE_TEST_KEY",
            "max_retries": 0,
            "cache_dir": str(tmp_path / "cache"),
        },
    }
    return spec, {"JUDGE_TEST_KEY": KEY, "NO_PROXY": "127.0.0.1,localhost"}


@pytest.mark.parametrize("devices", [1, 2])
def test_exact_match_and_sympy_agree_in_the_results(tmp_path, devices):
    """On 2 processes too: the judges' counts and items are gathered from both."""
    judges = {"EM": "exact_match", "SYM": {"class_path": "symbolic_math"}}
    results, _, directory = validate(tmp_path, "run", judges, devices=devices)
    em = results["metrics"]["EM"]
    assert em["kind"] == "judged_EM" and "ExactMatchJudge" in em["convention"]
    assert em["n_prompts"] == 12 and em["n_missing"] == 0
    assert em["micro"] == 0.5  # the true object every time, never the new one
    judges = results["judges"]
    assert judges["judged_EM"]["class"] == "lightning_edit.judges.exact_match.ExactMatchJudge"
    assert judges["judged_SYM"]["verdicts"] == 12 and judges["judged_SYM"]["rel_tol"] == 1e-3
    [row] = results["judge_agreement"]
    assert row["judges"] == ["judged_EM", "judged_SYM"] and row["n_items"] == 12
    # each case's second prompt (the new object) scores 0 under both judges, so a case's mean holds its first score
    cases = [json.loads(line)["scores"] for line in (directory / "cases.jsonl").read_text().splitlines()]
    first = {name: [2 * case[name] for case in cases] for name in ("EM", "SYM")}
    assert sum(first["EM"]) == 6 and sum(first["SYM"]) == 5  # sympy does not read "Maezvok Motors"
    assert results["metrics"]["SYM"]["micro"] == 5 / 12
    a, b = first["EM"] + [0.0] * 6, first["SYM"] + [0.0] * 6
    assert row["kappa"] == pytest.approx(cohen_kappa(a, b)) == pytest.approx(5 / 6)
    assert row["spearman"] == pytest.approx(spearman(a, b)) and row["kappa_weights"] is None


def test_an_llm_judge_run_is_cached_and_keeps_no_key(tmp_path, chat_server):
    def respond(text: str, n: int):
        reference = text.split("Reference answer: ")[1].split("\n")[0]
        answer = text.split("Model answer: ")[1].split("\n")[0]
        if reference == "yellow":  # case 0's new object: an answer that is no verdict
            return "reply", "I cannot tell."
        return "reply", json.dumps({"verdict": "yes" if answer == reference else "no", "reason": "compared"})

    chat_server.respond = respond
    spec, env = loopback_judge(chat_server, tmp_path)
    first, first_log, first_dir = validate(tmp_path, "first", {"LLM": spec}, env)
    calls = chat_server.calls
    second, second_log, second_dir = validate(tmp_path, "second", {"LLM": spec}, env)

    assert calls == 12 and chat_server.calls == calls  # the rerun asked nothing
    llm = first["metrics"]["LLM"]
    assert (llm["n_prompts"], llm["n_missing"]) == (11, 1) and llm["micro"] == 6 / 11
    judge = first["judges"]["judged_LLM"]
    assert (judge["verdicts"], judge["from_cache"], judge["missing"], judge["failed"]) == (12, 0, 1, 0)
    assert judge["template"] == "rule_edit" and len(judge["template_sha256"]) == 64
    assert second["judges"]["judged_LLM"]["from_cache"] == 12
    for name in ("macro", "micro", "n_prompts", "n_missing", "macro_ci95"):
        assert second["metrics"]["LLM"][name] == llm[name]

    written = [p for d in (first_dir, second_dir, tmp_path / "cache") for p in d.rglob("*") if p.is_file()]
    assert len(written) > 4 and not any(KEY.encode() in p.read_bytes() for p in written)
    assert "results written to" in first_log  # the run's output was captured
    assert KEY not in first_log and KEY not in second_log


def test_a_run_whose_every_judge_request_failed_exits_1_and_keeps_its_results(tmp_path, chat_server):
    chat_server.respond = lambda text, n: ("status", 500)
    spec, env = loopback_judge(chat_server, tmp_path)
    judges = {"LLM": spec, "EM": "exact_match"}
    results, log, directory = validate(tmp_path, "down", judges, env, status=1, flags=("--trainer.logger=true",))

    path = directory / "lightning_logs" / "version_0" / "results.json"  # the default logger's folder, kept
    message = log.strip().splitlines()[-1]
    assert message.startswith(
        f"lightning-edit: error: every request to the judge failed (12 to judge-model at {chat_server.url}; "
    ), message
    assert f"no verdict for LLM, null in {path}," in message and "Traceback" not in log
    assert chat_server.calls == 12 and KEY not in log
    assert (results["metrics"]["LLM"]["n_missing"], results["metrics"]["LLM"]["macro"]) == (12, None)
    assert results["metrics"]["EM"]["n_prompts"] == 12 and results["judges"]["judged_LLM"]["failed"] == 12
