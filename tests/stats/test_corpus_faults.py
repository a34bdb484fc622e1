"""Statistics corpora that hold no text: empty, blank or binary files are refused in one line naming the file."""

from pathlib import Path

import pytest

from lightning_edit.cli import main
from lightning_edit.stats.corpus import CorpusError, as_corpus

ROOT = Path(__file__).resolve().parents[2]
FAULTS = {
    "empty.txt": b"",
    "blank.txt": b"\n  \n\t\n",
    "empty.jsonl": b"",
    "blank.jsonl": b'\n{"text": "  "}\n{"text": ""}\n',
    "binary.txt": bytes(range(256)) * 4,
    "zeros.txt": b"\0" * 64,
    "binary.jsonl": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_corpus_without_text_is_named_when_read(name, tmp_path):
    path = tmp_path / name
    path.write_bytes(FAULTS[name])
    with pytest.raises(CorpusError, match="corpus file") as error:
        as_corpus(str(path))
    message = str(error.value)
    assert str(path) in message and "\n" not in message
    assert ("UTF-8 text" if name.startswith(("binary", "zeros")) else "no document") in message


def test_a_binary_line_after_the_first_documents_names_the_line(tmp_path):
    path = tmp_path / "late.txt"
    path.write_bytes(b"one\n" * 5000 + b"\xff\xfe\n")
    corpus = as_corpus(str(path))
    with pytest.raises(CorpusError, match=f"{path}:5001: not UTF-8 text"):
        list(corpus.documents())


def test_the_statistics_pass_refuses_a_binary_corpus_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "corpus.txt"
    path.write_bytes(FAULTS["binary.txt"])
    configs = [f"--config={ROOT / 'configs' / name}.yaml" for name in ("methods/rome", "models/tiny-gpt2")]
    with pytest.raises(SystemExit) as exit_info:
        main([
            "validate", *configs, f"--config={ROOT / 'configs/benchmarks/counterfact.yaml'}",
            f"--model.stats.corpus={path}", f"--model.stats.cache_dir={tmp_path / 'cache'}", "--data.limit=1",
            "--trainer.enable_progress_bar=false", "--trainer.logger=false",
        ])  # fmt: skip
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and "Traceback" not in err, err
    assert f"corpus file '{path}'" in err.strip().splitlines()[-1] and "UTF-8 text" in err
    assert not list(tmp_path.rglob("results.json"))
