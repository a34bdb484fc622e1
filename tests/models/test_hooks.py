"""Trace hooks: side-effect free, always removed, early stop, tensor-vs-tuple outputs, gradients through edits."""

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, GPTJConfig, GPTJForCausalLM, LlamaConfig, LlamaForCausalLM

from lightning_edit.models import Trace, hidden_states, replace_hidden_states, resolve_architecture
from lightning_edit.models.hooks import PrefixReuse

TOKENS = dict(vocab_size=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
FAMILIES = ["gpt2", "gptj", "llama"]  # GPT-2 and LLaMA blocks return a tensor, GPT-J blocks a tuple


def build(family: str) -> nn.Module:
    """A fresh tiny model (fresh because ``output_hidden_states=True`` makes transformers install its own hooks)."""
    torch.manual_seed(0)
    if family == "gpt2":
        return GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **TOKENS)).eval()
    if family == "gptj":
        return GPTJForCausalLM(GPTJConfig(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, **TOKENS)).eval()
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, **TOKENS)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def input_ids() -> torch.Tensor:
    return torch.randint(3, 128, (3, 6), generator=torch.Generator().manual_seed(0))


def assert_no_hooks(model: nn.Module) -> None:
    for name, module in model.named_modules():
        assert not module._forward_hooks and not module._forward_pre_hooks, name
        assert not module._forward_hooks_with_kwargs and not module._forward_pre_hooks_with_kwargs, name


def all_names(model: nn.Module) -> list[str]:
    arch = resolve_architecture(model)
    layered = [arch.spec.blocks, arch.spec.attention, arch.spec.mlp, arch.spec.mlp_out, *arch.spec.mlp_in]
    return [arch.layer_name(t, layer) for layer in range(arch.num_layers) for t in layered] + [arch.spec.final_norm]


def test_hidden_states_unwrap_and_rewrap():
    x, y = torch.zeros(2, 3), torch.ones(2, 3)
    assert hidden_states(x) is x and replace_hidden_states(x, y) is y
    extra = object()
    assert hidden_states((x, extra)) is x
    rewrapped = replace_hidden_states((x, extra), y)
    assert type(rewrapped) is tuple and rewrapped[0] is y and rewrapped[1] is extra
    assert type(replace_hidden_states([x], y)) is list
    for bad in ((), (None, x), {"hidden_states": x}):
        with pytest.raises(TypeError):
            hidden_states(bad)
    with pytest.raises(TypeError):
        replace_hidden_states((), y)


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_edit_is_bit_identical_and_hooks_are_removed(input_ids, family):
    model = build(family)
    assert_no_hooks(model)
    with torch.no_grad():
        plain = model(input_ids).logits
        with Trace(model, all_names(model), inputs=True, edit_output=lambda name, h: h) as trace:
            traced = model(input_ids).logits
    assert torch.equal(plain, traced)
    assert set(trace.inputs) == set(trace.outputs) == set(all_names(model))
    assert_no_hooks(model)


@pytest.mark.parametrize("family", FAMILIES)
def test_recorded_block_tensors_keep_the_batch_dimension(input_ids, family):
    model = build(family)
    arch = resolve_architecture(model)
    blocks = [arch.layer_name(arch.spec.blocks, layer) for layer in range(arch.num_layers)]
    with torch.no_grad(), Trace(model, blocks, inputs=True) as trace:
        reference = model(input_ids, output_hidden_states=True).hidden_states
    for layer, name in enumerate(blocks):
        assert trace.outputs[name].shape == (*input_ids.shape, arch.hidden_size)
        assert torch.equal(trace.inputs[name], reference[layer])
        if layer < arch.num_layers - 1:  # HF reports the last block's output after the final norm
            assert torch.equal(trace.outputs[name], reference[layer + 1])


@pytest.mark.parametrize("family", FAMILIES)
def test_edit_replaces_the_output_seen_downstream(input_ids, family):
    model = build(family)
    arch = resolve_architecture(model)
    first, second = (arch.layer_name(arch.spec.blocks, layer) for layer in range(2))

    def zero_first_row(name: str, h: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.zeros_like(h[:1]), h[1:]]) if name == first else h

    with torch.no_grad(), Trace(model, [first, second], inputs=True, edit_output=zero_first_row) as trace:
        model(input_ids)
    assert torch.equal(trace.outputs[first][0], torch.zeros_like(trace.outputs[first][0]))
    assert torch.equal(trace.inputs[second], trace.outputs[first])
    assert_no_hooks(model)


def test_hooks_are_removed_when_the_forward_raises(input_ids):
    model = build("gpt2")

    def fail(name: str, h: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), Trace(model, all_names(model), inputs=True, edit_output=fail):
        model(input_ids)
    assert_no_hooks(model)


@pytest.mark.parametrize("family", FAMILIES)
def test_stop_after_skips_later_modules(input_ids, family):
    model = build(family)
    arch = resolve_architecture(model)
    first, second = (arch.layer_name(arch.spec.blocks, layer) for layer in range(2))
    reached_end = False
    with torch.no_grad(), Trace(model, [first, second, arch.spec.final_norm], stop_after=first) as trace:
        model(input_ids)
        reached_end = True
    assert not reached_end
    assert list(trace.outputs) == [first]
    assert_no_hooks(model)


def test_inner_trace_does_not_swallow_an_outer_stop(input_ids):
    model = build("llama")
    with torch.no_grad(), Trace(model, "model.layers.0", stop_after="model.layers.0") as outer:
        with Trace(model, "model.layers.1") as inner:
            model(input_ids)
        pytest.fail("the outer stop must propagate through the inner trace")
    assert "model.layers.0" in outer.outputs and not inner.outputs
    assert_no_hooks(model)


def test_input_passed_as_hidden_states_keyword_and_tuple_output():
    class Layer(nn.Module):
        def forward(self, hidden_states: torch.Tensor, scale: float = 2.0) -> tuple[torch.Tensor, None]:
            return hidden_states * scale, None

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = Layer()

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
            return self.layer(hidden_states=x, scale=3.0)

    net, x = Net(), torch.randn(2, 4)
    with Trace(net, "layer", inputs=True, edit_output=lambda name, h: h + 1) as trace:
        out = net(x)
    assert isinstance(out, tuple) and out[1] is None
    assert torch.equal(out[0], x * 3 + 1)
    assert torch.equal(trace.inputs["layer"], x) and torch.equal(trace.outputs["layer"], x * 3 + 1)
    assert_no_hooks(net)


def test_gradients_flow_through_edits(input_ids):
    model = build("llama")
    delta = torch.zeros(32, requires_grad=True)

    def add_delta(name: str, h: torch.Tensor) -> torch.Tensor:
        return h + delta

    for detach in (True, False):
        with Trace(model, "model.layers.0.mlp", edit_output=add_delta, detach=detach) as trace:
            loss = model(input_ids).logits.logsumexp(-1).sum()
        assert trace.outputs["model.layers.0.mlp"].requires_grad is not detach
        delta.grad = None
        loss.backward()
        assert delta.grad is not None and delta.grad.abs().sum() > 0
    assert_no_hooks(model)


def test_unknown_module_name_is_a_clear_error():
    model = build("gpt2")
    with pytest.raises(AttributeError, match=r"GPT2LMHeadModel has no sub-module 'transformer\.h\.7'"):
        Trace(model, ["transformer.h.7"])
    with pytest.raises(AttributeError, match="nope"):
        Trace(model, ["transformer.h.0"], stop_after="nope")


@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_reuse_replays_the_blocks_below_bit_identically(family, input_ids):
    model = build(family)
    arch = resolve_architecture(model)
    blocks = [arch.module(arch.spec.blocks, i) for i in range(arch.num_layers)]
    mask = torch.ones_like(input_ids)
    mask[0, -2:] = 0  # a padded row
    reuse = PrefixReuse(blocks, 1)
    calls = []
    mlp = arch.module(arch.spec.mlp, 0)
    mlp.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        for _ in range(3):
            with reuse:
                logits = model(input_ids=input_ids, attention_mask=mask).logits
            assert torch.equal(logits, model(input_ids=input_ids, attention_mask=mask).logits)
    assert len(calls) == 1 + 3  # block 0 ran in the first reused forward and in the three plain ones only
    mlp._forward_hooks.clear()
    assert_no_hooks(model)
    assert all("forward" not in vars(block) for block in blocks)
