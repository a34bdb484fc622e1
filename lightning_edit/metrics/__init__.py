"""Editing metrics as torchmetrics: means of per-prompt scores, both aggregations named.

Every reported metric is a :class:`PromptMean` of per-prompt scores of one score kind; the built-in kinds and
their conventions are in :mod:`lightning_edit.scoring.kinds` (docs/metrics.md).
"""

from lightning_edit.metrics.entropy import ngram_entropy, words
from lightning_edit.metrics.prompt_mean import PromptMean, aggregate, unique_scores

__all__ = ["PromptMean", "aggregate", "ngram_entropy", "unique_scores", "words"]
