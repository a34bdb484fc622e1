"""The metrics of a run: a torchmetric per declared metric, fed per prompt, computed into per-case and run results.

The benchmark declares the metrics it reports (:meth:`~lightning_edit.data.base.EditDataModule.declared_metrics`);
the editor's :class:`RunMetrics` creates their torchmetrics in ``setup`` (:meth:`RunMetrics.declare`), with
``<metric>_pre`` (``scoring.pre_edit``) and ``<metric>@<n>`` (``eval_at``) variants, so every process holds the same
metrics from the start. Scores feed :class:`~lightning_edit.metrics.PromptMean` metrics keyed by case id, computed
(and synced over processes) at the end of the epoch into ``results`` (aggregates) and ``case_scores`` (per case). A
benchmark may add metrics derived from the others' aggregates
(:meth:`~lightning_edit.data.base.EditDataModule.derived_metrics`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from lightning_edit.cases import EditCase
from lightning_edit.evaluation import Answers, Scores, prompt_weights
from lightning_edit.metrics import PromptMean
from lightning_edit.scoring.kinds import BUILTIN_KINDS, ScoreKind

# metric -> case id -> prompt index -> the text the model answered
CaseAnswers = dict[str, dict[int, dict[int, str]]]
# metric -> {"macro", "micro", "n_cases", ..., "kind", "convention"}
Results = dict[str, dict[str, Any]]


class RunMetrics(nn.Module):
    """The metrics of one editor's run, owned by the editor (``editor.metrics``)."""

    def __init__(self):
        super().__init__()
        self.by_name = nn.ModuleDict()  # metric -> its PromptMean, created by declare
        self.kinds: dict[str, str] = {}  # metric -> score kind name, in report order
        self.score_kinds: Mapping[str, ScoreKind] = dict(BUILTIN_KINDS)  # the benchmark's, from declare on
        self.results: Results = {}
        self.case_scores: dict[str, dict[int, float]] = {}  # metric -> case id -> mean over the case's prompts
        self.case_answers: CaseAnswers = {}  # metric -> case id -> prompt index -> generated answer
        self._answers: CaseAnswers = {}  # this process's, until compute
        self._weights: dict[tuple[str, int, int], float] = {}  # (metric, case id, prompt index) of weighted prompts

    def declare(
        self, declared: dict[str, str], score_kinds: Mapping[str, ScoreKind], pre_edit: bool, eval_at: list[int]
    ) -> None:
        """Create the metrics a benchmark declares (name -> kind; ``derived`` ones are computed, not fed), with
        their ``<metric>_pre`` variants when ``pre_edit`` (``scoring.pre_edit``) and ``<metric>@<n>`` for each n of
        ``eval_at`` (the sequential protocol's checkpoints); ``score_kinds``: the benchmark's (scorer, metrics and
        report share them)."""
        fed = {name: kind for name, kind in declared.items() if kind != "derived"}
        names = dict(fed)
        if pre_edit:
            names |= {f"{name}_pre": kind for name, kind in fed.items() if not name.endswith("_pre")}
        for n in eval_at:
            names |= {f"{name}@{n}": kind for name, kind in fed.items() if not name.endswith("_pre")}
        order = sorted(names, key=lambda name: ("@" in name, name.endswith("_pre")))
        self.kinds = {name: names[name] for name in order}
        self.score_kinds = score_kinds
        conventions = {name: score_kinds[kind] for name, kind in names.items()}
        self.by_name = nn.ModuleDict(
            {name: PromptMean(kind.convention, kind.higher_is_better) for name, kind in conventions.items()}
        )

    def check_cases(self, cases: list[EditCase]) -> None:
        """Raise, naming the case, if it reports a metric its benchmark did not declare; keep the weights of its
        prompts that are weighted (:func:`~lightning_edit.evaluation.prompt_weights`)."""
        self._weights = prompt_weights(cases)
        for case in cases:
            for name, group in case.groups.items():
                reported = list(group.metrics.values()) + ([f"{name}_filtered"] if group.pre_edit_filter else [])
                undeclared = [metric for metric in reported if metric not in self.kinds]
                if undeclared:
                    raise ValueError(
                        f"{case.source or case.case_id}: group {name!r} reports {undeclared}, which the benchmark "
                        f"does not declare (declared: {list(self.kinds)})"
                    )

    def start(self) -> None:
        """An empty update of every metric (on every process, so that the gathered states share dtypes)."""
        for name in self.kinds:
            self.update({name: (self.kinds[name], [])})

    def update(self, scores: Scores, suffix: str = "", answers: Answers | None = None) -> None:
        """Feed ``scores`` to the metrics (``<metric><suffix>``), and keep the ``answers`` the model gave."""
        for name, rows in (answers or {}).items():
            for case_id, index, text in rows:
                self._answers.setdefault(name + suffix, {}).setdefault(case_id, {})[index] = text
        for name, (_, rows) in scores.items():
            case_ids, prompt_ids, values = zip(*rows) if rows else ((), (), ())
            base = name.removesuffix("_pre")  # <metric>_pre weighs its prompts as <metric> does
            weights = [self._weights.get((base, case, index), 1.0) for case, index in zip(case_ids, prompt_ids)]
            self.by_name[name + suffix].update(
                torch.tensor(case_ids, dtype=torch.long),
                torch.tensor(prompt_ids, dtype=torch.long),
                torch.tensor([math.nan if v is None else v for v in values], dtype=torch.double),  # None: missing
                torch.tensor(weights, dtype=torch.double),
            )

    def compute(self, world_size: int, derived: Callable[[Results], Results]) -> Results:
        """Compute every metric (synced over processes) into :attr:`results` and :attr:`case_scores`, with the
        benchmark's ``derived`` metrics, and reset them; returns :attr:`results`."""
        self.results = {}
        self.case_scores = {}
        self.case_answers = gather_answers(self._answers, world_size)
        self._answers = {}
        for name, kind in self.kinds.items():
            metric = self.by_name[name]
            result = dict(metric.compute())
            self.case_scores[name] = result.pop("case_means")
            self.results[name] = {**result, "kind": kind, "convention": metric.convention}
            metric.reset()
        self.results.update(derived(self.results))
        return self.results

    #: a PromptMean's states and their dtypes
    STATES = {"case_ids": torch.long, "prompt_ids": torch.long, "scores": torch.double, "weights": torch.double}

    def checkpoint_states(self, suffix: str, world_size: int) -> tuple[dict[str, torch.Tensor], CaseAnswers]:
        """Every process's rows and answers so far of the metrics whose names contain ``suffix`` (``"@"``: the
        stream's checkpoints), gathered on every process, for a stream checkpoint: ``metric/<name>/<state>``
        tensors and the answers."""
        tensors = {}
        for name in (name for name in self.kinds if suffix in name):
            metric = self.by_name[name]
            for state, dtype in self.STATES.items():
                rows = getattr(metric, state)
                local = torch.cat(rows).cpu() if rows else torch.zeros(0, dtype=dtype)
                tensors[f"metric/{name}/{state}"] = torch.cat(gather_tensors(local, world_size))
        answers = {name: by_case for name, by_case in self._answers.items() if suffix in name}
        return tensors, gather_answers(answers, world_size)

    def load_checkpoint_states(self, tensors: dict[str, torch.Tensor], answers: CaseAnswers) -> None:
        """Add what :meth:`checkpoint_states` returned (on one process: the metrics sync at the end)."""
        for name in {key.split("/")[0] for key in tensors}:
            metric = self.by_name[name]
            for state in self.STATES:
                getattr(metric, state).append(tensors[f"{name}/{state}"].to(metric.device))
        for name, by_case in answers.items():
            for case_id, texts in by_case.items():
                self._answers.setdefault(name, {}).setdefault(case_id, {}).update(texts)


def gather_tensors(local: torch.Tensor, world_size: int) -> list[torch.Tensor]:
    """Every process's ``local`` (any length), in rank order, on every process."""
    if world_size == 1 or not torch.distributed.is_initialized():
        return [local]
    shares: list[torch.Tensor | None] = [None] * world_size
    torch.distributed.all_gather_object(shares, local)
    return [share for share in shares if share is not None]


def gather_answers(local: CaseAnswers, world_size: int) -> CaseAnswers:
    """Every process's answers (metric -> case id -> prompt index -> text) merged, on every process; a case the
    distributed sampler repeats has the same answers on both processes."""
    if world_size == 1 or not torch.distributed.is_initialized():
        return local
    shares: list[CaseAnswers] = [{} for _ in range(world_size)]
    torch.distributed.all_gather_object(shares, local)
    merged: CaseAnswers = {}
    for share in shares:
        for metric, cases in share.items():
            for case_id, texts in cases.items():
                merged.setdefault(metric, {}).setdefault(case_id, {}).update(texts)
    return merged
