"""MEND: gradient decomposition, hypernetwork invariants, training step, checkpoints and the validate protocols.

Everything runs on the tiny random GPT-2 (Conv1D) and LLaMA (Linear) models of ``conftest.py`` in seconds.
"""

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
import yaml
from lightning import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from transformers import AutoModelForCausalLM, GPT2Config, GPTJConfig, LlamaConfig

from lightning_edit.cases import EditRequest
from lightning_edit.cli import InterruptCheckpoint, build_cli
from lightning_edit.data import EditTraining
from lightning_edit.editors import MEND
from lightning_edit.editors.gradients import target_nll
from lightning_edit.editors.mend import MENDCheckpointError, read_hypernetwork
from lightning_edit.editors.mend_network import GradientTransform, RunningNorm
from lightning_edit.models.build import train_tokenizer
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import from_linear
from lightning_edit.models.snapshot import WeightSnapshot
from lightning_edit.resources import builtin_texts
from lightning_edit.toy import ToyEditTraining

ROOT = Path(__file__).resolve().parents[2]
SHARED_COUNTERFACT = ROOT.parent / "shared" / "data" / "counterfact"
REQUESTS = [
    EditRequest("The capital of {} is", "France", "Paris"),
    EditRequest("{} speaks", "Danielle Darrieux", "English"),
]
QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, inference_mode=False)


@pytest.fixture(autouse=True)
def _single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mend(model_dir: Path, **kwargs) -> MEND:
    kwargs = {"layers": [0, 1], "rank": 8, **kwargs}
    return MEND(ModelSource(str(model_dir)), **kwargs)


def edit_nll(editor: MEND, requests: list[EditRequest]) -> torch.Tensor:
    batch = editor.encode([r.filled_prompt for r in requests], [r.target_new for r in requests])
    with torch.no_grad():
        return target_nll(editor._logits(batch), batch)


def training_data(**kwargs) -> EditTraining:
    data = EditTraining(
        "counterfact", train_path="builtin:data/counterfact-rome.json", val_size=2, n_locality=2, **kwargs
    )
    data.setup()
    return data


# ----------------------------------------------------------------------------------------------------------------
# Gradient decomposition and the hypernetwork


def test_pseudo_gradient_equals_grad_at_identity(tiny_model_dir):
    """Identity transform, normalisation off: −ΔW/η is ∇_W of the edit loss, in the stored layout (Conv1D, Linear)."""
    editor = mend(tiny_model_dir, norm=False)
    updates = editor.updates(REQUESTS)
    weights = [editor.model.get_parameter(name) for name in editor.inner_params]
    for weight in weights:
        weight.requires_grad_(True)
    batch = editor.encode([r.filled_prompt for r in REQUESTS], [r.target_new for r in REQUESTS])
    target_nll(editor._logits(batch), batch).sum().backward()
    expected_layout = "conv1d" if editor.arch.family == "gpt2" else "linear"
    for position, (name, weight) in enumerate(zip(editor.inner_params, weights)):
        assert editor.layouts[name] == expected_layout
        pseudo = from_linear(-updates[name] / editor.network.edit_lrs[position], editor.layouts[name])
        assert pseudo.shape == weight.grad.shape
        torch.testing.assert_close(pseudo, weight.grad, rtol=1e-5, atol=1e-7)
        weight.requires_grad_(False)


def test_transform_is_identity_at_init():
    transform = GradientTransform(d_in=5, d_out=3, rank=4, n_layers=2, n_modes=2, norm=False)
    u, delta = torch.randn(7, 5), torch.randn(7, 3)
    for mode in (0, 1):
        u_out, delta_out = transform(u, delta, mode)
        assert torch.equal(u_out, u) and torch.equal(delta_out, delta)


def test_running_statistics_equal_batch_statistics():
    """One batch: running mean/var are the batch's; two batches: those of the concatenation."""
    x, y = torch.randn(13, 6) * 3 + 1, torch.randn(4, 6) - 2
    norm = RunningNorm(6)
    norm.update(x)
    torch.testing.assert_close(norm.mean, x.double().mean(0))
    torch.testing.assert_close(norm.var, x.double().var(0))
    torch.testing.assert_close(norm(x), (x - x.mean(0)) / (x.std(0) + 1e-7), rtol=1e-5, atol=1e-5)
    norm.update(y)
    both = torch.cat([x, y]).double()
    torch.testing.assert_close(norm.mean, both.mean(0))
    torch.testing.assert_close(norm.var, both.var(0))


def test_network_statistics_are_those_of_the_edit_rows(tiny_model_dir):
    """In training the shared transforms' statistics absorb exactly the non-zero rows [u, δ] of the edit batch."""
    editor = mend(tiny_model_dir)
    factors = editor.edit_factors(REQUESTS)
    editor.network(factors, update_stats=True)
    for index, transform in enumerate(editor.network.transforms):
        names = [name for name, (i, _) in editor.network.slot.items() if i == index]
        rows = []
        for name in names:
            u, delta = factors[name]
            keep = (u != 0).any(-1) & (delta != 0).any(-1)
            rows.append(torch.cat([u[keep], delta[keep]], dim=-1))
        rows = torch.cat(rows).double()
        torch.testing.assert_close(transform.norm.mean, rows.mean(0))
        torch.testing.assert_close(transform.norm.var, rows.var(0))
    counts = [float(transform.norm.count) for transform in editor.network.transforms]
    editor.network(factors)  # editing outside training leaves the statistics alone
    assert [float(transform.norm.count) for transform in editor.network.transforms] == counts


def test_shared_transforms_per_shape(tiny_model_dir):
    editor = mend(tiny_model_dir)
    n_projections = 2 if editor.arch.family == "gpt2" else 3  # c_fc, c_proj | gate, up, down
    assert len(editor.inner_params) == 2 * n_projections
    assert len(editor.network.transforms) == 2  # (d_ff, d) and (d, d_ff)
    assert len(mend(tiny_model_dir, shared=False).network.transforms) == len(editor.inner_params)


def test_zero_edit_lr_changes_nothing(tiny_model_dir):
    editor = mend(tiny_model_dir)
    with torch.no_grad():
        editor.network.edit_lrs.zero_()
    with WeightSnapshot(editor.model) as snapshot:
        editor.apply_edits(REQUESTS)
        assert snapshot.changed() == []
    example = training_data().train_edits
    losses = editor.training_losses(example)
    assert float(losses["loc_kl"].detach()) == 0.0


def test_sign_convention_small_step_lowers_edit_nll(tiny_model_dir):
    """ΔW = −η ∇̃: with the identity transform a small positive η is a descent step on the edit NLL."""
    editor = mend(tiny_model_dir, norm=False, edit_lr=1e-2)
    before = edit_nll(editor, REQUESTS)
    with WeightSnapshot(editor.model, editor.inner_params):
        editor.apply_edits(REQUESTS)
        after = edit_nll(editor, REQUESTS)
    assert (after < before).all(), (before, after)
    assert torch.equal(edit_nll(editor, REQUESTS), before)  # restored


def test_locality_kl_is_zero_for_the_unedited_model(tiny_model_dir):
    editor = mend(tiny_model_dir)
    batch = editor.encode(["The capital of France is", "Answer:"], ["Paris", "A B"])
    unedited = {name: editor.model.get_parameter(name) for name in editor.inner_params}
    assert float(editor.locality_kl(batch, unedited)) == 0.0


# ----------------------------------------------------------------------------------------------------------------
# Training


def fit(editor: MEND, data: EditTraining, root: Path, ckpt_path: str | None = None, **trainer_args) -> Trainer:
    trainer = Trainer(default_root_dir=root, limit_val_batches=0, **{**QUIET, **trainer_args})
    trainer.fit(editor, data, ckpt_path=ckpt_path)
    return trainer


def test_training_changes_the_hypernetwork_only(tiny_model_dir, tmp_path):
    seed_everything(0)
    editor = mend(tiny_model_dir, lr=1e-2, lr_lr=1e-2, accumulate=2, output_dir=str(tmp_path))
    network_before = {k: v.clone() for k, v in editor.network.state_dict().items()}
    with WeightSnapshot(editor.model) as snapshot:
        trainer = fit(editor, training_data(), tmp_path, max_steps=2, enable_checkpointing=False)
        assert snapshot.changed() == []  # the base model is frozen and edited functionally only
    assert trainer.global_step == 2 and editor.batches_seen == 4 and editor.skipped_steps == 0
    assert not editor.model.training  # no dropout in the frozen base model
    changed = [k for k, v in editor.network.state_dict().items() if not torch.equal(v, network_before[k])]
    assert "edit_lrs" in changed and any(".up" in k for k in changed) and any("norm.mean" in k for k in changed)
    assert all(torch.isfinite(trainer.callback_metrics[f"train/{k}"]) for k in ("loss", "edit_nll", "loc_kl"))
    assert (tmp_path / "mend.pt").is_file()


def test_non_finite_steps_are_skipped_and_counted(tiny_model_dir, tmp_path):
    editor = mend(tiny_model_dir, c_edit=float("nan"), accumulate=1, lr=1e-2)
    network_before = {k: v.clone() for k, v in editor.network.state_dict().items() if "norm" not in k}
    trainer = fit(editor, training_data(), tmp_path, max_epochs=1, limit_train_batches=3, enable_checkpointing=False)
    assert editor.skipped_steps == 3 and trainer.global_step == 0
    assert float(trainer.callback_metrics["train/skipped_steps"]) == 3
    for key, value in network_before.items():
        assert torch.equal(editor.network.state_dict()[key], value), key


def network_state(editor: MEND) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in editor.network.state_dict().items()}


def test_resumed_fit_matches_uninterrupted(tiny_model_dir, tmp_path):
    """Stopped mid-epoch at a step checkpoint and resumed: the same network and counters as one uninterrupted fit."""
    kwargs = dict(lr=1e-2, lr_lr=1e-2, accumulate=2)
    data_args = dict(limit=5, val_size=2, seed=3)

    seed_everything(0)
    uninterrupted = mend(tiny_model_dir, **kwargs)
    fit(uninterrupted, ToyEditTraining(**data_args), tmp_path / "a", max_steps=7, enable_checkpointing=False)

    seed_everything(0)
    first = mend(tiny_model_dir, **kwargs)
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "b", every_n_train_steps=2, save_top_k=-1)
    fit(first, ToyEditTraining(**data_args), tmp_path / "b", max_steps=4, callbacks=[checkpoints])  # 8 of 10 batches
    checkpoint = tmp_path / "b" / "epoch=1-step=4.ckpt"  # the epoch has 5 batches: step 4 is mid-epoch 1
    assert checkpoint.is_file(), sorted(p.name for p in (tmp_path / "b").iterdir())

    seed_everything(1)  # the resumed run must not depend on the global seed
    resumed = mend(tiny_model_dir, **kwargs)
    fit(resumed, ToyEditTraining(**data_args), tmp_path / "c", ckpt_path=str(checkpoint), max_steps=7)
    assert resumed.batches_seen == uninterrupted.batches_seen == 14
    expected = network_state(uninterrupted)
    for key, value in network_state(resumed).items():
        torch.testing.assert_close(value, expected[key], rtol=0, atol=0, msg=key)


class SigtermAt(Callback):
    """Sends this process SIGTERM at the end of training batch ``batch`` (counted from 1, across epochs)."""

    def __init__(self, batch: int):
        self.batch = batch

    def on_train_batch_end(self, trainer: Trainer, module: MEND, *args) -> None:
        if module.batches_seen == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler notes it; the fit stops after this batch


class SigtermAfterEpoch(Callback):
    """Sends this process SIGTERM after the last batch of epoch ``epoch`` (from 0): the trainer stops between epochs,
    once the epoch is counted complete (a signal that arrives while the epoch ends)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: Trainer, module: MEND) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize(
    "stop",
    [SigtermAt(3), SigtermAt(5), SigtermAt(10), SigtermAfterEpoch(0), SigtermAfterEpoch(1)],
    ids=["mid-epoch", "epoch-end-mid-accumulation", "epoch-end", "between-epochs-mid-accumulation", "between-epochs"],
)
def test_fit_stopped_by_sigterm_resumes_bit_identically(tiny_model_dir, tmp_path, stop):
    """SIGTERM mid-epoch, between two batches of an accumulation, or after an epoch's last batch: the resumed fit
    (``interrupted.ckpt``) ends with the network of the uninterrupted fit, bit for bit."""
    kwargs = dict(lr=1e-2, lr_lr=1e-2, accumulate=2)
    data_args = dict(limit=5, val_size=2, seed=3)  # 5 batches per epoch, a step every 2: 14 batches in 7 steps

    seed_everything(0)
    uninterrupted = mend(tiny_model_dir, **kwargs)
    fit(uninterrupted, ToyEditTraining(**data_args), tmp_path / "a", max_steps=7, enable_checkpointing=False)

    seed_everything(0)
    stopped = mend(tiny_model_dir, **kwargs)
    with pytest.raises(SIGTERMException):
        fit(
            stopped,
            ToyEditTraining(**data_args),
            tmp_path / "b",
            max_steps=7,
            callbacks=[stop, InterruptCheckpoint()],
        )
    assert stopped.batches_seen == getattr(stop, "batch", 5 * (getattr(stop, "epoch", 0) + 1))

    seed_everything(1)  # the resumed run must not depend on the global seed
    resumed = mend(tiny_model_dir, **kwargs)
    checkpoint = str(tmp_path / "b" / "interrupted.ckpt")
    fit(resumed, ToyEditTraining(**data_args), tmp_path / "c", ckpt_path=checkpoint, max_steps=7)
    assert resumed.batches_seen == uninterrupted.batches_seen == 14
    expected = network_state(uninterrupted)
    for key, value in network_state(resumed).items():
        assert torch.equal(value, expected[key]), key


@pytest.mark.skipif(not SHARED_COUNTERFACT.is_dir(), reason="../shared/data/counterfact is absent")
def test_smoke_fit_on_shared_counterfact(tiny_model_dir, tmp_path):
    data = EditTraining(
        "counterfact",
        train_path=str(SHARED_COUNTERFACT / "counterfact-train.json"),
        val_path=str(SHARED_COUNTERFACT / "counterfact-val.json"),
        limit=8,
        val_size=4,
        val_batch_size=4,
    )
    editor = mend(tiny_model_dir, accumulate=2, lr=1e-3, output_dir=str(tmp_path))
    trainer = Trainer(default_root_dir=tmp_path, max_steps=3, val_check_interval=4, limit_val_batches=1, **QUIET)
    trainer.fit(editor, data)
    assert len(data.train_edits) == 8 and data.train_edits[0].case_id == 2  # the train split's first record
    assert trainer.global_step == 3 and editor.skipped_steps == 0
    assert 0.0 <= float(trainer.callback_metrics["val/ES_macro"]) <= 1.0
    state, meta = read_hypernetwork(tmp_path / "mend.pt")
    assert meta["inner_params"] == editor.inner_params and set(state) == set(editor.network.state_dict())


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints


def test_checkpoint_round_trip_takes_the_network_settings(tiny_model_dir, tmp_path):
    trained = mend(tiny_model_dir, rank=4, n_layers=1)
    with torch.no_grad():
        trained.network.edit_lrs.fill_(0.5)
        trained.network.transforms[0].layers[0].up.normal_()
    torch.save(trained.hypernetwork_state(), tmp_path / "mend.pt")
    loaded = mend(tiny_model_dir, ckpt_path=str(tmp_path / "mend.pt"))  # rank 8, 2 layers asked: the file's win
    assert loaded.settings == {"rank": 4, "n_layers": 1, "norm": True, "shared": True}
    for key, value in trained.network.state_dict().items():
        assert torch.equal(loaded.network.state_dict()[key], value), key


def test_fit_checkpoint_holds_the_hypernetwork_only(tiny_model_dir, tmp_path):
    editor = mend(tiny_model_dir, accumulate=1)
    fit(editor, training_data(), tmp_path, max_steps=1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt")])
    (checkpoint,) = (tmp_path / "ckpt").glob("*.ckpt")
    content = torch.load(checkpoint, weights_only=False)
    assert set(content["state_dict"]) == {f"network.{k}" for k in editor.network.state_dict()}
    assert content["mend_meta"]["inner_params"] == editor.inner_params
    assert content["mend_meta"]["base_model"]["num_layers"] == 2
    state, _ = read_hypernetwork(checkpoint)  # weights_only=True
    loaded = mend(tiny_model_dir, ckpt_path=str(checkpoint))
    assert all(torch.equal(loaded.network.state_dict()[k], v) for k, v in state.items())


def test_checkpoint_of_another_base_model_is_refused(tiny_model_dir, tmp_path):
    torch.save(mend(tiny_model_dir).hypernetwork_state(), tmp_path / "mend.pt")
    other = ModelSource(str(tiny_model_dir), random_init_seed=1)  # same architecture, other weights
    with pytest.raises(MENDCheckpointError, match="trained for base model .* the weights of .* differ"):
        MEND(other, layers=[0, 1], rank=8, ckpt_path=str(tmp_path / "mend.pt"))
    with pytest.raises(MENDCheckpointError, match="edits .* but this run edits"):
        mend(tiny_model_dir, layers=[1], ckpt_path=str(tmp_path / "mend.pt"))


def test_layer_the_model_lacks_is_refused(tiny_model_dir):
    missing = mend(tiny_model_dir).arch.spec.mlp_out.format(9) + ".weight"
    with pytest.raises(ValueError, match=f"MEND cannot edit '{missing}'.*2 layers.*has no such weight"):
        mend(tiny_model_dir, inner_params=[missing])
    with pytest.raises(ValueError, match="has no such weight"):
        mend(tiny_model_dir, inner_params=["lm_head.bias"])
    with pytest.raises(IndexError, match="Layer 5 out of range for a 2-layer"):
        mend(tiny_model_dir, layers=[5])


# ----------------------------------------------------------------------------------------------------------------
# lightning-edit validate with a trained hypernetwork, under each protocol


@pytest.mark.parametrize("protocol", ["single", "batch", "sequential"])
def test_validate_with_checkpoint(protocol, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)
    trained = mend(tiny_model_dir, edit_lr=1e-2)
    torch.save(trained.hypernetwork_state(), tmp_path / "mend.pt")
    cli = build_cli(
        [
            "validate",
            "--config", str(ROOT / "configs/methods/mend.yaml"),
            "--config", str(ROOT / "configs/benchmarks/counterfact.yaml"),
            f"--model.lm.path={tiny_model_dir}",
            "--model.layers=[0, 1]",
            f"--model.ckpt_path={tmp_path / 'mend.pt'}",
            f"--model.protocol={protocol}",
            f"--model.edit_batch_size={1 if protocol == 'single' else 2}",
            "--data.limit=4",
            "--data.batch_size=2",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )  # fmt: skip
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["metrics"]["ES"]["n_cases"] == 4
    assert results["config"]["model"]["init_args"]["protocol"] == protocol
    editor = cli.model
    assert isinstance(editor, MEND) and editor.settings["rank"] == 8
    unedited = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for name in editor.inner_params:  # every protocol restores the weights
        assert torch.equal(editor.model.get_parameter(name), unedited.get_parameter(name))


# ----------------------------------------------------------------------------------------------------------------
# The model presets carry MEND's layers


PRESETS = {
    "gpt2-xl": ("gpt2", 48),
    "gpt-j-6b": ("gptj", 28),
    "llama-3.2-3b": ("llama", 28),
    "llama-3-8b": ("llama", 32),
}


def _shape_reduced(family: str, num_layers: int, directory: Path) -> None:
    style = "llama" if family == "llama" else "gpt2"
    tokenizer = train_tokenizer(builtin_texts(), style, vocab_size=300)
    common = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if family == "gpt2":
        config = GPT2Config(n_embd=16, n_layer=num_layers, n_head=2, n_positions=64, **common)
    elif family == "gptj":
        config = GPTJConfig(n_embd=16, n_layer=num_layers, n_head=2, rotary_dim=4, n_positions=64, **common)
    else:
        config = LlamaConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=num_layers, num_attention_heads=2, **common
        )
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_composes_with_mend(preset, tmp_path, monkeypatch, capsys):
    """method + preset resolves, and MEND edits the MLP projections of the preset's last three layers."""
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    family, num_layers = PRESETS[preset]
    _shape_reduced(family, num_layers, tmp_path)
    preset_path = ROOT / f"configs/models/{preset}.yaml"
    layers = yaml.safe_load(preset_path.read_text())["model"]["editors"]["MEND"]["layers"]
    assert layers == list(range(num_layers - 3, num_layers))
    with pytest.raises(SystemExit):
        build_cli(
            ["validate", "--config", str(ROOT / "configs/methods/mend.yaml"), "--config", str(preset_path),
             f"--model.lm.path={tmp_path}", "--model.rank=4", "--print_config"]
        )  # fmt: skip
    resolved = yaml.safe_load(capsys.readouterr().out)["model"]
    assert resolved["init_args"]["layers"] == layers
    editor = MEND(ModelSource(str(tmp_path)), layers=resolved["init_args"]["layers"], rank=4)
    assert {int(name.split(".")[2]) for name in editor.inner_params} == set(layers)
    assert len(editor.inner_params) == 3 * (3 if family == "llama" else 2)
