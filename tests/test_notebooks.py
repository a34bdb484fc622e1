"""Every notebook under notebooks/ runs top to bottom in a fresh kernel of this interpreter (offline, CPU)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebook_runs(path, monkeypatch):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert not any(cell.get("outputs") for cell in notebook.cells), f"{path.name}: clear the outputs before committing"
    # "python3" is then this environment's ipykernel (run with this interpreter), not a user-level kernel spec
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")
    client = NotebookClient(
        notebook, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises on the first cell error; the executed copy stays in memory
