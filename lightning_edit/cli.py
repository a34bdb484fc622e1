"""The ``lightning-edit`` command: LightningCLI over every editor and every benchmark.

    lightning-edit validate --model NoEdit --model.lm.path builtin:models/tiny-gpt2 \\
        --data CounterFact --data.path builtin:data/counterfact-flat.json --data.limit 50
    lightning-edit validate --config configs/methods/rome.yaml --config configs/models/tiny-gpt2.yaml \\
        --config configs/benchmarks/counterfact.yaml --model.stats.corpus <corpus>
    # the same run unedited: switch the class; NoEdit keeps the arguments it accepts (lm, protocol, scoring)
    lightning-edit validate --config ... --model NoEdit

Config files merge left to right (method, then model preset, then benchmark); flags after them override.
After ``validate`` (or ``test``) the run writes ``results.json`` and ``results.md`` to the trainer's log directory
and prints the table.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from lightning import LightningDataModule, LightningModule
from lightning.pytorch.cli import ArgsType, LightningCLI
from lightning.pytorch.utilities import rank_zero_info

import lightning_edit.data  # noqa: F401  (registers the benchmarks for short names)
import lightning_edit.data.toy_corpus  # noqa: F401  (ToyCorpus, the pretraining corpus)
import lightning_edit.editors  # noqa: F401  (registers the editors for short names)
import lightning_edit.pretraining  # noqa: F401  (CausalLMPretraining)
from lightning_edit.data.base import EditDataModule
from lightning_edit.editors.base import EditorModule
from lightning_edit.results import markdown_table, write_results


class EditCLI(LightningCLI):
    """LightningCLI that reports the metrics of a validate or test run."""

    def after_validate(self) -> None:
        self._report()

    def after_test(self) -> None:
        self._report()

    def _report(self) -> None:
        if not (self.trainer.is_global_zero and isinstance(self.model, EditorModule)):
            return
        config = yaml.safe_load(self._parser(self.subcommand).dump(self.config[self.subcommand], skip_none=False))
        counts = {"cases": len(self.datamodule.cases), "skipped_records": self.datamodule.skipped}
        directory = Path(self.trainer.log_dir or self.trainer.default_root_dir)
        path = write_results(directory, self.model.results, config, counts)
        figures = self.datamodule.figures(self.model.results) if isinstance(self.datamodule, EditDataModule) else {}
        for name, figure in figures.items():
            figure.savefig(directory / f"{name}.png", dpi=120)
            if hasattr(self.trainer.logger, "log_image"):
                self.trainer.logger.log_image(key=name, images=[figure])
        rank_zero_info(f"\n{markdown_table(self.model.results)}\n\nresults written to {path}")


def build_cli(args: ArgsType = None) -> EditCLI:
    """Parse ``args`` (or the command line), run the subcommand and return the CLI object (for tests, notebooks)."""
    return EditCLI(
        LightningModule,  # editors (EditorModule) and trainable modules (toy pretraining, MEND)
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"inference_mode": False, "enable_checkpointing": False},
        auto_configure_optimizers=False,
        args=args,
    )


def main(args: ArgsType = None) -> None:
    """The console script ``lightning-edit``."""
    build_cli(args)
