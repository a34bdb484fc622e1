"""The unedited model: the baseline every editor is compared with."""

from __future__ import annotations

from lightning_edit.cases import EditRequest
from lightning_edit.editors.base import EditorModule


class NoEdit(EditorModule):
    """Reports the unedited model on a benchmark (pre-edit numbers)."""

    edits_weights = False
    edits_split_models = True  # it only scores (docs/sharding.md)

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return []

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Nothing to apply."""
