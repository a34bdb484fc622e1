"""Reading a benchmark file's records: a JSON list or JSON lines, and typed fields whose errors name file, record and
field.

Every loader reads its file with :func:`read_records` and each record through a :class:`RecordReader`; a problem is a
:class:`~lightning_edit.errors.DataFormatError`, raised during ``setup``, before any weight is touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning_edit.errors import DataFormatError
from lightning_edit.resources import resolve_path

#: why a JSON document that Python's parser cannot read (``[`` nested 100,000 deep) is refused
_TOO_DEEP = "nested too deeply to read (lists or objects more than about 1,000 levels deep)"


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSON list (``.json``) or one JSON object per line (``.jsonl``) of records.

    ``path`` may name a file shipped with the package as ``builtin:data/<file>`` (see :mod:`lightning_edit.resources`).
    """
    path = resolve_path(path)
    if not path.is_file():
        raise DataFormatError(path, "file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        line = error.object[: error.start].count(b"\n") + 1
        raise DataFormatError(
            path, f"not UTF-8 text: byte {error.object[error.start]:#04x} on line {line}; save the file as UTF-8"
        ) from None
    if path.suffix == ".jsonl":
        records = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise DataFormatError(path, f"malformed JSON on line {line_number}: {error.msg}") from None
            except RecursionError:
                raise DataFormatError(path, f"the JSON on line {line_number} is {_TOO_DEEP}") from None
    else:
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataFormatError(
                path, f"malformed JSON at line {error.lineno}, column {error.colno}: {error.msg}"
            ) from None
        except RecursionError:
            raise DataFormatError(path, f"the JSON is {_TOO_DEEP}") from None
        if not isinstance(records, list):
            raise DataFormatError(path, f"expected a JSON list of records, found {type(records).__name__}")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise DataFormatError(path, f"expected a JSON object, found {type(record).__name__}", index)
    return records


class RecordReader:
    """Typed access to the fields of one record, with errors that name file, record and field."""

    def __init__(self, path: str | Path, index: int, record: dict[str, Any]):
        self.path = path
        self.index = index
        self.record = record

    def error(self, field: str, message: str) -> DataFormatError:
        return DataFormatError(self.path, message, self.index, field)

    def get(self, field: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        """The value of ``field`` (a dotted path for nested objects), checked against ``kind``."""
        value: Any = self.record
        for part in field.split("."):
            if not isinstance(value, dict) or part not in value:
                if default is not ...:
                    return default
                raise self.error(field, "missing")
            value = value[part]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(field, f"expected {expected}, found {type(value).__name__}")
        return value

    def string(self, field: str, default: Any = ...) -> str:
        return self.get(field, str, default)

    def strings(self, field: str, default: Any = ..., at_least: int = 0) -> list[str]:
        """A list of at least ``at_least`` strings, none of them empty or only whitespace (nothing to score)."""
        values = self.get(field, list, default)
        if len(values) < at_least:
            raise self.error(field, f"expected at least {at_least} string(s), found {len(values)}")
        for position, value in enumerate(values):
            if not isinstance(value, str):
                raise self.error(f"{field}[{position}]", f"expected str, found {type(value).__name__}")
            if not value.strip():
                raise self.error(f"{field}[{position}]", f"empty string {value!r}")
        return values

    def answer(self, field: str) -> str:
        """An answer given as a plain string or as ``{"str": ...}`` (CounterFact)."""
        value = self.get(field, (str, dict))
        if isinstance(value, dict):
            if not isinstance(value.get("str"), str):
                raise self.error(field, 'expected a string or an object with a string "str"')
            value = value["str"]
        if not value.strip():
            raise self.error(field, "empty answer")
        return value

    def template(self, prompt_field: str, subject: str) -> str:
        """The prompt with ``{}`` for the subject, created by replacing the subject's first occurrence."""
        prompt = self.string(prompt_field)
        if prompt.count("{}") > 1:
            raise self.error(prompt_field, f"the prompt {prompt!r} has {prompt.count('{}')} '{{}}'; one is the subject")
        if "{}" in prompt:
            return prompt
        if not subject or subject not in prompt:
            raise self.error(prompt_field, f"subject {subject!r} does not occur in the prompt {prompt!r}")
        return prompt.replace(subject, "{}", 1)
