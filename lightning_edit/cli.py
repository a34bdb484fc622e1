"""The ``lightning-edit`` command: LightningCLI over every editor and every benchmark::

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

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import warnings
from argparse import ArgumentError
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import yaml
from jsonargparse import ArgumentParser, Namespace
from lightning import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import Callback, OnExceptionCheckpoint
from lightning.pytorch.cli import ArgsType, LightningCLI, SaveConfigCallback
from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_module

import lightning_edit.data
import lightning_edit.editors  # noqa: F401  (registers the editors for short names)
import lightning_edit.toy  # noqa: F401  (ToyCorpus, CausalLMPretraining, ToyEditTraining)
from lightning_edit.editors.base import EditorModule
from lightning_edit.editors.stream_checkpoint import StreamCheckpointIO, is_stream_checkpoint
from lightning_edit.errors import DEBUG_ENV, user_error
from lightning_edit.presets import compose_presets
from lightning_edit.redaction import REDACTED, add_secrets, argv_secrets, mask, mask_output, redact, secret_field
from lightning_edit.report import RunReport
from lightning_edit.run_folder import RunFolder
from lightning_edit.stopping import hold_launched_processes, request_stop, stop_agreed, take_held_processes
from lightning_edit.tools import close_progress_bars, one_line

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

    def _parse_ckpt_path(self) -> None:
        """LightningCLI takes a Lightning checkpoint's hyper-parameters into the config; a stream checkpoint
        (safetensors) holds none: the editor checks the run against it instead, before any edit."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not (ckpt_path and is_stream_checkpoint(ckpt_path)):
            super()._parse_ckpt_path()

    def _run_subcommand(self, subcommand: str) -> None:
        """Run the subcommand in a folder of its own, refused before anything is written if it holds an earlier
        run's files; one that stops before writing anything but its settings leaves none (:mod:`.run_folder`)."""
        folder = RunFolder.claim(self.trainer, self.config_init[subcommand].get("ckpt_path"))
        try:
            super()._run_subcommand(subcommand)
        except BaseException as error:
            if self.trainer.is_global_zero:
                folder.release()
            if user_error(error) is not None:
                await_launched_processes(self.trainer)
            raise
        finally:
            folder.unlock()

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
        trainer._signal_connector = StopSignals(trainer)
        trainer.callbacks.insert(0, HoldOnUserError())  # the first of Lightning's hooks on an exception
        for logger in trainer.loggers:
            logger.log_hyperparams = partial(_log_redacted, logger.log_hyperparams)
        closed_form = (
            isinstance(self.model, EditorModule) and type(self.model).training_step is EditorModule.training_step
        )
        if self.subcommand == "fit" and not closed_form:
            trainer.callbacks.append(InterruptCheckpoint())
        return trainer


class StopSignals(_SignalConnector):
    """Lightning's signal connector, whose SIGTERM handler only records the signal (:mod:`lightning_edit.stopping`):
    Lightning's broadcasts the signal inside the handler, a collective that hangs the processes when the signal
    reaches them at different points or one of them only. The trainer's loops see it (``trainer.received_sigterm``)
    once every process has agreed to stop (:class:`InterruptCheckpoint`); an editor's steps stop on their own."""

    def _sigterm_notifier_fn(self, signum: int, frame: Any) -> None:
        request_stop(signum)


def await_launched_processes(trainer: Trainer, seconds: float = 10.0) -> None:
    """After a stop or a user error that every process meets at the same point, wait up to ``seconds`` for the
    processes Lightning's launcher started, so the run ends whole, and keep its observer (which kills this process
    when one of them exits non-zero) from turning this process's status 143 or 1 into a SIGKILL (after a stop, the
    processes were taken from it when the stop was agreed, after a user error by :class:`HoldOnUserError`)."""
    launched = getattr(trainer.strategy.launcher, "procs", [])
    deadline = time.monotonic() + seconds
    for process in [*take_held_processes(), *launched]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    launched.clear()  # the observer watches this list: empty, it has nothing to act on


class HoldOnUserError(Callback):
    """On a user error or a stop, which every process meets at the same point, take the launched processes from
    the launcher's observer at once (:func:`~lightning_edit.stopping.hold_launched_processes`), not only when the
    error reaches the CLI: Lightning first finalizes the loggers and tears the strategy down, and the observer would
    kill this process, before it prints the error's line, once another process has exited with 1 or 143. A bug is
    left to the observer, which ends every process."""

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if user_error(exception) is not None:
            hold_launched_processes(trainer.strategy)


class InterruptCheckpoint(OnExceptionCheckpoint):
    """A fit stopped by SIGTERM or Ctrl-C saves ``<log dir>/interrupted.ckpt`` (recorded on the exception as
    ``checkpoint``), to resume from with ``--ckpt_path``. SIGTERM stops every process after the same training batch
    (:func:`~lightning_edit.stopping.stop_agreed`)."""

    def __init__(self) -> None:
        super().__init__(dirpath=".", filename="interrupted")

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.dirpath = trainer.log_dir or trainer.default_root_dir

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if stop_agreed(trainer.strategy):
            trainer._signal_connector.received_sigterm = True  # the training loop stops after this batch

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            epochs = trainer.fit_loop.epoch_progress.current
            if epochs.completed == epochs.started:  # stopped between epochs: the next one resumes from its start
                trainer.fit_loop.epoch_loop.batch_progress.reset_on_run()
            super().on_exception(trainer, pl_module, exception)
            exception.checkpoint = self.ckpt_path


def _log_redacted(log_hyperparams: Callable[..., None], params: Any, *args: Any, **kwargs: Any) -> None:
    log_hyperparams(redact(dict(params)) if isinstance(params, Mapping) else params, *args, **kwargs)


def redact_namespace(config: Namespace) -> Namespace:
    """A copy of ``config`` redacted as :func:`~lightning_edit.redaction.redact` redacts a dict, also in the namespaces
    of its lists (a list of loggers)."""
    config = config.clone()
    for key, value in config.items():
        if secret_field(key, value):
            config[key] = REDACTED
        elif isinstance(value, list):
            config[key] = [redact_namespace(item) if isinstance(item, Namespace) else redact(item) for item in value]
        elif isinstance(value, (dict, str)):
            config[key] = redact(value)
    return config


class SecretFreeSaveConfig(SaveConfigCallback):
    """LightningCLI's ``config.yaml`` of the run, with every secret-looking value redacted."""

    def __init__(self, parser: ArgumentParser, config: Namespace, *args: Any, **kwargs: Any):
        super().__init__(parser, redact_namespace(config), *args, **kwargs)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Save it without validating it again: it was validated when parsed."""
        self.parser.save = partial(type(self.parser).save, self.parser, skip_check=True)  # shadows the method
        try:
            super().setup(trainer, pl_module, stage)
        finally:
            del self.parser.save


#: the trainer's checkpoint IO: Lightning's, which also opens a sequential stream's checkpoint (``--ckpt_path``)
STREAM_CHECKPOINT_IO = {"class_path": f"{StreamCheckpointIO.__module__}.{StreamCheckpointIO.__qualname__}"}


def build_cli(args: ArgsType = None, run: bool = True, exit_on_error: bool = True) -> EditCLI:
    """Parse ``args`` (or the command line), run the subcommand and return the CLI object (for tests, notebooks).

    With ``run=False``, ``args`` has no subcommand and nothing runs:
    ``build_cli(["--config", "configs/quickstart.yaml"], run=False).model`` is the editor that config describes.
    ``exit_on_error=False`` raises ``ArgumentError`` for a rejected option instead of printing it and exiting.
    """
    _silence_known_noise()
    return EditCLI(
        LightningModule,  # editors (EditorModule) and trainable modules (toy pretraining, MEND)
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=SecretFreeSaveConfig,
        parser_kwargs={"exit_on_error": exit_on_error}
        | {subcommand: {"exit_on_error": exit_on_error} for subcommand in EditCLI.subcommands()},
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"inference_mode": False, "enable_checkpointing": False, "plugins": [STREAM_CHECKPOINT_IO]},
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
    mask_output()
    signal.signal(signal.SIGTERM, request_stop)
    try:
        add_secrets(argv_secrets(argv))  # a config file it cannot read (not UTF-8, too deep) is a user error
        if args is None:  # what loggers record of the command line (W&B's metadata), masked
            sys.argv[1:] = [mask(argument) for argument in argv]
        build_cli(argv, exit_on_error=False)
    except ArgumentError as error:
        subcommand = next((argument for argument in argv if argument in EditCLI.subcommands()), None)
        usage = " ".join(["lightning-edit", *([subcommand] if subcommand else []), "--help lists the options"])
        _exit(f"error: {one_line(str(error))} ({usage})", 2)
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
    """Keep the :data:`KNOWN_WARNINGS` and the :data:`LITLOGGER_TIP` out of the output, and nothing else (again and
    again: each filter is kept once)."""
    for message, category, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message), category=category, module=module)
    rank_zero_module.log.addFilter(_not_the_litlogger_tip)


def _not_the_litlogger_tip(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(LITLOGGER_TIP)


def _exit(message: str, status: int) -> None:
    close_progress_bars()  # the line starts a line of its own, not at the end of a bar's
    print(f"lightning-edit: {mask(message)}", file=sys.stderr)
    raise SystemExit(status)
