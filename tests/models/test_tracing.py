"""Causal tracing against what is known without it: restoring the last layer at the last token gives back the clean
probability, states before the subject carry no effect, the prefix-reusing traces equal whole forwards, and on the
toy GPT-2 (which looks facts up where the subject ends) corrupting the subject destroys its known facts."""

import json

import pytest
import torch

from lightning_edit.models.hooks import Trace
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.models.tracing import CATEGORIES, Fact, _window, category_effects, noise_scale, trace_fact
from lightning_edit.resources import resolve_path

FACT = Fact("Answer: The capital of France is", "France", "Paris")


def test_restoring_the_output_at_the_last_layer_and_token_gives_the_clean_probability(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    trace = trace_fact(model, tokenizer, arch, FACT, noise=1.0, samples=4, window=2)
    hidden = trace.effects["hidden"]
    assert hidden.shape == (arch.num_layers, len(trace.tokens))
    assert hidden[-1, -1].item() == pytest.approx(trace.p_clean - trace.p_corrupted, abs=1e-6)
    first, _ = trace.subject
    for kind, effects in trace.effects.items():  # the tokens before the subject are never corrupted
        assert effects[:, :first].abs().max().item() < 1e-6, kind
    assert trace.p_corrupted != trace.p_clean


def test_prefix_reuse_traces_equal_whole_forwards(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    samples, layer, kind = 3, 1, "mlp"
    trace = trace_fact(model, tokenizer, arch, FACT, noise=2.0, samples=samples, window=2, seed=5)
    ids = torch.tensor([tokenizer(FACT.prompt)["input_ids"]])
    first, stop = trace.subject
    draws = 2.0 * torch.randn(
        samples, stop - first, model.config.hidden_size, generator=torch.Generator().manual_seed(5)
    )
    names = [arch.layer_name(arch.spec.mlp, index) for index in _window(layer, 2, arch.num_layers)]
    with torch.no_grad(), Trace(model, names) as clean:
        model(ids)
    answer = tokenizer(f"{FACT.prompt} {FACT.answer}")["input_ids"][len(ids[0])]
    token = ids.shape[1] - 1

    def noisy(name, hidden):
        return torch.cat([hidden[:, :first], hidden[:, first:stop] + draws, hidden[:, stop:]], 1)

    def restore(name, hidden):
        hidden = hidden.clone()
        hidden[:, token] = clean.outputs[name][0, token]
        return hidden

    with (
        torch.no_grad(),
        Trace(model, arch.spec.embedding, edit_output=noisy),
        Trace(model, names, edit_output=restore),
    ):
        p = model(ids.expand(samples, -1)).logits[:, -1].softmax(-1)[:, answer].mean()
    assert trace.effects[kind][layer, token].item() == pytest.approx(p.item() - trace.p_corrupted, abs=1e-6)


def test_categories_of_a_fact_average_its_tokens(tiny_lm):
    model, tokenizer = tiny_lm
    trace = trace_fact(model, tokenizer, resolve_architecture(model), FACT, noise=1.0, samples=2, kinds=("hidden",))
    table = category_effects(trace)["hidden"]
    first, stop = trace.subject
    assert len(table[0]) == len(CATEGORIES)
    assert table[0][0] == pytest.approx(trace.effects["hidden"][0, first].item())
    assert table[-1][-1] == pytest.approx(trace.effects["hidden"][-1, -1].item())
    if stop - first < 3:
        assert table[0][1] is None


def test_window_is_the_reference_codes():
    assert list(_window(0, 10, 30)) == list(range(0, 5))
    assert list(_window(12, 10, 30)) == list(range(7, 17))
    assert list(_window(29, 10, 30)) == list(range(24, 30))


def test_the_toy_model_loses_its_known_facts_when_the_subject_is_corrupted():
    """The toy GPT-2 recalls every forward fact (recall 1.000); 3σ noise on the subject removes most of it, and the
    last subject token's early states and the last token's late states carry it back."""
    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-gpt2"))
    arch = resolve_architecture(model)
    records = json.loads(resolve_path("builtin:data/toy/counterfact.json").read_text())[:6]
    rewrites = [record["requested_rewrite"] for record in records]
    facts = [Fact(r["prompt"].format(r["subject"]), r["subject"], r["target_true"]["str"]) for r in rewrites]
    noise = noise_scale(model, tokenizer, arch, [fact.subject for fact in facts])
    traces = [trace_fact(model, tokenizer, arch, fact, noise, samples=4, kinds=("hidden",)) for fact in facts]
    assert all(trace.p_clean > 0.5 for trace in traces)
    assert sum(trace.p_corrupted for trace in traces) / len(traces) < 0.5 * sum(t.p_clean for t in traces) / len(traces)
    for trace in traces:
        last_subject = trace.subject[1] - 1
        assert trace.effects["hidden"][0, last_subject] > 0 and trace.effects["hidden"][-1, -1] > 0
