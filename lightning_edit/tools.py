"""What the benchmark scripts and the ``python -m`` tools share with ``lightning-edit``: one-line errors, progress bars.

Every script in ``benchmarks/`` and every module with a ``__main__`` block parses with :class:`ArgumentParser`,
counts with :func:`positive_int` (or :func:`non_negative_int`), offers fixed values with ``choices`` and ends with
``tools.run(main)``::

    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--edits", type=tools.positive_int, default=1000)
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS)

    if __name__ == "__main__":
        tools.run(main)

So, as ``lightning-edit`` does (:func:`lightning_edit.cli.main`), a rejected option is one line naming it, exit
status 2 (argparse's own ``error`` prints the whole usage first, where every ``choices`` value is listed); a
:class:`~lightning_edit.errors.UserError`, or a failed child process, is one line, exit status 1 (the error's own
status); ``LIGHTNING_EDIT_DEBUG=1`` shows tracebacks. A tool checks its arguments, and that it can write its output
(:func:`output`), before any model is loaded. Long loops show a tqdm bar on stderr (:func:`progress`).

This module imports neither torch nor Lightning: a bad option fails before they load.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

from lightning_edit.errors import DEBUG_ENV, ConfigError, user_error
from lightning_edit.redaction import mask
from lightning_edit.stopping import request_stop

T = TypeVar("T")


def tool_name() -> str:
    """How the running tool is called: ``python -m <module>`` or the script's file name."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return f"python -m {spec.name}" if spec is not None else Path(sys.argv[0]).name


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line: ``<tool>: error: <message> (<tool> --help lists the options)``.

    The description keeps its line breaks (module docstrings with command examples)."""

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("prog", tool_name())
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        fail(f"{message} ({self.prog} --help lists the options)", 2)


def positive_int(text: str) -> int:
    """argparse type of a count: an integer of at least 1."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type of an offset or an optional count: an integer of at least 0."""
    return _int_at_least(text, 0, "an integer of at least 0")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def progress(items: Iterable[T], description: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """``items`` with a tqdm progress bar on stderr (as the editing protocols and the statistics pass show)."""
    from tqdm.auto import tqdm

    return iter(tqdm(items, desc=description, total=total, unit=unit))


@contextlib.contextmanager
def output(path: Path, option: str) -> Iterator[TextIO]:
    """A UTF-8 text file that replaces ``path`` when the block ends without error (a temporary file beside it until
    then, removed on error). Opened on entry: a ``path`` that cannot be written fails before any work, in one line
    naming ``option`` (a :class:`~lightning_edit.errors.ConfigError`)."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = partial.open("w", encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{option} {str(path)!r}: cannot write there ({error.strerror or error})") from None
    try:
        with handle:
            yield handle
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def fail(message: str, status: int = 1) -> None:
    """Print ``<tool>: error: <message>`` (secrets masked) on stderr and exit with ``status``."""
    close_progress_bars()
    print(f"{tool_name()}: error: {mask(message)}", file=sys.stderr)
    raise SystemExit(status)


def close_progress_bars() -> None:
    """Close every tqdm bar still open (a run that stopped or failed inside its loop), which ends the bar's line: an
    error line printed next starts a line of its own. tqdm keeps its open bars in ``tqdm._instances``."""
    std = sys.modules.get("tqdm.std")  # not imported: no bar was ever opened
    for bar in list(getattr(getattr(std, "tqdm", None), "_instances", ())):
        bar.close()  # tqdm itself ignores a closed file (tqdm.utils.DisableOnWriteError)


def one_line(message: str) -> str:
    """jsonargparse's message of a rejected option in one line, without its dump of every Union alternative (as
    ``lightning-edit`` and the tools print it)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if "Errors:" in lines and any(line.startswith("Given value type:") for line in lines):
        start = lines.index("Errors:") + 1
        end = next(i for i, line in enumerate(lines) if line.startswith("Given value type:"))
        lines = lines[:1] + [line for line in lines[start:end] if "Expected a <class 'NoneType'>" not in line]
    return " ".join(line.removeprefix("- ") for line in lines)


def run(main: Callable[[], object]) -> None:
    """Run a tool's ``main`` with one-line errors (module docstring); tracebacks only for bugs or under debug. SIGTERM
    stops its long steps at their next safe point (:mod:`lightning_edit.stopping`), exit status 143."""
    signal.signal(signal.SIGTERM, request_stop)
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        main()
        return
    try:
        main()
    except argparse.ArgumentError as error:  # a rejected option of an in-process `lightning-edit` run
        fail(one_line(str(error)), 2)
    except subprocess.CalledProcessError as error:  # the child printed its own error
        command = error.cmd if isinstance(error.cmd, str) else " ".join(map(str, error.cmd))
        fail(f"a child process failed with exit status {error.returncode}: {command}", 1)
    except Exception as error:
        found = user_error(error)
        if found is None:
            raise
        fail(str(found), found.exit_code)
