"""The folder a run writes into, and the one guard that it is the run's own: no run changes another run's files.

A run writes its settings (LightningCLI's ``config.yaml``, a logger's ``hparams.yaml`` and ``metrics.csv``), its report
(``results.json``, ``results.md``, ``cases.jsonl``, plots) and what a fit saves (``interrupted.ckpt``, ``mend.pt``, an
export) into one folder: the version folder of a CSV or TensorBoard logger (``lightning_logs/version_N``), else the
logger's ``save_dir`` or, without a logger, the trainer's ``default_root_dir``. Before anything is written
(:meth:`RunFolder.claim`) a version folder must be new or empty, and a folder that runs share must hold no file of an
earlier run (:data:`RUN_FILES`); the one exception is a run resumed from a checkpoint saved in that folder
(``--ckpt_path <folder>/interrupted.ckpt`` or ``<folder>/stream_checkpoint.safetensors``), which continues that run
there (and, if it fails, puts back the settings files it rewrote). Every process checks, before any of them
writes, so all refuse together. A run that fails removes the settings it wrote if it wrote nothing else
(:meth:`RunFolder.release`), so the same command runs again; nothing that was there before it is touched.

While it runs, process 0 holds an exclusive lock on the folder (``flock`` on the directory, released by the system
when the process ends, however it ends): a second run into the same folder at the same time, such as a scheduler's
requeued job resuming the stream checkpoint that the first is still writing, is refused in one line. A new version
folder is not locked (the logger picks an unused version for each run; it is made later, and a launcher's processes
must still find it new).
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from lightning import Trainer
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from lightning_edit.errors import ConfigError

#: what a run writes into its folder before anything else: LightningCLI's config and the logger's hyper-parameters
SETTINGS_FILES = frozenset({"config.yaml", "hparams.yaml"})
#: what a run writes at the top of its folder (a fit's export too, but always beside its config.yaml): a folder that
#: runs share holding one of them holds an earlier run; a checkpoint put there by hand (``mend.pt``) is no run's
RUN_FILES = SETTINGS_FILES | {
    "metrics.csv",
    "results.json",
    "results.md",
    "cases.jsonl",
    "interrupted.ckpt",
    "stream_checkpoint.safetensors",
}


def run_folder(trainer: Trainer) -> Path:
    """Process 0's ``trainer.log_dir`` (else ``default_root_dir``), without the broadcast that property makes."""
    logger = trainer.loggers[0] if trainer.loggers else None
    folder = logger.log_dir if isinstance(logger, (CSVLogger, TensorBoardLogger)) else getattr(logger, "save_dir", None)
    return Path(folder or trainer.default_root_dir)


@dataclass(frozen=True)
class RunFolder:
    """The folder of a run (:func:`run_folder`), with what it held before the run.

    Args:
        path: the folder.
        versioned: a logger's version folder, the run's alone; otherwise a folder that runs share.
        existed: whether the folder was there before the run.
        held: the names of the entries it held then.
        settings: a resumed run's folder: the settings files it held then (name, bytes), which the run rewrites and a
            failed run puts back.
        lock: process 0's open descriptor of the folder, which holds the lock until :meth:`unlock`; None elsewhere.
    """

    path: Path
    versioned: bool
    existed: bool
    held: frozenset[str]
    settings: tuple[tuple[str, bytes], ...] = ()
    lock: int | None = None

    @classmethod
    def claim(cls, trainer: Trainer, ckpt_path: str | Path | None = None) -> RunFolder:
        """The run's folder, locked by process 0 (a folder that runs share is made first if new; a new version folder
        is not locked); a :class:`~lightning_edit.errors.ConfigError` if another run holds the lock or the folder
        holds an earlier run's files."""
        path = run_folder(trainer)
        logger = trainer.loggers[0] if trainer.loggers else None
        versioned = isinstance(logger, (CSVLogger, TensorBoardLogger)) and not _same(path, logger.root_dir)
        option = "trainer.logger.init_args.save_dir" if logger else "trainer.default_root_dir"
        existed = path.is_dir()
        # a new version folder is not made here: the processes that a launcher starts next pick their version anew
        locked = rank_zero_only.rank == 0 and (existed or not versioned)
        lock = lock_folder(path, option) if locked else None
        try:
            held = frozenset(entry.name for entry in path.iterdir()) if path.is_dir() else frozenset()
            earlier = held if versioned else held & RUN_FILES
            resumed = ckpt_path is not None and Path(ckpt_path).is_file() and _same(Path(ckpt_path).parent, path)
            if earlier and not resumed:
                if versioned:
                    hint = "leave trainer.logger.init_args.version unset for a new version folder, or pick an unused "
                    hint += "one"
                else:
                    hint = f"pick another {option}, or use a logger (each run gets a new version folder)"
                shown = ", ".join(sorted(earlier)[:5]) + (", ..." if len(earlier) > 5 else "")
                raise ConfigError(f"{path} holds the files of an earlier run ({shown}); a run writes only into a "
                                  f"new folder: {hint}")  # fmt: skip
        except BaseException:
            if lock is not None:
                os.close(lock)
            raise
        settings = (
            tuple((name, (path / name).read_bytes()) for name in sorted(SETTINGS_FILES & held)) if resumed else ()
        )
        return cls(path, versioned, existed, held, settings, lock)

    def unlock(self) -> None:
        """Let the next run into the folder (at the end of the run, whether it failed or not)."""
        if self.lock is not None:
            os.close(self.lock)

    def release(self) -> None:
        """After a failed run: put back the settings a resumed run rewrote; remove the settings it wrote if it wrote
        nothing else (in a folder that runs share, nothing else of :data:`RUN_FILES`), and the folder it made, then
        empty."""
        if not self.path.is_dir():
            return
        for name, data in self.settings:
            (self.path / name).write_bytes(data)
        new = [entry for entry in self.path.iterdir() if entry.name not in self.held]
        if not self.versioned:
            new = [entry for entry in new if entry.name in RUN_FILES]
        if new and all(entry.is_file() and entry.name in SETTINGS_FILES for entry in new):
            for entry in new:
                entry.unlink()
        if not self.existed and not any(self.path.iterdir()):
            self.path.rmdir()


def lock_folder(path: Path, option: str) -> int:
    """An open descriptor of the folder ``path`` (made if new) holding an exclusive lock on it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise ConfigError(f"{path}: cannot be made or opened as the run's folder ({error.strerror}); pick another "
                          f"{option}") from None  # fmt: skip
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise ConfigError(f"{path} is in use by another run now (one run at a time writes into a folder): wait for "
                          f"it to end, or pick another {option}") from None  # fmt: skip
    return descriptor


def _same(one: str | Path, other: str | Path) -> bool:
    return Path(one).resolve() == Path(other).resolve()
