"""The metrics of a run (a part of :class:`~lightning_edit.editors.base.EditorModule`).

The benchmark declares the metrics it reports (:meth:`~lightning_edit.data.base.EditDataModule.declared_metrics`);
the editor creates their torchmetrics in ``setup``, with ``<metric>_pre`` (``scoring.pre_edit``) and
``<metric>@<n>`` (``eval_at``) variants, so every process holds the same metrics from the start. Scores feed
:class:`~lightning_edit.metrics.PromptMean` metrics keyed by case id, computed (and synced over processes) at the
end of the epoch into ``results`` (aggregates) and ``case_scores`` (per case). A benchmark may add metrics derived
from the others' aggregates (:meth:`~lightning_edit.data.base.EditDataModule.derived_metrics`).
"""

from __future__ import annotations

import math

import torch
from lightning import LightningModule
from torch import nn

from lightning_edit.cases import EditCase
from lightning_edit.evaluation import Answers, Scores, prompt_weights
from lightning_edit.metrics import PromptMean

# metric -> case id -> prompt index -> the text the model answered
CaseAnswers = dict[str, dict[int, dict[int, str]]]


class RunMetrics(LightningModule):
    """The metrics part of :class:`~lightning_edit.editors.base.EditorModule` (which sets ``metrics``,
    ``metric_kinds``, ``score_kinds``, ``results``, ``case_scores``, ``scoring`` and ``eval_at``)."""

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
        self.score_kinds = kinds = datamodule.score_kinds  # the benchmark's: scorer, metrics and report share them
        self.metrics = nn.ModuleDict(
            {name: PromptMean(kinds[kind].convention, kinds[kind].higher_is_better) for name, kind in names.items()}
        )

    def _check_declared(self, cases: list[EditCase]) -> None:
        """Raise, naming the case, if it reports a metric its benchmark did not declare; keep the weights of its
        prompts that are weighted (:func:`~lightning_edit.evaluation.prompt_weights`)."""
        self._weights = prompt_weights(cases)
        for case in cases:
            for name, group in case.groups.items():
                reported = list(group.metrics.values()) + ([f"{name}_filtered"] if group.pre_edit_filter else [])
                undeclared = [metric for metric in reported if metric not in self.metric_kinds]
                if undeclared:
                    raise ValueError(
                        f"{case.source or case.case_id}: group {name!r} reports {undeclared}, which the benchmark "
                        f"does not declare (declared: {list(self.metric_kinds)})"
                    )

    def _update_metrics(self, scores: Scores, suffix: str = "", answers: Answers | None = None) -> None:
        """Feed ``scores`` to the metrics (``<metric><suffix>``), and keep the ``answers`` the model gave."""
        for name, rows in (answers or {}).items():
            for case_id, index, text in rows:
                self._answers.setdefault(name + suffix, {}).setdefault(case_id, {})[index] = text
        for name, (_, rows) in scores.items():
            case_ids, prompt_ids, values = zip(*rows) if rows else ((), (), ())
            base = name.removesuffix("_pre")  # <metric>_pre weighs its prompts as <metric> does
            weights = [self._weights.get((base, case, index), 1.0) for case, index in zip(case_ids, prompt_ids)]
            self.metrics[name + suffix].update(
                torch.tensor(case_ids, dtype=torch.long),
                torch.tensor(prompt_ids, dtype=torch.long),
                torch.tensor([math.nan if v is None else v for v in values], dtype=torch.double),  # None: missing
                torch.tensor(weights, dtype=torch.double),
            )

    def on_validation_epoch_end(self) -> None:
        """Compute every metric (synced over processes) into :attr:`results` and :attr:`case_scores`, with the
        benchmark's derived metrics, and log their aggregates."""
        self.results = {}
        self.case_scores = {}
        self.case_answers, self._answers = gather_answers(self._answers, self.trainer.world_size), {}
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

    def on_test_epoch_end(self) -> None:
        self.on_validation_epoch_end()


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
