"""Edit cases: what a benchmark hands to an editor and to the scorer, and how they are batched.

The bottom layer: every part of the package may import it; it imports nothing of the package but its errors.

An :class:`EditCase` holds the edit request(s) of one benchmark record and named groups of evaluation prompts.
Each :class:`PromptGroup` says, per prompt, which answer is expected (and, for probability comparison, which
answer competes with it) and which metrics score it: ``{"prob": "ES", "token_acc": "rewrite_acc"}`` maps a
score kind to the name the benchmark reports it under.

Score kinds are named (:mod:`lightning_edit.scoring.kinds`; conventions in docs/metrics.md): ``prob`` (probability
comparison), ``token_acc`` (teacher-forced token accuracy), ``agreement`` (argmax agreement with the unedited model),
``entropy`` (n-gram entropy of a sampled text), ``logprob`` (mean log-probability), and the benchmark's own kinds. A
group may carry per-prompt ``details`` that its own kinds read (options, references, ...); the benchmark checks that
its kinds can score each group when it reads its cases.

Two group options concern the unedited model: ``pre_edit_filter`` keeps a prompt only if the unedited model
preferred the alternative (the original answer) over the expected one (BAKE's filter for reverse prompts; the
prompts left out are counted as ``<group>_filtered``), and ``pre_edit`` also reports the group's metrics as scored
on the unedited model, under ``<metric>_pre``.

Every case is checked as it is built (:func:`prompt_fault`, so a new benchmark gets the check for free): a blank
prompt (empty or whitespace only) and a group with metrics but no prompts (an empty list: the case would drop out of
those metrics unseen) are :class:`DataFormatError` naming the file, record and field. A benchmark that leaves bad
records out (ScEdit, RULE-EDIT) lists such a record under ``counts.skipped_records``; the others stop on it.

:class:`EditBatches` serves cases in batches of consecutive cases (the unit processes share), :class:`TrainingEdit` is
one example of a trainable editor's training data (MEND), and :func:`case_error` names the file and record of a case.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from torch.utils.data import DataLoader, Dataset

from lightning_edit.errors import ConfigError, DataFormatError


@dataclass(frozen=True)
class EditRequest:
    """One fact to write into the model.

    Args:
        prompt: template with ``{}`` where the subject goes, e.g. ``"The mother tongue of {} is"``; a prompt without
            ``{}`` is one that does not hold the subject (some RuleEdit-200 instance prompts), which editors that
            locate the subject leave out (:meth:`~lightning_edit.editors.base.EditorModule.cannot_edit`).
        subject: the subject string, e.g. ``"Danielle Darrieux"``.
        target_new: the new object, scored with a leading space, e.g. ``"English"``.
        target_true: the object the model is expected to know before the edit (None when unknown, as in zsRE).
        extra: optional fields of the record (relation id, ...), kept for reporting.
    """

    prompt: str
    subject: str
    target_new: str
    target_true: str | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def subject_in_prompt(self) -> bool:
        """Whether the prompt holds the subject (a ``{}``)."""
        return "{}" in self.prompt

    @property
    def filled_prompt(self) -> str:
        """The prompt with the subject in place of ``{}``."""
        return self.prompt.replace("{}", self.subject, 1)


@dataclass(frozen=True)
class PromptGroup:
    """Evaluation prompts that share a role (rewrite, paraphrase, neighbourhood, ...).

    Args:
        prompts: the prompts, scored independently.
        expected: per prompt, the answer the model should give (the teacher-forced continuation).
        alternatives: per prompt, the competing answer for probability comparison (None if no kind of the group
            needs one).
        metrics: score kind -> reported metric name, e.g. ``{"prob": "ES", "token_acc": "rewrite_acc"}``.
        pre_edit_filter: score a prompt only if the unedited model preferred its alternative (BAKE).
        pre_edit: also report the metrics as scored on the unedited model, as ``<metric>_pre``.
        details: per prompt, extra fields for a benchmark's own score kinds (None: none).
        weight: the weight of each of its prompts in its case's mean and in the micro mean (1: every prompt of a case
            counts alike; a benchmark that averages per block, as DMLE's code does, weighs a block's prompts by
            1 / its size).
        record_field: the record's field its prompts were read from, named by errors about them (None: the group's
            name).
    """

    prompts: tuple[str, ...]
    expected: tuple[str, ...]
    alternatives: tuple[str, ...] | None = None
    metrics: dict[str, str] = field(default_factory=dict, hash=False)
    pre_edit_filter: bool = False
    pre_edit: bool = False
    details: tuple[Mapping[str, Any], ...] | None = field(default=None, hash=False)
    weight: float = 1.0
    record_field: str | None = None

    def __post_init__(self) -> None:
        if len(self.expected) != len(self.prompts):
            raise ValueError(f"{len(self.prompts)} prompts but {len(self.expected)} expected answers")
        if self.alternatives is not None and len(self.alternatives) != len(self.prompts):
            raise ValueError(f"{len(self.prompts)} prompts but {len(self.alternatives)} alternatives")
        if self.details is not None and len(self.details) != len(self.prompts):
            raise ValueError(f"{len(self.prompts)} prompts but {len(self.details)} details")
        if not self.weight > 0:
            raise ValueError(f"a group's weight must be positive, not {self.weight}")

    @classmethod
    def shared_answer(
        cls,
        prompts: list[str] | tuple[str, ...],
        expected: str,
        alternative: str | None = None,
        pre_edit_filter: bool = False,
        pre_edit: bool = False,
        record_field: str | None = None,
        **metrics: str,
    ) -> PromptGroup:
        """A group whose prompts all share one expected answer (and one alternative)."""
        prompts = tuple(prompts)
        alternatives = None if alternative is None else (alternative,) * len(prompts)
        answers = (expected,) * len(prompts)
        return cls(prompts, answers, alternatives, dict(metrics), pre_edit_filter, pre_edit, record_field=record_field)


def prompt_fault(name: str, group: PromptGroup) -> tuple[str, str] | None:
    """(field, why) if group ``name`` cannot be scored as read, else None: a blank prompt (nothing to score), or no
    prompt in a group with metrics (an empty list: the case would drop out of them unseen)."""
    field = group.record_field or name
    if group.metrics and not group.prompts:
        return field, f"an empty list of prompts: the case would drop out of {', '.join(group.metrics.values())}"
    for position, prompt in enumerate(group.prompts):
        if not prompt.strip():
            where = field if len(group.prompts) == 1 else f"{field}[{position}]"
            return where, f"empty prompt {prompt!r}: nothing to score"
    return None


@dataclass(frozen=True)
class EditCase:
    """One benchmark record: the edit(s) to apply and the prompt groups that measure them.

    Args:
        case_id: unique within the benchmark (the record's ``case_id``, or its index when it has none).
        requests: the edit requests; most benchmarks have exactly one.
        groups: named prompt groups, e.g. ``{"rewrite": ..., "paraphrase": ..., "neighborhood": ...}``.
        source: where the record came from (``file#index``), for error messages and reports.
        calls: how many of the requests, in order, each editor call applies, each call on the model the previous
            ones edited: ``(1, 1, 1)`` edits three requests in turn (RULE-EDIT's instance editing), ``(2, 1)`` two
            together then one (DMLE's staged edits); empty (the default): all requests in one call.
    """

    case_id: int
    requests: tuple[EditRequest, ...]
    groups: dict[str, PromptGroup] = field(hash=False)
    source: str = ""
    calls: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.calls and (sum(self.calls) != len(self.requests) or min(self.calls) < 1):
            raise ValueError(f"case {self.case_id}: calls {self.calls} do not split its {len(self.requests)} requests")
        for name, group in self.groups.items():
            if fault := prompt_fault(name, group):
                raise case_error(self, *fault)

    @property
    def editor_calls(self) -> list[tuple[EditRequest, ...]]:
        """The requests as the editor calls that apply them, in order (one call unless ``calls`` splits them)."""
        bounds = [0, *itertools.accumulate(self.calls or (len(self.requests),))]
        return [self.requests[start:end] for start, end in zip(bounds, bounds[1:])]

    def keeping(self, kept: list[bool]) -> EditCase:
        """The case with only the requests where ``kept`` is true, each editor call keeping its own (calls left empty
        are dropped)."""
        bounds = [0, *itertools.accumulate(self.calls or (len(self.requests),))]
        calls = [sum(kept[start:end]) for start, end in zip(bounds, bounds[1:])]
        requests = tuple(request for request, keep in zip(self.requests, kept) if keep)
        return replace(self, requests=requests, calls=tuple(c for c in calls if c) if self.calls else ())

    @property
    def metric_names(self) -> list[str]:
        return [name for group in self.groups.values() for name in group.metrics.values()]


@dataclass(frozen=True)
class TrainingEdit:
    """One edit-training example.

    Args:
        request: the edit.
        equivalent: (prompt, target) pairs that should follow the edit (paraphrases with ``target_new``).
        locality: (prompt, answer) pairs whose predictions should not change.
        case_id: the case it comes from.
    """

    request: EditRequest
    equivalent: tuple[tuple[str, str], ...]
    locality: tuple[tuple[str, str], ...]
    case_id: int


def case_error(case: EditCase, field: str, message: str) -> DataFormatError:
    """A :class:`DataFormatError` naming the file and record a case came from (its ``source``) and ``field``."""
    path, hash_sign, index = case.source.rpartition("#")
    if not hash_sign or not index.isdigit():
        return DataFormatError(case.source or f"case {case.case_id}", message, None, field)
    return DataFormatError(path, message, int(index), field)


class EditBatches(Dataset):
    """Edit cases in batches of ``batch_size`` consecutive cases; item ``i`` is the ``i``-th batch (a list of cases).

    The batch, not the case, is what a distributed sampler shards, so a batch holds the same cases on any number of
    processes and the ``batch`` protocol edits them together whatever the world size.
    """

    def __init__(self, cases: list[EditCase], batch_size: int):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.cases = cases
        self.batch_size = batch_size

    def __len__(self) -> int:
        return -(-len(self.cases) // self.batch_size)

    def __getitem__(self, index: int) -> list[EditCase]:
        return self.cases[index * self.batch_size : (index + 1) * self.batch_size]


def _unwrap(items: list[list[EditCase]]) -> list[EditCase]:
    return items[0]


#: edit cases per validation step where neither the data config nor the ``batch`` protocol sets it
CASES_PER_STEP = 8


def steps_of_editor_calls(setting: str, given: int | None, edit_batch_size: int) -> int:
    """The cases per validation step under ``batch``, where a step is one editor call: the editor's
    ``edit_batch_size``; ``given`` (the data module's own ``setting``, None when unset) may only repeat it."""
    if given is not None and given != edit_batch_size:
        raise ConfigError(
            f"{setting}={given}: under protocol 'batch' the cases edited together are model.edit_batch_size "
            f"({edit_batch_size}); set that, not {setting}"
        )
    return edit_batch_size


def edit_batch_loader(cases: list[EditCase], batch_size: int) -> DataLoader:
    """A DataLoader whose batches are lists of ``batch_size`` consecutive edit cases (see :class:`EditBatches`)."""
    return DataLoader(EditBatches(cases, batch_size), batch_size=1, shuffle=False, collate_fn=_unwrap)


def loader_cases(loader: DataLoader, local: bool = False) -> list[EditCase]:
    """The edit cases of a loader: all of them, or (``local``) those its sampler gives this process, once each.

    Works for :func:`edit_batch_loader` loaders and for loaders over a plain list of cases.
    """
    dataset = loader.dataset
    indices = [i for batch in loader.batch_sampler for i in batch] if local else range(len(dataset))
    cases: dict[int, EditCase] = {}
    for index in indices:
        item = dataset[index]
        for case in item if isinstance(item, list) else [item]:
            cases.setdefault(case.case_id, case)  # a distributed sampler repeats items to even out the shards
    return list(cases.values())
