"""WeightSnapshot: bit-identical restore after in-place edits and exact change reports."""

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from lightning_edit.models import WeightSnapshot, from_linear, resolve_architecture

EDITED = ["transformer.wte.weight", "transformer.h.1.mlp.c_proj.weight", "transformer.ln_f.bias"]


@pytest.fixture
def model() -> nn.Module:
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return GPT2LMHeadModel(config).eval()


def edit_in_place(model: nn.Module) -> None:
    arch = resolve_architecture(model)
    c_proj = arch.module(arch.spec.mlp_out, 1)
    with torch.no_grad():
        c_proj.weight.add_(from_linear(torch.randn(arch.hidden_size, arch.mlp_hidden_size), "conv1d"))
        model.lm_head.weight.mul_(2.0)  # tied: changes transformer.wte.weight
        model.transformer.ln_f.bias.fill_(0.5)


def test_restore_is_bit_identical_and_changed_is_exact(model):
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    snapshot = WeightSnapshot(model)
    assert snapshot.changed() == []
    edit_in_place(model)
    assert snapshot.changed() == EDITED
    params = dict(model.named_parameters())
    snapshot.restore()
    assert snapshot.changed() == []
    assert all(torch.equal(param, before[name]) for name, param in model.named_parameters())
    assert all(param is params[name] for name, param in model.named_parameters())  # restored in place
    assert model.lm_head.weight is model.transformer.wte.weight


def test_restore_from_cpu_copies_after_delta_and_negation(model):
    snapshot = WeightSnapshot(model, device="cpu")
    weight = model.transformer.h[0].mlp.c_proj.weight
    delta = torch.randn_like(weight)
    with torch.no_grad():
        weight.add_(delta)
        weight.sub_(delta)
    snapshot.restore()
    assert snapshot.changed() == []


def test_context_manager_restores_on_exception(model):
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    with pytest.raises(RuntimeError, match="boom"), WeightSnapshot(model) as snapshot:
        edit_in_place(model)
        assert snapshot.changed() == EDITED
        raise RuntimeError("boom")
    assert all(torch.equal(param, before[name]) for name, param in model.named_parameters())


def test_named_subset_only(model):
    snapshot = WeightSnapshot(model, names=["transformer.h.1.mlp.c_proj.weight", "transformer.h.0.ln_1.weight"])
    assert snapshot.names == ["transformer.h.1.mlp.c_proj.weight", "transformer.h.0.ln_1.weight"]
    edit_in_place(model)
    assert snapshot.changed() == ["transformer.h.1.mlp.c_proj.weight"]
    snapshot.restore()
    assert snapshot.changed() == []
    assert torch.equal(model.transformer.ln_f.bias, torch.full_like(model.transformer.ln_f.bias, 0.5))


def test_unknown_parameter_name(model):
    with pytest.raises(AttributeError, match="nope"):
        WeightSnapshot(model, names=["transformer.h.0.nope.weight"])
