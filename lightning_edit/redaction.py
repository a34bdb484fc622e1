"""Secrets: what ``lightning-edit`` never writes or prints.

By one rule for names and values, a config field named like a secret (:func:`secret_name`, in any spelling: ``api_key``,
``apiKey``, ``X-Api-Key``, ``aws_secret_access_key``, ``Authorization``, ``passphrase``, ``cookie``,
``session_token``..., but not a text token such as ``fact_token``), and a key pasted into an ``*_env`` option that
should name an environment variable, is replaced by ``<redacted>`` (:func:`redact`); so is every credential inside any
other value, whatever its field's name (:func:`credentials`: the user info of a URL, ``http://<redacted>@host/v1``; a
``Bearer``/``Basic`` credential; keys of well-known prefixes such as ``sk-``, ``hf_``, ``ghp_``, ``AKIA``; a
``password=`` parameter), in every file a run writes (config.yaml, hparams.yaml, results.json, the loggers' files).
Those secrets, the values of secret-looking environment variables and the keys judges read (:func:`add_secrets`) are
masked (:func:`mask`), with every credential the patterns find, in everything the process prints or logs
(:func:`mask_output`: warnings, log records, tracebacks, ``--print_config``) and in every reply a judge stores. The scan
of the command line (:func:`argv_secrets`) refuses, in one line, a ``--config`` file that is not UTF-8 or nests deeper
than any config.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import yaml

from lightning_edit.errors import ConfigError

#: how the name of a field that holds a secret ends, in snake case (:func:`secret_name`: ``X-Api-Key``, ``apiKey``,
#: ``aws_secret_access_key``, ``clientSecret``, ``Authorization``, ``session_token``, ``passphrase``, ``cookie``...)
SECRET_KEY = re.compile(
    r"(^|_)(secret|password|passwd|passphrase|credentials?|creds|token|auth|authorization|bearer|cookies?|sessionid"
    r"|webhook(_?url)?|(api|access|secret|private|client|auth|session|signing|encryption|master|account|ssh|license"
    r"|subscription)_?key)$"
)
#: keys that end like a secret's but name a token of the text (editor, benchmark and tokenizer settings)
TEXT_TOKEN_KEYS = frozenset(
    {"fact_token", "new_tokens_per_answer_token", "per_expected_token"}
    | {f"{name}_token" for name in ("bos", "eos", "pad", "unk", "sep", "cls", "mask")}
)
#: credentials in text, whatever field holds it (group 1 is the secret): the user info of a URL
#: (``http://<redacted>@host/v1``), a ``Bearer``/``Basic`` credential (8 characters or more, with a digit or 16 or
#: more: not a word of prose), keys of well-known prefixes, and PEM private keys
CREDENTIALS = (
    re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://([^/?#\s\"'`<>\\]+)@"),
    re.compile(r"\b(?:[Bb]earer|Basic)\s+((?=[\w.~+/-]*\d|[\w.~+/-]{16})[\w.~+/-]{8,}=*)"),
    re.compile(
        r"\b(sk-[\w-]{20,}|hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,}|glpat-[\w-]{20,}"
        r"|xox[abposr]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}\b|AIza[\w-]{35}|eyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]*)"
    ),
    re.compile(r"(-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z))"),
)
#: ``name=value`` in a URL's query, a connection string or a message; its value is a secret when the field is
PARAMETER = re.compile(r"(?<![\w.])([A-Za-z][\w.-]*)=([^&;,\s#'\"`<>]+)")
#: environment variables whose values are masked in printed messages (besides those named like a secret field)
SECRET_ENV = re.compile(r"(^|_)(KEY|SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIALS?)$", re.IGNORECASE)
#: how deep a config file or inline value may nest (deeper is no config; the YAML reader and the scan recurse)
MAX_DEPTH = 100
#: how many values a config file or inline value may hold (YAML aliases of aliases expand exponentially)
MAX_VALUES = 1_000_000
#: what an ``*_env`` option holds: the name of an environment variable (anything else may be a key pasted there)
VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
REDACTED = "<redacted>"


def secret_name(key: Any) -> bool:
    """Whether a field (or environment variable) named ``key`` holds a secret: its last dotted part, in snake case,
    ends like :data:`SECRET_KEY` and is none of :data:`TEXT_TOKEN_KEYS`. One rule for every spelling: ``api_key``,
    ``apiKey``, ``X-Api-Key`` and ``API_KEY`` alike."""
    key = str(key).rpartition(".")[2]
    key = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", key))
    key = re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")
    return SECRET_KEY.search(key) is not None and key not in TEXT_TOKEN_KEYS


def secret_field(key: Any, value: Any) -> bool:
    """Whether the config field ``key: value`` holds a secret as a whole: a secret's name (:func:`secret_name`)
    with a value, or an ``*_env`` key whose value is no environment variable's name (:data:`VARIABLE_NAME`) and so
    may be the key itself. A secret inside any other value is :func:`credentials`."""
    if value is None or isinstance(value, bool):
        return False
    if str(key).lower().endswith("_env"):
        return isinstance(value, str) and VARIABLE_NAME.fullmatch(value) is None
    return secret_name(key)


def _credential_spans(text: str) -> list[tuple[int, int]]:
    spans = [match.span(1) for pattern in CREDENTIALS for match in pattern.finditer(text)]
    spans += [match.span(2) for match in PARAMETER.finditer(text) if secret_field(match[1], match[2])]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def credentials(text: str) -> set[str]:
    """The credentials in ``text`` (:data:`CREDENTIALS`, the values of secret ``name=value`` parameters), and the
    password of each URL's user info on its own."""
    found = {text[start:end] for start, end in _credential_spans(text)}
    return found | {secret.partition(":")[2] for secret in found if ":" in secret}


def redact_credentials(text: str) -> str:
    """``text`` with each of its :func:`credentials` replaced by ``<redacted>``: ``http://<redacted>@host/v1``."""
    for start, end in reversed(_credential_spans(text)):
        text = text[:start] + REDACTED + text[end:]
    return text


def redact(config: Any) -> Any:
    """``config`` with the value of every secret field (:func:`secret_field`) replaced by ``<redacted>``, and the
    credentials in every other text (:func:`redact_credentials`), at any depth."""
    if isinstance(config, dict):
        return {k: REDACTED if secret_field(k, v) else redact(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return type(config)(redact(item) for item in config)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return redact(dataclasses.asdict(config))
    return redact_credentials(config) if isinstance(config, str) else config


def secret_values(config: Any) -> set[str]:
    """The secrets in ``config`` as text, at any depth: every value under a secret field (:func:`secret_field`)
    and the :func:`credentials` in any other text; of 4 characters or more."""
    found: set[str] = set()
    if isinstance(config, dict):
        for key, value in config.items():
            found |= _leaves(value) if secret_field(key, value) else secret_values(value)
    elif isinstance(config, (list, tuple)):
        for item in config:
            found |= secret_values(item)
    elif isinstance(config, str):
        found = credentials(config)
    return {value for value in found if len(value) >= 4}


def _leaves(value: Any) -> set[str]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return set().union(*(_leaves(item) for item in value))
    return {str(value)} if isinstance(value, (str, int, float)) and not isinstance(value, bool) else set()


def argv_secrets(argv: Iterable[str]) -> set[str]:
    """The secrets of a command line: values of options named like a secret (``--x.api_key v``), the credentials
    in any value, and the secrets of its ``--config`` files and of its inline YAML/JSON values (``{...}``,
    ``[...]``). A config file that is not UTF-8, or nests deeper than any config (:data:`MAX_DEPTH`), is a
    :class:`ConfigError` naming it: the scan runs before the parser, which would fail on it with a traceback."""
    argv, found = list(argv), set()
    for position, argument in enumerate(argv):
        name, equals, value = argument.partition("=")
        if not equals:
            value = argv[position + 1] if position + 1 < len(argv) else ""
        if name.startswith("--") and secret_field(name, value):
            found.add(value)
        elif name == "--config" and os.path.isfile(value):
            found |= secret_values(_yaml(_utf8(value), value))
        elif value.lstrip().startswith(("{", "[")):
            found |= secret_values(_yaml(value, name))
        found |= credentials(argument)
    return {value for value in found if len(value) >= 4}


def _utf8(path: str) -> str:
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError:
        return ""  # the parser reports it
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start}): save it as UTF-8"
        ) from None


def _yaml(text: str, where: str) -> Any:
    """The YAML ``text`` of ``where`` (a file or an option), None if it is no YAML (the parser reports it)."""
    too_deep = ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep: no config nests so deep")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    except RecursionError:
        raise too_deep from None
    pending = [(config, 1)]
    count = 0
    while pending:  # every container once per path to it: cycles and aliases of aliases end at the limits
        value, depth = pending.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(f"{where}: more than {MAX_VALUES:,} values (YAML aliases that repeat each other?)")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if children and depth > MAX_DEPTH:
            raise too_deep
        pending.extend((child, depth + 1) for child in children)
    return config


def environment_secrets() -> set[str]:
    """The values of secret-looking environment variables (``WANDB_API_KEY``, ``OPENAI_API_KEY``, ``HF_TOKEN``,
    ``AWS_SECRET_ACCESS_KEY``...: :data:`SECRET_ENV` or :func:`secret_name`) of 8 characters or more (a shorter value
    would mask ordinary words)."""
    return {
        value
        for name, value in os.environ.items()
        if (SECRET_ENV.search(name) or secret_name(name)) and len(value) >= 8
    }


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
    """``text`` with every known secret (:func:`add_secrets`, :func:`environment_secrets`) and every credential it
    holds (:func:`redact_credentials`) masked."""
    return redact_credentials(redact_text(text, _secrets | environment_secrets()))


class MaskingFilter(logging.Filter):
    """Masks the secrets in a log record's message (its arguments merged into it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg = masked
            record.args = None
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
