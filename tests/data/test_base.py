import json
from pathlib import Path

import pytest

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.data import DataFormatError, EditDataModule
from lightning_edit.data.declared import DeclaredGroup, declared_metrics
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.errors import ConfigError
from lightning_edit.resources import ASSETS_DIR


class Numbers(EditDataModule):
    """A toy benchmark: one case per record ``{"case_id": int, "subject": str}``."""

    def load_cases(self) -> list[EditCase]:
        cases = []
        for index, record in enumerate(read_records(self.path)):
            reader = RecordReader(self.path, index, record)
            subject = reader.string("subject")
            if subject == "skip me":
                self.skip(index, "asked to")
                continue
            request = EditRequest("{} is", subject, "new", "old")
            group = self.declared_groups()["rewrite"].shared_answer([f"{subject} is"], "new", "old")
            cases.append(EditCase(reader.get("case_id", int), (request,), {"rewrite": group}, f"{self.path}#{index}"))
        return cases

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        return {"rewrite": DeclaredGroup({"prob": "ES"})}


def write(path: Path, records: list) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


@pytest.fixture
def numbers_file(tmp_path: Path) -> Path:
    return write(tmp_path / "numbers.json", [{"case_id": i, "subject": f"s{i}"} for i in range(20)])


def test_read_records_json_and_jsonl(tmp_path: Path):
    records = [{"a": 1}, {"a": 2}]
    assert read_records(write(tmp_path / "r.json", records)) == records
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text('{"a": 1}\n\n{"a": 2}\n', encoding="utf-8")
    assert read_records(jsonl) == records


def test_read_records_builtin_path():
    assert read_records("builtin:data/zsre.json") == read_records(ASSETS_DIR / "data" / "zsre.json")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.json", '[{"a": 1},', "malformed JSON at line 1"),
        ("bad.jsonl", '{"a": 1}\n{"a": \n', "malformed JSON on line 2"),
        ("object.json", '{"a": 1}', "expected a JSON list of records, found dict"),
        ("record.json", '[{"a": 1}, 3]', "record 1: expected a JSON object, found int"),
    ],
)
def test_read_records_errors(tmp_path: Path, name: str, text: str, message: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message) as error:
        read_records(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("latin1.json", b'[{"a": "caf\xe9"}]', "not UTF-8 text: byte 0xe9 on line 1"),
        ("ff.jsonl", b'{"a": 1}\n\xff\n', "not UTF-8 text: byte 0xff on line 2"),
        ("deep.json", b"[" * 100_000, "the JSON is nested too deeply"),
        ("deep.jsonl", b'{"a": 1}\n' + b"[" * 100_000, "the JSON on line 2 is nested too deeply"),
    ],
    ids=["latin-1", "0xff", "deep", "deep line"],
)
def test_undecodable_or_too_deep_files_are_named(tmp_path: Path, name: str, data: bytes, message: str):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DataFormatError, match=message) as error:
        read_records(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_read_records_missing_file(tmp_path: Path):
    with pytest.raises(DataFormatError, match="file not found"):
        read_records(tmp_path / "absent.json")


def test_record_reader_fields():
    record = {"n": 3, "flag": True, "nested": {"s": "x"}, "items": ["a", 1], "ans": {"str": "y"}, "p": "Paris is"}
    reader = RecordReader("f.json", 4, record)
    assert reader.get("n", int) == 3
    assert reader.string("nested.s") == "x"
    assert reader.string("absent", default=None) is None
    assert reader.answer("ans") == "y"
    assert reader.answer("nested.s") == "x"
    assert reader.template("p", "Paris") == "{} is"
    cases = [
        (lambda: reader.get("flag", int), "flag", "expected int, found bool"),
        (lambda: reader.string("n"), "n", "expected str, found int"),
        (lambda: reader.string("nested.t"), "nested.t", "missing"),
        (lambda: reader.strings("items"), "items[1]", "expected str, found int"),
        (lambda: reader.answer("n"), "n", "expected str or dict"),
        (lambda: reader.answer("nested"), "nested", 'object with a string "str"'),
        (lambda: reader.template("p", "Rome"), "p", "does not occur"),
    ]
    for call, field, message in cases:
        with pytest.raises(DataFormatError, match=message) as error:
            call()
        assert str(error.value).startswith(f"f.json: record 4: field {field!r}: ")
        assert (error.value.path, error.value.index, error.value.field) == ("f.json", 4, field)


def test_limit_takes_first_cases(numbers_file: Path):
    dm = Numbers(str(numbers_file), limit=5)
    dm.setup()
    assert [case.case_id for case in dm.cases] == [0, 1, 2, 3, 4]


def test_offset_skips_cases_before_limit_and_sampling(numbers_file: Path):
    dm = Numbers(str(numbers_file), offset=15, limit=3)
    dm.setup()
    assert [case.case_id for case in dm.cases] == [15, 16, 17]
    dm = Numbers(str(numbers_file), offset=15, limit=3, sample_seed=0)
    dm.setup()
    assert {case.case_id for case in dm.cases} <= {15, 16, 17, 18, 19}
    with pytest.raises(DataFormatError, match="data.offset=20 skips all 20 edit cases"):
        Numbers(str(numbers_file), offset=20).setup()
    with pytest.raises(ConfigError, match="data.offset=-1"):
        Numbers(str(numbers_file), offset=-1)


def test_seeded_sample_is_deterministic_and_ordered(numbers_file: Path):
    def sample(seed: int) -> list[int]:
        dm = Numbers(str(numbers_file), limit=6, sample_seed=seed)
        dm.setup()
        return [case.case_id for case in dm.cases]

    assert sample(1) == sample(1) == sorted(sample(1))
    assert sample(1) != sample(2)
    assert len(set(sample(2))) == 6


def test_limit_larger_than_file_keeps_all(numbers_file: Path):
    dm = Numbers(str(numbers_file), limit=100, sample_seed=0)
    dm.setup()
    assert len(dm.cases) == 20


def test_duplicate_case_id_names_file_record_and_field(tmp_path: Path):
    path = write(
        tmp_path / "dup.json",
        [{"case_id": 7, "subject": "a"}, {"case_id": 8, "subject": "b"}, {"case_id": 7, "subject": "c"}],
    )
    with pytest.raises(DataFormatError, match="duplicate case_id 7") as error:
        Numbers(str(path)).setup()
    assert str(error.value).startswith(f"{path}: record 2: field 'case_id': ")
    assert f"{path}#0" in str(error.value)


def test_skip_is_recorded(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = write(tmp_path / "skip.json", [{"case_id": 0, "subject": "a"}, {"case_id": 1, "subject": "skip me"}])
    dm = Numbers(str(path))
    dm.setup()
    assert [case.case_id for case in dm.cases] == [0]
    assert dm.skipped == [{"record": 1, "reason": "asked to"}]
    assert "record 1 skipped: asked to" in caplog.text


def test_dataloader_yields_lists_of_cases(numbers_file: Path):
    dm = Numbers(str(numbers_file), batch_size=8)
    dm.setup()
    batches = list(dm.val_dataloader())
    assert [len(batch) for batch in batches] == [8, 8, 4]
    assert all(isinstance(batch, list) and all(isinstance(case, EditCase) for case in batch) for batch in batches)
    assert [len(batch) for batch in dm.test_dataloader()] == [8, 8, 4]
    assert list(dict.fromkeys(n for c in dm.cases for n in c.metric_names)) == ["ES"]


def test_declared_metrics_are_derived_from_the_groups_in_report_order(numbers_file: Path):
    """Each group's ``_filtered`` and metrics of scored text, then the ``_pre`` of the groups scored before editing,
    then each group's metrics of generated text, then the derived ones."""
    groups = {
        "a": DeclaredGroup({"prob": "A", "token_acc": "A_acc"}, {"answer_exact_bare": "A_gen"}),
        "b": DeclaredGroup({"prob": "B"}, {"answer_exact_bare": "B_gen"}, pre_edit_filter=True),
        "c": DeclaredGroup({"logprob": "C"}, pre_edit=True),
        "d": DeclaredGroup(generated={"entropy": "GE"}),
    }
    assert list(declared_metrics(groups, ("S",)).items()) == [
        ("A", "prob"),
        ("A_acc", "token_acc"),
        ("b_filtered", "filtered"),
        ("B", "prob"),
        ("C", "logprob"),
        ("C_pre", "logprob"),
        ("A_gen", "answer_exact_bare"),
        ("B_gen", "answer_exact_bare"),
        ("GE", "entropy"),
        ("S", "derived"),
    ]
    assert Numbers(str(numbers_file)).declared_metrics() == {"ES": "prob"}


def test_a_declared_group_builds_its_prompt_group_and_a_benchmark_declares_something(numbers_file: Path):
    declared = DeclaredGroup({"prob": "B"}, {"answer_exact_bare": "B_gen"}, pre_edit_filter=True)
    group = declared.shared_answer(["p", "q"], "new", "old", record_field="field")
    assert group.metrics == {"prob": "B", "answer_exact_bare": "B_gen"} and group.pre_edit_filter and not group.pre_edit
    assert group.expected == ("new", "new") and group.alternatives == ("old", "old") and group.record_field == "field"

    class Undeclared(Numbers):
        declared_groups = EditDataModule.declared_groups

    with pytest.raises(NotImplementedError, match="Undeclared declares neither its groups nor its metrics"):
        Undeclared(str(numbers_file)).declared_metrics()


def test_hyperparameters_saved(numbers_file: Path):
    dm = Numbers(str(numbers_file), limit=3, sample_seed=1, batch_size=2)
    assert dict(dm.hparams) == {"path": str(numbers_file), "limit": 3, "sample_seed": 1, "batch_size": 2, "offset": 0}


def test_an_empty_answer_names_file_record_and_field(tmp_path):
    reader = RecordReader(tmp_path / "cf.json", 7, {"target_new": {"str": " "}})
    with pytest.raises(DataFormatError, match=r"cf.json: record 7: field 'target_new': empty answer"):
        reader.answer("target_new")


def test_a_request_without_the_subject_and_a_case_keeping_some_of_its_requests():
    whole = EditRequest("What is 2 + 2?", "addition", "5")
    assert not whole.subject_in_prompt and whole.filled_prompt == "What is 2 + 2?"
    requests = tuple(EditRequest("{} is", f"s{i}", "new") for i in range(3))
    case = EditCase(7, requests, {}, "f.json#7", calls=(2, 1))
    kept = case.keeping([True, False, True])
    assert kept.requests == (requests[0], requests[2]) and kept.calls == (1, 1) and kept.source == case.source
    assert case.keeping([True, True, False]).calls == (2,)
    assert EditCase(8, requests, {}).keeping([False, True, True]).calls == ()  # one call, as before
