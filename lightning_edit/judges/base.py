"""The judge interface: (question, references, prediction, context) in, (score, reason, raw output) out, batched.

A :class:`Judge` subclass implements :meth:`Judge.evaluate` for a batch of :class:`JudgeInput` and describes its
identity (:meth:`Judge.settings`: everything that changes a verdict, never a secret). :meth:`Judge.judge` wraps it
with the on-disk verdict cache (:mod:`lightning_edit.judges.cache`) and keeps :class:`JudgeStats`, by distinct item:
verdicts, how many came from the cache, failed requests, missing verdicts, and every verdict's score (for agreement
between judges, :mod:`lightning_edit.judges.agreement`).

A verdict whose score is None is **missing**: the judge's answer could not be parsed, was outside its scale, or the
request finally failed. The score kind then records the prompt as missing (left out of the means, counted as
``n_missing``), never as 0.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from lightning_edit.errors import UserError
from lightning_edit.judges.cache import VerdictCache
from lightning_edit.resources import user_cache_dir

Scale = Literal["binary", "likert7"]
#: the scores a verdict may have on each scale
SCORES: dict[Scale, frozenset[float]] = {"binary": frozenset({0.0, 1.0}), "likert7": frozenset(map(float, range(1, 8)))}


class JudgeFailedError(UserError):
    """Every request to a judge failed, so the metrics it grades have no value; names them, the judge and the results
    file that was written without them."""


@dataclass(frozen=True)
class JudgeInput:
    """One item to judge.

    Args:
        question: what the model was asked.
        references: the acceptable answers (one or more).
        prediction: the model's answer.
        context: named extras a judge may read (an LLM judge's template fields, e.g. ``target_true``), as
            ``(name, value)`` pairs so that the input is hashable.
    """

    question: str
    references: tuple[str, ...]
    prediction: str
    context: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls, question: str, references: str | Sequence[str], prediction: str, context: Mapping[str, Any] | None = None
    ) -> JudgeInput:
        """An input from one reference or several, and a context mapping."""
        references = (references,) if isinstance(references, str) else tuple(references)
        return cls(question, references, prediction, tuple(sorted((k, str(v)) for k, v in (context or {}).items())))

    def key(self) -> str:
        """A stable digest of the input (cache keys, agreement items)."""
        return stable_digest([self.question, list(self.references), self.prediction, [list(p) for p in self.context]])


@dataclass(frozen=True)
class Verdict:
    """A judge's decision on one item.

    Args:
        score: the score (0/1 for binary judges, 1-7 on a Likert scale), or None if missing.
        reason: why, in a sentence (the judge's own, or the parser's reason for a missing verdict).
        raw: the judge's raw output ("" for judges without one).
        failed: the request to the judge finally failed (a missing verdict that a rerun asks again).
        cached: the verdict came from the cache.
    """

    score: float | None
    reason: str
    raw: str = ""
    failed: bool = False
    cached: bool = False


@dataclass
class JudgeStats:
    """What a judge did since the last :meth:`Judge.take_stats`, by item (:meth:`JudgeInput.key`).

    The counts are of distinct items, so they are the same on 1 or N processes and however often an item is asked: a
    prompt two cases share, a case the distributed sampler repeats to even out the shards, an answer an edit left as
    it was. Two stats merge by union (:meth:`merge`).

    Attributes:
        judged: the items given a verdict (cached ones included).
        evaluated: the items the judge evaluated (the others were read from the cache).
        failed_requests: the items whose request failed at least once.
        scores: item key -> score of every verdict that is not missing.
    """

    judged: set[str] = field(default_factory=set)
    evaluated: set[str] = field(default_factory=set)
    failed_requests: set[str] = field(default_factory=set)
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def verdicts(self) -> int:
        """Items given a verdict."""
        return len(self.judged)

    @property
    def cached(self) -> int:
        """Items whose verdict was only read from the cache."""
        return len(self.judged - self.evaluated)

    @property
    def failed(self) -> int:
        """Items whose request failed and that no other request scored."""
        return len(self.failed_requests - self.scores.keys())

    @property
    def missing(self) -> int:
        """Items without a score: failed requests, answers that could not be parsed or were out of scale."""
        return len(self.judged - self.scores.keys())

    def merge(self, other: JudgeStats) -> None:
        """Add ``other``'s items (another process's, for instance) to these."""
        self.judged |= other.judged
        self.evaluated |= other.evaluated
        self.failed_requests |= other.failed_requests
        self.scores.update(other.scores)


class Judge:
    """Base of every judge.

    Args:
        cache_dir: directory of the verdict cache; None: judges whose verdicts are costly (:attr:`caches`) use
            ``$LIGHTNING_EDIT_CACHE/judges`` (default ``~/.cache/lightning_edit/judges``), the others none.

    Attributes:
        scale: ``binary`` (scores 0 and 1) or ``likert7`` (1 to 7), for agreement statistics.
        caches: whether verdicts go to the cache by default (LLM judges; exact match and sympy are cheap).
        convention: what a score means (written into results.json by the judged score kind).
    """

    scale: ClassVar[Scale] = "binary"
    caches: ClassVar[bool] = False
    convention: ClassVar[str] = ""

    def __init__(self, cache_dir: str | None = None):
        self.cache_dir = cache_dir
        self.stats = JudgeStats()
        self._cache: VerdictCache | None = None

    def settings(self) -> dict[str, Any]:
        """Everything that changes a verdict (model, template text, parameters); never a secret."""
        return {}

    def describe(self) -> dict[str, Any]:
        """What results.json records about the judge: its class and settings (a template by name and digest)."""
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", **self.settings()}

    def identity(self) -> str:
        """The digest of the class and its settings: the judge's part of every cache key."""
        return stable_digest([type(self).__module__, type(self).__qualname__, self.settings()])

    def check(self) -> None:
        """Raise a one-line :class:`~lightning_edit.errors.ConfigError` if the judge cannot give verdicts: a verdict
        cache it cannot use (here), a missing API key (subclasses). A benchmark makes its judged kinds as it reads its
        cases (:func:`~lightning_edit.judges.build_judge` calls it), so a fault stops the run before any weight
        changes."""
        self._verdict_cache()

    def check_input(self, item: JudgeInput) -> None:
        """Raise ValueError, saying why, if the judge cannot judge items such as ``item`` (whatever its prediction):
        an LLM judge's template placeholder the item lacks. The judged kind calls it on every prompt before any edit
        (nothing to check by default)."""

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        """The verdict of every item, in order (no cache); subclasses implement it."""
        raise NotImplementedError

    def judge(self, items: Sequence[JudgeInput]) -> list[Verdict]:
        """The verdict of every item, each distinct item evaluated once and, with a cache, at most once ever.

        A verdict whose request failed is not cached (a rerun asks again); an unparsable answer is. A cached score off
        the judge's scale is asked again, with a warning (:mod:`lightning_edit.judges.cache`).
        """
        unique = list(dict.fromkeys(items))
        cache = self._verdict_cache()
        identity = self.identity() if cache is not None else ""
        rows = (
            cache.get_many(identity, [item.key() for item in unique], SCORES[self.scale]) if cache is not None else {}
        )
        found = {key: Verdict(*row, cached=True) for key, row in rows.items()}
        todo = [item for item in unique if item.key() not in found]
        fresh = dict(zip(todo, self.evaluate(todo))) if todo else {}
        if cache is not None:
            cache.put_many(
                identity, {item.key(): (v.score, v.reason, v.raw) for item, v in fresh.items() if not v.failed}
            )
        verdicts = {item: fresh.get(item) or found[item.key()] for item in unique}
        for item, verdict in verdicts.items():
            key = item.key()
            self.stats.judged.add(key)
            if not verdict.cached:
                self.stats.evaluated.add(key)
            if verdict.failed:
                self.stats.failed_requests.add(key)
            if verdict.score is not None:
                self.stats.scores[key] = verdict.score
        return [verdicts[item] for item in items]

    def take_stats(self) -> JudgeStats:
        """The stats so far; the judge starts counting again from zero."""
        stats, self.stats = self.stats, JudgeStats()
        return stats

    def _verdict_cache(self) -> VerdictCache | None:
        if self.cache_dir is None and not self.caches:
            return None
        if self._cache is None:
            self._cache = VerdictCache(judge_cache_dir(self.cache_dir) / "verdicts.sqlite")
        return self._cache


def judge_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """The verdict cache directory: ``cache_dir``, else ``$LIGHTNING_EDIT_CACHE/judges``, else the user cache."""
    return Path(cache_dir).expanduser() if cache_dir is not None else user_cache_dir("judges")


def stable_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
