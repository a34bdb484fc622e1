"""Named benchmark sources: the published files of known benchmarks, downloaded once, checksummed and cached.

A benchmark's ``path`` may name a source (``--data.path counterfact``) instead of a file. :func:`fetch` downloads the
source's published files (HTTP through pooch, Hugging Face datasets through huggingface_hub) into the cache directory
(``$LIGHTNING_EDIT_DATA``, else the user cache of ``lightning-edit``), extracts zip archives and returns the local
path. Every file is verified against its published SHA-256 or, where none is known, against the hash of its first
download, which is recorded in a lock file (``sha256.lock.json``) next to it, so a later change upstream is an error
(hashes compare in any letter case; a lock file edited into another shape is an error naming it). A zip archive
that does not open or fails its members' CRC check (a truncated download) is an error naming it, and its hash is not
locked. A file put in place by hand (no network) is accepted and verified the same way. An archive's extracted folder
is tied to the archive's hash (recorded beside it in ``<archive>.extracted``): an archive replaced by hand is extracted
anew, nothing of the old one kept. A new benchmark adds its own source with :func:`register_source`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pooch
import requests

from lightning_edit.errors import UserError

log = logging.getLogger(__name__)

CACHE_ENV = "LIGHTNING_EDIT_DATA"
LOCK_FILE = "sha256.lock.json"
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


class DataSourceError(UserError, ValueError):
    """A source that cannot be fetched or verified; the message names the file, the URL and what to do."""


@dataclass(frozen=True)
class SourceFile:
    """One published file of a source.

    Args:
        filename: its name in the source's cache folder (for ``hf_repo``, also its path in the hub repository).
        url: where it is published; None when no download URL is known (the manual step is then the only route).
        sha256: its published SHA-256, or None (the hash of the first download is then locked).
        hf_repo: the Hugging Face dataset repository it is downloaded from with huggingface_hub instead of ``url``.
    """

    filename: str
    url: str | None
    sha256: str | None = None
    hf_repo: str | None = None


@dataclass(frozen=True)
class DataSource:
    """A benchmark's published files and what is known about them.

    Args:
        name: the name given as ``--data.path``.
        files: the published files; a zip archive is extracted next to itself.
        license: the licence as published ("not stated" where the publisher states none).
        homepage: where the benchmark is published.
        manual: how to obtain the files by hand, beyond downloading their URLs (empty if nothing more is needed).
    """

    name: str
    files: tuple[SourceFile, ...]
    license: str
    homepage: str
    manual: str = ""


CATALOGUE: dict[str, DataSource] = {}


def register_source(source: DataSource, replace: bool = False) -> DataSource:
    """Add ``source`` to the catalogue under its name (``replace`` to redefine an existing name)."""
    if source.name in CATALOGUE and not replace:
        raise ValueError(f"a data source named {source.name!r} is already registered")
    if not source.files:
        raise ValueError(f"data source {source.name!r} has no files")
    CATALOGUE[source.name] = source
    return source


def is_known(name: str) -> bool:
    """Whether ``name`` is a registered source."""
    return name in CATALOGUE


def get_source(name: str) -> DataSource:
    """The registered source ``name``."""
    if name not in CATALOGUE:
        raise DataSourceError(f"unknown data source {name!r}; known: {', '.join(sorted(CATALOGUE))}")
    return CATALOGUE[name]


def cache_dir(directory: str | Path | None = None) -> Path:
    """The download directory: ``directory``, else ``$LIGHTNING_EDIT_DATA``, else the user cache of lightning-edit."""
    return Path(directory or os.environ.get(CACHE_ENV) or pooch.os_cache("lightning-edit"))


def local_path(name: str, directory: str | Path | None = None) -> Path:
    """The local path of an already fetched source, without downloading anything.

    Returns:
        The file of a one-file source (the extracted folder for a zip archive), else the source's folder.
    """
    source = get_source(name)
    folder = cache_dir(directory) / source.name
    for file in source.files:
        if not (folder / file.filename).is_file():
            raise DataSourceError(
                f"data source {name!r} is not downloaded ({folder / file.filename} is missing): run prepare_data() "
                f"(Lightning does, before setup) or lightning_edit.data.sources.fetch({name!r}); "
                f"{_manual_step(source, file, folder / file.filename)}"
            )
    return _target(source, folder)


def fetch(name: str, directory: str | Path | None = None) -> Path:
    """Download the files of source ``name`` unless present, verify them and return the local path.

    Args:
        name: a registered source.
        directory: the download directory; default :func:`cache_dir`.

    Returns:
        As :func:`local_path`.

    Raises:
        DataSourceError: no network (naming the URL and the manual step) or a checksum mismatch.
    """
    source = get_source(name)
    folder = cache_dir(directory) / source.name
    _read_lock(folder / LOCK_FILE)  # a bad lock file stops the fetch before anything is downloaded
    for file in source.files:
        path = folder / file.filename
        downloaded = not path.is_file()
        if downloaded:
            _download(source, file, folder)
        sha256 = _verify(source, file, folder, downloaded)
        if path.suffix == ".zip":
            _extract(path, sha256)
    return _target(source, folder)


def _extract(archive: Path, sha256: str) -> None:
    """Extract ``archive`` into the folder named after it, unless that folder holds this very archive (its hash,
    recorded in ``<archive>.extracted``, is ``sha256``): another archive's folder is replaced whole."""
    folder, record = archive.with_suffix(""), archive.with_name(archive.name + ".extracted")
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


def _target(source: DataSource, folder: Path) -> Path:
    if len(source.files) > 1:
        return folder
    path = folder / source.files[0].filename
    return path.with_suffix("") if path.suffix == ".zip" else path


def _manual_step(source: DataSource, file: SourceFile, path: Path) -> str:
    obtain = f"download {file.url}" if file.url else f"obtain {file.filename}"
    extra = f" ({source.manual})" if source.manual else ""
    return (
        f"{obtain}{extra} and put it at {path} (${CACHE_ENV} sets the download directory), "
        "or give a local copy as --data.path"
    )


class _HashingDownloader:
    """pooch's HTTP downloader (no progress bar) that keeps the SHA-256 of what it fetched for error messages."""

    def __init__(self):
        self.http = pooch.HTTPDownloader(progressbar=False)
        self.sha256: str | None = None

    def __call__(self, url: str, output_file: str, pooch_: pooch.Pooch | None) -> None:
        self.http(url, output_file, pooch_)
        self.sha256 = pooch.file_hash(output_file)


def _download(source: DataSource, file: SourceFile, folder: Path) -> None:
    """Download ``file`` into ``folder`` atomically; a mismatch with a known hash keeps nothing."""
    path = folder / file.filename
    if file.url is None:
        raise DataSourceError(
            f"data source {source.name!r}: no download URL is known; {_manual_step(source, file, path)}"
        )
    if file.hf_repo is not None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

        try:
            hf_hub_download(
                repo_id=file.hf_repo,
                repo_type="dataset",
                filename=file.filename,
                local_dir=folder,
                endpoint=os.environ.get("HF_ENDPOINT"),  # read now, not when huggingface_hub was imported
            )
        except (EntryNotFoundError, HfHubHTTPError) as error:
            raise DataSourceError(
                f"data source {source.name!r}: cannot download {file.filename} of the Hugging Face dataset "
                f"{file.hf_repo} ({type(error).__name__}); {_manual_step(source, file, path)}"
            ) from error
        return
    expected, downloader = _expected_hash(file, folder), _HashingDownloader()
    try:
        pooch.retrieve(file.url, known_hash=expected, fname=file.filename, path=folder, downloader=downloader)
    except requests.exceptions.RequestException as error:
        raise DataSourceError(
            f"data source {source.name!r}: cannot download {file.url} ({type(error).__name__}); "
            f"{_manual_step(source, file, path)}"
        ) from error
    except ValueError:
        if downloader.sha256 is None:
            raise
        raise _mismatch(source, file, folder, downloader.sha256, expected, kept=False) from None


def _verify(source: DataSource, file: SourceFile, folder: Path, downloaded: bool) -> str:
    """Check the file against its known or locked hash, and a zip archive's contents; then lock the hash of a file
    that has none. Returns the file's hash."""
    path = folder / file.filename
    expected = _expected_hash(file, folder)
    actual = pooch.file_hash(str(path))
    if expected is not None and actual != expected.lower():  # pooch's hashes are lower case; a known one may not be
        if downloaded:
            path.unlink()
        raise _mismatch(source, file, folder, actual, expected, kept=not downloaded)
    if path.suffix == ".zip":
        _check_archive(source, file, path, downloaded)
    if expected is None:
        lock = folder / LOCK_FILE
        entries = _read_lock(lock)
        entries[file.filename] = {"sha256": actual, "url": file.url}
        temporary = lock.with_name(lock.name + ".tmp")
        try:
            temporary.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
            temporary.replace(lock)
        except OSError as error:  # a read-only folder: one line, and no temporary file left behind
            if temporary.is_file():
                temporary.unlink()
            raise DataSourceError(f"{lock}: cannot write the lock file ({error}); is its folder writable?") from None
        log.warning(
            "%s: no published checksum; recorded its sha256 %s in %s, later downloads are verified against it",
            path,
            actual,
            lock,
        )
    return actual


def _check_archive(source: DataSource, file: SourceFile, path: Path, downloaded: bool) -> None:
    """A zip archive must open and every member must match its CRC: a truncated or corrupt one is an error, before
    its hash is locked (a downloaded one is deleted, one placed by hand is kept)."""
    try:
        with zipfile.ZipFile(path) as archive:
            corrupt = archive.testzip()
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        why = str(error) or type(error).__name__
    else:
        if corrupt is None:
            return
        why = f"member {corrupt} is corrupt"
    if downloaded:
        path.unlink()
    where = f"downloaded from {file.url} (nothing was kept)" if downloaded else "placed by hand (not downloaded now)"
    raise DataSourceError(
        f"data source {source.name!r}: {path} is not a complete zip archive ({why}; a truncated download?), "
        f"{where}; its hash is not locked; {_manual_step(source, file, path)}"
    )


def _expected_hash(file: SourceFile, folder: Path) -> str | None:
    """The hash ``file`` must have: the published one, else the one locked at its first download, else None."""
    if file.sha256 is not None:
        return file.sha256
    entry = _read_lock(folder / LOCK_FILE).get(file.filename)
    return entry["sha256"] if entry else None


def _read_lock(lock: Path) -> dict[str, dict[str, str | None]]:
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


def _mismatch(
    source: DataSource, file: SourceFile, folder: Path, actual: str, expected: str, kept: bool
) -> DataSourceError:
    where = (
        f"{folder / file.filename} (placed by hand or changed, not downloaded now)"
        if kept
        else f"{file.url} (nothing was kept)"
    )
    if file.sha256 is not None:
        origin, fix = "published", ""
    else:
        lock = folder / LOCK_FILE
        origin = f"locked in {lock} at the first download"
        fix = f"; if the publisher changed the file on purpose, delete {lock} to accept it"
    return DataSourceError(
        f"data source {source.name!r}: checksum mismatch for {file.filename} from {where}: "
        f"expected sha256 {expected} ({origin}), got {actual}{fix}"
    )


_ROME = "https://rome.baulab.info/data/dsets"
_ROME_LICENSE = "not stated for the data (the ROME code, github.com/kmeng01/rome, is MIT)"
_BAKE_LICENSE = "not stated (github.com/mjy1111/BAKE has no licence file)"
_SCEDIT = "https://raw.githubusercontent.com/asdfo123/ScEdit/8906c5e/data"

for _source in (
    DataSource(
        "counterfact",
        # sha256 and size (45,108,470 B) recorded in the Git-LFS pointer of the copy
        # scalable-model-editing/rebuilding-rome:data/counterfact.json (commit 01d0c9f)
        (
            SourceFile(
                "counterfact.json",
                f"{_ROME}/counterfact.json",
                sha256="d017056125178a13728594e66a801357a8db9ed7973a7425554bb4271de9fc6f",
            ),
        ),
        _ROME_LICENSE,
        "https://rome.baulab.info/",
    ),
    DataSource(
        "zsre",
        (SourceFile("zsre_mend_eval.json", f"{_ROME}/zsre_mend_eval.json"),),
        _ROME_LICENSE,
        "https://rome.baulab.info/",
    ),
    DataSource(
        "bake-qa",
        (
            SourceFile(
                "BAKE_qa.json",
                "https://huggingface.co/datasets/jym7/BAKE/resolve/main/BAKE_qa.json",
                hf_repo="jym7/BAKE",
            ),
        ),
        _BAKE_LICENSE,
        "https://huggingface.co/datasets/jym7/BAKE",
    ),
    DataSource(
        "bake-judge",
        (
            SourceFile(
                "BAKE_judge.json",
                "https://huggingface.co/datasets/jym7/BAKE/resolve/main/BAKE_judge.json",
                hf_repo="jym7/BAKE",
            ),
        ),
        _BAKE_LICENSE,
        "https://huggingface.co/datasets/jym7/BAKE",
    ),
    DataSource(
        "scedit-cf",
        (SourceFile("ScEdit-CF.json", f"{_SCEDIT}/ScEdit-CF.json"),),
        "not stated",
        "https://github.com/asdfo123/ScEdit",
    ),
    DataSource(
        "scedit-t",
        (SourceFile("ScEdit-T.json", f"{_SCEDIT}/ScEdit-T.json"),),
        "not stated",
        "https://github.com/asdfo123/ScEdit",
    ),
    DataSource(
        "ruleedit-200",
        (
            SourceFile(
                "RuleEdit-200.zip",
                "https://raw.githubusercontent.com/Pepper66/DMLE/5fcae5183e8ca3f573a9a38607e986e9254032fc/RuleEdit-200.zip",
            ),
        ),
        "none stated (no licence file; the DMLE README asks to contact the authors for use beyond academic research)",
        "https://github.com/Pepper66/DMLE",
        manual="the archive RuleEdit-200.zip of github.com/Pepper66/DMLE, released with arXiv 2604.08284",
    ),
):
    register_source(_source)
