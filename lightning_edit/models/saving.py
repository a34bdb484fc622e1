"""Saving an edited model: weights and tokenizer as ``save_pretrained`` writes them, and which edits it holds."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lightning_edit.provenance import git_hash, package_versions


def save_edited_model(model, tokenizer, directory: str | Path, cases: list, editor: str, hparams: Any) -> Path:
    """Save an edited model (safetensors) and its tokenizer, with ``edits.json``: which edits it holds."""
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    write_edits_record(directory, cases, editor, hparams)
    return directory


def write_edits_record(directory: Path, cases: list, editor: str, hparams: Any) -> None:
    """Write ``edits.json``: the editor, its hyper-parameters and every edit the saved model or adapter holds."""
    record = {
        "editor": editor,
        "hparams": json.loads(json.dumps(dict(hparams), default=str)),
        "edits": [
            {"case_id": case.case_id, "source": case.source, "requests": [asdict(r) for r in case.requests]}
            for case in cases
        ],
        "versions": package_versions(),
        "git_hash": git_hash(),
    }
    (directory / "edits.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
