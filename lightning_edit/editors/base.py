"""The editor base class: owns the language model and runs the validate loop under an edit protocol.

A method subclasses :class:`EditorModule` and says which parameters an edit touches (:meth:`edited_parameters`)
and how it changes them (:meth:`apply_edits`). Every protocol goes through one edit/undo contract: before requests
are applied, :meth:`prepare_undo` returns an :class:`Undo` that takes them back (by default a bit-exact snapshot of
the edited parameters; an editor that adds modules or adapters returns one that removes them), and
:meth:`EditorModule.edit` applies requests and returns their undo. The base class runs the protocol:

- ``single``: each case is applied to the unedited model, scored, and undone (bit-identical); when the editor's
  edits are low rank (:meth:`EditorModule.low_rank_edits`) the cases of a batch are instead computed together and
  scored in one pass where each case's rows see its own update (``batched_single``, docs/methods.md#batched-single);
- ``batch``: the cases of one dataloader batch (``data.batch_size``) are applied together, each is scored on
  that model, then they are undone;
- ``sequential``: before evaluation, every case is applied cumulatively, ``edit_batch_size`` cases per editor
  call, in dataset order; all cases are then scored on the final model (the WISE/AlphaEdit "T edits, then
  evaluate" protocol), and, for each n in ``eval_at``, the first n cases are also scored right after the n-th
  edit (reported as ``<metric>@<n>``, the retention curve). Every edit is undone after the run.

Under every protocol, the requests of a case that splits them into editor calls (``EditCase.calls``: RULE-EDIT's
instance editing, one request per call; DMLE's staged edits, two then one) are applied in those calls, in order;
other cases' requests go to the editor together.

``edit_batch_size`` belongs to ``sequential`` (and ``fit``): under ``single`` each case is edited alone and under
``batch`` the cases of one data batch together, so there it is ignored, with a logged note (a method config written
for ``sequential`` composes with ``--model.protocol single``).

``fit`` applies every case of the benchmark (as the sequential protocol does, ``edit_batch_size`` per call) in
``on_fit_start``, exports the result (:meth:`export`: by default the edited model as safetensors with
``edits.json``, the record of the edits it holds) to ``output_dir``, and undoes the edits, so the module in memory
is the unedited model again; no training step runs. Trainable editors (MEND) override this with an ordinary
training loop.

The benchmark declares the metrics it reports (:meth:`~lightning_edit.data.base.EditDataModule.declared_metrics`);
the editor creates their torchmetrics in ``setup``, with ``<metric>_pre`` (``scoring.pre_edit``) and
``<metric>@<n>`` (``eval_at``) variants, so every process holds the same metrics from the start.

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
own batches (the parameters the undo restores and any state the edits added are taken from process 0). A case the
distributed sampler repeats is counted once.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from lightning import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from lightning_edit import errors
from lightning_edit.data.base import case_error, loader_cases
from lightning_edit.data.schema import EditCase, EditRequest
from lightning_edit.editors.in_context import InContext, InContextPrompts
from lightning_edit.errors import ConfigError, Interrupted, stop_requested
from lightning_edit.evaluation import CaseScorer, Reference, Scores, ScoringConfig
from lightning_edit.metrics import PromptMean
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.row_updates import RowUpdates
from lightning_edit.models.saving import save_edited_model
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.models.tokenization import encode_prompt_targets
from lightning_edit.scoring.kinds import score_kind


class Undo(Protocol):
    """How to take edits back (returned by :meth:`EditorModule.prepare_undo`).

    Attributes:
        names: the parameters :meth:`restore` writes back (shared from process 0 after sequential edits).
    """

    names: list[str]

    def restore(self) -> None:
        """Return the model to its state when this undo was made (bit-identical)."""


def require(valid: bool, setting: str, value: Any, meaning: str) -> None:
    """One line, ``model.<setting>=<value>: <meaning>`` (:func:`lightning_edit.errors.require`), unless ``valid``:
    editors check their settings with it before they load the model."""
    errors.require(valid, f"model.{setting}", value, meaning)


def max_positions(model: nn.Module) -> int | None:
    """The model's maximum positions (``n_positions`` / ``max_position_embeddings``), None when it has none."""
    config = getattr(model, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def _check_length(case: EditCase, field: str, prompt: str, tokens: int, limit: int | None) -> None:
    if limit is not None and tokens > limit:
        raise case_error(
            case,
            field,
            f"the prompt {prompt[:60]!r}... is {tokens} tokens long with its answer, more than the model's {limit} "
            "positions: shorten it or leave the record out",
        )


class EditorModule(LightningModule, ABC):
    """Base of every editing method.

    Args:
        lm: the causal language model to edit (path, dtype, ...).
        protocol: how edits meet evaluation: ``single`` (each case alone), ``batch`` (the cases of a dataloader
            batch together) or ``sequential`` (all cases cumulatively, then evaluate); see the module docstring.
        edit_batch_size: cases applied per editor call under ``sequential`` and in ``fit`` (ignored, with a note,
            under the others).
        eval_at: sequential protocol: also score the first n cases right after the n-th edit, for each n.
        scoring: how evaluation prompts are scored (batch size, chat template, generation settings).
        output_dir: where ``fit`` saves the edited model; default ``<log dir>/edited_model``.
        in_context: also write the new fact (and retrieved demonstrations) before every evaluation prompt, on top
            of the weight edit (IKE/PROMPT prompting; :mod:`lightning_edit.editors.in_context`).
        batched_single: under ``single``, edit and score the cases of a data batch together when the editor's
            edits are low rank (:meth:`low_rank_edits`: ROME, MEMIT, AlphaEdit): one batched optimisation, then one
            scoring pass where each case's rows see its own update. False: one case at a time, written and undone
            (the reference path; same per-case metrics).
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
        batched_single: bool = True,
    ):
        super().__init__()
        self.save_hyperparameters()
        if eval_at and protocol != "sequential":
            raise ConfigError(f"eval_at={eval_at} needs protocol='sequential', not {protocol!r}")
        if edit_batch_size < 1:
            raise ConfigError(f"edit_batch_size={edit_batch_size}: cases per editor call, at least 1")
        if eval_at and min(eval_at) < 1:
            raise ConfigError(f"eval_at={eval_at}: numbers of edits, each at least 1")
        self.model, self.tokenizer = load_model_and_tokenizer(lm)
        self.model.requires_grad_(False)
        self.protocol, self.edit_batch_size, self.eval_at = protocol, edit_batch_size, sorted(eval_at or [])
        self.scoring = scoring or ScoringConfig()
        self.output_dir = output_dir
        self.in_context = in_context
        self.batched_single = batched_single
        self._contexts: dict[int, str] = {}  # case id -> in-context text, built before any edit
        self.metrics = nn.ModuleDict()  # created in setup from the benchmark's declared metrics
        self.metric_kinds: dict[str, str] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.case_scores: dict[str, dict[int, float]] = {}  # metric -> case id -> mean over the case's prompts
        self._sequential: tuple[Undo, Reference] | None = None  # (undo of every edit, pre-edit reference)

    @abstractmethod
    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        """Names of the parameters :meth:`apply_edits` may change for these requests (they are snapshotted)."""

    @abstractmethod
    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Write the requests into ``self.model`` in place."""

    def low_rank_edits(self, groups: list[list[EditRequest]]) -> RowUpdates | None:
        """Each group's edit of the unedited model as low-rank updates, without writing a weight, for the batched
        ``single`` protocol; None (the default) when the edits are not low rank: cases are then edited one at a time.
        """
        return None

    def prepare_undo(self, requests: list[EditRequest]) -> Undo:
        """How to undo ``requests``, made before they are applied (in one :meth:`apply_edits` call or several).

        By default a bit-exact snapshot of :meth:`edited_parameters`; an editor that adds modules or adapters
        overrides it to remove them (and restore anything else it changed).
        """
        return WeightSnapshot(self.model, self.edited_parameters(requests) if self.edits_weights else [])

    def edit(self, requests: list[EditRequest]) -> Undo:
        """Apply ``requests`` to the model; returns how to undo them (pass it to :meth:`undo`)."""
        undo = self.prepare_undo(requests)
        self.apply_edits(requests)
        return undo

    def undo(self, undo: Undo) -> None:
        """Take edits back and forget the editor's state that belongs to them (:meth:`on_edits_restored`)."""
        undo.restore()
        self.on_edits_restored()

    def export(self, directory: Path, cases: list[EditCase]) -> Path:
        """Save what ``fit`` produced: by default the edited model (safetensors) and ``edits.json``."""
        return save_edited_model(self.model, self.tokenizer, directory, cases, type(self).__name__, self.hparams)

    def check_cases(self, cases: list[EditCase], contexts: dict[int, str] | None = None) -> None:
        """Raise :class:`~lightning_edit.data.base.DataFormatError`, naming the file, record and field, if a request
        cannot be edited, a prompt (after its case's in-context text in ``contexts``) does not fit in the model's
        positions, or a score kind cannot score it (:meth:`~lightning_edit.scoring.kinds.ScoreKind.check`); called on
        every case before any weight changes."""
        limit, contexts = max_positions(self.model), contexts or {}
        checks = []  # (case, field, prompt, answer): every request's target and every prompt's expected answer
        for case in cases:
            for request in case.requests:
                if not request.subject.strip():
                    raise case_error(case, "subject", "empty subject")
                checks.append((case, "target_new", request.filled_prompt, request.target_new))
            for name, group in case.groups.items():
                context = contexts.get(case.case_id, "")
                checks += [(case, name, context + p, expected) for p, expected in zip(group.prompts, group.expected)]
        encoded = encode_prompt_targets(self.tokenizer, [c[2] for c in checks], [c[3] for c in checks])
        for (case, field, prompt, _), result in zip(checks, encoded):
            if isinstance(result, ValueError):
                raise case_error(case, field, str(result))
            _check_length(case, "prompt" if field == "target_new" else field, prompt, sum(map(len, result)), limit)
        for case, field, reason in self._scorer().check(cases, contexts, limit):
            raise case_error(case, field, reason)

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
    def edits_applied(
        self, requests: list[EditRequest], calls: list[list[EditRequest]] | None = None
    ) -> Iterator[None]:
        """The requests applied for the duration of the block (in one editor call, or in ``calls``), undone
        afterwards (also on an exception)."""
        undo = self.prepare_undo(requests)
        try:
            for call in calls or [requests]:
                self.apply_edits(call)
            yield
        finally:
            self.undo(undo)

    def transfer_batch_to_device(self, batch: list[EditCase], device: torch.device, dataloader_idx: int) -> list:
        return batch  # edit cases hold text; the scorer tokenizes onto the model's device

    @staticmethod
    def _requests(cases: list[EditCase]) -> list[EditRequest]:
        return [request for case in cases for request in case.requests]

    @staticmethod
    def _editor_calls(cases: list[EditCase]) -> list[list[EditRequest]]:
        """The requests of ``cases`` as editor calls: together, except those of a case that splits them (its calls)."""
        calls: list[list[EditRequest]] = [[]]
        for case in cases:
            if len(case.editor_calls) > 1:
                calls += [list(call) for call in case.editor_calls] + [[]]
            else:
                calls[-1] += case.requests
        return [call for call in calls if call]

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
        """Apply ``cases`` cumulatively, ``edit_batch_size`` per editor call; yields the number applied so far.

        After the editor call during which SIGTERM arrived (on any process: every process stops after the same call),
        raises :class:`~lightning_edit.errors.Interrupted`. The trainer notes SIGTERM once its loop runs;
        ``lightning-edit`` also notes one that arrives before (``fit`` edits in ``on_fit_start``, before the loop).
        """
        with self._progress(len(cases), description) as bar:
            for start in range(0, len(cases), self.edit_batch_size):
                chunk = cases[start : start + self.edit_batch_size]
                for call in self._editor_calls(chunk):
                    self.apply_edits(call)
                bar.update(len(chunk))
                applied = start + len(chunk)
                stop = self.trainer.received_sigterm or stop_requested() is not None
                if self.trainer.strategy.reduce_boolean_decision(stop, all=False):
                    raise Interrupted(
                        f"{description} stopped by SIGTERM after {applied} of {len(cases)} cases; the edits are not "
                        "kept: run the same command again"
                    )
                yield applied

    def _share_edited_state(self, undo: Undo, before: set[str]) -> None:
        """Give every process process 0's values of what the edits changed: the parameters ``undo`` restores and
        any state added since ``before`` (the model's state names then); a no-op on one process."""
        if self.trainer.world_size > 1:
            state = self.model.state_dict(keep_vars=True)
            for name in sorted(set(undo.names) | (set(state) - before)):
                state[name].data.copy_(self.trainer.strategy.broadcast(state[name].data, src=0))

    def _apply_sequentially(self, cases: list[EditCase], local: list[EditCase]) -> None:
        """Sequential protocol: apply every case cumulatively, scoring the prefixes in ``eval_at``.

        ``local`` are the cases this process scores; every process applies all of ``cases``.
        """
        scorer = self._scorer()
        reference = scorer.reference(local)
        self._update_metrics(scorer.score_unedited(local, reference, self.scoring.pre_edit))
        before = set(self.model.state_dict())
        undo = self.prepare_undo(self._requests(cases))
        self._sequential = (undo, reference)
        positions = {case.case_id: position for position, case in enumerate(cases)}
        previous = 0
        for applied in self._apply_in_order(cases, "sequential edits"):
            for n in self.eval_at:
                if previous < n <= applied:
                    self._share_edited_state(undo, before)
                    prefix = [case for case in local if positions[case.case_id] < n]
                    self._update_metrics(scorer.score(prefix, reference, self._contexts), suffix=f"@{n}")
            previous = applied
        self._share_edited_state(undo, before)

    def on_fit_start(self) -> None:
        """Closed-form editing: apply every training case, export the result, undo the edits, and end the fit."""
        cases = loader_cases(self.trainer.datamodule.train_dataloader())  # every case, on every process
        self.check_cases(cases)
        self._prepare()
        undo = self.prepare_undo(self._requests(cases))
        for _ in self._apply_in_order(cases, "edits"):
            pass
        if self.trainer.is_global_zero:
            log_dir = Path(self.trainer.log_dir or self.trainer.default_root_dir)
            self.export(Path(self.output_dir) if self.output_dir else log_dir / "edited_model", cases)
        self.undo(undo)
        self.trainer.should_stop = True
        self.trainer.num_sanity_val_steps = 0  # nothing to sanity-check: validation is its own run

    def training_step(self, batch: list[EditCase], batch_idx: int) -> None:
        raise RuntimeError(f"{type(self).__name__} edits in closed form in on_fit_start; it has no training step")

    def configure_optimizers(self) -> None:
        return None  # nothing is trained

    def setup(self, stage: str) -> None:
        """Create the metrics the benchmark declares, with their ``_pre`` and ``@n`` variants (validate, test, and
        fit when the fit validates, as MEND's training data does)."""
        datamodule = self.trainer.datamodule
        if not hasattr(datamodule, "declared_metrics"):
            if stage in ("validate", "test"):
                raise TypeError(f"{type(self).__name__} evaluates an EditDataModule benchmark, not {datamodule!r}")
            return
        declared = {name: kind for name, kind in datamodule.declared_metrics().items() if kind != "derived"}
        names = dict(declared)
        if self.scoring.pre_edit:
            names |= {f"{name}_pre": kind for name, kind in declared.items() if not name.endswith("_pre")}
        for n in self.eval_at:
            names |= {f"{name}@{n}": kind for name, kind in declared.items() if not name.endswith("_pre")}
        order = sorted(names, key=lambda name: ("@" in name, name.endswith("_pre")))
        self.metric_kinds = {name: names[name] for name in order}
        self.metrics = nn.ModuleDict(
            {
                name: PromptMean(score_kind(kind).convention, score_kind(kind).higher_is_better)
                for name, kind in names.items()
            }
        )

    def _check_declared(self, cases: list[EditCase]) -> None:
        """Raise, naming the case, if it reports a metric its benchmark did not declare."""
        for case in cases:
            for name, group in case.groups.items():
                reported = list(group.metrics.values()) + ([f"{name}_filtered"] if group.pre_edit_filter else [])
                undeclared = [metric for metric in reported if metric not in self.metric_kinds]
                if undeclared:
                    raise ValueError(
                        f"{case.source or case.case_id}: group {name!r} reports {undeclared}, which the benchmark "
                        f"does not declare (declared: {list(self.metric_kinds)})"
                    )

    def _note_ignored_settings(self) -> None:
        if self.protocol != "sequential" and self.edit_batch_size != 1:
            together = {"single": "each case is edited alone", "batch": "a data batch is edited together"}
            rank_zero_info(
                f"edit_batch_size={self.edit_batch_size} is read by protocol 'sequential' and fit only; ignored "
                f"under {self.protocol!r}, where {together[self.protocol]}"
            )

    def _check_batch_limit(self, loader: DataLoader) -> None:
        """Under ``sequential``, a trainer batch limit would apply every edit but score only some cases."""
        limit = self.trainer.limit_test_batches if self.trainer.testing else self.trainer.limit_val_batches
        every_batch = limit >= 1.0 if isinstance(limit, float) else limit >= len(loader)  # an int counts batches
        if self.protocol == "sequential" and not every_batch:
            raise ConfigError(
                f"trainer.limit_{'test' if self.trainer.testing else 'val'}_batches={limit} would score only some "
                "of the cases the sequential protocol edits: limit the benchmark instead (--data.limit)"
            )

    def _start(self, loader: DataLoader) -> None:
        self._note_ignored_settings()
        self._check_batch_limit(loader)
        cases = loader_cases(loader)
        if self.in_context is not None:  # every case, so that a case the pool cannot serve stops every process
            self._contexts = InContextPrompts(self.in_context, self.model, self.tokenizer).contexts(cases)
        self.check_cases(cases, self._contexts)  # every case, on every process, before any weight changes
        self._check_declared(cases)
        for name in self.metrics:  # an empty update on every process: the gathered states then share dtypes
            self._update_metrics({name: (self.metric_kinds[name], [])})
        self._prepare()
        if self.protocol == "sequential":
            self._apply_sequentially(cases, loader_cases(loader, local=True))

    def on_validation_start(self) -> None:
        self._start(self.trainer.val_dataloaders)

    def on_test_start(self) -> None:
        self._start(self.trainer.test_dataloaders)

    def validation_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self._score(batch)
        self._stop_if_requested(batch_idx)

    def _score(self, batch: list[EditCase]) -> None:
        """Score a batch of cases under the protocol (edited, scored and undone, or scored after the sequence)."""
        scorer = self._scorer()
        if self._sequential is not None:
            self._update_metrics(scorer.score(batch, self._sequential[1], self._contexts))
            return
        reference = scorer.reference(batch)
        self._update_metrics(scorer.score_unedited(batch, reference, self.scoring.pre_edit))
        chained = any(len(case.editor_calls) > 1 for case in batch)  # low-rank edits of the unedited model cannot chain
        if self.protocol == "single" and self.edits_weights and self.batched_single and not chained:
            rows = self.low_rank_edits([case.requests for case in batch])
            if rows is not None:
                with rows:
                    owners = {case.case_id: owner for owner, case in enumerate(batch)}
                    self._update_metrics(scorer.score(batch, reference, self._contexts, owners))
                return
        if self.protocol == "single" and self.edits_weights:
            edit_groups = [[case] for case in batch]
        else:
            edit_groups = [batch]
        for cases in edit_groups:
            with self.edits_applied(self._requests(cases), self._editor_calls(cases)):
                scores = scorer.score(cases, reference, self._contexts)
            self._update_metrics(scores)

    def _stop_if_requested(self, batch_idx: int) -> None:
        """After a batch during which this process received SIGTERM (judge requests stop at once, the edits are
        undone), raise :class:`~lightning_edit.errors.Interrupted`: no results are written from a part of the cases;
        the judges' verdicts so far are in their caches, for the next run."""
        if self.trainer.received_sigterm or stop_requested() is not None:
            raise Interrupted(
                f"scoring stopped by SIGTERM in batch {batch_idx + 1}; no results are written, the judges' verdicts "
                "so far are cached: run the same command again"
            )

    def test_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def _update_metrics(self, scores: Scores, suffix: str = "") -> None:
        for name, (_, rows) in scores.items():
            case_ids, prompt_ids, values = zip(*rows) if rows else ((), (), ())
            self.metrics[name + suffix].update(
                torch.tensor(case_ids, dtype=torch.long),
                torch.tensor(prompt_ids, dtype=torch.long),
                torch.tensor([math.nan if v is None else v for v in values], dtype=torch.double),  # None: missing
            )

    def on_validation_epoch_end(self) -> None:
        self.results, self.case_scores = {}, {}
        for name in self.metric_kinds:
            metric = self.metrics[name]
            result = dict(metric.compute())
            self.case_scores[name] = result.pop("case_means")
            self.results[name] = {**result, "kind": self.metric_kinds[name], "convention": metric.convention}
            metric.reset()
        self.results.update(self.trainer.datamodule.derived_metrics(self.results))
        for name, result in self.results.items():
            for aggregation in ("macro", "micro"):
                # equal on every process already (the metrics synced); sync_dist only keeps Lightning from warning
                self.log(f"val/{name}_{aggregation}", float(result[aggregation]), sync_dist=True)
        if self._sequential is not None:
            self.undo(self._sequential[0])
            self._sequential = None

    def on_test_epoch_end(self) -> None:
        self.on_validation_epoch_end()
