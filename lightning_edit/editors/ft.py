"""FT, FT-L and FT-M: fine-tuning the MLP output projection of some layers on the edit.

docs/editors/ft.md#ft-ft-l-and-ft-m.

One class, three configurations (``configs/methods/ft.yaml``, ``ft_l.yaml``, ``ft_m.yaml``). For the requests of an
editor call, Adam minimises the ``objective`` (:mod:`lightning_edit.editors.objectives`) over the weight and bias of
``mlp_out`` in ``layers``:

- FT: ``prompt_last``, unconstrained (ROME's and EasyEdit's FT baseline);
- FT-L: the same with the change kept in the L∞ box ‖W − W₀‖_∞ ≤ ε after every step, W₀ the weights when the call
  starts (Zhu et al., 2020; ROME's FT-L, ε = ``norm_constraint``);
- FT-M: ``target_new``, the target tokens teacher-forced and the prompt positions masked (EasyEdit's FT-M).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_edit.cases import EditRequest
from lightning_edit.editors.base import EditorModule, require
from lightning_edit.editors.objectives import Objective, check_training, fine_tune
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import resolve_architecture


def clamp_to_box(weight: Tensor, original: Tensor, epsilon: float) -> Tensor:
    """``weight`` moved into the L∞ box ``original ± epsilon`` (FT-L's constraint); entries inside are unchanged."""
    return torch.minimum(torch.maximum(weight, original - epsilon), original + epsilon)


class FT(EditorModule):
    """Fine-tuning of ``mlp_out`` (weight and bias) of some layers on the edit requests.

    Args:
        lm: the causal language model to edit.
        layers: the layers whose MLP output projection is trained (the model preset sets them; FT-L: gpt2-xl and
            GPT-J 0, LLaMA 21 in EasyEdit).
        objective: ``prompt_last`` (FT, FT-L: every target token scored at the last prompt token) or
            ``target_new`` (FT-M: teacher-forced target tokens, prompt masked); default ``prompt_last``.
        norm_constraint: FT-L's ε, the L∞ radius of the change around the weights the call starts from; None
            (FT, FT-M): unconstrained.
        num_steps: epochs over the requests (ROME FT-L: 25).
        lr: Adam learning rate (ROME FT-L: 5e-4).
        weight_decay: Adam weight decay (ROME FT-L: 0).
        step_batch_size: requests per optimiser step.
        early_stop_loss: skip a step whose loss is below this, stop once an epoch's mean loss is (ROME: 1e-2).
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir, in_context (see EditorModule).
    """

    def __init__(
        self,
        lm: ModelSource,
        layers: list[int] = [0],
        objective: Objective = "prompt_last",
        norm_constraint: float | None = None,
        num_steps: int = 25,
        lr: float = 5e-4,
        weight_decay: float = 0.0,
        step_batch_size: int = 128,
        early_stop_loss: float = 1e-2,
        **kwargs,
    ):
        require(
            norm_constraint is None or norm_constraint > 0, "norm_constraint", norm_constraint, "FT-L's radius, > 0"
        )
        check_training(num_steps, lr, weight_decay, step_batch_size, early_stop_loss)
        super().__init__(lm, **kwargs)
        self.arch = resolve_architecture(self.model)
        self.objective = objective
        self.norm_constraint = norm_constraint
        self.num_steps = num_steps
        self.lr = lr
        self.weight_decay = weight_decay
        self.step_batch_size = step_batch_size
        self.early_stop_loss = early_stop_loss
        modules = [self.arch.layer_name(self.arch.spec.mlp_out, layer) for layer in layers]
        parameters = dict(self.model.named_parameters())
        self.parameter_names = [f"{m}.{p}" for m in modules for p in ("weight", "bias") if f"{m}.{p}" in parameters]

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return self.parameter_names

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Fine-tune on the requests together (Adam state and FT-L's box start anew at every call)."""
        parameters = [self.model.get_parameter(name) for name in self.parameter_names]
        originals = [p.detach().clone() for p in parameters] if self.norm_constraint is not None else []

        def clamp() -> None:
            with torch.no_grad():
                for parameter, original in zip(parameters, originals):
                    parameter.copy_(clamp_to_box(parameter, original, self.norm_constraint))

        for parameter in parameters:
            parameter.requires_grad_(True)
        try:
            fine_tune(
                self.model, self.tokenizer, requests, parameters, self.objective, self.num_steps, self.lr,
                self.weight_decay, self.step_batch_size, self.early_stop_loss,
                clamp if self.norm_constraint is not None else None,
            )  # fmt: skip
        finally:
            for parameter in parameters:
                parameter.requires_grad_(False)
