"""Mean of per-prompt scores over edit cases, with both aggregations named and 95% confidence intervals.

Every editing metric (ES, PS, NS, token accuracies, locality, GE, ...) is a mean of one score per evaluation prompt.
Papers and reference code disagree on how to average, so :class:`PromptMean` reports both:

- **macro**: mean over cases of the mean over the case's prompts (ROME/ScEdit ``summarize.py``; the default);
- **micro**: mean over all prompts of all cases (the papers' E_{i,k} formulas; EasyEdit's ``rewrite_acc``).

States are ``cat`` lists of (case id, prompt index, score), so they sync across processes, and a prompt the
distributed sampler padded in twice is counted once. The result does not depend on the number of processes:
rows are sorted by (case id, prompt index) before any sum. Every process must call :meth:`PromptMean.update` at
least once, with empty tensors if it has no scores, so that the gathered states have one dtype.

A missing score (a judge's verdict that could not be had) is NaN: its row is left out of both means and the counts,
and counted as ``n_missing``. A row may carry a weight (default 1): a case's mean is then the weighted mean of its
prompts' scores and the micro mean the weighted mean of all (DMLE's per-block averages, as weights).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

Z_95 = 1.959963984540054  # two-sided 95% normal quantile


def unique_scores(
    case_ids: Tensor, prompt_ids: Tensor, scores: Tensor, weights: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """``(case_ids, scores, weights)`` with one row per (case, prompt), sorted by case id then prompt index (weights
    default to 1)."""
    keys = torch.stack([case_ids, prompt_ids], dim=1)
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)  # sorted lexicographically
    first = torch.full((len(unique),), len(keys), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(len(keys)), reduce="amin")
    weights = torch.ones_like(scores) if weights is None else weights
    return unique[:, 0], scores[first], weights[first]


def aggregate(
    case_ids: Tensor, scores: Tensor, weights: Tensor | None = None
) -> dict[str, float | int | list[float] | dict[int, float]]:
    """Macro and micro means with 95% confidence intervals, and ``case_means`` (case id -> mean of its prompts'
    scores), from deduplicated rows sorted by case; NaN scores are missing (left out, counted as ``n_missing``).
    With ``weights``, means are weighted: a case's ``Σ w·s / Σ w``, micro over every row likewise.

    The macro interval is mean ± z·s/√n over per-case means. The micro mean is a ratio of per-case sums to per-case
    counts (weight sums); its interval uses the cluster-robust (delta-method) standard error over cases, since prompts
    of one case are not independent.
    """
    weights = torch.ones_like(scores) if weights is None else weights
    missing = torch.isnan(scores)
    case_ids, scores, weights = case_ids[~missing], scores[~missing], weights[~missing]
    n_missing = int(missing.sum())
    cases, counts = torch.unique_consecutive(case_ids, return_counts=True)
    n = len(cases)
    if n == 0:
        return {
            "macro": math.nan,
            "micro": math.nan,
            "n_cases": 0,
            "n_prompts": 0,
            "n_missing": n_missing,
            "case_means": {},
        }
    sums = torch.stack([chunk.sum() for chunk in (weights * scores).split(counts.tolist())])
    totals = torch.stack([chunk.sum() for chunk in weights.split(counts.tolist())])  # the counts when every w is 1
    case_means = sums / totals
    macro = float(case_means.mean())
    micro = float(sums.sum() / totals.sum())
    if n > 1:
        macro_se = float(case_means.std(unbiased=True)) / math.sqrt(n)
        residuals = sums - micro * totals
        micro_se = math.sqrt(n / (n - 1) * float((residuals**2).sum())) / float(totals.sum())
    else:
        macro_se = micro_se = math.nan
    return {
        "macro": macro,
        "macro_ci95": [macro - Z_95 * macro_se, macro + Z_95 * macro_se],
        "micro": micro,
        "micro_ci95": [micro - Z_95 * micro_se, micro + Z_95 * micro_se],
        "n_cases": n,
        "n_prompts": int(counts.sum()),
        "n_missing": n_missing,
        "case_means": dict(zip(cases.tolist(), case_means.tolist())),
    }


class PromptMean(Metric):
    """Macro and micro mean of per-prompt scores of edit cases.

    Args:
        convention: how each score was computed (shown in reports), e.g. "probability comparison".
        higher_is_better: whether a larger score is better (False for bleed-over style metrics).

    Example:
        >>> metric = PromptMean("token accuracy")
        >>> metric.update(torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0]), torch.tensor([1.0, 0.0, 1.0]))
        >>> result = metric.compute()
        >>> result["macro"], round(result["micro"], 4)
        (0.75, 0.6667)
    """

    is_differentiable = False
    full_state_update = False

    def __init__(self, convention: str, higher_is_better: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.convention = convention
        self.higher_better = higher_is_better  # torchmetrics keeps `higher_is_better` a class constant
        self.add_state("case_ids", default=[], dist_reduce_fx="cat")
        self.add_state("prompt_ids", default=[], dist_reduce_fx="cat")
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("weights", default=[], dist_reduce_fx="cat")

    def update(self, case_ids: Tensor, prompt_ids: Tensor, scores: Tensor, weights: Tensor | None = None) -> None:
        """Add one score per (case id, prompt index), with its weight (default 1); all are 1-D of one length."""
        weights = torch.ones_like(scores, dtype=torch.double) if weights is None else weights
        if not (case_ids.shape == prompt_ids.shape == scores.shape == weights.shape) or case_ids.dim() != 1:
            raise ValueError("case_ids, prompt_ids, scores and weights must be 1-D tensors of one length")
        self.case_ids.append(case_ids.long().to(self.device))
        self.prompt_ids.append(prompt_ids.long().to(self.device))
        self.scores.append(scores.double().to(self.device))
        self.weights.append(weights.double().to(self.device))

    def compute(self) -> dict[str, float | int | list[float] | dict[int, float]]:
        """:func:`aggregate` of the deduplicated rows."""
        if isinstance(self.case_ids, list) and not self.case_ids:  # never updated (a list before sync, then a tensor)
            return aggregate(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.double))
        states = (self.case_ids, self.prompt_ids, self.scores, self.weights)
        return aggregate(*unique_scores(*(dim_zero_cat(state).cpu() for state in states)))
