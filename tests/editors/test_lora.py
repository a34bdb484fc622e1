"""LoRA through peft: adapters on the right modules, removed bit-identically by the undo under every protocol, and
the fit -> validate round trip of an exported adapter or merged model through the CLI."""

import json
import sys

import pytest
import torch
from lightning import Trainer

from lightning_edit.cases import EditRequest
from lightning_edit.cli import build_cli
from lightning_edit.data import CounterFact
from lightning_edit.editors import LoRA
from lightning_edit.models.loading import ModelSource

TINY = ModelSource("builtin:models/tiny-gpt2")
REQUEST = EditRequest("{} is located in", "The Eiffel Tower", "Rome")
FAST = dict(num_steps=3, lr=1e-2)


def snapshot(model: torch.nn.Module) -> tuple[dict, dict]:
    """The model's state and the type of every module, to compare with after an undo."""
    state = {name: value.clone() for name, value in model.state_dict().items()}
    return state, {name: type(module) for name, module in model.named_modules()}


def assert_original(model: torch.nn.Module, original: tuple[dict, dict]) -> None:
    state, types = original
    now = model.state_dict()
    assert now.keys() == state.keys() and all(torch.equal(state[name], now[name]) for name in now)
    assert {name: type(module) for name, module in model.named_modules()} == types
    assert not hasattr(model, "peft_config") and not any(p.requires_grad for p in model.parameters())


def test_target_roles_map_to_the_modules_of_each_family():
    gpt2 = LoRA(TINY)
    assert gpt2.module_names == ["transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"]  # q and v: fused
    llama = LoRA(ModelSource("builtin:models/toy-llama"), layers=[1, 3])
    assert llama.module_names == [
        f"model.layers.{layer}.self_attn.{p}" for layer in (1, 3) for p in ("q_proj", "v_proj")
    ]
    mlp = LoRA(TINY, target_modules=["mlp_in", "mlp_out"], layers=[1])
    assert mlp.module_names == ["transformer.h.1.mlp.c_fc", "transformer.h.1.mlp.c_proj"]


def test_an_edit_trains_only_the_adapter_and_its_undo_unloads_it_bit_identically():
    editor = LoRA(TINY, **FAST)
    original = snapshot(editor.model)
    ids = editor.tokenizer("The Eiffel Tower is located in", return_tensors="pt").input_ids
    before = editor.model(ids).logits
    undo = editor.edit([REQUEST])
    assert editor.adapter_names() == ["edit_0"]
    assert not torch.equal(editor.model(ids).logits, before)
    base = {n: p for n, p in editor.model.named_parameters() if "lora_" not in n}
    assert all(torch.equal(original[0][n.replace(".base_layer", "")], p) for n, p in base.items())
    editor.undo(undo)
    assert_original(editor.model, original)
    assert torch.equal(editor.model(ids).logits, before)


def test_per_edit_adapters_accumulate_frozen_and_are_all_removed():
    editor = LoRA(TINY, sequential_adapters="per_edit", **FAST)
    original = snapshot(editor.model)
    undo = editor.prepare_undo([REQUEST, REQUEST])
    editor.apply_edits([REQUEST])
    first = {n: p.detach().clone() for n, p in editor.model.named_parameters() if ".edit_0." in n}
    editor.apply_edits([EditRequest("{} speaks", "Danielle Darrieux", "English")])
    assert editor.adapter_names() == ["edit_0", "edit_1"]
    assert editor._peft.base_model.active_adapters == ["edit_0", "edit_1"]  # both add their B A
    assert all(torch.equal(p, first[n]) for n, p in editor.model.named_parameters() if ".edit_0." in n)
    editor.undo(undo)
    assert_original(editor.model, original)


@pytest.mark.parametrize(
    ("protocol", "options"),
    [
        ("single", {}),
        ("batch", {"edit_batch_size": 2}),
        ("sequential", {"edit_batch_size": 2, "eval_at": [2]}),
        ("sequential", {"sequential_adapters": "per_edit"}),
    ],
)
def test_every_protocol_restores_the_model_bit_identically(protocol, options):
    editor = LoRA(TINY, protocol=protocol, **FAST, **options)
    original = snapshot(editor.model)
    data = CounterFact("builtin:data/counterfact-flat.json", limit=4, batch_size=2)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.metrics.results["ES"]["n_cases"] == 4
    assert_original(editor.model, original)


def cli(monkeypatch, folder: str, *args: str):
    """A run without a logger, writing into ``runs/<folder>`` (each run into its own)."""
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    common = ["--data=CounterFact", "--data.path=builtin:data/toy/counterfact.json", "--data.limit=3"]
    common += ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    common += [f"--trainer.default_root_dir=runs/{folder}"]
    return build_cli([*args, *common])


def test_fit_exports_an_adapter_or_the_merged_model_and_validate_scores_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lora = ["--model=LoRA", "--model.lm.path=builtin:models/toy-gpt2", "--model.num_steps=10"]
    for export in ("adapter", "merged"):
        output = [f"--model.export={export}", f"--model.output_dir={tmp_path / export}"]
        fit = cli(monkeypatch, f"fit-{export}", "fit", *lora, *output)
        assert fit.model.adapter_names() == []  # the fit undid its edits
        assert len(json.loads((tmp_path / export / "edits.json").read_text())["edits"]) == 3
    assert (tmp_path / "adapter" / "edit_0" / "adapter_config.json").is_file()
    assert (tmp_path / "merged" / "model.safetensors").is_file()
    models = {
        "unedited": ["--model=NoEdit", "--model.lm.path=builtin:models/toy-gpt2"],
        "adapter": [*lora, f"--model.adapter_path={tmp_path / 'adapter'}"],
        "merged": ["--model=NoEdit", f"--model.lm.path={tmp_path / 'merged'}"],
    }
    results = {name: cli(monkeypatch, name, "validate", *flags) for name, flags in models.items()}
    es = {name: run.model.metrics.results["ES"]["macro"] for name, run in results.items()}
    assert es["unedited"] == 0.0 and es["adapter"] > 0.5
    assert es["merged"] == es["adapter"]
    assert results["adapter"].model.adapter_names() == ["edit_0"]  # the loaded adapter stays for the whole run
