"""Editing methods as LightningModules."""

from lightning_edit.editors.alphaedit import AlphaEdit
from lightning_edit.editors.base import EditorModule
from lightning_edit.editors.ft import FT
from lightning_edit.editors.grace import GRACE
from lightning_edit.editors.ike import IKE
from lightning_edit.editors.in_context import InContext
from lightning_edit.editors.lora import LoRA
from lightning_edit.editors.memit import MEMIT
from lightning_edit.editors.mend import MEND
from lightning_edit.editors.no_edit import NoEdit
from lightning_edit.editors.rect import RECT
from lightning_edit.editors.rome import ROME
from lightning_edit.editors.ultraedit import UltraEdit
from lightning_edit.editors.wise import WISE

__all__ = [
    "AlphaEdit",
    "EditorModule",
    "FT",
    "GRACE",
    "IKE",
    "InContext",
    "LoRA",
    "MEMIT",
    "MEND",
    "NoEdit",
    "RECT",
    "ROME",
    "UltraEdit",
    "WISE",
]
