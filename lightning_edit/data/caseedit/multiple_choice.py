"""CaseEdit's multiple-choice scoring (Reddy & Kuo 2025, arXiv 2505.19383, §4 and Appendix 8.4): its score kinds.

One :class:`Choices` request gives a prompt's distribution over its options, computed once and shared by every
multiple-choice kind of the prompt. Two conventions:

- ``letter`` (the paper's): the prompt lists the options under letters A-E and ends with ``Answer:``; the
  distribution is the softmax over the next-token logits of the five letter tokens (one forward pass per prompt).
  The letter token is what the tokenizer produces for the letter right after the prompt: after a space when the
  prompt does not end with whitespace (``Answer: A``: GPT-2's byte-level ``ĠA``, LLaMA's SentencePiece ``▁A``),
  directly when it does (a chat template's generation prompt ending in a newline: ``A``). See
  :func:`letter_token_ids`.
- ``cloze`` (lm-evaluation-harness style, for models that cannot read a multiple-choice prompt): the softmax over
  the options' mean per-token log-likelihood as continuations of the question stem (``stem + " " + option``).

The kinds (``mc_*`` for ``letter``, ``mc_cloze_*`` for ``cloze``) read the prompt's ``details``: ``options`` (the
letters, or the option texts for ``cloze``), ``answer`` (the correct option's position) and ``roles`` (per option:
``new`` for the edit's new truth, ``true`` for the previous truth, ``other`` for a distractor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from transformers import PreTrainedTokenizerBase

from lightning_edit.models.row_updates import routed
from lightning_edit.models.tokenization import encode_prompt
from lightning_edit.scoring.kinds import PromptItem, Request, ScoreKind
from lightning_edit.scoring.targets import logits_at, score_targets

Convention = Literal["letter", "cloze"]
LETTERS = ("A", "B", "C", "D", "E")
ROLES = ("new", "true", "other")


def letter_token_ids(tokenizer: PreTrainedTokenizerBase, prompt: str, letters: tuple[str, ...] = LETTERS) -> list[int]:
    """The token of each letter as the answer right after ``prompt``.

    The letter follows after one space unless the prompt ends with whitespace; its token is what that adds to the
    prompt's tokens, which must be exactly one token, different for every letter.
    """
    prompt_ids = encode_prompt(tokenizer, prompt)
    separator = "" if prompt[-1:].isspace() else " "
    ids = []
    for letter in letters:
        full = encode_prompt(tokenizer, prompt + separator + letter)
        added = full[len(prompt_ids) :]
        if full[: len(prompt_ids)] != prompt_ids or len(added) != 1:
            tokens = tokenizer.convert_ids_to_tokens(added)
            raise ValueError(
                f"letter {letter!r} after {prompt[-30:]!r} is not one token of its own: {tokens}; a prompt ending in "
                "a newline reads the bare letters, or score the options by cloze"
            )
        ids.append(added[0])
    if len(set(ids)) != len(ids):
        raise ValueError(f"letters {letters} share a token after {prompt[-30:]!r}")
    return ids


def letter_tokens(tokenizer: PreTrainedTokenizerBase, prompt: str, letters: tuple[str, ...] = LETTERS) -> list[str]:
    """The letter tokens of :func:`letter_token_ids`, as token strings (``ĠA``, ``▁A``, ``A``)."""
    return tokenizer.convert_ids_to_tokens(letter_token_ids(tokenizer, prompt, letters))


@dataclass(frozen=True)
class Choices(Request):
    """The distribution over ``options`` after ``prompt`` under ``convention`` -> tuple of probabilities."""

    prompt: str
    options: tuple[str, ...]
    convention: Convention
    routed: ClassVar[bool] = True

    @classmethod
    def run(cls, model, tokenizer, requests: list[Choices], batch_size: int, owners=None) -> list[tuple[float, ...]]:
        return run_choices(model, tokenizer, requests, batch_size, owners)


@torch.no_grad()
def _letter_distributions(
    model, tokenizer, requests: list[Choices], batch_size: int, owners
) -> list[tuple[float, ...]]:
    results = []
    for start in range(0, len(requests), batch_size):
        chunk = requests[start : start + batch_size]
        sequences = [encode_prompt(tokenizer, r.prompt) for r in chunk]
        with routed(model, None if owners is None else owners[start : start + batch_size]):
            next_logits = logits_at(  # (B, V) at each prompt's last token
                model, tokenizer, sequences, list(range(len(chunk))), [len(s) - 1 for s in sequences], "right"
            ).float()
        ids = torch.tensor([letter_token_ids(tokenizer, r.prompt, r.options) for r in chunk], device=model.device)
        results += [tuple(row) for row in torch.softmax(next_logits.gather(1, ids), dim=-1).tolist()]
    return results


def _cloze_distributions(model, tokenizer, requests: list[Choices], batch_size: int, owners) -> list[tuple[float, ...]]:
    pairs = [(r.prompt, option) for r in requests for option in r.options]
    pair_owners = None if owners is None else [o for o, r in zip(owners, requests) for _ in r.options]
    scores = iter(
        score_targets(model, tokenizer, [p for p, _ in pairs], [o for _, o in pairs], batch_size, owners=pair_owners)
    )
    results = []
    for request in requests:
        loglik = torch.tensor([-next(scores).nll for _ in request.options], dtype=torch.double)
        results.append(tuple(torch.softmax(loglik, dim=0).tolist()))
    return results


def run_choices(model, tokenizer, requests: list[Choices], batch_size: int, owners=None) -> list[tuple[float, ...]]:
    """The runner of :class:`Choices`: each convention's requests in one batched pass, results in input order."""
    results: dict[int, tuple[float, ...]] = {}
    for convention, runner in (("letter", _letter_distributions), ("cloze", _cloze_distributions)):
        indices = [i for i, r in enumerate(requests) if r.convention == convention]
        if indices:
            group_owners = None if owners is None else [owners[i] for i in indices]
            values = runner(model, tokenizer, [requests[i] for i in indices], batch_size, group_owners)
            results.update(zip(indices, values))
    return [results[i] for i in range(len(requests))]


def entropy_bits(probabilities: tuple[float, ...]) -> float:
    """Shannon entropy in bits (0 log 0 = 0): log2(5) = 2.32 for a uniform five-way distribution."""
    return -sum(p * math.log2(p) for p in probabilities if p > 0)


CONVENTIONS = {
    "letter": "softmax over the next-token logits of the option letters A-E after the listed options and the answer "
    "cue (letter token as the tokenizer writes it after the prompt: ' A' unless the prompt ends with whitespace)",
    "cloze": "softmax over the options' mean per-token log-likelihood after the question stem + ' ' "
    "(lm-evaluation-harness style)",
}
QUANTITIES = {
    "acc": ("accuracy", "1 if the correct option has the strictly highest probability (CaseEdit accuracy)", True),
    "entropy": ("entropy (bits)", "Shannon entropy in bits of the five-way distribution (CaseEdit App. 8.4)", False),
    "p_new": ("P(new truth)", "probability of the option that is the edit's new truth (0 if absent)", True),
    "p_true": ("P(previous truth)", "probability of the option that is the previous truth (0 if absent)", False),
    "p_other": ("P(distractors)", "summed probability of the distractor options", False),
}


def kind_name(convention: Convention, quantity: str) -> str:
    """The name of a multiple-choice kind: ``mc_<quantity>`` (letter) or ``mc_cloze_<quantity>``."""
    return f"mc_{quantity}" if convention == "letter" else f"mc_cloze_{quantity}"


class MultipleChoice(ScoreKind):
    """One quantity of the five-way distribution under one convention (:data:`MULTIPLE_CHOICE_KINDS`)."""

    def __init__(self, convention: Convention, quantity: str):
        label, meaning, higher = QUANTITIES[quantity]
        self.convention_name = convention
        self.quantity = quantity
        self.name = kind_name(convention, quantity)
        self.label = label
        self.higher_is_better = higher
        self.convention = f"{meaning}; {convention}: {CONVENTIONS[convention]}"

    def requests(self, item: PromptItem, config) -> list[Request]:
        return [Choices(item.prompt, tuple(item.details["options"]), self.convention_name)]

    def check(self, item: PromptItem, tokenizer: PreTrainedTokenizerBase, positions: int | None) -> None:
        if self.convention_name == "letter":
            letter_token_ids(tokenizer, item.prompt, tuple(item.details["options"]))

    def value(self, item: PromptItem, current, unedited) -> float:
        probabilities = current[0]
        if self.quantity == "acc":
            answer = item.details["answer"]
            return float(all(probabilities[answer] > p for i, p in enumerate(probabilities) if i != answer))
        if self.quantity == "entropy":
            return entropy_bits(probabilities)
        role = self.quantity.removeprefix("p_")
        return float(sum(p for p, r in zip(probabilities, item.details["roles"]) if r == role))


#: Every quantity under both conventions: the kinds CaseEdit's groups name (``CaseEdit.own_kinds``).
MULTIPLE_CHOICE_KINDS = tuple(
    MultipleChoice(convention, quantity) for convention in CONVENTIONS for quantity in QUANTITIES
)
