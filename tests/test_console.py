"""The console script: ``--help`` without torch, and a help text that matches the real parser."""

import re
import subprocess
import sys

import pytest

from lightning_edit.cli import EditCLI, build_cli, main
from lightning_edit.console import TOP_LEVEL_HELP


def option_strings(help_text: str) -> set[str]:
    """The option strings of a help text's ``options:`` section (its lines that start with a dash)."""
    section = help_text.split("options:", 1)[1].split("subcommands:", 1)[0]
    heads = [line.split("  ", 1)[0] for line in (line.strip() for line in section.splitlines()) if line[:1] == "-"]
    return {option for head in heads for option in re.findall(r"(?<![\w-])--?[a-z][a-z_]*", head)}


def test_help_imports_neither_torch_nor_lightning():
    probe = (
        "import sys; from lightning_edit.console import main; main(['--help']); "
        "print(sorted(name for name in ('torch', 'lightning', 'transformers', 'jsonargparse') if name in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == TOP_LEVEL_HELP + "[]\n"


def test_help_names_the_real_parsers_subcommands_and_options(capsys):
    with pytest.raises(SystemExit):
        build_cli(["--help"])
    real = capsys.readouterr().out
    subcommands = set(EditCLI.subcommands())
    usage = re.search(r"\{([a-z,]+)\}", TOP_LEVEL_HELP.splitlines()[0]).group(1)
    assert set(usage.split(",")) == subcommands
    listed = TOP_LEVEL_HELP.split("subcommands:", 1)[1].split()
    assert subcommands <= set(listed)
    assert option_strings(real) == {"-h", "--help", "-c", "--config", "--print_config"}
    assert option_strings(TOP_LEVEL_HELP) == option_strings(real) | {"--debug"}  # --debug: cli.main reads it


def test_other_command_lines_reach_the_cli(capsys):
    with pytest.raises(SystemExit) as stopped:
        main([])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith("(lightning-edit --help lists the options)")
