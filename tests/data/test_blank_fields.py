"""Every prompt of every loader is scored only if it holds text, and no case drops out of a metric unseen.

The rule (lightning_edit/cases.py, :func:`~lightning_edit.cases.prompt_fault`): a blank prompt (empty or whitespace
only) and an empty list of scored prompts are format errors naming file, record and field; loaders that leave bad
records out (ScEdit, RuleEdit) list the record under ``counts.skipped_records``, the others stop.
"""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lightning_edit.cases import EditCase, EditRequest, PromptGroup
from lightning_edit.data import BAKE, CaseEdit, CounterFact, RuleEdit, ZsRE
from lightning_edit.data.base import DataFormatError, EditDataModule
from lightning_edit.data.edit_training import EditTraining
from lightning_edit.data.records import read_records
from lightning_edit.resources import resolve_path

SAMPLES = {
    CounterFact: "builtin:data/counterfact-rome.json",
    "flat": "builtin:data/counterfact-flat.json",
    ZsRE: "builtin:data/zsre.json",
    BAKE: "builtin:data/toy/bake_qa.json",
    CaseEdit: "builtin:data/toy/caseedit.json",
}


def _set(record: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        record = record[part]
    record[leaf] = value


def write(tmp_path: Path, sample: str, field: str, value: Any) -> str:
    """The first 3 records of ``sample``, record 0's ``field`` set to ``value``, as ``bench.json``."""
    records = read_records(sample)[:3]
    _set(records[0], field, value)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(records))
    return str(path)


SINGLE_FIELDS = [
    (ZsRE, ZsRE, "rephrase"),
    (ZsRE, ZsRE, "loc"),
    (CounterFact, "flat", "rephrase_prompt"),
    (CounterFact, "flat", "locality_prompt"),
    (BAKE, BAKE, "reverse_qa.prompt"),
    (BAKE, BAKE, "reverse_judge.prompt"),
    (CaseEdit, CaseEdit, "questions.locality.question"),
]


@pytest.mark.parametrize("cls, sample, field", SINGLE_FIELDS, ids=[f"{c.__name__}-{f}" for c, _, f in SINGLE_FIELDS])
@pytest.mark.parametrize("blank", ["", " \n\t"], ids=["empty", "whitespace"])
def test_a_blank_prompt_field_is_named_not_scored(cls, sample, field, blank, tmp_path):
    path = write(tmp_path, SAMPLES[sample], field, blank)
    with pytest.raises(DataFormatError) as error:
        cls(path).setup("validate")
    assert str(error.value).startswith(f"{path}: record 0: field '{field}': empty")
    assert (error.value.path, error.value.index, error.value.field) == (path, 0, field)
    assert "\n" not in str(error.value).replace(repr(blank), "")


PROMPT_LISTS = [(cls, field) for cls in (CounterFact, BAKE) for field in ("paraphrase_prompts", "neighborhood_prompts")]


@pytest.mark.parametrize("cls, field", PROMPT_LISTS, ids=[f"{c.__name__}-{f}" for c, f in PROMPT_LISTS])
def test_an_empty_list_of_prompts_is_named_not_dropped(cls, field, tmp_path):
    path = write(tmp_path, SAMPLES[cls], field, [])
    with pytest.raises(DataFormatError) as error:
        cls(path).setup("validate")
    assert str(error.value).startswith(f"{path}: record 0: field '{field}': an empty list of prompts")
    metric = {"paraphrase_prompts": ("PS", "GS"), "neighborhood_prompts": ("NS", "LS")}[field]
    assert any(name in str(error.value) for name in metric)


def test_an_empty_list_of_unscored_prompts_loads(tmp_path):
    """CounterFact's attribute prompts are read for generation consistency only: nothing drops out of a metric."""
    datamodule = CounterFact(write(tmp_path, SAMPLES[CounterFact], "attribute_prompts", []))
    datamodule.setup("validate")
    assert datamodule.cases[0].groups["attribute"].prompts == ()


def test_mend_training_data_gets_the_same_check(tmp_path):
    path = write(tmp_path, SAMPLES["flat"], "rephrase_prompt", " ")
    with pytest.raises(DataFormatError, match=r"record 0: field 'rephrase_prompt': empty"):
        EditTraining(train_path=path, val_path=SAMPLES["flat"]).setup("fit")


class Minimal(EditDataModule):
    """A loader written without any check of its own: one case per record, ``{"q": ..., "a": ...}``."""

    def load_cases(self) -> list[EditCase]:
        cases = []
        for index, record in enumerate(read_records(self.path)):
            request = EditRequest("{} is", "It", record["a"])
            groups = {"question": PromptGroup.shared_answer([record["q"]], record["a"], token_acc="acc")}
            cases.append(EditCase(index, (request,), groups, f"{self.path}#{index}"))
        return cases

    def declared_metrics(self) -> dict[str, str]:
        return {"acc": "token_acc"}


def test_a_new_loader_gets_the_check_for_free(tmp_path):
    path = tmp_path / "minimal.json"
    path.write_text(json.dumps([{"q": "Who?", "a": "me"}, {"q": "  ", "a": "me"}]))
    with pytest.raises(DataFormatError) as error:
        Minimal(str(path)).setup("validate")
    assert str(error.value) == f"{path}: record 1: field 'question': empty prompt '  ': nothing to score"


RULE = resolve_path("builtin:data/ruleedit") / "0"


@pytest.mark.parametrize(
    "file, field",
    [
        ("f_d.json", "Instance.prompt"),
        ("ins.json", "locality.distracting.prompt"),
        ("f_d.json", "Rule_Understanding.prompt"),
    ],
)
def test_an_empty_list_of_rule_prompts_leaves_its_record_out_and_listed(tmp_path, file, field):
    """RuleEdit leaves a bad record out and lists it; an empty list was dropped from its metric unseen."""
    shutil.copytree(RULE, tmp_path / "0")
    records = json.loads((tmp_path / "0" / file).read_text())
    _set(records[0], field, [])
    _set(records[0], field.rpartition(".")[0] + (".target_new" if "locality" not in field else ".ground_truth"), [])
    (tmp_path / "0" / file).write_text(json.dumps(records))
    datamodule = RuleEdit(str(tmp_path), task="all")
    datamodule.setup("validate")
    [skip] = datamodule.skipped
    assert (skip["file"], skip["record"]) == (str(tmp_path / "0" / file), 0)
    assert skip["reason"].startswith(f"{tmp_path / '0' / file}: record 0: field '{field}': an empty list of prompts")
    assert len(datamodule.cases) == 2


def test_the_cli_stops_on_a_blank_prompt_in_one_line(tmp_path, capsys):
    """zsRE's blank ``rephrase`` (scored PS 1.0 before): ``lightning-edit`` exits 1 with one line, no traceback."""
    from lightning_edit.cli import main

    path = write(tmp_path, SAMPLES[ZsRE], "rephrase", "")
    args = ["validate", "--model=NoEdit", "--model.lm.path=builtin:models/tiny-gpt2", "--data=ZsRE"]
    args += [f"--data.path={path}", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--trainer.accelerator=cpu", f"--trainer.default_root_dir={tmp_path}"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 1
    assert "Traceback" not in error
    assert (
        error.splitlines()[-1]
        == f"lightning-edit: error: {path}: record 0: field 'rephrase': empty prompt '': nothing to score"
    )
