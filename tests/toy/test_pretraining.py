"""Toy pretraining end to end: ``lightning-edit fit`` on a small world with a tiny model, saving and resuming."""

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lightning_edit.cli import build_cli
from lightning_edit.toy.corpus import LengthGroupedBatches, ToyCorpus
from lightning_edit.toy.pretraining import CausalLMPretraining

ROOT = Path(__file__).resolve().parents[2]
SMALL_WORLD = dict(n_people=16, n_countries=4, n_cities=8, n_companies=6, n_objects=8, n_languages=3)
TINY = [
    *(f"--data.{key}={value}" for key, value in SMALL_WORLD.items()),
    "--data.vocab_size=400",
    "--data.val_size=16",
    "--model.hidden_size=32",
    "--model.num_layers=1",
    "--model.num_heads=2",
    "--model.warmup_steps=10",
    "--model.lr=1e-2",
    "--model.val_recall_facts=20",
    "--trainer.log_every_n_steps=5",
    "--trainer.check_val_every_n_epoch=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)  # the configs write under runs/ relative to the working directory


def fit(family: str, *args: str):
    return build_cli(["fit", "--config", str(ROOT / f"configs/toy/{family}.yaml"), *TINY, *args])


def logged(run_dir: Path, version: int, key: str) -> list[tuple[int, float]]:
    """(step, value) of a metric in the CSVLogger file of one run."""
    with open(run_dir / "lightning_logs" / f"version_{version}" / "metrics.csv", newline="") as handle:
        return [(int(row["step"]), float(row[key])) for row in csv.DictReader(handle) if row.get(key)]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_fit_trains_and_saves_a_loadable_model(family, tmp_path):
    cli = fit(family, "--trainer.max_steps=120")
    assert cli.trainer.global_step == 120
    losses = [loss for _, loss in logged(tmp_path / f"runs/toy-{family}", 0, "train/loss")]
    assert losses[-1] < 0.6 * losses[0], losses
    assert 0.0 <= cli.trainer.callback_metrics["val/forward_recall"] <= 1.0
    assert cli.trainer.current_epoch > 1 and cli.trainer.train_dataloader.batch_sampler.sampler.epoch > 0  # reshuffled

    directory = tmp_path / f"runs/toy-{family}/model"
    assert (directory / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert model.config.model_type == family and model.config.vocab_size == len(tokenizer) == 400
    datamodule = cli.datamodule
    sentence = datamodule.corpus[0]
    assert tokenizer(sentence)["input_ids"] == datamodule.tokenizer(sentence)["input_ids"]
    ids = torch.tensor([datamodule.encode(sentence)])
    with torch.no_grad():
        expected = cli.model.model.eval()(input_ids=ids).logits
        torch.testing.assert_close(model(input_ids=ids).logits, expected)

    summary = json.loads((directory / "recall.json").read_text())
    assert summary["training"]["global_step"] == 120 and summary["data"]["n_people"] == 16
    forward, inverse = summary["recall"]["forward"], summary["recall"]["inverse"]
    assert forward["n_facts"] == len(datamodule.world.facts) and 0 <= forward["overall"] <= 1
    assert set(forward["by_relation"]) == set(datamodule.world.relations)
    assert inverse["n_facts"]["bidirectional"] == len(datamodule.world.bidirectional)
    assert "first token" in summary["recall"]["convention"]


def test_resume_from_checkpoint_continues(tmp_path):
    fit("gpt2", "--trainer.max_steps=30")
    last = tmp_path / "runs/toy-gpt2/checkpoints/last.ckpt"
    checkpoint = shutil.copy(last, tmp_path / "step30.ckpt")  # the resumed run overwrites last.ckpt
    state = torch.load(checkpoint, weights_only=False)
    assert state["global_step"] == 30

    cli = fit("gpt2", "--trainer.max_steps=50", f"--ckpt_path={checkpoint}")
    assert cli.trainer.global_step == 50
    steps = [step for step, _ in logged(tmp_path / "runs/toy-gpt2", 1, "train/loss")]
    assert steps and min(steps) >= 30  # the second run starts where the first stopped
    assert json.loads((tmp_path / "runs/toy-gpt2/model/recall.json").read_text())["training"]["global_step"] == 50

    # the checkpoint is self-contained: model config and tokenizer travel with it
    module = CausalLMPretraining.load_from_checkpoint(checkpoint)
    for key, value in state["state_dict"].items():
        torch.testing.assert_close(module.state_dict()[key], value)
    assert module.tokenizer("Step 1: Go.")["input_ids"] == cli.datamodule.tokenizer("Step 1: Go.")["input_ids"]

    with pytest.raises(ValueError, match="another tokenizer"):
        fit("gpt2", "--trainer.max_steps=60", f"--ckpt_path={checkpoint}", "--data.seed=1")


def test_corpus_is_deterministic_and_batches_cover_it():
    one, two = ToyCorpus(**SMALL_WORLD, vocab_size=400), ToyCorpus(**SMALL_WORLD, vocab_size=400)
    assert one.tokenizer.backend_tokenizer.to_str() == two.tokenizer.backend_tokenizer.to_str()
    one.setup("fit")
    assert len(one.train_set) == len(one.corpus) and len(one.val_set) == one.val_size  # validation is not held out
    held_out = ToyCorpus(**SMALL_WORLD, vocab_size=400, val_holdout=True)
    held_out.setup("fit")
    assert len(held_out.train_set) == len(one.corpus) - one.val_size

    batch = next(iter(one.train_dataloader()))
    assert (batch["labels"] == -100).eq(batch["attention_mask"] == 0).all()
    lengths = batch["attention_mask"].sum(-1)
    assert (batch["input_ids"][torch.arange(len(lengths)), lengths - 1] == one.tokenizer.eos_token_id).all()

    sampler = LengthGroupedBatches([len(s) for s in one.train_set.sequences], 8, shuffle=True, group_batches=4)
    first = list(sampler)
    assert len(first) == len(sampler) and sorted(i for b in first for i in b) == list(range(len(one.train_set)))
    sampler.set_epoch(1)
    assert list(sampler) != first


def test_llama_sequences_start_with_bos():
    corpus = ToyCorpus(**SMALL_WORLD, tokenizer_style="llama", vocab_size=400)
    ids = corpus.encode(corpus.corpus[0])
    assert ids[0] == corpus.tokenizer.bos_token_id and ids[-1] == corpus.tokenizer.eos_token_id


def test_short_names_and_a_data_module_without_tokenizer(capsys):
    with pytest.raises(SystemExit):
        build_cli(["fit", "--model=CausalLMPretraining", "--data=ToyCorpus", "--print_config"])
    printed = capsys.readouterr().out
    assert "lightning_edit.toy.CausalLMPretraining" in printed and "tokenizer_style: gpt2" in printed
    with pytest.raises(ValueError, match="DataModule's tokenizer"):
        build_cli(
            [
                "fit",
                "--model=CausalLMPretraining",
                "--data=CounterFact",
                "--data.path=builtin:data/toy/counterfact.json",
            ]
            + ["--trainer.max_steps=1", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
        )
