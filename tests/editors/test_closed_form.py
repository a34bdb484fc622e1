"""ROME, MEMIT and AlphaEdit end to end on tiny random GPT-2 and LLaMA-style models.

A randomly initialised model barely carries a change at one position to later ones, so these tests edit a prompt
that ends with its subject (the fact token is the last prompt token) and let δ grow (large clamp, no decay): the
point is the mechanics (statistics, keys, v*/z, solves, layouts), not the editing quality of a random model.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

from lightning_edit.cases import EditRequest
from lightning_edit.cli import build_cli
from lightning_edit.editors import MEMIT, ROME, AlphaEdit
from lightning_edit.editors.locate import fact_token_activations
from lightning_edit.editors.target_vector import TargetOptimization, optimize_target_vectors
from lightning_edit.models.loading import ModelSource, load_model
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.resources import builtin_texts
from lightning_edit.scoring import score_targets
from lightning_edit.stats.config import KeyStatistics

REQUEST = EditRequest("The capital of {}", "Brazil", "Paris", "Brasilia")
STRONG = TargetOptimization(v_num_grad_steps=25, clamp_norm_factor=100.0, v_weight_decay=0.0, kl_factor=0.0)
EDITORS = [
    (ROME, {}),
    (ROME, {"key": "prompt"}),
    (MEMIT, {}),
    (AlphaEdit, {"nullspace_threshold": 0.5, "l2": 1e-3}),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(builtin_texts()))
    return path


@pytest.fixture()
def stats(corpus, tmp_path) -> KeyStatistics:
    return KeyStatistics(corpus=str(corpus), n_samples=120, cache_dir=str(tmp_path / "cache"))


def make(cls, kwargs, model_dir, stats):
    sites = {"layer": 1} if cls is ROME else {"layers": [0, 1]}
    return cls(ModelSource(str(model_dir)), **sites, stats=stats, target=STRONG, template_lengths=[[8, 3]], **kwargs)


@pytest.mark.parametrize("cls, kwargs", EDITORS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_edit_makes_the_target_the_greedy_next_token(tiny_model_dir, stats, cls, kwargs):
    editor = make(cls, kwargs, tiny_model_dir, stats)
    snapshot = WeightSnapshot(editor.model)
    before = score_targets(editor.model, editor.tokenizer, [REQUEST.filled_prompt], [REQUEST.target_new])[0]
    assert before.argmax_ids[0] != before.target_ids[0]
    editor.apply_edits([REQUEST])
    assert sorted(snapshot.changed()) == sorted(editor.edited_parameters([REQUEST]))  # only the intended tensors
    after = score_targets(editor.model, editor.tokenizer, [REQUEST.filled_prompt], [REQUEST.target_new])[0]
    assert after.argmax_ids[0] == after.target_ids[0]
    assert after.logprobs[0] > before.logprobs[0]


def test_rome_writes_v_star_at_the_bare_prompt_key(tiny_model_dir, stats):
    """(W + ΔW) k₀ + b = v*: after the edit the MLP output at the fact token of the bare prompt is v*."""
    editor = make(ROME, {}, tiny_model_dir, stats)
    spec = editor.arch.spec
    templates = editor.templates.get(editor.model, editor.tokenizer, editor.template_lengths, editor.template_seed)
    expected = optimize_target_vectors(
        editor.model, editor.tokenizer, [REQUEST], 1, spec.mlp_out, templates, editor.target
    ).targets[0]
    editor.apply_edits([REQUEST])
    written = fact_token_activations(editor.model, editor.tokenizer, [REQUEST], spec.mlp_out, 1, ["{}"])[0]
    assert torch.allclose(written, expected.to(written.dtype), atol=1e-4 * expected.norm().item())


def test_alphaedit_accumulates_edited_keys_within_a_sequence_only(tiny_model_dir, stats):
    editor = make(AlphaEdit, {"nullspace_threshold": 0.5}, tiny_model_dir, stats)
    other = EditRequest("The capital of {}", "Chile", "Rome", "Santiago")
    editor.apply_edits([REQUEST])
    editor.apply_edits([other])
    assert all(cache.n_keys == 2 for cache in editor._edited_keys.values())
    with editor.edits_applied([REQUEST]):
        pass
    assert all(cache.n_keys == 0 for cache in editor._edited_keys.values())  # reset when the protocol restores


def test_memit_without_statistics_corpus_is_a_clear_error(tiny_model_dir):
    editor = MEMIT(ModelSource(str(tiny_model_dir)), layers=[0, 1], template_lengths=[[5, 3]])
    with pytest.raises(ValueError, match="needs key statistics"):
        editor.apply_edits([REQUEST])


def test_validate_and_fit_through_the_cli(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)
    common = [
        "--model=ROME",
        "--model.lm.path=builtin:models/tiny-gpt2",
        "--model.layer=1",
        f"--model.stats.corpus={corpus}",
        "--model.stats.n_samples=60",
        f"--model.stats.cache_dir={tmp_path / 'cache'}",
        "--model.template_lengths=[[5, 2]]",
        "--model.target.v_num_grad_steps=3",
        "--data=CounterFact",
        "--data.path=builtin:data/counterfact-flat.json",
        "--data.limit=2",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
    ]
    build_cli(["validate", *common, f"--trainer.default_root_dir={tmp_path / 'rome'}"])
    metrics = json.loads((tmp_path / "rome" / "results.json").read_text())["metrics"]
    assert metrics["ES"]["n_cases"] == 2 and metrics["locality_acc"]["n_cases"] == 2
    build_cli(["fit", *common, f"--model.output_dir={tmp_path / 'edited'}", f"--trainer.default_root_dir={tmp_path}"])
    record = json.loads((tmp_path / "edited" / "edits.json").read_text())
    assert record["editor"] == "ROME" and len(record["edits"]) == 2
    edited, original = (
        load_model(ModelSource(str(tmp_path / "edited"))),
        load_model(ModelSource("builtin:models/tiny-gpt2")),
    )
    changed = [n for (n, p), q in zip(edited.named_parameters(), original.parameters()) if not torch.equal(p, q)]
    assert changed == ["transformer.h.1.mlp.c_proj.weight"]
    scored = tmp_path / "no-edit"
    build_cli(["validate", "--model=NoEdit", f"--model.lm.path={tmp_path / 'edited'}", *common[8:],
               f"--trainer.default_root_dir={scored}"])  # fmt: skip
    assert json.loads((scored / "results.json").read_text())["metrics"]["ES"]["n_cases"] == 2  # validate loads it
