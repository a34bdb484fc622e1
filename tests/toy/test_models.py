"""The shipped toy models (``builtin:models/toy-gpt2``, ``builtin:models/toy-llama``) and toy benchmark files.

The models load with plain ``AutoModelForCausalLM`` / ``AutoTokenizer`` from their directories, know the facts of
the toy world they were trained on (forward recall >= 0.95 on a sample) and show the reversal curse (inverse recall
of forward-only facts far below that of bidirectional ones).
"""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from lightning_edit.data import CounterFact
from lightning_edit.resources import resolve_path
from lightning_edit.toy.corpus import ToyCorpus
from lightning_edit.toy.recall import forward_recall, inverse_recall, sample_facts

MODELS = ["toy-gpt2", "toy-llama"]


@pytest.fixture(scope="module", params=MODELS)
def shipped(request):
    """(model, tokenizer, recall.json, the ToyCorpus it was trained on) of one shipped model."""
    directory = resolve_path(f"builtin:models/{request.param}")
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    summary = json.loads((directory / "recall.json").read_text(encoding="utf-8"))
    corpus = ToyCorpus(**{k: v for k, v in summary["data"].items() if not k.startswith("_")})
    return model, tokenizer, summary, corpus


def test_directory_holds_a_documented_safetensors_model(shipped):
    model, tokenizer, summary, _ = shipped
    directory = resolve_path(f"builtin:models/toy-{model.config.model_type}")
    assert (directory / "model.safetensors").stat().st_size < 10_000_000
    readme = (directory / "README.md").read_text(encoding="utf-8")
    assert f"lightning-edit fit --config configs/toy/{model.config.model_type}.yaml" in readme
    assert f"{summary['recall']['forward']['overall']:.3f}" in readme
    assert model.config.vocab_size == len(tokenizer)


def test_tokenizer_is_the_one_the_config_trains(shipped):
    _, tokenizer, _, corpus = shipped
    for sentence in corpus.corpus[:50]:
        assert tokenizer(sentence)["input_ids"] == corpus.tokenizer(sentence)["input_ids"]


def test_forward_recall_on_a_sample(shipped):
    model, tokenizer, summary, corpus = shipped
    facts = sample_facts(corpus.world, 100, seed=1)
    recall = forward_recall(model, tokenizer, corpus.world, facts)
    assert recall["n_facts"] == 100 and recall["n_prompts"] == 300
    assert recall["overall"] >= 0.95, recall["by_relation"]
    assert summary["recall"]["forward"]["overall"] >= 0.95 and summary["recall"]["forward"]["n_facts"] == 930


def test_reversal_curse(shipped):
    model, tokenizer, summary, corpus = shipped
    recall = inverse_recall(model, tokenizer, corpus.world)
    print(
        f"{model.config.model_type}: inverse recall {recall['bidirectional']:.3f} (bidirectional), "
        f"{recall['forward_only']:.3f} (forward-only)"
    )
    assert recall["n_facts"] == {"bidirectional": 60, "forward_only": 60}
    assert recall["forward_only"] < recall["bidirectional"] - 0.5
    assert recall["bidirectional"] == pytest.approx(summary["recall"]["inverse"]["bidirectional"], abs=1e-6)
    assert recall["forward_only"] == pytest.approx(summary["recall"]["inverse"]["forward_only"], abs=1e-6)


def test_benchmark_files_are_of_the_models_world():
    corpus = ToyCorpus(seed=0)
    world = json.loads(resolve_path("builtin:data/toy/world.json").read_text(encoding="utf-8"))
    assert world["seed"] == 0
    facts = [(f["subject"], f["relation"], f["object"]) for f in world["facts"]]
    assert facts == [tuple(f) for f in corpus.world.facts]
    directions = {(f["subject"], f["relation"]): f["direction_in_training"] for f in world["facts"]}
    assert all(directions[(f.subject, f.relation)] == "bidirectional" for f in corpus.world.bidirectional)


def test_toy_counterfact_loads():
    datamodule = CounterFact("builtin:data/toy/counterfact.json")
    datamodule.setup()
    assert len(datamodule.cases) == 100
    for name, n in [("bake_qa.json", 100), ("scedit_cf.json", 100), ("caseedit.json", 200)]:
        assert len(json.loads(resolve_path(f"builtin:data/toy/{name}").read_text(encoding="utf-8"))) == n
