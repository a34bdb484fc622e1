"""The benchmark base class and the record-reading helpers every loader uses.

A benchmark is a small :class:`EditDataModule` subclass that reads its official file format in
:meth:`EditDataModule.load_cases` and turns each record into an :class:`~lightning_edit.cases.EditCase`.
Any problem with the input raises :class:`DataFormatError` naming the file, the record and the field, during
``setup``, that is before any weight is touched.
"""

from __future__ import annotations

import json
import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from lightning import LightningDataModule
from torch.utils.data import DataLoader

from lightning_edit.cases import EditCase, case_error, edit_batch_loader
from lightning_edit.data.sources import fetch, is_known, local_path
from lightning_edit.errors import ConfigError, DataFormatError
from lightning_edit.resources import resolve_path
from lightning_edit.scoring.kinds import BUILTIN_KINDS, ScoreKind, check_metrics, kinds_by_name

log = logging.getLogger(__name__)


#: why a JSON document that Python's parser cannot read (``[`` nested 100,000 deep) is refused
_TOO_DEEP = "nested too deeply to read (lists or objects more than about 1,000 levels deep)"


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSON list (``.json``) or one JSON object per line (``.jsonl``) of records.

    ``path`` may name a file shipped with the package as ``builtin:data/<file>`` (see :mod:`lightning_edit.resources`).
    """
    path = resolve_path(path)
    if not path.is_file():
        raise DataFormatError(path, "file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        line = error.object[: error.start].count(b"\n") + 1
        raise DataFormatError(
            path, f"not UTF-8 text: byte {error.object[error.start]:#04x} on line {line}; save the file as UTF-8"
        ) from None
    if path.suffix == ".jsonl":
        records = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise DataFormatError(path, f"malformed JSON on line {line_number}: {error.msg}") from None
            except RecursionError:
                raise DataFormatError(path, f"the JSON on line {line_number} is {_TOO_DEEP}") from None
    else:
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataFormatError(
                path, f"malformed JSON at line {error.lineno}, column {error.colno}: {error.msg}"
            ) from None
        except RecursionError:
            raise DataFormatError(path, f"the JSON is {_TOO_DEEP}") from None
        if not isinstance(records, list):
            raise DataFormatError(path, f"expected a JSON list of records, found {type(records).__name__}")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise DataFormatError(path, f"expected a JSON object, found {type(record).__name__}", index)
    return records


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


class RecordReader:
    """Typed access to the fields of one record, with errors that name file, record and field."""

    def __init__(self, path: str | Path, index: int, record: dict[str, Any]):
        self.path, self.index, self.record = path, index, record

    def error(self, field: str, message: str) -> DataFormatError:
        return DataFormatError(self.path, message, self.index, field)

    def get(self, field: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        """The value of ``field`` (a dotted path for nested objects), checked against ``kind``."""
        value: Any = self.record
        for part in field.split("."):
            if not isinstance(value, dict) or part not in value:
                if default is not ...:
                    return default
                raise self.error(field, "missing")
            value = value[part]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(field, f"expected {expected}, found {type(value).__name__}")
        return value

    def string(self, field: str, default: Any = ...) -> str:
        return self.get(field, str, default)

    def strings(self, field: str, default: Any = ..., at_least: int = 0) -> list[str]:
        """A list of at least ``at_least`` strings, none of them empty or only whitespace (nothing to score)."""
        values = self.get(field, list, default)
        if len(values) < at_least:
            raise self.error(field, f"expected at least {at_least} string(s), found {len(values)}")
        for position, value in enumerate(values):
            if not isinstance(value, str):
                raise self.error(f"{field}[{position}]", f"expected str, found {type(value).__name__}")
            if not value.strip():
                raise self.error(f"{field}[{position}]", f"empty string {value!r}")
        return values

    def answer(self, field: str) -> str:
        """An answer given as a plain string or as ``{"str": ...}`` (CounterFact)."""
        value = self.get(field, (str, dict))
        if isinstance(value, dict):
            if not isinstance(value.get("str"), str):
                raise self.error(field, 'expected a string or an object with a string "str"')
            value = value["str"]
        if not value.strip():
            raise self.error(field, "empty answer")
        return value

    def template(self, prompt_field: str, subject: str) -> str:
        """The prompt with ``{}`` for the subject, created by replacing the subject's first occurrence."""
        prompt = self.string(prompt_field)
        if prompt.count("{}") > 1:
            raise self.error(prompt_field, f"the prompt {prompt!r} has {prompt.count('{}')} '{{}}'; one is the subject")
        if "{}" in prompt:
            return prompt
        if not subject or subject not in prompt:
            raise self.error(prompt_field, f"subject {subject!r} does not occur in the prompt {prompt!r}")
        return prompt.replace(subject, "{}", 1)


class EditDataModule(LightningDataModule, ABC):
    """A benchmark: reads edit cases from ``path`` and serves them in batches of cases.

    Args:
        path: the benchmark file.
        offset: skip this many cases first (e.g. the records a preset was chosen on); ``limit`` counts after them.
        limit: keep only this many cases (quick runs); None keeps all.
        sample_seed: with ``limit``, take a seeded random sample of the cases instead of the first ones.
        batch_size: edit cases per validation step (and per edit under the ``batch`` protocol); processes share
            the work batch by batch.
    """

    def __init__(
        self,
        path: str,
        limit: int | None = None,
        sample_seed: int | None = None,
        batch_size: int = 8,
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
        if batch_size < 1:
            raise ConfigError(f"data.batch_size={batch_size}: must be at least 1")
        self.path, self.limit, self.sample_seed, self.batch_size = path, limit, sample_seed, batch_size
        self.offset = offset
        self.cases: list[EditCase] = []
        self.skipped: list[dict[str, Any]] = []
        self.target_equals_true: list[int] = []  # records (or case ids) whose target_new is their target_true

    @abstractmethod
    def load_cases(self) -> list[EditCase]:
        """Read :attr:`path` and return every edit case in file order (raise :class:`DataFormatError`)."""

    @abstractmethod
    def declared_metrics(self) -> dict[str, str]:
        """Every metric the benchmark reports, name -> score kind, in report order; known from the settings alone.

        Includes ``<group>_filtered`` (kind ``filtered``) for groups with a pre-edit filter, ``<metric>_pre`` for
        groups scored before editing (``pre_edit``) and the metrics of :meth:`derived_metrics` (kind ``derived``).
        The editor creates its metrics from this list before any case is scored; a case reporting anything else is
        an error.
        """

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
        if path is None:
            return []
        from lightning_edit.data.counterfact import CounterFact  # a subclass: imported when used

        return CounterFact(path).load_cases()

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
        """The data source (:mod:`lightning_edit.data.sources`) that :attr:`path` names: ``path`` by default."""
        return self.path

    def _named_source(self) -> str | None:
        """:meth:`source_name` if it is a registered source and ``path`` is neither a file nor ``builtin:``."""
        name = self.source_name()
        if name is None or self.path.startswith("builtin:") or Path(self.path).exists() or not is_known(name):
            return None
        return name

    def prepare_data(self) -> None:
        """Download the named source's files once (Lightning calls this on one process per machine)."""
        if name := self._named_source():
            fetch(name)

    def setup(self, stage: str | None = None) -> None:
        if self.cases:
            return
        if name := self._named_source():
            self.path = str(local_path(name))  # on every process, the file prepare_data fetched
        self.skipped, self.target_equals_true = [], []
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

    def val_dataloader(self) -> DataLoader:
        return edit_batch_loader(self.cases, self.batch_size)

    def train_dataloader(self) -> DataLoader:
        """The cases a closed-form editor applies in ``fit`` (in file order)."""
        return self.val_dataloader()

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
