"""Tokenization conventions, in one place.

- A target is scored as the continuation of ``prompt + " " + target`` (one ASCII space, ROME and EasyEdit): the
  target tokens are those of the joint string after the prompt's own tokens. For GPT-2/LLaMA-3/Qwen BPE this is
  the ``Ġtarget`` form, for SentencePiece the ``▁target`` form, and a BOS is never part of the target.
- The prompt is encoded with the tokenizer's default special tokens (so LLaMA gets its BOS), unless it already
  starts with the BOS (a chat template wrote it).
- Padding side is chosen explicitly by each caller (:func:`pad`); position ids are computed from the attention
  mask, so left and right padding give the same logits for the real tokens.
- Optional chat-template formatting for instruct models (:func:`format_prompt`).
"""

from __future__ import annotations

from typing import Literal

import torch
from transformers import PreTrainedTokenizerBase

PaddingSide = Literal["left", "right"]


def format_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, chat_template: bool = False) -> str:
    """The prompt as the model sees it: raw, or as one user turn of the tokenizer's chat template."""
    if not chat_template:
        return prompt
    if tokenizer.chat_template is None:
        raise ValueError(f"chat_template=True but tokenizer {tokenizer.name_or_path!r} has no chat template")
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str) -> list[int]:
    """Token ids of a prompt, with the tokenizer's special tokens unless the text already starts with BOS."""
    has_bos = tokenizer.bos_token is not None and prompt.startswith(tokenizer.bos_token)
    return tokenizer(prompt, add_special_tokens=not has_bos)["input_ids"]


def subject_token_span(tokenizer: PreTrainedTokenizerBase, prefix: str, subject: str) -> tuple[int, int]:
    """``(first, stop)``: the positions of ``subject``'s tokens in ``encode_prompt(prefix + subject + ...)``.

    SentencePiece-safe (EasyEdit/AlphaEdit form): count the tokens of ``encode_prompt(prefix)`` and
    ``encode_prompt(prefix + subject)`` (special tokens such as BOS included). A trailing space of the prefix is moved
    to the subject (it would be a token of its own at the end of the prefix).
    """
    stripped = prefix.rstrip(" ")
    subject = prefix[len(stripped) :] + subject
    first = len(encode_prompt(tokenizer, stripped))
    stop = len(encode_prompt(tokenizer, stripped + subject))
    if stop <= first:
        raise ValueError(f"subject {subject!r} adds no tokens after {stripped!r}")
    return first, stop


def encode_prompt_target(tokenizer: PreTrainedTokenizerBase, prompt: str, target: str) -> tuple[list[int], list[int]]:
    """``(prompt_ids, target_ids)``: the target is what ``prompt + " " + target`` adds after the prompt's tokens."""
    if not target.strip():
        raise ValueError(f"empty target after prompt {prompt!r}")
    prompt_ids = encode_prompt(tokenizer, prompt)
    full_ids = encode_prompt(tokenizer, f"{prompt} {target}")
    target_ids = full_ids[len(prompt_ids) :]
    if not target_ids:
        raise ValueError(f"target {target!r} has no tokens after prompt {prompt!r}")
    return prompt_ids, target_ids


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str]) -> list[list[int]]:
    """:func:`encode_prompt` of every prompt, in batched tokenizer calls, each distinct prompt once (the same ids,
    much faster for many)."""
    bos = tokenizer.bos_token
    ids: dict[str, list[int]] = {}
    distinct = list(dict.fromkeys(prompts))
    for with_bos in (False, True):  # prompts that already start with BOS get no special tokens
        texts = [p for p in distinct if (bos is not None and p.startswith(bos)) == with_bos]
        if texts:
            ids.update(zip(texts, _encode_batch(tokenizer, texts, add_special_tokens=not with_bos)))
    return [ids[p] for p in prompts]


def _encode_batch(tokenizer: PreTrainedTokenizerBase, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
    """``tokenizer(texts)["input_ids"]``; a fast tokenizer whose backend is set as that call would set it (no
    truncation, no padding, special tokens split or not as the tokenizer says) is asked for the ids alone (its Rust
    backend's ``encode_batch_fast``: the same ids in about half the time)."""
    backend = tokenizer.backend_tokenizer if tokenizer.is_fast else None
    if (
        backend is None
        or backend.truncation is not None
        or backend.padding is not None
        or backend.encode_special_tokens != bool(getattr(tokenizer, "split_special_tokens", False))
    ):
        return tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]
    return [encoding.ids for encoding in backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)]


def encode_prompt_targets(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], targets: list[str]
) -> list[tuple[list[int], list[int]] | ValueError]:
    """:func:`encode_prompt_target` of every pair, in batched tokenizer calls; a pair it rejects gets the
    ``ValueError`` it would raise, in its place."""
    prompt_ids = encode_prompts(tokenizer, prompts)
    full_ids = encode_prompts(tokenizer, [f"{p} {t}" for p, t in zip(prompts, targets)])
    results: list[tuple[list[int], list[int]] | ValueError] = []
    for prompt, target, ids, full in zip(prompts, targets, prompt_ids, full_ids):
        if not target.strip():
            results.append(ValueError(f"empty target after prompt {prompt!r}"))
        elif len(full) <= len(ids):
            results.append(ValueError(f"target {target!r} has no tokens after prompt {prompt!r}"))
        else:
            results.append((ids, full[len(ids) :]))
    return results


def pad(sequences: list[list[int]], pad_id: int, side: PaddingSide) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad token-id lists to one length: ``(input_ids, attention_mask, position_ids)``, each (B, L)."""
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, seq in enumerate(sequences):
        span = slice(0, len(seq)) if side == "right" else slice(length - len(seq), length)
        input_ids[row, span] = torch.tensor(seq, dtype=torch.long)
        attention_mask[row, span] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return input_ids, attention_mask, position_ids
