import math

import pytest
import torch

from lightning_edit.models.tokenization import pad
from lightning_edit.scoring import agreement, prefers, score_targets
from lightning_edit.scoring.targets import logits_at, padded_offset

PROMPTS = [
    "The capital of France is",
    "The mother tongue of Danielle Darrieux is",
    "Paris",
    "Danielle Darrieux speaks",
    "A",
]
TARGETS = ["Paris", "French", "is the capital of France", "English and French", "B C D"]


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_batched_equals_one_at_a_time(tiny_lm, padding_side):
    model, tokenizer = tiny_lm
    alone = [score_targets(model, tokenizer, [p], [t])[0] for p, t in zip(PROMPTS, TARGETS)]
    batched = score_targets(model, tokenizer, PROMPTS, TARGETS, batch_size=3, padding_side=padding_side)
    for a, b in zip(alone, batched):
        assert torch.equal(a.target_ids, b.target_ids)
        assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0)
        assert torch.equal(a.argmax_ids, b.argmax_ids)


def test_scores_match_a_plain_forward(tiny_lm):
    model, tokenizer = tiny_lm
    score = score_targets(model, tokenizer, ["The capital of France is"], ["Paris"])[0]
    prompt_ids = tokenizer("The capital of France is")["input_ids"]
    full = tokenizer("The capital of France is Paris")["input_ids"]
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([full])).logits[0].float(), -1)
    expected = [logprobs[i - 1, full[i]].item() for i in range(len(prompt_ids), len(full))]
    assert score.target_ids.tolist() == full[len(prompt_ids) :]
    assert score.logprobs.tolist() == pytest.approx(expected, abs=1e-5)
    assert score.nll == pytest.approx(-sum(expected) / len(expected), abs=1e-5)
    argmax = [logprobs[i - 1].argmax().item() for i in range(len(prompt_ids), len(full))]
    assert score.accuracy == pytest.approx(sum(a == t for a, t in zip(argmax, full[len(prompt_ids) :])) / len(argmax))


def test_prefers_and_agreement(tiny_lm):
    model, tokenizer = tiny_lm
    paris, london = score_targets(model, tokenizer, ["The capital is"] * 2, ["Paris", "London"])
    assert prefers(paris, london) == float(paris.nll < london.nll)
    assert prefers(paris, paris) == 0.0  # strict, as in ROME
    assert agreement(paris.argmax_ids, paris) == 1.0
    assert math.isclose(agreement(paris.argmax_ids + 1, paris), 0.0)


def test_mismatched_lengths_are_an_error(tiny_lm):
    with pytest.raises(ValueError, match="2 prompts but 1 targets"):
        score_targets(*tiny_lm, ["a", "b"], ["c"])


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_logits_at_equal_the_full_logits_there(tiny_lm, padding_side):
    """The unembedding applied only at the scored positions gives the logits the whole forward gives there."""
    model, tokenizer = tiny_lm
    sequences = [tokenizer("The capital of France is Paris.")["input_ids"], tokenizer("Hello")["input_ids"]]
    input_ids, attention_mask, position_ids = pad(sequences, tokenizer.pad_token_id, padding_side)
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        rows = [0, 0, 1]
        positions = [padded_offset(sequences, r, padding_side) + p for r, p in zip(rows, [0, 4, len(sequences[1]) - 1])]
        selected = logits_at(model, tokenizer, sequences, rows, positions, padding_side)
    torch.testing.assert_close(selected, full[rows, positions], atol=1e-6, rtol=0)
