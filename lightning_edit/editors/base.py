"""The editor base class: owns the language model and runs the validate loop under an edit protocol.

A method subclasses :class:`EditorModule` and says which parameters an edit touches (:meth:`edited_parameters`)
and how it changes them (:meth:`apply_edits`). The base class runs the protocol:

- ``single``: each case is applied to the unedited model, scored, and the weights restored (bit-identical);
- ``batch``: the cases of one dataloader batch (``data.batch_size``) are applied together, each is scored on
  that model, then the weights are restored;
- ``sequential``: before evaluation, every case is applied cumulatively, ``edit_batch_size`` cases per editor
  call, in dataset order; all cases are then scored on the final model (the WISE/AlphaEdit "T edits, then
  evaluate" protocol), and, for each n in ``eval_at``, the first n cases are also scored right after the n-th
  edit (reported as ``<metric>@<n>``, the retention curve). The weights are restored after the run.

``fit`` applies every case of the benchmark (as the sequential protocol does, ``edit_batch_size`` per call) in
``on_fit_start`` and saves the edited model (safetensors) with ``edits.json``, the record of the edits it holds, to
``output_dir``; no training step runs. Trainable editors (MEND) override this with an ordinary training loop.

Locality (``agreement``) metrics, BAKE's pre-edit filter and the ``<metric>_pre`` reports use the model before any
edit of the run. With ``in_context``, each case's in-context text (built before any edit) is put before its
evaluation prompts, on top of the weight edit. A benchmark may add metrics derived from the others' aggregates
(:meth:`~lightning_edit.data.base.EditDataModule.derived_metrics`). Scores feed
:class:`~lightning_edit.metrics.PromptMean` metrics keyed by case id, computed (and synced over processes) at the
end of the epoch into :attr:`EditorModule.results` (aggregates) and :attr:`EditorModule.case_scores` (per case).

Several processes (``--trainer.devices N``, any strategy Lightning launches) split the dataloader's batches of
cases between them and give exactly the numbers of one process: under ``single`` and ``batch`` each process edits
its own copy of the model for its own batches; under ``sequential`` every process applies every edit (the same
deterministic computation) and then takes the weights of process 0, so all hold one edited model, and scores its
own batches. A case the distributed sampler repeats is counted once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from lightning import LightningModule
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from lightning_edit.data.base import EditDataModule, loader_cases
from lightning_edit.data.schema import EditCase, EditRequest
from lightning_edit.editors.in_context import InContext, InContextPrompts
from lightning_edit.evaluation import CaseScorer, Reference, Scores, ScoringConfig
from lightning_edit.metrics import CONVENTIONS, PromptMean
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.models.tokenization import encode_prompt_target
from lightning_edit.results import save_edited_model


class EditorModule(LightningModule, ABC):
    """Base of every editing method.

    Args:
        lm: the causal language model to edit (path, dtype, ...).
        protocol: how edits meet evaluation: ``single`` (each case alone), ``batch`` (the cases of a dataloader
            batch together) or ``sequential`` (all cases cumulatively, then evaluate); see the module docstring.
        edit_batch_size: sequential protocol: cases applied per editor call.
        eval_at: sequential protocol: also score the first n cases right after the n-th edit, for each n.
        scoring: how evaluation prompts are scored (batch size, chat template, generation settings).
        output_dir: where ``fit`` saves the edited model; default ``<log dir>/edited_model``.
        in_context: also write the new fact (and retrieved demonstrations) before every evaluation prompt, on top
            of the weight edit (IKE/PROMPT prompting; :mod:`lightning_edit.editors.in_context`).
    """

    #: False for methods that never change weights (the baseline, in-context editors): cases are then scored together.
    edits_weights: bool = True

    def __init__(
        self,
        lm: ModelSource,
        protocol: Literal["single", "batch", "sequential"] = "single",
        edit_batch_size: int = 1,
        eval_at: list[int] | None = None,
        scoring: ScoringConfig | None = None,
        output_dir: str | None = None,
        in_context: InContext | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        if eval_at and protocol != "sequential":
            raise ValueError(f"eval_at={eval_at} needs protocol='sequential', not {protocol!r}")
        self.model, self.tokenizer = load_model_and_tokenizer(lm)
        self.model.requires_grad_(False)
        self.protocol, self.edit_batch_size, self.eval_at = protocol, edit_batch_size, sorted(eval_at or [])
        self.scoring = scoring or ScoringConfig()
        self.output_dir = output_dir
        self.in_context = in_context
        self._contexts: dict[int, str] = {}  # case id -> in-context text, built before any edit
        self.metrics = nn.ModuleDict()
        self.metric_kinds: dict[str, str] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.case_scores: dict[str, dict[int, float]] = {}  # metric -> case id -> mean over the case's prompts
        self._sequential: tuple[WeightSnapshot, Reference] | None = None  # (snapshot, pre-edit reference)

    @abstractmethod
    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        """Names of the parameters :meth:`apply_edits` may change for these requests (they are snapshotted)."""

    @abstractmethod
    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Write the requests into ``self.model`` in place."""

    def check_cases(self, cases: list[EditCase]) -> None:
        """Raise, naming the case, if a request cannot be edited; called on every case before any weight changes."""
        for case in cases:
            for request in case.requests:
                if not request.subject.strip():
                    raise ValueError(f"{case.source or case.case_id}: empty subject")
                try:
                    encode_prompt_target(self.tokenizer, request.filled_prompt, request.target_new)
                except ValueError as error:
                    raise ValueError(f"{case.source or case.case_id}: target_new: {error}") from None

    def on_edits_restored(self) -> None:
        """Called after the protocol restored the weights: forget state that belongs to the undone edits."""

    def prepare_statistics(self) -> None:
        """Load or compute what edits need from the unedited model (key statistics); called before any edit."""

    def compute_statistics_shard(self, index: int, count: int) -> None:
        """Cache shard ``index`` of ``count`` of what :meth:`prepare_statistics` computes, for several processes."""

    def _prepare(self) -> None:
        """:meth:`prepare_statistics`; with several processes, each first caches its share of the statistics pass and,
        once all have, merges the shards instead of running the whole pass (a cache shared by the processes)."""
        if self.trainer.world_size > 1:
            self.compute_statistics_shard(self.trainer.global_rank, self.trainer.world_size)
            self.trainer.strategy.barrier("key statistics")
        self.prepare_statistics()

    @contextmanager
    def edits_applied(self, requests: list[EditRequest]) -> Iterator[None]:
        """The requests applied for the duration of the block; the edited parameters are restored afterwards."""
        names = self.edited_parameters(requests) if self.edits_weights else []
        try:
            with WeightSnapshot(self.model, names) if names else nullcontext():
                self.apply_edits(requests)
                yield
        finally:
            self.on_edits_restored()

    def transfer_batch_to_device(self, batch: list[EditCase], device: torch.device, dataloader_idx: int) -> list:
        return batch  # edit cases hold text; the scorer tokenizes onto the model's device

    @staticmethod
    def _requests(cases: list[EditCase]) -> list[EditRequest]:
        return [request for case in cases for request in case.requests]

    def _scorer(self) -> CaseScorer:
        return CaseScorer(self.model, self.tokenizer, self.scoring)

    @property
    def shows_progress(self) -> bool:
        """Whether long loops show a progress bar: on process 0, when the trainer shows its own (the default)."""
        if self._trainer is None:
            return True
        return self.trainer.is_global_zero and self.trainer.progress_bar_callback is not None

    def _progress(self, total: int, description: str) -> tqdm:
        return tqdm(total=total, desc=description, unit="case", disable=not self.shows_progress, leave=False)

    def _apply_in_order(self, cases: list[EditCase], description: str) -> Iterator[int]:
        """Apply ``cases`` cumulatively, ``edit_batch_size`` per editor call; yields the number applied so far."""
        with self._progress(len(cases), description) as bar:
            for start in range(0, len(cases), self.edit_batch_size):
                chunk = cases[start : start + self.edit_batch_size]
                self.apply_edits(self._requests(chunk))
                bar.update(len(chunk))
                yield start + len(chunk)

    def _share_weights(self, names: list[str]) -> None:
        """Give every process the values of ``names`` on process 0 (a no-op on one process)."""
        if self.trainer.world_size > 1:
            for name in names:
                parameter = self.model.get_parameter(name)
                parameter.data.copy_(self.trainer.strategy.broadcast(parameter.data, src=0))

    def _apply_sequentially(self, cases: list[EditCase], local: list[EditCase]) -> None:
        """Sequential protocol: apply every case cumulatively, scoring the prefixes in ``eval_at``.

        ``local`` are the cases this process scores; every process applies all of ``cases``.
        """
        scorer = self._scorer()
        reference = scorer.reference(local)
        self._update_metrics(scorer.score_unedited(local, reference, self.scoring.pre_edit))
        names = self.edited_parameters(self._requests(cases))
        self._sequential = (WeightSnapshot(self.model, names), reference)
        positions = {case.case_id: position for position, case in enumerate(cases)}
        previous = 0
        for applied in self._apply_in_order(cases, "sequential edits"):
            for n in self.eval_at:
                if previous < n <= applied:
                    self._share_weights(names)
                    prefix = [case for case in local if positions[case.case_id] < n]
                    self._update_metrics(scorer.score(prefix, reference, self._contexts), suffix=f"@{n}")
            previous = applied
        self._share_weights(names)

    def on_fit_start(self) -> None:
        """Closed-form editing: apply every training case, save the edited model, and end the fit."""
        cases = loader_cases(self.trainer.datamodule.train_dataloader())  # every case, on every process
        self.check_cases(cases)
        self._prepare()
        for _ in self._apply_in_order(cases, "edits"):
            pass
        if self.trainer.is_global_zero:
            log_dir = Path(self.trainer.log_dir or self.trainer.default_root_dir)
            directory = Path(self.output_dir) if self.output_dir else log_dir / "edited_model"
            save_edited_model(self.model, self.tokenizer, directory, cases, type(self).__name__, self.hparams)
        self.trainer.should_stop = True
        self.trainer.num_sanity_val_steps = 0  # nothing to sanity-check: validation is its own run

    def training_step(self, batch: list[EditCase], batch_idx: int) -> None:
        raise RuntimeError(f"{type(self).__name__} edits in closed form in on_fit_start; it has no training step")

    def configure_optimizers(self) -> None:
        return None  # nothing is trained

    def _start(self, loader: DataLoader) -> None:
        cases = loader_cases(loader)
        self.check_cases(cases)  # every case, on every process, before any weight changes
        self._prepare()
        if self.in_context is not None:  # every case, so that a case the pool cannot serve stops every process
            self._contexts = InContextPrompts(self.in_context, self.model, self.tokenizer).contexts(cases)
        if self.protocol == "sequential":
            self._apply_sequentially(cases, loader_cases(loader, local=True))

    def on_validation_start(self) -> None:
        self._start(self.trainer.val_dataloaders)

    def on_test_start(self) -> None:
        self._start(self.trainer.test_dataloaders)

    def validation_step(self, batch: list[EditCase], batch_idx: int) -> None:
        scorer = self._scorer()
        if self._sequential is not None:
            self._update_metrics(scorer.score(batch, self._sequential[1], self._contexts))
            return
        reference = scorer.reference(batch)
        self._update_metrics(scorer.score_unedited(batch, reference, self.scoring.pre_edit))
        if self.protocol == "single" and self.edits_weights:
            edit_groups = [[case] for case in batch]
        else:
            edit_groups = [batch]
        for cases in edit_groups:
            with self.edits_applied(self._requests(cases)):
                scores = scorer.score(cases, reference, self._contexts)
            self._update_metrics(scores)

    def test_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def _update_metrics(self, scores: Scores, suffix: str = "") -> None:
        for name, (kind, rows) in scores.items():
            case_ids, prompt_ids, values = zip(*rows) if rows else ((), (), ())
            self._metric(name + suffix, kind).update(
                torch.tensor(case_ids, dtype=torch.long),
                torch.tensor(prompt_ids, dtype=torch.long),
                torch.tensor(values, dtype=torch.double),
            )

    def _metric(self, name: str, kind: str) -> PromptMean:
        if name not in self.metrics:
            self.metrics[name] = PromptMean(CONVENTIONS[kind]).to(self.device)
            self.metric_kinds[name] = kind
        return self.metrics[name]

    def _metric_names(self) -> list[str]:
        """The metrics of every process, in one order on all of them (a process may not have scored some)."""
        names = list(self.metric_kinds.items())
        if self.trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            gathered: list[list[tuple[str, str]]] = [[] for _ in range(dist.get_world_size())]
            dist.all_gather_object(gathered, names)
            names = list(dict.fromkeys(pair for rank_names in gathered for pair in rank_names))
        for name, kind in names:
            if name not in self.metrics:  # give it an empty update: the states of every process then share dtypes
                self._update_metrics({name: (kind, [])})
        return sorted((name for name, _ in names), key=lambda name: ("@" in name, name.endswith("_pre")))

    def on_validation_epoch_end(self) -> None:
        self.results, self.case_scores = {}, {}
        for name in self._metric_names():
            metric = self.metrics[name]
            result = dict(metric.compute())
            self.case_scores[name] = result.pop("case_means")
            self.results[name] = {**result, "kind": self.metric_kinds[name], "convention": metric.convention}
            metric.reset()
        datamodule = self.trainer.datamodule
        if isinstance(datamodule, EditDataModule):
            self.results.update(datamodule.derived_metrics(self.results))
        for name, result in self.results.items():
            for aggregation in ("macro", "micro"):
                # equal on every process already (the metrics synced); sync_dist only keeps Lightning from warning
                self.log(f"val/{name}_{aggregation}", float(result[aggregation]), sync_dist=True)
        if self._sequential is not None:
            self._sequential[0].restore()
            self.on_edits_restored()
            self._sequential = None

    def on_test_epoch_end(self) -> None:
        self.on_validation_epoch_end()
