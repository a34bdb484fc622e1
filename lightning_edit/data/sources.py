"""A benchmark's published files: what a DataModule declares (:class:`DataSource`) and :func:`fetch`, which downloads
them once, verifies them and caches them.

A DataModule lists the sources its ``path`` may name in its ``sources`` attribute (``--data.path counterfact``
instead of a file; :class:`~lightning_edit.data.base.EditDataModule`). :func:`fetch` downloads a source's published
files (HTTP through pooch, Hugging Face datasets through huggingface_hub) into the cache directory
(``$LIGHTNING_EDIT_DATA``, else the user cache of ``lightning-edit``), extracts zip archives and returns the local
path. Every file is verified against its published SHA-256 or, where none is known, against the hash of its first
download, locked in the source's folder (:mod:`lightning_edit.data.source_cache`), so a later change upstream is an
error. A zip archive that does not open or fails its members' CRC check (a truncated download) is an error naming
it, and its hash is not locked. A file put in place by hand (no network) is accepted and verified the same way.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pooch
import requests

from lightning_edit.data.source_cache import LOCK_FILE, DataSourceError, archive_fault, extract, lock_hash, read_lock

log = logging.getLogger(__name__)

CACHE_ENV = "LIGHTNING_EDIT_DATA"


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
        name: the name given as ``--data.path``; also the name of its folder in the cache.
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

    def __post_init__(self):
        if not self.files:
            raise ValueError(f"data source {self.name!r} has no files")


def cache_dir(directory: str | Path | None = None) -> Path:
    """The download directory: ``directory``, else ``$LIGHTNING_EDIT_DATA``, else the user cache of lightning-edit."""
    return Path(directory or os.environ.get(CACHE_ENV) or pooch.os_cache("lightning-edit"))


def local_path(source: DataSource, directory: str | Path | None = None) -> Path:
    """The local path of an already fetched source, without downloading anything.

    Returns:
        The file of a one-file source (the extracted folder for a zip archive), else the source's folder.
    """
    folder = cache_dir(directory) / source.name
    for file in source.files:
        if not (folder / file.filename).is_file():
            raise DataSourceError(
                f"data source {source.name!r} is not downloaded ({folder / file.filename} is missing): run the "
                "DataModule's prepare_data() (Lightning does, before setup) or lightning_edit.data.sources.fetch; "
                f"{_manual_step(source, file, folder / file.filename)}"
            )
    return _target(source, folder)


def fetch(source: DataSource, directory: str | Path | None = None) -> Path:
    """Download the files of ``source`` unless present, verify them and return the local path.

    Args:
        source: a DataModule's source (its ``sources``).
        directory: the download directory; default :func:`cache_dir`.

    Returns:
        As :func:`local_path`.

    Raises:
        DataSourceError: no network (naming the URL and the manual step) or a checksum mismatch.
    """
    folder = cache_dir(directory) / source.name
    read_lock(folder / LOCK_FILE)  # a bad lock file stops the fetch before anything is downloaded
    for file in source.files:
        path = folder / file.filename
        downloaded = not path.is_file()
        if downloaded:
            _download(source, file, folder)
        sha256 = _verify(source, file, folder, downloaded)
        if path.suffix == ".zip":
            extract(path, sha256)
    return _target(source, folder)


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
    expected = _expected_hash(file, folder)
    downloader = _HashingDownloader()
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
        lock_hash(lock, file.filename, actual, file.url)
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
    why = archive_fault(path)
    if why is None:
        return
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
    entry = read_lock(folder / LOCK_FILE).get(file.filename)
    return entry["sha256"] if entry else None


def _mismatch(
    source: DataSource, file: SourceFile, folder: Path, actual: str, expected: str, kept: bool
) -> DataSourceError:
    where = (
        f"{folder / file.filename} (placed by hand or changed, not downloaded now)"
        if kept
        else f"{file.url} (nothing was kept)"
    )
    if file.sha256 is not None:
        origin = "published"
        fix = ""
    else:
        lock = folder / LOCK_FILE
        origin = f"locked in {lock} at the first download"
        fix = f"; if the publisher changed the file on purpose, delete {lock} to accept it"
    return DataSourceError(
        f"data source {source.name!r}: checksum mismatch for {file.filename} from {where}: "
        f"expected sha256 {expected} ({origin}), got {actual}{fix}"
    )
