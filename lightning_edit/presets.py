"""Model presets compose with every editor: each editor takes from a preset what it accepts.

A model preset (``configs/models/<model>.yaml``) describes one model for every editor: ``lm``, the ``sites`` of each
editor, and the values only some editors read (``target`` of the locate-then-edit family; the toy presets also set
``fact_token``, ``template_lengths`` and ``stats``). A preset is a config file whose ``model`` has ``init_args`` and
no ``class_path``. Before the command line is parsed, :func:`compose_presets` drops from each preset the top-level
arguments that the selected editor (the last ``class_path`` or ``--model`` given) does not accept, and logs which,
so ``--config configs/methods/ft.yaml --config configs/models/llama-3-8b.yaml`` works although FT has no ``target``.
Only preset files are filtered: an argument given in a method config or as a flag is still checked strictly.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from pathlib import Path
from typing import Any

import yaml
from lightning import LightningModule

log = logging.getLogger(__name__)


def compose_presets(args: list[str]) -> list[str]:
    """``args`` with every model preset given by ``--config`` reduced to what the selected editor accepts."""
    args = [part for arg in args for part in (arg.split("=", 1) if arg.startswith("--config=") else [arg])]
    configs = _config_positions(args)
    loaded = {position: _load(args[position]) for position in configs}
    editor = _selected_class(args, configs, loaded)
    if editor is None:
        return args
    accepted = accepted_arguments(editor)
    composed = list(args)
    for position in configs:
        config = loaded[position]
        if not _is_preset(config):
            continue
        init_args = config["model"]["init_args"]
        unused = [name for name in init_args if name not in accepted]
        if not unused:
            continue
        log.info("%s: %s takes none of %s (the preset's other values apply)", args[position], editor.__name__, unused)
        config["model"]["init_args"] = {name: value for name, value in init_args.items() if name in accepted}
        composed[position] = yaml.safe_dump(config, sort_keys=False)
    return composed


def accepted_arguments(cls: type) -> set[str]:
    """The keyword arguments ``cls(...)`` accepts, following ``**kwargs`` up the base classes."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def _config_positions(args: list[str]) -> list[int]:
    """Indices in ``args`` of the values of ``--config X``."""
    positions = []
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            positions.append(i + 1)
    return positions


def _load(value: str) -> Any:
    path = Path(value)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return None  # jsonargparse reports it


def _is_preset(config: Any) -> bool:
    model = config.get("model") if isinstance(config, dict) else None
    return isinstance(model, dict) and "class_path" not in model and isinstance(model.get("init_args"), dict)


def _selected_class(args: list[str], configs: list[int], loaded: dict[int, Any]) -> type | None:
    """The editor class the command selects: the last ``model.class_path`` of a config or ``--model`` flag."""
    name = None
    for i, arg in enumerate(args):
        if i in loaded:
            model = loaded[i].get("model") if isinstance(loaded[i], dict) else None
            if isinstance(model, dict) and "class_path" in model:
                name = model["class_path"]
            elif isinstance(model, str):
                name = model
        elif arg in ("--model", "--model.class_path") and i + 1 < len(args):
            name = args[i + 1]
        elif arg.startswith(("--model=", "--model.class_path=")):
            name = arg.split("=", 1)[1]
    return None if name is None else _resolve(name)


def _resolve(name: str) -> type | None:
    """The LightningModule class named by a class path or a short name (None if unknown)."""
    if "." in name:
        module, _, attribute = name.rpartition(".")
        try:
            return getattr(importlib.import_module(module), attribute, None)
        except ImportError:
            return None
    pending = [LightningModule]
    seen = set()
    while pending:
        cls = pending.pop()
        if cls.__name__ == name:
            return cls
        for subclass in cls.__subclasses__():
            if subclass not in seen:
                seen.add(subclass)
                pending.append(subclass)
    return None
