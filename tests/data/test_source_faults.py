"""Data sources changed by hand: an archive replaced in the cache, a lock file that is not a file.

No network: the sources' URLs are closed ports, so every file is one put in place by hand.
"""

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from lightning_edit.data.sources import LOCK_FILE, DataSource, DataSourceError, SourceFile, fetch
from tests.data.test_sources import closed_port_url


def offline(name: str, filename: str) -> DataSource:
    """A one-file source whose URL is a closed port."""
    return DataSource(name, (SourceFile(filename, closed_port_url(filename)),), "not stated", "https://x.org")


def write_archive(path: Path, members: dict[str, str]) -> str:
    """Write a zip archive of ``members`` (name -> text) at ``path``; its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as bundle:
        for name, text in members.items():
            bundle.writestr(name, text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_under(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("lock", ["updated", "deleted"])
def test_an_archive_replaced_by_hand_is_extracted_anew(cache, lock):
    source = offline("rules", "rules.zip")
    archive = cache / "rules" / "rules.zip"
    write_archive(archive, {"rules/0/f_d.json": "old", "rules/1/f_d.json": "old only"})
    folder = fetch(source)
    assert files_under(folder) == {"rules/0/f_d.json": "old", "rules/1/f_d.json": "old only"}

    new = write_archive(archive, {"rules/0/f_d.json": "new"})  # the user replaces the archive
    lock_path = cache / "rules" / LOCK_FILE
    if lock == "updated":  # and locks its hash, as the mismatch message says to (or deletes the lock)
        lock_path.write_text(json.dumps({"rules.zip": {"sha256": new, "url": None}}))
    else:
        lock_path.unlink()
    assert fetch(source) == folder
    assert files_under(folder) == {"rules/0/f_d.json": "new"}  # nothing of the old archive is read
    assert json.loads(lock_path.read_text())["rules.zip"]["sha256"] == new

    assert fetch(source) == folder and files_under(folder) == {"rules/0/f_d.json": "new"}  # unchanged: kept


def test_a_folder_extracted_by_an_earlier_version_is_extracted_anew(cache):
    """A cache extracted before the folder was tied to its archive's hash (no record of it) is extracted again."""
    source = offline("rules", "rules.zip")
    archive = cache / "rules" / "rules.zip"
    write_archive(archive, {"rules/0/f_d.json": "new"})
    stale = cache / "rules" / "rules" / "rules" / "0" / "f_d.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("stale")
    assert files_under(fetch(source)) == {"rules/0/f_d.json": "new"}


@pytest.mark.parametrize("placed", [True, False], ids=["placed by hand", "not downloaded yet"])
def test_a_lock_file_that_is_a_folder_is_one_line_and_leaves_nothing(cache, placed):
    source = offline("facts", "facts.json")
    folder = cache / "facts"
    (folder / LOCK_FILE).mkdir(parents=True)
    if placed:
        (folder / "facts.json").write_text('[{"fact": 1}]')
    before = sorted(p.name for p in folder.iterdir())

    with pytest.raises(DataSourceError) as error:
        fetch(source)
    message = str(error.value)
    assert message.startswith(f"{folder / LOCK_FILE}: ") and "\n" not in message
    assert "not a file" in message and "delete it" in message
    assert sorted(p.name for p in folder.iterdir()) == before  # no .tmp left behind
    assert not any((folder / LOCK_FILE).iterdir())


def test_a_lock_file_that_cannot_be_written_is_one_line_and_leaves_nothing(cache):
    source = offline("facts", "facts.json")
    folder = cache / "facts"
    folder.mkdir(parents=True)
    (folder / "facts.json").write_text('[{"fact": 1}]')
    (folder / (LOCK_FILE + ".tmp")).mkdir()  # where the lock is written first: cannot be a file

    with pytest.raises(DataSourceError) as error:
        fetch(source)
    message = str(error.value)
    assert message.startswith(f"{folder / LOCK_FILE}: cannot write") and "\n" not in message
    assert sorted(p.name for p in folder.iterdir()) == ["facts.json", LOCK_FILE + ".tmp"]
