"""What produced an output: the package versions and the git commit, recorded in results.json and edits.json."""

from __future__ import annotations

import importlib
import platform
import subprocess
from pathlib import Path

#: distribution -> the module whose ``__version__`` it is (the modules a run has imported: no metadata scan)
PACKAGES = {
    "lightning-edit": "lightning_edit",
    "torch": "torch",
    "lightning": "lightning",
    "transformers": "transformers",
    "torchmetrics": "torchmetrics",
    "tokenizers": "tokenizers",
    "jsonargparse": "jsonargparse",
}


def package_versions() -> dict[str, str | None]:
    """Python's version and those of :data:`PACKAGES` (None for a package that is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name, module in PACKAGES.items():
        try:
            versions[name] = importlib.import_module(module).__version__
        except ImportError:
            versions[name] = None
    return versions


def git_hash() -> str | None:
    """Commit of the lightning-edit source tree (``+dirty`` when it has uncommitted changes), None outside git."""
    here = Path(__file__).parent
    try:  # one call: the commit in the "# branch.oid" header, then a line per changed or untracked file
        status = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain=v2", "--branch"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return None
    commit = next((line.split()[2] for line in status if line.startswith("# branch.oid ")), "(initial)")
    if commit == "(initial)":
        return None
    return commit + ("+dirty" if any(not line.startswith("#") for line in status) else "")
