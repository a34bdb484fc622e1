import pytest
import torch

from lightning_edit.models.loading import ModelNotFoundError, ModelSource, load_model, load_tokenizer


def test_builtin_model_loads_with_pad_token():
    source = ModelSource("builtin:models/tiny-gpt2")
    model, tokenizer = load_model(source), load_tokenizer(source)
    assert type(model).__name__ == "GPT2LMHeadModel" and not model.training
    assert tokenizer.pad_token == tokenizer.eos_token


def test_dtype_and_random_init_are_seeded(tiny_model_dir):
    half = load_model(ModelSource(str(tiny_model_dir), dtype="bfloat16"))
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    first = load_model(ModelSource(str(tiny_model_dir), random_init_seed=3))
    again = load_model(ModelSource(str(tiny_model_dir), random_init_seed=3))
    loaded = load_model(ModelSource(str(tiny_model_dir)))
    for (name, a), b, c in zip(first.named_parameters(), again.parameters(), loaded.parameters()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(first.parameters(), loaded.parameters()))


def test_missing_directory_and_offline_hub_id_name_the_model(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not found"):
        load_model(ModelSource(str(tmp_path / "nowhere")))
    with pytest.raises(ModelNotFoundError, match="some-org/some-model.*offline"):
        load_tokenizer(ModelSource("some-org/some-model"))
