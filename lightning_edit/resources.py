"""Files that ship inside the package: the embedded default model and benchmark data.

A path written ``builtin:<relative path>`` in a config names a file under ``lightning_edit/assets/``, so configs
work from any working directory, whether the package is installed or used from a clone.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from lightning_edit.errors import ConfigError

ASSETS_DIR = Path(__file__).parent / "assets"
BUILTIN_PREFIX = "builtin:"
CACHE_ENV = "LIGHTNING_EDIT_CACHE"


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def user_cache_dir(kind: str) -> Path:
    """``$LIGHTNING_EDIT_CACHE/<kind>``, else ``~/.cache/lightning_edit/<kind>`` (statistics, verdicts, models)."""
    root = os.environ.get(CACHE_ENV)
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "lightning_edit") / kind


def resolve_path(path: str | Path) -> Path:
    """``builtin:data/zsre.json`` -> ``<package>/assets/data/zsre.json``; any other path is returned as a Path.

    A ``builtin:`` path that leads out of the assets folder (``builtin:../../x``, an absolute path) is a
    :class:`~lightning_edit.errors.ConfigError`.
    """
    text = str(path)
    if not text.startswith(BUILTIN_PREFIX):
        return Path(text)
    builtin = ASSETS_DIR / text[len(BUILTIN_PREFIX) :]
    if not builtin.resolve().is_relative_to(ASSETS_DIR.resolve()):
        raise ConfigError(
            f"{text!r} leads out of the files shipped with lightning-edit ({ASSETS_DIR}): a builtin: path names a "
            "file under that folder (builtin:data/zsre.json); give any other file by its own path"
        )
    return builtin


def builtin_texts() -> list[str]:
    """Every string in the embedded benchmark files (the corpus of the embedded tokenizers)."""
    texts: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict | list):
            for item in value.values() if isinstance(value, dict) else value:
                collect(item)

    for path in sorted((ASSETS_DIR / "data").glob("*.json")):
        collect(json.loads(path.read_text(encoding="utf-8")))
    return texts
