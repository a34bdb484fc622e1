"""The ``lightning-edit`` console script (and ``python -m lightning_edit``).

``lightning-edit --help`` is answered here, without importing torch or Lightning: building the real parser costs the
import of Lightning (which imports torch, ``torch._dynamo`` and all of torchmetrics), 8 to 11 s measured on a
2-core machine, to print four subcommand names. Every other command line, ``lightning-edit validate --help``
included (its options come from the editors' and benchmarks' signatures), goes to :func:`lightning_edit.cli.main`.
``tests/test_console.py`` checks that this text names the real parser's subcommands and top-level options.
"""

from __future__ import annotations

import sys

TOP_LEVEL_HELP = """\
usage: lightning-edit [-h] [-c CONFIG] [--print_config[=flags]] [--debug] {fit,validate,test,predict} ...

Knowledge editing of causal language models on the Lightning stack (LightningCLI).

  lightning-edit validate --config configs/quickstart.yaml
  lightning-edit validate --config configs/methods/rome.yaml --config configs/models/toy-gpt2.yaml \\
      --config configs/benchmarks/counterfact.yaml

options:
  -h, --help            Show this help message and exit; `lightning-edit <subcommand> --help` lists every option
                        of a subcommand (--model.help ROME and --data.help ZsRE those of one class).
  -c CONFIG, --config CONFIG
                        A YAML or JSON configuration file; repeat it to compose a method, a model preset and a
                        benchmark (merged left to right; flags after them override).
  --print_config[=flags]
                        Print the configuration after applying all other arguments and exit (flags: skip_default,
                        skip_unset).
  --debug               Print tracebacks instead of one-line errors (also LIGHTNING_EDIT_DEBUG=1).

subcommands:
  fit                   Train what trains (MEND's hypernetwork, the toy models), or apply a closed-form editor's
                        edits and export the edited model.
  validate              Edit the benchmark's cases under the editor's protocol and score them: results.json,
                        results.md, cases.jsonl and plots in the log directory, the table printed.
  test                  The same as validate, on the test dataloader.
  predict               Lightning's predict loop (no editor defines a predict step).
"""


def main(args: list[str] | None = None) -> None:
    """Print :data:`TOP_LEVEL_HELP` for ``-h`` or ``--help`` alone; run :func:`lightning_edit.cli.main` otherwise."""
    argv = sys.argv[1:] if args is None else args
    if argv in (["-h"], ["--help"]):
        print(TOP_LEVEL_HELP, end="")
        return
    from lightning_edit.cli import main as run_command

    run_command(args)
