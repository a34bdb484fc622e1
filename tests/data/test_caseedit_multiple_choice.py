"""Multiple-choice scoring (CaseEdit, arXiv 2505.19383, Appendix 8.4) on a stub model with hand-set logits.

The stub's logits at a position are the row of a table for the token at that position; only the row of the
prompt's last token is set. With the real toy tokenizers (GPT-2 byte-level BPE, LLaMA Metaspace) and the embedded
tiny GPT-2 (whose vocabulary has every ``ĠA``-``ĠE``), the letter tokens after ``Answer:`` are the leading-space
forms and after a prompt ending in a newline (a chat template's generation prompt) the bare letters; the two forms get
different logits, so reading the wrong one changes every number below.
"""

import json
import math
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer

from lightning_edit.data import CaseEdit
from lightning_edit.data.caseedit.multiple_choice import entropy_bits, letter_tokens
from lightning_edit.evaluation import CaseScorer, ScoringConfig
from lightning_edit.models.tokenization import encode_prompt, encode_prompt_target, format_prompt
from lightning_edit.resources import resolve_path

SPACED = [0.5, 0.2, 0.15, 0.1, 0.05]  # next-token probabilities of the letter tokens after a space, A-E
BARE = [0.05, 0.1, 0.15, 0.2, 0.5]  # of the bare letters
ROOMS = ["kitchen", "garage", "attic", "cellar", "pantry"]
CLOZE = [0.4, 0.2, 0.1, 0.05, 0.05]  # next-token probabilities of " kitchen", " garage", ... after the stem
# entropy of SPACED by hand: 0.5*1 + 0.2*log2(5) + 0.15*log2(1/0.15) + 0.1*log2(10) + 0.05*log2(20)
SPACED_BITS = 0.5 + 0.2 * 2.321928095 + 0.15 * 2.736965594 + 0.1 * 3.321928095 + 0.05 * 4.321928095


def tokenizer(name: str):
    tok = AutoTokenizer.from_pretrained(resolve_path(f"builtin:models/{name}"))
    tok.chat_template = "{{ messages[0]['content'] + '\\n' }}"  # a generation prompt ending in a newline
    tok.pad_token = tok.pad_token or tok.eos_token
    return tok


class RowLM(torch.nn.Module):
    """Logits at each position: the row of the token there; rows not set are uniform. Listed rows are next-token
    distributions (probability per token id; the rest spread evenly)."""

    def __init__(self, vocab: int, rows: dict[int, dict[int, float]]):
        super().__init__()
        table = torch.zeros(vocab, vocab, dtype=torch.double)
        for token, probs in rows.items():
            table[token] = max(1 - sum(probs.values()), 0.0) / (vocab - len(probs))  # never log(<0): NaN logits
            for target, p in probs.items():
                table[token, target] = p
            table[token] = table[token].log()
        self.table = table.float()
        self.device = torch.device("cpu")

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(logits=self.table[input_ids])


def record(options: list[str], answer: str = "B") -> dict:
    question = {"question": "The Zozva vase is kept in the ___.", "choices": dict(zip("ABCDE", options))}
    return {
        "case_id": 0,
        "subject": "Zozva vase",
        "relation": "room",
        "prompt": "The Zozva vase is kept in the",
        "ground_truth": "attic",  # option C: the previous truth
        "target_new": "garage",  # option B: the new truth
        "questions": {q: question | {"answer": answer} for q in ("reliability", "generalization", "portability")}
        | {"locality": question | {"answer": "C"}},
    }


def benchmark(tmp_path, convention: str, answer_cue: str = "Answer:") -> CaseEdit:
    path = tmp_path / "caseedit.json"
    path.write_text(json.dumps([record(ROOMS)]))
    data = CaseEdit(str(path), convention=convention, answer_cue=answer_cue)
    data.setup()
    return data


def letter_model(tok, prompt: str) -> RowLM:
    spaced = [encode_prompt_target(tok, "Answer:", letter)[1][0] for letter in "ABCDE"]
    bare = tok.convert_tokens_to_ids(list("ABCDE"))
    last = encode_prompt(tok, prompt)[-1]
    return RowLM(len(tok), {last: dict(zip(spaced, SPACED)) | dict(zip(bare, BARE))})


@pytest.mark.parametrize(
    ("name", "chat", "cue", "tokens", "probs"),
    [
        ("tiny-gpt2", False, "Answer:", ["ĠA", "ĠB", "ĠC", "ĠD", "ĠE"], SPACED),  # GPT-2 byte-level BPE after a space
        ("toy-gpt2", True, "Answer:", list("ABCDE"), BARE),  # the bare letters after the template's newline
        ("toy-gpt2", False, "Answer:\n", list("ABCDE"), BARE),  # ... after an answer cue ending in a newline
        ("toy-llama", False, "Answer:", ["▁A", "▁B", "▁C", "▁D", "▁E"], SPACED),  # LLaMA Metaspace after a space
        ("toy-llama", True, "Answer:", list("ABCDE"), BARE),
    ],
)
def test_letter_scores_equal_hand_computed_values(tmp_path, name, chat, cue, tokens, probs):
    data, tok = benchmark(tmp_path, "letter", cue), tokenizer(name)
    assert data.cases[0].groups["reliability"].prompts[0].endswith("\nE. pantry\n" + cue)
    prompt = format_prompt(tok, data.cases[0].groups["reliability"].prompts[0], chat)
    assert letter_tokens(tok, prompt) == tokens
    scores = CaseScorer(letter_model(tok, prompt), tok, ScoringConfig(chat_template=chat), data.score_kinds).score(
        data.cases
    )
    value = {metric: values[0][2] for metric, (_, values) in scores.items()}
    # B is the new truth and the answer of reliability; C the previous truth and the answer of locality
    assert value["reliability_p_new"] == pytest.approx(probs[1], abs=1e-6)
    assert value["reliability_p_true"] == pytest.approx(probs[2], abs=1e-6)
    assert value["reliability_p_other"] == pytest.approx(probs[0] + probs[3] + probs[4], abs=1e-6)
    assert value["reliability_entropy"] == pytest.approx(-sum(p * math.log2(p) for p in probs), abs=1e-5)
    assert value["reliability_entropy"] == pytest.approx(SPACED_BITS, abs=1e-5)  # both lists are permutations
    assert value["reliability_acc"] == 0.0  # the most probable letter is A (spaced) or E (bare), never B
    assert value["locality_acc"] == 0.0
    notes = data.run_notes(SimpleNamespace(tokenizer=tok, scoring=ScoringConfig(chat_template=chat)))
    assert notes == {"convention": "letter", "letter_tokens": [{"tokens": tokens, "prompts": 4}]}


def test_accuracy_is_the_argmax_letter(tmp_path):
    tok = tokenizer("toy-llama")
    path = tmp_path / "caseedit.json"
    options = ["garage", "kitchen", "attic", "cellar", "pantry"]  # the new truth under A, the most probable letter
    choices = dict(zip("ABCDE", options))
    questions = {
        q: {"question": "Where is it?", "choices": choices, "answer": "A"} for q in ("reliability", "portability")
    }
    questions |= {
        q: {"question": "Where is it?", "choices": choices, "answer": a}
        for q, a in [("generalization", "A"), ("locality", "C")]
    }
    path.write_text(json.dumps([record(options) | {"questions": questions}]))
    data = CaseEdit(str(path))
    data.setup()
    prompt = data.cases[0].groups["reliability"].prompts[0]
    assert prompt == "Where is it?\nA. garage\nB. kitchen\nC. attic\nD. cellar\nE. pantry\nAnswer:"
    scores = CaseScorer(letter_model(tok, prompt), tok, ScoringConfig(), data.score_kinds).score(data.cases)
    assert scores["reliability_acc"][1][0][2] == 1.0 and scores["locality_acc"][1][0][2] == 0.0
    assert scores["reliability_p_new"][1][0][2] == pytest.approx(0.5, abs=1e-6)


def test_a_letter_without_a_token_of_its_own_is_an_error(tmp_path):
    """The toy GPT-2's vocabulary has no ``ĠE``: " E" is two tokens, so the letter convention cannot read it."""
    data, tok = benchmark(tmp_path, "letter"), tokenizer("toy-gpt2")
    scorer = CaseScorer(RowLM(len(tok), {}), tok, ScoringConfig(), data.score_kinds)
    with pytest.raises(ValueError, match=r"letter 'E' .* not one token of its own: \['Ġ', 'E'\]"):
        scorer.score(data.cases)
    problems = list(scorer.check(data.cases))  # before any edit
    assert {(case.case_id, group) for case, group, _ in problems} == {(0, q) for q in data.cases[0].groups}
    assert all("a prompt ending in a newline reads the bare letters" in reason for _, _, reason in problems)


@pytest.mark.parametrize("name", ["toy-gpt2", "toy-llama"])
def test_cloze_is_the_softmax_of_option_likelihoods(tmp_path, name):
    data, tok = benchmark(tmp_path, "cloze"), tokenizer(name)
    stem = data.cases[0].groups["reliability"].prompts[0]
    assert stem == "The Zozva vase is kept in the"
    ids = [encode_prompt_target(tok, stem, room)[1] for room in ROOMS]
    assert all(len(i) == 1 for i in ids)  # one token each: the mean log-likelihood is the next-token one
    model = RowLM(len(tok), {encode_prompt(tok, stem)[-1]: {i[0]: p for i, p in zip(ids, CLOZE)}})
    scores = CaseScorer(model, tok, ScoringConfig(), data.score_kinds).score(data.cases)
    expected = [p / sum(CLOZE) for p in CLOZE]  # 0.5, 0.25, 0.125, 0.0625, 0.0625
    assert scores["reliability_p_new"][1][0][2] == pytest.approx(expected[1], abs=1e-6)
    assert scores["reliability_p_true"][1][0][2] == pytest.approx(expected[2], abs=1e-6)
    assert scores["reliability_entropy"][1][0][2] == pytest.approx(entropy_bits(tuple(expected)), abs=1e-5)
    assert scores["reliability_entropy"][1][0][2] == pytest.approx(1.875, abs=1e-5)  # 0.5*1+0.25*2+0.125*3+2*0.0625*4
    assert scores["reliability_acc"][1][0][2] == 0.0  # kitchen (A) is the most likely
