"""The health of a model along a sequential stream: its perplexity on held-out text and the norms of edited weights.

At each ``eval_at`` checkpoint of a ``sequential`` run, beside the scores of the edits so far (docs/metrics.md#stream-
health): whether the edited model is still a language model (AlphaEdit tracks general capability along a stream;
QAEdit sees methods fail after 1,000 edits) and how far its weights have moved (ENCORE, NAS and LyapLock show the norm
of the edited weights growing along a stream before it collapses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.errors import ConfigError, require
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.resources import resolve_path

#: the longest window of held-out tokens one row holds (a model with a shorter context: its context)
WINDOW = 512


@dataclass(frozen=True)
class StreamHealth:
    """What each ``eval_at`` checkpoint measures beside the scores.

    Args:
        perplexity: measure the mean token NLL (and perplexity) of ``text`` on the edited and the unedited model.
        text: the held-out text: ``builtin:data/heldout.txt`` (25 plain English sentences written for lightning-edit,
            546 words: 624 tokens for SmolLM2's tokenizer) or a text file of yours.
        max_tokens: at most this many tokens of the text, from its start, in windows of the model's context.
        weight_norms: the Frobenius norm of each weight the edits change, ‖W‖, and of its change since the start of
            the stream, ‖W − W₀‖.
    """

    perplexity: bool = True
    text: str = "builtin:data/heldout.txt"
    max_tokens: int = 4096
    weight_norms: bool = True

    def __post_init__(self) -> None:
        require(self.max_tokens >= 2, "model.stream_health.max_tokens", self.max_tokens, "tokens, at least 2")
        if self.perplexity and not resolve_path(self.text).is_file():
            raise ConfigError(f"model.stream_health.text={self.text!r}: no such file (or perplexity=false)")

    def windows(self, tokenizer: PreTrainedTokenizerBase, context: int | None) -> list[list[int]]:
        """The text's token ids, cut into windows of ``min(context, WINDOW)`` tokens (a last one of 1 left out)."""
        path = resolve_path(self.text)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"model.stream_health.text={self.text!r}: cannot be read as UTF-8 text ({error})")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: self.max_tokens]
        size = min(context or WINDOW, WINDOW)
        windows = [ids[start : start + size] for start in range(0, len(ids), size)]
        windows = [window for window in windows if len(window) > 1]
        if not windows:
            raise ConfigError(f"model.stream_health.text={self.text!r}: fewer than 2 tokens of text")
        return windows


@torch.no_grad()
def heldout_nll(model: PreTrainedModel, windows: list[list[int]]) -> float:
    """Mean NLL of every token of ``windows`` after the first of its window: ``-(1/T) Σ_t log p(x_t | x_<t)`` (one
    window per forward, so memory holds one window's logits)."""
    total = torch.zeros((), dtype=torch.float64)
    count = 0
    for window in windows:
        ids = torch.tensor([window], device=model.device)
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()  # (L - 1, V)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
        total += -logprobs.double().sum().cpu()
        count += len(window) - 1
    return float(total / count)


def heldout_record(nll: float, unedited: float, tokens: int) -> dict[str, float]:
    """The stream record's ``heldout``: the edited and unedited models' mean token NLL and perplexity, exp(NLL)."""
    return {
        "nll": nll,
        "perplexity": math.exp(nll),
        "nll_unedited": unedited,
        "perplexity_unedited": math.exp(unedited),
        "tokens": tokens,
    }


def weight_norms(
    model: nn.Module, start: WeightSnapshot | None, existing: set[int | str]
) -> dict[str, dict[str, float]]:
    """``{name: {"norm": ‖W‖, "change": ‖W − W₀‖}}`` of each parameter ``start`` saved (W₀) and of each parameter added
    since the stream began (W₀ = 0): the weights the edits change. ``existing``: the ids and the names of the
    parameters the model had then; a parameter new by both is added (a wrapper renames a weight it keeps, LoRA's base
    layer; a device map swaps a weight's object, not its name)."""
    norms = {name: {"norm": now, "change": change} for name, (now, change) in (start.norms() if start else {}).items()}
    for name, parameter in model.named_parameters():
        if id(parameter) not in existing and name not in existing and name not in norms:
            value = float(torch.linalg.vector_norm(parameter.detach().double()))
            norms[name] = {"norm": value, "change": value}
    return norms


def stream_summary(record: dict[str, Any]) -> dict[str, float]:
    """The health figures of one stream record, flat (perplexity, total change ‖ΔW‖ over every edited weight)."""
    summary = {}
    if "heldout" in record:
        summary["heldout_perplexity"] = record["heldout"]["perplexity"]
    if record.get("weights"):
        summary["weight_change"] = math.sqrt(sum(norm["change"] ** 2 for norm in record["weights"].values()))
    return summary
