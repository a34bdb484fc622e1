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

import os
import re
import shutil
import signal
import sys
import traceback
import warnings
from argparse import ArgumentError
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ArgumentParser, Namespace
from lightning import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import OnExceptionCheckpoint
from lightning.pytorch.cli import ArgsType, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_module

import lightning_edit.data
import lightning_edit.editors  # noqa: F401  (registers the editors for short names)
import lightning_edit.toy  # noqa: F401  (ToyCorpus, CausalLMPretraining, ToyEditTraining)
from lightning_edit.editors.base import EditorModule
from lightning_edit.errors import (
    DEBUG_ENV,
    REDACTED,
    add_secrets,
    argv_secrets,
    mask,
    mask_output,
    redact,
    request_stop,
    secret_field,
    user_error,
)
from lightning_edit.presets import compose_presets
from lightning_edit.report import RunReport

lightning_edit.data.import_all()  # registers the benchmarks for the short names of --data


class EditCLI(LightningCLI):
    """LightningCLI that reports the metrics of a validate or test run (:class:`~lightning_edit.report.RunReport`)
    and lets model presets compose with every editor (:mod:`lightning_edit.presets`)."""

    def __init__(self, *positional: Any, args: ArgsType = None, **kwargs: Any):
        command = sys.argv[1:] if args is None else args
        first = next((a for a in command if not a.startswith("-")), None) if isinstance(command, list) else None
        self._requested = first if first in self.subcommands() else None
        super().__init__(*positional, args=args, **kwargs)

    def _add_subcommands(self, parser: ArgumentParser, **kwargs: Any) -> None:
        """Build only the requested subcommand's parser (each costs about 0.1 s of the fixed cost of a run); all of
        them when the command names none (``--help``, a mistyped subcommand)."""
        if self._requested is None:
            return super()._add_subcommands(parser, **kwargs)
        every = self.subcommands()
        self.subcommands = lambda: {self._requested: every[self._requested]}  # shadows the static method
        try:
            super()._add_subcommands(parser, **kwargs)
        finally:
            del self.subcommands

    def parse_arguments(self, parser: ArgumentParser, args: ArgsType) -> None:
        if args is None or isinstance(args, list):
            args = compose_presets(sys.argv[1:] if args is None else args)
        super().parse_arguments(parser, args)

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs: Any) -> ArgumentParser:
        """The subcommand's parser; ``validate`` and ``test`` default to ``--verbose false``: the run report prints the
        metrics table, and Lightning's own table would repeat it."""
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        if subcommand in ("validate", "test"):
            parser.set_defaults(verbose=False)
        return parser

    def _run_subcommand(self, subcommand: str) -> None:
        """Run the subcommand; one that stops before writing anything but its settings leaves no log folder
        (:func:`remove_settings_only_log_dir`)."""
        try:
            super()._run_subcommand(subcommand)
        except BaseException:
            remove_settings_only_log_dir(self.trainer)
            raise

    def before_validate(self) -> None:
        self._add_report()

    def before_test(self) -> None:
        self._add_report()

    def _add_report(self) -> None:
        self._dump_config()
        self.trainer.callbacks.append(RunReport(self.config_dump))  # RunReport keeps a redacted copy

    def _dump_config(self) -> None:
        """The subcommand's config, which the model and data record as hyper-parameters (LightningCLI's) and the run
        report writes, dumped once and without validating it again: it was validated when parsed."""
        if not hasattr(self, "config_dump"):
            dump = self.parser.dump(self.config, skip_link_targets=False, skip_none=False, skip_check=True)
            self.config_dump = yaml.safe_load(dump)
            if "subcommand" in self.config:
                self.config_dump = self.config_dump[self.config.subcommand]

    # Secrets (lightning_edit.errors): none reaches config.yaml, a logger's files or what a logger records ----------

    def before_instantiate_classes(self) -> None:
        """Redact the secrets nested in the loggers' extra arguments (W&B's ``config``, written to its run files); a
        logger's own key argument (``api_key``) is kept: it authenticates with it."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        loggers = config.get("trainer.logger")
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            for group in ("init_args", "dict_kwargs") if isinstance(logger, Namespace) else ():
                arguments = logger.get(group)
                for name, value in arguments.items() if isinstance(arguments, (dict, Namespace)) else ():
                    if "." not in name and isinstance(value, (dict, list)):
                        arguments[name] = redact(value)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, whose loggers record hyper-parameters with their secrets redacted; a ``fit`` that trains
        also saves a checkpoint to resume from when it is stopped (:class:`InterruptCheckpoint`)."""
        trainer = super().instantiate_trainer(**kwargs)
        for logger in trainer.loggers:
            logger.log_hyperparams = partial(_log_redacted, logger.log_hyperparams)
        closed_form = (
            isinstance(self.model, EditorModule) and type(self.model).training_step is EditorModule.training_step
        )
        if self.subcommand == "fit" and not closed_form:
            trainer.callbacks.append(InterruptCheckpoint())
        return trainer


class InterruptCheckpoint(OnExceptionCheckpoint):
    """A fit stopped by SIGTERM or Ctrl-C saves ``<log dir>/interrupted.ckpt`` (recorded on the exception as
    ``checkpoint``), to resume from with ``--ckpt_path``."""

    def __init__(self) -> None:
        super().__init__(dirpath=".", filename="interrupted")

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.dirpath = trainer.log_dir or trainer.default_root_dir

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            epochs = trainer.fit_loop.epoch_progress.current
            if epochs.completed == epochs.started:  # stopped between epochs: the next one resumes from its start
                trainer.fit_loop.epoch_loop.batch_progress.reset_on_run()
            super().on_exception(trainer, pl_module, exception)
            exception.checkpoint = self.ckpt_path


#: what a run writes into its log folder before anything else: LightningCLI's config and the logger's hyper-parameters
SETTINGS_FILES = frozenset({"config.yaml", "hparams.yaml"})


def remove_settings_only_log_dir(trainer: Trainer) -> None:
    """Remove the version folder (``lightning_logs/version_N``) that a CSV or TensorBoard logger made for a run that
    stopped (a user error, SIGTERM) before writing anything but :data:`SETTINGS_FILES`. A folder holding anything else
    (results, an ``interrupted.ckpt`` to resume from, logged metrics) is kept, and so is a folder that runs share (the
    trainer's ``default_root_dir`` without such a logger, a logger's folder without a version)."""
    logger = trainer.loggers[0] if trainer.loggers else None
    if not trainer.is_global_zero or not isinstance(logger, (CSVLogger, TensorBoardLogger)):
        return
    folder = Path(logger.log_dir)  # not trainer.log_dir: a broadcast, which processes that stopped never answer
    if folder.resolve() == Path(logger.root_dir).resolve():
        return
    if folder.is_dir() and all(path.is_file() and path.name in SETTINGS_FILES for path in folder.iterdir()):
        shutil.rmtree(folder)


def _log_redacted(log_hyperparams: Callable[..., None], params: Any, *args: Any, **kwargs: Any) -> None:
    log_hyperparams(redact(dict(params)) if isinstance(params, Mapping) else params, *args, **kwargs)


class SecretFreeSaveConfig(SaveConfigCallback):
    """LightningCLI's ``config.yaml`` of the run, with every secret-looking value redacted."""

    def __init__(self, parser: ArgumentParser, config: Namespace, *args: Any, **kwargs: Any):
        config = config.clone()
        for key, value in config.items():
            if secret_field(key, value):
                config[key] = REDACTED
            elif isinstance(value, (dict, list)):
                config[key] = redact(value)
        super().__init__(parser, config, *args, **kwargs)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Save it without validating it again: it was validated when parsed."""
        self.parser.save = partial(type(self.parser).save, self.parser, skip_check=True)  # shadows the method
        try:
            super().setup(trainer, pl_module, stage)
        finally:
            del self.parser.save


def build_cli(args: ArgsType = None, run: bool = True, exit_on_error: bool = True) -> EditCLI:
    """Parse ``args`` (or the command line), run the subcommand and return the CLI object (for tests, notebooks).

    With ``run=False``, ``args`` has no subcommand and nothing runs:
    ``build_cli(["--config", "configs/quickstart.yaml"], run=False).model`` is the editor that config describes.
    ``exit_on_error=False`` raises ``ArgumentError`` for a rejected option instead of printing it and exiting.
    """
    return EditCLI(
        LightningModule,  # editors (EditorModule) and trainable modules (toy pretraining, MEND)
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=SecretFreeSaveConfig,
        parser_kwargs={"exit_on_error": exit_on_error}
        | {subcommand: {"exit_on_error": exit_on_error} for subcommand in EditCLI.subcommands()},
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"inference_mode": False, "enable_checkpointing": False},
        auto_configure_optimizers=False,
        args=args,
        run=run,
    )


def main(args: ArgsType = None) -> None:
    """What the console script ``lightning-edit`` runs (:mod:`lightning_edit.console`) for every command line but
    ``--help`` alone. A user error or a rejected option is printed as one line (lightning_edit.errors), exit status 1
    (2 for an option); SIGTERM stops a run at its next safe point, exit status 143, saying how to resume; ``--debug``
    or ``LIGHTNING_EDIT_DEBUG=1`` prints tracebacks. No message shows a secret of the command line, its config files
    or the environment."""
    argv = list(sys.argv[1:] if args is None else args)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [argument for argument in argv if argument != "--debug"]
    add_secrets(argv_secrets(argv))
    mask_output()
    if args is None:  # what loggers record of the command line (W&B's metadata), masked
        sys.argv[1:] = [mask(argument) for argument in argv]
    signal.signal(signal.SIGTERM, request_stop)
    _silence_known_noise()
    try:
        build_cli(argv, exit_on_error=False)
    except ArgumentError as error:
        subcommand = next((argument for argument in argv if argument in EditCLI.subcommands()), None)
        usage = " ".join(["lightning-edit", *([subcommand] if subcommand else []), "--help lists the options"])
        _exit(f"error: {_one_line(str(error))} ({usage})", 2)
    except SIGTERMException as error:
        saved = getattr(error, "checkpoint", None)
        hint = f"resume with the same command and --ckpt_path {saved}" if saved else "run the same command again"
        _exit(f"stopped by SIGTERM before the run finished; {hint}", 128 + signal.SIGTERM)
    except Exception as error:
        found = user_error(error)
        if found is None or debug:
            _exit("".join(traceback.format_exception(error)).rstrip(), 1)
        _exit(f"error: {found}", found.exit_code)


#: Warnings about choices lightning-edit makes on purpose, or about library internals: (start of the message,
#: category, module that warns).
KNOWN_WARNINGS = (
    # the command line is given to LightningCLI as args (presets are composed first): not a mistake, and the warning
    # would print the command line, secrets included
    ("LightningCLI's args parameter is intended to run from within Python", UserWarning, r"lightning\.pytorch\.cli"),
    # the default logger (logger: true) is the CSVLogger that writes lightning_logs/version_N
    (
        "Starting from v1.9.0, `tensorboardX` has been removed as a dependency",
        UserWarning,
        r"lightning\.pytorch\.trainer\.connectors\.logger_connector\.logger_connector",
    ),
    # torch deprecates a class that Lightning's own pytree helpers still use
    ("`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning, r"lightning\.pytorch\.utilities\._pytree"),
    # editors keep their batches of text cases on the host (EditorModule.transfer_batch_to_device), on purpose
    (
        "You have overridden `transfer_batch_to_device` in `LightningModule` but have passed in a",
        UserWarning,
        r"lightning\.pytorch\.trainer\.connectors\.data_connector",
    ),
)
#: Lightning's advertisement, logged whenever a trainer has no LitLogger.
LITLOGGER_TIP = "💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger]"


def _silence_known_noise() -> None:
    """Keep the :data:`KNOWN_WARNINGS` and the :data:`LITLOGGER_TIP` out of the output, and nothing else."""
    for message, category, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message), category=category, module=module)
    rank_zero_module.log.addFilter(lambda record: not record.getMessage().startswith(LITLOGGER_TIP))


def _one_line(message: str) -> str:
    """jsonargparse's message of a rejected option in one line, without its dump of every Union alternative."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if "Errors:" in lines and any(line.startswith("Given value type:") for line in lines):
        start = lines.index("Errors:") + 1
        end = next(i for i, line in enumerate(lines) if line.startswith("Given value type:"))
        lines = lines[:1] + [line for line in lines[start:end] if "Expected a <class 'NoneType'>" not in line]
    return " ".join(line.removeprefix("- ") for line in lines)


def _exit(message: str, status: int) -> None:
    print(f"lightning-edit: {mask(message)}", file=sys.stderr)
    raise SystemExit(status)
