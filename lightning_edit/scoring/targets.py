"""Teacher-forced scoring of a target after a prompt, batched and padding-invariant.

One forward pass over ``prompt + " " + target`` (see :mod:`lightning_edit.models.tokenization`) gives, at every
target position, the log-probability of the target token and the argmax token. Everything else derives from it:

- :attr:`TargetScore.nll`: mean per-token negative log-likelihood (ROME/CounterFact; length-normalised);
- :func:`prefers`: probability comparison, success iff NLL(expected) < NLL(alternative) (ROME ES/PS/NS);
- :attr:`TargetScore.accuracy`: teacher-forced token accuracy (EasyEdit ``rewrite_acc``, ROME's zsRE);
- :func:`agreement`: share of argmax tokens equal to a reference model's (EasyEdit locality).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.models.tokenization import PaddingSide, encode_prompt_target, pad


@dataclass(frozen=True)
class TargetScore:
    """Per-token results of one (prompt, target) pair; all tensors have shape (T,) for a T-token target."""

    target_ids: torch.Tensor
    logprobs: torch.Tensor
    argmax_ids: torch.Tensor

    @property
    def nll(self) -> float:
        """Mean per-token negative log-likelihood of the target."""
        return float(-self.logprobs.mean())

    @property
    def accuracy(self) -> float:
        """Share of target tokens that are the argmax under teacher forcing."""
        return float((self.argmax_ids == self.target_ids).double().mean())


def prefers(expected: TargetScore, alternative: TargetScore) -> float:
    """1.0 if the expected answer is strictly more likely (lower mean NLL) than the alternative, else 0.0."""
    return float(expected.nll < alternative.nll)


def agreement(reference_ids: torch.Tensor, score: TargetScore) -> float:
    """Share of argmax tokens along the target equal to those of a reference (e.g. the unedited model)."""
    return float((reference_ids == score.argmax_ids).double().mean())


def padded_logits(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sequences: list[list[int]], padding_side: PaddingSide
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits (B, L, V), attention_mask (B, L))`` of one padded forward pass, positions taken from the mask."""
    input_ids, attention_mask, position_ids = pad(sequences, tokenizer.pad_token_id, padding_side)
    logits = model(
        input_ids=input_ids.to(model.device),
        attention_mask=attention_mask.to(model.device),
        position_ids=position_ids.to(model.device),
        use_cache=False,
    ).logits
    return logits, attention_mask


@torch.no_grad()
def score_targets(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    targets: list[str],
    batch_size: int = 32,
    padding_side: PaddingSide = "right",
) -> list[TargetScore]:
    """Score each ``targets[i]`` after ``prompts[i]``; results in input order.

    Pairs are sorted by length and run ``batch_size`` at a time; the log-softmax is taken only at target positions.
    """
    if len(prompts) != len(targets):
        raise ValueError(f"{len(prompts)} prompts but {len(targets)} targets")
    encoded = [encode_prompt_target(tokenizer, p, t) for p, t in zip(prompts, targets)]
    order = sorted(range(len(encoded)), key=lambda i: -(len(encoded[i][0]) + len(encoded[i][1])))
    results: list[TargetScore | None] = [None] * len(encoded)
    device = model.device
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        sequences = [encoded[i][0] + encoded[i][1] for i in chunk]
        logits, attention_mask = padded_logits(model, tokenizer, sequences, padding_side)  # (B, L, V)
        length = attention_mask.shape[1]
        rows, positions, lengths = [], [], []
        for row, i in enumerate(chunk):
            prompt_ids, target_ids = encoded[i]
            offset = 0 if padding_side == "right" else length - len(sequences[row])
            first = offset + len(prompt_ids) - 1  # the position that predicts the first target token
            rows += [row] * len(target_ids)
            positions += range(first, first + len(target_ids))
            lengths.append(len(target_ids))
        target_logits = logits[torch.tensor(rows, device=device), torch.tensor(positions, device=device)].float()
        logprobs = torch.log_softmax(target_logits, dim=-1)  # (sum T, V)
        flat_targets = torch.tensor([t for i in chunk for t in encoded[i][1]], device=device)
        token_logprobs = logprobs.gather(1, flat_targets[:, None])[:, 0].cpu()
        argmax_ids = target_logits.argmax(-1).cpu()
        for i, lp, am, tg in zip(
            chunk, token_logprobs.split(lengths), argmax_ids.split(lengths), flat_targets.cpu().split(lengths)
        ):
            results[i] = TargetScore(target_ids=tg, logprobs=lp, argmax_ids=am)
    return results  # type: ignore[return-value]
