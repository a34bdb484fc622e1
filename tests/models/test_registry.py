"""Architecture registry: templates, sizes and weight layouts on tiny random instances of every family."""

import copy

import pytest
import torch
from torch import nn
from transformers import (
    BertConfig,
    BertModel,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    GPTJConfig,
    GPTJForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaModel,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.pytorch_utils import Conv1D

from lightning_edit.models import (
    ARCHITECTURES,
    UnsupportedArchitectureError,
    from_linear,
    resolve_architecture,
    to_linear,
    weight_layout,
)

TOKENS = dict(vocab_size=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
LLAMA_LIKE = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)

TINY = {  # family -> (model class, config)
    "gpt2": (GPT2LMHeadModel, GPT2Config(n_embd=32, n_layer=2, n_head=4, **TOKENS)),
    "gptj": (GPTJForCausalLM, GPTJConfig(n_embd=48, n_layer=2, n_head=4, rotary_dim=4, **TOKENS)),
    "gpt_neox": (
        GPTNeoXForCausalLM,
        GPTNeoXConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, **TOKENS),
    ),
    "llama": (LlamaForCausalLM, LlamaConfig(hidden_size=64, intermediate_size=80, **LLAMA_LIKE, **TOKENS)),
    "mistral": (MistralForCausalLM, MistralConfig(hidden_size=32, intermediate_size=72, **LLAMA_LIKE, **TOKENS)),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(hidden_size=48, intermediate_size=88, **LLAMA_LIKE, **TOKENS)),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(hidden_size=32, intermediate_size=80, head_dim=8, **LLAMA_LIKE, **TOKENS)),
    "gemma3_text": (
        Gemma3ForCausalLM,
        Gemma3TextConfig(hidden_size=32, intermediate_size=64, head_dim=8, **LLAMA_LIKE, **TOKENS),
    ),
}
SIZES = {  # family -> (hidden size, d_ff); GPT-2 and GPT-J default to d_ff = 4 * hidden
    "gpt2": (32, 128),
    "gptj": (48, 192),
    "gpt_neox": (32, 96),
    "llama": (64, 80),
    "mistral": (32, 72),
    "qwen2": (48, 88),
    "qwen3": (32, 80),
    "gemma3_text": (32, 64),
}
FAMILIES = list(TINY)
LAYERED = ("blocks", "attention", "mlp", "mlp_out")
GLOBAL = ("final_norm", "unembedding", "embedding")


@pytest.fixture(scope="module")
def models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {family: cls(config).eval() for family, (cls, config) in TINY.items()}


def test_every_family_is_covered():
    assert set(FAMILIES) == set(ARCHITECTURES)


@pytest.mark.parametrize("family", FAMILIES)
def test_sizes(models, family):
    arch = resolve_architecture(models[family])
    hidden, d_ff = SIZES[family]
    assert arch.family == family
    assert (arch.num_layers, arch.hidden_size, arch.mlp_hidden_size, arch.vocab_size) == (2, hidden, d_ff, 128)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_template_resolves_for_every_layer(models, family):
    model = models[family]
    arch = resolve_architecture(model)
    spec = arch.spec
    for layer in range(arch.num_layers):
        for template in [getattr(spec, field) for field in LAYERED] + list(spec.mlp_in):
            name = arch.layer_name(template, layer)
            assert name == template.format(layer)
            assert arch.module(template, layer) is model.get_submodule(name)
    for field in GLOBAL:
        assert arch.module(getattr(spec, field)) is model.get_submodule(getattr(spec, field))
    assert isinstance(arch.module(spec.embedding), nn.Embedding)
    assert arch.module(spec.unembedding).weight.shape == (arch.vocab_size, arch.hidden_size)
    assert arch.module(spec.final_norm).weight.shape == (arch.hidden_size,)


@pytest.mark.parametrize("family", FAMILIES)
def test_weight_layout_and_projection_dims(models, family):
    arch = resolve_architecture(models[family])
    expected = "conv1d" if family == "gpt2" else "linear"
    for layer in range(arch.num_layers):
        mlp_out = arch.module(arch.spec.mlp_out, layer)
        assert arch.weight_layout(mlp_out) == expected
        assert to_linear(mlp_out.weight, expected).shape == (arch.hidden_size, arch.mlp_hidden_size)
        for template in arch.spec.mlp_in:
            mlp_in = arch.module(template, layer)
            assert to_linear(mlp_in.weight, weight_layout(mlp_in)).shape == (arch.mlp_hidden_size, arch.hidden_size)


def test_gpt2_unembedding_is_tied_to_embedding(models):
    arch = resolve_architecture(models["gpt2"])
    assert arch.module(arch.spec.unembedding).weight is arch.module(arch.spec.embedding).weight


def test_layer_and_path_errors(models):
    arch = resolve_architecture(models["llama"])
    with pytest.raises(IndexError, match="out of range"):
        arch.layer_name(arch.spec.mlp_out, 2)
    with pytest.raises(ValueError, match="needs a layer"):
        arch.module(arch.spec.mlp_out)
    with pytest.raises(ValueError, match="no layer placeholder"):
        arch.module(arch.spec.final_norm, 0)
    with pytest.raises(AttributeError, match=r"LlamaForCausalLM has no sub-module 'model\.layers\.0\.mlp\.nope'"):
        arch.module("model.layers.{}.mlp.nope", 0)


def test_unsupported_models_name_their_class():
    bert = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64))

    class TinyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

    for model, model_type in ((bert, "'bert'"), (TinyNet(), "None")):
        with pytest.raises(UnsupportedArchitectureError) as err:
            resolve_architecture(model)
        message = str(err.value)
        assert type(model).__name__ in message and model_type in message
        assert all(family in message for family in ARCHITECTURES)
    assert issubclass(UnsupportedArchitectureError, ValueError)


def test_base_model_without_lm_head_is_rejected():
    config = LlamaConfig(hidden_size=32, intermediate_size=64, **LLAMA_LIKE, **TOKENS)
    with pytest.raises(UnsupportedArchitectureError, match="LlamaModel.*LlamaForCausalLM"):
        resolve_architecture(LlamaModel(config))


def test_weight_layout_rejects_other_types():
    with pytest.raises(TypeError, match="Embedding"):
        weight_layout(nn.Embedding(4, 4))
    with pytest.raises(ValueError, match="Unknown weight layout"):
        to_linear(torch.zeros(2, 2), "transposed")


ORIENTATION_CASES = [(family, ARCHITECTURES[family].mlp_out) for family in FAMILIES] + [
    ("gpt2", "transformer.h.{}.attn.c_proj"),  # square Conv1D
    ("llama", "model.layers.{}.self_attn.o_proj"),  # square Linear
]


@pytest.mark.parametrize(("family", "template"), ORIENTATION_CASES)
def test_linear_convention_update_changes_output_by_delta_k(models, family, template):
    arch = resolve_architecture(models[family])
    module = copy.deepcopy(arch.module(template, 1)).double()
    layout = arch.weight_layout(module)
    w = to_linear(module.weight, layout)
    d_out, d_in = w.shape
    generator = torch.Generator().manual_seed(1)
    k = torch.randn(3, 5, d_in, dtype=torch.float64, generator=generator)
    delta = torch.randn(d_out, d_in, dtype=torch.float64, generator=generator)
    with torch.no_grad():
        bias = module.bias if module.bias is not None else 0.0
        torch.testing.assert_close(module(k), k @ w.T + bias, rtol=0, atol=1e-12)
        before = module(k)
        module.weight.add_(from_linear(delta, layout))
        torch.testing.assert_close(module(k) - before, k @ delta.T, rtol=0, atol=1e-12)


def test_square_conv1d_matches_linear_and_needs_the_transpose():
    torch.manual_seed(2)
    conv, linear = Conv1D(8, 8).double(), nn.Linear(8, 8).double()
    with torch.no_grad():
        linear.weight.copy_(to_linear(conv.weight, "conv1d"))
        linear.bias.copy_(conv.bias)
    k = torch.randn(4, 8, dtype=torch.float64)
    delta = torch.randn(8, 8, dtype=torch.float64)
    assert not torch.allclose(delta, delta.T)
    with torch.no_grad():
        torch.testing.assert_close(conv(k), linear(k), rtol=0, atol=1e-12)
        for module in (conv, linear):
            before = module(k)
            module.weight.add_(from_linear(delta, weight_layout(module)))
            torch.testing.assert_close(module(k) - before, k @ delta.T, rtol=0, atol=1e-12)
        before = conv(k)
        conv.weight.add_(delta)  # the shape-matching heuristic's mistake on a square matrix
        assert not torch.allclose(conv(k) - before, k @ delta.T)
