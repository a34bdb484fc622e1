import pytest
import torch

from lightning_edit.data.caseedit.multiple_choice import LETTERS, Choices, letter_token_ids, run_choices
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.resources import resolve_path
from lightning_edit.scoring import cut_at_stop, generate

PROMPTS = ["Question: where is Paris? Answer:", "The capital of France is", "A"]


@pytest.mark.parametrize("convention", ["letter", "cloze"])
def test_choices_batched_equal_alone_and_sum_to_one(tiny_lm, convention):
    model, tokenizer = tiny_lm
    requests = [Choices(prompt, LETTERS, convention) for prompt in PROMPTS]
    alone = [run_choices(model, tokenizer, [request], batch_size=1)[0] for request in requests]
    batched = run_choices(model, tokenizer, requests, batch_size=2)
    batched, alone = torch.tensor(batched, dtype=torch.double), torch.tensor(alone, dtype=torch.double)
    assert torch.allclose(batched, alone, atol=1e-5, rtol=0)
    assert torch.allclose(batched.sum(-1), torch.ones(3, dtype=torch.double))


def test_letter_choices_are_the_softmax_over_the_letter_logits(tiny_lm):
    model, tokenizer = tiny_lm
    ids = letter_token_ids(tokenizer, PROMPTS[0])
    with torch.no_grad():
        logits = model(torch.tensor([tokenizer(PROMPTS[0])["input_ids"]])).logits[0, -1]
    expected = torch.softmax(logits[ids], -1).double()
    [found] = run_choices(model, tokenizer, [Choices(PROMPTS[0], LETTERS, "letter")], batch_size=1)
    assert torch.allclose(torch.tensor(found, dtype=torch.double), expected, atol=1e-6)


def test_greedy_generation_batched_equals_alone_and_respects_budget(tiny_lm):
    model, tokenizer = tiny_lm
    alone = [generate(model, tokenizer, [p], max_new_tokens=6)[0] for p in PROMPTS]
    assert generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=2) == alone
    for prompt, text in zip(PROMPTS, alone):
        assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= 6 + 1  # decoding may split a token
    total = generate(model, tokenizer, PROMPTS[1:2], max_length=len(tokenizer(PROMPTS[1])["input_ids"]) + 3)
    assert total[0] == generate(model, tokenizer, PROMPTS[1:2], max_new_tokens=3)[0]


def test_sampling_is_seeded_and_stop_strings_cut(tiny_lm):
    model, tokenizer = tiny_lm
    first = generate(model, tokenizer, PROMPTS, max_new_tokens=8, do_sample=True, top_k=5, seed=1)
    assert first == generate(model, tokenizer, PROMPTS, max_new_tokens=8, do_sample=True, top_k=5, seed=1)
    stopped = generate(
        model, tokenizer, PROMPTS, max_new_tokens=8, do_sample=True, top_k=5, seed=1, stop_strings=("e",)
    )
    assert all("e" not in text for text in stopped)
    assert cut_at_stop("Paris. Then\nmore", (".", "\n")) == "Paris"


def test_budget_arguments_are_checked(tiny_lm):
    with pytest.raises(ValueError, match="exactly one"):
        generate(*tiny_lm, PROMPTS, max_new_tokens=3, max_length=10)
    with pytest.raises(ValueError, match="leaves none"):
        generate(*tiny_lm, PROMPTS, max_length=2)


def _reference_greedy(model, tokenizer, prompt: str, budget: int) -> str:
    """DMLE's reference generation: one prompt at a time, unpadded, no cache, greedy, to EOS or the budget."""
    ids, new = tokenizer.encode(prompt), []
    with torch.no_grad():
        for _ in range(budget):
            token = int(model(torch.tensor([ids + new]), use_cache=False).logits[0, -1].argmax())
            if token == tokenizer.eos_token_id:
                break
            new.append(token)
    return tokenizer.decode(new, skip_special_tokens=True)


@pytest.mark.parametrize("name", ["toy-rule-gpt2", "toy-llama"])
def test_batched_generation_equals_one_prompt_at_a_time_unpadded(name):
    """Our left-padded, cached batches give the reference loop's greedy answers (float32), on toy rule prompts of
    different lengths, so the padding is exercised."""
    model, tokenizer = load_model_and_tokenizer(ModelSource(f"builtin:models/{name}"))
    lines = resolve_path("builtin:data/toy/rules_corpus.txt").read_text().splitlines()[:12]
    prompts = [line.partition(":")[0] + ":" if ":" in line else " ".join(line.split()[:6]) for line in lines]
    batched = generate(model, tokenizer, prompts, max_new_tokens=12, batch_size=5)
    assert batched == [_reference_greedy(model, tokenizer, prompt, 12) for prompt in prompts]
