import json
from pathlib import Path

import pytest

from lightning_edit.cases import EditCase
from lightning_edit.data import CounterFact, DataFormatError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "data"
SHARED_DATA = Path(__file__).parents[2].parent / "shared" / "data"
FLAT = "builtin:data/counterfact-flat.json"
ROME = "builtin:data/counterfact-rome.json"


def load(path: str | Path, **kwargs) -> CounterFact:
    dm = CounterFact(str(path), **kwargs)
    dm.setup()
    return dm


def rome_record(prompt: str = "The mother tongue of {} is", subject: str = "Jean Gabin", new=None, true=None) -> dict:
    return {
        "case_id": 4,
        "pararel_idx": 99,
        "requested_rewrite": {
            "prompt": prompt,
            "relation_id": "P103",
            "target_new": new if new is not None else {"str": "Dutch", "id": "Q7411"},
            "target_true": true if true is not None else {"str": "French", "id": "Q150"},
            "subject": subject,
        },
        "paraphrase_prompts": ["Jean Gabin spoke the language"],
        "neighborhood_prompts": ["The mother tongue of Jean Renoir is"],
        "attribute_prompts": ["Vincent van Gogh is a native speaker of"],
        "generation_prompts": ["Jean Gabin's mother tongue is"],
    }


def write(tmp_path: Path, records: list) -> Path:
    path = tmp_path / "counterfact.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_flat_format_groups():
    dm = load(FLAT)
    assert len(dm.cases) == 12
    case = dm.cases[0]
    assert (case.case_id, case.source) == (3, f"{FLAT}#0")
    (request,) = case.requests
    assert request.prompt == "The {} is located in the city of"
    assert (request.subject, request.target_new, request.target_true) == ("Eiffel Tower", "Rome", "Paris")
    assert set(case.groups) == {"rewrite", "paraphrase", "neighborhood"}
    rewrite, paraphrase, neighborhood = case.groups["rewrite"], case.groups["paraphrase"], case.groups["neighborhood"]
    assert rewrite.prompts == ("The Eiffel Tower is located in the city of",)
    assert (rewrite.expected, rewrite.alternatives) == (("Rome",), ("Paris",))
    assert rewrite.metrics == {"prob": "ES", "token_acc": "rewrite_acc"}
    assert paraphrase.prompts == ("Tourists who visit the Eiffel Tower are in the city of",)
    assert (paraphrase.expected, paraphrase.alternatives) == (("Rome",), ("Paris",))
    assert paraphrase.metrics == {"prob": "PS", "token_acc": "rephrase_acc"}
    assert neighborhood.prompts == ("The Louvre is located in the city of",)
    assert (neighborhood.expected, neighborhood.alternatives) == (("Paris",), ("Rome",))
    assert neighborhood.metrics == {"prob": "NS", "agreement": "locality_acc"}
    assert list(dict.fromkeys(n for c in dm.cases for n in c.metric_names)) == [
        "ES",
        "rewrite_acc",
        "PS",
        "rephrase_acc",
        "NS",
        "locality_acc",
    ]


def test_rome_format_groups():
    dm = load(ROME)
    assert len(dm.cases) == 8
    case = dm.cases[0]
    (request,) = case.requests
    assert (request.prompt, request.subject) == ("{} plays the", "Ludwig van Beethoven")
    assert (request.target_new, request.target_true) == ("guitar", "piano")
    assert request.extra == {
        "relation_id": "P1303",
        "pararel_idx": 11204,
        "target_new_id": "Q6607",
        "target_true_id": "Q5994",
    }
    assert set(case.groups) == {"rewrite", "paraphrase", "neighborhood", "attribute"}
    groups = case.groups
    assert groups["rewrite"].prompts == ("Ludwig van Beethoven plays the",)
    assert groups["rewrite"].metrics == {"prob": "ES", "token_acc": "rewrite_acc"}
    assert groups["paraphrase"].expected == ("guitar",) * 2 and groups["paraphrase"].alternatives == ("piano",) * 2
    assert groups["paraphrase"].metrics == {"prob": "PS", "token_acc": "rephrase_acc"}
    assert groups["neighborhood"].expected == ("piano",) * 3 and groups["neighborhood"].alternatives == ("guitar",) * 3
    assert groups["neighborhood"].metrics == {"prob": "NS", "agreement": "locality_acc"}
    assert groups["attribute"].expected == ("guitar",) * 2 and groups["attribute"].metrics == {}
    assert all(
        len(c.groups["paraphrase"].prompts) == 2 and len(c.groups["neighborhood"].prompts) == 3 for c in dm.cases
    )


def test_rome_generation_group():
    dm = load(ROME, generation=True)
    generation = dm.cases[0].groups["generation"]
    assert len(generation.prompts) == 3
    assert generation.expected == ("guitar",) * 3 and generation.alternatives is None
    assert generation.metrics == {"entropy": "GE"}
    assert list(dict.fromkeys(n for c in dm.cases for n in c.metric_names))[-1] == "GE"


def test_generation_with_flat_file_is_an_error():
    with pytest.raises(DataFormatError, match="generation=True needs the ROME format"):
        load(FLAT, generation=True)


def test_answers_as_plain_strings_and_objects(tmp_path: Path):
    rome = load(write(tmp_path, [rome_record(new="Dutch", true={"str": "French"})])).cases[0].requests[0]
    assert (rome.target_new, rome.target_true) == ("Dutch", "French")
    flat = json.loads((FIXTURES / "counterfact-missing-field.json").read_text(encoding="utf-8"))[0]
    flat.update(target_new={"str": "linguistics", "id": "Q8162"}, ground_truth={"str": "physics"})
    request = load(write(tmp_path, [flat])).cases[0].requests[0]
    assert (request.target_new, request.target_true) == ("linguistics", "physics")


def test_rome_template_created_from_subject(tmp_path: Path):
    dm = load(write(tmp_path, [rome_record(prompt="Jean Gabin, a native speaker of")]))
    request = dm.cases[0].requests[0]
    assert request.prompt == "{}, a native speaker of"
    assert dm.cases[0].groups["rewrite"].prompts == ("Jean Gabin, a native speaker of",)


@pytest.mark.parametrize(
    ("name", "index", "field", "message"),
    [
        ("counterfact-missing-field.json", 1, "rephrase_prompt", "missing"),
        ("counterfact-wrong-type.json", 2, "target_new", "expected str or dict, found list"),
        ("counterfact-subject-not-in-prompt.json", 1, "prompt", "subject 'Oslo' does not occur"),
        ("counterfact-duplicate-case-id.json", 2, "case_id", "duplicate case_id 1"),
    ],
)
def test_format_errors_name_file_record_and_field(name: str, index: int, field: str, message: str):
    path = FIXTURES / name
    with pytest.raises(DataFormatError, match=message) as error:
        load(path)
    assert str(error.value).startswith(f"{path}: record {index}: field {field!r}: ")


def test_rome_errors_name_nested_field(tmp_path: Path):
    path = write(tmp_path, [rome_record(), rome_record(prompt="Jean Gabin spoke", subject="Gabin Jean")])
    with pytest.raises(DataFormatError) as error:
        load(path)
    assert str(error.value).startswith(f"{path}: record 1: field 'requested_rewrite.prompt': subject 'Gabin Jean'")
    broken = rome_record()
    broken["neighborhood_prompts"] = "The mother tongue of Jean Renoir is"
    with pytest.raises(DataFormatError, match="record 0: field 'neighborhood_prompts': expected list, found str"):
        load(write(tmp_path, [broken]))


def test_malformed_json_names_file_and_position():
    path = FIXTURES / "counterfact-malformed.json"
    with pytest.raises(DataFormatError, match=r"malformed JSON at line \d+, column \d+") as error:
        load(path)
    assert str(error.value).startswith(str(path))


def test_limit_and_seeded_sample():
    assert [case.case_id for case in load(FLAT, limit=3).cases] == [3, 18, 27]
    first, again, other = (load(FLAT, limit=4, sample_seed=seed).cases for seed in (0, 0, 1))
    assert [c.case_id for c in first] == [c.case_id for c in again]
    assert [c.case_id for c in first] != [c.case_id for c in other]


def test_dataloader_batches_are_lists_of_cases():
    batches = list(load(ROME, batch_size=3).val_dataloader())
    assert [len(batch) for batch in batches] == [3, 3, 2]
    assert all(isinstance(case, EditCase) for batch in batches for case in batch)


@pytest.mark.parametrize(
    ("name", "count"),
    [("counterfact-edit-1k.json", 1_000), ("counterfact-val.json", 1_919), ("counterfact-train.json", 10_000)],
)
def test_real_flat_split_loads(name: str, count: int):
    path = SHARED_DATA / "counterfact" / name
    if not path.is_file():
        pytest.skip(f"{path} not available")
    dm = load(path)
    assert len(dm.cases) == count and not dm.skipped
    assert all(set(case.groups) == {"rewrite", "paraphrase", "neighborhood"} for case in dm.cases)
