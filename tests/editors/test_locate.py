"""Locate-then-edit machinery: context templates, fact token, keys, target vector optimisation.

docs/editors/locate-then-edit.md#locate-then-edit-machinery; the invariants checked are listed in
docs/editors/index.md#invariants.
"""

import json
from dataclasses import replace

import pytest
import torch

import lightning_edit.editors.context_templates as templates_module
from lightning_edit.cases import EditRequest
from lightning_edit.editors.context_templates import (
    WORD_SEED_PROMPTS,
    ContextTemplateCache,
    bare_and_prefixed,
    context_templates,
)
from lightning_edit.editors.locate import (
    compute_keys,
    encode_fact_prompt,
    fact_token_activations,
    fact_token_index,
    fill,
)
from lightning_edit.editors.target_vector import TargetOptimization, optimize_target_vectors
from lightning_edit.errors import ConfigError
from lightning_edit.models.hooks import Trace
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.models.tokenization import encode_prompt
from lightning_edit.scoring import score_targets

REQUESTS = [
    EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English"),
    EditRequest("{} is located in", "Paris", "France"),
    EditRequest("I met {}", "France", "capital of Paris"),  # subject last: δ sits right before the target
]
TEMPLATES = ["{}", "Hello world. {}", "A B C. {}"]
QUICK = TargetOptimization(v_num_grad_steps=6, v_weight_decay=1e-3)


def bare_fact_index(tokenizer, request: EditRequest) -> tuple[list[int], int]:
    _, ids, index = encode_fact_prompt(tokenizer, request.prompt, request.subject)
    return ids, index


# ---------------------------------------------------------------------------------------------- fact token


@pytest.mark.parametrize(
    "template",
    ["{} is located in", "The mother tongue of {} is", "I met {}", "Hello world. The capital of {} is", "{}"],
)
@pytest.mark.parametrize("subject", ["Danielle Darrieux", "France"])
def test_fact_token_decodes_to_the_subject(tiny_lm, template, subject):
    _, tokenizer = tiny_lm
    ids = encode_prompt(tokenizer, template.replace("{}", subject))
    first = fact_token_index(tokenizer, template, subject, "subject_first")
    last = fact_token_index(tokenizer, template, subject, "subject_last")
    assert fact_token_index(tokenizer, template, subject) == last  # the default
    assert fact_token_index(tokenizer, template, subject, "last") == len(ids) - 1
    assert tokenizer.decode(ids[first : last + 1]).strip() == subject  # exactly the subject's sub-tokens
    assert subject.startswith(tokenizer.decode(ids[first]).strip())
    assert subject.endswith(tokenizer.decode(ids[last]).strip())
    if tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id:
        assert first >= 1  # BOS counted (LLaMA style)
    if template.endswith("{}"):
        assert last == len(ids) - 1


def test_fact_token_rejects_bad_input(tiny_lm):
    _, tokenizer = tiny_lm
    with pytest.raises(ValueError, match="strategy"):
        fact_token_index(tokenizer, "{} is", "Paris", "object_last")
    with pytest.raises(ValueError, match="placeholder"):
        fact_token_index(tokenizer, "Paris is", "Paris")


# ---------------------------------------------------------------------------------------------- context templates


def test_context_templates_are_seeded_and_well_formed(tiny_lm):
    model, tokenizer = tiny_lm
    lengths = ((5, 3), (8, 2))
    templates = context_templates(model, tokenizer, lengths, seed=0)
    assert templates == context_templates(model, tokenizer, lengths, seed=0)
    assert templates != context_templates(model, tokenizer, lengths, seed=1)
    assert len(templates) == 6 and templates[0] == "{}"
    for template in templates[1:]:
        assert template.endswith(". {}")
        assert template.count("{") == template.count("}") == 1
        assert template.format("X").endswith(". X")
    worded = context_templates(model, tokenizer, ((10, 5),), seed_prompts=WORD_SEED_PROMPTS)
    assert len(worded) == 6 and all(t.startswith(p) for t, p in zip(worded[1:], WORD_SEED_PROMPTS))


def test_context_template_cache_is_keyed_by_model(tiny_lm, monkeypatch):
    model, tokenizer = tiny_lm
    calls = []
    real_generate = templates_module.generate

    def counting_generate(*args, **kwargs):
        calls.append(args[0])
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(templates_module, "generate", counting_generate)
    cache = ContextTemplateCache()
    first = cache.get(model, tokenizer, ((5, 2),), seed=3)
    assert cache.get(model, tokenizer, ((5, 2),), seed=3) == first and len(calls) == 1
    cache.get(model, tokenizer, ((5, 2),), seed=4)
    other = type(model)(model.config).eval()
    cache.get(other, tokenizer, ((5, 2),), seed=3)
    assert len(cache) == 3 and len(calls) == 3 and calls[-1] is other
    assert bare_and_prefixed(first) == [["{}"], first[1:]]


def test_a_stream_checkpoint_carries_the_cached_templates_as_json(tiny_lm, monkeypatch):
    """A resumed stream's model already holds edits: its templates are the checkpoint's, never generated again."""
    model, tokenizer = tiny_lm
    cache = ContextTemplateCache()
    first = cache.get(model, tokenizer, ((5, 2),), seed=3, seed_prompts=["The"])
    state = json.loads(json.dumps(cache.state(model)))
    assert state == [{"lengths": [[5, 2]], "seed": 3, "seed_prompts": ["The"], "top_k": 5, "templates": first}]
    monkeypatch.setattr(templates_module, "generate", lambda *args, **kwargs: pytest.fail("generated again"))
    resumed = ContextTemplateCache()
    resumed.load_state(model, tokenizer, state)
    assert resumed.get(model, tokenizer, ((5, 2),), seed=3, seed_prompts=["The"]) == first


# ---------------------------------------------------------------------------------------------- keys


def manual_keys(model, tokenizer, request, layer, templates):
    """Mean over templates of the mlp_out input at the fact token, each prompt run alone with a plain torch hook."""
    arch = resolve_architecture(model)
    seen = []
    handle = arch.module(arch.spec.mlp_out, layer).register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    try:
        keys = []
        for template in templates:
            _, ids, index = encode_fact_prompt(tokenizer, fill(template, request), request.subject)
            with torch.no_grad():
                model(torch.tensor([ids]))
            keys.append(seen[-1][0, index])
    finally:
        handle.remove()
    return torch.stack(keys).mean(0)


def test_keys_batched_equal_one_by_one_and_a_manual_hook(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    keys = compute_keys(model, tokenizer, REQUESTS, 1, TEMPLATES)
    assert keys.shape == (len(REQUESTS), arch.mlp_hidden_size) and keys.dtype == torch.float32
    for i, request in enumerate(REQUESTS):
        alone = compute_keys(model, tokenizer, [request], 1, TEMPLATES)[0]
        torch.testing.assert_close(keys[i], alone, atol=1e-5, rtol=0)
        torch.testing.assert_close(keys[i], manual_keys(model, tokenizer, request, 1, TEMPLATES), atol=1e-5, rtol=0)
    chunked = compute_keys(model, tokenizer, REQUESTS, 1, TEMPLATES, batch_size=2)
    torch.testing.assert_close(keys, chunked, atol=1e-5, rtol=0)


def test_key_averaging_over_template_groups(tiny_lm):
    model, tokenizer = tiny_lm
    prefixed = TEMPLATES[1:] + ["Paris. {}"]
    grouped = compute_keys(model, tokenizer, REQUESTS, 0, [["{}"], prefixed])
    bare = compute_keys(model, tokenizer, REQUESTS, 0, ["{}"])
    each = torch.stack([compute_keys(model, tokenizer, REQUESTS, 0, [t]) for t in prefixed])  # (3, n, d)
    # docs/editors/locate-then-edit.md#keys
    torch.testing.assert_close(grouped, 0.5 * bare + 0.5 * each.mean(0), atol=1e-6, rtol=0)
    flat = compute_keys(model, tokenizer, REQUESTS, 0, ["{}", *prefixed])
    torch.testing.assert_close(flat, (bare + each.sum(0)) / 4, atol=1e-6, rtol=0)


def test_fact_token_activations_read_block_outputs(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    h = fact_token_activations(model, tokenizer, REQUESTS, arch.spec.blocks, 1)  # MEMIT's H, bare prompt
    name = arch.layer_name(arch.spec.blocks, 1)
    for i, request in enumerate(REQUESTS):
        ids, index = bare_fact_index(tokenizer, request)
        with torch.no_grad(), Trace(model, name) as trace:
            model(torch.tensor([ids]))
        torch.testing.assert_close(h[i], trace.outputs[name][0, index], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------- target vectors


@pytest.mark.parametrize("where", ["mlp_out", "blocks"])
def test_step_zero_and_m0(tiny_lm, where):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    module = getattr(arch.spec, where)
    config = TargetOptimization(v_num_grad_steps=1)
    result = optimize_target_vectors(model, tokenizer, REQUESTS, 0, module, TEMPLATES, config)
    (step0,) = result.history
    assert torch.equal(step0.kl, torch.zeros(len(REQUESTS)))  # exactly 0
    assert torch.equal(result.deltas, torch.zeros_like(result.deltas)) and result.steps.tolist() == [0, 0, 0]
    assert torch.equal(step0.delta_norm, torch.zeros(len(REQUESTS)))
    name = arch.layer_name(module, 0)
    for i, request in enumerate(REQUESTS):
        prompts = [fill(t, request).replace("{}", request.subject) for t in TEMPLATES]
        scores = score_targets(model, tokenizer, prompts, [request.target_new] * len(prompts))
        expected = sum(s.nll for s in scores) / len(scores)
        assert step0.nll[i].item() == pytest.approx(expected, abs=1e-5)
        ids, index = bare_fact_index(tokenizer, request)
        with torch.no_grad(), Trace(model, name) as trace:
            model(torch.tensor([ids]))
        torch.testing.assert_close(result.init[i], trace.outputs[name][0, index], atol=1e-6, rtol=0)
    torch.testing.assert_close(result.targets, result.init)


def test_clamp_holds_after_every_step(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    config = TargetOptimization(v_num_grad_steps=6, v_lr=0.5, clamp_norm_factor=0.5, v_weight_decay=1e-3)
    result = optimize_target_vectors(model, tokenizer, REQUESTS, 0, arch.spec.blocks, TEMPLATES, config)
    bound = config.clamp_norm_factor * result.init.norm(dim=-1)
    norms = torch.stack([record.delta_norm for record in result.history] + [result.deltas.norm(dim=-1)])  # (S, n)
    assert (norms <= bound * (1 + 1e-5)).all()
    torch.testing.assert_close(norms[-1], bound, rtol=1e-5, atol=0)  # the clamp is active here
    assert result.steps.tolist() == [config.v_num_grad_steps - 1] * len(REQUESTS)  # the last iteration never steps


def run_each(model, tokenizer, module, config):
    return [optimize_target_vectors(model, tokenizer, [r], 0, module, TEMPLATES, config) for r in REQUESTS]


def test_batched_equals_one_by_one_with_per_request_early_stop(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    module = arch.spec.mlp_out
    free = TargetOptimization(v_num_grad_steps=6, v_weight_decay=1e-3, early_stop_loss=float("-inf"))
    singles = run_each(model, tokenizer, module, free)
    # an early-stop threshold, far from every loss value, at which one request stops early and another never does
    losses = torch.stack([torch.stack([h.loss[0] for h in s.history]) for s in singles])  # (n, S)
    values = losses.flatten().sort().values
    candidates = []
    for low, high in zip(values[:-1].tolist(), values[1:].tolist()):
        below = losses < (low + high) / 2
        stops = [int(row.nonzero()[0]) if row.any() else None for row in below]
        if any(s is None for s in stops) and any(s is not None and s < losses.shape[1] - 1 for s in stops):
            candidates.append((high - low, (low + high) / 2, stops))
    assert candidates, "no threshold separates the requests"
    _, threshold, stops = max(candidates)
    config = TargetOptimization(v_num_grad_steps=6, v_weight_decay=1e-3, early_stop_loss=threshold)
    singles = run_each(model, tokenizer, module, config)
    batched = optimize_target_vectors(model, tokenizer, REQUESTS, 0, module, TEMPLATES, config)
    assert batched.steps.tolist() == [config.v_num_grad_steps - 1 if s is None else s for s in stops]
    for i, single in enumerate(singles):
        assert single.steps.item() == batched.steps[i].item()
        for field in ("targets", "init", "deltas", "nll", "loss"):
            torch.testing.assert_close(getattr(batched, field)[i], getattr(single, field)[0], atol=1e-5, rtol=0)
    for i, stop in enumerate(stops):
        if stop is not None:
            stopped = torch.stack([h.delta_norm[i] for h in batched.history[stop:]])
            assert torch.equal(stopped, stopped[:1].expand_as(stopped))  # a stopped request's δ no longer changes
            assert batched.loss[i] < threshold
            assert not any(h.active[i] for h in batched.history[stop + 1 :])


def test_injecting_delta_lowers_the_target_nll(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    config = TargetOptimization(v_num_grad_steps=10, clamp_norm_factor=50.0, v_weight_decay=1e-3)
    result = optimize_target_vectors(model, tokenizer, REQUESTS, 0, arch.spec.mlp_out, TEMPLATES, config)
    name = arch.layer_name(arch.spec.mlp_out, 0)
    for i, request in enumerate(REQUESTS):
        _, index = bare_fact_index(tokenizer, request)
        before = score_targets(model, tokenizer, [request.filled_prompt], [request.target_new])[0].nll

        def add_delta(_, hidden, i=i, index=index):
            hidden = hidden.clone()
            hidden[0, index] = result.targets[i]  # v* = m⁰ + δ replaces the MLP output at the fact token
            return hidden

        with Trace(model, name, outputs=False, edit_output=add_delta):
            after = score_targets(model, tokenizer, [request.filled_prompt], [request.target_new])[0].nll
        assert after < before
    assert (result.nll < result.history[0].nll).all()


def test_loss_at_an_inner_layer(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    config = TargetOptimization(v_num_grad_steps=3, v_loss_layer=0, v_weight_decay=1e-3)
    result = optimize_target_vectors(model, tokenizer, REQUESTS[:1], 0, arch.spec.mlp_out, TEMPLATES, config)
    assert result.history[0].kl.item() == 0.0
    request, block = REQUESTS[0], arch.layer_name(arch.spec.blocks, 0)
    nlls = []
    for template in TEMPLATES:
        text = fill(template, request).replace("{}", request.subject)
        prompt_ids = encode_prompt(tokenizer, text)
        full = encode_prompt(tokenizer, f"{text} {request.target_new}")
        with torch.no_grad(), Trace(model, block, stop_after=block) as trace:
            model(torch.tensor([full]))
        with torch.no_grad():
            logits = arch.module(arch.spec.unembedding)(arch.module(arch.spec.final_norm)(trace.outputs[block][0]))
        logprobs = torch.log_softmax(logits.float(), -1)
        target_positions = range(len(prompt_ids), len(full))
        nlls.append(-sum(logprobs[t - 1, full[t]] for t in target_positions) / len(target_positions))
    assert result.history[0].nll.item() == pytest.approx(float(sum(nlls) / len(nlls)), abs=1e-5)


def test_model_untouched_and_no_hooks_left(tiny_model_dir):
    model, tokenizer = load_model_and_tokenizer(ModelSource(str(tiny_model_dir)))  # fresh: no HF capture hooks
    arch = resolve_architecture(model)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    with torch.no_grad():  # the optimisation turns gradients on for itself
        optimize_target_vectors(model, tokenizer, REQUESTS, 0, arch.spec.mlp_out, TEMPLATES, QUICK)
    optimize_target_vectors(model, tokenizer, REQUESTS, 1, arch.spec.blocks, TEMPLATES, QUICK)
    compute_keys(model, tokenizer, REQUESTS, 1, [["{}"], TEMPLATES[1:]])
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    for name, p in model.named_parameters():
        assert p.requires_grad == flags[name] and p.grad is None, name
    assert not model.training
    for name, module in model.named_modules():
        assert not module._forward_hooks and not module._forward_pre_hooks, name
        assert not module._forward_hooks_with_kwargs and not module._forward_pre_hooks_with_kwargs, name


def test_bad_templates_are_rejected(tiny_lm):
    model, tokenizer = tiny_lm
    module = resolve_architecture(model).spec.mlp_out
    with pytest.raises(ValueError, match="bare"):
        optimize_target_vectors(model, tokenizer, REQUESTS, 0, module, TEMPLATES[1:], QUICK)
    with pytest.raises(ValueError, match="exactly one"):
        compute_keys(model, tokenizer, REQUESTS, 0, ["no placeholder"])


@pytest.mark.parametrize("where", ["mlp_out", "blocks"])
def test_prefix_reuse_and_target_logits_give_the_full_forward_values(tiny_lm, where):
    """The default loop (blocks below the injection run once, logits only where the loss reads them) computes what
    the reference loop (whole model, every position's logits, at every iteration) computes."""
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    module = getattr(arch.spec, where)
    config = TargetOptimization(v_num_grad_steps=6, v_weight_decay=1e-3, early_stop_loss=0.0)
    fast = optimize_target_vectors(model, tokenizer, REQUESTS, 1, module, TEMPLATES, config)
    full = optimize_target_vectors(model, tokenizer, REQUESTS, 1, module, TEMPLATES, replace(config, full_forward=True))
    for field in ("targets", "init", "deltas", "nll", "loss"):
        torch.testing.assert_close(getattr(fast, field), getattr(full, field), atol=1e-6, rtol=0)
    for a, b in zip(fast.history, full.history):
        torch.testing.assert_close(a.loss, b.loss, atol=1e-6, rtol=0)


def test_a_sharded_model_refuses_the_loss_at_an_inner_layer_in_one_line(tiny_lm, monkeypatch):
    import lightning_edit.editors.target_vector as target_vector

    model, tokenizer = tiny_lm
    monkeypatch.setattr(target_vector, "is_sharded", lambda model: True)  # as under ModelParallelStrategy
    config = TargetOptimization(v_num_grad_steps=2, v_loss_layer=0)
    with pytest.raises(ConfigError, match=r"^model.target.v_loss_layer=0: logits of an inner layer") as error:
        optimize_target_vectors(
            model, tokenizer, REQUESTS[:1], 0, resolve_architecture(model).spec.mlp_out, TEMPLATES, config
        )
    assert "\n" not in str(error.value)
