"""Judge templates found by name: the generic ones shipped with the judges, and those a benchmark's folder ships.

A folder of templates holds one ``<name>.txt`` per template and ``templates.json``, which gives each template's
scale (``binary`` or ``likert7``), the key of the verdict in the reply and, where it is not ``strict``, how the reply
is read (:func:`~lightning_edit.judges.llm.parse_verdict`). The folders are ``lightning_edit/judges/templates/``
(templates of no benchmark: ``answer_correct``) and the ``templates/`` folder of each benchmark folder,
``lightning_edit/data/<benchmark>/templates/`` (RULE-EDIT's ``rule_edit``, ScEdit's ``scedit_*``): a benchmark ships
its own templates in its own folder, and a judge finds them by name. Names are unique across the folders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lightning_edit.judges.base import Scale

Reading = Literal["strict", "exactly_a"]
#: the judges' own templates, of no benchmark
JUDGE_TEMPLATES = Path(__file__).parent / "templates"
#: the benchmarks' folders, each of which may hold a ``templates/`` folder
BENCHMARKS = Path(__file__).parents[1] / "data"
INDEX = "templates.json"


@dataclass(frozen=True)
class ShippedTemplate:
    """A template shipped with the package.

    Args:
        name: its name, as a judge's ``template``.
        path: its text file.
        scale: ``binary`` or ``likert7``.
        key: the verdict's key in the reply.
        reading: how the reply is read (``strict`` or ``exactly_a``).
    """

    name: str
    path: Path
    scale: Scale
    key: str
    reading: Reading = "strict"


def template_folders() -> list[Path]:
    """The folders of shipped templates: the judges' own, then each benchmark folder's ``templates/`` by name."""
    return [JUDGE_TEMPLATES, *sorted(folder.parent for folder in BENCHMARKS.glob(f"*/templates/{INDEX}"))]


def shipped_templates() -> dict[str, ShippedTemplate]:
    """Every shipped template by name, read from the ``templates.json`` of each of :func:`template_folders`."""
    found: dict[str, ShippedTemplate] = {}
    for folder in template_folders():
        for name, entry in json.loads((folder / INDEX).read_text(encoding="utf-8")).items():
            if name in found:
                raise ValueError(f"judge template {name!r} is shipped twice: in {found[name].path.parent} and {folder}")
            found[name] = ShippedTemplate(name, folder / f"{name}.txt", **entry)
    return found
