"""AlphaEdit (Fang et al., 2025, "AlphaEdit: Null-Space Constrained Knowledge Editing for Language Models").

MEMIT's targets, keys and residual spreading, with a different solve per layer (docs/editors/alphaedit.md#alphaedit):
with P = Û Ûᵀ the projector onto the null space of the preserved keys' covariance C (eigenvalues < τ) and C_p = Σ K'K'ᵀ
over the batches edited before in the same sequence,

    ΔWᵀ = (P (K Kᵀ + C_p) + α I)⁻¹ P K Rᵀ,   solved in the r×r basis Û,

so ΔW = ΔW P: the update leaves the preserved keys' outputs unchanged. After each batch its keys, recomputed on
the edited model, are added to C_p. C_p belongs to one edit sequence: it is cleared whenever the protocol
restores the weights (``single``, ``batch``, and the end of a ``sequential`` run).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from lightning_edit.cases import EditRequest
from lightning_edit.editors.locate import compute_keys
from lightning_edit.editors.memit import MEMIT
from lightning_edit.editors.solvers import EditedKeyCache, alphaedit_factors, nullspace_projector
from lightning_edit.models.row_updates import LowRankUpdate
from lightning_edit.stats.projector import load_or_compute_projector


class AlphaEdit(MEMIT):
    """Null-space constrained MEMIT.

    Args:
        nullspace_threshold: τ, eigenvalues of C below it span the null space (2e-2).
        l2: α, the ridge of the solve (10 in the AlphaEdit repo; 1 in some EasyEdit configs).
        **kwargs: the MEMIT arguments (layers, fact_token, stats, target, ...) and the EditorModule ones;
            MEMIT's ``mom2_update_weight`` is unused by AlphaEdit's solve.
    """

    def __init__(self, *args, nullspace_threshold: float = 2e-2, l2: float = 10.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.nullspace_threshold = nullspace_threshold
        self.l2 = l2
        self._bases: dict[int, Tensor] = {}
        self._edited_keys: dict[int, EditedKeyCache] = {}

    def prepare_statistics(self) -> None:
        """Null-space bases Û of every edited layer (cached on disk with the statistics they come from)."""
        if not self._bases:
            moments = self.stats.second_moments(self.model, self.tokenizer, self.layers, self.shows_progress)
            for layer in self.layers:
                threshold = self.nullspace_threshold
                cache = self.stats.cache_dir
                U = load_or_compute_projector(moments[layer], threshold, cache_dir=cache, compute=nullspace_projector)
                self._bases[layer] = U
                self._edited_keys[layer] = EditedKeyCache(U.shape[0])

    def solve(self, layer: int, K: Tensor, R: Tensor) -> LowRankUpdate:
        C_prev = self._edited_keys[layer].matrix if self._edited_keys[layer].n_keys else None
        return alphaedit_factors(K, R, U=self._bases[layer], C_prev=C_prev, alpha=self.l2)

    def after_batch(self, requests: list[EditRequest], templates: list[list[str]]) -> None:
        for layer in self.layers:  # keys of this batch, recomputed on the edited model
            K = compute_keys(self.model, self.tokenizer, requests, layer, templates, self.fact_token).double().T
            self._edited_keys[layer].update(K)

    def on_edits_restored(self) -> None:
        for cache in self._edited_keys.values():
            cache.reset()

    def stream_state(self) -> dict[str, Any]:
        """MEMIT's, and C_p of every edited layer with its number of keys."""
        state = super().stream_state()
        for layer, cache in self._edited_keys.items():
            state |= {f"edited_keys.{layer}": cache.matrix, f"edited_keys.{layer}.n_keys": cache.n_keys}
        return state

    def load_stream_state(self, state: dict[str, Any]) -> None:
        super().load_stream_state(state)
        for layer, cache in self._edited_keys.items():
            cache.matrix.copy_(state[f"edited_keys.{layer}"])
            cache.n_keys = state[f"edited_keys.{layer}.n_keys"]
