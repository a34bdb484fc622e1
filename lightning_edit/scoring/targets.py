"""Teacher-forced scoring of a target after a prompt, batched and padding-invariant.

One forward pass over ``prompt + " " + target`` (see :mod:`lightning_edit.models.tokenization`) gives, at every
target position, the log-probability of the target token and the argmax token. Everything else derives from it:

- :attr:`TargetScore.nll`: mean per-token negative log-likelihood (ROME/CounterFact; length-normalised);
- :func:`prefers`: probability comparison, success iff NLL(expected) < NLL(alternative) (ROME ES/PS/NS);
- :attr:`TargetScore.accuracy`: teacher-forced token accuracy (EasyEdit ``rewrite_acc``, ROME's zsRE);
- :func:`agreement`: share of argmax tokens equal to a reference model's (EasyEdit locality).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.models.registry import ARCHITECTURES
from lightning_edit.models.row_updates import routed
from lightning_edit.models.sharding import is_sharded
from lightning_edit.models.tokenization import PaddingSide, encode_prompt_targets, pad


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


def logits_at(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sequences: list[list[int]],
    rows: list[int],
    positions: list[int],
    padding_side: PaddingSide = "right",
) -> torch.Tensor:
    """(m, V) logits at the (row, position) pairs of one padded forward over ``sequences``, positions counted in
    the padded batch (left padding shifts a row by the batch's length minus its own).

    For the families of the registry the unembedding is applied only at those positions (the decoder's normed
    output there times the output embedding, as their ``forward`` computes it for every position); other models
    give their full logits, indexed, as does a sharded model (docs/sharding.md).
    """
    input_ids, attention_mask, position_ids = pad(sequences, tokenizer.pad_token_id, padding_side)
    inputs = dict(
        input_ids=input_ids.to(model.device),
        attention_mask=attention_mask.to(model.device),
        position_ids=position_ids.to(model.device),
        use_cache=False,
    )
    index = (torch.tensor(rows, device=model.device), torch.tensor(positions, device=model.device))
    if getattr(getattr(model, "config", None), "model_type", None) not in ARCHITECTURES or is_sharded(model):
        return model(**inputs).logits[index]  # a sharded model runs whole: its forward gathers the weights
    hidden = model.base_model(**inputs).last_hidden_state  # (B, L, d) after the final norm
    return model.get_output_embeddings()(hidden[index])


def padded_offset(sequences: list[list[int]], row: int, padding_side: PaddingSide) -> int:
    """Where ``sequences[row]`` starts in its padded batch."""
    return 0 if padding_side == "right" else max(map(len, sequences)) - len(sequences[row])


@torch.no_grad()
def score_targets(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    targets: list[str],
    batch_size: int = 32,
    padding_side: PaddingSide = "right",
    owners: Sequence[int] | None = None,
) -> list[TargetScore]:
    """Score each ``targets[i]`` after ``prompts[i]``; results in input order. ``owners[i]``: whose
    :class:`~lightning_edit.models.row_updates.RowUpdates` pair ``i`` is scored with.

    Pairs are sorted by length and run ``batch_size`` at a time; the log-softmax is taken only at target positions.
    """
    if len(prompts) != len(targets):
        raise ValueError(f"{len(prompts)} prompts but {len(targets)} targets")
    encoded = encode_prompt_targets(tokenizer, prompts, targets)
    for result in encoded:
        if isinstance(result, ValueError):
            raise result
    order = sorted(range(len(encoded)), key=lambda i: -(len(encoded[i][0]) + len(encoded[i][1])))
    results: list[TargetScore | None] = [None] * len(encoded)
    device = model.device
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        sequences = [encoded[i][0] + encoded[i][1] for i in chunk]
        rows = []
        positions = []
        lengths = []
        for row, i in enumerate(chunk):
            prompt_ids, target_ids = encoded[i]
            first = padded_offset(sequences, row, padding_side) + len(prompt_ids) - 1  # predicts the first target
            rows += [row] * len(target_ids)
            positions += range(first, first + len(target_ids))
            lengths.append(len(target_ids))
        with routed(model, None if owners is None else [owners[i] for i in chunk]):
            target_logits = logits_at(model, tokenizer, sequences, rows, positions, padding_side).float()  # (ΣT, V)
        logprobs = torch.log_softmax(target_logits, dim=-1)  # (sum T, V)
        flat_targets = torch.tensor([t for i in chunk for t in encoded[i][1]], device=device)
        token_logprobs = logprobs.gather(1, flat_targets[:, None])[:, 0].cpu()
        argmax_ids = target_logits.argmax(-1).cpu()
        for i, lp, am, tg in zip(
            chunk, token_logprobs.split(lengths), argmax_ids.split(lengths), flat_targets.cpu().split(lengths)
        ):
            results[i] = TargetScore(target_ids=tg, logprobs=lp, argmax_ids=am)
    return results  # type: ignore[return-value]
