"""Judge templates found by name: the judges' own and those a benchmark folder ships, with their scale and key."""

import inspect
import json

import pytest

from lightning_edit.judges import LocalLMJudge, OpenAIChatJudge, build_judge, one_judge, with_template
from lightning_edit.judges import template_files as files
from lightning_edit.judges.llm import LLMJudge, load_template
from lightning_edit.judges.template_files import shipped_templates, template_folders


def test_the_shipped_templates_sit_with_their_owner():
    shipped = shipped_templates()
    package = files.JUDGE_TEMPLATES.parents[1]
    assert {name: str(template.path.parent.relative_to(package)) for name, template in shipped.items()} == {
        "answer_correct": "judges/templates",
        "rule_edit": "data/ruleedit/templates",
        "rule_edit_ab": "data/ruleedit/templates",
        "scedit_executability": "data/scedit/templates",
        "scedit_coherence": "data/scedit/templates",
        "scedit_consistency": "data/scedit/templates",
        "scedit_completeness": "data/scedit/templates",
    }
    assert all(template.path.is_file() for template in shipped.values())
    assert (shipped["rule_edit_ab"].scale, shipped["rule_edit_ab"].key, shipped["rule_edit_ab"].reading) == (
        "binary",
        "A",
        "exactly_a",
    )
    assert (shipped["scedit_coherence"].scale, shipped["scedit_coherence"].key) == ("likert7", "coherence")


def test_the_generic_judges_default_to_no_benchmark_s_template():
    for cls in (LLMJudge, LocalLMJudge, OpenAIChatJudge):
        assert inspect.signature(cls).parameters["template"].default == "answer_correct", cls
    assert shipped_templates()["answer_correct"].path.parent == files.JUDGE_TEMPLATES


def test_a_benchmark_folder_ships_its_own_template(tmp_path, monkeypatch):
    """A new benchmark folder with ``templates/`` is found by name, without touching the judges."""
    folder = tmp_path / "data" / "mybench" / "templates"
    folder.mkdir(parents=True)
    (folder / "templates.json").write_text(json.dumps({"my_scale": {"scale": "likert7", "key": "quality"}}))
    (folder / "my_scale.txt").write_text("[USER]\nRate {prediction} against {reference}: quality 1-7.")
    monkeypatch.setattr(files, "BENCHMARKS", tmp_path / "data")
    assert template_folders() == [files.JUDGE_TEMPLATES, folder]
    assert load_template("my_scale") == ("my_scale", "[USER]\nRate {prediction} against {reference}: quality 1-7.")
    judge = LocalLMJudge("builtin:models/toy-gpt2", template="my_scale")
    assert (judge.template, judge.scale, judge.key) == ("my_scale", "likert7", "quality")


def test_a_name_shipped_twice_is_an_error(tmp_path, monkeypatch):
    for bench in ("one", "two"):
        folder = tmp_path / bench / "templates"
        folder.mkdir(parents=True)
        (folder / "templates.json").write_text(json.dumps({"same": {"scale": "binary", "key": "verdict"}}))
    monkeypatch.setattr(files, "BENCHMARKS", tmp_path)
    with pytest.raises(ValueError, match="judge template 'same' is shipped twice"):
        shipped_templates()


def test_a_benchmark_gives_its_llm_judge_its_template_unless_one_is_named():
    spec = one_judge("data.judge", {"local_lm": {"path": "builtin:models/toy-gpt2"}})
    assert with_template(spec, "rule_edit")["init_args"]["template"] == "rule_edit"
    named = one_judge("data.judge", {"local_lm": {"path": "builtin:models/toy-gpt2", "template": "rule_edit_ab"}})
    assert with_template(named, "rule_edit") == named
    symbolic = one_judge("data.judge", {"symbolic_math": {}})
    assert with_template(symbolic, "rule_edit") == symbolic  # no template to give
    assert build_judge(with_template(spec, "rule_edit")).template == "rule_edit"
