"""Editing methods as LightningModules."""

from lightning_edit.editors.alphaedit import AlphaEdit
from lightning_edit.editors.base import EditorModule
from lightning_edit.editors.ike import IKE
from lightning_edit.editors.in_context import InContext
from lightning_edit.editors.memit import MEMIT
from lightning_edit.editors.mend import MEND
from lightning_edit.editors.no_edit import NoEdit
from lightning_edit.editors.rome import ROME

__all__ = ["AlphaEdit", "EditorModule", "IKE", "InContext", "MEMIT", "MEND", "NoEdit", "ROME"]
