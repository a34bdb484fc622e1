"""The ``lightning-edit`` command: LightningCLI over every editor and every benchmark.

    lightning-edit validate --model NoEdit --model.lm.path builtin:models/tiny-gpt2 \\
        --data CounterFact --data.path builtin:data/counterfact-flat.json --data.limit 50
    lightning-edit validate --config configs/methods/rome.yaml --config configs/models/tiny-gpt2.yaml \\
        --config configs/benchmarks/counterfact.yaml --model.stats.corpus <corpus>
    # the same run unedited: switch the class; NoEdit keeps the arguments it accepts (lm, protocol, scoring)
    lightning-edit validate --config ... --model NoEdit

Config files merge left to right (method, then model preset, then benchmark); flags after them override.
After ``validate`` (or ``test``) the run writes ``results.json``, ``results.md``, ``cases.jsonl`` and its plots to the
trainer's log directory, sends them to the logger and prints the table (:mod:`lightning_edit.report`).
"""

from __future__ import annotations

import sys

import yaml
from jsonargparse import ArgumentParser
from lightning import LightningDataModule, LightningModule
from lightning.pytorch.cli import ArgsType, LightningCLI

import lightning_edit.data  # noqa: F401  (registers the benchmarks for short names)
import lightning_edit.editors  # noqa: F401  (registers the editors for short names)
import lightning_edit.toy  # noqa: F401  (ToyCorpus, CausalLMPretraining, ToyEditTraining)
from lightning_edit.presets import compose_presets
from lightning_edit.report import RunReport


class EditCLI(LightningCLI):
    """LightningCLI that reports the metrics of a validate or test run (:class:`~lightning_edit.report.RunReport`)
    and lets model presets compose with every editor (:mod:`lightning_edit.presets`)."""

    def parse_arguments(self, parser: ArgumentParser, args: ArgsType) -> None:
        if args is None or isinstance(args, list):
            args = compose_presets(sys.argv[1:] if args is None else args)
        super().parse_arguments(parser, args)

    def before_validate(self) -> None:
        self._add_report()

    def before_test(self) -> None:
        self._add_report()

    def _add_report(self) -> None:
        config = yaml.safe_load(self._parser(self.subcommand).dump(self.config[self.subcommand], skip_none=False))
        self.trainer.callbacks.append(RunReport(config))


def build_cli(args: ArgsType = None, run: bool = True) -> EditCLI:
    """Parse ``args`` (or the command line), run the subcommand and return the CLI object (for tests, notebooks).

    With ``run=False``, ``args`` has no subcommand and nothing runs:
    ``build_cli(["--config", "configs/quickstart.yaml"], run=False).model`` is the editor that config describes.
    """
    return EditCLI(
        LightningModule,  # editors (EditorModule) and trainable modules (toy pretraining, MEND)
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"inference_mode": False, "enable_checkpointing": False},
        auto_configure_optimizers=False,
        args=args,
        run=run,
    )


def main(args: ArgsType = None) -> None:
    """The console script ``lightning-edit``."""
    build_cli(args)
