"""A model spread by a device map with its blocks offloaded to disk (accelerate's big-model inference, on CPU):
weights read whole, edits seen by the forward and undone bit for bit, the checkpoint never written; the
prefix reuse keeps accelerate's forwards; fingerprints of values; and one-line errors for bad maps."""

import hashlib
from pathlib import Path

import pytest
import torch

from lightning_edit.errors import ConfigError
from lightning_edit.models import WeightSnapshot, from_linear, resolve_architecture
from lightning_edit.models.hooks import PrefixReuse
from lightning_edit.models.loading import ModelSource, load_model
from lightning_edit.models.placement import add_to_weight, is_dispatched, is_offloaded, whole
from lightning_edit.stats.fingerprint import model_fingerprint, weights_digest

IDS = torch.tensor([[5, 17, 42, 8, 99, 3], [7, 7, 250, 31, 2, 64]])


def blocks_to_disk(model: torch.nn.Module) -> dict[str, str]:
    """A map of every decoder block to disk and every other module of the model to cpu."""
    arch = resolve_architecture(model)
    container, _, _ = arch.layer_name(arch.spec.blocks, 0).rpartition(".")  # transformer.h / model.layers
    parent, _, _ = container.rpartition(".")
    mapping = {arch.layer_name(arch.spec.blocks, i): "disk" for i in range(arch.num_layers)}
    mapping.update({f"{parent}.{name}": "cpu" for name, _ in model.get_submodule(parent).named_children()})
    mapping.update({name: "cpu" for name, _ in model.named_children() if name != parent})
    del mapping[container]
    return mapping


@pytest.fixture
def models(tiny_model_dir, tmp_path):
    """(plain, offloaded) copies of one tiny model, and the checkpoint's digest."""
    plain = load_model(ModelSource(str(tiny_model_dir)))
    source = ModelSource(str(tiny_model_dir), device_map=blocks_to_disk(plain), offload_folder=str(tmp_path / "off"))
    return plain, load_model(source)


def checkpoint_digest(directory: Path) -> str:
    return hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()


@torch.no_grad()
def logits(model: torch.nn.Module) -> torch.Tensor:
    return model(input_ids=IDS).logits


def test_an_offloaded_weight_is_read_whole_edited_and_undone_bit_for_bit(models, tiny_model_dir):
    plain, offloaded = models
    checkpoint = checkpoint_digest(tiny_model_dir)
    arch = resolve_architecture(offloaded)
    name = arch.layer_name(arch.spec.mlp_out, 1) + ".weight"
    module, plain_module = arch.module(arch.spec.mlp_out, 1), resolve_architecture(plain).module(arch.spec.mlp_out, 1)
    assert is_dispatched(offloaded) and not is_dispatched(plain)
    assert is_offloaded(module.weight) and not is_offloaded(plain_module.weight)
    assert torch.equal(whole(module), plain_module.weight)
    before = logits(offloaded)
    assert torch.equal(before, logits(plain))

    snapshot = WeightSnapshot(offloaded, [name])
    update = from_linear(torch.randn(arch.hidden_size, arch.mlp_hidden_size) * 0.1, arch.weight_layout(module))
    add_to_weight(module, update)
    add_to_weight(plain_module, update)
    assert is_offloaded(module.weight)  # still offloaded: the hook loads the edited value
    assert torch.equal(whole(module), plain_module.weight)
    edited = logits(offloaded)
    assert torch.equal(edited, logits(plain)) and not torch.equal(edited, before)
    assert snapshot.changed() == [name]

    snapshot.restore()
    assert snapshot.changed() == []
    assert torch.equal(logits(offloaded), before)  # the undo, bit for bit
    assert checkpoint_digest(tiny_model_dir) == checkpoint  # the checkpoint was read in place, never written


def test_prefix_reuse_hands_the_blocks_their_accelerate_forwards_back(models):
    _, offloaded = models
    arch = resolve_architecture(offloaded)
    blocks = [arch.module(arch.spec.blocks, i) for i in range(arch.num_layers)]
    forwards = [block.forward for block in blocks]
    reuse = PrefixReuse(blocks, 1)
    with reuse:
        first = logits(offloaded)
    with reuse:
        again = logits(offloaded)  # block 0 skipped
    assert torch.equal(first, again)
    assert [block.forward for block in blocks] == forwards  # accelerate's wrappers, not the class's forward
    assert torch.equal(logits(offloaded), first)


def test_fingerprints_read_the_offloaded_values(models):
    plain, offloaded = models
    assert model_fingerprint(offloaded, 1) == model_fingerprint(plain, 1)
    assert weights_digest(offloaded) == weights_digest(plain)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(device_map="gpu"), r"lm.device_map='gpu': a GPU index, cpu, disk or a torch device name"),
        (dict(device_map={"lm_head": "gpu7"}), r"lm.device_map\['lm_head'\]='gpu7': a GPU index"),
        (dict(device_map="auto", random_init_seed=0), "which lm.random_init_seed replaces: one"),
        (dict(device_map={"": "cpu"}, max_memory={"cpu": "1GB"}), "by name"),
    ],
)
def test_bad_settings_fail_in_one_line(tiny_model_dir, options, message):
    with pytest.raises(ConfigError, match=message) as error:
        ModelSource(str(tiny_model_dir), **options)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("fault", ["a missing module", "a parameter left out", "the embeddings offloaded"])
def test_bad_maps_fail_in_one_line_naming_the_module(tiny_model_dir, tmp_path, fault):
    mapping = blocks_to_disk(load_model(ModelSource(str(tiny_model_dir))))
    embeddings = next(name for name in mapping if name.endswith(("wte", "embed_tokens")))
    mapping, message = {
        "a missing module": ({**mapping, "lm_head.nowhere": "cpu"}, "names 'lm_head.nowhere', not a module"),
        "a parameter left out": ({k: v for k, v in mapping.items() if v != "disk"}, "places no module holding the"),
        "the embeddings offloaded": ({**mapping, embeddings: "disk", "lm_head": "disk"}, "offloads the input embed"),
    }[fault]
    with pytest.raises(ConfigError, match=message) as error:
        load_model(ModelSource(str(tiny_model_dir), device_map=mapping, offload_folder=str(tmp_path)))
    assert "\n" not in str(error.value)
