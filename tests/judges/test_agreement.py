"""Kappa and Spearman's rho against values computed by hand."""

import math

import pytest

from lightning_edit.judges.agreement import agreement_table, cohen_kappa, ranks, spearman


def test_binary_kappa():
    a = [1, 1, 0, 0, 1, 0, 1, 1, 0, 1]
    b = [1, 0, 0, 0, 1, 1, 1, 1, 0, 1]
    # observed agreement 8/10; both say 1 six times in ten: chance agreement 0.6² + 0.4² = 0.52
    assert cohen_kappa(a, b) == pytest.approx((0.8 - 0.52) / (1 - 0.52))
    assert cohen_kappa(a, a) == 1.0
    assert cohen_kappa([1, 0], [0, 1]) == pytest.approx(-1.0)


def test_weighted_kappa():
    a, b = [1, 2, 3], [1, 2, 2]
    # quadratic: observed mean (a-b)² = 1/3; expected Σ p_a(x) p_b(y) (x-y)² = 2/9 + 1/9 + 6/9 = 1
    assert cohen_kappa(a, b, "quadratic") == pytest.approx(2 / 3)
    # linear: observed 1/3; expected (1/3)(2/3) + (1/3)(1/3) + (1/3)(2/3 + 2/3) = 7/9
    assert cohen_kappa(a, b, "linear") == pytest.approx(1 - (1 / 3) / (7 / 9))


def test_kappa_is_nan_when_both_judges_give_one_score():
    assert math.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]))


def test_spearman_with_ties():
    assert ranks([5, 6, 7, 8, 7]) == [1, 2, 3.5, 5, 3.5]
    # ranks 1..5 against 1, 2, 3.5, 5, 3.5: covariance 8, sums of squares 10 and 9.5
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_agreement_table_pairs_judges_on_common_items():
    table = agreement_table(
        {
            "em": ("binary", {"i1": 1.0, "i2": 0.0, "i3": 1.0, "only_em": 1.0}),
            "llm": ("binary", {"i1": 1.0, "i2": 0.0, "i3": 0.0}),
            "coherence": ("likert7", {"i1": 7.0, "i2": 2.0, "i3": 5.0}),
            "alone": ("binary", {"x": 1.0}),
        }
    )
    rows = {tuple(row["judges"]): row for row in table}
    assert set(rows) == {("coherence", "em"), ("coherence", "llm"), ("em", "llm")}
    assert rows[("em", "llm")]["n_items"] == 3
    assert rows[("em", "llm")]["kappa"] == pytest.approx(cohen_kappa([1, 0, 1], [1, 0, 0]))
    assert rows[("coherence", "em")]["kappa"] is None  # scales differ: rank correlation only
    assert rows[("coherence", "em")]["spearman"] == pytest.approx(spearman([7, 2, 5], [1, 0, 1]))
