"""The memory budget of the v*/z optimisation: chunks that fit it give one graph's δ.

See docs/editors/locate-then-edit.md#memory-budget.
"""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from lightning_edit.cases import EditRequest
from lightning_edit.cli import build_cli
from lightning_edit.editors import graph_budget
from lightning_edit.editors.graph_budget import (
    BACKWARD_FACTOR,
    automatic_budget,
    chunk_requests,
    saved_bytes,
    weight_bytes,
)
from lightning_edit.editors.target_vector import TargetOptimization, optimize_target_vectors
from lightning_edit.errors import ConfigError
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.registry import resolve_architecture

REQUESTS = [
    EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English"),
    EditRequest("{} is located in", "Paris", "France"),
    EditRequest("I met {}", "France", "capital of Paris"),
    EditRequest("{} works in the field of", "Marie Curie", "chemistry and physics"),
    EditRequest("The capital city of {} is", "the Kingdom of Norway", "Oslo"),
]
TEMPLATES = ["{}", "Hello world. {}", "A B C. {}"]


def test_chunks_grow_until_the_budget():
    shapes = [(3, 10), (3, 10), (3, 20), (3, 10)]
    assert chunk_requests(shapes, 1.0, 60) == [range(0, 2), range(2, 3), range(3, 4)]  # 6 × 20 = 120 > 60
    assert chunk_requests(shapes, 1.0, 240) == [range(0, 4)]  # 12 rows × 20 = 240
    assert chunk_requests(shapes, 1.0, 1) == [range(i, i + 1) for i in range(4)]  # one request at least
    assert chunk_requests(shapes, 2.0, 120) == [range(0, 2), range(2, 3), range(3, 4)]


def test_saved_bytes_counts_activations_not_weights():
    linear = nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    with saved_bytes(linear) as size:
        linear(x).exp()  # the linear saves x (and its weight, not counted); exp saves its output
    assert size[0] == 2 * 4 * 8 * 4
    with torch.no_grad(), saved_bytes(linear) as size:
        linear(x).exp()
    assert size[0] == 0


def test_automatic_budget_is_the_weights_or_half_the_free_memory(tiny_lm, monkeypatch):
    model, _ = tiny_lm
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert weight_bytes(model) == weights
    monkeypatch.setattr(graph_budget, "free_bytes", lambda device: 10 * weights)
    assert automatic_budget(model) == weights
    monkeypatch.setattr(graph_budget, "free_bytes", lambda device: 1000)
    assert automatic_budget(model) == 500


def one_request_graph(model, tokenizer, module, config) -> int:
    with saved_bytes(model) as size:
        optimize_target_vectors(
            model, tokenizer, REQUESTS[:1], 0, module, TEMPLATES, replace(config, v_num_grad_steps=1)
        )
    return size[0]


@pytest.mark.parametrize("full_forward", [False, True])
def test_chunks_give_the_one_graph_result(tiny_lm, full_forward):
    model, tokenizer = tiny_lm
    module = resolve_architecture(model).spec.mlp_out
    config = TargetOptimization(
        v_num_grad_steps=8, clamp_norm_factor=50.0, v_weight_decay=1e-3, full_forward=full_forward
    )
    free = optimize_target_vectors(model, tokenizer, REQUESTS, 0, module, TEMPLATES, config)
    losses = torch.stack([record.loss for record in free.history])  # (S, n)
    # an early stop that some request reaches before the last step and another never: chunks end apart
    values = losses.flatten().sort().values
    threshold = next(
        (low + high) / 2
        for low, high in zip(values[:-1].tolist(), values[1:].tolist())
        if (losses[:-1] < (low + high) / 2).any(0).any() and not (losses < (low + high) / 2).any(0).all()
    )
    config = replace(config, early_stop_loss=threshold, memory_budget=2**40)
    whole = optimize_target_vectors(model, tokenizer, REQUESTS, 0, module, TEMPLATES, config)
    assert (whole.steps < config.v_num_grad_steps - 1).any() and (whole.steps == config.v_num_grad_steps - 1).any()
    budget = 3 * BACKWARD_FACTOR * one_request_graph(model, tokenizer, module, config)  # the longest request fits
    small = replace(config, memory_budget=budget)
    chunked = optimize_target_vectors(model, tokenizer, REQUESTS, 0, module, TEMPLATES, small)
    assert whole.chunks == (len(REQUESTS),) and whole.budget == 2**40
    assert len(chunked.chunks) > 1 and sum(chunked.chunks) == len(REQUESTS) and chunked.budget == small.memory_budget
    assert torch.equal(chunked.steps, whole.steps)
    for field in ("targets", "init", "deltas", "nll", "loss"):
        torch.testing.assert_close(getattr(chunked, field), getattr(whole, field), atol=1e-5, rtol=1e-5)
    assert len(chunked.history) == len(whole.history)
    for ours, theirs in zip(chunked.history, whole.history):
        assert torch.equal(ours.active, theirs.active)
        for field in ("nll", "kl", "weight_decay", "loss", "delta_norm"):
            torch.testing.assert_close(getattr(ours, field), getattr(theirs, field), atol=1e-5, rtol=1e-5)


def test_each_chunk_graph_fits_the_budget(tiny_lm):
    model, tokenizer = tiny_lm
    module = resolve_architecture(model).spec.mlp_out
    config = TargetOptimization(v_num_grad_steps=1)
    budget = 3 * BACKWARD_FACTOR * one_request_graph(model, tokenizer, module, config)
    chunks = optimize_target_vectors(
        model, tokenizer, REQUESTS, 0, module, TEMPLATES, replace(config, memory_budget=budget)
    ).chunks
    start = 0
    for size in chunks:
        with saved_bytes(model) as measured:
            optimize_target_vectors(model, tokenizer, REQUESTS[start : start + size], 0, module, TEMPLATES, config)
        assert BACKWARD_FACTOR * measured[0] <= 1.1 * budget  # the estimate: proportional to the padded tokens
        start += size


def test_a_budget_below_one_request_is_a_one_line_error(tiny_lm):
    model, tokenizer = tiny_lm
    module = resolve_architecture(model).spec.mlp_out
    before = [p.detach().clone() for p in model.parameters()]
    config = TargetOptimization(v_num_grad_steps=2, memory_budget=1000)
    with pytest.raises(ConfigError, match=r"^model.target.memory_budget=1000 bytes cannot hold .*one request") as error:
        optimize_target_vectors(model, tokenizer, REQUESTS, 0, module, TEMPLATES, config)
    assert "\n" not in str(error.value)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def toy_request_graph(method: str) -> int:
    """One toy CounterFact request's v*/z graph on the toy GPT-2, as ROME (mlp_out) or MEMIT (block) injects."""
    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    arch = resolve_architecture(model)
    module, layer = (arch.spec.mlp_out, 3) if method == "rome" else (arch.spec.blocks, 3)
    request = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English")
    with saved_bytes(model) as size:
        optimize_target_vectors(model, tokenizer, [request], layer, module, ["{}", "a b c d e {}"],
                                TargetOptimization(v_num_grad_steps=1))  # fmt: skip
    return size[0]


@pytest.mark.parametrize("method, protocol", [("rome", "single"), ("memit", "sequential"), ("alphaedit", "batch")])
def test_a_run_in_chunks_gives_the_same_cases(tmp_path, method, protocol):
    """The same per-case scores with the automatic budget (one chunk here) and a budget of about one request."""

    def run(budget: list[str]) -> tuple[list[dict], dict]:
        directory = tmp_path / str(len(budget))
        build_cli([
            "validate", f"--config={CONFIGS}/methods/{method}.yaml", f"--config={CONFIGS}/models/toy-gpt2.yaml",
            f"--config={CONFIGS}/benchmarks/counterfact.yaml", "--data.path=builtin:data/toy/counterfact.json",
            "--data.limit=6", "--data.batch_size=3", f"--model.protocol={protocol}", "--model.edit_batch_size=3",
            "--model.target.v_num_grad_steps=10", *budget, f"--trainer.default_root_dir={directory}",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        ])  # fmt: skip
        (results,) = directory.rglob("results.json")
        lines = (directory / results.parent / "cases.jsonl").read_text().splitlines()
        return [json.loads(line)["scores"] for line in lines], json.loads(results.read_text())

    cases, results = run([])
    budget = int(1.5 * BACKWARD_FACTOR * toy_request_graph(method))
    chunked_cases, chunked_results = run([f"--model.target.memory_budget={budget}"])
    assert chunked_cases == cases
    assert {k: v["macro"] for k, v in chunked_results["metrics"].items()} == {
        k: v["macro"] for k, v in results["metrics"].items()
    }
    assert chunked_results["memory"][0]["target_budget_bytes"] == budget
    assert results["memory"][0]["target_budget_bytes"] > budget


def test_a_budget_of_zero_is_refused_before_the_model_loads():
    with pytest.raises(ConfigError, match=r"^model.target.memory_budget=0: "):
        TargetOptimization(memory_budget=0)
