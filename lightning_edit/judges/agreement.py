"""Agreement between two judges on the items both scored: Cohen's kappa and Spearman's rank correlation.

Kappa is unweighted for binary judges and quadratically weighted for ordinal (Likert) ones, with the weights taken
from the score values themselves (``(a - b)²``), so categories nobody used do not matter. Spearman's rho is Pearson's
correlation of the ranks, ties given their mean rank. Both are NaN when undefined (a judge that gave one score to
every item).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, Literal


def cohen_kappa(a: Sequence[float], b: Sequence[float], weights: Literal["linear", "quadratic"] | None = None) -> float:
    """Cohen's kappa of two raters' scores of the same items (weighted by score distance for ordinal scales)."""
    if len(a) != len(b) or not a:
        raise ValueError("kappa needs two non-empty score lists of one length")
    categories = sorted(set(a) | set(b))
    n = len(a)
    rows = {c: sum(x == c for x in a) / n for c in categories}
    columns = {c: sum(y == c for y in b) / n for c in categories}

    def weight(x: float, y: float) -> float:
        if weights is None:
            return float(x != y)
        return abs(x - y) if weights == "linear" else (x - y) ** 2

    observed = sum(weight(x, y) for x, y in zip(a, b)) / n
    expected = sum(rows[x] * columns[y] * weight(x, y) for x in categories for y in categories)
    return math.nan if expected == 0 else 1 - observed / expected


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties given the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            result[i] = (start + end) / 2 + 1
        start = end + 1
    return result


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (NaN if either list is constant)."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("Spearman's rho needs two score lists of one length, at least 2")
    x = ranks(a)
    y = ranks(b)
    mx = sum(x) / len(x)
    my = sum(y) / len(y)
    covariance = sum((p - mx) * (q - my) for p, q in zip(x, y))
    spread = math.sqrt(sum((p - mx) ** 2 for p in x) * sum((q - my) ** 2 for q in y))
    return math.nan if spread == 0 else covariance / spread


def agreement_table(judges: Mapping[str, tuple[str, Mapping[str, float]]]) -> list[dict[str, Any]]:
    """One row per pair of judges that scored at least two items in common.

    Args:
        judges: judge name -> (scale, item key -> score), missing verdicts left out.
    """
    table = []
    for (first, (scale_a, scores_a)), (second, (scale_b, scores_b)) in combinations(sorted(judges.items()), 2):
        items = sorted(scores_a.keys() & scores_b.keys())
        if len(items) < 2:
            continue
        a = [scores_a[i] for i in items]
        b = [scores_b[i] for i in items]
        weights = None if scale_a == "binary" else "quadratic"
        table.append(
            {
                "judges": [first, second],
                "n_items": len(items),
                "kappa": cohen_kappa(a, b, weights) if scale_a == scale_b else None,
                "kappa_weights": weights if scale_a == scale_b else None,
                "spearman": spearman(a, b),
            }
        )
    return table
