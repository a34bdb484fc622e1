import json
from pathlib import Path

import pytest

from lightning_edit.cases import EditCase
from lightning_edit.data import DataFormatError, ZsRE
from lightning_edit.errors import ConfigError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "data"
SHARED_DATA = Path(__file__).parents[2].parent / "shared" / "data"
ZSRE = "builtin:data/zsre.json"


def load(path: str | Path, **kwargs) -> ZsRE:
    dm = ZsRE(str(path), **kwargs)
    dm.setup()
    return dm


def test_alt_convention_is_the_default():
    dm = load(ZSRE)
    assert dm.edit_target == "alt"
    assert len(dm.cases) == 11
    case = dm.cases[0]
    assert (case.case_id, case.source) == (0, f"{ZSRE}#0")
    (request,) = case.requests
    assert (request.prompt, request.subject) == ("Which company produced {}?", "Gibson Les Paul")
    assert (request.target_new, request.target_true) == ("Yamaha", "Gibson")
    assert request.extra["pred"] == "Gibson" and "cond" in request.extra
    groups = case.groups
    assert list(groups) == ["rewrite", "rephrase", "locality", "neighborhood"]
    assert groups["rewrite"].prompts == ("Which company produced Gibson Les Paul?",)
    assert groups["rewrite"].expected == ("Yamaha",) and groups["rewrite"].metrics == {"token_acc": "rewrite_acc"}
    assert groups["rephrase"].prompts == ("Which company manufactures Gibson Les Paul?",)
    assert groups["rephrase"].expected == ("Yamaha",) and groups["rephrase"].metrics == {"token_acc": "rephrase_acc"}
    loc = "nq question: who sang lead vocals on hotel california"
    assert groups["locality"].prompts == (loc,) and groups["locality"].expected == ("Don Henley",)
    assert groups["locality"].metrics == {"agreement": "locality_acc"}
    assert groups["neighborhood"].prompts == (loc + "?",) and groups["neighborhood"].expected == ("Don Henley",)
    assert groups["neighborhood"].metrics == {"token_acc": "neighborhood_acc"}
    assert all(group.alternatives is None for group in groups.values())


def test_empty_alt_is_skipped_on_the_record():
    dm = load(ZSRE)
    assert len(dm.skipped) == 1
    assert dm.skipped[0]["record"] == 5 and "alt" in dm.skipped[0]["reason"]
    assert 5 not in [case.case_id for case in dm.cases]


def test_answers0_convention():
    dm = load(ZSRE, edit_target="answers0")
    assert len(dm.cases) == 12 and not dm.skipped
    request = dm.cases[0].requests[0]
    assert (request.target_new, request.target_true) == ("Gibson", None)
    assert dm.cases[0].groups["rewrite"].expected == ("Gibson",)
    mustang = next(case for case in dm.cases if case.requests[0].subject == "Ford Mustang")
    assert mustang.requests[0].target_new == "Ford Motor Company"


def test_unknown_target_is_rejected():
    with pytest.raises(ConfigError, match="data.edit_target='pred'"):
        ZsRE(ZSRE, edit_target="pred")


def test_case_id_from_record_when_present(tmp_path: Path):
    records = json.loads((FIXTURES / "zsre-missing-field.json").read_text(encoding="utf-8"))[:1]
    records[0]["case_id"] = 41
    path = tmp_path / "zsre.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    assert load(path).cases[0].case_id == 41


@pytest.mark.parametrize(
    ("name", "index", "field", "message"),
    [
        ("zsre-missing-field.json", 1, "loc_ans", "missing"),
        ("zsre-wrong-type.json", 2, "answers", "expected list, found str"),
        ("zsre-subject-not-in-prompt.json", 1, "src", "subject 'Cracow' does not occur"),
        ("zsre-duplicate-case-id.json", 2, "case_id", "duplicate case_id 0"),
    ],
)
def test_format_errors_name_file_record_and_field(name: str, index: int, field: str, message: str):
    path = FIXTURES / name
    with pytest.raises(DataFormatError, match=message) as error:
        load(path)
    assert str(error.value).startswith(f"{path}: record {index}: field {field!r}: ")


def test_malformed_json_names_file_and_position():
    path = FIXTURES / "zsre-malformed.json"
    with pytest.raises(DataFormatError, match=r"malformed JSON at line \d+, column \d+") as error:
        load(path)
    assert str(error.value).startswith(str(path))


def test_limit_and_seeded_sample():
    assert [case.case_id for case in load(ZSRE, limit=3).cases] == [0, 1, 2]
    first, again, other = (load(ZSRE, limit=4, sample_seed=seed).cases for seed in (0, 0, 1))
    assert [c.case_id for c in first] == [c.case_id for c in again]
    assert [c.case_id for c in first] != [c.case_id for c in other]


def test_dataloader_batches_are_lists_of_cases():
    batches = list(load(ZSRE, batch_size=4).val_dataloader())
    assert [len(batch) for batch in batches] == [4, 4, 3]
    assert all(isinstance(batch, list) and all(isinstance(c, EditCase) for c in batch) for batch in batches)


def test_real_file_loads():
    path = SHARED_DATA / "zsre" / "zsre_mend_train-1k.json"
    if not path.is_file():
        pytest.skip(f"{path} not available")
    dm = load(path)
    assert len(dm.cases) == 998
    assert [skip["record"] for skip in dm.skipped] == [534, 723]
    assert len(load(path, edit_target="answers0").cases) == 1_000
