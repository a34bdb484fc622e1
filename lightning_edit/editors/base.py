"""The editor base class: owns the language model and the parts of a run; a method implements the edit/undo contract.

A method subclasses :class:`EditorModule` and says which parameters an edit touches
(:meth:`EditorModule.edited_parameters`) and how it changes them (:meth:`EditorModule.apply_edits`). Every protocol goes
through one edit/undo contract: before requests are applied, :meth:`EditorModule.prepare_undo` returns an :class:`Undo`
that takes them back (by default a bit-exact snapshot of the edited parameters; an editor that adds modules or adapters
returns one that removes them), and :meth:`EditorModule.edit` applies requests and returns their undo.

The module owns the parts of a run and its Lightning hooks call them: ``runner`` (the protocol:
:mod:`lightning_edit.editors.protocols`, :mod:`lightning_edit.editors.sequential`), ``metrics``
(:class:`~lightning_edit.editors.run_metrics.RunMetrics`) and ``placement``
(:class:`~lightning_edit.editors.placement.ModelPlacement`). One batch goes ``validation_step`` →
``runner.score`` → the editor's ``edits_applied`` / ``apply_edits`` → ``CaseScorer.score`` → ``metrics.update``
(docs/run-flow.md#how-a-run-flows).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from lightning import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from lightning_edit import errors
from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.editors.in_context import InContext
from lightning_edit.editors.placement import ModelPlacement
from lightning_edit.editors.protocol_runner import ProtocolRunner, Undo
from lightning_edit.editors.protocols import BatchProtocol, FitProtocol, SingleProtocol
from lightning_edit.editors.run_metrics import RunMetrics
from lightning_edit.editors.sequential import SequentialProtocol
from lightning_edit.editors.stream_checkpoint import CHECKPOINT_KEY
from lightning_edit.editors.stream_health import StreamHealth
from lightning_edit.errors import ConfigError
from lightning_edit.evaluation import ScoringConfig
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.placement import is_dispatched
from lightning_edit.models.row_updates import RowUpdates
from lightning_edit.models.saving import save_edited_model
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.peak_memory import PeakMemory


def require(valid: bool, setting: str, value: Any, meaning: str) -> None:
    """One line, ``model.<setting>=<value>: <meaning>`` (:func:`lightning_edit.errors.require`), unless ``valid``:
    editors check their settings with it before they load the model."""
    errors.require(valid, f"model.{setting}", value, meaning)


class EditorModule(LightningModule, ABC):
    """Base of every editing method.

    Args:
        lm: the causal language model to edit (path, dtype, ...).
        protocol: how edits meet evaluation: ``single`` (each case alone), ``batch`` (``edit_batch_size`` cases
            together, scored, undone) or ``sequential`` (all cases cumulatively, then evaluate); see the module
            docstring.
        edit_batch_size: cases per editor call under ``batch`` (where a validation step is one call), ``sequential``
            and in ``fit``: the one setting of it (ignored, with a note, under ``single``).
        eval_at: sequential protocol: also score the first n cases right after the n-th edit, for each n.
        eval_sample: with ``eval_at``, score at each of those checkpoints a sample of at most this many of the first
            n cases instead of all of them (seeded, the same cases on every run; every case is still scored at the
            end); None: all of them.
        scoring: how evaluation prompts are scored (sequences per forward, chat template, generation settings).
        output_dir: where ``fit`` saves the edited model; default ``<log dir>/edited_model``.
        in_context: also write the new fact (and retrieved demonstrations) before every evaluation prompt, on top
            of the weight edit (IKE/PROMPT prompting; :mod:`lightning_edit.editors.in_context`).
        batched_single: under ``single``, edit and score the cases of a data batch together when the editor's
            edits are low rank (:meth:`low_rank_edits`: ROME, MEMIT, AlphaEdit): one batched optimisation, then one
            scoring pass where each case's rows see its own update. False: one case at a time, written and undone
            (the reference path; same per-case metrics).
        stream_health: sequential protocol with ``eval_at``: what each checkpoint measures beside the scores, the
            edited model's perplexity on held-out text and the norms of the edited weights (docs/metrics.md#stream-
            health); each can be turned off.
        checkpoint_every: sequential protocol: write a stream checkpoint into the run's folder after the editor call
            that brings the number of applied cases past each multiple of this (0: only after SIGTERM); resume with
            ``--ckpt_path`` (docs/protocols.md#resumable-streams).
    """

    #: False for methods that never change weights (the baseline, in-context editors): cases are then scored together.
    edits_weights: bool = True
    #: True for editors that read keys at the subject's tokens (locate-then-edit): see :meth:`cannot_edit`.
    locates_subject: bool = False
    #: True for editors that edit a model split over processes (``ModelParallelStrategy``) or spread by
    #: ``lm.device_map`` (weights read whole and written where they are: ``models.placement``); others refuse both.
    edits_split_models: bool = False

    def __init__(
        self,
        lm: ModelSource,
        protocol: Literal["single", "batch", "sequential"] = "single",
        edit_batch_size: int = 1,
        eval_at: list[int] | None = None,
        eval_sample: int | None = None,
        scoring: ScoringConfig | None = None,
        output_dir: str | None = None,
        in_context: InContext | None = None,
        batched_single: bool = True,
        stream_health: StreamHealth | None = None,
        checkpoint_every: int = 500,
    ):
        super().__init__()
        self.save_hyperparameters()
        if protocol not in ("single", "batch", "sequential"):
            raise ConfigError(f"protocol={protocol!r}: one of 'single', 'batch', 'sequential'")
        if eval_at and protocol != "sequential":
            raise ConfigError(f"eval_at={eval_at} needs protocol='sequential', not {protocol!r}")
        if edit_batch_size < 1:
            raise ConfigError(f"edit_batch_size={edit_batch_size}: cases per editor call, at least 1")
        if checkpoint_every < 0:
            raise ConfigError(f"checkpoint_every={checkpoint_every}: edits between stream checkpoints, or 0 for none")
        if eval_at and min(eval_at) < 1:
            raise ConfigError(f"eval_at={eval_at}: numbers of edits, each at least 1")
        if eval_sample is not None and (eval_sample < 1 or not eval_at):
            raise ConfigError(f"eval_sample={eval_sample}: cases scored at each eval_at checkpoint, >= 1, with eval_at")
        if lm.device_map is not None and not self.edits_split_models:
            raise ConfigError(
                f"{type(self).__name__} does not edit a model spread by lm.device_map: load it on one device (no "
                "device_map) or use an editor that runs split (docs/sharding.md)"
            )
        self.model, self.tokenizer = load_model_and_tokenizer(lm)
        self.model.requires_grad_(False)
        self.protocol = protocol
        self.edit_batch_size = edit_batch_size
        self.peak_memory = PeakMemory()  # the run's peaks and their phases (results.json's memory)
        self.scoring = scoring or ScoringConfig()
        self.output_dir = output_dir
        self.in_context = in_context
        self.placement = ModelPlacement(self.model, type(self).__name__, self.edits_split_models)
        self.eval_at = sorted(eval_at or [])
        self.metrics = RunMetrics()
        self.runner: ProtocolRunner
        if protocol == "sequential":
            health = stream_health or StreamHealth()
            self.runner = SequentialProtocol(self, edit_batch_size, self.eval_at, eval_sample, health, checkpoint_every)
        elif protocol == "batch":
            self.runner = BatchProtocol(self)
        else:
            self.runner = SingleProtocol(self, batched_single)

    @abstractmethod
    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        """Names of the parameters :meth:`apply_edits` may change for these requests (they are snapshotted)."""

    @abstractmethod
    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Write the requests into ``self.model`` in place."""

    def cannot_edit(self, request: EditRequest) -> str | None:
        """Why the editor leaves ``request`` out (listed in results.json, the rest of its case still edited and
        scored), or None when it can edit it: an editor that :attr:`locates_subject` needs it in the prompt."""
        if self.locates_subject and not request.subject_in_prompt:
            return f"the prompt {request.prompt!r} does not hold the subject {request.subject!r}, where keys are read"
        return None

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

    def on_edits_restored(self) -> None:
        """Called after the protocol restored the weights: forget state that belongs to the undone edits."""

    def stream_state(self) -> dict[str, Any]:
        """The editor's own state along a sequential stream beside the edited parameters (running statistics, a
        codebook, cached context templates...) for a stream checkpoint: named tensors, and values JSON can hold;
        none by default."""
        return {}

    def load_stream_state(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`stream_state` returned, on the model that holds the checkpoint's edits."""
        if state:
            raise ConfigError(f"{type(self).__name__} keeps no stream state, but the checkpoint holds {sorted(state)}")

    def prepare_statistics(self) -> None:
        """Load or compute what edits need from the unedited model (key statistics); called before any edit."""

    def compute_statistics_shard(self, index: int, count: int) -> None:
        """Cache shard ``index`` of ``count`` of what :meth:`prepare_statistics` computes, for several processes."""

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

    # Lightning hooks: each calls the part that does the work ------------------------------------------------------

    def setup(self, stage: str) -> None:
        """Create the metrics the benchmark declares (validate, test, and fit when the fit validates, as MEND's
        training data does); under ``batch``, make each validation step one editor call of ``edit_batch_size``."""
        datamodule = self.trainer.datamodule
        if not hasattr(datamodule, "declared_metrics"):
            if stage in ("validate", "test"):
                raise TypeError(f"{type(self).__name__} evaluates an EditDataModule benchmark, not {datamodule!r}")
            return
        self.metrics.declare(datamodule.declared_metrics(), datamodule.score_kinds, self.scoring.pre_edit, self.eval_at)
        if self.protocol == "batch":
            datamodule.edit_steps(self.edit_batch_size)

    def configure_model(self) -> None:
        self.placement.configure(self._trainer, self.device_mesh)

    def _apply(self, fn, recurse: bool = True):
        """Lightning moves the module to its root device; a model spread by a device map stays where it is."""
        modules = self._modules
        if not is_dispatched(modules.get("model")):
            return super()._apply(fn, recurse)
        self._modules = {name: module for name, module in modules.items() if name != "model"}
        try:
            return super()._apply(fn, recurse)
        finally:
            self._modules = modules

    def transfer_batch_to_device(self, batch: list[EditCase], device: Any, dataloader_idx: int) -> list:
        return batch  # edit cases hold text; the scorer tokenizes onto the model's device

    @property
    def shows_progress(self) -> bool:
        """Whether long loops show a progress bar: on process 0, when the trainer shows its own (the default)."""
        if self._trainer is None:
            return True
        return self.trainer.is_global_zero and self.trainer.progress_bar_callback is not None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """``--ckpt_path`` of a sequential stream's checkpoint (:class:`~.stream_checkpoint.StreamCheckpointIO` hands
        over its path): the runner reads and verifies it before any edit, and goes on from it."""
        path = checkpoint.get(CHECKPOINT_KEY)
        if path is None:
            return
        if not isinstance(self.runner, SequentialProtocol):
            raise ConfigError(f"ckpt_path={path}: a stream checkpoint resumes a 'sequential' run, not {self.protocol}")
        if self.placement.shard_mesh is not None:
            raise ConfigError(f"ckpt_path={path}: a sharded model writes no stream checkpoint, nor resumes one")
        self.runner.resume_path = path
        self.strict_loading = False  # the checkpoint's weights are loaded by the runner, not as a state dict

    def on_validation_start(self) -> None:
        self._start(self.trainer.val_dataloaders)

    def on_test_start(self) -> None:
        self._start(self.trainer.test_dataloaders)

    def _start(self, loader: DataLoader) -> None:
        if self.protocol == "single" and self.edit_batch_size != 1:
            rank_zero_info(
                f"edit_batch_size={self.edit_batch_size} is read by protocols 'batch' and 'sequential' and by fit; "
                "ignored under 'single', where each case is edited alone"
            )
        self.runner.start(loader)

    def validation_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self.runner.score(batch)
        self.runner.stop_if_requested(batch_idx)

    def test_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_validation_epoch_end(self) -> None:
        """Compute the metrics (synced over processes) and log their aggregates; then the runner ends (after a
        sequential run, every edit is undone)."""
        results = self.metrics.compute(self.trainer.world_size, self.trainer.datamodule.derived_metrics)
        for name, result in results.items():
            for aggregation in ("macro", "micro"):
                # equal on every process already (the metrics synced); sync_dist only keeps Lightning from warning
                self.log(f"val/{name}_{aggregation}", float(result[aggregation]), sync_dist=True)
        self.runner.end()

    def on_test_epoch_end(self) -> None:
        self.on_validation_epoch_end()

    def on_fit_start(self) -> None:
        """Closed-form editing: apply every training case, export the result, undo the edits, and end the fit."""
        FitProtocol(self, self.edit_batch_size, self.output_dir).run()
        self.trainer.should_stop = True
        self.trainer.num_sanity_val_steps = 0  # nothing to sanity-check: validation is its own run

    def training_step(self, batch: list[EditCase], batch_idx: int) -> None:
        raise RuntimeError(f"{type(self).__name__} edits in closed form in on_fit_start; it has no training step")

    def configure_optimizers(self) -> None:
        return None  # nothing is trained
