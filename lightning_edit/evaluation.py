"""Score the prompt groups of edit cases: every computation they need, each run once, batched.

:class:`CaseScorer` turns :class:`~lightning_edit.cases.EditCase` prompt groups into per-prompt scores of the
kinds each group asks for. A kind (:mod:`lightning_edit.scoring.kinds`) says what it needs computed; requests shared
between kinds (the expected answer is read by ``prob``, ``token_acc``, ``logprob`` and ``agreement``) are run once,
in one batched pass per request type. The unedited model's results (:meth:`CaseScorer.reference`) serve locality by
agreement, BAKE's pre-edit filter and the ``<metric>_pre`` reports; an in-context editor's text is put before each
prompt of its case.

Every forward the scorer runs, of any request type, is checked for finite logits (:func:`finite_logits`): NaN or
inf logits stop the run with a :class:`NonFiniteLogitsError` naming the first case they appear in, so a diverged
edit never scores 0 silently (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.cases import EditCase, PromptGroup, case_error
from lightning_edit.errors import UserError
from lightning_edit.models.sharding import is_sharded
from lightning_edit.models.tokenization import format_prompt
from lightning_edit.scoring import TargetScore
from lightning_edit.scoring.kinds import BUILTIN_KINDS, PromptItem, Request, ScoreKind, Stage, Target, run_requests

# the unedited model's result of every request the reference asked for
Reference = dict[Request, Any]
# metric name -> (score kind, [(case id, prompt index, score), ...]); a score is None when missing (a judge's verdict)
Scores = dict[str, tuple[str, list[tuple[int, int, float | None]]]]
# metric name -> [(case id, prompt index, the text the model answered), ...]
Answers = dict[str, list[tuple[int, int, str]]]


class NonFiniteLogitsError(UserError):
    """The model gave NaN or inf logits on a prompt being scored; names its file, record and group. The run stops: a
    score read off such logits (every comparison false, every argmax token 0) would be a wrong result."""


class NonFiniteLogits(Exception):
    """A forward under :func:`finite_logits` gave NaN or inf logits (the scorer turns it into a
    :class:`NonFiniteLogitsError` naming the case)."""


@contextmanager
def finite_logits(model: nn.Module) -> Iterator[None]:
    """Raise :class:`NonFiniteLogits` from any forward of ``model`` inside the block whose logits (the output
    embedding's output, or the model's) hold a NaN or +inf, or are −inf at every token of a position (−inf alone is a
    token of probability 0: the distribution is still defined)."""

    def check(module: nn.Module, args: Any, output: Any) -> None:
        logits = getattr(output, "logits", output)
        if isinstance(logits, torch.Tensor) and not bool(torch.isfinite(logits.amax(-1)).all()):  # amax keeps NaN
            raise NonFiniteLogits

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    handle = (model if head is None else head).register_forward_hook(check)
    try:
        yield
    finally:
        handle.remove()


@dataclass
class ScoringConfig:
    """How evaluation prompts are scored.

    Args:
        sequences_per_forward: sequences (a prompt with its target, or a prompt to continue) per forward pass.
        chat_template: format every prompt as one user turn of the tokenizer's chat template (instruct models).
            Off by default, as in the papers; note EasyEdit applies it to all but locality prompts.
        generation_max_length: tokens of prompt + generated text for generation metrics (ROME: 100).
        generation_top_k: generation metrics sample with top-k (ROME: 5).
        seed: generation for case ``i`` is seeded with ``seed + case_id``, so it does not depend on batching or
            on the number of processes.
        pre_edit: also score every metric on the unedited model, reported as ``<metric>_pre`` (groups that ask
            for it, such as BAKE's log-probability analysis, always are).
    """

    sequences_per_forward: int = 32
    chat_template: bool = False
    generation_max_length: int = 100
    generation_top_k: int = 5
    seed: int = 0
    pre_edit: bool = False


class CaseScorer:
    """Scores edit cases' prompt groups with one model; ``kinds``: the score kinds the groups name (the benchmark's
    :attr:`~lightning_edit.data.base.EditDataModule.score_kinds`; default: the built-in ones)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: ScoringConfig,
        kinds: Mapping[str, ScoreKind] = BUILTIN_KINDS,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.kinds = kinds

    def _prompt(self, prompt: str) -> str:
        return format_prompt(self.tokenizer, prompt, self.config.chat_template)

    def _items(
        self, case: EditCase, name: str, group: PromptGroup, context: str = "", stage: Stage = "post"
    ) -> Iterator[PromptItem]:
        for k, prompt in enumerate(group.prompts):
            yield PromptItem(
                case_id=case.case_id,
                group=name,
                index=k,
                prompt=self._prompt(context + prompt),
                bare_prompt=self._prompt(prompt),
                expected=group.expected[k],
                alternative=None if group.alternatives is None else group.alternatives[k],
                details={} if group.details is None else group.details[k],
                stage=stage,
                chat_template=self.config.chat_template,
            )

    def check(
        self, cases: list[EditCase], contexts: dict[int, str] | None = None, positions: int | None = None
    ) -> Iterator[tuple[EditCase, str, str]]:
        """``(case, group name, reason)`` for each prompt a kind of its group cannot score on a model of ``positions``
        maximum positions (:meth:`ScoreKind.check`)."""
        contexts = contexts or {}
        for case in cases:
            for name, group in case.groups.items():
                kinds = [self.kinds[kind] for kind in group.metrics]
                kinds = [kind for kind in kinds if type(kind).check is not ScoreKind.check]  # those that check
                for item in self._items(case, name, group, contexts.get(case.case_id, "")) if kinds else ():
                    for kind in kinds:
                        try:
                            kind.check(item, self.tokenizer, positions)
                        except ValueError as error:
                            yield case, name, str(error)

    def _run(
        self, cases: list[EditCase], asked: list[tuple[PromptItem, Request]], owners: dict[int, int] | None = None
    ) -> dict[Any, Any]:
        """The results of the ``asked`` requests (each with the prompt that asks it), checked for finite logits."""
        try:
            return self._run_checked(asked, owners)
        except NonFiniteLogits:
            item = self._first_non_finite(asked, owners)
        case = next(case for case in cases if case.case_id == item.case_id)
        if item.stage == "pre":
            reason = "the unedited model's logits are non-finite (NaN/inf): check its weights and dtype"
        else:
            reason = (
                f"the edit of case {item.case_id} made the model's logits non-finite (NaN/inf) (under batch or "
                "sequential: the edits up to it)"
            )
        raise NonFiniteLogitsError(f"{case_error(case, item.group, reason)}; the run stops, no results are written")

    def _run_checked(self, asked: list[tuple[PromptItem, Request]], owners: dict[int, int] | None) -> dict[Any, Any]:
        requests = [request for _, request in asked]
        owner_list = None if owners is None else [owners[item.case_id] for item, _ in asked]
        with finite_logits(self.model):
            return run_requests(self.model, self.tokenizer, requests, self.config.sequences_per_forward, owner_list)

    def _first_non_finite(self, asked: list[tuple[PromptItem, Request]], owners: dict[int, int] | None) -> PromptItem:
        """The first prompt whose requests alone give non-finite logits (run again prompt by prompt; on a sharded
        model, whose forwards are collectives, the first prompt asked)."""
        by_prompt: dict[tuple[int, str, int], list[tuple[PromptItem, Request]]] = {}
        for item, request in asked:
            by_prompt.setdefault((item.case_id, item.group, item.index), []).append((item, request))
        for pairs in by_prompt.values() if not is_sharded(self.model) else ():
            try:
                self._run_checked(pairs, owners)
            except NonFiniteLogits:
                return pairs[0][0]
        return asked[0][0]

    def reference(self, cases: list[EditCase]) -> Reference:
        """The current (unedited) model's results of every request the cases' kinds and pre-edit filters ask of it."""
        asked: list[tuple[PromptItem, Request]] = []
        for case in cases:
            for name, group in case.groups.items():
                kinds = [self.kinds[kind] for kind in group.metrics]
                for item in self._items(case, name, group, stage="pre"):
                    for kind in kinds:
                        asked += [(item, request) for request in kind.reference_requests(item, self.config)]
                    if group.pre_edit_filter:
                        asked += [(item, request) for request in _filter_requests(item)]
        return self._run(cases, asked)

    def score(
        self,
        cases: list[EditCase],
        reference: Reference | None = None,
        contexts: dict[int, str] | None = None,
        owners: dict[int, int] | None = None,
        stage: Stage = "post",
        answers: Answers | None = None,
    ) -> Scores:
        """Per-prompt scores of every metric of every case, with the model as it is now (``stage``: see
        :class:`~lightning_edit.scoring.kinds.PromptItem`).

        ``reference`` holds the unedited model's results (needed by ``agreement`` and filtered groups);
        ``contexts`` maps a case id to a text put before each of its prompts (in-context editing); ``owners`` maps
        a case id to the owner of its :class:`~lightning_edit.models.row_updates.RowUpdates` (each case scored on
        its own edit, all in shared batches); ``answers``, when given, receives the texts the model answered (kinds
        that generate one, :meth:`~lightning_edit.scoring.kinds.ScoreKind.answer`) per metric.
        """
        contexts = contexts or {}
        slots: list[tuple[PromptItem, PromptGroup, list[tuple[ScoreKind, str, list[Request]]]]] = []
        for case in cases:
            for name, group in case.groups.items():
                for item in self._items(case, name, group, contexts.get(case.case_id, ""), stage):
                    asks = [(self.kinds[kind], metric, []) for kind, metric in group.metrics.items()]
                    for kind, _, requests in asks:
                        requests += kind.requests(item, self.config)
                    slots.append((item, group, asks))
        asked = [(item, request) for item, _, asks in slots for *_, requests in asks for request in requests]
        current = self._run(cases, asked, owners)

        def result(item: PromptItem, request: Request) -> Any:
            return current[request] if owners is None else current[owners[item.case_id], request]

        results: Scores = {}
        offsets = _prompt_offsets(cases)
        for item, group, asks in slots:
            if group.pre_edit_filter:
                left_out = not _prefers_alternative(*_unedited(reference, item, _filter_requests(item)))
                results.setdefault(f"{item.group}_filtered", ("filtered", []))[1].append(
                    (item.case_id, item.index, float(left_out))
                )
                if left_out:
                    continue
            for kind, metric, requests in asks:
                unedited = _unedited(reference, item, kind.reference_requests(item, self.config))
                current_results = [result(item, request) for request in requests]
                value = kind.value(item, current_results, unedited)
                index = offsets[item.case_id, item.group, metric] + item.index  # the prompt's place in its metric
                results.setdefault(metric, (kind.name, []))[1].append((item.case_id, index, value))
                if answers is not None and (text := kind.answer(item, current_results)) is not None:
                    answers.setdefault(metric, []).append((item.case_id, index, text))
        return results

    def score_unedited(
        self, cases: list[EditCase], reference: Reference, every_group: bool = False, answers: Answers | None = None
    ) -> Scores:
        """Scores of the groups marked ``pre_edit`` (or of every group), named ``<metric>_pre`` (and so are their
        ``answers``); call it before any edit, with the reference of the same unedited model."""
        selected = [
            replace(case, groups={name: g for name, g in case.groups.items() if every_group or g.pre_edit})
            for case in cases
        ]
        texts: Answers = {}
        scores = self.score(selected, reference, stage="pre", answers=texts)
        if answers is not None:
            answers.update({f"{name}_pre": rows for name, rows in texts.items()})
        return {f"{name}_pre": value for name, value in scores.items()}


def prompt_weights(cases: list[EditCase]) -> dict[tuple[str, int, int], float]:
    """``(metric, case id, prompt index) -> weight`` of the prompts of groups weighted other than 1
    (:attr:`~lightning_edit.cases.PromptGroup.weight`), indexed as :meth:`CaseScorer.score` indexes them."""
    offsets = _prompt_offsets(cases)
    weights: dict[tuple[str, int, int], float] = {}
    for case in cases:
        for name, group in case.groups.items():
            if group.weight != 1.0:
                for metric in group.metrics.values():
                    start = offsets[case.case_id, name, metric]
                    weights.update({(metric, case.case_id, start + k): group.weight for k in range(len(group.prompts))})
    return weights


def _prompt_offsets(cases: list[EditCase]) -> dict[tuple[int, str, str], int]:
    """``(case id, group, metric) -> the place of the group's first prompt among the case's prompts of that metric``:
    groups that report one metric (RULE-EDIT's neighbourhood and distracting prompts both give Loc) number their
    prompts on, in group order, so no two prompts of a case share a (case, prompt index) row of a metric."""
    offsets: dict[tuple[int, str, str], int] = {}
    for case in cases:
        counts: dict[str, int] = {}
        for name, group in case.groups.items():
            for metric in group.metrics.values():
                offsets[case.case_id, name, metric] = counts.get(metric, 0)
                counts[metric] = counts.get(metric, 0) + len(group.prompts)
    return offsets


def _filter_requests(item: PromptItem) -> list[Request]:
    """What BAKE's pre-edit filter asks of the unedited model: both answers of the prompt."""
    return [Target(item.bare_prompt, item.expected), Target(item.bare_prompt, item.alternative)]


def _prefers_alternative(expected: TargetScore, alternative: TargetScore) -> bool:
    """BAKE's filter: the unedited model did not find the expected answer more likely (NLL ties are kept)."""
    return not alternative.nll > expected.nll


def _unedited(reference: Reference | None, item: PromptItem, requests: list[Request]) -> list[Any]:
    """The unedited model's results of ``requests``, or an error saying the reference is missing."""
    if requests and (reference is None or any(request not in reference for request in requests)):
        raise ValueError(f"case {item.case_id}, group {item.group!r}: scoring needs the unedited model's reference")
    return [reference[request] for request in requests] if requests else []
