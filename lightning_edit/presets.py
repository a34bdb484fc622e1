"""Model presets compose with every editor: the selected editor takes the preset's sections of its own classes.

A model preset (``configs/models/<model>.yaml``) describes one model for every editor. ``model.init_args`` holds
what every editor takes (``lm``); ``model.editors`` holds one section per editor class, each with that class's own
arguments (peft's way: every method owns its sites and hyper-parameters)::

    model:
      init_args:
        lm: {path: gpt2-xl, dtype: float32}
      editors:
        LocateThenEdit: {target: {v_num_grad_steps: 25}}   # ROME, MEMIT and AlphaEdit
        ROME: {layer: 17}
        MEMIT: {layers: [13, 14, 15, 16, 17], mom2_update_weight: 20000.0}
        FT: {layers: [0]}

A preset is a config file whose ``model`` has ``editors`` and no ``class_path``. Before the command line is parsed,
:func:`compose_presets` merges into its ``init_args`` the sections of the classes of the selected editor (the last
``class_path`` or ``--model`` given), base classes first, so a subclass's section overrides its base's (AlphaEdit,
a MEMIT, takes MEMIT's section unless it has its own), and drops ``editors``; jsonargparse then checks every value
strictly. So ``--config configs/methods/ft.yaml --config configs/models/llama-3-8b.yaml`` gives FT the preset's
``lm`` and its ``FT`` section. A section named after a class that is not an editor, or an argument its class does
not take, is a :class:`~lightning_edit.errors.ConfigError` naming the file and key.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import yaml
from lightning import LightningModule

from lightning_edit.editors import EditorModule
from lightning_edit.errors import ConfigError


def compose_presets(args: list[str]) -> list[str]:
    """``args`` with every model preset given by ``--config`` replaced by the ``init_args`` of the selected editor."""
    args = [part for arg in args for part in (arg.split("=", 1) if arg.startswith("--config=") else [arg])]
    configs = _config_positions(args)
    loaded = {position: _load(args[position]) for position in configs}
    editor = _selected_class(args, configs, loaded)
    composed = list(args)
    for position in configs:
        config = loaded[position]
        if not _is_preset(config):
            continue
        _check(config["model"], args[position])
        config["model"]["init_args"] = editor_arguments(config, editor)
        del config["model"]["editors"]
        composed[position] = yaml.safe_dump(config, sort_keys=False)
    return composed


def editor_arguments(preset: dict[str, Any], editor: type | None) -> dict[str, Any]:
    """What a preset (its loaded YAML) gives ``editor``: ``model.init_args`` with the ``model.editors`` sections of
    the editor's classes merged in, base classes first."""
    arguments = preset["model"].get("init_args") or {}
    sections = preset["model"].get("editors") or {}
    for klass in reversed(editor.__mro__ if editor is not None else ()):
        arguments = _merged(arguments, sections.get(klass.__name__, {}))
    return arguments


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
    return isinstance(model, dict) and "class_path" not in model and "editors" in model


def _check(model: dict[str, Any], path: str) -> None:
    """A preset's ``model``, checked: ``init_args`` a mapping; ``editors`` a mapping from editor class names to
    sections that set arguments of that class."""
    if not isinstance(model.get("init_args") or {}, dict):
        raise ConfigError(f"{path}: model.init_args must map arguments to values, not {model['init_args']!r}")
    editors = model["editors"]
    if not isinstance(editors, dict):
        raise ConfigError(f"{path}: model.editors must map editor classes to their arguments, not {editors!r}")
    classes = _subclasses(EditorModule)  # base classes too, such as LocateThenEdit
    for name, section in editors.items():
        key = f"{path}: model.editors.{name}"
        if name not in classes:
            raise ConfigError(f"{key}: not an editor class (editors: {', '.join(sorted(classes))})")
        if not isinstance(section, dict):
            raise ConfigError(f"{key} must map {name}'s arguments to their values, not {section!r}")
        unknown = sorted(str(argument) for argument in section if argument not in accepted_arguments(classes[name]))
        if unknown:
            raise ConfigError(f"{key}: {name} takes no argument {', '.join(unknown)}")


def _subclasses(base: type) -> dict[str, type]:
    """``base`` and every class imported so far that derives from it, by name."""
    classes = {}
    pending = [base]
    while pending:
        cls = pending.pop()
        if cls.__name__ not in classes:
            classes[cls.__name__] = cls
            pending.extend(cls.__subclasses__())
    return classes


def _merged(base: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``section``, nested mappings merged key by key (as jsonargparse merges configs)."""
    merged = dict(base)
    for key, value in section.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = _merged(merged[key], value)
        merged[key] = value
    return merged


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
    return _subclasses(LightningModule).get(name)
