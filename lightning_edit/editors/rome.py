"""ROME (Meng et al., 2022, "Locating and Editing Factual Associations in GPT"): one rank-one update per fact.

For each request, on the model as edited so far (docs/editors/rome.md#rome):

1. k̄ = mean over context templates of the key (input of the MLP output projection W of layer l) at the fact token;
2. v* = m⁰ + δ, the MLP output at the fact token that makes the model say ``target_new``;
3. ΔW = (v* − b − W k₀) (C⁻¹k̄)ᵀ / ((C⁻¹k̄)ᵀ k₀), so that (W + ΔW) k₀ + b = v* (paper eq. 2; C = I without
   ``mom2_adjustment``).

``key``: ``original`` uses k̄ for the direction and the bare-prompt key k₀ for the constraint, as the reference
code does; ``prompt`` (r-ROME) uses k₀ throughout and ``prefix`` (r-ROME) k̄ throughout, with the target moved
by the same δ. r-ROME's consistent key avoids the collapse of sequential ROME (Gupta et al., 2024).
"""

from __future__ import annotations

from typing import Literal

from lightning_edit.cases import EditRequest
from lightning_edit.editors.locate import compute_keys
from lightning_edit.editors.locate_then_edit import LocateThenEdit
from lightning_edit.editors.solvers import CovarianceFactor, rome_factors
from lightning_edit.models.placement import add_to_weight, whole
from lightning_edit.models.registry import from_linear, to_linear
from lightning_edit.models.row_updates import LowRankUpdate, RowUpdates


class ROME(LocateThenEdit):
    """Rank-One Model Editing of the MLP output projection of one layer.

    Args:
        layer: the edited layer (the model preset sets it: gpt2-xl 17; GPT-J, LLaMA, Qwen 5).
        mom2_adjustment: use the key statistics C (paper: true; EasyEdit's configs: false, i.e. C = I); ``stats``
            names their corpus.
        key: ``original`` (k̄ direction, k₀ constraint), or r-ROME's consistent ``prompt`` or ``prefix`` key.
        ``*args``, ``**kwargs``: lm, fact_token, stats, target (ROME's defaults), template_lengths (ROME: [[5, 10],
            [10, 10]]), template_seed, update_filter (:class:`LocateThenEdit`) and the EditorModule arguments.
    """

    def __init__(
        self,
        *args,
        layer: int = 5,
        mom2_adjustment: bool = True,
        key: Literal["original", "prompt", "prefix"] = "original",
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.layer = layer
        self.mom2_adjustment = mom2_adjustment
        self.key = key
        self.weight_name = f"{self.arch.layer_name(self.arch.spec.mlp_out, self.layer)}.weight"
        self._covariance: CovarianceFactor | None = None

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return [self.weight_name]

    def prepare_statistics(self) -> None:
        self.covariance()

    def compute_statistics_shard(self, index: int, count: int) -> None:
        if self.mom2_adjustment:
            self.stats.compute_shard(self.model, self.tokenizer, [self.layer], index, count, self.shows_progress)

    def covariance(self) -> CovarianceFactor | None:
        """C of the edited layer (Cholesky-factored once), from the unedited model; None without mom2."""
        if self.mom2_adjustment and self._covariance is None:
            moments = self.stats.second_moments(self.model, self.tokenizer, [self.layer], self.shows_progress)
            self._covariance = CovarianceFactor(moments[self.layer].mean())
        return self._covariance

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """ROME edits one fact at a time, each on the model as edited by the previous ones."""
        covariance = self.covariance()  # before any weight changes: statistics describe the unedited model
        for request in requests:
            (update,) = self.updates([request], covariance)
            module = self.arch.module(self.arch.spec.mlp_out, self.layer)
            layout = self.arch.weight_layout(module)
            delta = self.written_update(update.matrix(), to_linear(whole(module), layout))
            add_to_weight(module, from_linear(delta.to(module.weight.dtype), layout))

    def low_rank_edits(self, groups: list[list[EditRequest]]) -> RowUpdates | None:
        """Every group's rank-one update of the unedited model, computed together (cases of one request each)."""
        if self.update_filter is not None or any(len(group) != 1 for group in groups):
            return None  # not low rank, or a case's later requests would need the model its earlier ones edited
        rows = RowUpdates(self.model, len(groups))
        name = self.arch.layer_name(self.arch.spec.mlp_out, self.layer)
        for owner, update in enumerate(self.updates([group[0] for group in groups], self.covariance())):
            rows.add(owner, name, update)
        return rows

    def updates(self, requests: list[EditRequest], covariance: CovarianceFactor | None) -> list[LowRankUpdate]:
        """Each request's ΔW = U Vᵀ (eq. 2) on the model as it is now, independently of the others (batched)."""
        templates = self.templates.get(self.model, self.tokenizer, self.template_lengths, self.template_seed)
        module = self.arch.module(self.arch.spec.mlp_out, self.layer)
        W = to_linear(whole(module), self.arch.weight_layout(module))  # (d_out, d_in)
        bias = whole(module, "bias").double() if module.bias is not None else 0.0
        k_bar = compute_keys(self.model, self.tokenizer, requests, self.layer, templates, self.fact_token)
        k0 = compute_keys(self.model, self.tokenizer, requests, self.layer, ["{}"], self.fact_token)
        vectors = self.target_vectors(requests, self.layer, self.arch.spec.mlp_out, templates)
        updates = []
        for i in range(len(requests)):
            v_star = vectors.targets[i].double() - bias  # (d_out,) the projection's target without its bias
            if self.key == "original":
                updates.append(rome_factors(covariance, k_bar[i], v_star, W, k0=k0[i]))
            elif self.key == "prompt":
                updates.append(rome_factors(covariance, k0[i], v_star, W))
            else:  # prefix: the prefix-averaged output moved by the same δ
                moved = W.double() @ k_bar[i].double() + vectors.deltas[i].double()
                updates.append(rome_factors(covariance, k_bar[i], moved, W))
        return updates
