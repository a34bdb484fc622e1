"""What produced an output: the package versions and the git commit, recorded in results.json and edits.json."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("lightning-edit", "torch", "lightning", "transformers", "torchmetrics", "tokenizers", "jsonargparse")


def package_versions() -> dict[str, str | None]:
    """Python's version and those of :data:`PACKAGES` (None for a package that is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def git_hash() -> str | None:
    """Commit of the lightning-edit source tree (``+dirty`` when it has uncommitted changes), None outside git."""
    here = Path(__file__).parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty.stdout.strip() else "")
