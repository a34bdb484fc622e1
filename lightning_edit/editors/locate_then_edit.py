"""What the locate-then-edit editors share: their common arguments, the target vectors and the written update.

ROME, MEMIT and AlphaEdit (and RECT, a filter of their update) read keys at the fact token of context-templated
prompts, optimise target vectors there (:mod:`~lightning_edit.editors.target_vector`) and write a closed-form update
of MLP output projections (docs/editors/locate-then-edit.md#locate-then-edit-machinery).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from lightning_edit.cases import EditRequest
from lightning_edit.editors.base import EditorModule, require
from lightning_edit.editors.context_templates import ROME_TEMPLATE_LENGTHS, ContextTemplateCache, Templates
from lightning_edit.editors.locate import DEFAULT_FACT_TOKEN, FactToken
from lightning_edit.editors.solvers import UpdateFilter
from lightning_edit.editors.target_vector import TargetOptimization, TargetVectors, optimize_target_vectors
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.stats.config import KeyStatistics


class LocateThenEdit(EditorModule):
    """Base of the locate-then-edit editors.

    Args:
        lm: the causal language model to edit.
        fact_token: where keys are read and δ injected (``subject_last`` in every reference config).
        stats: the corpus of the key statistics.
        target: the v*/z optimisation hyper-parameters; None: the editor's :attr:`default_target`.
        template_lengths: context templates as (total tokens, count) pairs; None: the editor's
            :attr:`default_template_lengths`.
        template_seed: seed of the context-template generation.
        update_filter: what to write instead of each ΔW (RECT: its largest relative changes); None: ΔW.
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir, ... (see EditorModule).
    """

    locates_subject = True  # keys are read at the subject (fact_token)
    edits_split_models = True  # they read weights whole and write them where they are (docs/sharding.md)
    #: the v*/z hyper-parameters when none are given (ROME's; MEMIT's clamp is 0.75)
    default_target: ClassVar[TargetOptimization] = TargetOptimization()
    #: the context templates when none are given (ROME: [[5, 10], [10, 10]])
    default_template_lengths: ClassVar[tuple[tuple[int, int], ...]] = ROME_TEMPLATE_LENGTHS

    def __init__(
        self,
        lm: ModelSource,
        fact_token: FactToken = DEFAULT_FACT_TOKEN,
        stats: KeyStatistics | None = None,
        target: TargetOptimization | None = None,
        template_lengths: list[tuple[int, int]] | None = None,
        template_seed: int = 0,
        update_filter: UpdateFilter | None = None,
        **kwargs,
    ):
        super().__init__(lm, **kwargs)
        self.fact_token = fact_token
        self.stats = stats or KeyStatistics()
        self.target = target or self.default_target
        self.template_lengths = tuple(map(tuple, template_lengths or self.default_template_lengths))
        self.template_seed = template_seed
        self.update_filter = update_filter
        self.templates = ContextTemplateCache()
        self.arch = resolve_architecture(self.model)
        loss_layer, last = self.target.v_loss_layer, self.arch.num_layers - 1
        meaning = f"the layer whose logits the loss reads, at or after the edited layer, at most the last, {last}"
        require(loss_layer is None or 0 <= loss_layer <= last, "target.v_loss_layer", loss_layer, meaning)

    def stream_state(self) -> dict[str, Any]:
        """The context templates, generated from the model at the stream's first edit (a resumed stream's model
        already holds edits)."""
        return {"context_templates": self.templates.state(self.model)}

    def load_stream_state(self, state: dict[str, Any]) -> None:
        self.templates.load_state(self.model, self.tokenizer, state["context_templates"])

    def written_update(self, delta: Tensor, W: Tensor) -> Tensor:
        """What is written for ΔW (d_out, d_in) on W (d_out, d_in): ΔW, or what ``update_filter`` makes of it."""
        return delta if self.update_filter is None else self.update_filter(delta, W)

    def target_vectors(
        self, requests: list[EditRequest], layer: int, module: str, templates: Templates
    ) -> TargetVectors:
        """Each request's target vector at the output of ``module`` at ``layer`` (ROME's v*, MEMIT's z), optimised
        under the memory budget (whose size the run's memory record keeps)."""
        vectors = optimize_target_vectors(
            self.model, self.tokenizer, requests, layer, module, templates, self.target, self.fact_token
        )
        self.peak_memory.note_budget(vectors.budget)
        return vectors
