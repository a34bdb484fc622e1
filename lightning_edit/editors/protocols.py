"""The edit protocols: how edits meet evaluation (a part of :class:`~lightning_edit.editors.base.EditorModule`).

- ``single``: each case is applied to the unedited model, scored, and undone (bit-identical); when the editor's
  edits are low rank (:meth:`EditorModule.low_rank_edits`) the cases of a batch are instead computed together and
  scored in one pass where each case's rows see its own update (``batched_single``, docs/methods.md#batched-single);
- ``batch``: the cases of one dataloader batch (``data.batch_size``) are applied together, each is scored on
  that model, then they are undone;
- ``sequential``: before evaluation, every case is applied cumulatively, ``edit_batch_size`` cases per editor
  call, in dataset order; all cases are then scored on the final model (the WISE/AlphaEdit "T edits, then
  evaluate" protocol), and, for each n in ``eval_at``, the first n cases are also scored right after the n-th
  edit (reported as ``<metric>@<n>``, the retention curve; with ``eval_sample`` a seeded sample of at most that many
  of them), and the editing time and peak memory so far are recorded (results.json's ``stream``). Every edit is undone
  after the run.

Under every protocol, the requests of a case that splits them into editor calls (``EditCase.calls``: RULE-EDIT's
instance editing, one request per call; DMLE's staged edits, two then one) are applied in those calls, in order;
other cases' requests go to the editor together.

``edit_batch_size`` belongs to ``sequential`` (and ``fit``): under ``single`` each case is edited alone and under
``batch`` the cases of one data batch together, so there it is ignored, with a logged note (a method config written
for ``sequential`` composes with ``--model.protocol single``).

``fit`` applies every case of the benchmark (as the sequential protocol does, ``edit_batch_size`` per call) in
``on_fit_start``, exports the result (``export``: by default the edited model as safetensors with ``edits.json``,
the record of the edits it holds) to ``output_dir``, and undoes the edits, so the module in memory is the unedited
model again; no training step runs. Trainable editors (MEND) override this with an ordinary training loop.

Locality (``agreement``) metrics, BAKE's pre-edit filter and the ``<metric>_pre`` reports use the model before any
edit of the run. With ``in_context``, each case's in-context text (built before any edit) is put before its
evaluation prompts, on top of the weight edit. Every case is checked (:meth:`ProtocolRunner.check_cases`) before any
weight changes.

Several processes (``--trainer.devices N``, any strategy Lightning launches) split the dataloader's batches of
cases between them and give exactly the numbers of one process: under ``single`` and ``batch`` each process edits
its own copy of the model for its own batches; under ``sequential`` every process applies every edit (the same
deterministic computation) and then takes the weights of process 0, so all hold one edited model, and scores its
own batches (the parameters the undo restores and any state the edits added are taken from process 0). A case the
distributed sampler repeats is counted once.

Under ``ModelParallelStrategy`` the processes of one machine share one model, sharded
(:mod:`lightning_edit.editors.placement`, docs/sharding.md): they see the same batches and make every edit together,
and each scores its share of a batch's cases (``scored_here``), its forwards kept in step with the others'
(``lockstep``). A model spread by ``lm.device_map`` runs in one process, as a whole one does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from lightning_edit.cases import EditCase, EditRequest, case_error, loader_cases
from lightning_edit.editors.in_context import InContextPrompts
from lightning_edit.editors.placement import ModelPlacement
from lightning_edit.editors.stream_health import StreamHealth, heldout_nll, heldout_record, weight_norms
from lightning_edit.errors import ConfigError, Interrupted
from lightning_edit.evaluation import Answers, CaseScorer
from lightning_edit.models.sharding import broadcast_shards
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.models.tokenization import encode_prompt_targets
from lightning_edit.stopping import in_step, stop_agreed, stop_requested


class Undo(Protocol):
    """How to take edits back (returned by :meth:`~lightning_edit.editors.base.EditorModule.prepare_undo`); ``names``:
    the parameters :meth:`restore` writes back (shared from process 0 after sequential edits)."""

    names: list[str]

    def restore(self) -> None:
        """Return the model to its state when this undo was made (bit-identical)."""


def max_positions(model: nn.Module) -> int | None:
    """The model's maximum positions (``n_positions`` / ``max_position_embeddings``), None when it has none."""
    config = getattr(model, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def checkpoint_sample(n: int, size: int | None, total: int, seed: int = 0) -> list[int]:
    """Positions (< n, ascending) scored at the checkpoint after n edits of ``total``: all of them, or the ``size`` of
    them that come first in one seeded random order of all positions (so a later checkpoint keeps the earlier
    sample's cases unless later ones come before them in that order)."""
    if size is None or n <= size:
        return list(range(n))
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted([position for position in order if position < n][:size])


def _check_length(case: EditCase, field: str, prompt: str, tokens: int, limit: int | None) -> None:
    if limit is not None and tokens > limit:
        raise case_error(
            case,
            field,
            f"the prompt {prompt[:60]!r}... is {tokens} tokens long with its answer, more than the model's {limit} "
            "positions: shorten it or leave the record out",
        )


class ProtocolRunner(ModelPlacement):
    """The protocol part of :class:`~lightning_edit.editors.base.EditorModule`: the validate and fit loops around the
    editor's edit/undo contract (the editor sets ``protocol``, ``edit_batch_size``, ``eval_at``, ``scoring``,
    ``in_context``, ``batched_single`` and ``output_dir``)."""

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

    def _prepare(self) -> None:
        """:meth:`prepare_statistics`; with several processes, each first caches its share of the statistics pass and,
        once all have, merges the shards instead of running the whole pass (a cache shared by the processes). The
        processes of a sharded model run the whole pass together."""
        if self.trainer.world_size > 1 and self.shard_mesh is None:
            self.compute_statistics_shard(self.trainer.global_rank, self.trainer.world_size)
            self.trainer.strategy.barrier("key statistics")
        with in_step(self.trainer.strategy if self.shard_mesh is not None else None):
            self.prepare_statistics()

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

    def _leave_out_requests(self, cases: list[EditCase]) -> None:
        """List the requests of ``cases`` the editor cannot edit (:meth:`cannot_edit`) in :attr:`skipped_requests`
        (results.json's ``counts``); :meth:`_editable` then leaves them out."""
        self._left_out = {}
        self.skipped_requests = []
        for case in cases:
            reasons = [self.cannot_edit(request) for request in case.requests]
            if any(reasons):
                self._left_out[case.case_id] = [reason is None for reason in reasons]
                self.skipped_requests += [
                    {"case_id": case.case_id, "source": case.source, "request": position, "reason": reason}
                    for position, reason in enumerate(reasons)
                    if reason
                ]
        if self.skipped_requests:
            unscored = sum(not any(kept) for kept in self._left_out.values())
            rank_zero_warn(
                f"{type(self).__name__} cannot edit {len(self.skipped_requests)} requests (first: "
                f"{self.skipped_requests[0]['source']}: {self.skipped_requests[0]['reason']}); they are left out, "
                f"{unscored} cases with no other request are not scored: listed under counts.skipped_requests"
            )

    def _editable(self, cases: list[EditCase]) -> list[EditCase]:
        """``cases`` without the requests :meth:`_leave_out_requests` listed; a case left with none is dropped."""
        left_out = self._left_out
        kept = [case.keeping(left_out[case.case_id]) if case.case_id in left_out else case for case in cases]
        return [case for case in kept if case.requests]

    def _scorer(self) -> CaseScorer:
        return CaseScorer(self.model, self.tokenizer, self.scoring, self.score_kinds)

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

        After the editor call during which SIGTERM arrived (on any process: every process stops after the same call,
        :func:`~lightning_edit.stopping.stop_agreed`), raises :class:`~lightning_edit.errors.Interrupted`.
        """
        with self._progress(len(cases), description) as bar:
            for start in range(0, len(cases), self.edit_batch_size):
                chunk = cases[start : start + self.edit_batch_size]
                self.peak_memory.enter("editing", self.model)
                for call in self._editor_calls(chunk):
                    self.apply_edits(call)
                bar.update(len(chunk))
                applied = start + len(chunk)
                if stop_agreed(self.trainer.strategy):
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
            names = sorted(set(undo.names) | (set(state) - before))
            if self.shard_mesh is not None:  # each shard from its replica on the first machine
                return broadcast_shards([state[name] for name in names], self._device_mesh["data_parallel"])
            for name in names:
                state[name].data.copy_(self.trainer.strategy.broadcast(state[name].data, src=0))

    def _apply_sequentially(self, cases: list[EditCase], local: list[EditCase]) -> None:
        """Sequential protocol: apply every case cumulatively, scoring the prefixes in ``eval_at``.

        ``local`` are the cases this process scores; every process applies all of ``cases``.
        """
        scorer, local = self._scorer(), self.scored_here(local)
        answers: Answers = {}
        self.peak_memory.enter("scoring", self.model)
        with self.lockstep():
            reference = scorer.reference(local)
            scores = scorer.score_unedited(local, reference, self.scoring.pre_edit, answers)
        self._update_metrics(scores, answers=answers)
        health = self.stream_health if self.eval_at else StreamHealth(perplexity=False, weight_norms=False)
        windows = health.windows(self.tokenizer, max_positions(self.model)) if health.perplexity else []
        if windows:
            with self.lockstep():
                unedited = heldout_nll(self.model, windows)
        before = set(self.model.state_dict())
        start_parameters = {key for name, parameter in self.model.named_parameters() for key in (name, id(parameter))}
        undo = self.prepare_undo(self._requests(cases))
        self._sequential = (undo, reference)
        positions = {case.case_id: position for position, case in enumerate(cases)}
        previous = 0
        start = time.perf_counter()
        scoring_seconds = 0.0
        self.stream = []
        for applied in self._apply_in_order(cases, "sequential edits"):
            for n in self.eval_at:
                if previous < n <= applied:
                    edit_seconds = time.perf_counter() - start - scoring_seconds
                    memory = self.peak_memory.record(self.model)
                    self.stream.append({"edits": applied, "edit_seconds": edit_seconds, **memory})
                    self._share_edited_state(undo, before)
                    self.peak_memory.enter("scoring", self.model)
                    if windows:
                        with self.lockstep():
                            nll = heldout_nll(self.model, windows)
                        self.stream[-1]["heldout"] = heldout_record(nll, unedited, sum(map(len, windows)))
                    if health.weight_norms:
                        start_weights = undo if isinstance(undo, WeightSnapshot) else None
                        self.stream[-1]["weights"] = weight_norms(self.model, start_weights, start_parameters)
                    scored = set(checkpoint_sample(n, self.eval_sample, len(cases)))
                    prefix = [case for case in local if positions[case.case_id] in scored]
                    answers = {}
                    with self.lockstep():
                        scores = scorer.score(prefix, reference, self._contexts, answers=answers)
                    self._update_metrics(scores, f"@{n}", answers)
                    scoring_seconds = time.perf_counter() - start - edit_seconds
            previous = applied
        self._share_edited_state(undo, before)

    def on_fit_start(self) -> None:
        """Closed-form editing: apply every training case, export the result, undo the edits, and end the fit."""
        cases = loader_cases(self.trainer.datamodule.train_dataloader())  # every case, on every process
        if not all(isinstance(case, EditCase) for case in cases):  # MEND's training edits (EditTraining)
            data = type(self.trainer.datamodule).__name__
            raise ConfigError(
                f"{type(self).__name__}'s fit edits the cases of a benchmark (e.g. --config "
                f"configs/benchmarks/counterfact.yaml), not the training edits of {data} (MEND trains on those)"
            )
        self.check_cases(cases)
        self._leave_out_requests(cases)
        cases = self._editable(cases)
        self.peak_memory.enter("statistics", self.model)
        self._prepare()
        undo = self.prepare_undo(self._requests(cases))
        for _ in self._apply_in_order(cases, "edits"):
            pass
        self.peak_memory.enter("exporting", self.model)
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

    def _check_eval_at(self, edits: int) -> None:
        """A checkpoint of ``eval_at`` after more edits than the stream makes would score nothing (an n/a row)."""
        beyond = [n for n in self.eval_at if n > edits]
        if beyond:
            raise ConfigError(
                f"model.eval_at={self.eval_at}: {beyond} beyond the {edits} cases the sequential stream edits; a "
                "checkpoint is a number of edits, at most the stream's length (more cases: --data.limit)"
            )

    def _start(self, loader: DataLoader) -> None:
        self._note_ignored_settings()
        self._check_batch_limit(loader)
        cases = loader_cases(loader)
        if self.in_context is not None:  # every case, so that a case the pool cannot serve stops every process
            pool = self.trainer.datamodule.demonstration_cases(self.in_context.pool_file)
            self._contexts = InContextPrompts(self.in_context, self.model, self.tokenizer, pool).contexts(cases)
        self.check_cases(cases, self._contexts)  # every case, on every process, before any weight changes
        self._check_declared(cases)
        self._leave_out_requests(cases)
        self._check_eval_at(len(self._editable(cases)))
        for name in self.metrics:  # an empty update on every process: the gathered states then share dtypes
            self._update_metrics({name: (self.metric_kinds[name], [])})
        self.peak_memory.enter("statistics", self.model)
        self._prepare()
        if self.protocol == "sequential":
            self._apply_sequentially(self._editable(cases), self._editable(loader_cases(loader, local=True)))

    def on_validation_start(self) -> None:
        self._start(self.trainer.val_dataloaders)

    def on_test_start(self) -> None:
        self._start(self.trainer.test_dataloaders)

    def validation_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self._score(batch)
        self._stop_if_requested(batch_idx)

    def _score(self, batch: list[EditCase]) -> None:
        """Score a batch of cases under the protocol (edited, scored and undone, or scored after the sequence)."""
        batch = self._editable(batch)
        if not batch:
            return
        scorer = self._scorer()
        mine = self.scored_here(batch)  # every case edited, ``mine`` scored here
        here = {case.case_id for case in mine}
        answers: Answers = {}
        self.peak_memory.enter("scoring", self.model)
        if self._sequential is not None:
            with self.lockstep():
                scores = scorer.score(mine, self._sequential[1], self._contexts, answers=answers)
            self._update_metrics(scores, "", answers)
            return
        with self.lockstep():
            reference = scorer.reference(mine)
            scores = scorer.score_unedited(mine, reference, self.scoring.pre_edit, answers)
        self._update_metrics(scores, "", answers)
        chained = any(len(case.editor_calls) > 1 for case in batch)  # low-rank edits of the unedited model cannot chain
        if self.protocol == "single" and self.edits_weights and self.batched_single and not chained:
            self.peak_memory.enter("editing", self.model)
            rows = self.low_rank_edits([case.requests for case in batch])
            self.peak_memory.enter("scoring", self.model)
            if rows is not None:
                answers = {}
                with self.lockstep(), rows:
                    owners = {case.case_id: owner for owner, case in enumerate(batch)}
                    scores = scorer.score(mine, reference, self._contexts, owners, answers=answers)
                self._update_metrics(scores, "", answers)
                return
        if self.protocol == "single" and self.edits_weights:
            edit_groups = [[case] for case in batch]
        else:
            edit_groups = [batch]
        for done, cases in enumerate(edit_groups):
            if done and self._stopping():  # after the case during which a stop signal arrived
                break
            answers = {}
            self.peak_memory.enter("editing", self.model)
            # every process's scoring forwards end (lockstep) before any undoes its shard of the edit
            with self.edits_applied(self._requests(cases), self._editor_calls(cases)), self.lockstep():
                self.peak_memory.enter("scoring", self.model)
                scored = [case for case in cases if case.case_id in here]
                scores = scorer.score(scored, reference, self._contexts, answers=answers)
            self._update_metrics(scores, "", answers)

    def _stopping(self) -> bool:
        """Whether to stop between two cases of a batch: the processes of a sharded model edit them in step and
        decide together; others edit their own cases and stop on their own (the end of the batch then agrees)."""
        if self.shard_mesh is not None:
            return stop_agreed(self.trainer.strategy)
        return stop_requested() is not None

    def _stop_if_requested(self, batch_idx: int) -> None:
        """After a batch during which a process received SIGTERM (the case being edited finished and was undone, the
        rest of the batch left; judge requests stop at once), raise :class:`~lightning_edit.errors.Interrupted` on
        every process: no results are written from a part of the cases."""
        if stop_agreed(self.trainer.strategy):
            edited = f"editing ({self.protocol})" if self.edits_weights else "scoring"
            edited = "scoring the edited model" if self._sequential is not None else edited
            judged = any(getattr(kind, "judge", None) is not None for kind in self.score_kinds.values())
            cached = "; the judges' verdicts so far are cached" if judged else ""
            raise Interrupted(
                f"{edited} stopped by SIGTERM in batch {batch_idx + 1}; no results are written{cached}: run the same "
                "command again"
            )

    def test_step(self, batch: list[EditCase], batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_validation_epoch_end(self) -> None:
        """The metrics (``super()``); then, after a sequential run, every edit is undone."""
        super().on_validation_epoch_end()
        if self._sequential is not None:
            self.undo(self._sequential[0])
            self._sequential = None
