"""How RuleEdit-200's files are laid out and written: rule folders (``f_d.json`` and ``ins.json``, numbered, maybe one
folder down), and fields given as a string or a list, answers as a string or a list of aliases, subjects written in
another case than the prompt writes them. :mod:`~lightning_edit.data.ruleedit.datamodule` builds the cases.

The loader reads the format's quirks as they are: ``Rule_Understanding`` strings in ``f_d.json`` but lists [formula,
description] in ``ins.json``, ``ground_truth`` a list or absent, any number of instances. A file that cannot be read
and a record with a missing, mistyped or blank field (an empty or whitespace-only prompt or answer, an empty list of
prompts) are left out and listed (file, record, reason) under ``counts.skipped_records`` in results.json; every other
record loads. Read as DMLE's code reads them, and listed under ``benchmark.noted_records``: a ``case_id`` other than
the folder's (the folder is the rule), an edit prompt without the subject (loaded whole: the editors that read keys at
the subject leave it out), more answers than prompts or fewer (both cut to the shorter). A rule folder that repeats
an earlier one, by its files (a copy under another name) or by its number (``01/`` after ``1/``), is left out and
listed: the first in folder order (``1/`` before ``01/``) is read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning_edit.data.records import RecordReader
from lightning_edit.errors import DataFormatError

FILES = {"f_d.json": ("formula", "description"), "ins.json": ("instance",)}


def rule_folders(root: Path, skip: Callable[..., None]) -> list[Path]:
    """The rule folders under ``root``, numerically sorted (one level down if the archive nests them); a folder with
    the files or the number of an earlier one (``1/`` and ``01/``) is left out and given to ``skip``."""
    if not root.is_dir():
        raise DataFormatError(root, "expected a folder of rule folders (each with f_d.json and ins.json)")
    folders = subfolders(root)
    if len(folders) == 1 and not any((folders[0] / name).exists() for name in FILES):
        folders = subfolders(folders[0])
    folders.sort(key=folder_order)
    if not folders:
        raise DataFormatError(root, "no rule folders found")
    kept = []
    first = {}
    for folder in folders:
        files = tuple((folder / name).read_bytes() if (folder / name).is_file() else None for name in FILES)
        keys = [("files", files)] if any(files) else []
        keys += [("number", int(folder.name))] if folder.name.isdigit() else []
        duplicate = next((key for key in keys if key in first), None)
        if duplicate is None:
            first |= {key: folder for key in keys}
            kept.append(folder)
        elif duplicate[0] == "files":
            skip(None, f"a copy of {first[duplicate]} (the same {' and '.join(FILES)}): remove one", folder)
        else:
            skip(None, f"rule {duplicate[1]} again, already read from {first[duplicate]}: remove one", folder)
    return kept


def subfolders(folder: Path) -> list[Path]:
    """The folders in ``folder``, without hidden ones and archive metadata (``.git``, ``__MACOSX``)."""
    return [child for child in folder.iterdir() if child.is_dir() and not child.name.startswith((".", "__"))]


def folder_order(folder: Path) -> tuple[bool, int, int, str]:
    """Numbered folders first, in numeric order (``1`` before ``01``), then the others by name."""
    numbered = folder.name.isdigit()
    return not numbered, int(folder.name) if numbered else 0, len(folder.name), folder.name


def source(reader: RecordReader) -> str:
    return f"{reader.path}#{reader.index}"


def strings(reader: RecordReader, field: str, default: Any = ...) -> list[str]:
    """A field given as a string or a list of strings, as a list; an empty or whitespace-only string is an error."""
    value = reader.get(field, (str, list), default)
    if isinstance(value, list):
        return reader.strings(field, default)
    if not value.strip():
        raise reader.error(field, f"empty string {value!r}")
    return [value]


def has(reader: RecordReader, field: str) -> bool:
    return reader.get(field, object, None) is not None


def as_written(prompt: str, subject: str) -> str:
    """``subject`` as the prompt writes it when it differs only in case ("Rectangle ..." for "rectangle")."""
    if subject not in prompt and subject.lower() in prompt.lower():
        start = prompt.lower().index(subject.lower())
        return prompt[start : start + len(subject)]
    return subject


def answer_list(reader: RecordReader, field: str) -> list[str]:
    """A list answer, one entry per prompt (each entry a string, or a list whose first string counts)."""
    values = reader.get(field, (str, list))
    values = [values] if isinstance(values, str) else values
    answers = []
    for position, value in enumerate(values):
        if isinstance(value, list) and value and isinstance(value[0], str):
            value = value[0]
        if not isinstance(value, str) or not value.strip():
            raise reader.error(f"{field}[{position}]", "expected a non-empty string")
        answers.append(value)
    return answers
