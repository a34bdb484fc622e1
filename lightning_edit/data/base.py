"""The benchmark base class, :class:`EditDataModule`: a benchmark's cases, served in batches, and what it reports.

A benchmark is a small :class:`EditDataModule` subclass that reads its official file format in
:meth:`EditDataModule.load_cases` (with :mod:`lightning_edit.data.records`) and turns each record into an
:class:`~lightning_edit.cases.EditCase`, and declares the metrics of its prompt groups from its settings alone in
:meth:`EditDataModule.declared_groups` (:mod:`lightning_edit.data.declared`); its ``sources`` name the published files
its ``path`` may name instead of a file (:mod:`lightning_edit.data.sources`). Any problem with the input raises
:class:`DataFormatError` naming the file, the record and the field, during ``setup``, that is before any weight is
touched.
"""

from __future__ import annotations

import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from lightning import LightningDataModule
from torch.utils.data import DataLoader

from lightning_edit.cases import CASES_PER_STEP, EditCase, case_error, edit_batch_loader, steps_of_editor_calls
from lightning_edit.data.counterfact_records import counterfact_cases
from lightning_edit.data.declared import DeclaredGroup, declared_metrics
from lightning_edit.data.sources import DataSource, fetch, local_path
from lightning_edit.errors import ConfigError, DataFormatError
from lightning_edit.scoring.kinds import BUILTIN_KINDS, ScoreKind, check_metrics, kinds_by_name

log = logging.getLogger(__name__)


def _record_index(source: str) -> int | None:
    """The record index of an :attr:`EditCase.source` of the form ``file#index`` (None for other sources)."""
    _, _, index = source.rpartition("#")
    return int(index) if index.isdigit() else None


def check_groups(cases: list[EditCase], kinds: Mapping[str, ScoreKind]) -> None:
    """Raise :class:`DataFormatError`, naming the record and the group, unless ``kinds`` can score every prompt group
    of ``cases`` (:func:`~lightning_edit.scoring.kinds.check_metrics`)."""
    for case in cases:
        for name, group in case.groups.items():
            try:
                check_metrics(kinds, group.metrics, group.alternatives is not None, group.pre_edit_filter)
            except ValueError as error:
                raise case_error(case, name, f"prompt group: {error}") from None


class EditDataModule(LightningDataModule, ABC):
    """A benchmark: reads edit cases from ``path`` and serves them in batches of cases.

    Args:
        path: the benchmark file, or the name of one of its :attr:`sources` (downloaded once, in ``prepare_data``).
        offset: skip this many cases first (e.g. the records a preset was chosen on); ``limit`` counts after them.
        limit: keep only this many cases (quick runs); None keeps all.
        sample_seed: with ``limit``, take a seeded random sample of the cases instead of the first ones.
        batch_size: edit cases per validation step; processes share the work step by step. Under ``single`` the
            cases computed together (batched single), under ``sequential`` the cases scored per step; under ``batch``
            a step is one editor call of the editor's ``model.edit_batch_size`` cases (:meth:`edit_steps`), the one
            setting of cases per call. None: :data:`~lightning_edit.cases.CASES_PER_STEP`.
    """

    #: the published files ``path`` may name instead of a file (``--data.path counterfact``); none by default
    sources: ClassVar[tuple[DataSource, ...]] = ()

    def __init__(
        self,
        path: str,
        limit: int | None = None,
        sample_seed: int | None = None,
        batch_size: int | None = None,
        offset: int = 0,
    ):
        super().__init__()
        self.save_hyperparameters()
        if offset < 0:
            raise ConfigError(f"data.offset={offset}: the number of cases to skip cannot be negative")
        if limit is not None and limit < 1:
            raise ConfigError(f"data.limit={limit}: keep at least 1 case, or leave it unset (null) to keep every case")
        if sample_seed is not None and limit is None:
            raise ConfigError(f"data.sample_seed={sample_seed} samples data.limit cases: set data.limit too")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"data.batch_size={batch_size}: must be at least 1")
        self.path = path
        self.limit = limit
        self.sample_seed = sample_seed
        self.batch_size = batch_size or CASES_PER_STEP
        self.offset = offset
        self.cases: list[EditCase] = []
        self.skipped: list[dict[str, Any]] = []
        self.target_equals_true: list[int] = []  # records (or case ids) whose target_new is their target_true

    @abstractmethod
    def load_cases(self) -> list[EditCase]:
        """Read :attr:`path` and return every edit case in file order (raise :class:`DataFormatError`)."""

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        """The metrics of each prompt group its cases hold, by group name, in report order; known from the settings
        alone (:mod:`lightning_edit.data.declared`). A benchmark declares its groups here, or its metrics in
        :meth:`declared_metrics`."""
        raise NotImplementedError(f"{type(self).__name__} declares neither its groups nor its metrics")

    def derived_names(self) -> tuple[str, ...]:
        """The names of the metrics :meth:`derived_metrics` computes, known from the settings alone; none by
        default."""
        return ()

    def declared_metrics(self) -> dict[str, str]:
        """Every metric the benchmark reports, name -> score kind, in report order; known from the settings alone.

        Derived from :meth:`declared_groups` (:func:`~lightning_edit.data.declared.declared_metrics`): includes
        ``<group>_filtered`` (kind ``filtered``) for groups with a pre-edit filter, ``<metric>_pre`` for groups scored
        before editing (``pre_edit``) and :meth:`derived_names` (kind ``derived``). The editor creates its metrics from
        this list before any case is scored; a case reporting anything else is an error. A benchmark whose metrics
        are not those of its groups one by one (RuleEdit) writes the list here instead.
        """
        return declared_metrics(self.declared_groups(), self.derived_names())

    def own_kinds(self) -> list[ScoreKind]:
        """The benchmark's own score kinds, beside :data:`~lightning_edit.scoring.kinds.BUILTIN_KINDS` (a judged
        kind holds its judge); none by default. Read once per run, through :attr:`score_kinds`."""
        return []

    @cached_property
    def score_kinds(self) -> Mapping[str, ScoreKind]:
        """Every kind its prompt groups may name, by name: the built-in ones and :meth:`own_kinds`, made once, so
        the scorer, the metrics and the report of a run share these instances (and their judges)."""
        return kinds_by_name([*BUILTIN_KINDS.values(), *self.own_kinds()])

    def demonstration_cases(self, path: str | None) -> list[EditCase]:
        """The cases of ``path``, a file in a CounterFact format (ROME or flat; BAKE's too), that in-context editors
        build demonstrations from (``in_context.pool``); none without a path."""
        return [] if path is None else counterfact_cases(path)

    def skip(self, index: int | None, reason: str, file: str | Path | None = None) -> None:
        """Leave a record out, on the record: skipped records are counted and listed in results.json.

        Args:
            index: the record's index in its file; None when a whole file is left out.
            reason: why.
            file: the file, for a benchmark of several files (default: :attr:`path`, not repeated in the entry).
        """
        entry: dict[str, Any] = {"record": index, "reason": reason}
        if file is not None:
            entry["file"] = str(file)
        self.skipped.append(entry)
        where = "" if index is None else f": record {index}"
        log.warning("%s%s skipped: %s", self.path if file is None else file, where, reason)

    def source_name(self) -> str | None:
        """The name of the source (one of :attr:`sources`) that :attr:`path` names (None: none); ``path`` by default."""
        return self.path

    def _named_source(self) -> DataSource | None:
        """The one of :attr:`sources` that :meth:`source_name` names, unless ``path`` is a file or ``builtin:``; a
        ``path`` that is none of them is a one-line error listing the benchmark's sources."""
        name = self.source_name()
        if name is None or self.path.startswith("builtin:") or Path(self.path).exists():
            return None
        for source in self.sources:
            if source.name == name:
                return source
        if self.sources:
            known = ", ".join(source.name for source in self.sources)
            raise DataFormatError(
                self.path, f"no such file or folder, nor a data source of {type(self).__name__} ({known})"
            )
        return None

    def prepare_data(self) -> None:
        """Download the named source's files once (Lightning calls this on one process per machine)."""
        if source := self._named_source():
            fetch(source)

    def setup(self, stage: str | None = None) -> None:
        if self.cases:
            return
        if source := self._named_source():
            self.path = str(local_path(source))  # on every process, the file prepare_data fetched
        self.skipped = []
        self.target_equals_true = []
        cases = self.load_cases()
        check_groups(cases, self.score_kinds)  # kinds made here, before any weight is touched (a judge's fault)
        seen: dict[int, str] = {}
        for case in cases:
            if case.case_id in seen:
                raise DataFormatError(
                    self.path,
                    f"duplicate case_id {case.case_id}, already used by {seen[case.case_id]}",
                    _record_index(case.source),
                    "case_id",
                )
            seen[case.case_id] = case.source
            if any(r.target_true is not None and r.target_new.strip() == r.target_true.strip() for r in case.requests):
                self.target_equals_true.append(_record_index(case.source) or case.case_id)
        if self.target_equals_true:  # kept and scored as the reference code does; counted in results.json
            log.warning(
                "%s: %d records ask for a target_new equal to target_true (records %s): the edit changes nothing",
                self.path,
                len(self.target_equals_true),
                self.target_equals_true[:10],
            )
        if not cases:
            skipped = f" ({len(self.skipped)} skipped records)" if self.skipped else ""
            raise DataFormatError(self.path, f"no edit cases to evaluate{skipped}: the file holds no usable records")
        if self.offset >= len(cases):
            raise DataFormatError(self.path, f"data.offset={self.offset} skips all {len(cases)} edit cases")
        cases = cases[self.offset :]
        if self.limit is not None and self.limit < len(cases):
            if self.sample_seed is None:
                cases = cases[: self.limit]
            else:
                positions = sorted(random.Random(self.sample_seed).sample(range(len(cases)), self.limit))
                cases = [cases[i] for i in positions]
        self.cases = cases

    def derived_metrics(self, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Metrics computed from the aggregates of others at the end of a run (e.g. BAKE's S); none by default."""
        return {}

    def figures(self, results: dict[str, dict[str, Any]], case_scores: dict[str, dict[int, float]]) -> dict[str, Any]:
        """The benchmark's own plots of a run's results (``results``: each metric's aggregates; ``case_scores``:
        metric -> case id -> mean of the case's prompts), name -> matplotlib figure; none by default."""
        return {}

    def run_notes(self, module: Any) -> dict[str, Any]:
        """What results.json records about the run besides its metrics, under ``benchmark`` (e.g. the tokens a
        score read, given the editor ``module``'s tokenizer and scoring settings); nothing by default."""
        return {}

    def edit_steps(self, edit_batch_size: int) -> None:
        """Make each validation step one editor call of ``edit_batch_size`` cases (the ``batch`` protocol): the
        editor's setting is the one owner of cases per call, and a ``data.batch_size`` that differs is refused."""
        self.batch_size = steps_of_editor_calls("data.batch_size", self.hparams.batch_size, edit_batch_size)

    def val_dataloader(self) -> DataLoader:
        return edit_batch_loader(self.cases, self.batch_size)

    def train_dataloader(self) -> DataLoader:
        """The cases a closed-form editor applies in ``fit`` (in file order)."""
        return self.val_dataloader()

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
