"""The next-token distribution over a set of option strings (multiple choice, letters A-E)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.models.tokenization import PaddingSide, encode_prompt, encode_prompt_target
from lightning_edit.scoring.targets import logits_at, padded_offset


def option_token_ids(tokenizer: PreTrainedTokenizerBase, prompt: str, options: tuple[str, ...]) -> list[int]:
    """The token each option starts with when it follows ``prompt`` after a space; options must differ in it."""
    ids = [encode_prompt_target(tokenizer, prompt, option)[1][0] for option in options]
    if len(set(ids)) != len(ids):
        raise ValueError(f"options {options} do not start with distinct tokens after {prompt!r}")
    return ids


@torch.no_grad()
def option_distribution(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    options: tuple[str, ...] = ("A", "B", "C", "D", "E"),
    batch_size: int = 32,
    padding_side: PaddingSide = "right",
) -> torch.Tensor:
    """(N, K) softmax over the next-token logits of the K options only, for each of the N prompts."""
    probabilities = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        sequences = [encode_prompt(tokenizer, p) for p in chunk]
        lasts = [padded_offset(sequences, row, padding_side) + len(s) - 1 for row, s in enumerate(sequences)]
        next_logits = logits_at(model, tokenizer, sequences, list(range(len(chunk))), lasts, padding_side).float()
        ids = torch.tensor([option_token_ids(tokenizer, p, options) for p in chunk], device=model.device)  # (B, K)
        probabilities.append(torch.softmax(next_logits.gather(1, ids), dim=-1).cpu())
    return torch.cat(probabilities)
