"""A benchmark brings its own score kind without touching the package: exact match of a greedy continuation.

The kind, its request type (a greedy generation) and the benchmark are defined here; the test runs them through the
``lightning-edit`` command (this module is imported by name, as a user's own module would be) under ``single`` and
``sequential``, on 1 and 2 processes, and checks that both give the same numbers.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from lightning_edit.data import CounterFact
from lightning_edit.data.schema import EditCase
from lightning_edit.scoring import generate
from lightning_edit.scoring.kinds import PromptItem, Request, ScoreKind, register_kind, register_request

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Greedy(Request):
    """The greedy continuation of a prompt, ``max_new_tokens`` long."""

    prompt: str
    max_new_tokens: int


def run_greedy(model, tokenizer, requests: list[Greedy], batch_size: int) -> list[str]:
    texts = {}
    for budget in sorted({r.max_new_tokens for r in requests}):
        chunk = [r for r in requests if r.max_new_tokens == budget]
        outputs = generate(model, tokenizer, [r.prompt for r in chunk], max_new_tokens=budget, batch_size=batch_size)
        texts.update(zip(chunk, outputs))
    return [texts[r] for r in requests]


class ExactMatch(ScoreKind):
    name, label = "greedy_exact_match", "greedy exact match"
    convention = "1 if the greedy continuation of the prompt starts with ' ' + the expected answer"

    def requests(self, item: PromptItem, config) -> list[Request]:
        return [Greedy(item.prompt, max_new_tokens=6)]

    def value(self, item: PromptItem, current, unedited) -> float:
        return float(current[0].startswith(" " + item.expected))


register_request(Greedy, run_greedy)
register_kind(ExactMatch())


class GreedyCounterFact(CounterFact):
    """CounterFact with the rewrite prompt also scored by greedy exact match (``EM``)."""

    def load_cases(self) -> list[EditCase]:
        cases = super().load_cases()
        greedy = {"greedy_exact_match": "EM"}
        return [
            replace(case, groups=case.groups | {"greedy": replace(case.groups["rewrite"], metrics=greedy)})
            for case in cases
        ]

    def declared_metrics(self) -> dict[str, str]:
        return super().declared_metrics() | {"EM": "greedy_exact_match"}


def validate(tmp_path: Path, name: str, devices: int, protocol: str) -> tuple[dict, list[dict]]:
    directory = tmp_path / name
    command = [
        sys.executable,
        "-m",
        "lightning_edit",
        "validate",
        f"--config={ROOT / 'configs/quickstart.yaml'}",
        f"--data={Path(__file__).stem}.GreedyCounterFact",
        "--data.limit=6",
        "--data.batch_size=2",
        "--model.stats.n_samples=300",
        f"--model.stats.cache_dir={tmp_path / 'stats'}",
        f"--model.protocol={protocol}",
        *(["--model.eval_at=[3]"] if protocol == "sequential" else []),
        "--model.scoring.pre_edit=true",
        f"--trainer.devices={devices}",
        *(["--trainer.strategy=ddp"] if devices > 1 else []),
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={directory}",
    ]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parent), "HF_HUB_OFFLINE": "1"}
    subprocess.run(command, cwd=tmp_path, env=env, check=True, timeout=600, capture_output=True)
    results = json.loads((directory / "results.json").read_text())
    cases = [json.loads(line) for line in (directory / "cases.jsonl").read_text().splitlines()]
    return results, cases


@pytest.mark.parametrize("protocol", ["single", "sequential"])
def test_own_kind_on_one_and_two_processes(tmp_path, protocol):
    one, one_cases = validate(tmp_path, "one", 1, protocol)
    two, two_cases = validate(tmp_path, "two", 2, protocol)
    em = one["metrics"]["EM"]
    assert em["kind"] == "greedy_exact_match" and em["convention"] == ExactMatch.convention
    assert one["metrics"]["EM_pre"]["macro"] == 0.0  # the unedited model continues with the true answer
    assert em["macro"] > 0.5  # ROME's edits reach greedy decoding
    if protocol == "sequential":
        assert one["metrics"]["EM@3"]["n_cases"] == 3
    assert one["metrics"].keys() == two["metrics"].keys()
    for name, result in one["metrics"].items():
        assert two["metrics"][name]["n_cases"] == result["n_cases"], name
        for aggregation in ("macro", "micro"):
            assert two["metrics"][name][aggregation] == pytest.approx(result[aggregation], abs=1e-6), name
    assert [c["scores"]["EM"] for c in one_cases] == [c["scores"]["EM"] for c in two_cases]


def test_the_kind_is_scored_in_process():
    """Without the CLI: the scorer runs the kind's own request type through its runner."""
    from lightning_edit.evaluation import CaseScorer, ScoringConfig
    from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    data = GreedyCounterFact("builtin:data/toy/counterfact.json", limit=3)
    data.setup()
    scorer = CaseScorer(model, tokenizer, ScoringConfig())
    scores = scorer.score(data.cases, scorer.reference(data.cases))
    assert scores["EM"][0] == "greedy_exact_match"
    assert [value for *_, value in scores["EM"][1]] == [0.0, 0.0, 0.0]  # the toy model knows the true answers
