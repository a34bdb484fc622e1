"""The sampled corpus: seeded documents from the model's start token, written as a JSONL corpus file."""

import json

from lightning_edit.stats.corpus import as_corpus
from lightning_edit.stats.sample_corpus import main, sample_documents


def test_same_seed_same_documents_and_a_readable_corpus_file(lm, tmp_path):
    model, tokenizer = lm
    first = sample_documents(model, tokenizer, documents=5, max_new_tokens=8, documents_per_forward=2, seed=1)
    assert first == sample_documents(model, tokenizer, documents=5, max_new_tokens=8, documents_per_forward=2, seed=1)
    assert len(first) == 5 and first != sample_documents(model, tokenizer, 5, 8, documents_per_forward=2, seed=2)
    assert len(set(first)) > 1  # the rows of a batch are different draws


def test_the_command_writes_a_corpus_that_the_statistics_read(tmp_path, capsys):
    out = tmp_path / "samples.jsonl"
    main(["--model", "builtin:models/tiny-gpt2", "--documents", "3", "--max-new-tokens", "6", "--out", str(out)])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3 and all(set(record) == {"text"} for record in records)
    corpus = as_corpus(str(out))
    assert list(corpus.documents()) == [record["text"] for record in records if record["text"].strip()]
    assert "wrote 3 documents" in capsys.readouterr().out
