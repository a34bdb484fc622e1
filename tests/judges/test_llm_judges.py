"""LLM judges: templates, strict verdict parsing, the local back end on the toy model, and naming judges in configs."""

import pytest
import torch

from lightning_edit.errors import ConfigError
from lightning_edit.judges import ExactMatchJudge, JudgeInput, LocalLMJudge, SymbolicMathJudge, build_judge, local_lm
from lightning_edit.judges.base import JudgeStats
from lightning_edit.judges.llm import load_template, parse_verdict, render
from lightning_edit.judges.template_files import shipped_templates
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"verdict": "yes", "reason": "same"}', 1.0),
        ('{"verdict": "No"}', 0.0),
        ("yes", 1.0),
        ("No.", 0.0),
        ("Verdict: yes", 1.0),
        ('```json\n{"verdict": "no", "reason": "wrong constant"}\n```', 0.0),
        ("maybe", None),
        ('{"verdict": "probably"}', None),
        ("yes, but no", None),
        ('{"verdict": "yes"} {"verdict": "no"}', None),
        ("", None),
    ],
)
def test_binary_verdicts(reply, score):
    assert parse_verdict(reply, "binary", "verdict")[0] == score


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"coherence": 5, "reason": "aligned"}', 5.0),
        ('{"coherence":"7","reason":"fully aligned"}', 7.0),
        ("coherence:3, reason: mixes old and new facts", 3.0),
        ("4", 4.0),
        ('{"coherence": 9}', None),
        ('{"coherence": 0}', None),
        ('{"coherence": 5.5}', None),
        ("coherence: 2 ... coherence: 6", None),
        ('{"consistency": 5}', None),
        ("great script", None),
    ],
)
def test_likert_verdicts(reply, score):
    assert parse_verdict(reply, "likert7", "coherence")[0] == score


def test_a_parsed_reason_and_a_missing_reason():
    assert parse_verdict('{"coherence": 5, "reason": "aligned"}', "likert7", "coherence") == (5.0, "aligned")
    score, reason = parse_verdict('{"coherence": 8}', "likert7", "coherence")
    assert score is None and "1 to 7" in reason


def test_shipped_templates_render_with_their_fields():
    item = JudgeInput.of(
        "How do I get to the Eiffel Tower?",
        "Marseille",
        "Take the train to Marseille.",
        {"prompt": "The Eiffel Tower is in", "target_true": "Paris", "target_new": "Marseille", "stage": "post"},
    )
    for name in shipped_templates():
        messages = render(load_template(name)[1], item)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert "Take the train to Marseille." in messages[1]["content"] and "{prediction}" not in messages[1]["content"]
    coherence = render(load_template("scedit_coherence")[1], item)[1]["content"]
    assert "- Target new: Marseille" in coherence and 'Start with "coherence:"' in coherence
    assert '{"verdict": "yes"}' in render(load_template("rule_edit")[1], item)[1]["content"]  # JSON braces kept
    with pytest.raises(ValueError, match="target_true"):
        render(load_template("scedit_coherence")[1], JudgeInput.of("q", "r", "p"))
    preamble = render("Be brief.\n[USER]\n{prediction}", item)  # text before [USER] without the tag: the system
    assert preamble == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": item.prediction}]


def test_the_local_judge_runs_on_the_toy_model(tmp_path):
    template = tmp_path / "short.txt"
    template.write_text("[SYSTEM]\nJudge.\n[USER]\nThe capital of {question} is {prediction}. Is it {reference}?")
    judge = LocalLMJudge(
        "builtin:models/toy-gpt2", template=str(template), scale="binary", key="verdict", max_tokens=6,
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    items = [JudgeInput.of("Gadzu", "green", "green"), JudgeInput.of("Gadzu", "green", "yellow")]
    verdicts = judge.judge(items)
    # the toy model knows no verdicts: whatever it says is parsed strictly (its scores mean nothing)
    assert all(v.raw and not v.failed and (v.score in (0.0, 1.0) or (v.score is None and v.reason)) for v in verdicts)
    assert judge.describe()["model"] == "builtin:models/toy-gpt2" and judge.describe()["template"] == str(template)
    again = LocalLMJudge(
        "builtin:models/toy-gpt2", template=str(template), scale="binary", key="verdict", max_tokens=6,
        cache_dir=str(tmp_path / "cache"),
    ).judge(items)  # fmt: skip
    assert [v.raw for v in again] == [v.raw for v in verdicts] and all(v.cached for v in again)


def test_a_local_judge_trained_again_in_its_folder_misses_the_cache(tmp_path):
    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    model.save_pretrained(tmp_path / "judge")
    tokenizer.save_pretrained(tmp_path / "judge")
    template = tmp_path / "short.txt"
    template.write_text("[SYSTEM]\nJudge.\n[USER]\nThe capital of {question} is {prediction}. Is it {reference}?")

    def judged() -> list:
        local_lm._load.cache_clear()  # a new process
        judge = LocalLMJudge(str(tmp_path / "judge"), template=str(template), scale="binary", key="verdict",
                             max_tokens=2, cache_dir=str(tmp_path / "cache"))  # fmt: skip
        return judge.judge([JudgeInput.of("Gadzu", "green", "green")])

    assert not judged()[0].cached and judged()[0].cached
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0  # one weight of the judge changes: "trained again"
    model.save_pretrained(tmp_path / "judge")
    assert not judged()[0].cached


def test_a_custom_template_needs_its_scale_and_key(tmp_path):
    template = tmp_path / "t.txt"
    template.write_text("{prediction}")
    with pytest.raises(ValueError, match="scale and key"):
        LocalLMJudge("builtin:models/toy-gpt2", template=str(template))


def test_configs_name_judges_by_short_name_or_class_path():
    assert isinstance(build_judge("exact_match"), ExactMatchJudge)
    judge = build_judge({"class_path": "lightning_edit.judges.SymbolicMathJudge", "init_args": {"rel_tol": 0.01}})
    assert isinstance(judge, SymbolicMathJudge) and judge.rel_tol == 0.01
    with pytest.raises(ValueError, match="unknown judge"):
        build_judge("llm")
    with pytest.raises(ConfigError, match="not a Judge"):
        build_judge("lightning_edit.judges.kind.Generation")
    with pytest.raises(ConfigError, match="init_args"):
        build_judge({"class_path": "exact_match", "args": {}})
    with pytest.raises(ConfigError, match="judge symbolic_math: unknown argument 'tol'; it takes"):
        build_judge({"class_path": "symbolic_math", "init_args": {"tol": 0.1}})


def test_exact_match_uses_squad_normalisation_and_several_references():
    judge = ExactMatchJudge()
    items = [
        JudgeInput.of("q", "The Eiffel Tower", "eiffel   tower!"),
        JudgeInput.of("q", ["Paris", "Marseille"], " an marseille."),
        JudgeInput.of("q", "Paris", "Paris, France"),
    ]
    assert [v.score for v in judge.judge(items)] == [1.0, 1.0, 0.0]
    assert judge.stats.verdicts == 3 and judge.stats.cached == 0  # exact match keeps no cache by default


def test_stats_count_distinct_items_however_often_they_are_asked():
    paris, rome = JudgeInput.of("q", "Paris", "Paris"), JudgeInput.of("q", "Paris", "Rome")
    judge = ExactMatchJudge()
    judge.judge([paris, rome, paris])
    judge.judge([paris])  # a later batch asks again: the same item
    stats = judge.take_stats()
    assert (stats.verdicts, stats.cached, stats.failed, stats.missing) == (2, 0, 0, 0)
    assert stats.scores == {paris.key(): 1.0, rome.key(): 0.0} and judge.stats.verdicts == 0


def test_stats_of_two_processes_merge_by_item():
    """An item both processes judged counts once; read from the cache on one and evaluated on the other, it is not
    counted as cached; failed on one and scored on the other, neither failed nor missing."""
    first = JudgeStats(judged={"a", "b"}, evaluated={"a"}, failed_requests={"b"}, scores={"a": 1.0})
    second = JudgeStats(judged={"a", "b", "c"}, evaluated={"b", "c"}, failed_requests={"c"}, scores={"b": 0.0})
    first.merge(second)
    assert (first.verdicts, first.cached, first.failed, first.missing) == (3, 0, 1, 1)
    assert first.scores == {"a": 1.0, "b": 0.0}


def test_a_local_judge_scores_a_judged_kind_in_the_scorer(tmp_path):
    """The whole path without the CLI: generation by the scored model, then the local judge on its own copy."""
    from dataclasses import replace

    from lightning_edit.data import CounterFact
    from lightning_edit.evaluation import CaseScorer, ScoringConfig
    from lightning_edit.judges.kind import Generation, JudgedKind, judge_report
    from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer

    template = tmp_path / "short.txt"
    template.write_text("Answer: {prediction}. Expected: {reference}. Verdict:")
    spec = {
        "class_path": "local_lm",
        "init_args": {"path": "builtin:models/toy-gpt2", "template": str(template), "scale": "binary",
                      "key": "verdict", "max_tokens": 4, "cache_dir": str(tmp_path / "cache")},
    }  # fmt: skip
    kinds = {"test_local_judge": JudgedKind("test_local_judge", spec, Generation(max_new_tokens=3))}
    data = CounterFact("builtin:data/toy/counterfact.json", limit=2)
    data.setup()
    metrics = {"test_local_judge": "LOCAL"}
    cases = [replace(c, groups={"rewrite": replace(c.groups["rewrite"], metrics=metrics)}) for c in data.cases]
    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    kind, rows = CaseScorer(model, tokenizer, ScoringConfig(), kinds).score(cases)["LOCAL"]
    assert kind == "test_local_judge" and len(rows) == 2
    assert all(value in (0.0, 1.0, None) for *_, value in rows)
    report = judge_report(kinds)
    judge = report["judges"]["test_local_judge"]
    assert judge["verdicts"] == 2 and judge["class"] == "lightning_edit.judges.local_lm.LocalLMJudge"
    assert judge_report(kinds) == {}  # the counts start again


@pytest.mark.parametrize("setting, value", [("max_tokens", 0), ("temperature", -0.5)])
def test_an_llm_judge_setting_out_of_range_is_one_line(setting, value):
    with pytest.raises(ConfigError, match=rf"judge local_lm: {setting}={value}: "):
        build_judge({"class_path": "local_lm", "init_args": {"path": "builtin:models/toy-judge-gpt2", setting: value}})


@pytest.mark.parametrize(
    ("reply", "score"), [("A", 1.0), (" A\n", 1.0), ("B", 0.0), ("A.", 0.0), ("a", 0.0), ("", 0.0)]
)
def test_dmle_reading_scores_1_only_for_exactly_a_and_never_misses(reply, score):
    assert parse_verdict(reply, "binary", "A", reading="exactly_a")[0] == score


def test_the_ab_template_is_read_as_dmle_reads_its_judge(tmp_path):
    from lightning_edit.judges.llm import LLMJudge

    class Replies(LLMJudge):
        def complete(self, conversations):
            return [("A", None), ("B", None), ("The answer is A", None), (None, "timeout")][: len(conversations)]

    judge = Replies("rule_edit_ab", cache_dir=str(tmp_path))
    assert judge.reading == "exactly_a" and judge.settings()["reading"] == "exactly_a"
    assert judge.convention.startswith("1 if the reply is exactly A, else 0")
    items = [JudgeInput.of("What is the area?", "A = x * y", p) for p in ("A = xy", "A = x+y", "x y", "?")]
    assert [v.score for v in judge.evaluate(items)] == [1.0, 0.0, 0.0, None]  # a failed request stays missing
    assert "reading" not in Replies("rule_edit", cache_dir=str(tmp_path)).settings()  # older caches keep their keys
    with pytest.raises(ConfigError, match="reading='loose'"):
        Replies("rule_edit", cache_dir=str(tmp_path), reading="loose")
