"""The ``sequential`` protocol: every case applied cumulatively before evaluation, the retention curve along the way.

Before the first batch is scored, every case is applied cumulatively, ``edit_batch_size`` cases per editor call, in
dataset order; all cases are then scored on the final model (the WISE/AlphaEdit "T edits, then evaluate" protocol).
For each n in ``eval_at``, the first n cases are also scored right after the n-th edit (reported as
``<metric>@<n>``, the retention curve; with ``eval_sample`` a seeded sample of at most that many of them), and the
editing time, peak memory and the model's health so far are recorded (results.json's ``stream``). Every edit is undone
after the run.

A stopped stream goes on from its last checkpoint (:mod:`lightning_edit.editors.stream_checkpoint`): one is written
into the run's folder after every ``checkpoint_every`` edits and after the editor call during which SIGTERM arrived,
and ``--ckpt_path <file>`` resumes from it, with the final results of an uninterrupted run.

With several processes every process applies every edit (the same deterministic computation) and then takes the
weights of process 0, so all hold one edited model, and scores its own batches (the parameters the undo restores and
any state the edits added are taken from process 0).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from lightning_edit.cases import EditCase, loader_cases
from lightning_edit.editors.protocol_runner import ProtocolRunner, Undo, max_positions, requests_of
from lightning_edit.editors.stream_checkpoint import (
    FILE_NAME,
    StreamCheckpoint,
    cases_digest,
    check_identity,
    load_parameters,
    parameter_values,
    parameters_digest,
    random_states,
    read_checkpoint,
    set_random_states,
    write_checkpoint,
)
from lightning_edit.editors.stream_health import StreamHealth, heldout_nll, heldout_record, weight_norms
from lightning_edit.errors import ConfigError
from lightning_edit.evaluation import Answers, Reference
from lightning_edit.models.sharding import broadcast_shards
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.run_folder import run_folder
from lightning_edit.stopping import stop_agreed

if TYPE_CHECKING:
    from lightning_edit.editors.base import EditorModule


def checkpoint_sample(n: int, size: int | None, total: int, seed: int = 0) -> list[int]:
    """Positions (< n, ascending) scored at the checkpoint after n edits of ``total``: all of them, or the ``size`` of
    them that come first in one seeded random order of all positions (so a later checkpoint keeps the earlier
    sample's cases unless later ones come before them in that order)."""
    if size is None or n <= size:
        return list(range(n))
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted([position for position in order if position < n][:size])


class SequentialProtocol(ProtocolRunner):
    """``sequential``: apply every case, then score; retention checkpoints at ``eval_at``.

    Args:
        editor: the editor.
        edit_batch_size: cases per editor call.
        eval_at: also score the first n cases right after the n-th edit, for each n.
        eval_sample: score at each checkpoint a seeded sample of at most this many of the first n cases.
        stream_health: what each checkpoint measures beside the scores (held-out perplexity, weight norms).
    """

    def __init__(
        self,
        editor: EditorModule,
        edit_batch_size: int,
        eval_at: list[int],
        eval_sample: int | None,
        stream_health: StreamHealth,
        checkpoint_every: int,
    ):
        super().__init__(editor)
        self.edit_batch_size = edit_batch_size
        self.eval_at = eval_at
        self.eval_sample = eval_sample
        self.stream_health = stream_health
        self.checkpoint_every = checkpoint_every
        self.applied: tuple[Undo, Reference] | None = None  # (undo of every edit, pre-edit reference) while applied
        self.resume_path: str | None = None  # a stream checkpoint to go on from (``--ckpt_path``)
        self.resumed: StreamCheckpoint | None = None  # read and verified by start, before any edit

    def start(self, loader: DataLoader) -> None:
        """Check the cases, then apply every one (:meth:`apply_all`) before the first batch is scored."""
        self._check_batch_limit(loader)
        cases = self.editable(self.checked_cases(loader))
        self._check_eval_at(len(cases))
        if self.resume_path is not None:
            self.resumed = self._read_checkpoint(self.resume_path, cases)
        self.prepare()
        self.apply_all(cases, self.editable(loader_cases(loader, local=True)))

    def score(self, batch: list[EditCase]) -> None:
        """Score the batch's cases on the model that holds every edit."""
        batch = self.editable(batch)
        if not batch:
            return
        editor = self.editor
        mine = editor.placement.scored_here(batch)
        answers: Answers = {}
        editor.peak_memory.enter("scoring", editor.model)
        with editor.placement.lockstep():
            scores = self.scorer().score(mine, self.reference(), self.contexts, answers=answers)
        editor.metrics.update(scores, "", answers)

    def end(self) -> None:
        """Undo every edit of the stream."""
        if self.applied is not None:
            self.editor.undo(self.applied[0])
            self.applied = None

    def reference(self) -> Reference:
        """The unedited model's answers (locality), taken before the first edit."""
        if self.applied is None:
            raise RuntimeError("the sequential protocol scores after start applied every edit")
        return self.applied[1]

    def stopped_while(self) -> str:
        return "scoring the edited model"

    def apply_all(self, cases: list[EditCase], local: list[EditCase]) -> None:
        """Apply every case cumulatively, scoring the prefixes in ``eval_at``.

        ``local`` are the cases this process scores; every process applies all of ``cases``.
        """
        editor = self.editor
        scorer = self.scorer()
        local = editor.placement.scored_here(local)
        answers: Answers = {}
        editor.peak_memory.enter("scoring", editor.model)
        with editor.placement.lockstep():
            reference = scorer.reference(local)
            scores = scorer.score_unedited(local, reference, editor.scoring.pre_edit, answers)
        editor.metrics.update(scores, answers=answers)
        health = self.stream_health if self.eval_at else StreamHealth(perplexity=False, weight_norms=False)
        windows = health.windows(editor.tokenizer, max_positions(editor.model)) if health.perplexity else []
        if windows:
            with editor.placement.lockstep():
                unedited = heldout_nll(editor.model, windows)
        before = set(editor.model.state_dict())
        start_parameters = {key for name, param in editor.model.named_parameters() for key in (name, id(param))}
        undo = editor.prepare_undo(requests_of(cases))
        self.applied = (undo, reference)
        writes = self._writes_checkpoints()
        identity = self._identity(cases, parameter_values(editor.model, undo.names)) if writes else {}
        self.stream = []
        position = 0
        edit_seconds = 0.0
        if self.resumed is not None:
            position, edit_seconds = self._restore(self.resumed)
            self.resumed = None
        positions = {case.case_id: position for position, case in enumerate(cases)}
        previous = position
        start = time.perf_counter() - edit_seconds
        scoring_seconds = 0.0
        for applied in self.apply_in_order(cases, self.edit_batch_size, "sequential edits", first=position):
            for n in self.eval_at:
                if previous < n <= applied:
                    edit_seconds = time.perf_counter() - start - scoring_seconds
                    memory = editor.peak_memory.record(editor.model)
                    self.stream.append({"edits": applied, "edit_seconds": edit_seconds, **memory})
                    self.share_edited_state(undo, before)
                    editor.peak_memory.enter("scoring", editor.model)
                    if windows:
                        with editor.placement.lockstep():
                            nll = heldout_nll(editor.model, windows)
                        self.stream[-1]["heldout"] = heldout_record(nll, unedited, sum(map(len, windows)))
                    if health.weight_norms:
                        start_weights = undo if isinstance(undo, WeightSnapshot) else None
                        self.stream[-1]["weights"] = weight_norms(editor.model, start_weights, start_parameters)
                    scored = set(checkpoint_sample(n, self.eval_sample, len(cases)))
                    prefix = [case for case in local if positions[case.case_id] in scored]
                    answers = {}
                    with editor.placement.lockstep():
                        scores = scorer.score(prefix, reference, self.contexts, answers=answers)
                    editor.metrics.update(scores, f"@{n}", answers)
                    scoring_seconds = time.perf_counter() - start - edit_seconds
            stopping = stop_agreed(editor.trainer.strategy)
            every = self.checkpoint_every
            saved = "the edits are not kept: run the same command again"
            if writes and (stopping or (every and applied // every > previous // every)):
                seconds = time.perf_counter() - start - scoring_seconds
                path = self._write_checkpoint(identity, undo.names, applied, seconds)
                saved = f"stream checkpoint {path}: resume with the same command and --ckpt_path {path}"
            previous = applied
            if stopping:
                self.stop_after(applied, len(cases), "sequential edits", saved)
        self.share_edited_state(undo, before)

    # Stream checkpoints -----------------------------------------------------------------------------------------

    def _writes_checkpoints(self) -> bool:
        """Checkpoints are written unless the model is sharded (each process would hold only its shards)."""
        return self.editor.placement.shard_mesh is None

    def _identity(self, cases: list[EditCase], unedited: dict[str, Tensor]) -> dict[str, str]:
        """What a checkpoint must share with the run that resumes it: the editor and its settings (not
        ``checkpoint_every``), the model (its ``lm`` setting and the unedited values of the parameters the stream
        changes), the benchmark and its cases in order."""
        editor = self.editor
        settings = {f"model.{key}": repr(value) for key, value in editor.hparams.items() if key != "checkpoint_every"}
        return {
            "editor": f"{type(editor).__module__}.{type(editor).__qualname__}",
            **settings,
            "model weights": parameters_digest(unedited),
            "benchmark": type(editor.trainer.datamodule).__qualname__,
            "cases": cases_digest(cases),
        }

    def _write_checkpoint(self, identity: dict[str, str], names: list[str], applied: int, seconds: float) -> Path:
        """Gather what a checkpoint holds (every process takes part) and write it on process 0."""
        editor = self.editor
        metrics, answers = editor.metrics.checkpoint_states("@", editor.trainer.world_size)
        generators, python = random_states()
        state = editor.stream_state()
        tensors = {f"parameter/{name}": value for name, value in parameter_values(editor.model, names).items()}
        tensors |= {f"editor/{key}": value for key, value in state.items() if isinstance(value, Tensor)}
        tensors |= metrics | generators
        described = {key: value for key, value in state.items() if not isinstance(value, Tensor)}
        checkpoint = StreamCheckpoint(identity, applied, seconds, self.stream, answers, python, tensors, described)
        path = run_folder(editor.trainer) / FILE_NAME
        if editor.trainer.is_global_zero:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_checkpoint(path, checkpoint)
        editor.trainer.strategy.barrier("stream checkpoint")
        return path

    def _read_checkpoint(self, path: str, cases: list[EditCase]) -> StreamCheckpoint:
        """Read and verify the checkpoint to resume from, before any edit: one line if it is not this run's."""
        editor = self.editor
        checkpoint = read_checkpoint(path)
        names = sorted(checkpoint.part("parameter"))
        check_identity(path, checkpoint.identity, self._identity(cases, parameter_values(editor.model, names)))
        return checkpoint

    def _restore(self, checkpoint: StreamCheckpoint) -> tuple[int, float]:
        """Put the checkpoint's edits, editor state, scores so far and random states in place; returns the position
        and the editing seconds so far."""
        editor = self.editor
        load_parameters(editor.model, checkpoint.part("parameter"))
        editor.load_stream_state(checkpoint.editor_state())
        if editor.trainer.is_global_zero:  # every process's rows: the metrics gather them at the end
            editor.metrics.load_checkpoint_states(checkpoint.part("metric"), checkpoint.answers)
        self.stream = list(checkpoint.stream)
        set_random_states(checkpoint.part("random"), checkpoint.python_random)
        return checkpoint.position, checkpoint.edit_seconds

    def share_edited_state(self, undo: Undo, before: set[str]) -> None:
        """Give every process process 0's values of what the edits changed: the parameters ``undo`` restores and
        any state added since ``before`` (the model's state names then); a no-op on one process."""
        editor = self.editor
        if editor.trainer.world_size > 1:
            state = editor.model.state_dict(keep_vars=True)
            names = sorted(set(undo.names) | (set(state) - before))
            if editor.placement.replica_mesh is not None:  # each shard from its replica on the first machine
                return broadcast_shards([state[name] for name in names], editor.placement.replica_mesh)
            for name in names:
                state[name].data.copy_(editor.trainer.strategy.broadcast(state[name].data, src=0))

    def _check_batch_limit(self, loader: DataLoader) -> None:
        """A trainer batch limit would apply every edit but score only some cases."""
        trainer = self.editor.trainer
        limit = trainer.limit_test_batches if trainer.testing else trainer.limit_val_batches
        every_batch = limit >= 1.0 if isinstance(limit, float) else limit >= len(loader)  # an int counts batches
        if not every_batch:
            raise ConfigError(
                f"trainer.limit_{'test' if trainer.testing else 'val'}_batches={limit} would score only some "
                "of the cases the sequential protocol edits: limit the benchmark instead (--data.limit)"
            )

    def _check_eval_at(self, edits: int) -> None:
        """A checkpoint of ``eval_at`` after more edits than the stream makes would score nothing (an n/a row)."""
        beyond = [n for n in self.eval_at if n > edits]
        if beyond:
            raise ConfigError(
                f"model.eval_at={self.eval_at}: {beyond} beyond the {edits} cases the sequential stream edits; a "
                "checkpoint is a number of edits, at most the stream's length (more cases: --data.limit)"
            )
