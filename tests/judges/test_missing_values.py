"""A missing value (a kind's ``value`` returning None) is left out of the means and counted as ``n_missing``."""

import math
from dataclasses import replace

import torch

from lightning_edit.metrics.prompt_mean import PromptMean, aggregate
from lightning_edit.scoring.kinds import BUILTIN_KINDS, ScoreKind, Target


def test_missing_rows_are_left_out_and_counted():
    cases, scores = torch.tensor([0, 0, 1, 1, 2]), torch.tensor([1.0, math.nan, 0.0, 1.0, math.nan], dtype=torch.double)
    result = aggregate(cases, scores)
    without = aggregate(torch.tensor([0, 1, 1]), torch.tensor([1.0, 0.0, 1.0], dtype=torch.double))
    assert result["n_missing"] == 2 and without["n_missing"] == 0
    assert {k: v for k, v in result.items() if k != "n_missing"} == {
        k: v for k, v in without.items() if k != "n_missing"
    }
    assert result["macro"] == 0.75 and result["n_cases"] == 2 and result["n_prompts"] == 3
    assert aggregate(torch.tensor([3]), torch.tensor([math.nan], dtype=torch.double))["n_missing"] == 1


def test_prompt_mean_counts_missing_scores():
    metric = PromptMean("judged")
    metric.update(torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0]), torch.tensor([1.0, math.nan, 0.0]))
    result = metric.compute()
    assert (result["macro"], result["micro"], result["n_missing"], result["n_prompts"]) == (0.5, 0.5, 1, 2)


class EveryOtherMissing(ScoreKind):
    name, label = "test_every_other_missing", "every other prompt missing"
    convention = "token accuracy, missing for odd prompt indices"

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def value(self, item, current, unedited):
        return None if item.index % 2 else current[0].accuracy


def test_the_scorer_passes_missing_values_on():
    from lightning_edit.data import CounterFact
    from lightning_edit.evaluation import CaseScorer, ScoringConfig
    from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    data = CounterFact("builtin:data/toy/counterfact.json", limit=2)
    data.setup()
    metrics = {"test_every_other_missing": "half"}
    cases = [replace(c, groups={"paraphrase": replace(c.groups["paraphrase"], metrics=metrics)}) for c in data.cases]
    kinds = {**BUILTIN_KINDS, EveryOtherMissing.name: EveryOtherMissing()}
    scores = CaseScorer(model, tokenizer, ScoringConfig(), kinds).score(cases)
    values = [value for *_, value in scores["half"][1]]
    assert len(values) == 4 and values[1::2] == [None, None] and all(isinstance(v, float) for v in values[::2])
