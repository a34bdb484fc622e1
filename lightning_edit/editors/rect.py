"""RECT (Gu et al., 2024, "Model Editing Harms General Abilities of Large Language Models: Regularization to the
Rescue"): a locate-then-edit update with only its largest relative changes kept (docs/methods.md#rect).

The base editor (ROME or MEMIT, ``base``) computes its update ΔW of W exactly as it does alone; RECT then writes

    ρ_ij = |ΔW_ij| / (|W_ij| + ε),   M = [ρ_ij among the ⌈k·numel⌉ largest],   W ← W + ΔW ⊙ M

(the paper keeps k = 20% of the entries and zeroes the rest), per request for ROME, per layer for MEMIT.
``RECT(base=...)`` makes an instance of the base editor's RECT subclass (its ``__init__`` sets the class), which
overrides only the base's update step (``written_update``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from lightning_edit.data.schema import EditRequest
from lightning_edit.editors.base import EditorModule, require
from lightning_edit.editors.locate import DEFAULT_FACT_TOKEN, EditSites, FactToken
from lightning_edit.editors.memit import MEMIT
from lightning_edit.editors.rome import ROME
from lightning_edit.editors.target_vector import TargetOptimization
from lightning_edit.models.loading import ModelSource
from lightning_edit.stats.config import KeyStatistics

EPSILON = 1e-8  # guards |W_ij| ≈ 0 in the relative change (AlphaEdit's MEMIT_rect: 1e-8)


def rect_mask(delta: Tensor, weight: Tensor, keep_fraction: float) -> Tensor:
    """The boolean mask of the ⌈keep_fraction·numel⌉ entries of largest relative change |ΔW| / (|W| + ε).

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


class RECT(EditorModule):
    """ROME or MEMIT with RECT's sparsified update.

    Args:
        lm: the causal language model to edit.
        base: the locate-then-edit editor whose update is sparsified: ``rome`` or ``memit``.
        keep_fraction: k, the fraction of the update's entries kept (paper: 0.2).
        sites: where the base editor edits (``sites.rome_layer`` or ``sites.memit_layers``, λ).
        fact_token, stats, target, template_lengths, template_seed: the base editor's (None: its defaults).
        mom2_adjustment, key: ROME's (None: ROME's defaults); an error with ``base: memit``.
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir, in_context (see EditorModule).
    """

    def __init__(
        self,
        lm: ModelSource,
        base: Literal["rome", "memit"] = "rome",
        keep_fraction: float = 0.2,
        sites: EditSites | None = None,
        fact_token: FactToken = DEFAULT_FACT_TOKEN,
        mom2_adjustment: bool | None = None,
        key: Literal["original", "prompt", "prefix"] | None = None,
        stats: KeyStatistics | None = None,
        target: TargetOptimization | None = None,
        template_lengths: list[tuple[int, int]] | None = None,
        template_seed: int = 0,
        **kwargs,
    ):
        rome_only = {
            name: value for name, value in (("mom2_adjustment", mom2_adjustment), ("key", key)) if value is not None
        }
        require(not (base == "memit" and rome_only), "base", base,
                f"{sorted(rome_only)} are ROME's settings; RECT with base 'memit' takes none of them")  # fmt: skip
        require(0.0 < keep_fraction <= 1.0, "keep_fraction", keep_fraction, "the share of entries kept, in (0, 1]")
        chosen = {"rome": RECTOnROME, "memit": RECTOnMEMIT}[base]
        if type(self) is not RECT and type(self) is not chosen:  # RECTOnROME / RECTOnMEMIT named directly
            raise ValueError(f"{type(self).__name__} cannot take base {base!r}: use RECT with base {base!r}")
        self.__class__ = chosen  # the base editor's RECT subclass,
        self.base, self.keep_fraction = base, keep_fraction  # whose MRO puts the base editor after RECT:
        super().__init__(
            lm,
            sites=sites,
            fact_token=fact_token,
            stats=stats,
            target=target,
            template_lengths=template_lengths,
            template_seed=template_seed,
            **rome_only,
            **kwargs,
        )  # fmt: skip  (so this is ROME's or MEMIT's __init__)

    # An instance of RECT is always a RECTOnROME or RECTOnMEMIT (above), where super() is the base editor: these two
    # only make the class itself concrete, for jsonargparse to instantiate it.
    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return super().edited_parameters(requests)

    def apply_edits(self, requests: list[EditRequest]) -> None:
        super().apply_edits(requests)

    def written_update(self, delta: Tensor, W: Tensor) -> Tensor:
        """ΔW ⊙ M: what the base editor computed, sparsified before it is written."""
        return rect_update(delta, W, self.keep_fraction)

    def low_rank_edits(self, groups: list[list[EditRequest]]) -> None:
        return None  # a sparsified update is not low rank: cases are edited one at a time


class RECTOnROME(RECT, ROME):
    """RECT on ROME: each request's rank-one ΔW is sparsified before it is written."""


class RECTOnMEMIT(RECT, MEMIT):
    """RECT on MEMIT: each layer's ΔW is sparsified before it is written."""
