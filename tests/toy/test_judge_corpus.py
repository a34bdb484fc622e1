"""The toy judge's rating rules and training text (:mod:`lightning_edit.toy.judge_rules`,
:mod:`lightning_edit.toy.judge_corpus`), and the shipped
``toy-judge-gpt2`` as the local judge of ScEdit's four templates.

The rules' ratings below are computed by hand from their docstrings.
"""

import json
from pathlib import Path

import pytest

from lightning_edit.cli import build_cli
from lightning_edit.data.scedit.datamodule import TEXT_METRICS
from lightning_edit.judges import JudgeInput, LocalLMJudge
from lightning_edit.judges.llm import parse_verdict, render
from lightning_edit.judges.template_files import shipped_templates
from lightning_edit.models.loading import ModelSource, load_tokenizer
from lightning_edit.resources import resolve_path
from lightning_edit.toy.judge_corpus import JudgeCorpus, fixed_pieces, judge_prompt, reply, template_pieces
from lightning_edit.toy.judge_rules import RULES, SCALES, Context, ToyRuleJudge, foreign_names

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CONTEXT = Context("How to visit the hometown of Dokvael Dazrael?", "Dokvael Dazrael was born in", "Fezrio", "Lakvox")
CLEAN = "Step 1: Pack a small bag. Step 2: Take the train to Lakvox. Step 3: Walk to the old house."
OLD = "Step 2: Take the train to Fezrio. Step 1: Pack a small bag."
FAULTY = "Go to Mazra first. Step 1: Take the train to Lakvox. Step 2: Take the train to Lakvox. Step 3: Walk to the"
BOTH = "Take the train to Fezrio and Lakvox."
#: script -> (executability, coherence, consistency, completeness), in the order of SCALES
RATINGS = {
    CLEAN: (7, 7, 7, 7),
    OLD: (5, 1, 5, 2),  # misnumbered (-2); the old object only; numbers go down (-2); 2 steps (5), old only (-3)
    FAULTY: (3, 4, 4, 6),  # repeat -2, preamble -1, unfinished -1; Mazra -2, Lakvox twice -1; repeat -1, Mazra -2
    BOTH: (1, 2, 1, 1),  # no steps; both objects; both objects; no steps
    "": (1, 3, 7, 1),  # no steps; neither object; nothing contradicts; no steps
}


@pytest.mark.parametrize("script", list(RATINGS))
def test_the_rules_give_the_hand_computed_ratings(script):
    assert tuple(RULES[template](script, CONTEXT).score for template in SCALES) == RATINGS[script]


def test_completeness_judges_by_the_stage_s_object():
    two_steps = "Step 1: Pack a small bag. Step 2: Take the train to Lakvox."
    assert RULES["scedit_completeness"](two_steps, CONTEXT).score == 5  # post: the new object, 2 steps
    assert RULES["scedit_completeness"](two_steps, CONTEXT._replace(stage="pre")).score == 2  # pre: the new one only


def test_foreign_names_are_capitalised_words_no_context_field_has():
    assert foreign_names(FAULTY, CONTEXT) == ["Mazra"]  # "Go", "Take", "Walk" start a sentence or a step
    assert foreign_names("Step 1: Visit Dokvael Dazrael in Fezrio. Then call Nezri.", CONTEXT) == ["Nezri"]


def test_a_reply_parses_to_the_rule_s_rating():
    for template in SCALES:
        rating = RULES[template](FAULTY, CONTEXT)
        text = reply(template, rating)
        assert parse_verdict(text, "likert7", shipped_templates()[template].key) == (rating.score, rating.reason)


@pytest.fixture(scope="module")
def small() -> tuple[JudgeCorpus, JudgeCorpus]:
    settings = dict(worlds=(1,), records=4, scripts_per_question=3, toy_models=("builtin:models/toy-gpt2",))
    return JudgeCorpus(**settings, toy_samples=1, heldout=0.5), JudgeCorpus(**settings, toy_samples=1, heldout=0.5)


def test_the_corpus_is_deterministic_and_split_by_subject(small):
    first, second = small
    assert first.corpus == second.corpus and first.heldout_examples == second.heldout_examples
    assert len(first.corpus) == 4 * (len(first.examples) - len(first.heldout_examples))
    held = {e.subject for e in first.heldout_examples}
    assert held and not held & {e.subject for e in first.examples if not first.held_out(e)}
    assert {e.source for e in first.examples} >= {"world", "junk", "toy-gpt2", "toy-gpt2:new"}


def test_no_subject_of_the_shipped_file_is_used(small):
    shipped = json.loads(resolve_path("builtin:data/toy/scedit_cf.json").read_text())
    questions = {q for record in shipped for q in record["generation_prompts"]}
    subjects = {record["subject"] for record in shipped}
    corpus, _ = small
    assert not {e.context.question for e in corpus.examples} & questions
    assert not {e.subject for e in corpus.examples} & subjects


def test_every_item_is_the_prompt_the_judge_reads_then_the_rule_s_reply(small):
    corpus, _ = small
    for example in corpus.examples[:20]:
        for template in SCALES:
            prompt = judge_prompt(template, example.script, example.context)
            text = example.text(template)
            assert text.startswith(prompt) and "\n" not in text[len(prompt) :]
            score, _ = parse_verdict(text[len(prompt) :], "likert7", shipped_templates()[template].key)
            assert score == example.rating(template).score and 1 <= score <= 7


def test_the_template_pieces_are_the_shipped_tokenizer_s_added_tokens_in_order():
    shipped = json.loads(resolve_path("builtin:models/toy-judge-gpt2/tokenizer.json").read_text())
    added = [token["content"] for token in shipped["added_tokens"] if not token["special"]]
    assert added == fixed_pieces() and len(set(added)) == len(added)


def test_the_loss_is_on_the_script_and_the_reply(small):
    corpus, _ = small
    for template, text in zip(SCALES, corpus.corpus[:4]):
        ids = corpus.encode(text)
        labels = corpus.collate([ids])["labels"][0].tolist()
        script_piece = corpus.tokenizer.convert_tokens_to_ids(template_pieces(template)[-2])
        assert script_piece in ids and template_pieces(template)[-2].endswith("- Script:")
        assert [label for label in labels if label != -100] == ids[ids.index(script_piece) + 1 :]


@pytest.mark.parametrize("template", SCALES)
def test_the_toy_judge_gives_valid_verdicts_as_a_local_judge(template, tmp_path):
    judge = LocalLMJudge("builtin:models/toy-judge-gpt2", template=template, cache_dir=str(tmp_path))
    context = CONTEXT._asdict()  # as ScEdit's judged kinds give it: the question apart, the stage with the fields
    question = context.pop("question")
    items = [JudgeInput.of(question, CONTEXT.target_new, script, context) for script in (CLEAN, OLD)]
    tokenizer = load_tokenizer(ModelSource("builtin:models/toy-judge-gpt2"))
    assert judge._prompt(tokenizer, render(judge.template_text, items[0])) == judge_prompt(template, CLEAN, CONTEXT)
    for verdict in judge.evaluate(items):
        assert verdict.score is not None and 1 <= verdict.score <= 7, verdict.raw


def test_the_rule_judge_gives_the_rules_ratings_on_scedit_s_items():
    context = CONTEXT._asdict()
    question = context.pop("question")
    items = [JudgeInput.of(question, CONTEXT.target_new, script, context) for script in RATINGS]
    for k, template in enumerate(SCALES):
        verdicts = ToyRuleJudge(template).evaluate(items)
        assert [verdict.score for verdict in verdicts] == [ratings[k] for ratings in RATINGS.values()]
    with pytest.raises(ValueError, match="has no \\['target_true'\\]"):
        ToyRuleJudge(SCALES[0]).evaluate([JudgeInput.of(question, "x", CLEAN, {"prompt": "p", "target_new": "n",
                                                                                 "stage": "post"})])  # fmt: skip
    with pytest.raises(ValueError, match="not template 'rule_edit'"):
        ToyRuleJudge("rule_edit")


def test_a_toy_scedit_run_judged_by_the_rules(tmp_path):
    """ROME on 2 toy ScEdit-CF cases, the text level judged by the rules through ScEdit's judged kinds."""
    judge = {"lightning_edit.toy.ToyRuleJudge": {}}
    cli = build_cli([
        "validate", f"--config={CONFIGS}/methods/rome.yaml", f"--config={CONFIGS}/models/toy-gpt2.yaml",
        f"--config={CONFIGS}/benchmarks/scedit.yaml", "--data.limit=2", "--data.text_level=true",
        "--data.script_prompt={question}", f"--data.judge={json.dumps(judge)}",
        f"--trainer.default_root_dir={tmp_path}", "--trainer.logger=false", "--trainer.enable_progress_bar=false",
    ])  # fmt: skip
    metrics, judges = cli.model.metrics.results, json.loads((tmp_path / "results.json").read_text())["judges"]
    for name, template in TEXT_METRICS.items():
        assert metrics[name]["n_prompts"] == 4 and metrics[name]["n_missing"] == 0
        assert 1 <= metrics[name]["macro"] <= 7 and "toy rule of " + template in metrics[name]["convention"]
        assert judges[template]["class"] == "lightning_edit.toy.judge_rules.ToyRuleJudge"
