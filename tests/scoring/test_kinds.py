"""Score kinds: the built-in ones, kind tables and their checks, request de-duplication, and the benchmark's check
of its prompt groups."""

from dataclasses import dataclass

import pytest

from lightning_edit.cases import PromptGroup
from lightning_edit.data import CounterFact
from lightning_edit.data.base import DataFormatError
from lightning_edit.scoring.kinds import (
    BUILTIN_KINDS,
    Request,
    ScoreKind,
    Target,
    check_metrics,
    kinds_by_name,
    run_requests,
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
    assert {name: kind.label for name, kind in BUILTIN_KINDS.items()} == built_in
    assert BUILTIN_KINDS["prob"].needs_alternative and not BUILTIN_KINDS["token_acc"].needs_alternative
    assert not BUILTIN_KINDS["filtered"].scored and not BUILTIN_KINDS["derived"].scored
    assert "ROME/MEMIT CounterFact ES/PS/NS" in BUILTIN_KINDS["prob"].convention
    with pytest.raises(TypeError):
        BUILTIN_KINDS["mine"] = BUILTIN_KINDS["prob"]  # read-only: nothing registers into it


def test_two_kinds_of_one_name_are_an_error():
    class Impostor(ScoreKind):
        name, label, convention = "prob", "x", "x"

    with pytest.raises(ValueError, match="two score kinds are named 'prob': ProbabilityComparison and Impostor"):
        kinds_by_name([*BUILTIN_KINDS.values(), Impostor()])


def test_a_group_is_checked_against_the_kinds():
    check_metrics(BUILTIN_KINDS, ["prob", "token_acc"], alternatives=True, filtered=False)
    with pytest.raises(ValueError, match=r"unknown score kind\(s\) \['bleu'\]; the benchmark's kinds: \[.*'prob'"):
        check_metrics(BUILTIN_KINDS, ["bleu"], alternatives=False, filtered=False)
    with pytest.raises(ValueError, match="not computed per prompt"):
        check_metrics(BUILTIN_KINDS, ["derived"], alternatives=False, filtered=False)
    with pytest.raises(ValueError, match=r"scored by \['prob'\] needs alternatives"):
        check_metrics(BUILTIN_KINDS, ["prob"], alternatives=False, filtered=False)
    with pytest.raises(ValueError, match=r"filtered before editing or scored by \[\] needs alternatives"):
        check_metrics(BUILTIN_KINDS, ["token_acc"], alternatives=False, filtered=True)
    with pytest.raises(ValueError, match="1 prompts but 2 details"):
        PromptGroup(("p",), ("a",), details=({}, {}))


class MisnamedGroup(CounterFact):
    """A benchmark whose rewrite group names a kind it does not have."""

    def load_cases(self):
        from dataclasses import replace

        cases = super().load_cases()
        return [replace(cases[0], groups={"rewrite": replace(cases[0].groups["rewrite"], metrics={"bleu": "ES"})})]


def test_the_benchmark_checks_its_groups_naming_the_record():
    data = MisnamedGroup("builtin:data/toy/counterfact.json")
    with pytest.raises(DataFormatError, match=r"counterfact.json: record 0: field 'rewrite': prompt group: unknown"):
        data.setup()


@dataclass(frozen=True)
class Echo(Request):
    text: str
    calls = []  # a class attribute, not a field: the batches it was asked

    @classmethod
    def run(cls, model, tokenizer, requests, batch_size):
        cls.calls.append([r.text for r in requests])
        return [r.text.upper() for r in requests]


def test_each_distinct_request_runs_once_in_one_call_per_type():
    results = run_requests(None, None, [Echo("a"), Echo("b"), Echo("a")], batch_size=4)
    assert Echo.calls == [["a", "b"]]
    assert results == {Echo("a"): "A", Echo("b"): "B"}


def test_a_request_type_that_does_not_say_how_is_an_error():
    @dataclass(frozen=True)
    class Orphan(Request):
        x: int

    with pytest.raises(NotImplementedError, match="Orphan says what it computes but not how"):
        run_requests(None, None, [Orphan(1)], batch_size=1)


def test_target_requests_are_values():
    assert Target("p", "a") == Target("p", "a") and len({Target("p", "a"), Target("p", "a")}) == 1
