"""The benchmark tests' shared fixtures."""

import pytest

from lightning_edit.data.sources import CACHE_ENV


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private download directory (``$LIGHTNING_EDIT_DATA``)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"
