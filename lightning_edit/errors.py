"""User errors and secrets: what ``lightning-edit`` reports in one line, and what it never writes or prints.

A *user error* is a problem the user fixes in their input, not in the code: a benchmark file, a setting, a model
directory, a checkpoint, a corpus or a statistics cache. Every such error class derives from :class:`UserError`
(``DataFormatError``, ``ConfigError``, ``MENDCheckpointError``, ``ModelNotFoundError``, ...); its message says what is
wrong, where (file, record, field or option) and how to fix it. ``lightning-edit`` prints it as one line and exits
with status 1; ``--debug`` or ``LIGHTNING_EDIT_DEBUG=1`` shows the traceback instead. Any other exception is a bug
and keeps its traceback.

Weights: a torch file that torch's safe loader (``weights_only=True``) refuses, because it holds pickled Python
objects beyond tensors (or is no torch file), is never loaded another way; :func:`refused_weights` words the
message, which names the accepted formats instead of torch's advice to load it unsafely.

Secrets: a config value whose key looks like a secret (``api_key``, ``secret``, ``password``, ``access_token``,
``auth_token``, ...) is replaced by ``<redacted>`` (:func:`redact`) in every file a run writes and everything it logs,
and its value (:func:`secret_values`) is masked in every message printed (:func:`redact_text`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

#: config keys whose values are never written or logged (secrets belong in the environment)
SECRET_KEY = re.compile(r"(api_?key|secret|password|access_token|auth_token)$", re.IGNORECASE)
#: environment variables whose values are masked in printed messages
SECRET_ENV = re.compile(r"(API_?KEY|SECRET|PASSWORD|TOKEN)$", re.IGNORECASE)
REDACTED = "<redacted>"
DEBUG_ENV = "LIGHTNING_EDIT_DEBUG"


class UserError(Exception):
    """An error in the user's input that ``lightning-edit`` reports in one line (see the module docstring)."""

    exit_code = 1


class ConfigError(UserError, ValueError):
    """A setting out of range, or settings that contradict each other; names the option and the valid values."""


class Interrupted(UserError):
    """The run stopped at a safe point after a signal (SIGTERM); the message says what was saved and how to resume.

    ``lightning-edit`` exits with ``128 + signal`` (143 for SIGTERM).
    """

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.signum, self.exit_code = signum, 128 + signum


#: the weight files lightning-edit loads (models, LoRA adapters)
WEIGHT_FILES = "safetensors, or a torch file of plain tensors (a dict of tensors)"


def refused_weights(path: str | Path, error: Exception, accepted: str = WEIGHT_FILES) -> str:
    """The one line for a file that torch's ``weights_only`` loader refused (its ``pickle.UnpicklingError``): why,
    and the ``accepted`` files, never torch's advice to load it with ``weights_only=False``."""
    found = re.search(r"GLOBAL (\S+) (was not an allowed global|whose module \S+ is blocked)", str(error))
    why = (
        f"it holds pickled Python objects ({found.group(1)}) beyond tensors, which could run code when loaded"
        if found
        else "it is not a torch file of plain tensors (a corrupt file, or pickled Python objects that could run code)"
    )
    return f"{path}: refused: {why}; accepted: {accepted}"


_signals: list[int] = []  # the stop signals received by this process (request_stop)


def request_stop(signum: int, frame: Any = None) -> None:
    """Signal handler of ``lightning-edit``: long loops stop at their next safe point (:func:`stop_requested`)."""
    _signals.append(signum)


def stop_requested() -> int | None:
    """The first stop signal this process received, or None."""
    return _signals[0] if _signals else None


def user_error(error: BaseException) -> UserError | None:
    """The :class:`UserError` that caused ``error`` (itself, or one in its ``__cause__``/``__context__`` chain)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UserError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def redact(config: Any) -> Any:
    """``config`` with the value of every secret-looking key replaced by ``<redacted>``, at any depth."""
    if isinstance(config, dict):
        return {k: REDACTED if SECRET_KEY.search(str(k)) and v is not None else redact(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return type(config)(redact(item) for item in config)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return redact(dataclasses.asdict(config))
    return config


def secret_values(config: Any) -> set[str]:
    """The string values of the secret-looking keys of ``config``, at any depth."""
    found: set[str] = set()
    if isinstance(config, dict):
        for key, value in config.items():
            if SECRET_KEY.search(str(key)) and isinstance(value, (str, int)) and not isinstance(value, bool):
                found |= {str(value)} if len(str(value)) >= 4 else set()
            else:
                found |= secret_values(value)
    elif isinstance(config, (list, tuple)):
        for item in config:
            found |= secret_values(item)
    return found


def argv_secrets(argv: Iterable[str]) -> set[str]:
    """The secrets of a command line: values of options named like a secret (``--x.api_key v``), and the secrets
    of its ``--config`` files and of its inline YAML/JSON values."""
    argv, found = list(argv), set()
    for position, argument in enumerate(argv):
        name, equals, value = argument.partition("=")
        if not equals:
            value = argv[position + 1] if position + 1 < len(argv) else ""
        if name.startswith("--") and SECRET_KEY.search(name.rpartition(".")[2].lstrip("-")):
            found.add(value)
        elif name == "--config" and os.path.isfile(value):
            found |= secret_values(_yaml(Path(value).read_text(encoding="utf-8", errors="replace")))
        elif value.lstrip().startswith("{"):
            found |= secret_values(_yaml(value))
    return {value for value in found if len(value) >= 4}


def _yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def environment_secrets() -> set[str]:
    """The values of secret-looking environment variables (``WANDB_API_KEY``, ``OPENAI_API_KEY``, ``HF_TOKEN``...)."""
    return {value for name, value in os.environ.items() if SECRET_ENV.search(name) and len(value) >= 4}


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``<redacted>`` (longest first)."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
