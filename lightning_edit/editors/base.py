"""The editor base class: owns the language model; a method implements the edit/undo contract.

A method subclasses :class:`EditorModule` and says which parameters an edit touches (:meth:`edited_parameters`)
and how it changes them (:meth:`apply_edits`). Every protocol goes through one edit/undo contract: before requests
are applied, :meth:`prepare_undo` returns an :class:`Undo` that takes them back (by default a bit-exact snapshot of
the edited parameters; an editor that adds modules or adapters returns one that removes them), and
:meth:`EditorModule.edit` applies requests and returns their undo. What runs the edits is in two parts of the class:
:mod:`lightning_edit.editors.protocols` (single, batch, sequential, ``fit``, several processes) and
:mod:`lightning_edit.editors.run_metrics` (the benchmark's metrics).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from torch import nn

from lightning_edit import errors
from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.editors.in_context import InContext
from lightning_edit.editors.protocols import ProtocolRunner, Undo
from lightning_edit.editors.run_metrics import CaseAnswers, RunMetrics
from lightning_edit.editors.stream_health import StreamHealth
from lightning_edit.errors import ConfigError
from lightning_edit.evaluation import Reference, ScoringConfig
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.row_updates import RowUpdates
from lightning_edit.models.saving import save_edited_model
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.peak_memory import PeakMemory
from lightning_edit.scoring.kinds import BUILTIN_KINDS, ScoreKind


def require(valid: bool, setting: str, value: Any, meaning: str) -> None:
    """One line, ``model.<setting>=<value>: <meaning>`` (:func:`lightning_edit.errors.require`), unless ``valid``:
    editors check their settings with it before they load the model."""
    errors.require(valid, f"model.{setting}", value, meaning)


class EditorModule(ProtocolRunner, RunMetrics, ABC):
    """Base of every editing method.

    Args:
        lm: the causal language model to edit (path, dtype, ...).
        protocol: how edits meet evaluation: ``single`` (each case alone), ``batch`` (the cases of a dataloader
            batch together) or ``sequential`` (all cases cumulatively, then evaluate); see the module docstring.
        edit_batch_size: cases applied per editor call under ``sequential`` and in ``fit`` (ignored, with a note,
            under the others).
        eval_at: sequential protocol: also score the first n cases right after the n-th edit, for each n.
        eval_sample: with ``eval_at``, score at each of those checkpoints a sample of at most this many of the first
            n cases instead of all of them (seeded, the same cases on every run; every case is still scored at the
            end); None: all of them.
        scoring: how evaluation prompts are scored (batch size, chat template, generation settings).
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
    ):
        super().__init__()
        self.save_hyperparameters()
        if eval_at and protocol != "sequential":
            raise ConfigError(f"eval_at={eval_at} needs protocol='sequential', not {protocol!r}")
        if edit_batch_size < 1:
            raise ConfigError(f"edit_batch_size={edit_batch_size}: cases per editor call, at least 1")
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
        self.eval_at = sorted(eval_at or [])
        self.eval_sample = eval_sample
        self.stream: list[dict[str, Any]] = []  # one record per eval_at checkpoint: edits, seconds, peak memory
        self.peak_memory = PeakMemory()  # the run's peaks and their phases (results.json's memory)
        self.scoring = scoring or ScoringConfig()
        self.output_dir = output_dir
        self.in_context = in_context
        self.batched_single = batched_single
        self.stream_health = stream_health or StreamHealth()
        self._contexts: dict[int, str] = {}  # case id -> in-context text, built before any edit
        self.metrics = nn.ModuleDict()  # created in setup from the benchmark's declared metrics
        self.metric_kinds: dict[str, str] = {}
        self.score_kinds: Mapping[str, ScoreKind] = dict(BUILTIN_KINDS)  # the benchmark's, from setup on
        self.results: dict[str, dict[str, Any]] = {}
        self.case_scores: dict[str, dict[int, float]] = {}  # metric -> case id -> mean over the case's prompts
        self.case_answers: CaseAnswers = {}  # metric -> case id -> prompt index -> generated answer
        self._answers: CaseAnswers = {}  # this process's, until the end of the epoch
        self._weights: dict[tuple[str, int, int], float] = {}  # (metric, case id, prompt index) of weighted prompts
        self._sequential: tuple[Undo, Reference] | None = None  # (undo of every edit, pre-edit reference)
        self._left_out: dict[int, list[bool]] = {}  # case id -> which of its requests the editor edits
        self.skipped_requests: list[dict[str, Any]] = []  # the requests it cannot edit, and why

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
