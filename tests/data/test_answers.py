"""Generated answers (QAEdit's convention) beside the teacher-forced metrics: every value against a hand computation
with plain transformers, one prompt at a time."""

import json

import pytest
import torch
from lightning import Trainer

from lightning_edit.data import BAKE, CounterFact, ZsRE
from lightning_edit.data.answers import CONTEXTS, GeneratedAnswers
from lightning_edit.data.base import DataFormatError
from lightning_edit.editors import NoEdit
from lightning_edit.errors import ConfigError
from lightning_edit.evaluation import ScoringConfig
from lightning_edit.judges import ContainsJudge, JudgeInput
from lightning_edit.judges.exact_match import normalize_answer
from lightning_edit.models.loading import ModelSource
from lightning_edit.report import answer_rows, case_rows
from lightning_edit.resources import resolve_path
from lightning_edit.scoring.kinds import PromptItem

TOY = "builtin:models/toy-gpt2"


def hand_answer(model, tokenizer, prompt: str) -> str:
    """QAEdit's generation: greedy, at most 50 new tokens, cut before the first "." or newline (or at EOS)."""
    ids, new = tokenizer.encode(prompt), []
    with torch.no_grad():
        for _ in range(50):
            token = int(model(torch.tensor([ids + new])).logits[0, -1].argmax())
            if token == tokenizer.eos_token_id:
                break
            new.append(token)
    text = tokenizer.decode(new)
    return min((text.split(stop)[0] for stop in (".", "\n")), key=len)


def known_half(tmp_path, name: str) -> tuple[list[dict], str]:
    """The first 6 records of a shipped toy file, every other one edited towards the true object the toy model knows
    (so some generated-answer grades are 1), written to a file: (records, its path)."""
    records = json.loads(resolve_path(f"builtin:data/toy/{name}.json").read_text())[:6]
    for record in records[::2]:
        record["requested_rewrite"]["target_new"] = record["requested_rewrite"]["target_true"]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(records))
    return records, str(path)


def test_contains_is_whole_words_after_normalisation():
    judge = ContainsJudge()
    items = [JudgeInput.of("q", "Paris", p) for p in ("The answer: paris, France", "Parisian", "in the Paris")]
    assert [verdict.score for verdict in judge.judge(items)] == [1.0, 0.0, 1.0]


def test_a_qa_instruction_wraps_the_prompt_after_any_in_context_text():
    answers = GeneratedAnswers("qa_inst")
    kind = next(k for k in answers.score_kinds() if k.name == answers.kinds["exact"])
    item = PromptItem(0, "rewrite", 0, "New fact: X.\nThe capital of Y is", "The capital of Y is", "X", None)
    (judged,) = kind.requests(item, config=None)
    assert judged.generation.prompt == "New fact: X.\n" + CONTEXTS["qa_inst"].format("The capital of Y is")
    assert judged.generation.max_new_tokens == 50 and judged.generation.stop == (".", "\n")
    with pytest.raises(ConfigError, match="generated_answers='system'"):
        GeneratedAnswers("system")


def test_generated_answers_name_a_groups_metrics_and_their_kinds():
    judged = GeneratedAnswers("bare", {"exact_match": {}})
    kinds = judged.kinds
    assert list(kinds) == ["exact", "contains", "unchanged", "judged"]
    assert [kind.name for kind in judged.score_kinds()] == list(kinds.values())
    expected = {kinds["exact"]: "ES_gen", kinds["contains"]: "ES_gen_contains", kinds["judged"]: "ES_gen_judged"}
    assert judged.metrics("ES") == expected
    assert judged.metrics("NS", locality=True) == {kinds["unchanged"]: "NS_gen"}
    none = GeneratedAnswers()
    assert none.kinds == {} and none.metrics("ES") == {} and none.score_kinds() == []
    with pytest.raises(ConfigError, match="set data.generated_answers too"):
        GeneratedAnswers(None, {"exact_match": {}})


def test_counterfact_generated_answers_equal_a_hand_computation(tmp_path):
    """NoEdit on toy cases whose new object is, for every other case, the true one the model knows: ES_gen and PS_gen
    (exact match, contains) per case equal plain transformers' greedy answers graded by hand; NS_gen is 1 unedited."""
    records, path = known_half(tmp_path, "counterfact")
    editor = NoEdit(ModelSource(TOY))
    data = CounterFact(path, generated_answers="bare", batch_size=4)
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(editor, datamodule=data, verbose=False)
    model, tokenizer = editor.model, editor.tokenizer
    for record in records:
        rewrite = record["requested_rewrite"]
        new = normalize_answer(rewrite["target_new"]["str"])
        for metric, prompts in (
            ("ES", [rewrite["prompt"].format(rewrite["subject"])]),
            ("PS", record["paraphrase_prompts"]),
        ):
            said = [hand_answer(model, tokenizer, prompt).strip() for prompt in prompts]
            answered = editor.metrics.case_answers
            kept = answered[metric + "_gen"][record["case_id"]]  # what cases.jsonl shows
            assert kept == answered[metric + "_gen_contains"][record["case_id"]] == dict(enumerate(said))
            answers = [normalize_answer(answer) for answer in said]
            exact = sum(answer == new for answer in answers) / len(answers)
            contains = sum(f" {new} " in f" {answer} " for answer in answers) / len(answers)
            scores = (
                editor.metrics.case_scores[metric + "_gen"][record["case_id"]],
                editor.metrics.case_scores[metric + "_gen_contains"][record["case_id"]],
            )
            assert scores == pytest.approx((exact, contains)), (metric, record["case_id"], answers)
    assert editor.metrics.results["ES_gen_contains"]["macro"] > 0  # the model says the true object it knows
    assert editor.metrics.results["NS_gen"]["macro"] == 1.0
    rows = case_rows(data.cases, editor.metrics.case_scores, editor.metrics.case_answers)
    neighbours = records[0]["neighborhood_prompts"]
    assert rows[0]["answers"]["NS_gen"] == [hand_answer(model, tokenizer, p).strip() for p in neighbours]
    table = answer_rows(data.cases, editor.metrics.case_answers)
    assert [rows[0]["case_id"], "NS_gen", neighbours[0], rows[0]["answers"]["NS_gen"][0]] in table


CHAT = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Assistant:"


@pytest.mark.parametrize("every_prompt_in_chat", [False, True], ids=["answers-only", "scoring.chat_template"])
def test_the_chat_context_asks_the_prompt_as_a_user_turn_of_the_chat_template(every_prompt_in_chat):
    """``chat``: the prompt alone in the tokenizer's chat template, once, also when scoring.chat_template already
    formats every prompt."""
    editor = NoEdit(ModelSource(TOY), scoring=ScoringConfig(chat_template=every_prompt_in_chat))
    editor.tokenizer.chat_template = CHAT
    data = CounterFact("builtin:data/toy/counterfact.json", limit=3, generated_answers="chat")
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(editor, datamodule=data, verbose=False)
    for case in data.cases:
        asked = f"User: {case.groups['paraphrase'].prompts[0]}\nAssistant:"
        said = hand_answer(editor.model, editor.tokenizer, asked).strip()
        assert editor.metrics.case_answers["PS_gen"][case.case_id][0] == said
    assert "chat template" in data.score_kinds[GeneratedAnswers("chat").kinds["exact"]].convention


def test_the_chat_context_needs_a_tokenizer_with_a_chat_template():
    editor = NoEdit(ModelSource(TOY))  # the toy GPT-2's tokenizer has none
    data = CounterFact("builtin:data/toy/counterfact.json", limit=2, generated_answers="chat")
    with pytest.raises(DataFormatError, match="has no chat template"):
        Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(editor, datamodule=data)


def test_zsre_reports_generated_answers_beside_token_accuracy():
    data = ZsRE("builtin:data/zsre.json", limit=3, generated_answers="qa_inst")
    data.setup()
    declared = data.declared_metrics()
    kinds = GeneratedAnswers("qa_inst").kinds
    assert {name: declared[name] for name in ("rewrite_gen", "rephrase_gen_contains", "locality_gen")} == {
        "rewrite_gen": kinds["exact"],
        "rephrase_gen_contains": kinds["contains"],
        "locality_gen": kinds["unchanged"],
    }
    assert data.cases[0].groups["locality"].metrics == {"agreement": "locality_acc", kinds["unchanged"]: "locality_gen"}
    assert "neighborhood_gen" not in declared


def test_bake_generated_answers_equal_a_hand_computation_and_keep_the_filter(tmp_path):
    """BAKE with generated answers (NoEdit, toy GPT-2): every reverse prompt the pre-edit filter keeps gets
    RQS_gen/RJS_gen graded from plain transformers' greedy answer, and the prompts it leaves out get none."""
    records, path = known_half(tmp_path, "bake_qa")
    editor = NoEdit(ModelSource(TOY))
    data = BAKE(path, generated_answers="bare", batch_size=4)
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(editor, datamodule=data, verbose=False)
    kinds = GeneratedAnswers("bare").kinds
    declared = data.declared_metrics()
    for metric in ("ES", "GS", "RQS", "RJS"):
        assert declared[f"{metric}_gen"] == kinds["exact"] and declared[f"{metric}_gen_contains"] == kinds["contains"]
    assert declared["LS_gen"] == kinds["unchanged"] and editor.metrics.results["LS_gen"]["macro"] == 1.0
    model, tokenizer = editor.model, editor.tokenizer
    checked = 0
    for record in records:
        case = record["case_id"]
        rewrite = record["requested_rewrite"]
        asked = {
            "ES": ([rewrite["prompt"].format(rewrite["subject"])], rewrite["target_new"]["str"]),
            "GS": (record["paraphrase_prompts"], rewrite["target_new"]["str"]),
            "RQS": ([record["reverse_qa"]["prompt"]], record["reverse_qa"]["target_new"]["str"]),
            "RJS": ([record["reverse_judge"]["prompt"]], record["reverse_judge"]["target_new"]["str"]),
        }
        for metric, (prompts, expected) in asked.items():
            group = {"RQS": "reverse_qa", "RJS": "reverse_judge"}.get(metric)
            if group and editor.metrics.case_scores[f"{group}_filtered"][case] == 1.0:
                assert case not in editor.metrics.case_scores[f"{metric}_gen"]  # left out, as from RQS/RJS
                assert case not in editor.metrics.case_scores[metric]
                continue
            answers = [normalize_answer(hand_answer(model, tokenizer, prompt).strip()) for prompt in prompts]
            new = normalize_answer(expected)
            exact = sum(answer == new for answer in answers) / len(answers)
            contains = sum(f" {new} " in f" {answer} " for answer in answers) / len(answers)
            case_scores = editor.metrics.case_scores
            scores = (case_scores[f"{metric}_gen"][case], case_scores[f"{metric}_gen_contains"][case])
            assert scores == pytest.approx((exact, contains)), (metric, case, answers)
            checked += 1
    assert checked > 12 and editor.metrics.results["ES_gen"]["macro"] > 0
