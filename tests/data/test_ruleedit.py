"""The RuleEdit loader: RuleEdit-200 quirks on hand-written rule folders, the shipped RULE-EDIT set, the tasks and
DMLE's staged protocol."""

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from lightning_edit.data import RuleEdit
from lightning_edit.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "data" / "ruleedit200"
BUILTIN = "builtin:data/ruleedit"


def load(path=FIXTURE, **kwargs) -> RuleEdit:
    dm = RuleEdit(str(path), **kwargs)
    dm.setup()
    return dm


def test_malformed_file_and_case_id_mismatch_are_reported_by_path_and_the_rest_loads():
    dm = load(task="all")
    assert dm.skipped == [
        {
            "record": None,
            "reason": f"{FIXTURE / '1' / 'ins.json'}: malformed JSON at line 22, column 1: Expecting ',' delimiter",
            "file": str(FIXTURE / "1" / "ins.json"),
        },
        {"record": 1, "reason": "case_id 5 differs from its folder 2", "file": str(FIXTURE / "2" / "f_d.json")},
    ]
    # rule 0: all 3 records; rule 1: its f_d records; rule 2: the formula and the instance records
    assert [case.case_id for case in dm.cases] == [0, 1, 2, 3, 4, 6, 8]
    assert dm.cases[3].source == f"{FIXTURE / '1' / 'f_d.json'}#0"


def test_formula_case_groups_and_metrics():
    dm = load(task="formula")
    assert dm.declared_metrics() == {name: "token_acc" for name in ("Rel", "Gen", "Loc", "IP", "RU")}
    case = dm.cases[0]
    (request,) = case.requests
    assert (request.prompt, request.subject) == (
        "A {} has a length of x and a width of y. Its perimeter can be calculated by the formula:",
        "rectangle",
    )
    assert (request.target_new, request.target_true) == ("P = x + y.", "P = 2 * (x + y).")
    assert request.extra == {"rule": "perimeter of rectangle", "view": "formula", "stage": "f_d"}
    groups = case.groups
    assert list(groups) == [
        "reliability",
        "generalization",
        "neighborhood",
        "distracting",
        "instance",
        "rule_understanding",
    ]
    assert groups["reliability"].expected == ("P = x + y.",) and groups["generalization"].expected == ("P = x + y.",)
    assert groups["neighborhood"].expected == ("A = x * y.",)  # against the stored ground truth
    assert groups["distracting"].expected == ("C = 2 * π * r.", "V = s^3.")
    assert groups["instance"].expected == ("7", "8", "P = 5 + 7 = 12")  # an odd number of instances
    assert groups["rule_understanding"].expected == ("adding its length and width once.",)
    assert {name: group.metrics for name, group in groups.items()} == {
        "reliability": {"token_acc": "Rel"},
        "generalization": {"token_acc": "Gen"},
        "neighborhood": {"token_acc": "Loc"},
        "distracting": {"token_acc": "Loc"},
        "instance": {"token_acc": "IP"},
        "rule_understanding": {"token_acc": "RU"},
    }


def test_instance_records_lists_and_missing_ground_truth():
    dm = load(task="instance")
    assert [case.case_id for case in dm.cases] == [2, 8]  # rule 1's ins.json is malformed
    case = dm.cases[0]
    (request,) = case.requests
    assert (request.target_new, request.target_true) == ("10", None)
    assert request.extra["stage"] == "ins"
    assert case.groups["rule_understanding_formula"].expected == ("P = x + y.",)
    assert case.groups["rule_understanding_formula"].metrics == {"token_acc": "RU_f"}
    assert case.groups["rule_understanding_description"].expected == ("adding its length and width once.",)
    assert case.groups["rule_understanding_description"].metrics == {"token_acc": "RU_d"}
    declared = dm.declared_metrics()
    assert declared["RU"] == "derived" and declared["RU_f"] == declared["RU_d"] == "token_acc"
    row = {"n_cases": 2, "n_prompts": 2}
    derived = dm.derived_metrics(
        {"RU_f": {"macro": 0.5, "micro": 0.25, **row}, "RU_d": {"macro": 0.1, "micro": 0.15, **row}}
    )
    assert derived["RU"]["macro"] == pytest.approx(0.3) and derived["RU"]["micro"] == pytest.approx(0.2)
    assert derived["RU"]["kind"] == "derived" and derived["RU"]["n_prompts"] == 4
    assert math.isnan(dm.derived_metrics({"RU_f": {"macro": 1.0, "micro": 1.0, **row}})["RU"]["macro"])


def test_dmle_staged_protocol_one_case_per_rule_with_the_three_edits_in_order():
    dm = load(task="all", protocol="dmle_staged")
    assert dm.declared_metrics() == {name: "token_acc" for name in ("Rel", "Gen", "Loc", "IP", "RU")}
    (case,) = dm.cases  # rules 1 and 2 lack a record
    assert [request.extra["view"] for request in case.requests] == ["formula", "description", "instance"]
    assert [request.extra["stage"] for request in case.requests] == ["f_d", "f_d", "ins"]
    assert case.groups["instance.rule_understanding_formula"].metrics == {"token_acc": "RU"}
    assert set(case.metric_names) == {"Rel", "Gen", "Loc", "IP", "RU"}
    assert len(case.groups["formula.reliability"].prompts) == 1
    reasons = [(skip["file"], skip["reason"]) for skip in dm.skipped if skip["file"].endswith(("1", "2"))]
    assert reasons == [
        (str(FIXTURE / "1"), "dmle_staged needs the rule's 3 records; missing: instance"),
        (str(FIXTURE / "2"), "dmle_staged needs the rule's 3 records; missing: description"),
    ]


@pytest.mark.parametrize(
    "kwargs", [{"task": "formulas"}, {"protocol": "staged"}, {"task": "formula", "protocol": "dmle_staged"}]
)
def test_bad_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        RuleEdit(str(FIXTURE), **kwargs)


def test_the_shipped_rule_edit_set_loads_under_every_task():
    counts = {"formula": 79, "description": 79, "instance": 79, "all": 237}
    for task, count in counts.items():
        dm = load(BUILTIN, task=task)
        assert len(dm.cases) == count and dm.skipped == []
        declared = dm.declared_metrics()
        assert {name for case in dm.cases for name in case.metric_names} == {
            name for name, kind in declared.items() if kind != "derived"
        }
    assert len(load(BUILTIN, task="all", protocol="dmle_staged").cases) == 79


def test_an_archive_that_nests_its_rule_folders_and_a_missing_file(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "RuleEdit-200")
    (tmp_path / "RuleEdit-200" / "0" / "ins.json").unlink()
    dm = load(tmp_path, task="instance")
    assert [case.case_id for case in dm.cases] == [8]
    assert {"record": None, "reason": "file not found", "file": str(tmp_path / "RuleEdit-200" / "0" / "ins.json")} in (
        dm.skipped
    )


def test_validate_reports_skipped_files_in_results(tmp_path, monkeypatch):
    from lightning_edit.cli import build_cli

    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)
    build_cli(
        [
            "validate",
            "--model=NoEdit",
            "--model.lm.path=builtin:models/tiny-gpt2",
            "--data=RuleEdit",
            f"--data.path={FIXTURE}",
            "--data.task=instance",
            "--trainer.enable_progress_bar=false",
            "--trainer.logger=false",
            "--trainer.accelerator=cpu",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["counts"]["cases"] == 2
    assert [skip["file"] for skip in results["counts"]["skipped_records"]] == [
        str(FIXTURE / "1" / "ins.json"),
        str(FIXTURE / "2" / "f_d.json"),
    ]
    assert {"Rel", "Gen", "Loc", "IP", "RU_f", "RU_d", "RU"} <= set(results["metrics"])
    assert results["metrics"]["RU"]["kind"] == "derived"
