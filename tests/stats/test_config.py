"""KeyStatistics: processes that each cache a shard of the statistics pass give the statistics of one pass."""

import pytest

from lightning_edit.resources import builtin_texts
from lightning_edit.stats import load_or_compute
from lightning_edit.stats.config import KeyStatistics

LAYERS = [0, 2]
N_DOCS = 20


@pytest.fixture
def corpus(tmp_path):
    pieces = builtin_texts()
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(" ".join(pieces[3 * i : 3 * i + 1 + i % 5]) for i in range(N_DOCS)) + "\n")
    return path


def test_shards_of_three_processes_merge_into_the_statistics_of_one_pass(lm, corpus, tmp_path, count_forwards):
    model, tokenizer = lm
    stats = KeyStatistics(
        str(corpus), n_samples=N_DOCS, max_length=24, documents_per_forward=2, cache_dir=str(tmp_path / "c")
    )
    for index in range(3):  # documents [0, 7), [7, 14), [14, 20)
        stats.compute_shard(model, tokenizer, LAYERS, index, 3, progress=False)
    names = sorted(path.name.split(".")[1] for path in (tmp_path / "c").rglob("*.safetensors"))
    assert names == sorted(["0-7", "7-14", "14-20"] * len(LAYERS))
    with count_forwards(model) as calls:
        merged = stats.second_moments(model, tokenizer, LAYERS, progress=False)
        stats.compute_shard(model, tokenizer, LAYERS, 1, 3, progress=False)  # the whole sample is cached now
    assert not calls
    one_pass = load_or_compute(
        model,
        tokenizer,
        str(corpus),
        LAYERS,
        n_samples=N_DOCS,
        max_length=24,
        documents_per_forward=2,
        cache_dir=tmp_path / "one",
        progress=False,
    )
    for layer in LAYERS:
        assert merged[layer].n_tokens == one_pass[layer].n_tokens and merged[layer].n_documents == N_DOCS
        assert merged[layer].sum.allclose(one_pass[layer].sum, rtol=1e-12, atol=1e-12)


def test_a_process_without_documents_computes_nothing(lm, corpus, tmp_path, count_forwards):
    model, tokenizer = lm
    stats = KeyStatistics(str(corpus), n_samples=2, max_length=24, documents_per_forward=2, cache_dir=str(tmp_path))
    with count_forwards(model) as calls:
        stats.compute_shard(model, tokenizer, LAYERS, 3, 4, progress=False)  # shares of 1 document: [2, 2) is empty
    assert not calls
