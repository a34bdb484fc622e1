"""Benchmarks: one small :class:`EditDataModule` per dataset, yielding :class:`~lightning_edit.cases.EditCase` batches.

A benchmark that is only a loader is a module (``counterfact.py``); one that brings more (its file quirks, score
kinds, judge templates, figures, generator) is a folder that holds all of it (``ruleedit/``, ``scedit/``,
``caseedit/``), its ``__init__`` exporting the DataModule. Each DataModule declares its own published files
(``sources``, :mod:`lightning_edit.data.sources`).

The names below load their module when first used (PEP 562), so that importing one module of the package does not
import every benchmark and what each needs (sympy, openai): an editor reads none of them, only
:mod:`lightning_edit.cases`. ``lightning-edit``
imports them all (:func:`import_all`), for the short names of ``--data``.
"""

import importlib

#: name -> its module (or folder) under lightning_edit.data; a new benchmark adds its line for its short name
EXPORTS = {
    "BAKE": "bake",
    "CaseEdit": "caseedit",
    "CounterFact": "counterfact",
    "EditTraining": "edit_training",
    "QAEdit": "qaedit",
    "RuleEdit": "ruleedit",
    "ScEdit": "scedit",
    "ZsRE": "zsre",
    "DataFormatError": "base",
    "EditDataModule": "base",
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)


def import_all() -> None:
    """Import every benchmark module (what registers the benchmarks' classes for jsonargparse's short names)."""
    for module in dict.fromkeys(EXPORTS.values()):
        importlib.import_module(f"{__name__}.{module}")
