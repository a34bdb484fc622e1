"""Data sources: download, checksum, lock file, cache, zip, manual step and the DataModule wire-up (each DataModule
declares its own sources).

No network: files are served by a real HTTP server on 127.0.0.1 from a temporary folder, and "no network" is a
closed port.
"""

import hashlib
import json
import logging
import socket
import threading
import zipfile
from collections import Counter
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub.constants
import pytest

from lightning_edit.data import BAKE, CaseEdit, CounterFact, DataFormatError, RuleEdit, ScEdit, ZsRE
from lightning_edit.data.bake import BAKE_JUDGE, BAKE_QA
from lightning_edit.data.sources import CACHE_ENV, LOCK_FILE, DataSource, DataSourceError, SourceFile, fetch, local_path
from lightning_edit.resources import resolve_path

COUNTERFACT = resolve_path("builtin:data/counterfact-rome.json")
TOY_BAKE = resolve_path("builtin:data/toy/bake_qa.json")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving ``root``; ``requests`` counts the GETs per path.

    Every response carries the two headers huggingface_hub expects of a hub (a commit and an ETag).
    """
    root = tmp_path / "served"
    root.mkdir()
    requests: Counter = Counter()

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            requests[self.path] += 1
            super().do_GET()

        def end_headers(self):
            self.send_header("X-Repo-Commit", "0" * 40)
            self.send_header("ETag", '"fixture"')
            super().end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def serve(relative: str, data: bytes) -> str:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
        return f"http://127.0.0.1:{httpd.server_port}/{relative}"

    yield SimpleNamespace(url=f"http://127.0.0.1:{httpd.server_port}", serve=serve, requests=requests)
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def closed_port_url(filename: str) -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/{filename}"


def files_under(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file()) if folder.exists() else []


def test_download_with_published_checksum_then_cached(server, cache):
    data = b'[{"fact": 1}]'
    url = server.serve("dsets/facts.json", data)
    source = DataSource("facts", (SourceFile("facts.json", url, sha256(data)),), "not stated", server.url)

    path = fetch(source)
    assert path == cache / "facts" / "facts.json" and path.read_bytes() == data
    assert files_under(cache) == [path]  # a published checksum needs no lock file
    assert fetch(source) == path == local_path(source)
    assert server.requests == {"/dsets/facts.json": 1}  # the second run did not download


def test_checksum_mismatch_is_one_clear_line_and_keeps_nothing(server, cache):
    data = b"changed upstream"
    url = server.serve("facts.json", data)
    expected = sha256(b"as published")
    source = DataSource("facts", (SourceFile("facts.json", url, expected),), "not stated", server.url)

    with pytest.raises(DataSourceError) as error:
        fetch(source)
    message = str(error.value)
    assert "\n" not in message
    for part in ("facts.json", url, expected, sha256(data), "checksum mismatch"):
        assert part in message
    assert files_under(cache) == []


def test_no_network_names_the_url_and_the_manual_step(cache):
    url = closed_port_url("facts.json")
    source = DataSource("facts", (SourceFile("facts.json", url),), "not stated", "https://example.org")

    with pytest.raises(DataSourceError) as error:
        fetch(source)
    message = str(error.value)
    assert f"download {url} and put it at {cache / 'facts' / 'facts.json'}" in message
    assert CACHE_ENV in message and "--data.path" in message
    assert files_under(cache) == []


def test_unknown_checksum_is_locked_at_the_first_download(server, cache, caplog):
    first = b"first version"
    url = server.serve("facts.json", first)
    source = DataSource("facts", (SourceFile("facts.json", url),), "not stated", server.url)

    with caplog.at_level(logging.WARNING, logger="lightning_edit.data.sources"):
        path = fetch(source)
    lock = cache / "facts" / LOCK_FILE
    assert json.loads(lock.read_text()) == {"facts.json": {"sha256": sha256(first), "url": url}}
    assert sha256(first) in caplog.text and str(lock) in caplog.text

    # upstream changes; a later download (here: after the cached file is gone) is checked against the lock
    server.serve("facts.json", b"second version")
    path.unlink()
    with pytest.raises(DataSourceError) as error:
        fetch(source)
    message = str(error.value)
    for part in (url, sha256(first), sha256(b"second version"), str(lock)):
        assert part in message
    assert files_under(cache) == [lock]


def placed_by_hand(
    cache, name: str, data: bytes, lock: bytes | None = None, sha256: str | None = None
) -> tuple[DataSource, Path]:
    """A one-file source ``name`` without network whose file (and lock file) are put in place by hand, and the file."""
    url = closed_port_url(f"{name}.json")
    source = DataSource(name, (SourceFile(f"{name}.json", url, sha256),), "not stated", "https://x.org")
    folder = cache / name
    folder.mkdir(parents=True)
    if lock is not None:
        (folder / LOCK_FILE).write_bytes(lock)
    path = folder / f"{name}.json"
    path.write_bytes(data)
    return source, path


@pytest.mark.parametrize(
    "lock, message",
    [
        (b"[]", r"malformed lock file \(a list, not"),
        (b'{"facts.json": "0123"}', "the entry of 'facts.json' is a str"),
        (
            b'{"facts.json": {"url": null}}',
            r"the entry of 'facts.json' has no \"sha256\" of 64 hex digits \(found None",
        ),
        (b'{"facts.json": {"sha256": 7}}', "the entry of 'facts.json' has no \"sha256\""),
        (b"\xff{}", r"malformed lock file \('utf-8' codec can't decode"),
    ],
    ids=["a list", "a string entry", "no sha256", "a number", "not UTF-8"],
)
def test_a_hand_edited_lock_file_is_one_line_naming_it(cache, lock, message):
    source, path = placed_by_hand(cache, "facts", b'[{"fact": 1}]', lock)
    with pytest.raises(DataSourceError, match=message) as error:
        fetch(source)
    assert str(error.value).startswith(f"{path.parent / LOCK_FILE}: ") and "\n" not in str(error.value)
    assert "delete it" in str(error.value)


def test_upper_case_hashes_match(cache):
    data = b'[{"fact": 1}]'
    lock = json.dumps({"facts.json": {"sha256": sha256(data).upper(), "url": None}}).encode()
    source, path = placed_by_hand(cache, "facts", data, lock)
    assert fetch(source) == path
    source, path = placed_by_hand(cache, "published", data, sha256=sha256(data).upper())
    assert fetch(source) == path


def test_zip_source_is_extracted_once(server, cache, tmp_path):
    archive = tmp_path / "rules.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("rules/0/f_d.json", "[]")
        bundle.writestr("rules/0/ins.json", "[]")
    url = server.serve("rules.zip", archive.read_bytes())
    source = DataSource("rules", (SourceFile("rules.zip", url),), "not stated", server.url)

    folder = fetch(source)
    assert folder == cache / "rules" / "rules"
    assert sorted(p.relative_to(folder).as_posix() for p in files_under(folder)) == [
        "rules/0/f_d.json",
        "rules/0/ins.json",
    ]
    assert fetch(source) == folder and server.requests == {"/rules.zip": 1}


def rules_archive(path: Path) -> bytes:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("rules/0/f_d.json", json.dumps([{"prompt": "A rule " * 200}] * 2))
        bundle.writestr("rules/0/ins.json", json.dumps([{"prompt": "An instance " * 200}]))
    return path.read_bytes()


@pytest.mark.parametrize("how", ["placed by hand", "downloaded"])
def test_a_truncated_archive_is_one_line_and_locks_no_hash(server, cache, tmp_path, how):
    whole = rules_archive(tmp_path / "rules.zip")
    partial = whole[: len(whole) // 2]
    path = cache / "rules" / "rules.zip"
    if how == "placed by hand":
        url = closed_port_url("rules.zip")
        path.parent.mkdir(parents=True)
        path.write_bytes(partial)
    else:
        url = server.serve("rules.zip", partial)
    source = DataSource("rules", (SourceFile("rules.zip", url),), "not stated", server.url)

    with pytest.raises(DataSourceError) as error:
        fetch(source)
    message = str(error.value)
    assert f"{path} is not a complete zip archive" in message and "\n" not in message, message
    assert not (cache / "rules" / LOCK_FILE).exists() and not (cache / "rules" / "rules").exists()
    assert path.exists() == (how == "placed by hand")  # the user's file is kept, a bad download is not

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(whole)  # the whole archive, put where the message said
    assert fetch(source) == cache / "rules" / "rules"
    assert json.loads((cache / "rules" / LOCK_FILE).read_text())["rules.zip"]["sha256"] == sha256(whole)


def test_manual_step_file_placed_by_hand(cache):
    data = b'[{"fact": 2}]'
    url = closed_port_url("facts.json")
    source = DataSource("facts", (SourceFile("facts.json", url, sha256(data)),), "not stated", "https://x.org")
    with pytest.raises(DataSourceError, match="put it at"):
        fetch(source)

    path = cache / "facts" / "facts.json"  # where the message said to put it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"a wrong copy")
    with pytest.raises(DataSourceError, match="placed by hand") as error:
        fetch(source)
    assert sha256(b"a wrong copy") in str(error.value) and path.exists()  # the user's file is not deleted

    path.write_bytes(data)
    assert fetch(source) == path  # accepted without network


def test_source_without_url_is_manual_only(cache):
    source = DataSource(
        "rules", (SourceFile("rules.zip", None),), "not stated", "https://x.org", manual="ask the authors"
    )
    with pytest.raises(DataSourceError, match=r"no download URL is known; obtain rules\.zip \(ask the authors\)"):
        fetch(source)


def test_each_datamodule_declares_its_own_sources():
    declared = {
        cls.__name__: [source.name for source in cls.sources]
        for cls in (CounterFact, ZsRE, BAKE, ScEdit, RuleEdit, CaseEdit)
    }
    assert declared == {
        "CounterFact": ["counterfact"],
        "ZsRE": ["zsre"],
        "BAKE": ["bake-qa", "bake-judge"],
        "ScEdit": ["scedit-cf", "scedit-t"],
        "RuleEdit": ["ruleedit-200"],
        "CaseEdit": [],  # no published file
    }
    with pytest.raises(ValueError, match="has no files"):
        DataSource("empty", (), "not stated", "https://x.org")


def test_a_name_no_source_of_the_datamodule_is_one_line_listing_its_sources(tmp_path, cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataFormatError) as error:
        ZsRE("counterfact").prepare_data()  # another benchmark's source, no file of that name
    assert str(error.value) == "counterfact: no such file or folder, nor a data source of ZsRE (zsre)"
    with pytest.raises(DataFormatError) as error:
        BAKE("bake-q").setup()
    assert str(error.value) == "bake-q: no such file or folder, nor a data source of BAKE (bake-qa, bake-judge)"
    assert files_under(cache) == []


def test_hugging_face_dataset_through_huggingface_hub(server, cache, monkeypatch):
    data = TOY_BAKE.read_bytes()
    server.serve("datasets/jym7/BAKE/resolve/main/BAKE_qa.json", data)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    path = fetch(BAKE_QA)
    assert path == cache / "bake-qa" / "BAKE_qa.json" and path.read_bytes() == data
    assert json.loads((cache / "bake-qa" / LOCK_FILE).read_text())["BAKE_qa.json"]["sha256"] == sha256(data)
    assert fetch(BAKE_QA) == path
    assert server.requests == {"/datasets/jym7/BAKE/resolve/main/BAKE_qa.json": 1}


def test_hugging_face_dataset_without_network(cache, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", closed_port_url("").rstrip("/"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1, nothing cached
    with pytest.raises(DataSourceError) as error:
        fetch(BAKE_JUDGE)
    message = str(error.value)
    assert "BAKE_judge.json" in message and "jym7/BAKE" in message
    assert f"put it at {cache / 'bake-judge' / 'BAKE_judge.json'}" in message
    assert not (cache / "bake-judge" / "BAKE_judge.json").exists()


def test_datamodule_downloads_in_prepare_data_and_loads_in_setup(server, cache):
    data = COUNTERFACT.read_bytes()
    url = server.serve("counterfact.json", data)

    class Served(CounterFact):
        """CounterFact with a source of its own, at the test server."""

        sources = (DataSource("cf-test", (SourceFile("counterfact.json", url, sha256(data)),), "MIT", server.url),)

    with pytest.raises(DataSourceError, match="not downloaded"):  # setup alone never downloads
        Served("cf-test").setup()
    dm = Served("cf-test", limit=3)
    dm.prepare_data()
    dm.setup()
    assert dm.path == str(cache / "cf-test" / "counterfact.json") and len(dm.cases) == 3
    other_process = Served("cf-test")
    other_process.setup()
    assert len(other_process.cases) == 8 and server.requests == {"/counterfact.json": 1}


def test_bake_variant_picks_its_file(server, cache):
    data = TOY_BAKE.read_bytes()
    url = server.serve("BAKE_qa.json", data)

    class Served(BAKE):
        """BAKE whose BAKE-Q&J file is at the test server."""

        sources = (DataSource("bake-qa", (SourceFile("BAKE_qa.json", url),), "not stated", server.url), BAKE_JUDGE)

    assert BAKE("bake", variant="judge").source_name() == "bake-judge"
    dm = Served("bake", variant="qa", limit=5)
    dm.prepare_data()
    dm.setup()
    assert dm.path == str(cache / "bake-qa" / "BAKE_qa.json") and len(dm.cases) == 5


def test_a_file_path_is_not_a_source_name(tmp_path, cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("counterfact").write_bytes(COUNTERFACT.read_bytes())  # a local file named like a source wins
    dm = CounterFact("counterfact")
    dm.prepare_data()
    dm.setup()
    assert dm.path == "counterfact" and len(dm.cases) == 8 and files_under(cache) == []
