"""PromptMean: macro vs micro, deduplication, order/process independence and the 95% confidence intervals."""

import math

import pytest
import torch

from lightning_edit.metrics import PromptMean, aggregate, unique_scores
from lightning_edit.metrics.prompt_mean import Z_95

# Hand example, unequal prompts per case:
#   case 10: prompts 0, 1, 2 -> 1.0, 0.0, 0.0   (sum 1.0, 3 prompts, mean 1/3)
#   case 20: prompt 0        -> 1.0             (sum 1.0, 1 prompt,  mean 1)
#   case 30: prompts 0, 1    -> 0.5, 1.0        (sum 1.5, 2 prompts, mean 3/4)
CASES = [10, 10, 10, 20, 30, 30]
PROMPTS = [0, 1, 2, 0, 0, 1]
SCORES = [1.0, 0.0, 0.0, 1.0, 0.5, 1.0]

MACRO = (1 / 3 + 1 + 3 / 4) / 3  # = 25/36, mean of per-case means
MICRO = (1 + 0 + 0 + 1 + 0.5 + 1) / 6  # = 7/12, mean over all six prompts
# macro SE: case means minus 25/36 are -13/36, 11/36, 2/36; s^2 = (169 + 121 + 4)/1296 / (3 - 1) = 147/1296
MACRO_SE = math.sqrt(147 / 1296) / math.sqrt(3)
# micro SE (cluster-robust): residuals sum_i - micro*count_i = 1 - 21/12, 1 - 7/12, 3/2 - 14/12 = -9/12, 5/12, 4/12;
# sum of squares = 122/144; SE = sqrt(n/(n-1) * 122/144) / total count = sqrt(3/2 * 122/144) / 6 = sqrt(183)/72
MICRO_SE = math.sqrt(183) / 72


def tensors(cases, prompts, scores):
    return torch.tensor(cases), torch.tensor(prompts), torch.tensor(scores, dtype=torch.double)


def hand_metric() -> PromptMean:
    metric = PromptMean("test convention")
    metric.update(*tensors(CASES, PROMPTS, SCORES))
    return metric


def test_z_is_the_two_sided_95_percent_normal_quantile():
    normal = torch.distributions.Normal(0.0, 1.0)
    assert Z_95 == pytest.approx(float(normal.icdf(torch.tensor(0.975, dtype=torch.double))), abs=1e-6)
    assert Z_95 == pytest.approx(1.959964, abs=1e-6)


def test_macro_and_micro_differ_with_unequal_prompts_per_case():
    result = hand_metric().compute()
    assert result["macro"] == pytest.approx(25 / 36, rel=1e-12)
    assert result["micro"] == pytest.approx(7 / 12, rel=1e-12)
    assert result["macro"] == pytest.approx(MACRO, rel=1e-12)
    assert result["micro"] == pytest.approx(MICRO, rel=1e-12)
    assert result["n_cases"] == 3
    assert result["n_prompts"] == 6


def test_confidence_intervals_match_hand_computation():
    result = hand_metric().compute()
    z = 1.959963984540054
    assert result["macro_ci95"] == pytest.approx([MACRO - z * MACRO_SE, MACRO + z * MACRO_SE], rel=1e-12)
    assert result["micro_ci95"] == pytest.approx([MICRO - z * MICRO_SE, MICRO + z * MICRO_SE], rel=1e-12)
    # numerically: macro 0.694444 ± 0.381104, micro 0.583333 ± 0.368249
    assert result["macro_ci95"][1] - MACRO == pytest.approx(0.381104, abs=1e-6)
    assert result["micro_ci95"][1] - MICRO == pytest.approx(0.368249, abs=1e-6)


def test_micro_ci_with_one_prompt_per_case_is_the_plain_ci():
    # with one prompt per case, micro == macro and the cluster-robust SE reduces to s/sqrt(n)
    scores = [0.2, 0.9, 0.4, 0.7]
    result = aggregate(torch.tensor([1, 2, 3, 4]), torch.tensor(scores, dtype=torch.double))
    mean = sum(scores) / 4  # 0.55
    s = math.sqrt(sum((x - mean) ** 2 for x in scores) / 3)
    assert result["macro"] == pytest.approx(0.55) and result["micro"] == pytest.approx(0.55)
    assert result["macro_ci95"] == pytest.approx([0.55 - Z_95 * s / 2, 0.55 + Z_95 * s / 2], rel=1e-12)
    assert result["micro_ci95"] == pytest.approx(result["macro_ci95"], rel=1e-12)


def test_single_case_has_nan_interval():
    metric = PromptMean("x")
    metric.update(*tensors([4, 4], [0, 1], [1.0, 0.0]))
    result = metric.compute()
    assert result["macro"] == result["micro"] == 0.5
    assert result["n_cases"] == 1 and result["n_prompts"] == 2
    assert all(math.isnan(v) for v in result["macro_ci95"] + result["micro_ci95"])


def test_duplicate_rows_are_counted_once():
    # a distributed sampler pads the last batch by repeating prompts: (10, 1) and (30, 0) appear again
    metric = hand_metric()
    metric.update(*tensors([10, 30, 10], [1, 0, 1], [0.0, 0.5, 0.0]))
    result = metric.compute()
    assert result == hand_metric().compute()
    assert result["n_prompts"] == 6


def test_unique_scores_sorts_by_case_then_prompt_and_keeps_first_occurrence():
    case_ids, scores, weights = unique_scores(
        torch.tensor([2, 1, 2, 1, 2]),
        torch.tensor([1, 0, 0, 0, 1]),
        torch.tensor([0.3, 0.1, 0.2, 0.1, 0.3], dtype=torch.double),
        torch.tensor([3.0, 1.0, 2.0, 1.0, 3.0], dtype=torch.double),
    )
    assert case_ids.tolist() == [1, 2, 2]
    assert scores.tolist() == [0.1, 0.2, 0.3] and weights.tolist() == [1.0, 2.0, 3.0]


def test_weighted_rows_give_the_weighted_means_by_hand():
    """Case 10's prompts weighted 1/2, 1/4, 1/4 (two blocks, the second of two prompts): its mean is the mean of the
    block means, (1 + 0) / 2 = 1/2; micro pools every row by weight. Weights 1 give the unweighted means exactly."""
    metric = PromptMean("weighted")
    weights = [0.5, 0.25, 0.25, 1.0, 1.0, 1.0]
    metric.update(torch.tensor(CASES), torch.tensor(PROMPTS), torch.tensor(SCORES), torch.tensor(weights))
    result = metric.compute()
    assert result["case_means"] == {10: 0.5, 20: 1.0, 30: 0.75}
    assert result["macro"] == pytest.approx((0.5 + 1.0 + 0.75) / 3)
    assert result["micro"] == pytest.approx((0.5 + 1.0 + 1.5) / (1.0 + 1.0 + 2.0)) and result["n_prompts"] == 6
    plain, ones = PromptMean("plain"), PromptMean("ones")
    plain.update(torch.tensor(CASES), torch.tensor(PROMPTS), torch.tensor(SCORES))
    ones.update(torch.tensor(CASES), torch.tensor(PROMPTS), torch.tensor(SCORES), torch.ones(6, dtype=torch.double))
    assert plain.compute() == ones.compute()


def random_rows(seed: int, n_cases: int = 60):
    """Rows with irrational-looking scores, so that a different summation order would change the last bits."""
    generator = torch.Generator().manual_seed(seed)
    cases, prompts = [], []
    for case in range(n_cases):
        k = int(torch.randint(1, 8, (1,), generator=generator))
        cases += [case * 7 + 3] * k
        prompts += list(range(k))
    scores = torch.rand(len(cases), generator=generator, dtype=torch.double) * 0.7 + 0.1
    return torch.tensor(cases), torch.tensor(prompts), scores


@pytest.mark.filterwarnings("ignore:The ``compute`` method")  # merged metrics never saw update()
def test_result_is_bitwise_independent_of_order_and_of_splitting_into_ranks():
    cases, prompts, scores = random_rows(seed=0)
    reference = PromptMean("x")
    reference.update(cases, prompts, scores)
    expected = reference.compute()

    generator = torch.Generator().manual_seed(1)
    perm = torch.randperm(len(cases), generator=generator)
    # sanity: a naive sum in the permuted order differs in the last bits, so the test can detect an unsorted sum
    assert float(scores.sum()) != float(scores[perm].sum())

    # one metric, rows permuted and split over several updates
    permuted = PromptMean("x")
    for chunk in perm.split(37):
        permuted.update(cases[chunk], prompts[chunk], scores[chunk])
    assert permuted.compute() == expected

    # two "ranks" (interleaved like a distributed sampler, with padding duplicates), merged in both orders
    rank_rows = [perm[0::2], torch.cat([perm[1::2], perm[:3]])]
    ranks = []
    for rows in rank_rows:
        rank = PromptMean("x")
        for chunk in rows.split(11):
            rank.update(cases[chunk], prompts[chunk], scores[chunk])
        ranks.append(rank)
    for first, second in [(0, 1), (1, 0)]:
        merged = PromptMean("x")
        merged.merge_state(ranks[first])
        merged.merge_state(ranks[second])
        assert merged.compute() == expected
    # the macro and micro means are compared with == (bitwise), not approx
    assert merged.compute()["macro"] == expected["macro"] and merged.compute()["micro"] == expected["micro"]

    # simulated all_gather: states of the ranks concatenated in either order
    for order in ([0, 1], [1, 0]):
        state = {
            name: torch.cat([torch.cat(getattr(ranks[r], name)) for r in order])
            for name in ("case_ids", "prompt_ids", "scores")
        }
        gathered = PromptMean("x")
        gathered.update(state["case_ids"], state["prompt_ids"], state["scores"])
        assert gathered.compute() == expected


@pytest.mark.filterwarnings("ignore:The ``compute`` method")  # computing an empty metric is the point
def test_empty_metric_and_reset():
    empty = PromptMean("x").compute()
    assert empty["n_cases"] == 0 and empty["n_prompts"] == 0
    assert math.isnan(empty["macro"]) and math.isnan(empty["micro"])

    metric = hand_metric()
    assert metric.compute()["n_cases"] == 3
    metric.reset()
    assert metric.compute()["n_cases"] == 0
    metric.update(*tensors([1, 1], [0, 1], [1.0, 0.0]))
    metric.update(*tensors([2], [0], [1.0]))
    result = metric.compute()
    assert (result["macro"], result["micro"], result["n_cases"]) == (0.75, pytest.approx(2 / 3), 2)


def test_update_validates_shapes():
    metric = PromptMean("x")
    with pytest.raises(ValueError):
        metric.update(torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError):
        metric.update(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2))


def test_convention_and_direction_are_kept():
    metric = PromptMean("probability comparison", higher_is_better=False)
    assert metric.convention == "probability comparison"
    assert metric.higher_better is False


def test_case_means_are_per_case_means_with_repeats_counted_once():
    metric = hand_metric()
    metric.update(*tensors([30, 10], [1, 0], [1.0, 1.0]))  # rows a distributed sampler repeated
    assert metric.compute()["case_means"] == pytest.approx({10: 1 / 3, 20: 1.0, 30: 0.75}, rel=1e-12)


def test_empty_updates_give_an_empty_result():
    metric = PromptMean("test convention")
    metric.update(*tensors([], [], []))
    result = metric.compute()
    assert result["n_cases"] == 0 and math.isnan(result["macro"]) and result["case_means"] == {}
    assert PromptMean("test convention").compute()["case_means"] == {}  # never updated
