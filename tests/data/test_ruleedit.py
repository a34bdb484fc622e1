"""The RuleEdit loader: RuleEdit-200 quirks on hand-written rule folders, the shipped RULE-EDIT set, the tasks and
DMLE's staged protocol."""

import json
import math
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from lightning_edit.data import RuleEdit
from lightning_edit.data.base import DataFormatError
from lightning_edit.data.ruleedit.datamodule import EXACT_MATCH_KIND, JUDGE_KIND
from lightning_edit.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "data" / "ruleedit200"
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
BUILTIN = "builtin:data/ruleedit"


def load(path=FIXTURE, **kwargs) -> RuleEdit:
    dm = RuleEdit(str(path), **kwargs)
    dm.setup()
    return dm


def conventions(*names: str) -> dict[str, str]:
    """The declared metrics of ``names``: the judge's, exact match's and token accuracy's."""
    kinds = {"": JUDGE_KIND, "_exact_match": EXACT_MATCH_KIND, "_token_acc": "token_acc"}
    return {name + suffix: kind for name in names for suffix, kind in kinds.items()}


def kinds_of(metric: str) -> dict[str, str]:
    return {JUDGE_KIND: metric, EXACT_MATCH_KIND: f"{metric}_exact_match", "token_acc": f"{metric}_token_acc"}


def test_only_an_unreadable_file_is_skipped_and_a_case_id_differing_from_its_folder_is_read_by_folder():
    dm = load(task="all")
    assert dm.skipped == [
        {
            "record": None,
            "reason": f"{FIXTURE / '1' / 'ins.json'}: malformed JSON at line 22, column 1: Expecting ',' delimiter",
            "file": str(FIXTURE / "1" / "ins.json"),
        }
    ]
    # rule 0: all 3 records; rule 1: its f_d records; rule 2: all 3, its description record's case_id 5 read as 2
    assert [case.case_id for case in dm.cases] == [0, 1, 2, 3, 4, 6, 7, 8]
    assert dm.cases[3].source == f"{FIXTURE / '1' / 'f_d.json'}#0"
    assert dm.noted == [
        {
            "file": str(FIXTURE / "2" / "f_d.json"),
            "record": 1,
            "change": "case_id 5 differs from its folder: read as rule 2",
        }
    ]
    assert dm.run_notes(None) == {"noted_records": dm.noted}


def quirky_copy(tmp_path: Path) -> Path:
    """The fixture with rule 0's instance record as RuleEdit-200 has some: its prompt and its first instance prompt
    without the subject, and one instance answer more than prompts."""
    root = tmp_path / "rules"
    shutil.copytree(FIXTURE, root)
    path = root / "0" / "ins.json"
    [record] = json.loads(path.read_text())
    record["prompt"] = record["prompt"].replace("A rectangle", "A shape")
    record["Instance"]["prompt"][0] = record["Instance"]["prompt"][0].replace("A rectangle", "A box")
    record["Instance"]["target_new"].append("99")
    path.write_text(json.dumps([record]))
    return root


def test_prompts_without_the_subject_load_and_answer_counts_are_cut_to_the_prompts_as_dmle_zips_them(tmp_path):
    root = quirky_copy(tmp_path)
    dm = load(root, task="instance", instance_edits=2)
    case = dm.cases[0]
    main, first_instance = case.requests
    assert not main.subject_in_prompt and main.filled_prompt.startswith("A shape has a length of 9")
    assert not first_instance.subject_in_prompt and first_instance.prompt.startswith("A box")
    assert case.groups["instance"].prompts == (
        "A rectangle has a length of 6 and a width of 2. What is its perimeter? The answer is",
        "A rectangle has a length of 5 and a width of 7. Substitute the values into the formula:",
    )
    assert case.groups["instance"].expected == ("8", "P = 5 + 7 = 12")  # the 4th answer, "99", has no prompt
    notes = [(note["record"], note["change"]) for note in dm.noted if note["file"] == str(root / "0" / "ins.json")]
    assert [(record, change.split(":")[0]) for record, change in notes] == [
        (0, "prompt"),
        (0, "Instance.target_new"),
        (0, "Instance.prompt[0]"),
    ]
    assert notes[1][1] == "Instance.target_new: 4 answers for 3 prompts: the first 3 kept"
    assert dm.skipped == [{"record": None, "reason": dm.skipped[0]["reason"], "file": str(root / "1" / "ins.json")}]


@pytest.mark.skipif(not (SHARED_DATA / "ruleedit" / "RuleEdit-200.zip").exists(), reason="needs ../shared/data")
def test_the_published_ruleedit200_loads_whole_but_its_unreadable_file(tmp_path):
    with zipfile.ZipFile(SHARED_DATA / "ruleedit" / "RuleEdit-200.zip") as archive:
        archive.extractall(tmp_path)
    staged = {"task": "all", "case_grouping": "dmle_staged"}
    for settings, cases, skipped in (
        ({"task": "all"}, 599, ["RuleEdit-200/145/ins.json"]),
        (staged, 199, ["RuleEdit-200/145/ins.json", "RuleEdit-200/145"]),  # rule 145 lacks its instance record
    ):
        dm = load(tmp_path, **settings)
        assert len(dm.cases) == cases
        assert [Path(skip["file"]).relative_to(tmp_path).as_posix() for skip in dm.skipped] == skipped


def test_formula_case_groups_and_metrics():
    dm = load(task="formula")
    assert dm.declared_metrics() == conventions("Rel", "Gen", "Loc", "IP", "RU")
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
        "reliability": kinds_of("Rel"),
        "generalization": kinds_of("Gen"),
        "neighborhood": kinds_of("Loc"),
        "distracting": kinds_of("Loc"),
        "instance": kinds_of("IP"),
        "rule_understanding": kinds_of("RU"),
    }
    assert len(case.editor_calls) == 1


def test_locality_against_the_unedited_model_and_an_exact_match_judge():
    dm = load(task="formula", locality="unedited", judge={"exact_match": {}})
    declared = dm.declared_metrics()
    assert {name: declared[name] for name in ("Loc", "Loc_token_acc", "Rel", "Rel_token_acc")} == {
        "Loc": f"{JUDGE_KIND}_unedited",
        "Loc_token_acc": "agreement",
        "Rel": JUDGE_KIND,
        "Rel_token_acc": "token_acc",
    }
    assert "Rel_exact_match" not in declared  # the judge is exact match already
    assert dm.cases[0].groups["neighborhood"].metrics == {f"{JUDGE_KIND}_unedited": "Loc", "agreement": "Loc_token_acc"}


def test_instance_records_lists_and_missing_ground_truth():
    dm = load(task="instance", instance_edits=1)  # DMLE: the ins record alone
    assert [case.case_id for case in dm.cases] == [2, 8]  # rule 1's ins.json is malformed
    case = dm.cases[0]
    (request,) = case.requests
    assert (request.target_new, request.target_true) == ("10", None)
    assert request.extra["stage"] == "ins"
    assert case.groups["rule_understanding_formula"].expected == ("P = x + y.",)
    assert case.groups["rule_understanding_formula"].metrics == kinds_of("RU_f")
    assert case.groups["rule_understanding_description"].expected == ("adding its length and width once.",)
    assert case.groups["rule_understanding_description"].metrics == kinds_of("RU_d")
    declared = dm.declared_metrics()
    assert declared["RU"] == declared["RU_exact_match"] == declared["RU_token_acc"] == "derived"
    assert declared["RU_f"] == declared["RU_d"] == JUDGE_KIND
    row = {"n_cases": 2, "n_prompts": 2}
    derived = dm.derived_metrics(
        {"RU_f": {"macro": 0.5, "micro": 0.25, **row}, "RU_d": {"macro": 0.1, "micro": 0.15, **row}}
    )
    assert derived["RU"]["macro"] == pytest.approx(0.3) and derived["RU"]["micro"] == pytest.approx(0.2)
    assert derived["RU"]["kind"] == "derived" and derived["RU"]["n_prompts"] == 4
    assert math.isnan(dm.derived_metrics({"RU_f": {"macro": 1.0, "micro": 1.0, **row}})["RU"]["macro"])
    assert math.isnan(derived["RU_token_acc"]["macro"])  # its parts are missing here


def test_instance_editing_edits_a_set_of_instances_in_turn_and_scores_ip_on_the_rest():
    case = load(task="instance").cases[0]  # default: the ins instance and 2 of its Instance list
    assert [len(call) for call in case.editor_calls] == [1, 1, 1]  # in turn
    assert [(r.prompt, r.subject, r.target_new) for r in case.requests] == [
        ("A {} has a length of 9 and a width of 1. What is its perimeter? The answer is", "rectangle", "10"),
        ("A {} has a length of 4 and a width of 3. What is its perimeter? The answer is", "rectangle", "7"),
        ("A {} has a length of 6 and a width of 2. What is its perimeter? The answer is", "rectangle", "8"),
    ]
    assert case.groups["reliability"].expected == ("10", "7", "8")
    assert case.groups["instance"].expected == ("P = 5 + 7 = 12",)
    dm = RuleEdit(str(FIXTURE), task="instance", instance_edits=4)  # all 3 Instance prompts: none left for IP
    with pytest.raises(DataFormatError, match="no edit cases"):
        dm.setup()
    assert sum("instance_edits=4 needs 4" in skip["reason"] for skip in dm.skipped) == 2  # rules 0 and 2


def test_dmle_staged_grouping_one_case_per_rule_with_the_three_edits_in_order():
    dm = load(task="all", case_grouping="dmle_staged")
    assert dm.declared_metrics() == conventions("Rel", "Gen", "Loc", "IP", "RU")
    case, _ = dm.cases  # rules 0 and 2; rule 1 lacks its instance record
    assert [request.extra["view"] for request in case.requests] == ["formula", "description", "instance"]
    assert [request.extra["stage"] for request in case.requests] == ["f_d", "f_d", "ins"]
    assert [[request.extra["stage"] for request in call] for call in case.editor_calls] == [["f_d", "f_d"], ["ins"]]
    assert case.groups["instance.rule_understanding_formula"].metrics == kinds_of("RU")
    assert set(case.metric_names) == set(conventions("Rel", "Gen", "Loc", "IP", "RU"))
    assert len(case.groups["formula.reliability"].prompts) == 1
    reasons = [(skip["file"], skip["reason"]) for skip in dm.skipped if skip["file"].endswith(("1", "2"))]
    assert reasons == [(str(FIXTURE / "1"), "dmle_staged needs the rule's 3 records; missing: instance")]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"task": "formulas"},
        {"case_grouping": "staged"},
        {"task": "formula", "case_grouping": "dmle_staged"},
        {"task": "all", "case_grouping": "dmle_staged", "instance_edits": 3},
        {"instance_edits": 0},
        {"locality": "pre"},
        {"judge": {"exact_match": {}, "symbolic_math": {}}},
        {"new_tokens_per_answer_token": 0},
    ],
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
    assert len(load(BUILTIN, task="all", case_grouping="dmle_staged").cases) == 79


def test_the_hierarchical_test_edits_a_2d_rule_and_scores_the_3d_rules_built_on_it(tmp_path):
    dm = load(BUILTIN, task="hierarchy")
    assert len(dm.cases) == 15 and dm.skipped == []
    assert dm.declared_metrics() == conventions("Rel", "HG")
    case = dm.cases[0]
    (request,) = case.requests
    assert (request.prompt, request.subject, request.target_new, request.target_true) == (
        "A {} has a side length of x. Its area can be calculated by the formula:",
        "square",
        "A = x + x.",
        "A = x^2.",
    )
    assert case.groups["hierarchy"].expected == ("SA = 6 * (s + s).", "168", "SA = 6 * (8 + 8) = 96")
    assert case.groups["hierarchy"].metrics == kinds_of("HG")
    with pytest.raises(DataFormatError, match="hierarchy.json"):
        load(FIXTURE, task="hierarchy")  # RuleEdit-200 has no hierarchical set


def test_an_archive_that_nests_its_rule_folders_and_a_missing_file(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "RuleEdit-200")
    (tmp_path / "RuleEdit-200" / "0" / "ins.json").unlink()
    dm = load(tmp_path, task="instance")
    assert [case.case_id for case in dm.cases] == [8]
    assert {"record": None, "reason": "file not found", "file": str(tmp_path / "RuleEdit-200" / "0" / "ins.json")} in (
        dm.skipped
    )


def test_a_rule_folder_read_twice_is_left_out_and_listed(tmp_path):
    """A copy under another name (``backup/``, ``01/``) or another folder of the same number (``00/``) loads once."""
    root = tmp_path / "rules"
    shutil.copytree(FIXTURE, root)
    shutil.copytree(FIXTURE / "0", root / "backup")
    shutil.copytree(FIXTURE / "1", root / "01")
    shutil.copytree(FIXTURE / "0", root / "00")
    records = json.loads((root / "00" / "f_d.json").read_text())
    records[0]["rephrase_prompt"] = "An edited copy: " + records[0]["rephrase_prompt"]
    (root / "00" / "f_d.json").write_text(json.dumps(records))

    dm = load(root, task="all")
    assert [case.case_id for case in dm.cases] == [case.case_id for case in load(task="all").cases]
    listed = {Path(skip["file"]).name: skip["reason"] for skip in dm.skipped if skip["record"] is None}
    assert listed["00"] == f"rule 0 again, already read from {root / '0'}: remove one"
    assert listed["01"] == f"a copy of {root / '1'} (the same f_d.json and ins.json): remove one"
    assert listed["backup"] == f"a copy of {root / '0'} (the same f_d.json and ins.json): remove one"


@pytest.mark.parametrize(
    "file, field, blank",
    [("f_d.json", "Instance.prompt", ["  "]), ("ins.json", "rephrase_prompt", ""), ("f_d.json", "ground_truth", [""])],
)
def test_a_blank_prompt_or_answer_leaves_its_record_out(tmp_path, file, field, blank):
    shutil.copytree(FIXTURE / "0", tmp_path / "0")
    records = json.loads((tmp_path / "0" / file).read_text())
    *parents, leaf = field.split(".")
    record = records[0]
    for part in parents:
        record = record[part]
    record[leaf] = blank + record[leaf][1:] if isinstance(blank, list) else blank
    (tmp_path / "0" / file).write_text(json.dumps(records))
    dm = load(tmp_path, task="all")
    [skip] = dm.skipped
    assert (skip["file"], skip["record"]) == (str(tmp_path / "0" / file), 0)
    assert skip["reason"].startswith(f"{tmp_path / '0' / file}: record 0: field '{field}") and "empty" in skip["reason"]
    assert len(dm.cases) == 2


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
    assert [skip["file"] for skip in results["counts"]["skipped_records"]] == [str(FIXTURE / "1" / "ins.json")]
    assert [note["file"] for note in results["benchmark"]["noted_records"]] == [str(FIXTURE / "2" / "f_d.json")]
    assert results["counts"]["skipped_requests"] == []  # NoEdit edits nothing, so leaves nothing out
    assert {"Rel", "Gen", "Loc", "IP", "RU_f", "RU_d", "RU"} <= set(results["metrics"])
    assert results["metrics"]["RU"]["kind"] == "derived"
    assert (
        results["metrics"]["Rel"]["kind"] == JUDGE_KIND
        and "SymbolicMathJudge" in results["metrics"]["Rel"]["convention"]
    )
    assert [row["judges"] for row in results["judge_agreement"]] == [[EXACT_MATCH_KIND, JUDGE_KIND]]


def test_dmle_staged_edits_are_two_editor_calls_per_rule_with_memit():
    """DMLE edits a rule's f_d records, then its ins record on the edited model: MEMIT solves each stage alone."""
    from lightning import Trainer

    from lightning_edit.editors import MEMIT
    from lightning_edit.editors.target_vector import TargetOptimization
    from lightning_edit.models.loading import ModelSource
    from lightning_edit.stats.config import KeyStatistics

    editor = MEMIT(
        ModelSource("builtin:models/tiny-gpt2"),
        layers=[0, 1],
        mom2_update_weight=100.0,
        stats=KeyStatistics(corpus="builtin:data/toy/corpus.txt", n_samples=20),
        target=TargetOptimization(v_num_grad_steps=2),
        template_lengths=[[5, 1]],
    )
    calls, apply_edits = [], editor.apply_edits
    editor.apply_edits = lambda requests: (calls.append([r.extra["stage"] for r in requests]), apply_edits(requests))
    data = RuleEdit(str(FIXTURE), task="all", case_grouping="dmle_staged", judge={"exact_match": {}})
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert len(data.cases) == 2 and calls == [["f_d", "f_d"], ["ins"]] * 2


@pytest.mark.parametrize("editor_name", ["MEMIT", "FT"])
def test_an_edit_prompt_without_the_subject_is_left_out_by_editors_that_read_keys_at_the_subject(editor_name, tmp_path):
    """Rule 0's instance edit (dmle_staged) has no subject in its prompt: MEMIT edits the rule's f_d records and
    lists the ins request; FT, which needs no subject, makes both calls."""
    from lightning import Trainer

    from lightning_edit.editors import FT, MEMIT
    from lightning_edit.editors.target_vector import TargetOptimization
    from lightning_edit.models.loading import ModelSource
    from lightning_edit.stats.config import KeyStatistics

    tiny = ModelSource("builtin:models/tiny-gpt2")
    if editor_name == "MEMIT":
        editor = MEMIT(
            tiny,
            layers=[0, 1],
            mom2_update_weight=100.0,
            stats=KeyStatistics(corpus="builtin:data/toy/corpus.txt", n_samples=20),
            target=TargetOptimization(v_num_grad_steps=2),
            template_lengths=[[5, 1]],
        )
    else:
        editor = FT(tiny, layers=[1], num_steps=1)
    calls, apply_edits = [], editor.apply_edits
    editor.apply_edits = lambda requests: (calls.append([r.extra["stage"] for r in requests]), apply_edits(requests))
    data = RuleEdit(str(quirky_copy(tmp_path)), task="all", case_grouping="dmle_staged", judge={"exact_match": {}})
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert [case.case_id for case in data.cases] == [0, 6]
    if editor_name == "MEMIT":
        assert calls == [["f_d", "f_d"], ["f_d", "f_d"], ["ins"]]
        [skipped] = editor.runner.skipped_requests
        assert (skipped["case_id"], skipped["request"]) == (0, 2)
        assert "does not hold the subject 'rectangle'" in skipped["reason"]
        assert editor.metrics.case_scores["Rel"].keys() == {0, 6}  # rule 0 still scored, with its f_d edits
    else:
        assert calls == [["f_d", "f_d"], ["ins"]] * 2 and editor.runner.skipped_requests == []


def test_locality_tokens_expected_judges_the_first_ground_truth_tokens_of_the_answer():
    """DMLE's Loc keeps the first len(ground truth) tokens of the 3x answer (evaluate_utils.py 385-397): greedy, so
    the generated answer equals the reference loop's 3x answer cut to that many tokens."""
    from lightning_edit.judges.kind import Generate
    from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
    from lightning_edit.scoring.kinds import run_requests

    dm = load(BUILTIN, task="formula", limit=2, locality_tokens="expected")
    declared = dm.declared_metrics()
    assert declared["Loc"] == f"{JUDGE_KIND}_first_tokens" and declared["Rel"] == JUDGE_KIND
    assert declared["Loc_exact_match"] == f"{EXACT_MATCH_KIND}_first_tokens"
    first_tokens, whole = dm.score_kinds[f"{JUDGE_KIND}_first_tokens"].generation, dm.score_kinds[JUDGE_KIND].generation
    assert (first_tokens.max_new_tokens, whole.max_new_tokens) == (1, 3)
    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/tiny-gpt2"))  # never stops early
    group = dm.cases[0].groups["neighborhood"]
    requests = [Generate(p, 1, per_token_of=gt) for p, gt in zip(group.prompts, group.expected)]
    answers = run_requests(model, tokenizer, requests, batch_size=4)  # request -> answer
    longer = 0  # answers whose whole budget says more than their first tokens
    for prompt, expected, request in zip(group.prompts, group.expected, requests):
        ids, new, keep = tokenizer.encode(prompt), [], len(tokenizer.encode(expected, add_special_tokens=False))
        with torch.no_grad():  # the reference: one prompt, unpadded, no cache, 3x the ground truth's tokens
            for _ in range(3 * keep):
                token = int(model(torch.tensor([ids + new]), use_cache=False).logits[0, -1].argmax())
                if token == tokenizer.eos_token_id:
                    break
                new.append(token)
        assert answers[request] == tokenizer.decode(new[:keep], skip_special_tokens=True)
        longer += len(new) > keep
    assert longer
