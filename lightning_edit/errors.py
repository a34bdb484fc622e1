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

Secrets: a config field that holds a secret (:func:`secret_field`: a key such as ``api_key``, ``token``,
``hf_token``, ``private_key``, ``credentials``, ``password`` or ``secret``, or a key pasted into an ``*_env`` option
that should name an environment variable) is replaced by ``<redacted>`` (:func:`redact`) in every file a run writes
(config.yaml, hparams.yaml, results.json, the loggers' files). Its value, the values of secret-looking environment
variables and the keys judges read (:func:`add_secrets`) are masked (:func:`mask`) in everything the process prints
or logs (:func:`mask_output`: warnings, log records, tracebacks, ``--print_config``) and in every reply a judge
stores.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import yaml

#: config keys whose values are never written or logged (secrets belong in the environment)
SECRET_KEY = re.compile(
    r"(^|_)(api_?key|secret|secret_?key|password|passwd|private_?key|credentials?|token)$", re.IGNORECASE
)
#: keys that end like a secret's but name a token of the text (editor, benchmark and tokenizer settings)
TEXT_TOKEN_KEYS = frozenset(
    {"fact_token", "new_tokens_per_answer_token", "per_expected_token"}
    | {f"{name}_token" for name in ("bos", "eos", "pad", "unk", "sep", "cls", "mask")}
)
#: environment variables whose values are masked in printed messages
SECRET_ENV = re.compile(r"(^|_)(KEY|SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIALS?)$", re.IGNORECASE)
#: what an ``*_env`` option holds: the name of an environment variable (anything else may be a key pasted there)
VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
REDACTED = "<redacted>"
DEBUG_ENV = "LIGHTNING_EDIT_DEBUG"


class UserError(Exception):
    """An error in the user's input that ``lightning-edit`` reports in one line (see the module docstring)."""

    exit_code = 1


class ConfigError(UserError, ValueError):
    """A setting out of range, or settings that contradict each other; names the option and the valid values."""


class DataFormatError(UserError, ValueError):
    """A benchmark file that does not have the expected format; names the file, record and field."""

    def __init__(self, path: str | Path, message: str, index: int | None = None, field: str | None = None):
        where = str(path)
        if index is not None:
            where += f": record {index}"
        if field is not None:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.index, self.field = str(path), index, field


class Interrupted(UserError):
    """The run stopped at a safe point after a signal (SIGTERM); the message says what was saved and how to resume.

    ``lightning-edit`` exits with ``128 + signal`` (143 for SIGTERM).
    """

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.signum, self.exit_code = signum, 128 + signum


def require(valid: bool, setting: str, value: Any, meaning: str) -> None:
    """One line, ``<setting>=<value>: <meaning>`` (a :class:`ConfigError`), unless ``valid``: how editors and judges
    check their settings when they are made."""
    if not valid:
        raise ConfigError(f"{setting}={value!r}: {meaning}")


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


def secret_field(key: Any, value: Any) -> bool:
    """Whether the config field ``key: value`` holds a secret: a secret-looking key (:data:`SECRET_KEY`, not one of
    :data:`TEXT_TOKEN_KEYS`) with a value, or an ``*_env`` key whose value is no environment variable's name
    (:data:`VARIABLE_NAME`) and so may be the key itself."""
    key = str(key).rpartition(".")[2].lstrip("-").lower()
    if value is None or isinstance(value, bool):
        return False
    if key.endswith("_env"):
        return isinstance(value, str) and VARIABLE_NAME.fullmatch(value) is None
    return SECRET_KEY.search(key) is not None and key not in TEXT_TOKEN_KEYS


def redact(config: Any) -> Any:
    """``config`` with the value of every secret field (:func:`secret_field`) replaced by ``<redacted>``, at any
    depth."""
    if isinstance(config, dict):
        return {k: REDACTED if secret_field(k, v) else redact(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return type(config)(redact(item) for item in config)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return redact(dataclasses.asdict(config))
    return config


def secret_values(config: Any) -> set[str]:
    """The values of the secret fields of ``config`` (:func:`secret_field`), at any depth, as text."""
    found: set[str] = set()
    if isinstance(config, dict):
        for key, value in config.items():
            if secret_field(key, value) and isinstance(value, (str, int, float)):
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
        if name.startswith("--") and secret_field(name, value):
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
    """The values of secret-looking environment variables (``WANDB_API_KEY``, ``OPENAI_API_KEY``, ``HF_TOKEN``...)
    of 8 characters or more (a shorter value would mask ordinary words)."""
    return {value for name, value in os.environ.items() if SECRET_ENV.search(name) and len(value) >= 8}


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``<redacted>`` (longest first)."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


_secrets: set[str] = set()  # the secrets this process knows of besides the environment's (add_secrets)


def add_secrets(values: Iterable[str]) -> None:
    """Mask ``values`` (of 4 characters or more) in everything this process prints, logs or stores from now on:
    the secrets of the command line, and each API key a judge reads from a variable of any name."""
    _secrets.update(value for value in values if len(value) >= 4)


def mask(text: str) -> str:
    """``text`` with every known secret (:func:`add_secrets`, :func:`environment_secrets`) masked."""
    return redact_text(text, _secrets | environment_secrets())


class MaskingFilter(logging.Filter):
    """Masks the secrets in a log record's message (its arguments merged into it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class MaskingStream:
    """A text stream that masks the secrets in what is written to it, and is the wrapped stream in all else."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(mask(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def mask_output() -> None:
    """From now on, mask the secrets in everything this process prints (``sys.stdout``, ``sys.stderr``: warnings,
    tracebacks, ``--print_config``, and the console copies that loggers such as W&B keep) and in every log record
    (the handlers that hold a stream of their own)."""
    if not isinstance(sys.stdout, MaskingStream):
        sys.stdout, sys.stderr = MaskingStream(sys.stdout), MaskingStream(sys.stderr)
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in logging.root.manager.loggerDict)]
    handlers = {handler for logger in loggers for handler in logger.handlers}
    for handler in handlers | ({logging.lastResort} if logging.lastResort else set()):
        if not any(isinstance(f, MaskingFilter) for f in handler.filters):
            handler.addFilter(MaskingFilter())
