"""User errors: what ``lightning-edit`` reports in one line.

A *user error* is a problem the user fixes in their input, not in the code: a benchmark file, a setting, a model
directory, a checkpoint, a corpus or a statistics cache. Every such error class derives from :class:`UserError`
(``DataFormatError``, ``ConfigError``, ``MENDCheckpointError``, ``ModelNotFoundError``, ...); its message says what is
wrong, where (file, record, field or option) and how to fix it. ``lightning-edit`` prints it as one line and exits
with status 1; ``--debug`` or ``LIGHTNING_EDIT_DEBUG=1`` shows the traceback instead. Any other exception is a bug
and keeps its traceback.

Weights: a torch file that torch's safe loader (``weights_only=True``) refuses, because it holds pickled Python
objects beyond tensors (or is no torch file), is never loaded another way; :func:`refused_weights` words the
message, which names the accepted formats instead of torch's advice to load it unsafely.

Stop signals: :mod:`lightning_edit.stopping`; what is never written or printed: :mod:`lightning_edit.redaction`.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

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
        self.path = str(path)
        self.index = index
        self.field = field


class Interrupted(UserError):
    """The run stopped at a safe point after a signal (SIGTERM); the message says what was saved and how to resume.

    ``lightning-edit`` exits with ``128 + signal`` (143 for SIGTERM).
    """

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


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


def user_error(error: BaseException) -> UserError | None:
    """The :class:`UserError` that caused ``error`` (itself, or one in its ``__cause__``/``__context__`` chain)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UserError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
