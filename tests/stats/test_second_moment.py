"""The key-statistics pass: exact sums, padding excluded, early stop, float64 accumulation, corpus readers."""

import copy
import json
import sys

import pytest
import torch

from lightning_edit.models import resolve_architecture
from lightning_edit.models.build import random_model
from lightning_edit.resources import builtin_texts
from lightning_edit.stats import (
    CorpusError,
    JsonlCorpus,
    ListCorpus,
    SecondMoment,
    TextFileCorpus,
    as_corpus,
    collect_second_moments,
)

MAX_LENGTH = 24
LAYERS = [0, 2]


def documents(n: int = 14) -> list[str]:
    """Documents of varied lengths (a few longer than MAX_LENGTH tokens, so truncation matters)."""
    texts = builtin_texts()
    return [" ".join(texts[3 * i : 3 * i + 1 + i % 6]) for i in range(n)]


@pytest.fixture(scope="module")
def lm(tiny_lm):
    """A 4-layer float64 model of the tiny family (float64 so that batched vs unbatched agree to ~1e-15)."""
    model, tokenizer = tiny_lm
    return random_model(model.config.model_type, tokenizer, seed=1, num_layers=4).double(), tokenizer


def manual_sums(model, tokenizer, texts, layers):
    """Σ k kᵀ per layer, one document per plain full forward, keys read by a hand-written forward pre-hook."""
    arch = resolve_architecture(model)
    keys: dict[int, torch.Tensor] = {}
    handles = [
        arch.module(arch.spec.mlp_out, layer).register_forward_pre_hook(
            lambda module, args, layer=layer: keys.__setitem__(layer, args[0][0])
        )
        for layer in layers
    ]
    sums = {layer: 0 for layer in layers}
    tokens = 0
    try:
        with torch.no_grad():
            for text in texts:
                ids = tokenizer(text, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")["input_ids"]
                model(ids)
                tokens += ids.shape[1]
                for layer in layers:
                    k = keys[layer].to(torch.float64)  # (L, d_in)
                    sums[layer] = sums[layer] + k.T @ k
    finally:
        for handle in handles:
            handle.remove()
    return sums, tokens


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_sums_equal_a_manual_forward_for_several_layers_at_once(lm):
    model, tokenizer = lm
    texts = documents()
    expected, tokens = manual_sums(model, tokenizer, texts, LAYERS)
    options = dict(n_samples=len(texts), max_length=MAX_LENGTH, documents_per_forward=5, progress=False)
    stats = collect_second_moments(model, tokenizer, texts, LAYERS, **options)
    assert set(stats) == set(LAYERS)
    for layer in LAYERS:
        moment = stats[layer]
        assert moment.sum.dtype == torch.float64 and moment.sum.shape == expected[layer].shape
        assert moment.n_tokens == tokens and moment.n_documents == len(texts)
        assert rel_err(moment.sum, expected[layer]) < 1e-12
        assert torch.allclose(moment.mean(), expected[layer] / tokens, rtol=1e-10, atol=0)


def test_padding_is_excluded_batched_equals_one_document_at_a_time(lm):
    model, tokenizer = lm
    texts = documents()
    lengths = {len(tokenizer(t, truncation=True, max_length=MAX_LENGTH)["input_ids"]) for t in texts}
    assert len(lengths) > 3 and max(lengths) == MAX_LENGTH  # batches really are padded, some docs truncated
    kwargs = dict(n_samples=len(texts), max_length=MAX_LENGTH, progress=False)
    single = collect_second_moments(model, tokenizer, texts, LAYERS, documents_per_forward=1, **kwargs)
    batched = collect_second_moments(model, tokenizer, texts, LAYERS, documents_per_forward=6, **kwargs)
    for layer in LAYERS:
        assert batched[layer].n_tokens == single[layer].n_tokens
        assert rel_err(batched[layer].sum, single[layer].sum) < 1e-9


def test_forward_stops_after_the_deepest_requested_layer(lm):
    model, tokenizer = lm
    arch = resolve_architecture(model)
    ran: list[str] = []
    names = [arch.layer_name(arch.spec.blocks, layer) for layer in range(arch.num_layers)]
    names += [arch.layer_name(arch.spec.mlp_out, 1), arch.spec.final_norm, arch.spec.unembedding]
    handles = [
        model.get_submodule(name).register_forward_pre_hook(lambda *_, name=name: ran.append(name)) for name in names
    ]
    try:
        collect_second_moments(
            model, tokenizer, documents(4), [0, 1], n_samples=4, documents_per_forward=2, progress=False
        )
    finally:
        for handle in handles:
            handle.remove()
    assert arch.layer_name(arch.spec.mlp_out, 1) in ran  # the deepest requested projection ran ...
    for later in names[2:4] + [arch.spec.final_norm, arch.spec.unembedding]:
        assert later not in ran  # ... and nothing after it
    assert ran.count(names[0]) == 2  # one forward per batch, all layers in it


def test_low_precision_model_accumulates_in_float64(lm):
    model, tokenizer = lm
    texts = documents(6)
    kwargs = dict(n_samples=6, max_length=MAX_LENGTH, documents_per_forward=3, progress=False)
    reference = collect_second_moments(model, tokenizer, texts, [1], **kwargs)[1]
    low = collect_second_moments(copy.deepcopy(model).to(torch.bfloat16), tokenizer, texts, [1], **kwargs)[1]
    assert low.sum.dtype == torch.float64 and torch.isfinite(low.sum).all()
    assert low.n_tokens == reference.n_tokens
    assert rel_err(low.sum, reference.sum) < 5e-2


def test_short_corpus_document_range_and_truncation(lm):
    model, tokenizer = lm
    texts = documents(5)
    stats = collect_second_moments(model, tokenizer, texts, [0], n_samples=100, max_length=4, progress=False)[0]
    assert stats.n_documents == 5 and stats.n_tokens <= 5 * 4
    tail = collect_second_moments(model, tokenizer, texts, [0], start=3, n_samples=100, progress=False)[0]
    assert tail.n_documents == 2


def test_second_moment_merge_and_mean():
    a = SecondMoment(torch.eye(3, dtype=torch.float64) * 2, n_tokens=4, n_documents=1)
    b = SecondMoment(torch.ones(3, 3, dtype=torch.float64), n_tokens=6, n_documents=2)
    merged = a.merge(b)
    assert merged.n_tokens == 10 and merged.n_documents == 3
    assert torch.equal(merged.mean(), (a.sum + b.sum) / 10)
    with pytest.raises(ValueError):
        SecondMoment.zeros(3).mean()
    with pytest.raises(ValueError):
        a.merge(SecondMoment.zeros(4))


def test_corpus_readers(tmp_path):
    txt = tmp_path / "corpus.txt"
    txt.write_text("first document\n\n   \nsecond document\nthird\n", encoding="utf-8")
    corpus = as_corpus(str(txt))
    assert isinstance(corpus, TextFileCorpus)
    assert list(corpus.documents()) == ["first document", "second document", "third"]
    assert list(corpus.documents(1, 2)) == ["second document"]
    identity = corpus.identity
    txt.write_text("first document\nchanged\n", encoding="utf-8")
    assert as_corpus(txt).identity != identity  # identity follows the content, not the path

    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("\n".join(json.dumps({"body": t, "id": str(i)}) for i, t in enumerate(["a b", "", "c\nd"])) + "\n")
    corpus = as_corpus(jsonl, text_field="body")
    assert isinstance(corpus, JsonlCorpus) and list(corpus.documents()) == ["a b", "c\nd"]
    assert as_corpus(jsonl, text_field="body").identity != as_corpus(jsonl, text_field="id").identity
    with pytest.raises(CorpusError, match="no string field 'text'"):
        list(as_corpus(jsonl).documents())

    listed = as_corpus(["x", "", "y"])
    assert isinstance(listed, ListCorpus) and list(listed.documents()) == ["x", "y"]
    assert as_corpus(["x", "y"]).identity == listed.identity != as_corpus(["y", "x"]).identity
    with pytest.raises(CorpusError):
        as_corpus(tmp_path / "corpus.csv")
    with pytest.raises(CorpusError, match="not found"):
        as_corpus(tmp_path / "missing.txt")


def test_hf_corpus_without_datasets_names_the_dataset(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    corpus = as_corpus("hf:wikimedia/wikipedia:20231101.en")
    assert corpus.name == "wikimedia/wikipedia" and corpus.config == "20231101.en"
    with pytest.raises(CorpusError, match="wikimedia/wikipedia"):
        list(corpus.documents(0, 1))
