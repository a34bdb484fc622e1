"""Sphinx extension of the lightning-edit site: the CLI's help text, made at build time, and a complete API reference.

- ``lightning-edit-help``: a literal block of what ``lightning-edit <arguments>`` prints, from the real parser built
  in-process as the console script builds it (:func:`lightning_edit.cli.build_cli`), so cli.md never goes stale.
- Every module of the package must be documented by an ``automodule`` (api.md): a module that is not is a warning
  (an error under ``-W``).
"""

from __future__ import annotations

import contextlib
import io
import os
import pkgutil
import sys

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

#: the width of the help text (argparse wraps to ``$COLUMNS``), narrow enough for the theme's code blocks
HELP_COLUMNS = 100
#: modules with no API to document: ``python -m lightning_edit`` (importing it runs the command)
UNDOCUMENTED = {"lightning_edit.__main__"}


def help_text(arguments: list[str]) -> str:
    """What ``lightning-edit <arguments>`` prints to stdout, which must exit with status 0 (``--help``,
    ``--model.help ROME``). ``--help`` alone is the console script's own text, answered without the parser."""
    from lightning_edit.console import TOP_LEVEL_HELP

    if arguments in (["-h"], ["--help"]):
        return TOP_LEVEL_HELP
    from lightning_edit.cli import build_cli

    printed = io.StringIO()
    argv, columns = sys.argv, os.environ.get("COLUMNS")
    sys.argv = ["lightning-edit", *arguments]  # the program name in "usage:"
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            build_cli(arguments, exit_on_error=False)
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise RuntimeError(f"exit status {stop.code}") from None
    else:
        raise RuntimeError("it ran instead of printing help and exiting")
    finally:
        sys.argv = argv
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return printed.getvalue()


class HelpDirective(SphinxDirective):
    """``lightning-edit-help`` with the command's arguments, e.g. ``validate --help``."""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        arguments = self.arguments[0].split()
        try:
            text = help_text(arguments)
        except Exception as error:
            logger.warning(
                "lightning-edit %s: %s", " ".join(arguments), error, location=self.get_location(), type="lightning_edit"
            )
            return []
        block = nodes.literal_block(text, text.rstrip("\n"))
        block["language"] = "text"
        return [block]


def check_api_complete(app: Sphinx, env: BuildEnvironment) -> None:
    """Warn about every module of the package that no ``automodule`` documents (when the API page is built)."""
    if "api" not in env.found_docs:
        return
    import lightning_edit

    modules = {"lightning_edit"} | {
        found.name for found in pkgutil.walk_packages(lightning_edit.__path__, "lightning_edit.")
    }
    documented = set(env.get_domain("py").modules)
    for module in sorted(modules - documented - UNDOCUMENTED):
        logger.warning("api.md documents no module %s", module, location="api", type="lightning_edit")


def setup(app: Sphinx) -> dict[str, bool]:
    app.add_directive("lightning-edit-help", HelpDirective)
    app.connect("env-check-consistency", check_api_complete)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
