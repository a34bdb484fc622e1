"""Benchmarks: one small :class:`EditDataModule` per dataset, yielding :class:`EditCase` batches."""

from lightning_edit.data.bake import BAKE
from lightning_edit.data.base import DataFormatError, EditDataModule
from lightning_edit.data.caseedit import CaseEdit
from lightning_edit.data.counterfact import CounterFact
from lightning_edit.data.edit_training import EditTraining
from lightning_edit.data.ruleedit import RuleEdit
from lightning_edit.data.scedit import ScEdit
from lightning_edit.data.schema import EditCase, EditRequest, PromptGroup
from lightning_edit.data.zsre import ZsRE

__all__ = [
    "BAKE",
    "CaseEdit",
    "CounterFact",
    "DataFormatError",
    "EditCase",
    "EditDataModule",
    "EditRequest",
    "EditTraining",
    "PromptGroup",
    "RuleEdit",
    "ScEdit",
    "ZsRE",
]
