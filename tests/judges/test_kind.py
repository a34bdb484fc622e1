"""The judged score kind: the answer's token budget per expected token, and judging against the unedited answer."""

from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from lightning_edit.judges.kind import Generate, Generation, JudgedKind
from lightning_edit.resources import resolve_path
from lightning_edit.scoring import kinds as scoring_kinds
from lightning_edit.scoring.kinds import PromptItem

CONFIG = SimpleNamespace(seed=0)


def item(expected: str, prompt: str = "Q:") -> PromptItem:
    return PromptItem(0, "group", 0, prompt, prompt, expected, None)


@pytest.mark.parametrize("model, bos", [("toy-gpt2", False), ("toy-llama", True)])
def test_the_budget_is_counted_per_token_of_the_expected_answer(monkeypatch, model, bos):
    """DMLE's rule_edit length: 3 new tokens per token of the expected answer, without the BOS token a LLaMA
    tokenizer adds (the reference's ``tok.encode(answer, add_special_tokens=False)``)."""
    kind = JudgedKind("test_per_token", "exact_match", Generation(3, stop=(), per_expected_token=True))
    (judged,) = kind.requests(item("P = 2 * (x + y)."), CONFIG)
    assert judged.generation.per_token_of == "P = 2 * (x + y)." and judged.generation.max_new_tokens == 3
    tokenizer = AutoTokenizer.from_pretrained(resolve_path(f"builtin:models/{model}"))
    answer_tokens = len(tokenizer.encode("P = 2 * (x + y).", add_special_tokens=False))
    assert len(tokenizer.encode("P = 2 * (x + y).")) == answer_tokens + bos
    budgets = []

    def fake_generate(model, tokenizer, prompts, max_new_tokens, **options):
        budgets.append(max_new_tokens)
        return ["x"] * len(prompts)

    monkeypatch.setattr("lightning_edit.judges.kind.generate", fake_generate)
    requests = [judged.generation, Generate("Q:", 5)]
    assert scoring_kinds.run_requests(None, tokenizer, requests, 4) == {r: "x" for r in requests}
    assert sorted(budgets) == sorted([3 * answer_tokens, 5])
    assert "per token of the expected answer" in kind.convention


def test_against_unedited_judges_the_answer_against_the_unedited_models():
    kind = JudgedKind("test_unedited", "exact_match", Generation(8), against_unedited=True)
    assert "the unedited model's answer" in kind.convention
    prompt = PromptItem(0, "group", 0, "[context] Q:", "Q:", "A = x * y.", None)
    (current,) = kind.requests(prompt, CONFIG)
    (unedited,) = kind.reference_requests(prompt, CONFIG)
    assert (current.prompt, unedited.prompt) == ("[context] Q:", "Q:")  # the unedited model sees the bare prompt
    assert kind.value(prompt, [" A = x * y\n"], ["A = x * y."]) == 1.0  # same after SQuAD normalisation
    assert kind.value(prompt, [" A = x * y * 2"], ["A = x * y."]) == 0.0


def test_a_prompt_whose_answer_budget_overflows_the_positions_is_refused_before_any_edit():
    """The check before any edit counts the prompt's tokens and the answer's whole budget (3 per expected token)."""
    kind = JudgedKind("test_budget", "exact_match", Generation(3, stop=(), per_expected_token=True))
    tokenizer = AutoTokenizer.from_pretrained(resolve_path("builtin:models/toy-gpt2"))
    prompt = item("P = 2 * (x + y).", "The perimeter of a rectangle is")
    needed = len(tokenizer.encode(prompt.prompt)) + 3 * len(tokenizer.encode(prompt.expected, add_special_tokens=False))
    kind.check(prompt, tokenizer, needed)  # fits exactly
    kind.check(prompt, tokenizer, None)  # a model without a position limit
    with pytest.raises(
        ValueError, match=rf"tokens long and its generated answer may take .* than the model's {needed - 1}"
    ):
        kind.check(prompt, tokenizer, needed - 1)
