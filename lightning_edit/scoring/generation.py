"""Greedy and sampled generation with stop strings and a token budget, batched with left padding."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.models.row_updates import routed
from lightning_edit.models.tokenization import encode_prompt, pad


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    max_new_tokens: int | None = None,
    max_length: int | None = None,
    do_sample: bool = False,
    top_k: int | None = None,
    temperature: float = 1.0,
    stop_strings: tuple[str, ...] = (),
    seed: int = 0,
    batch_size: int = 16,
    owners: Sequence[int] | None = None,
) -> list[str]:
    """The continuation of each prompt (without the prompt), cut before the first stop string.

    Args:
        max_new_tokens: token budget of the continuation.
        max_length: alternatively, budget of prompt + continuation together (ROME's ``max_out_len``).
        do_sample: sample instead of greedy decoding; ``top_k`` and ``temperature`` shape the sampling.
        stop_strings: generation of a prompt ends at the first of these; the text is cut before it.
        seed: seeds the sampling, so a call is reproducible whatever ran before.
        owners: whose row updates each prompt's rows see (:func:`~lightning_edit.models.row_updates.routed`), so
            the prompts of many independently edited models share batches; generation keeps every row of a batch
            to its end, so a row's owner holds for all its steps.
    """
    if (max_new_tokens is None) == (max_length is None):
        raise ValueError("give exactly one of max_new_tokens and max_length")
    encoded = [encode_prompt(tokenizer, p) for p in prompts]
    by_budget: dict[int, list[int]] = defaultdict(list)
    for i, ids in enumerate(encoded):
        budget = max_new_tokens if max_new_tokens is not None else max_length - len(ids)
        if budget < 1:
            raise ValueError(f"prompt {prompts[i]!r} has {len(ids)} tokens, max_length={max_length} leaves none")
        by_budget[budget].append(i)
    options = dict(do_sample=do_sample, pad_token_id=tokenizer.pad_token_id, use_cache=True)
    if do_sample:
        options.update(top_k=top_k, temperature=temperature)
    else:
        options.update(top_k=None, top_p=None, temperature=None)
    if stop_strings:
        options.update(stop_strings=list(stop_strings), tokenizer=tokenizer)
    texts: list[str] = [""] * len(prompts)
    devices = [model.device.index or 0] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for budget, indices in sorted(by_budget.items()):
            for start in range(0, len(indices), batch_size):
                chunk = indices[start : start + batch_size]
                input_ids, attention_mask, _ = pad([encoded[i] for i in chunk], tokenizer.pad_token_id, "left")
                with routed(model, None if owners is None else [owners[i] for i in chunk]):
                    output = model.generate(
                        input_ids=input_ids.to(model.device),
                        attention_mask=attention_mask.to(model.device),
                        max_new_tokens=budget,
                        synced_gpus=False,  # a sharded model's processes keep in step themselves (models.sharding)
                        **options,
                    )
                for i, row in zip(chunk, output[:, input_ids.shape[1] :]):
                    texts[i] = cut_at_stop(tokenizer.decode(row, skip_special_tokens=True), stop_strings)
    return texts


def cut_at_stop(text: str, stop_strings: tuple[str, ...]) -> str:
    """``text`` up to (not including) the earliest stop string."""
    cut = min((i for i in (text.find(s) for s in stop_strings) if i >= 0), default=len(text))
    return text[:cut]
