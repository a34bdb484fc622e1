"""Text corpora for key statistics: local ``.txt`` / ``.jsonl`` files, an in-memory list, or a Hugging Face dataset.

A corpus is an ordered sequence of documents (non-empty strings), read lazily by index range, plus an ``identity``
string that changes whenever its content may change; the statistics cache keys on it (never on a path alone).

Formats (see :func:`as_corpus`):

- ``*.txt``: **one document per non-empty line** (lines holding only whitespace are skipped; a document that spans
  several lines needs ``.jsonl``). Identity: sha256 of the file bytes.
- ``*.jsonl``: one JSON object per non-empty line, the document in ``text_field`` (default ``"text"``); records
  whose text is empty are skipped. Identity: sha256 of the file bytes plus the field name.
- a list of strings (e.g. the toy world's corpus): empty strings are skipped. Identity: sha256 of the documents.
- ``"hf:<name>[:<config>]"``: a Hugging Face dataset, streamed with the ``datasets`` library if it is installed and
  the hub (or its local cache) is reachable. Identity: name, config, split and revision — pin ``revision`` for
  reproducible statistics (the reference ``wikipedia 20200501.en`` config is no longer loadable;
  docs/editors/locate-then-edit.md#key-statistics).

A file that is not UTF-8 text (binary), or that holds no document (empty or blank), is refused when the corpus is
built, in one line naming the file; a line that is not UTF-8 further on, when it is read, naming the line.

Documents are used in corpus order; shuffle the file beforehand for a random sample.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from lightning_edit.errors import UserError
from lightning_edit.resources import file_sha256, resolve_path

HF_PREFIX = "hf:"
#: bytes read to tell a text file from a binary one
SNIFF_BYTES = 8192


class CorpusError(UserError, ValueError):
    """A corpus that cannot be read: unknown format, binary or no document, malformed record, dataset unavailable."""


@runtime_checkable
class Corpus(Protocol):
    """An ordered collection of documents."""

    identity: str  # changes whenever the documents may change; part of the statistics cache key
    description: str  # human-readable spec, recorded in cache metadata

    def documents(self, start: int = 0, stop: int | None = None) -> Iterator[str]:
        """Documents ``start .. stop-1`` (fewer if the corpus is shorter)."""
        ...


@dataclass
class ListCorpus:
    """Documents held in memory (the toy corpus, tests)."""

    texts: Sequence[str]
    name: str = "list"

    def __post_init__(self) -> None:
        self.texts = [text for text in self.texts if text.strip()]
        payload = json.dumps(self.texts, ensure_ascii=False).encode("utf-8")
        self.identity = f"list:sha256={hashlib.sha256(payload).hexdigest()}"
        self.description = f"{self.name}[{len(self.texts)} documents]"

    def documents(self, start: int = 0, stop: int | None = None) -> Iterator[str]:
        return iter(self.texts[start:stop])


@dataclass
class TextFileCorpus:
    """A UTF-8 ``.txt`` file, one document per non-empty line."""

    path: Path

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        _check_text(self.path)
        self.identity = f"txt:sha256={file_sha256(self.path)}"
        self.description = str(self.path)
        _check_documents(self, "it is empty or blank")

    def _all(self) -> Iterator[str]:
        for _, line in _lines(self.path):
            if line.strip():
                yield line.rstrip("\r\n")

    def documents(self, start: int = 0, stop: int | None = None) -> Iterator[str]:
        return itertools.islice(self._all(), start, stop)


@dataclass
class JsonlCorpus:
    """A UTF-8 ``.jsonl`` file, one JSON object per non-empty line, the document in ``text_field``."""

    path: Path
    text_field: str = "text"

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        _check_text(self.path)
        self.identity = f"jsonl:{self.text_field}:sha256={file_sha256(self.path)}"
        self.description = f"{self.path} (field {self.text_field!r})"
        _check_documents(self, f"no record has a non-blank {self.text_field!r}")

    def _all(self) -> Iterator[str]:
        for number, line in _lines(self.path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise CorpusError(f"{self.path}:{number}: not valid JSON ({error})") from error
            if not isinstance(record, dict) or not isinstance(record.get(self.text_field), str):
                raise CorpusError(f"{self.path}:{number}: no string field {self.text_field!r}")
            if record[self.text_field].strip():
                yield record[self.text_field]

    def documents(self, start: int = 0, stop: int | None = None) -> Iterator[str]:
        return itertools.islice(self._all(), start, stop)


def _check_text(path: Path) -> None:
    """Refuse a missing file, or one whose start is not UTF-8 text (a NUL byte or an invalid sequence)."""
    if not path.is_file():
        raise CorpusError(f"corpus file {str(path)!r} not found")
    with path.open("rb") as handle:
        head = handle.read(SNIFF_BYTES)
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a sequence cut at the end is no fault
        text = b"\0" not in head
    except UnicodeDecodeError:
        text = False
    if not text:
        raise CorpusError(
            f"corpus file {str(path)!r} is not UTF-8 text (a binary file?): "
            'pass a .txt file of one document per line or a .jsonl file of {"text": ...} records'
        )


def _check_documents(corpus: TextFileCorpus | JsonlCorpus, why: str) -> None:
    """Refuse a file corpus without a single document (read up to its first one)."""
    if next(corpus.documents(0, 1), None) is None:
        raise CorpusError(f"corpus file {str(corpus.path)!r} holds no document ({why})")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 file; a line that is not UTF-8 is a :class:`CorpusError` naming it."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise CorpusError(f"{path}:{number}: not UTF-8 text ({error.reason} at byte {error.start})") from None


@dataclass
class HFCorpus:
    """A Hugging Face dataset, streamed (needs the optional ``datasets`` library and the hub or its cache)."""

    name: str
    config: str | None = None
    split: str = "train"
    text_field: str = "text"
    revision: str | None = None

    def __post_init__(self) -> None:
        spec = f"{HF_PREFIX}{self.name}" + (f":{self.config}" if self.config else "")
        self.description = f"{spec} split={self.split}" + (f" revision={self.revision}" if self.revision else "")
        self.identity = f"{self.description} field={self.text_field}"

    def documents(self, start: int = 0, stop: int | None = None) -> Iterator[str]:
        try:
            import datasets
        except ImportError as error:
            raise CorpusError(
                f"corpus {self.description!r} needs the `datasets` library (pip install datasets); "
                "or pass a local .txt/.jsonl file"
            ) from error
        try:
            data = datasets.load_dataset(
                self.name, self.config, split=self.split, revision=self.revision, streaming=True
            )
        except Exception as error:  # offline, unknown name, missing config: all mean "cannot read it"
            raise CorpusError(
                f"cannot load Hugging Face dataset {self.name!r} (config {self.config!r}, split {self.split!r}): "
                f"{error}. Offline? Pass a local .txt/.jsonl file instead."
            ) from error
        texts = (record[self.text_field] for record in data if str(record.get(self.text_field) or "").strip())
        return itertools.islice(texts, start, stop)


def as_corpus(corpus: Corpus | str | Path | Sequence[str], text_field: str = "text", split: str = "train") -> Corpus:
    """Build a :class:`Corpus` from a spec: a Corpus, a list of strings, ``hf:<name>[:<config>]`` or a file path.

    Args:
        corpus: The spec. File paths may use ``builtin:`` (files shipped with the package).
        text_field: Field holding the document in ``.jsonl`` records and Hugging Face datasets.
        split: Split of a Hugging Face dataset.
    """
    if isinstance(corpus, Corpus):
        return corpus
    if isinstance(corpus, str) and corpus.startswith(HF_PREFIX):
        name, _, config = corpus[len(HF_PREFIX) :].partition(":")
        if not name:
            raise CorpusError(f"corpus spec {corpus!r}: expected hf:<dataset name>[:<config>]")
        return HFCorpus(name, config or None, split=split, text_field=text_field)
    if isinstance(corpus, str | Path):
        path = resolve_path(corpus)
        if path.suffix == ".jsonl":
            return JsonlCorpus(path, text_field)
        if path.suffix == ".txt":
            return TextFileCorpus(path)
        raise CorpusError(f"corpus {str(corpus)!r}: expected a .txt or .jsonl file, a list of strings or hf:<name>")
    if isinstance(corpus, Sequence) and all(isinstance(text, str) for text in corpus):
        return ListCorpus(corpus)
    raise CorpusError(f"cannot make a corpus from a {type(corpus).__name__}")
