"""The on-disk verdict cache: one SQLite file, keyed by the judge's identity and the item's digest.

The judge's identity is a digest of its class and settings (model, template text, parameters; never an API key) and,
for a local model, of its weights, so changing any of them misses the cache instead of reusing verdicts of another
judge. SQLite serialises writers, so several processes of one run may share the file.

A cached score off the judge's scale (99 on a 1-7 scale: a file edited by hand or written by other code) is not
trusted: it is read as a cache miss, with a warning, so the judge is asked again and its verdict replaces it.

A cache that cannot be used (a folder that cannot be made, a file that is no SQLite database or holds another table
of verdicts, a file that cannot be written) is a one-line error when the judge is made, before any edit: never a
silent run without a cache, whose verdicts an LLM judge would then be paid for again on every rerun. The error says
to give the judge another ``cache_dir`` or to remove the file.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from lightning_edit.errors import ConfigError
from lightning_edit.redaction import mask

#: a cached verdict: (score, or None if missing; reason; the judge's raw output)
Row = tuple[float | None, str, str]

log = logging.getLogger(__name__)


#: the columns of the table of verdicts
COLUMNS = ("judge TEXT", "item TEXT", "score REAL", "reason TEXT", "raw TEXT")


class VerdictCache:
    """Verdicts by (judge identity, item key), in the SQLite file ``path``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as connection:
                connection.execute(
                    f"CREATE TABLE IF NOT EXISTS verdicts ({', '.join(COLUMNS)}, PRIMARY KEY (judge, item))"
                )
                columns = [row[1] for row in connection.execute("PRAGMA table_info(verdicts)")]
                if columns != [column.split()[0] for column in COLUMNS]:
                    raise sqlite3.DatabaseError(f"its table of verdicts has the columns {columns}, not this version's")
                connection.execute("INSERT INTO verdicts (judge, item) VALUES ('', '')")  # writable? (rolled back)
                connection.rollback()
        except (OSError, sqlite3.Error) as error:
            why = f"{error}; give the judge another cache_dir, or remove the file"
            raise ConfigError(f"cannot use the verdict cache {self.path}: {why}") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        connection = sqlite3.connect(self.path, timeout=60)
        try:
            with connection:  # commits, or rolls back on an error
                yield connection
        finally:
            connection.close()

    def get_many(self, judge: str, items: list[str], scores: Collection[float]) -> dict[str, Row]:
        """The cached verdicts of ``items`` (those not cached are absent); a verdict whose score is neither missing
        (None) nor one of ``scores`` (the judge's scale) is absent too, with a warning."""
        found: dict[str, Row] = {}
        with self._connect() as connection:
            for start in range(0, len(items), 500):
                chunk = items[start : start + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT item, score, reason, raw FROM verdicts WHERE judge = ? AND item IN ({marks})"
                rows = connection.execute(query, [judge, *chunk])
                found.update({item: (score, reason, raw) for item, score, reason, raw in rows})
        off_scale = sorted({repr(row[0]) for row in found.values() if row[0] is not None and row[0] not in scores})
        if off_scale:
            log.warning(
                "%s: cached scores %s are off the judge's scale %s; asking the judge again",
                self.path,
                ", ".join(off_scale),
                sorted(scores),
            )
        return {item: row for item, row in found.items() if row[0] is None or row[0] in scores}

    def put_many(self, judge: str, verdicts: dict[str, Row]) -> None:
        """Store ``verdicts`` (item key -> row) of ``judge``, every secret in their text masked."""
        if not verdicts:
            return
        with self._connect() as connection:
            connection.executemany(
                "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?)",
                [(judge, item, score, mask(reason), mask(raw)) for item, (score, reason, raw) in verdicts.items()],
            )
