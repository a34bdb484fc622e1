"""The score-kind registry: built-in kinds, registration rules, request de-duplication and schema validation."""

from dataclasses import dataclass

import pytest

from lightning_edit.data.schema import PromptGroup
from lightning_edit.scoring.kinds import (
    Request,
    ScoreKind,
    Target,
    register_kind,
    register_request,
    run_requests,
    score_kind,
    score_kinds,
)


def test_built_in_kinds_and_their_labels():
    built_in = {
        "prob": "probability comparison",
        "token_acc": "token accuracy",
        "agreement": "argmax agreement",
        "entropy": "n-gram entropy",
        "logprob": "log-probability",
        "filtered": "left out by the pre-edit filter",
        "derived": "derived",
    }
    assert {name: kind.label for name, kind in score_kinds().items() if name in built_in} == built_in
    assert score_kind("prob").needs_alternative and not score_kind("token_acc").needs_alternative
    assert not score_kind("filtered").scored and not score_kind("derived").scored
    assert "ROME/MEMIT CounterFact ES/PS/NS" in score_kind("prob").convention


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown score kind 'nope'; known: \[.*'prob'"):
        score_kind("nope")


def test_another_class_cannot_take_a_registered_name():
    class Impostor(ScoreKind):
        name, label, convention = "prob", "x", "x"

    with pytest.raises(ValueError, match="'prob' is already registered by ProbabilityComparison"):
        register_kind(Impostor())


def test_schema_validates_metrics_against_the_registry():
    with pytest.raises(ValueError, match="unknown score kind 'bleu'"):
        PromptGroup.shared_answer(["p"], "a", bleu="BLEU")
    with pytest.raises(ValueError, match="not computed per prompt"):
        PromptGroup.shared_answer(["p"], "a", derived="S")
    with pytest.raises(ValueError, match=r"scored by \['prob'\] needs alternatives"):
        PromptGroup.shared_answer(["p"], "a", prob="ES")
    with pytest.raises(ValueError, match="1 prompts but 2 details"):
        PromptGroup(("p",), ("a",), details=({}, {}))


@dataclass(frozen=True)
class Echo(Request):
    text: str


def test_each_distinct_request_runs_once_in_one_runner_call_per_type():
    calls = []

    def echo(model, tokenizer, requests, batch_size):
        calls.append([r.text for r in requests])
        return [r.text.upper() for r in requests]

    register_request(Echo, echo)
    results = run_requests(None, None, [Echo("a"), Echo("b"), Echo("a")], batch_size=4)
    assert calls == [["a", "b"]]
    assert results == {Echo("a"): "A", Echo("b"): "B"}


def test_a_request_type_without_runner_is_an_error():
    @dataclass(frozen=True)
    class Orphan(Request):
        x: int

    with pytest.raises(ValueError, match="no runner is registered for requests of type Orphan"):
        run_requests(None, None, [Orphan(1)], batch_size=1)


def test_target_requests_are_values():
    assert Target("p", "a") == Target("p", "a") and len({Target("p", "a"), Target("p", "a")}) == 1
