"""The edit loss's gradient at edited weights, as the (input, output-gradient) pairs it decomposes into.

For a weight used as ``y_t = W u_t (+ b)`` at positions t, ``∇_W L = Σ_t δ_t u_tᵀ`` with ``δ_t = ∂L/∂y_t``. MEND and
UltraEdit edit with the pairs (u_t, δ_t) rather than with ∇_W: :func:`inputs_and_output_gradients` records them in one
forward and backward pass without a gradient on any weight (a zero tensor added to each module's output carries δ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import PreTrainedTokenizerBase

from lightning_edit.models.hooks import Trace
from lightning_edit.models.tokenization import encode_prompt_target, pad


@dataclass(frozen=True)
class EditBatch:
    """A right-padded batch of ``prompt + " " + target`` sequences, each (B, L)."""

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    target_mask: Tensor  # True at the target's tokens

    def model_inputs(self) -> dict[str, Tensor | bool]:
        return dict(
            input_ids=self.input_ids,
            attention_mask=self.attention_mask,
            position_ids=self.position_ids,
            use_cache=False,
        )


def encode_edits(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], targets: list[str], device: torch.device | str
) -> EditBatch:
    """Each prompt followed by its target (:func:`~lightning_edit.models.tokenization.encode_prompt_target`)."""
    pairs = [encode_prompt_target(tokenizer, p, t) for p, t in zip(prompts, targets)]
    input_ids, attention_mask, position_ids = pad([p + t for p, t in pairs], tokenizer.pad_token_id, "right")
    target_mask = torch.zeros_like(attention_mask, dtype=torch.bool)
    for row, (prompt_ids, target_ids) in enumerate(pairs):
        target_mask[row, len(prompt_ids) : len(prompt_ids) + len(target_ids)] = True
    return EditBatch(input_ids.to(device), attention_mask.to(device), position_ids.to(device), target_mask.to(device))


def target_token_nll(logits: Tensor, batch: EditBatch) -> Tensor:
    """(B, L-1) NLL of every next token, zero except where it is a target token."""
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, L-1, V): position t predicts t+1
    token_logprobs = logprobs.gather(-1, batch.input_ids[:, 1:, None])[..., 0]  # (B, L-1)
    return -token_logprobs * batch.target_mask[:, 1:].float()


def target_nll(logits: Tensor, batch: EditBatch) -> Tensor:
    """(B,) mean per-token NLL of each sequence's target tokens."""
    return target_token_nll(logits, batch).sum(1) / batch.target_mask[:, 1:].float().sum(1)


def inputs_and_output_gradients(
    model: nn.Module, modules: list[str], batch: EditBatch, loss_of_logits: Callable[[Tensor], Tensor]
) -> dict[str, tuple[Tensor, Tensor]]:
    """{module: (u (B, L, d_in), δ (B, L, d_out))}: each module's input and the gradient of
    ``loss_of_logits(model logits)`` with respect to its output, on the model as it is (no weight gets a gradient)."""
    if torch.is_inference_mode_enabled():
        raise RuntimeError("editing with gradients needs them: run the Trainer with inference_mode=False")
    probes: dict[str, Tensor] = {}

    def add_probe(module: str, hidden: Tensor) -> Tensor:
        probes[module] = torch.zeros_like(hidden, requires_grad=True)
        return hidden + probes[module]

    with torch.enable_grad(), Trace(model, modules, inputs=True, outputs=False, edit_output=add_probe) as tr:
        loss = loss_of_logits(model(**batch.model_inputs()).logits)
        gradients = torch.autograd.grad(loss, [probes[m] for m in modules])
    return {module: (tr.inputs[module], delta) for module, delta in zip(modules, gradients)}
