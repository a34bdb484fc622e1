"""MEMIT (Meng et al., 2023, "Mass-Editing Memory in a Transformer"): a batch of edits spread over several layers.

For a batch of n requests (docs/editors/memit.md#memit):

1. z_i = h⁰_i + δ_i, the residual stream at the fact token of the last edited layer L that makes the model say
   ``target_new``; Z = [z_1 … z_n] (d, n);
2. for the edited layers l_1 < … < l_m in order (index i), on the model as edited so far: keys K_l (d_in, n),
   current residuals H (d, n) at L, R_l = (Z − H)/(m − i), and ΔW_l solving ΔW_l (λC_l + K_l K_lᵀ) = R_l K_lᵀ
   (paper eq. 14), written at once so the next layer sees it.
"""

from __future__ import annotations

from torch import Tensor

from lightning_edit.cases import EditRequest
from lightning_edit.editors.context_templates import (
    MEMIT_TEMPLATE_LENGTHS,
    WORD_SEED_PROMPTS,
    bare_and_prefixed,
)
from lightning_edit.editors.locate import compute_keys, fact_token_activations
from lightning_edit.editors.locate_then_edit import LocateThenEdit
from lightning_edit.editors.solvers import CovarianceFactor, memit_factors, memit_layer_residual
from lightning_edit.editors.target_vector import TargetOptimization
from lightning_edit.models.placement import add_to_weight, whole
from lightning_edit.models.registry import from_linear, to_linear
from lightning_edit.models.row_updates import LowRankUpdate, RowUpdates


class MEMIT(LocateThenEdit):
    """Mass-Editing Memory in a Transformer: the MLP output projections of several layers.

    Args:
        layers: the edited layers (the model preset sets them: gpt2-xl 13-17, GPT-J 3-8, LLaMA/Qwen 4-8).
        mom2_update_weight: λ, the weight of the preserved keys' covariance C in ``ΔW (λC + K Kᵀ) = R Kᵀ`` (gpt2-xl
            20000, others 15000; the model preset sets it; AlphaEdit, which inherits it, does not use it).
        ``*args``, ``**kwargs``: lm, fact_token, stats, target (MEMIT: clamp_norm_factor 0.75), template_lengths
            (MEMIT: [[10, 5]]), template_seed, update_filter (:class:`LocateThenEdit`) and the EditorModule
            arguments.
    """

    default_target = TargetOptimization(clamp_norm_factor=0.75)
    default_template_lengths = MEMIT_TEMPLATE_LENGTHS

    def __init__(self, *args, layers: list[int] = [4, 5, 6, 7, 8], mom2_update_weight: float = 15000.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.layers = sorted(layers)
        self.mom2_update_weight = mom2_update_weight
        self._covariances: dict[int, CovarianceFactor] = {}
        self.weight_names = [f"{self.arch.layer_name(self.arch.spec.mlp_out, layer)}.weight" for layer in self.layers]

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return self.weight_names

    def prepare_statistics(self) -> None:
        """Load (or compute) the key statistics of every edited layer, from the unedited model."""
        if not self._covariances:
            moments = self.stats.second_moments(self.model, self.tokenizer, self.layers, self.shows_progress)
            self._covariances = {layer: CovarianceFactor(moments[layer].mean()) for layer in self.layers}

    def compute_statistics_shard(self, index: int, count: int) -> None:
        self.stats.compute_shard(self.model, self.tokenizer, self.layers, index, count, self.shows_progress)

    def solve(self, layer: int, K: Tensor, R: Tensor) -> LowRankUpdate:
        """ΔW_l = U Vᵀ (d_out, d_in) for keys K (d_in, n) and residuals R (d_out, n)."""
        return memit_factors(self._covariances[layer], K, R, self.mom2_update_weight)

    def context_templates(self) -> list[str]:
        """``["{}", "<text>. {}", ...]``, the texts sampled from "The", "Therefore", "Because", "I", "You" in turn, as
        the reference code does (:data:`~lightning_edit.editors.context_templates.WORD_SEED_PROMPTS`); generated
        once."""
        return self.templates.get(
            self.model, self.tokenizer, self.template_lengths, self.template_seed, WORD_SEED_PROMPTS
        )

    def after_batch(self, requests: list[EditRequest], templates: list[list[str]]) -> None:
        """Bookkeeping once a batch is written (AlphaEdit accumulates its keys here)."""

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Write the requests as one batch (the sequential protocol calls this once per edit batch)."""

        def write(owner: int, layer: int, update: LowRankUpdate) -> None:
            module = self.arch.module(self.arch.spec.mlp_out, layer)
            layout = self.arch.weight_layout(module)
            delta = self.written_update(update.matrix(), to_linear(whole(module), layout))  # (d_out, d_in)
            add_to_weight(module, from_linear(delta.to(module.weight.dtype), layout))

        templates = self.spread(requests, None, write)
        self.after_batch(requests, templates)

    def low_rank_edits(self, groups: list[list[EditRequest]]) -> RowUpdates | None:
        """Every group's update of the unedited model, each group a batch of its own, computed together: the keys of
        a group at a later layer see that group's updates of the earlier ones (row by row)."""
        if self.update_filter is not None:
            return None  # a filtered update is not low rank: cases are edited one at a time
        rows = RowUpdates(self.model, len(groups))

        def write(owner: int, layer: int, update: LowRankUpdate) -> None:
            rows.add(owner, self.arch.layer_name(self.arch.spec.mlp_out, layer), update)

        with rows:
            owners = [owner for owner, group in enumerate(groups) for _ in group]
            self.spread([request for group in groups for request in group], owners, write)
        return rows

    def spread(self, requests: list[EditRequest], owners: list[int] | None, write) -> list[list[str]]:
        """MEMIT's Algorithm 1 for the requests of each owner, all owners at once; returns the key templates.

        The targets Z come from one batched optimisation (requests do not interact in it). Then for each edited
        layer in order: keys K and residuals H of every request on the model as written so far (with ``owners``,
        one per request, each request's rows see its owner's row updates; None: one owner, 0, and no routing),
        R = (Z − H)/(m − i), and each owner's ΔW from its own columns, passed to ``write(owner, layer, update)``
        before the next layer.
        """
        self.prepare_statistics()
        flat = self.context_templates()
        # k̄ = ½·k(bare) + ½·mean(k(prefixed)) (docs/editors/locate-then-edit.md#keys)
        templates = bare_and_prefixed(flat)
        last = self.layers[-1]
        vectors = self.target_vectors(requests, last, self.arch.spec.blocks, flat)
        Z = vectors.targets.double().T  # (d, n)
        owner_of = owners if owners is not None else [0] * len(requests)
        for i, layer in enumerate(self.layers):
            K = compute_keys(
                self.model, self.tokenizer, requests, layer, templates, self.fact_token, owners=owners
            ).double().T  # (d_in, n)  # fmt: skip
            H = fact_token_activations(
                self.model, self.tokenizer, requests, self.arch.spec.blocks, last, ["{}"], self.fact_token,
                owners=owners,
            ).double().T  # (d, n) residual at the last edited layer, on the model edited so far  # fmt: skip
            R = memit_layer_residual(Z, H, len(self.layers) - i)  # (d, n)
            for owner in dict.fromkeys(owner_of):
                columns = [j for j, o in enumerate(owner_of) if o == owner]
                write(owner, layer, self.solve(layer, K[:, columns], R[:, columns]))
        return templates
