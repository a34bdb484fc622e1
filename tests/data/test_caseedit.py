"""CaseEdit loading (arXiv 2505.19383): cases, metrics, errors, figure.

The schema is in docs/benchmarks/caseedit.md#caseedit.
"""

import copy
import json

import pytest

from lightning_edit.cases import EditRequest
from lightning_edit.data import CaseEdit, DataFormatError
from lightning_edit.data.caseedit.datamodule import QUESTIONS, cloze_stem, letter_prompt

TOY = "builtin:data/toy/caseedit.json"
QUESTION = {
    "question": "What do I use my butter knife for?",
    "choices": {"A": "Spreading", "B": "Stirring paint", "C": "Tightening flatheads", "D": "Cutting", "E": "Prying"},
    "answer": "C",
}
RECORD = {
    "case_id": 3,
    "subject": "butter knife",
    "relation": "ObjectUse",
    "prompt": "A butter knife is used for",
    "ground_truth": "Spreading",
    "target_new": "Tightening flatheads",
    "questions": {name: copy.deepcopy(QUESTION) for name in QUESTIONS} | {"locality": QUESTION | {"answer": "D"}},
}


def load(tmp_path, records, **kwargs) -> CaseEdit:
    path = tmp_path / "caseedit.json"
    path.write_text(json.dumps(records))
    data = CaseEdit(str(path), **kwargs)
    data.setup()
    return data


def test_a_record_becomes_one_edit_and_four_questions(tmp_path):
    case = load(tmp_path, [RECORD]).cases[0]
    assert case.requests == (EditRequest("A {} is used for", "butter knife", "Tightening flatheads", "Spreading"),)
    assert list(case.groups) == list(QUESTIONS)
    reliability = case.groups["reliability"]
    assert reliability.prompts == (letter_prompt(QUESTION["question"], list(QUESTION["choices"].values())),)
    assert reliability.prompts[0].endswith("\nC. Tightening flatheads\nD. Cutting\nE. Prying\nAnswer:")
    assert reliability.expected == ("Tightening flatheads",)
    assert reliability.details[0] == {
        "options": ("A", "B", "C", "D", "E"),
        "answer": 2,
        "roles": ("true", "other", "new", "other", "other"),
    }
    assert reliability.metrics["mc_acc"] == "reliability_acc"
    assert case.groups["locality"].details[0]["answer"] == 3


def test_declared_metrics_and_cloze(tmp_path):
    data = load(tmp_path, [RECORD], convention="cloze")
    declared = data.declared_metrics()
    assert len(declared) == 20 and declared["portability_entropy"] == "mc_cloze_entropy"
    assert data.cases[0].groups["reliability"].prompts == ("What do I use my butter knife for?\nAnswer:",)
    assert data.cases[0].groups["reliability"].details[0]["options"][2] == "Tightening flatheads"
    assert cloze_stem("The Zozva vase is kept in the ___.") == "The Zozva vase is kept in the"


def test_toy_file_loads():
    data = CaseEdit(TOY, limit=50, sample_seed=1)
    data.setup()
    assert len(data.cases) == 50
    assert {case.requests[0].extra["relation"] for case in data.cases} == {"room", "colour", "maker"}


def broken(path: str, value) -> dict:
    """RECORD with the field at the dotted ``path`` set to ``value`` (deleted if value is ...)."""
    record = copy.deepcopy(RECORD)
    *parents, last = path.split(".")
    target = record
    for part in parents:
        target = target[part]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return record


@pytest.mark.parametrize(
    ("path", "value", "field", "message"),
    [
        ("subject", ..., "subject", "missing"),
        ("target_new", "spreading", "target_new", "is the ground truth"),
        ("prompt", "It is used for", "prompt", "does not occur in the prompt"),
        ("questions.portability", ..., "questions", "expected exactly the questions"),
        ("questions.locality.choices.F", "Other", "questions.locality.choices", "expected the letters A-B-C-D-E"),
        ("questions.locality.choices.E", ..., "questions.locality.choices", "expected the letters"),
        ("questions.portability.answer", "F", "questions.portability.answer", "'F' is not one of the letters"),
        ("questions.generalization.choices.E", "Cutting", "questions.generalization.choices", "duplicate choice"),
        ("questions.locality.choices.C", "Opening jars", "questions.locality.choices", "the new truth"),
        ("questions.reliability.choices.A", "Buttering", "questions.reliability.choices", "the previous truth"),
        ("questions.reliability.answer", "A", "questions.reliability.answer", "not the new truth"),
        ("questions.portability.choices.B", 4, "questions.portability.choices.B", "expected str"),
        ("questions.reliability.question", "  ", "questions.reliability.question", "empty question"),
    ],
)
def test_errors_name_file_record_and_field(tmp_path, path, value, field, message):
    with pytest.raises(DataFormatError, match=message) as error:
        load(tmp_path, [RECORD | {"case_id": 0}, broken(path, value)])
    assert (error.value.index, error.value.field) == (1, field)
    assert str(error.value).startswith(f"{tmp_path / 'caseedit.json'}: record 1: field {field!r}")


def test_the_previous_truth_may_be_absent_from_locality_and_portability(tmp_path):
    record = broken("questions.locality.choices.A", "Opening jars")
    record["questions"]["portability"]["choices"]["A"] = "Opening jars"
    case = load(tmp_path, [record]).cases[0]
    assert case.groups["locality"].details[0]["roles"] == ("other", "other", "new", "other", "other")


def test_probability_figure_from_eval_at_metrics():
    data = CaseEdit(TOY)
    results = {}
    for suffix, n, p in [("_pre", 200, 0.1), ("@10", 10, 0.9), ("@20", 20, 0.8), ("", 200, 0.7)]:
        for q in QUESTIONS:
            for metric, value in [("p_new", p), ("p_true", 1 - p), ("p_other", 0.0), ("entropy", 1.0)]:
                results[f"{q}_{metric}{suffix}"] = {"macro": value, "n_cases": n}
    figures = data.figures(results, {})
    assert list(figures) == ["caseedit_probabilities"]
    line = figures["caseedit_probabilities"].axes[0].lines[0]
    assert list(line.get_xdata()) == [0, 10, 20, 200] and list(line.get_ydata()) == [0.1, 0.9, 0.8, 0.7]
    assert data.figures({k: v for k, v in results.items() if "@" not in k and "_pre" not in k}, {}) == {}
