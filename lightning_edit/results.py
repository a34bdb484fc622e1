"""results.json and the Markdown table every run writes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_edit.provenance import git_hash, package_versions
from lightning_edit.redaction import redact
from lightning_edit.scoring.kinds import BUILTIN_KINDS, ScoreKind


def _interval(value: float, interval: list[float] | None) -> str:
    if math.isnan(value):
        return "n/a"
    if not interval or math.isnan(interval[0]):
        return f"{value:.4f}"
    return f"{value:.4f} ± {(interval[1] - interval[0]) / 2:.4f}"


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None, at any depth: strict JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def markdown_table(metrics: dict[str, dict[str, Any]], kinds: Mapping[str, ScoreKind] = BUILTIN_KINDS) -> str:
    """One row per metric: both aggregations with their 95% confidence half-width, counts and convention (the label
    of its kind among ``kinds``, the benchmark's; else the kind's name).

    The full text of each convention is in results.json.
    """
    lines = [
        "| metric | macro (95% CI) | micro (95% CI) | cases | prompts | convention |",
        "|---|---|---|---|---|---|",
    ]
    for name, result in metrics.items():
        lines.append(
            f"| {name} | {_interval(result['macro'], result.get('macro_ci95'))} "
            f"| {_interval(result['micro'], result.get('micro_ci95'))} | {result['n_cases']} | {result['n_prompts']} "
            f"| {kinds[result['kind']].label if result['kind'] in kinds else result['kind']} |"
        )
    return "\n".join(lines)


def write_results(
    directory: str | Path,
    metrics: dict[str, dict[str, Any]],
    config: dict[str, Any],
    counts: dict[str, Any],
    seconds: float | None = None,
    benchmark: dict[str, Any] | None = None,
    judges: dict[str, Any] | None = None,
    stream: list[dict[str, Any]] | None = None,
    kinds: Mapping[str, ScoreKind] = BUILTIN_KINDS,
    memory: list[dict[str, Any]] | None = None,
) -> Path:
    """Write ``results.json`` and ``results.md`` into ``directory``; returns the JSON path.

    ``seconds``: wall-clock time of the evaluation (edits and scoring, not loading), reported as ``seconds``;
    ``benchmark``: the benchmark's notes on the run (:meth:`~lightning_edit.data.base.EditDataModule.run_notes`),
    written as ``benchmark`` when there are any; ``judges``: the ``judges`` and ``judge_agreement`` blocks
    (:func:`~lightning_edit.judges.kind.judge_report`) when a judge scored anything; ``stream``: a sequential run's
    record at each ``eval_at`` checkpoint (edits applied, seconds spent editing, peak memory so far), when it has one;
    ``kinds``: the benchmark's score kinds (their labels in results.md); ``memory``: each process's peaks and the phases
    that set them (:class:`~lightning_edit.peak_memory.PeakMemory`). Every secret in any of them is redacted
    (:func:`~lightning_edit.redaction.redact`: a benchmark note or a judge's ``base_url`` with a password in it).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "metrics": metrics,
        "counts": counts,
        "seconds": seconds,
        **({"memory": memory} if memory else {}),
        **({"stream": stream} if stream else {}),
        **({"benchmark": benchmark} if benchmark else {}),
        **(judges or {}),
        "config": config,
        "versions": package_versions(),
        "git_hash": git_hash(),
    }
    path = directory / "results.json"
    path.write_text(json.dumps(json_safe(redact(payload)), indent=2, default=str, allow_nan=False) + "\n")
    (directory / "results.md").write_text(markdown_table(metrics, kinds) + "\n")
    return path
