"""Fine-tuning on the edit requests, shared by FT, FT-L, FT-M and LoRA (docs/editors/ft.md#ft-ft-l-and-ft-m).

Two objectives, named as EasyEdit names them (``objective_optimization``):

- ``prompt_last`` (ROME's FT-L, EasyEdit's FT and FT-L): the prompt alone is run; every target token t_j is
  scored under the next-token distribution of the last prompt token,
  ``L = −(1/|t|) Σ_j log p(t_j | prompt)`` (a bag of tokens, exact for one-token targets);
- ``target_new`` (EasyEdit's FT-M and LoRA): ``prompt + " " + target`` is run teacher-forced and the loss is the
  cross-entropy of the target tokens only, ``L = −(1/|t|) Σ_j log p(t_j | prompt, t_<j)``; the positions that
  predict prompt tokens contribute nothing.

Both average over requests. Batches are padded on the right with position ids from the attention mask (the project
convention), so a request has the same loss alone or in a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.cases import EditRequest
from lightning_edit.editors.base import require
from lightning_edit.models.tokenization import encode_prompt_target, pad

Objective = Literal["prompt_last", "target_new"]
IGNORE = -100  # label of a position that is not a target token


def prompt_last_loss(last_logits: Tensor, targets: Tensor, target_mask: Tensor) -> Tensor:
    """Mean over requests of ``−(1/|t|) Σ_j log p(t_j | prompt)`` under the last prompt token's distribution.

    Args:
        last_logits: (n, V) logits at each request's last prompt token.
        targets: (n, T) target token ids, padded.
        target_mask: (n, T) 1 for a real target token, 0 for padding.
    """
    log_probs = last_logits.log_softmax(-1).gather(1, targets)  # (n, T)
    mask = target_mask.to(log_probs.dtype)
    return -((log_probs * mask).sum(1) / mask.sum(1)).mean()


def target_new_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean over requests of the teacher-forced cross-entropy of the target tokens.

    Args:
        logits: (n, L, V) logits of ``prompt + " " + target``.
        labels: (n, L) the token ids at target positions and :data:`IGNORE` elsewhere (prompt, padding).
    """
    shifted = labels[:, 1:]
    predicted = logits[:, :-1]  # position i predicts token i + 1
    mask = shifted != IGNORE
    log_probs = predicted.log_softmax(-1).gather(2, shifted.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    log_probs = log_probs * mask
    return -(log_probs.sum(1) / mask.sum(1)).mean()


def _logits(model: PreTrainedModel, sequences: list[list[int]], pad_id: int) -> Tensor:
    """(n, L, V) logits of right-padded ``sequences``, position ids from the attention mask."""
    input_ids, mask, positions = (x.to(model.device) for x in pad(sequences, pad_id, "right"))
    return model(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits


def objective_loss(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, requests: list[EditRequest], objective: Objective
) -> Tensor:
    """The ``objective`` loss of ``requests`` on ``model`` (one forward pass)."""
    encoded = [encode_prompt_target(tokenizer, r.filled_prompt, r.target_new) for r in requests]
    if objective == "prompt_last":
        logits = _logits(model, [prompt for prompt, _ in encoded], tokenizer.pad_token_id)
        last = torch.tensor([len(prompt) - 1 for prompt, _ in encoded], device=logits.device)
        targets, target_mask, _ = (x.to(logits.device) for x in pad([t for _, t in encoded], 0, "right"))
        return prompt_last_loss(logits[torch.arange(len(encoded), device=logits.device), last], targets, target_mask)
    logits = _logits(model, [prompt + target for prompt, target in encoded], tokenizer.pad_token_id)
    labels = torch.full(logits.shape[:2], IGNORE, dtype=torch.long)
    for row, (prompt, target) in enumerate(encoded):
        labels[row, len(prompt) : len(prompt) + len(target)] = torch.tensor(target)
    return target_new_loss(logits, labels.to(logits.device))


def check_training(
    num_steps: int, lr: float, weight_decay: float, step_batch_size: int, early_stop_loss: float
) -> None:
    """The settings of :func:`fine_tune`, each a one-line error when out of range (before the model is loaded)."""
    require(num_steps >= 1, "num_steps", num_steps, "epochs over the requests, at least 1")
    require(lr > 0, "lr", lr, "Adam's learning rate, > 0")
    require(weight_decay >= 0, "weight_decay", weight_decay, "Adam's weight decay, >= 0")
    require(step_batch_size >= 1, "step_batch_size", step_batch_size, "requests per optimiser step, at least 1")
    require(early_stop_loss >= 0, "early_stop_loss", early_stop_loss, "a loss, >= 0 (0 runs every step)")


def fine_tune(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: list[EditRequest],
    parameters: list[torch.nn.Parameter],
    objective: Objective,
    num_steps: int,
    lr: float,
    weight_decay: float,
    step_batch_size: int,
    early_stop_loss: float,
    after_step: Callable[[], None] | None = None,
) -> list[float]:
    """Adam on ``parameters`` for ``num_steps`` epochs over ``requests`` in chunks of ``step_batch_size``.

    A chunk whose loss is already below ``early_stop_loss`` takes no step; training stops once an epoch's mean
    loss is below it (ROME's and EasyEdit's FT loop). ``after_step`` runs after every optimiser step (FT-L's
    clamp). The model stays in eval mode (no dropout). Returns the mean loss of each epoch.
    """
    if torch.is_inference_mode_enabled():
        raise RuntimeError("fine-tuning editors compute gradients to edit: run the Trainer with inference_mode=False")
    optimizer = torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay)
    history = []
    with torch.enable_grad():
        for _ in range(num_steps):
            losses = []
            for start in range(0, len(requests), step_batch_size):
                loss = objective_loss(model, tokenizer, requests[start : start + step_batch_size], objective)
                losses.append(loss.item())
                if loss.item() >= early_stop_loss:
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    if after_step is not None:
                        after_step()
            history.append(sum(losses) / len(losses))
            if history[-1] < early_stop_loss:
                break
    optimizer.zero_grad(set_to_none=True)
    return history
