"""Editing metrics as torchmetrics, each stating its convention.

Every reported metric is a :class:`PromptMean` of per-prompt scores of one kind; :data:`CONVENTIONS` says what
each kind means and where it comes from, and is written next to every value in results.json.
"""

from lightning_edit.metrics.entropy import ngram_entropy, words
from lightning_edit.metrics.prompt_mean import PromptMean, aggregate, unique_scores

CONVENTIONS = {
    "prob": "probability comparison: 1 if mean per-token NLL of the expected answer < that of the alternative "
    "(ROME/MEMIT CounterFact ES/PS/NS)",
    "token_acc": "teacher-forced token accuracy of the expected answer after prompt + ' ' (EasyEdit rewrite_acc; "
    "ROME zsRE)",
    "agreement": "share of argmax tokens along the expected answer equal to the unedited model's (EasyEdit locality)",
    "entropy": "weighted bi/tri-gram entropy H2/3 + 2*H3/3 (bits) of prompt + generated text (ROME GE)",
    "logprob": "mean per-token log-probability (nats) of the expected answer after prompt + ' ' (BAKE Figure 3)",
    "filtered": "1 if the prompt was left out because the unedited model did not prefer the original answer "
    "(BAKE's pre-edit filter of reverse prompts)",
    "derived": "computed from the aggregates of other metrics, aggregation by aggregation (see the metric's formula)",
}

# short labels for tables
CONVENTION_LABELS = {
    "prob": "probability comparison",
    "token_acc": "token accuracy",
    "agreement": "argmax agreement",
    "entropy": "n-gram entropy",
    "logprob": "log-probability",
    "filtered": "left out by the pre-edit filter",
    "derived": "derived",
}

__all__ = ["CONVENTIONS", "CONVENTION_LABELS", "PromptMean", "aggregate", "ngram_entropy", "unique_scores", "words"]
