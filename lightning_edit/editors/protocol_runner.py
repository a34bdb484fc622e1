"""What every protocol runner shares: checking the cases, leaving out what the editor cannot edit, the statistics pass,
applying cases in order, and stopping on SIGTERM.

A runner (:mod:`lightning_edit.editors.protocols`, :mod:`lightning_edit.editors.sequential`) is owned by its editor
(``editor.runner``): the editor's Lightning hooks call :meth:`ProtocolRunner.start`, :meth:`ProtocolRunner.score` and
:meth:`ProtocolRunner.end`; the runner calls the editor's edit/undo contract, a
:class:`~lightning_edit.evaluation.CaseScorer` and the editor's :class:`~lightning_edit.editors.run_metrics.RunMetrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from lightning_edit.cases import EditCase, EditRequest, case_error, loader_cases
from lightning_edit.editors.in_context import InContextPrompts
from lightning_edit.errors import Interrupted
from lightning_edit.evaluation import CaseScorer
from lightning_edit.models.tokenization import encode_prompt_targets
from lightning_edit.stopping import in_step, stop_agreed, stop_requested

if TYPE_CHECKING:
    from lightning_edit.editors.base import EditorModule


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


def requests_of(cases: list[EditCase]) -> list[EditRequest]:
    """Every request of ``cases``, in order."""
    return [request for case in cases for request in case.requests]


def editor_calls(cases: list[EditCase]) -> list[list[EditRequest]]:
    """The requests of ``cases`` as editor calls: together, except those of a case that splits them (its calls)."""
    calls: list[list[EditRequest]] = [[]]
    for case in cases:
        if len(case.editor_calls) > 1:
            calls += [list(call) for call in case.editor_calls] + [[]]
        else:
            calls[-1] += case.requests
    return [call for call in calls if call]


def _check_length(case: EditCase, field: str, prompt: str, tokens: int, limit: int | None) -> None:
    if limit is not None and tokens > limit:
        raise case_error(
            case,
            field,
            f"the prompt {prompt[:60]!r}... is {tokens} tokens long with its answer, more than the model's {limit} "
            "positions: shorten it or leave the record out",
        )


class ProtocolRunner:
    """The base of the protocol runners; a protocol implements :meth:`score` (and :meth:`end` when it keeps edits).

    Args:
        editor: the editor whose edits the runner makes and scores.
    """

    def __init__(self, editor: EditorModule):
        self.editor = editor
        self.contexts: dict[int, str] = {}  # case id -> in-context text, built before any edit
        self.skipped_requests: list[dict[str, Any]] = []  # the requests the editor cannot edit, and why
        self.stream: list[dict[str, Any]] = []  # one record per sequential checkpoint (eval_at)
        self._left_out: dict[int, list[bool]] = {}  # case id -> which of its requests the editor edits

    # The validate/test loop -------------------------------------------------------------------------------------

    def start(self, loader: DataLoader) -> None:
        """Before the first batch: check the cases (:meth:`checked_cases`), then :meth:`prepare`."""
        self.checked_cases(loader)
        self.prepare()

    def checked_cases(self, loader: DataLoader) -> list[EditCase]:
        """Every case of ``loader`` (on every process), checked before any weight changes, with the requests the
        editor cannot edit listed (:meth:`leave_out_requests`) and the in-context texts built."""
        editor = self.editor
        cases = loader_cases(loader)
        if editor.in_context is not None:  # every case, so that a case the pool cannot serve stops every process
            pool = editor.trainer.datamodule.demonstration_cases(editor.in_context.pool_file)
            self.contexts = InContextPrompts(editor.in_context, editor.model, editor.tokenizer, pool).contexts(cases)
        self.check_cases(cases, self.contexts)
        editor.metrics.check_cases(cases)
        self.leave_out_requests(cases)
        return cases

    def prepare(self) -> None:
        """Start the metrics (every process) and run the statistics pass (:meth:`prepare_statistics`)."""
        self.editor.metrics.start()
        self.editor.peak_memory.enter("statistics", self.editor.model)
        self.prepare_statistics()

    def score(self, batch: list[EditCase]) -> None:
        """Edit (or not) and score one batch of cases, feeding the editor's metrics."""
        raise NotImplementedError

    def end(self) -> None:
        """After the last batch's metrics are computed."""

    def stop_if_requested(self, batch_idx: int) -> None:
        """After a batch during which a process received SIGTERM (the case being edited finished and was undone, the
        rest of the batch left; judge requests stop at once), raise :class:`~lightning_edit.errors.Interrupted` on
        every process: no results are written from a part of the cases."""
        editor = self.editor
        if stop_agreed(editor.trainer.strategy):
            judged = any(getattr(kind, "judge", None) is not None for kind in editor.metrics.score_kinds.values())
            cached = "; the judges' verdicts so far are cached" if judged else ""
            raise Interrupted(
                f"{self.stopped_while()} stopped by SIGTERM in batch {batch_idx + 1}; no results are written{cached}: "
                "run the same command again"
            )

    def stopped_while(self) -> str:
        """What a stop interrupted, for its message."""
        return f"editing ({self.editor.protocol})" if self.editor.edits_weights else "scoring"

    # Shared by the protocols ------------------------------------------------------------------------------------

    def check_cases(self, cases: list[EditCase], contexts: dict[int, str] | None = None) -> None:
        """Raise :class:`~lightning_edit.data.base.DataFormatError`, naming the file, record and field, if a request
        cannot be edited, a prompt (after its case's in-context text in ``contexts``) does not fit in the model's
        positions, or a score kind cannot score it (:meth:`~lightning_edit.scoring.kinds.ScoreKind.check`); called on
        every case before any weight changes."""
        limit = max_positions(self.editor.model)
        contexts = contexts or {}
        checks = []  # (case, field, prompt, answer): every request's target and every prompt's expected answer
        for case in cases:
            for request in case.requests:
                if not request.subject.strip():
                    raise case_error(case, "subject", "empty subject")
                checks.append((case, "target_new", request.filled_prompt, request.target_new))
            for name, group in case.groups.items():
                context = contexts.get(case.case_id, "")
                checks += [(case, name, context + p, expected) for p, expected in zip(group.prompts, group.expected)]
        encoded = encode_prompt_targets(self.editor.tokenizer, [c[2] for c in checks], [c[3] for c in checks])
        for (case, field, prompt, _), result in zip(checks, encoded):
            if isinstance(result, ValueError):
                raise case_error(case, field, str(result))
            _check_length(case, "prompt" if field == "target_new" else field, prompt, sum(map(len, result)), limit)
        for case, field, reason in self.scorer().check(cases, contexts, limit):
            raise case_error(case, field, reason)

    def prepare_statistics(self) -> None:
        """The editor's :meth:`~lightning_edit.editors.base.EditorModule.prepare_statistics`; with several processes,
        each first caches its share of the statistics pass and, once all have, merges the shards instead of running
        the whole pass (a cache shared by the processes). The processes of a sharded model run the whole pass
        together.

        A process stopped by a signal in its share still meets the others at the end of the shares (one
        :func:`~lightning_edit.stopping.stop_agreed`, in place of a barrier), so a process that finished its share
        stops too, instead of waiting for one that left."""
        editor = self.editor
        sharded = editor.placement.shard_mesh is not None
        if editor.trainer.world_size > 1 and not sharded:
            strategy = editor.trainer.strategy
            try:
                editor.compute_statistics_shard(editor.trainer.global_rank, editor.trainer.world_size)
            except Interrupted:
                stop_agreed(strategy)  # the others' decision below; this process stops with its own message
                raise
            if stop_agreed(strategy):
                signum = stop_requested()  # posted by the process that received it, before the all-reduce
                raise Interrupted(
                    f"key statistics pass stopped by signal {signum} after this process's share, which is cached: run "
                    "the same command again to resume",
                    signum,
                )
        with in_step(editor.trainer.strategy if sharded else None):
            editor.prepare_statistics()

    def leave_out_requests(self, cases: list[EditCase]) -> None:
        """List the requests of ``cases`` the editor cannot edit (``cannot_edit``) in :attr:`skipped_requests`
        (results.json's ``counts``); :meth:`editable` then leaves them out."""
        self._left_out = {}
        self.skipped_requests = []
        for case in cases:
            reasons = [self.editor.cannot_edit(request) for request in case.requests]
            if any(reasons):
                self._left_out[case.case_id] = [reason is None for reason in reasons]
                self.skipped_requests += [
                    {"case_id": case.case_id, "source": case.source, "request": position, "reason": reason}
                    for position, reason in enumerate(reasons)
                    if reason
                ]
        if self.skipped_requests:
            unscored = sum(not any(kept) for kept in self._left_out.values())
            first = self.skipped_requests[0]
            rank_zero_warn(
                f"{type(self.editor).__name__} cannot edit {len(self.skipped_requests)} requests (first: "
                f"{first['source']}: {first['reason']}); they are left out, {unscored} cases with no other request "
                "are not scored: listed under counts.skipped_requests"
            )

    def editable(self, cases: list[EditCase]) -> list[EditCase]:
        """``cases`` without the requests :meth:`leave_out_requests` listed; a case left with none is dropped."""
        left_out = self._left_out
        kept = [case.keeping(left_out[case.case_id]) if case.case_id in left_out else case for case in cases]
        return [case for case in kept if case.requests]

    def scorer(self) -> CaseScorer:
        """A scorer of the editor's model as it is now, with the benchmark's score kinds."""
        editor = self.editor
        return CaseScorer(editor.model, editor.tokenizer, editor.scoring, editor.metrics.score_kinds)

    def apply_in_order(
        self, cases: list[EditCase], edit_batch_size: int, description: str, first: int = 0
    ) -> Iterator[int]:
        """Apply ``cases[first:]`` cumulatively, ``edit_batch_size`` per editor call; yields the number of cases
        applied so far after each call (the caller checks for a stop there: :meth:`stop_after`)."""
        editor = self.editor
        bar = tqdm(total=len(cases), desc=description, unit="case", disable=not editor.shows_progress, leave=False)
        with bar:
            bar.update(first)
            for start in range(first, len(cases), edit_batch_size):
                chunk = cases[start : start + edit_batch_size]
                editor.peak_memory.enter("editing", editor.model)
                for call in editor_calls(chunk):
                    editor.apply_edits(call)
                bar.update(len(chunk))
                yield start + len(chunk)

    def stop_after(self, applied: int, total: int, description: str, saved: str) -> None:
        """After the editor call during which SIGTERM arrived (on any process: every process stops after the same
        call, :func:`~lightning_edit.stopping.stop_agreed`), raise :class:`~lightning_edit.errors.Interrupted`."""
        if stop_agreed(self.editor.trainer.strategy):
            raise Interrupted(f"{description} stopped by SIGTERM after {applied} of {total} cases; {saved}")

    def stopping(self) -> bool:
        """Whether to stop between two cases of a batch: the processes of a sharded model edit them in step and
        decide together; others edit their own cases and stop on their own (the end of the batch then agrees)."""
        if self.editor.placement.shard_mesh is not None:
            return stop_agreed(self.editor.trainer.strategy)
        return stop_requested() is not None
