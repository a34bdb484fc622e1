"""ScEdit's Spearman heatmap (paper appendix E): the correlation of every two metrics over the cases."""

from __future__ import annotations

import math

from lightning_edit.judges.agreement import spearman


def spearman_matrix(case_scores: dict[str, dict[int, float]], names: list[str]) -> list[list[tuple[float, int]]]:
    """``(rho, n)`` for every two metrics of ``names``: Spearman's rho of their per-case means over the ``n`` cases
    both scored (NaN below 2 cases or when one is constant there)."""
    matrix = []
    for a in names:
        row = []
        for b in names:
            cases = sorted(case_scores[a].keys() & case_scores[b].keys())
            x = [case_scores[a][c] for c in cases]
            y = [case_scores[b][c] for c in cases]
            row.append((spearman(x, y) if len(cases) > 1 else math.nan, len(cases)))
        matrix.append(row)
    return matrix


def spearman_figure(matrix: list[list[tuple[float, int]]], names: list[str], token_level: int):
    """A heatmap of :func:`spearman_matrix`, each cell annotated with rho (blank where it is undefined), the
    ``token_level`` metrics (the first names) split from the text-level ones by a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [[rho for rho, _ in row] for row in matrix]
    size = 1.2 + 0.6 * len(names)
    figure, axes = plt.subplots(figsize=(size + 1.2, size))
    image = axes.imshow(values, cmap="coolwarm", vmin=-1, vmax=1)
    for i, row in enumerate(values):
        for j, rho in enumerate(row):
            if not math.isnan(rho):
                axes.text(j, i, f"{rho:.2f}", ha="center", va="center", fontsize=8)
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.axhline(token_level - 0.5, color="black", linewidth=1)
    axes.axvline(token_level - 0.5, color="black", linewidth=1)
    low = min(n for row in matrix for _, n in row)
    high = max(n for row in matrix for _, n in row)
    axes.set_title(f"ScEdit: Spearman's rho over cases (n = {low if low == high else f'{low}-{high}'})", fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    return figure
