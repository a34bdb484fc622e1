"""RECT (Gu et al., 2024, "Model Editing Harms General Abilities of Large Language Models: Regularization to the
Rescue"): a locate-then-edit update with only its largest relative changes kept (docs/editors/rect.md#rect).

The base editor (ROME, MEMIT or AlphaEdit) computes its update ΔW of W exactly as it does alone; RECT then writes::

    ρ_ij = |ΔW_ij| / (|W_ij| + ε),   M = [ρ_ij among the ⌈k·numel⌉ largest],   W ← W + ΔW ⊙ M

(the paper keeps k = 20% of the entries and zeroes the rest), per request for ROME, per layer for MEMIT. RECT is
that filter, given to the base editor: ``ROME(..., update_filter=RECT(keep_fraction=0.2))`` (``configs/methods/
rect.yaml``), or MEMIT or AlphaEdit the same way; the base editor is otherwise unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_edit.editors.solvers import UpdateFilter
from lightning_edit.errors import require

EPSILON = 1e-8  # guards |W_ij| ≈ 0 in the relative change (AlphaEdit's MEMIT_rect: 1e-8)


def rect_mask(delta: Tensor, weight: Tensor, keep_fraction: float) -> Tensor:
    """The boolean mask of the ⌈keep_fraction·numel⌉ entries of largest relative change ``|ΔW| / (|W| + ε)``.

    Ties at the threshold are broken by ``topk``, so exactly that many entries are kept.
    """
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction={keep_fraction} must be in (0, 1]")
    relative = delta.abs() / (weight.abs().to(delta.dtype) + EPSILON)
    kept = torch.topk(relative.flatten(), math.ceil(keep_fraction * relative.numel())).indices
    mask = torch.zeros(relative.numel(), dtype=torch.bool, device=delta.device)
    mask[kept] = True
    return mask.view_as(delta)


def rect_update(delta: Tensor, weight: Tensor, keep_fraction: float) -> Tensor:
    """ΔW ⊙ M: the update with all but its largest relative changes zeroed (RECT)."""
    return delta * rect_mask(delta, weight, keep_fraction)


class RECT(UpdateFilter):
    """RECT's filter: ΔW ⊙ M, the base editor's update with all but its largest relative changes zeroed.

    Args:
        keep_fraction: k, the fraction of the update's entries kept (paper: 0.2).
    """

    def __init__(self, keep_fraction: float = 0.2):
        require(
            0.0 < keep_fraction <= 1.0,
            "model.update_filter.keep_fraction",
            keep_fraction,
            "the share of entries kept, in (0, 1]",
        )
        self.keep_fraction = keep_fraction

    def __call__(self, delta: Tensor, W: Tensor) -> Tensor:
        return rect_update(delta, W, self.keep_fraction)

    def __repr__(self) -> str:
        return f"RECT(keep_fraction={self.keep_fraction})"
