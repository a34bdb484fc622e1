"""The protocols that edit, score and undo per batch (``single``, ``batch``), and ``fit``'s edit-and-export.

- ``single`` (:class:`SingleProtocol`): each case is applied to the unedited model, scored, and undone (bit-identical);
  when the editor's edits are low rank (:meth:`~lightning_edit.editors.base.EditorModule.low_rank_edits`) the cases
  of a batch are instead computed together and scored in one pass where each case's rows see its own update
  (``batched_single``, docs/protocols.md#batched-single);
- ``batch`` (:class:`BatchProtocol`): ``edit_batch_size`` consecutive cases (one validation step: the data batch
  follows the editor's setting) are applied together, each is scored on that model, then they are undone;
- ``sequential``: :mod:`lightning_edit.editors.sequential`;
- ``fit`` (:class:`FitProtocol`): every case of the benchmark is applied (as the sequential protocol does,
  ``edit_batch_size`` per call), the result exported (``export``: by default the edited model as safetensors with
  ``edits.json``, the record of the edits it holds) to ``output_dir``, and the edits undone, so the module in memory
  is the unedited model again; no training step runs. Trainable editors (MEND) override this with a training loop.

Under every protocol, the requests of a case that splits them into editor calls (``EditCase.calls``: RULE-EDIT's
instance editing, one request per call; DMLE's staged edits, two then one) are applied in those calls, in order;
other cases' requests go to the editor together. ``edit_batch_size`` is the cases per editor call under ``batch``,
``sequential`` and ``fit``; under ``single`` it is ignored, with a logged note (a method config written for
``sequential`` composes with ``--model.protocol single``).

Locality (``agreement``) metrics, BAKE's pre-edit filter and the ``<metric>_pre`` reports use the model before any
edit of the run. With ``in_context``, each case's in-context text (built before any edit) is put before its
evaluation prompts, on top of the weight edit. Every case is checked before any weight changes.

Several processes (``--trainer.devices N``, any strategy Lightning launches) split the dataloader's batches of cases
between them and give exactly the numbers of one process: under ``single`` and ``batch`` each process edits its own
copy of the model for its own batches. A case the distributed sampler repeats is counted once. Under
``ModelParallelStrategy`` the processes of one machine share one model, sharded
(:mod:`lightning_edit.editors.placement`, docs/sharding.md): they see the same batches and make every edit together,
and each scores its share of a batch's cases (``scored_here``), its forwards kept in step with the others'
(``lockstep``). A model spread by ``lm.device_map`` runs in one process, as a whole one does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lightning_edit.cases import EditCase, loader_cases
from lightning_edit.editors.protocol_runner import ProtocolRunner, editor_calls, requests_of
from lightning_edit.errors import ConfigError
from lightning_edit.evaluation import Answers, CaseScorer, Reference

if TYPE_CHECKING:
    from lightning_edit.editors.base import EditorModule


class EditScoreUndo(ProtocolRunner):
    """A protocol that scores each batch before editing, then edits, scores and undoes (``single``, ``batch``)."""

    def score(self, batch: list[EditCase]) -> None:
        """Score the unedited model on the batch (locality references, ``_pre``), then its edited cases."""
        batch = self.editable(batch)
        if not batch:
            return
        editor = self.editor
        scorer = self.scorer()
        mine = editor.placement.scored_here(batch)  # every case edited, ``mine`` scored here
        answers: Answers = {}
        editor.peak_memory.enter("scoring", editor.model)
        with editor.placement.lockstep():
            reference = scorer.reference(mine)
            scores = scorer.score_unedited(mine, reference, editor.scoring.pre_edit, answers)
        editor.metrics.update(scores, "", answers)
        self.score_edited(batch, mine, scorer, reference)

    def score_edited(
        self, batch: list[EditCase], mine: list[EditCase], scorer: CaseScorer, reference: Reference
    ) -> None:
        """Edit the cases of ``batch`` and score ``mine`` (those this process scores) on the edited model."""
        raise NotImplementedError

    def edit_score_undo(
        self, groups: list[list[EditCase]], mine: list[EditCase], scorer: CaseScorer, reference: Reference
    ) -> None:
        """For each group of cases: apply it (in its editor calls), score its cases among ``mine``, undo it. After
        the group during which a stop signal arrived, the rest are left (:meth:`stop_if_requested` then raises)."""
        editor = self.editor
        here = {case.case_id for case in mine}
        for done, cases in enumerate(groups):
            if done and self.stopping():
                break
            answers: Answers = {}
            editor.peak_memory.enter("editing", editor.model)
            # every process's scoring forwards end (lockstep) before any undoes its shard of the edit
            with editor.edits_applied(requests_of(cases), editor_calls(cases)), editor.placement.lockstep():
                editor.peak_memory.enter("scoring", editor.model)
                scored = [case for case in cases if case.case_id in here]
                scores = scorer.score(scored, reference, self.contexts, answers=answers)
            editor.metrics.update(scores, "", answers)


class SingleProtocol(EditScoreUndo):
    """``single``: each case edited alone on the unedited model (or, with low-rank edits, all of a batch at once).

    Args:
        editor: the editor.
        batched_single: edit and score a batch's cases together when the editor's edits are low rank.
    """

    def __init__(self, editor: EditorModule, batched_single: bool = True):
        super().__init__(editor)
        self.batched_single = batched_single

    def score_edited(
        self, batch: list[EditCase], mine: list[EditCase], scorer: CaseScorer, reference: Reference
    ) -> None:
        editor = self.editor
        if not editor.edits_weights:  # nothing to apply: the cases are scored together
            return self.edit_score_undo([batch], mine, scorer, reference)
        chained = any(len(case.editor_calls) > 1 for case in batch)  # low-rank edits of the unedited model cannot chain
        if self.batched_single and not chained:
            editor.peak_memory.enter("editing", editor.model)
            rows = editor.low_rank_edits([case.requests for case in batch])
            editor.peak_memory.enter("scoring", editor.model)
            if rows is not None:
                answers: Answers = {}
                with editor.placement.lockstep(), rows:
                    owners = {case.case_id: owner for owner, case in enumerate(batch)}
                    scores = scorer.score(mine, reference, self.contexts, owners, answers=answers)
                editor.metrics.update(scores, "", answers)
                return
        self.edit_score_undo([[case] for case in batch], mine, scorer, reference)


class BatchProtocol(EditScoreUndo):
    """``batch``: the cases of one validation step (``edit_batch_size`` of them) edited together, scored, undone."""

    def score_edited(
        self, batch: list[EditCase], mine: list[EditCase], scorer: CaseScorer, reference: Reference
    ) -> None:
        self.edit_score_undo([batch], mine, scorer, reference)


class FitProtocol(ProtocolRunner):
    """``fit``: apply every training case, export the edited model, undo the edits.

    Args:
        editor: the editor.
        edit_batch_size: cases per editor call.
        output_dir: where the export goes; default ``<log dir>/edited_model``.
    """

    def __init__(self, editor: EditorModule, edit_batch_size: int, output_dir: str | None):
        super().__init__(editor)
        self.edit_batch_size = edit_batch_size
        self.output_dir = output_dir

    def run(self) -> None:
        editor = self.editor
        trainer = editor.trainer
        cases = loader_cases(trainer.datamodule.train_dataloader())  # every case, on every process
        if not all(isinstance(case, EditCase) for case in cases):  # MEND's training edits (EditTraining)
            data = type(trainer.datamodule).__name__
            raise ConfigError(
                f"{type(editor).__name__}'s fit edits the cases of a benchmark (e.g. --config "
                f"configs/benchmarks/counterfact.yaml), not the training edits of {data} (MEND trains on those)"
            )
        self.check_cases(cases)
        self.leave_out_requests(cases)
        cases = self.editable(cases)
        editor.peak_memory.enter("statistics", editor.model)
        self.prepare_statistics()
        undo = editor.prepare_undo(requests_of(cases))
        for applied in self.apply_in_order(cases, self.edit_batch_size, "edits"):
            self.stop_after(applied, len(cases), "edits", "the edits are not kept: run the same command again")
        editor.peak_memory.enter("exporting", editor.model)
        if trainer.is_global_zero:
            log_dir = Path(trainer.log_dir or trainer.default_root_dir)
            editor.export(Path(self.output_dir) if self.output_dir else log_dir / "edited_model", cases)
        editor.undo(undo)
