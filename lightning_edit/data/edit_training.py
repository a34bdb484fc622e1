"""Edit-training data for trainable editors (MEND, Mitchell et al., ICLR 2022, §3.2 and §5).

A training example is an edit (prompt, subject, ``target_new``), the *equivalent* prompts that should follow it
(paraphrases, scored with ``target_new``) and *locality* prompts whose next-token distributions should not move
(each with its own answer, appended so that the KL covers the answer tokens too). Locality follows the MEND paper:

- zsRE: the record's Natural Questions prompt ``loc`` with ``loc_ans`` (unrelated to the edit, as in MEND's zsRE
  training);
- CounterFact (flat split or ROME format): the neighbourhood prompts (other subjects with the edit's true object)
  with that object, ``n_locality`` of them per edit, drawn with the seed (the flat split has one).

The examples come from the benchmark readers (:class:`~lightning_edit.data.CounterFact`,
:class:`~lightning_edit.data.ZsRE`), so records are checked as in evaluation. Validation yields
:class:`~lightning_edit.cases.EditCase` batches, scored by the editor's own protocol (ES, PS, NS, ...).

Training batches are drawn in a seeded order per epoch; the DataModule's state (saved in Lightning checkpoints) holds
the position reached, so a fit resumed mid-epoch continues with the next batch of the same order. A subclass supplies
other edits by overriding :meth:`EditTraining.load_splits` (the toy world's: :mod:`lightning_edit.toy.mend_edits`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, Sampler

from lightning_edit.cases import CASES_PER_STEP, EditCase, TrainingEdit, edit_batch_loader, steps_of_editor_calls
from lightning_edit.data.base import check_groups
from lightning_edit.data.counterfact import CounterFact
from lightning_edit.data.zsre import ZsRE
from lightning_edit.errors import DataFormatError
from lightning_edit.scoring.kinds import ScoreKind

Source = Literal["counterfact", "zsre"]
#: Prompt groups of each benchmark: (equivalent prompts, locality prompts).
_GROUPS = {"counterfact": ("paraphrase", "neighborhood"), "zsre": ("rephrase", "locality")}


class EpochOrder(Sampler[int]):
    """A seeded permutation per epoch (``set_epoch``, called by Lightning), optionally resumed after ``skip`` items."""

    def __init__(self, size: int, seed: int):
        self.size = size
        self.seed = seed
        self.epoch = 0
        self.resume: tuple[int, int] | None = None  # (epoch, items already consumed in it)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch))
        start = 0
        if self.resume is not None and self.resume[0] == self.epoch:
            start = self.resume[1]
        self.resume = None
        return iter(order[start:].tolist())

    def __len__(self) -> int:
        return self.size


class EditTraining(LightningDataModule):
    """Batches of training edits for MEND, from CounterFact or zsRE files.

    Args:
        source: ``counterfact`` (flat MEND/EasyEdit split or ROME format) or ``zsre`` (MEND format, ``alt``
            targets).
        train_path: the training file; required unless a subclass overrides :meth:`load_splits`.
        val_path: the validation file; None holds out the last ``val_size`` training cases instead.
        val_size: cases held out for validation when there is no ``val_path``; also caps the validation cases.
        limit: keep only the first ``limit`` training cases (smoke runs).
        batch_size: edits per training step (MEND: 1).
        val_batch_size: edit cases per validation step (None: 8); under ``batch``, the editor's
            ``edit_batch_size`` (:meth:`edit_steps`).
        n_locality: locality prompts per edit (CounterFact neighbourhoods; zsRE has one).
        seed: seeds the epoch orders and the choice of locality prompts.
    """

    def __init__(
        self,
        source: Source = "counterfact",
        train_path: str | None = None,
        val_path: str | None = None,
        val_size: int = 50,
        limit: int | None = None,
        batch_size: int = 1,
        val_batch_size: int | None = None,
        n_locality: int = 1,
        seed: int = 0,
    ):
        super().__init__()
        if source not in _GROUPS:
            raise ValueError(f"source must be one of {sorted(_GROUPS)}, got {source!r}")
        self.save_hyperparameters()
        self.source = source
        self.train_path = train_path
        self.val_path = val_path
        self.val_size = val_size
        self.limit = limit
        self.seed = seed
        self.batch_size = batch_size
        self.val_batch_size = val_batch_size or CASES_PER_STEP
        self.n_locality = n_locality
        self.train_edits: list[TrainingEdit] = []
        self.cases: list[EditCase] = []  # validation cases
        self.skipped: list[dict[str, Any]] = []
        self._order: EpochOrder | None = None
        self._resume: tuple[int, int] | None = None

    # Reading ---------------------------------------------------------------------------------------------------

    def _reader(self, path: str) -> ZsRE | CounterFact:
        return ZsRE(path) if self.source == "zsre" else CounterFact(path)

    def declared_metrics(self) -> dict[str, str]:
        """The metrics of the validation cases: those of the benchmark the files are read as."""
        return self._reader(self.val_path or self.train_path or "").declared_metrics()

    @property
    def score_kinds(self) -> Mapping[str, ScoreKind]:
        """The score kinds of its benchmark's groups (those of the reader of :meth:`declared_metrics`)."""
        return self._reader(self.val_path or self.train_path or "").score_kinds

    def derived_metrics(self, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {}

    def _read(self, path: str) -> list[EditCase]:
        reader = self._reader(path)
        cases = reader.load_cases()
        self.skipped += [{"file": path, **skip} for skip in reader.skipped]
        return cases

    def load_splits(self) -> tuple[list[EditCase], list[EditCase]]:
        """(training, validation) cases: the two files, or the training file with its last ``val_size`` held out."""
        if self.train_path is None:
            raise ValueError(f"source={self.source!r} needs train_path")
        if self.val_path is not None:
            return self._read(self.train_path), self._read(self.val_path)
        cases = self._read(self.train_path)
        if len(cases) <= self.val_size:
            raise DataFormatError(self.train_path, f"{len(cases)} cases, val_size {self.val_size}")
        return cases[: -self.val_size], cases[-self.val_size :]

    def setup(self, stage: str | None = None) -> None:
        if self.cases:
            return
        self.skipped = []
        train, val = self.load_splits()
        check_groups(train + val, self.score_kinds)
        train = train[: self.limit] if self.limit is not None else train
        self.train_edits = [self._training_edit(case) for case in train]
        self.cases = val[: self.val_size]

    def _training_edit(self, case: EditCase) -> TrainingEdit:
        equivalent_group, locality_group = (case.groups[name] for name in _GROUPS[self.source])
        request = case.requests[0]
        equivalent = tuple((prompt, request.target_new) for prompt in equivalent_group.prompts)
        locality = list(zip(locality_group.prompts, locality_group.expected))
        rng = random.Random(f"{self.seed}:{case.case_id}")
        locality = rng.sample(locality, min(self.n_locality, len(locality)))
        return TrainingEdit(request, equivalent, tuple(locality), case.case_id)

    # Loaders ---------------------------------------------------------------------------------------------------

    def train_dataloader(self) -> DataLoader:
        self._order = EpochOrder(len(self.train_edits), self.seed)
        if self._resume is not None:
            epoch, batches = self._resume
            self._order.resume = (epoch, batches * self.batch_size)
            self._resume = None
        return DataLoader(self.train_edits, batch_size=self.batch_size, sampler=self._order, collate_fn=list)

    def edit_steps(self, edit_batch_size: int) -> None:
        """Each validation step one editor call of ``edit_batch_size`` cases (the ``batch`` protocol)."""
        given = self.hparams.val_batch_size
        self.val_batch_size = steps_of_editor_calls("data.val_batch_size", given, edit_batch_size)

    def val_dataloader(self) -> DataLoader:
        return edit_batch_loader(self.cases, self.val_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def state_dict(self) -> dict[str, int]:
        """The epoch and the training batches consumed in it, read from the trainer when a checkpoint is saved."""
        if self.trainer is None:
            return {}
        progress = self.trainer.fit_loop.epoch_loop.batch_progress.current
        return {"epoch": self.trainer.current_epoch, "batches": progress.processed}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        if state_dict:
            self._resume = (state_dict["epoch"], state_dict["batches"])
