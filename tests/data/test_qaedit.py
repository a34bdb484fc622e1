"""QAEdit: its format, its teacher-forced and generated-answer metrics, its published file.

See docs/benchmarks/qaedit.md#qaedit.
"""

import json
from pathlib import Path

import pytest

from lightning_edit.data import DataFormatError, QAEdit
from lightning_edit.data.qaedit import QAEDIT
from lightning_edit.data.sources import DataSourceError
from lightning_edit.errors import ConfigError

SAMPLE = "builtin:data/samples/qaedit.json"
SHARED = Path(__file__).parents[2].parent / "shared" / "data" / "qaedit" / "QAEdit_inter_1k-0-699.json"
RECORD = {
    "id": 7,
    "source": "NQ",
    "prompt": "who painted the ceiling of the sistine chapel?",
    "target": "Raphael",
    "subject": "ceiling of the sistine chapel",
    "rephrase": "Which artist painted the Sistine Chapel ceiling?",
    "locality": [{"loc": f"question {i}", "loc_ans": f"answer {i}"} for i in range(5)],
}


def load(path, **kwargs) -> QAEdit:
    dm = QAEdit(str(path), **kwargs)
    dm.setup()
    return dm


def write(tmp_path, records) -> Path:
    path = tmp_path / "qaedit.json"
    path.write_text(json.dumps(records))
    return path


def test_a_record_becomes_a_case(tmp_path):
    (case,) = load(write(tmp_path, [RECORD])).cases
    (request,) = case.requests
    assert (request.prompt, request.subject) == ("who painted the {}?", "ceiling of the sistine chapel")
    assert (request.target_new, request.target_true) == ("Raphael", None)
    assert request.extra == {"id": 7, "source": "NQ"}
    rewrite, rephrase, locality = (case.groups[name] for name in ("rewrite", "rephrase", "locality"))
    assert rewrite.prompts == (RECORD["prompt"],) and rewrite.expected == ("Raphael",)
    assert rephrase.prompts == (RECORD["rephrase"],) and rephrase.expected == ("Raphael",)
    assert locality.prompts == tuple(f"question {i}" for i in range(5))
    assert locality.expected == tuple(f"answer {i}" for i in range(5))
    assert rewrite.metrics == {
        "token_acc": "rewrite_acc",
        "answer_exact_bare": "rewrite_gen",
        "answer_contains_bare": "rewrite_gen_contains",
    }
    assert locality.metrics == {"agreement": "locality_acc", "answer_unchanged_bare": "locality_gen"}


def test_first_locality_and_teacher_forcing_alone(tmp_path):
    dm = load(write(tmp_path, [RECORD]), locality="first", generated_answers=None)
    (case,) = dm.cases
    assert case.groups["locality"].prompts == ("question 0",)
    assert dm.declared_metrics() == {
        "rewrite_acc": "token_acc",
        "rephrase_acc": "token_acc",
        "locality_acc": "agreement",
    }
    assert set(load(write(tmp_path, [RECORD]), generated_answers="qa_inst").declared_metrics()) == {
        "rewrite_acc", "rephrase_acc", "locality_acc", "rewrite_gen", "rewrite_gen_contains", "rephrase_gen",
        "rephrase_gen_contains", "locality_gen",
    }  # fmt: skip
    with pytest.raises(ConfigError, match="data.locality='some': one of all, first"):
        QAEdit(SAMPLE, locality="some")


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"locality": []}, "locality", "at least one question/answer pair"),
        ({"locality": ["q"]}, "locality[0]", "expected an object with loc and loc_ans, found str"),
        ({"locality": [{"loc": "q"}]}, "locality[0].loc_ans", "missing"),
        ({"locality": [{"loc": " ", "loc_ans": "a"}]}, "locality[0].loc", "non-empty string"),
        ({"subject": "the pope"}, "prompt", "does not occur in the prompt"),
        ({"target": ""}, "target", "empty answer"),
    ],
)
def test_a_bad_record_is_one_line_naming_its_field(tmp_path, change, field, words):
    path = write(tmp_path, [RECORD, {**RECORD, **change}])
    with pytest.raises(DataFormatError) as error:
        load(path)
    message = str(error.value)
    assert "\n" not in message and str(path) in message and "record 1" in message
    assert f"'{field}'" in message and words in message


def test_the_sample_runs_every_metric():
    dm = load(SAMPLE)
    assert len(dm.cases) == 6 and {case.requests[0].extra["source"] for case in dm.cases} == {"NQ", "TQA", "SQA"}
    assert all(len(case.groups["locality"].prompts) == 5 for case in dm.cases)


def test_the_published_file_is_checked_against_its_hash(tmp_path, monkeypatch):
    """A file put in place by hand under the source's name is verified: the sample is not the published file."""
    monkeypatch.setenv("LIGHTNING_EDIT_DATA", str(tmp_path))
    (tmp_path / "qaedit").mkdir()
    (tmp_path / "qaedit" / "QAEdit_inter_1k.json").write_text(
        (Path(__file__).parents[2] / "lightning_edit/assets/data/samples/qaedit.json").read_text()
    )
    dm = QAEdit("qaedit")
    with pytest.raises(DataSourceError) as error:
        dm.prepare_data()
    assert "checksum mismatch" in str(error.value) and QAEDIT.files[0].sha256 in str(error.value)


@pytest.mark.skipif(not SHARED.is_file(), reason="the shared QAEdit records are absent")
def test_the_published_records_load():
    dm = load(SHARED)
    assert len(dm.cases) == 700 and not dm.skipped
    assert {case.requests[0].extra["source"] for case in dm.cases} == {"NQ", "TQA", "SQA"}
    assert dm.cases[0].requests[0].target_new == "Wilt Chamberlain *"  # the published marker, kept
    assert all(len(case.groups["locality"].prompts) == 5 for case in dm.cases)
