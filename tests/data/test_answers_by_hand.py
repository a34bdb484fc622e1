"""Generated answers on a scripted stub model: every answer, stop rule and grade written down by hand.

The stub (:class:`~tests.scripted_lm.ScriptedLM`) continues each prompt with the tokens a real model would add for a
given text, ``prompt + " " + text``, then ends the sequence. So for every context type
(``bare``, ``qa_inst``, ``chat``), on both tokenizer families (GPT-2's ``Ġ`` byte-level BPE and LLaMA's ``▁``
SentencePiece, the toy models' tokenizers) and whichever side the tokenizer pads, the answers below are known:
cut before the first ``.`` or newline, at the end of sequence, or after 50 new tokens; then graded by SQuAD exact match
and whole-word containment against the new object, and a neighbour's answer against the unedited model's.
"""

import json

import pytest

from lightning_edit.data import CounterFact
from lightning_edit.data.answers import CONTEXTS
from lightning_edit.evaluation import CaseScorer, ScoringConfig
from lightning_edit.models.tokenization import format_prompt
from tests.scripted_lm import continuation, scripted, toy_tokenizer

CHAT = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Assistant:"

RECORDS = [
    {
        "case_id": 0,
        "requested_rewrite": {
            "prompt": "The colour of the {} is",
            "subject": "Gadzu vase",
            "target_new": {"str": "yellow"},
            "target_true": {"str": "green"},
        },
        "paraphrase_prompts": ["The Gadzu vase is painted", "Every Gadzu vase in the shop is"],
        "neighborhood_prompts": ["The colour of the Tabzion clock is"],
        "attribute_prompts": ["The colour of the Tabzion stool is"],
    },
    {
        "case_id": 1,
        "requested_rewrite": {
            "prompt": "The colour of the {} is",
            "subject": "Naegza rug",
            "target_new": {"str": "red"},
            "target_true": {"str": "blue"},
        },
        "paraphrase_prompts": ["The Naegza rug is painted"],
        "neighborhood_prompts": ["The colour of the Vedvor clock is"],
        "attribute_prompts": ["The colour of the Naegza vase is"],
    },
]
# what each model says after each prompt (a text, or a text repeated past the 50-token budget), and the answer kept
EDITED = {
    "The colour of the Gadzu vase is": "yellow. It is new",  # cut at the full stop
    "The Gadzu vase is painted": "bright yellow\nand green",  # cut at the newline
    "Every Gadzu vase in the shop is": "green",  # ends with the end of sequence
    "The colour of the Tabzion clock is": "blue.",
    "The colour of the Naegza rug is": "red " * 60,  # no stop: the first 50 tokens
    "The Naegza rug is painted": "Red!",  # SQuAD normalisation drops case and punctuation
    "The colour of the Vedvor clock is": "yellow.",
}
UNEDITED = {"The colour of the Tabzion clock is": "blue.", "The colour of the Vedvor clock is": "white and grey."}
ANSWERS = {  # metric -> case -> the answers by hand
    "ES_gen": {0: ["yellow"], 1: [" ".join(["red"] * 50)]},
    "PS_gen": {0: ["bright yellow", "green"], 1: ["Red!"]},
    "NS_gen": {0: ["blue"], 1: ["yellow"]},
}
GRADES = {  # metric -> case -> mean over the case's prompts, by hand
    "ES_gen": {0: 1.0, 1: 0.0},  # "red red ..." is not "red"
    "ES_gen_contains": {0: 1.0, 1: 1.0},
    "PS_gen": {0: 0.0, 1: 1.0},  # "bright yellow" and "green" are not "yellow"; "Red!" is "red"
    "PS_gen_contains": {0: 0.5, 1: 1.0},  # "bright yellow" contains it, "green" does not
    "NS_gen": {0: 1.0, 1: 0.0},  # "blue" kept; "white and grey" became "yellow"
}


def scripted_in(tokenizer, context: str, says: dict[str, str]):
    """The stub that answers each prompt, asked as ``context`` asks it, with ``prompt + " " + text``'s tokens."""
    return scripted(
        tokenizer,
        {format_prompt(tokenizer, CONTEXTS[context].format(p), context == "chat"): t for p, t in says.items()},
    )


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("family", ["toy-gpt2", "toy-llama"], ids=["Ġ", "▁"])
@pytest.mark.parametrize("context", ["bare", "qa_inst", "chat"])
def test_answers_stop_rules_and_grades_by_hand(tmp_path, context, family, padding_side):
    tokenizer = toy_tokenizer(family, padding_side, CHAT)
    assert len(continuation(tokenizer, "x", EDITED["The colour of the Naegza rug is"].rstrip())) == 60  # 60 " red"s
    path = tmp_path / "counterfact.json"
    path.write_text(json.dumps(RECORDS))
    data = CounterFact(str(path), generated_answers=context)
    data.setup()
    config = ScoringConfig(sequences_per_forward=8)  # every prompt of both cases in one left-padded batch
    reference = CaseScorer(scripted_in(tokenizer, context, UNEDITED), tokenizer, config, data.score_kinds).reference(
        data.cases
    )
    answers = {}
    scores = CaseScorer(scripted_in(tokenizer, context, EDITED), tokenizer, config, data.score_kinds).score(
        data.cases, reference, answers=answers
    )
    for metric, by_case in ANSWERS.items():
        said = {case: [text for c, _, text in sorted(answers[metric]) if c == case] for case in by_case}
        assert said == by_case, metric
    for metric, by_case in GRADES.items():
        kind, values = scores[metric]
        means = {
            case: sum(v for c, _, v in values if c == case) / sum(c == case for c, _, _ in values) for case in by_case
        }
        assert means == pytest.approx(by_case), metric
