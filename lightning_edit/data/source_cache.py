"""The download cache's own files: the lock file of first-seen hashes, and zip archives checked whole and extracted.

A file with no published SHA-256 is verified against the hash of its first download, recorded in a lock file
(``sha256.lock.json``) in its source's folder; a lock file edited into another shape is an error naming it (hashes
compare in any letter case). A zip archive must open and pass its members' CRC check before its hash is locked. An
archive's extracted folder is tied to the archive's hash (recorded beside it in ``<archive>.extracted``): an archive
replaced by hand is extracted anew, nothing of the old one kept. :mod:`lightning_edit.data.sources` uses them.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
import zlib
from pathlib import Path

from lightning_edit.errors import UserError

LOCK_FILE = "sha256.lock.json"
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


class DataSourceError(UserError, ValueError):
    """A source that cannot be fetched or verified; the message names the file, the URL and what to do."""


def read_lock(lock: Path) -> dict[str, dict[str, str | None]]:
    """The entries of a lock file (file name -> ``{"sha256": ..., "url": ...}``); a malformed one is an error."""
    fix = "delete it to lock the hashes anew"
    if not lock.exists():
        return {}
    if not lock.is_file():
        raise DataSourceError(f"{lock}: the lock file is not a file (a folder?); {fix}")
    try:
        entries = json.loads(lock.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise DataSourceError(f"{lock}: malformed lock file ({error}); {fix}") from None
    if not isinstance(entries, dict):
        raise DataSourceError(
            f'{lock}: malformed lock file (a {type(entries).__name__}, not {{file name: {{"sha256": ...}}}}); {fix}'
        )
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise DataSourceError(
                f'{lock}: the entry of {name!r} is a {type(entry).__name__}, not {{"sha256": ...}}; {fix}'
            )
        if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]):
            raise DataSourceError(
                f'{lock}: the entry of {name!r} has no "sha256" of 64 hex digits (found {entry.get("sha256")!r:.80}); '
                f"{fix}"
            )
    return entries


def lock_hash(lock: Path, filename: str, sha256: str, url: str | None) -> None:
    """Record ``sha256`` (and the URL) of ``filename`` in ``lock``, atomically; a folder that cannot be written is an
    error, and no temporary file is left behind."""
    entries = read_lock(lock)
    entries[filename] = {"sha256": sha256, "url": url}
    temporary = lock.with_name(lock.name + ".tmp")
    try:
        temporary.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
        temporary.replace(lock)
    except OSError as error:  # a read-only folder: one line, and no temporary file left behind
        if temporary.is_file():
            temporary.unlink()
        raise DataSourceError(f"{lock}: cannot write the lock file ({error}); is its folder writable?") from None


def archive_fault(path: Path) -> str | None:
    """Why the zip archive ``path`` is not whole (it does not open, or a member fails its CRC check); None if it is."""
    try:
        with zipfile.ZipFile(path) as archive:
            corrupt = archive.testzip()
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        return str(error) or type(error).__name__
    return None if corrupt is None else f"member {corrupt} is corrupt"


def extract(archive: Path, sha256: str) -> None:
    """Extract ``archive`` into the folder named after it, unless that folder holds this very archive (its hash,
    recorded in ``<archive>.extracted``, is ``sha256``): another archive's folder is replaced whole."""
    folder = archive.with_suffix("")
    record = archive.with_name(archive.name + ".extracted")
    if folder.is_dir() and record.is_file() and record.read_text(encoding="utf-8").strip() == sha256:
        return
    staging = archive.with_name(archive.name + ".extracting")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(archive) as bundle:
        bundle.extractall(staging)
    record.unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    record.write_text(sha256 + "\n", encoding="utf-8")
