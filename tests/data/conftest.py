"""The benchmark tests' shared fixtures."""

import pytest

from lightning_edit.data.sources import CACHE_ENV


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private catalogue (registrations are undone) and download directory (``$LIGHTNING_EDIT_DATA``)."""
    from lightning_edit.data import sources

    monkeypatch.setattr(sources, "CATALOGUE", dict(sources.CATALOGUE))
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"
