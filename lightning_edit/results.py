"""results.json and the Markdown table every run writes."""

from __future__ import annotations

import json
import math
import platform
import subprocess
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from lightning_edit.metrics import CONVENTION_LABELS

PACKAGES = ("lightning-edit", "torch", "lightning", "transformers", "torchmetrics", "tokenizers", "jsonargparse")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def git_hash() -> str | None:
    """Commit of the lightning-edit source tree (``+dirty`` when it has uncommitted changes), None outside git."""
    here = Path(__file__).parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty.stdout.strip() else "")


def _interval(value: float, interval: list[float] | None) -> str:
    if math.isnan(value):
        return "n/a"
    if not interval or math.isnan(interval[0]):
        return f"{value:.4f}"
    return f"{value:.4f} ± {(interval[1] - interval[0]) / 2:.4f}"


def markdown_table(metrics: dict[str, dict[str, Any]]) -> str:
    """One row per metric: both aggregations with their 95% confidence half-width, counts and convention.

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
            f"| {CONVENTION_LABELS[result['kind']]} |"
        )
    return "\n".join(lines)


def write_results(
    directory: str | Path,
    metrics: dict[str, dict[str, Any]],
    config: dict[str, Any],
    counts: dict[str, Any],
    seconds: float | None = None,
) -> Path:
    """Write ``results.json`` and ``results.md`` into ``directory``; returns the JSON path.

    ``seconds``: wall-clock time of the evaluation (edits and scoring, not loading), reported as ``seconds``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "metrics": metrics,
        "counts": counts,
        "seconds": seconds,
        "config": config,
        "versions": package_versions(),
        "git_hash": git_hash(),
    }
    path = directory / "results.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    (directory / "results.md").write_text(markdown_table(metrics) + "\n")
    return path


def save_edited_model(model, tokenizer, directory: str | Path, cases: list, editor: str, hparams: Any) -> Path:
    """Save an edited model (safetensors) and its tokenizer, with ``edits.json``: which edits it holds."""
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    record = {
        "editor": editor,
        "hparams": json.loads(json.dumps(dict(hparams), default=str)),
        "edits": [
            {"case_id": case.case_id, "source": case.source, "requests": [asdict(r) for r in case.requests]}
            for case in cases
        ],
        "versions": package_versions(),
        "git_hash": git_hash(),
    }
    (directory / "edits.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return directory
