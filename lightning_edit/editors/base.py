"""The editor base class: owns the language model and runs the validate loop under an edit protocol.

A method subclasses :class:`EditorModule` and says which parameters an edit touches (:meth:`edited_parameters`)
and how it changes them (:meth:`apply_edits`). The base class does the rest of a run::

    validation_step(cases):
        reference = scorer.reference(cases)          # unedited model, for agreement (locality) metrics
        for the edit groups of the protocol:         # single: each case on its own
            snapshot the edited parameters; apply_edits(requests)
            scores = scorer.score(cases)             # every prompt group of every case
            restore the snapshot                     # bit-identical weights
            metric.update(case ids, prompt ids, scores)
    on_validation_epoch_end: metric.compute() (synced over processes) -> log + self.results

Protocols: ``single`` (apply one case, score, restore). ``batch`` and ``sequential`` come with the
locate-then-edit editors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, Literal

import torch
from lightning import LightningModule
from torch import nn

from lightning_edit.data.schema import EditCase, EditRequest
from lightning_edit.evaluation import CaseScorer, Scores, ScoringConfig
from lightning_edit.metrics import CONVENTIONS, PromptMean
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.snapshot import WeightSnapshot


class EditorModule(LightningModule, ABC):
    """Base of every editing method.

    Args:
        lm: the causal language model to edit (path, dtype, ...).
        protocol: how edits meet evaluation. ``single``: each case is applied to the unedited model, scored, and
            the weights restored bit-identically.
        scoring: how evaluation prompts are scored (batch size, chat template, generation settings).
    """

    #: False for methods that never change weights (the baseline, in-context editors): cases are then scored together.
    edits_weights: bool = True

    def __init__(self, lm: ModelSource, protocol: Literal["single"] = "single", scoring: ScoringConfig | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.model, self.tokenizer = load_model_and_tokenizer(lm)
        self.model.requires_grad_(False)
        self.protocol = protocol
        self.scoring = scoring or ScoringConfig()
        self.metrics = nn.ModuleDict()
        self.metric_kinds: dict[str, str] = {}
        self.results: dict[str, dict[str, Any]] = {}

    @abstractmethod
    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        """Names of the parameters :meth:`apply_edits` may change for these requests (they are snapshotted)."""

    @abstractmethod
    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Write the requests into ``self.model`` in place."""

    @contextmanager
    def edits_applied(self, requests: list[EditRequest]) -> Iterator[None]:
        """The requests applied for the duration of the block; the edited parameters are restored afterwards."""
        names = self.edited_parameters(requests) if self.edits_weights else []
        with WeightSnapshot(self.model, names) if names else nullcontext():
            self.apply_edits(requests)
            yield

    def transfer_batch_to_device(self, batch: list[EditCase], device: torch.device, dataloader_idx: int) -> list:
        return batch  # edit cases hold text; the scorer tokenizes onto the model's device

    def validation_step(self, batch: list[EditCase], batch_idx: int) -> None:
        scorer = CaseScorer(self.model, self.tokenizer, self.scoring)
        reference = scorer.reference(batch)
        edit_groups = [[case] for case in batch] if self.edits_weights else [batch]
        for cases in edit_groups:
            with self.edits_applied([request for case in cases for request in case.requests]):
                scores = scorer.score(cases, reference)
            self._update_metrics(scores)

    def test_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def _update_metrics(self, scores: Scores) -> None:
        for name, (kind, rows) in scores.items():
            if name not in self.metrics:
                self.metrics[name] = PromptMean(CONVENTIONS[kind]).to(self.device)
                self.metric_kinds[name] = kind
            if rows:
                case_ids, prompt_ids, values = zip(*rows)
                self.metrics[name].update(torch.tensor(case_ids), torch.tensor(prompt_ids), torch.tensor(values))

    def on_validation_epoch_end(self) -> None:
        self.results = {}
        for name, metric in self.metrics.items():
            result = metric.compute()
            self.results[name] = {**result, "kind": self.metric_kinds[name], "convention": metric.convention}
            for aggregation in ("macro", "micro"):
                self.log(f"val/{name}_{aggregation}", float(result[aggregation]))
            metric.reset()

    def on_test_epoch_end(self) -> None:
        self.on_validation_epoch_end()
