"""The locate-then-edit editors with the toy model presets make toy CounterFact edits and keep the neighbours.

A regression check of the figures in docs/toy-presets.md (benchmarks/toy_editing.py measures them on 50 edits):
on the first 8 toy edits each editor, composed as a user composes it, makes the model prefer every new object and
keeps most neighbourhood facts.
"""

from pathlib import Path

import pytest

from lightning_edit.cli import build_cli

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# AlphaEdit-only values the toy models need: see docs/toy-presets.md
METHODS = {"rome": [], "memit": [], "alphaedit": ["--model.nullspace_threshold=0.5", "--model.l2=1"]}


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("model", ["toy-gpt2", "toy-llama"])
def test_toy_preset_edits(method, model, tmp_path):
    cli = build_cli(
        [
            "validate",
            f"--config={CONFIGS / 'methods' / method}.yaml",
            f"--config={CONFIGS / 'models' / model}.yaml",
            f"--config={CONFIGS / 'benchmarks/counterfact.yaml'}",
            "--data.path=builtin:data/toy/counterfact.json",
            "--data.limit=8",
            f"--model.stats.cache_dir={tmp_path / 'stats'}",
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            *METHODS[method],
        ]
    )
    results = cli.model.metrics.results
    assert results["ES"]["n_cases"] == 8
    assert results["ES"]["macro"] == 1.0, results
    assert results["NS"]["macro"] >= 0.8, results
