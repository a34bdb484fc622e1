"""Editing methods as LightningModules."""

from lightning_edit.editors.base import EditorModule
from lightning_edit.editors.no_edit import NoEdit

__all__ = ["EditorModule", "NoEdit"]
