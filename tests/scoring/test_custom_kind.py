"""A benchmark brings its own score kind and its own judge without touching the package.

The kind (exact match of a greedy continuation), its request type (a greedy generation), a judge (first words equal)
and the benchmark are defined here; the test runs them through the ``lightning-edit`` command (this module is
imported by name, as a user's own module would be) under ``single`` and ``sequential``, on 1 and 2 processes, and
checks that both give the same numbers. Nothing is registered anywhere: another benchmark may give the same kind name
another meaning in the same process.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from lightning_edit.cases import EditCase
from lightning_edit.data import CounterFact
from lightning_edit.judges.base import Judge, JudgeInput, Verdict
from lightning_edit.judges.kind import Generation, JudgedKind
from lightning_edit.scoring import generate
from lightning_edit.scoring.kinds import PromptItem, Request, ScoreKind

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Greedy(Request):
    """The greedy continuation of a prompt, ``max_new_tokens`` long."""

    prompt: str
    max_new_tokens: int

    @classmethod
    def run(cls, model, tokenizer, requests: list["Greedy"], batch_size: int) -> list[str]:
        texts = {}
        for budget in sorted({r.max_new_tokens for r in requests}):
            chunk = [r for r in requests if r.max_new_tokens == budget]
            prompts = [r.prompt for r in chunk]
            texts.update(zip(chunk, generate(model, tokenizer, prompts, max_new_tokens=budget, batch_size=batch_size)))
        return [texts[r] for r in requests]


class ExactMatch(ScoreKind):
    name, label = "greedy_exact_match", "greedy exact match"
    convention = "1 if the greedy continuation of the prompt starts with ' ' + the expected answer"

    def requests(self, item: PromptItem, config) -> list[Request]:
        return [Greedy(item.prompt, max_new_tokens=6)]

    def value(self, item: PromptItem, current, unedited) -> float:
        return float(current[0].startswith(" " + item.expected))


def first_word(text: str) -> str:
    return (text.split() or [""])[0].strip(".,")


class FirstWordJudge(Judge):
    """1 if the answer's first word is the reference's first word (a final full stop or comma left out)."""

    convention = "1 if the first words of the answer and of the reference are equal, without a final . or ,"

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        first = [first_word(item.prediction) == first_word(item.references[0]) for item in items]
        return [Verdict(float(same), "same first word" if same else "another first word") for same in first]


class GreedyCounterFact(CounterFact):
    """CounterFact with the rewrite prompt also scored by greedy exact match (``EM``) and by :class:`FirstWordJudge`
    on a generated answer (``FW``)."""

    def own_kinds(self) -> list[ScoreKind]:
        return [ExactMatch(), JudgedKind("first_word", FirstWordJudge(), Generation(max_new_tokens=4))]

    def load_cases(self) -> list[EditCase]:
        cases = super().load_cases()
        greedy = {"greedy_exact_match": "EM", "first_word": "FW"}
        return [
            replace(case, groups=case.groups | {"greedy": replace(case.groups["rewrite"], metrics=greedy)})
            for case in cases
        ]

    def declared_metrics(self) -> dict[str, str]:
        return super().declared_metrics() | {"EM": "greedy_exact_match", "FW": "first_word"}


class StillTrue(ExactMatch):
    """Another benchmark's kind of the same name, another meaning: the greedy continuation starts with the
    original answer."""

    convention = "1 if the greedy continuation of the prompt starts with ' ' + the original answer"

    def value(self, item: PromptItem, current, unedited) -> float:
        return float(current[0].startswith(" " + item.alternative))


class StillTrueCounterFact(GreedyCounterFact):
    def own_kinds(self) -> list[ScoreKind]:
        return [StillTrue(), JudgedKind("first_word", "exact_match", Generation(max_new_tokens=4))]


def start(tmp_path: Path, name: str, devices: int, protocol: str) -> subprocess.Popen:
    """A toy run of ROME on ``devices`` processes, started; :func:`outputs` waits for it."""
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
        f"--model.stats.cache_dir={tmp_path / f'stats-{name}'}",  # each run its own: the two run side by side
        f"--model.protocol={protocol}",
        *(["--model.eval_at=[3]"] if protocol == "sequential" else []),
        "--model.scoring.pre_edit=true",
        f"--trainer.devices={devices}",
        *(["--trainer.strategy=ddp"] if devices > 1 else []),
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={directory}",
    ]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parent), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outputs(tmp_path: Path, name: str, run: subprocess.Popen) -> tuple[dict, list[dict]]:
    stderr = run.communicate(timeout=600)[1]
    assert run.returncode == 0, stderr[-3000:]
    directory = tmp_path / name
    results = json.loads((directory / "results.json").read_text())
    cases = [json.loads(line) for line in (directory / "cases.jsonl").read_text().splitlines()]
    return results, cases


@pytest.mark.multiprocess
@pytest.mark.parametrize("protocol", ["single", "sequential"])
def test_own_kind_on_one_and_two_processes(tmp_path, protocol):
    runs = {name: start(tmp_path, name, devices, protocol) for name, devices in (("one", 1), ("two", 2))}
    (one, one_cases), (two, two_cases) = (outputs(tmp_path, name, run) for name, run in runs.items())
    em, fw = one["metrics"]["EM"], one["metrics"]["FW"]
    assert em["kind"] == "greedy_exact_match" and em["convention"] == ExactMatch.convention
    assert one["metrics"]["EM_pre"]["macro"] == 0.0  # the unedited model continues with the true answer
    assert em["macro"] > 0.5  # ROME's edits reach greedy decoding
    assert fw["kind"] == "first_word" and FirstWordJudge.convention in fw["convention"]
    assert fw["macro"] >= em["macro"] and one["metrics"]["FW_pre"]["macro"] < fw["macro"]
    for results in (one, two):  # the judge's own report, gathered from every process
        assert results["judges"]["first_word"]["class"] == f"{Path(__file__).stem}.FirstWordJudge"
    checkpoint = 3 if protocol == "sequential" else 0  # the cases eval_at scores after 3 edits
    verdicts = one["judges"]["first_word"]["verdicts"]  # distinct items: an answer an edit left unchanged counts once
    assert 6 < verdicts <= 2 * 6 + checkpoint  # each case before and after its edit
    assert two["judges"]["first_word"] == one["judges"]["first_word"]  # the case the sampler repeats counts once
    if protocol == "sequential":
        assert one["metrics"]["EM@3"]["n_cases"] == 3
    assert one["metrics"].keys() == two["metrics"].keys()
    for name, result in one["metrics"].items():
        assert two["metrics"][name]["n_cases"] == result["n_cases"], name
        for aggregation in ("macro", "micro"):
            assert two["metrics"][name][aggregation] == pytest.approx(result[aggregation], abs=1e-6), name
    for metric in ("EM", "FW"):
        assert [c["scores"][metric] for c in one_cases] == [c["scores"][metric] for c in two_cases], metric


def scored_in_process(data: GreedyCounterFact) -> dict:
    """The unedited toy GPT-2's scores of the first 3 cases, without the CLI: the scorer runs the kinds' own request
    types and judges."""
    from lightning_edit.evaluation import CaseScorer, ScoringConfig
    from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    data.setup()
    scorer = CaseScorer(model, tokenizer, ScoringConfig(), data.score_kinds)
    return scorer.score(data.cases, scorer.reference(data.cases))


def test_the_kind_is_scored_in_process():
    scores = scored_in_process(GreedyCounterFact("builtin:data/toy/counterfact.json", limit=3))
    assert scores["EM"][0] == "greedy_exact_match" and scores["FW"][0] == "first_word"
    assert [value for *_, value in scores["EM"][1]] == [0.0, 0.0, 0.0]  # the toy model knows the true answers


def test_another_benchmark_gives_the_same_names_another_meaning():
    """No state outlives a benchmark: the same kind names, other behaviour, in the same process, then the first
    benchmark again unchanged."""
    path = "builtin:data/toy/counterfact.json"
    still_true = scored_in_process(StillTrueCounterFact(path, limit=3))
    assert [value for *_, value in still_true["EM"][1]] == [1.0, 1.0, 1.0]  # the unedited model says the true answer
    assert [value for *_, value in still_true["FW"][1]] == [0.0, 0.0, 0.0]  # exact match of 4 tokens: never
    again = scored_in_process(GreedyCounterFact(path, limit=3))
    assert [value for *_, value in again["EM"][1]] == [0.0, 0.0, 0.0]
