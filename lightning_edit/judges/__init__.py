"""Judges: grade a generated answer against references, behind one interface, as a score kind.

A :class:`Judge` takes (question, references, prediction, optional context) and gives a :class:`Verdict` (score,
reason, raw output; a missing score when the verdict cannot be had); :meth:`Judge.judge` is batched and cached.
The judges: :class:`ExactMatchJudge` (SQuAD normalisation), :class:`SymbolicMathJudge` (sympy), and LLM judges with
an editable prompt template (``answer_correct`` unless one is named; :mod:`lightning_edit.judges.llm`),
:class:`OpenAIChatJudge` (an OpenAI-compatible endpoint) and :class:`LocalLMJudge` (a Hugging Face model).
:mod:`lightning_edit.judges.kind` makes a judge a score kind ("generate, then judge").

A config names a judge by a short name or a class path, with its arguments (jsonargparse's form)::

    {"class_path": "symbolic_math", "init_args": {"rel_tol": 0.001}}
    {"class_path": "openai_chat", "init_args": {"model": "deepseek-chat", "base_url": "https://api.deepseek.com",
                                                 "api_key_env": "DEEPSEEK_API_KEY", "template": "answer_correct"}}
    "exact_match"
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping
from typing import Any

from lightning_edit.errors import ConfigError
from lightning_edit.judges.base import Judge, JudgeInput, JudgeStats, Verdict
from lightning_edit.judges.exact_match import ContainsJudge, ExactMatchJudge, SameTextJudge
from lightning_edit.judges.llm import LLMJudge
from lightning_edit.judges.local_lm import LocalLMJudge
from lightning_edit.judges.openai_chat import OpenAIChatJudge
from lightning_edit.judges.symbolic_math import SymbolicMathJudge

#: short names a config may use instead of a class path
JUDGES: dict[str, type[Judge]] = {
    "exact_match": ExactMatchJudge,
    "contains": ContainsJudge,
    "same_text": SameTextJudge,
    "symbolic_math": SymbolicMathJudge,
    "openai_chat": OpenAIChatJudge,
    "local_lm": LocalLMJudge,
}


def one_judge(option: str, judge: Mapping[str, Any]) -> dict[str, Any]:
    """The spec (:func:`build_judge`) of a benchmark option that names one judge and its arguments,
    ``{name: {argument: value}}``; anything else is a one-line error naming ``option``."""
    if len(judge) != 1 or not isinstance(next(iter(judge.values())), Mapping):
        raise ConfigError(f"{option}={judge}: one judge and its arguments, e.g. {{'exact_match': {{}}}}")
    [(name, arguments)] = judge.items()
    return {"class_path": name, "init_args": dict(arguments)}


def with_template(spec: dict[str, Any], template: str) -> dict[str, Any]:
    """``spec`` (:func:`one_judge`'s) with ``template`` when its judge is an LLM judge that names none: how a benchmark
    gives its LLM judge its own template by default."""
    if "template" in spec["init_args"] or not issubclass(_judge_class(spec["class_path"]), LLMJudge):
        return spec
    return spec | {"init_args": spec["init_args"] | {"template": template}}


def build_judge(spec: str | Mapping[str, Any] | Judge) -> Judge:
    """The judge a config names: a short name of :data:`JUDGES` or a class path, alone or as
    ``{"class_path": ..., "init_args": {...}}``; a :class:`Judge` is returned as it is. Either way the judge is
    checked (:meth:`Judge.check`: its settings, its API key, its verdict cache), so that a benchmark whose kind holds it
    stops on a fault before any edit. Every fault is one line, a :class:`~lightning_edit.errors.ConfigError` that
    starts ``judge <name>:``."""
    if isinstance(spec, Judge):
        name = type(spec).__name__
        judge = spec
    else:
        if isinstance(spec, str):
            spec = {"class_path": spec}
        unknown = set(spec) - {"class_path", "init_args"}
        if unknown:
            raise ConfigError(f"a judge is given by class_path and init_args, not {sorted(unknown)}")
        name = spec["class_path"]
        arguments = dict(spec.get("init_args") or {})
        cls = _judge_class(name)
        accepted = inspect.signature(cls).parameters
        for argument in arguments:
            if argument not in accepted:
                raise ConfigError(f"judge {name}: unknown argument {argument!r}; it takes {sorted(accepted)}")
        try:
            judge = cls(**typed_arguments(cls, arguments))
        except ConfigError as error:
            raise ConfigError(f"judge {name}: {error}") from None
    try:
        judge.check()
    except ConfigError as error:
        raise ConfigError(f"judge {name}: {error}") from None
    return judge


def typed_arguments(cls: type[Judge], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` checked against the types of ``cls``'s signature and converted as the CLI converts its options
    (``"4"`` for an int is 4); a wrong type or a missing required argument is a one-line ConfigError naming it and
    the type given, never the value (it may be a secret)."""
    from jsonargparse import ArgumentError, ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, fail_untyped=False)
    try:
        parsed = parser.instantiate_classes(parser.parse_object(arguments))
    except ArgumentError as error:
        message = re.sub(r"\s*(Got|Given) value.*", "", " ".join(str(error).split()))
        message = message.replace("Parser key ", "argument ")
        named = re.search(r'key "(\w+)"', str(error))
        if named and named.group(1) in arguments:
            message += f" Got a {type(arguments[named.group(1)]).__name__}."
        raise ConfigError(message) from None
    return {argument: parsed[argument] for argument in arguments}


def _judge_class(path: str) -> type[Judge]:
    """The class of a short name or a class path."""
    if path in JUDGES:
        return JUDGES[path]
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name) if module else None
    except (ImportError, AttributeError):
        cls = None
    if cls is None:
        raise ConfigError(f"unknown judge {path!r}; known: {sorted(JUDGES)} or the class path of a Judge")
    if not (isinstance(cls, type) and issubclass(cls, Judge)):
        raise ConfigError(f"{path!r} is not a Judge")
    return cls


__all__ = [
    "JUDGES",
    "ContainsJudge",
    "ExactMatchJudge",
    "Judge",
    "JudgeInput",
    "JudgeStats",
    "LLMJudge",
    "LocalLMJudge",
    "OpenAIChatJudge",
    "SameTextJudge",
    "SymbolicMathJudge",
    "Verdict",
    "build_judge",
    "one_judge",
    "with_template",
]
