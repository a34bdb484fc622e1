"""Score kinds: how one evaluation prompt becomes one number, registered by name.

A benchmark's prompt group maps score kinds to the metric names it reports, ``{"prob": "ES"}``. A
:class:`ScoreKind` says, for one prompt (a :class:`PromptItem`):

- which computations it needs with the model as it is now (:meth:`ScoreKind.requests`) and, if it compares with the
  unedited model, with that model (:meth:`ScoreKind.reference_requests`);
- how their results make the prompt's value (:meth:`ScoreKind.value`);
- its convention (written next to every value in results.json) and a short label for tables.

A computation is a :class:`Request`, a hashable value such as ``Target(prompt, answer)`` (teacher-forced scoring) or
``Sample(prompt, seed, ...)`` (a sampled continuation), whose type says how to compute a list of them
(:meth:`Request.run`). The scorer collects the requests of every kind of every prompt, runs each distinct request
once (one batched call per request type) and gives each kind the results of its own requests, in the order it asked
for them. So kinds that share a pair (``prob``, ``token_acc``, ``logprob`` and ``agreement`` all read
``Target(prompt, expected)``) cost one forward pass together.

There is no registry: a benchmark names the kinds its groups use (``EditDataModule.own_kinds``, added to
:data:`BUILTIN_KINDS`) and the scorer, the metrics and the report take that mapping from it. A benchmark brings its
own kind (and, if it needs another computation, its own request type) by subclassing :class:`ScoreKind`; nothing in
the core changes.

The conventions of the built-in kinds are documented in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.metrics.entropy import ngram_entropy
from lightning_edit.models.row_updates import routed
from lightning_edit.scoring.generation import generate
from lightning_edit.scoring.targets import TargetScore, agreement, prefers, score_targets

Stage = Literal["pre", "post"]


@dataclass(frozen=True)
class PromptItem:
    """One evaluation prompt, as a score kind sees it.

    Args:
        case_id: the edit case.
        group: the prompt group's name.
        index: the prompt's position in its group.
        prompt: the prompt as scored now (in-context text and chat template applied).
        bare_prompt: the prompt as the unedited model's reference scores it (chat template, no in-context text).
        expected: the answer the model should give.
        alternative: the competing answer (None if the group has none).
        details: per-prompt extras of the group that a benchmark's own kinds read (options, references, ...).
        stage: ``post`` when the model is scored as edited (every run's metrics), ``pre`` for the unedited model's
            ``_pre`` scores and reference.
        chat_template: the prompts are already in the tokenizer's chat template (``scoring.chat_template``).
    """

    case_id: int
    group: str
    index: int
    prompt: str
    bare_prompt: str
    expected: str
    alternative: str | None
    details: Mapping[str, Any] = field(default_factory=dict)
    stage: Stage = "post"
    chat_template: bool = False


class Request:
    """A computation a score kind needs; subclasses are frozen dataclasses that compute a list of them (:meth:`run`).

    Attributes:
        routed: :meth:`run` takes ``owners`` (one per request, or None) and runs each forward inside
            :func:`~lightning_edit.models.row_updates.routed` with its rows' owners, so requests of many
            independently edited models share its batches; the scorer calls other types once per owner.
    """

    routed: ClassVar[bool] = False

    @classmethod
    def run(cls, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, requests: list, batch_size: int) -> list:
        """The result of each of ``requests`` (all of this type), in order (with ``owners=`` if :attr:`routed`)."""
        raise NotImplementedError(f"{cls.__name__} says what it computes but not how (Request.run)")


@dataclass(frozen=True)
class Target(Request):
    """Teacher-forced scoring of ``answer`` after ``prompt`` (``prompt + " " + answer``) -> :class:`TargetScore`."""

    prompt: str
    answer: str
    routed: ClassVar[bool] = True

    @classmethod
    def run(cls, model, tokenizer, requests: list[Target], batch_size: int, owners=None) -> list[TargetScore]:
        prompts = [r.prompt for r in requests]
        answers = [r.answer for r in requests]
        return score_targets(model, tokenizer, prompts, answers, batch_size, owners=owners)


@dataclass(frozen=True)
class Sample(Request):
    """A sampled continuation of ``prompt`` (top-k, ``max_length`` tokens of prompt and text together) -> str.

    The requests of one ``seed`` are generated together, in the order they were first asked for, with that seed.
    """

    prompt: str
    seed: int
    max_length: int
    top_k: int

    @classmethod
    def run(cls, model, tokenizer, requests: list[Sample], batch_size: int) -> list[str]:
        texts: dict[Sample, str] = {}
        calls: dict[tuple[int, int, int], list[Sample]] = {}
        for request in requests:
            calls.setdefault((request.seed, request.max_length, request.top_k), []).append(request)
        for (seed, max_length, top_k), group in calls.items():
            prompts = [r.prompt for r in group]
            outputs = generate(
                model, tokenizer, prompts, max_length=max_length, do_sample=True, top_k=top_k, seed=seed,
                batch_size=batch_size,
            )  # fmt: skip
            texts.update(zip(group, outputs))
        return [texts[r] for r in requests]


def run_requests(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: Sequence[Request],
    batch_size: int,
    owners: Sequence[int] | None = None,
) -> dict[Any, Any]:
    """The result of every request, each computed once: one runner call per request type, in first-asked order.

    With ``owners`` (one per request: whose row updates it sees), results are keyed by ``(owner, request)``.
    """
    keys = list(dict.fromkeys(requests if owners is None else zip(owners, requests)))
    by_type: dict[type[Request], list] = {}
    for key in keys:
        by_type.setdefault(type(key if owners is None else key[1]), []).append(key)
    results: dict[Any, Any] = {}
    for request_type, group in by_type.items():
        if owners is None:
            results.update(zip(group, request_type.run(model, tokenizer, group, batch_size)))
        elif request_type.routed:
            values = request_type.run(model, tokenizer, [r for _, r in group], batch_size, owners=[o for o, _ in group])
            results.update(zip(group, values))
        else:
            for owner in dict.fromkeys(o for o, _ in group):
                mine = [key for key in group if key[0] == owner]
                with routed(model, owner):
                    results.update(zip(mine, request_type.run(model, tokenizer, [r for _, r in mine], batch_size)))
    return results


class ScoreKind:
    """A way of scoring one prompt; subclass it and set the class attributes; a benchmark holds the instances.

    Attributes:
        name: the key benchmarks use in a prompt group's ``metrics``.
        label: a short label for tables.
        convention: what a value means and where the convention comes from (written into results.json).
        higher_is_better: whether a larger value is better.
        needs_alternative: whether the group must give a competing answer per prompt (:attr:`PromptItem.alternative`).
        scored: False for kinds whose values the scorer does not compute per prompt (``filtered``, ``derived``).
    """

    name: ClassVar[str]
    label: ClassVar[str]
    convention: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    needs_alternative: ClassVar[bool] = False
    scored: ClassVar[bool] = True

    def requests(self, item: PromptItem, config: Any) -> list[Request]:
        """What to compute with the current model (``config``: the run's ScoringConfig)."""
        return []

    def reference_requests(self, item: PromptItem, config: Any) -> list[Request]:
        """What to compute with the unedited model (none by default)."""
        return []

    def check(self, item: PromptItem, tokenizer: PreTrainedTokenizerBase, positions: int | None) -> None:
        """Raise ValueError, saying why, if this kind cannot score ``item`` with ``tokenizer`` on a model of
        ``positions`` maximum positions (None: unbounded); called on every prompt before any weight changes (nothing
        to check by default)."""

    def value(self, item: PromptItem, current: Sequence[Any], unedited: Sequence[Any]) -> float | None:
        """The prompt's value from the results of :meth:`requests` and :meth:`reference_requests`, in order; None
        if it is missing (left out of the means, counted as ``n_missing``)."""
        raise NotImplementedError(f"score kind {self.name!r} has no per-prompt value")

    def answer(self, item: PromptItem, current: Sequence[Any]) -> str | None:
        """The text the model answered, for kinds that generate one (kept in cases.jsonl); None by default."""
        return None


def kinds_by_name(kinds: Iterable[ScoreKind]) -> dict[str, ScoreKind]:
    """``kinds`` by name; two kinds of one name are an error."""
    table: dict[str, ScoreKind] = {}
    for kind in kinds:
        if kind.name in table:
            raise ValueError(f"two score kinds are named {kind.name!r}: {type(table[kind.name]).__name__} and "
                             f"{type(kind).__name__}")  # fmt: skip
        table[kind.name] = kind
    return table


def check_metrics(kinds: Mapping[str, ScoreKind], names: Iterable[str], alternatives: bool, filtered: bool) -> None:
    """Raise ValueError, saying why, unless a prompt group can be scored by the kinds ``names``: each one of
    ``kinds``, computed per prompt, and the group has ``alternatives`` when a kind compares with one or the group is
    ``filtered`` before editing (BAKE)."""
    unknown = [name for name in names if name not in kinds]
    if unknown:
        raise ValueError(f"unknown score kind(s) {unknown}; the benchmark's kinds: {sorted(kinds)}")
    unscored = [name for name in names if not kinds[name].scored]
    if unscored:
        raise ValueError(f"score kinds {unscored} are not computed per prompt")
    comparing = [name for name in names if kinds[name].needs_alternative]
    if not alternatives and (filtered or comparing):
        raise ValueError(f"a group filtered before editing or scored by {comparing} needs alternatives")


class ProbabilityComparison(ScoreKind):
    name = "prob"
    label = "probability comparison"
    needs_alternative = True
    convention = (
        "probability comparison: 1 if mean per-token NLL of the expected answer < that of the alternative "
        "(ROME/MEMIT CounterFact ES/PS/NS)"
    )

    def requests(self, item, config):
        return [Target(item.prompt, item.expected), Target(item.prompt, item.alternative)]

    def value(self, item, current, unedited):
        return prefers(current[0], current[1])


class TokenAccuracy(ScoreKind):
    name = "token_acc"
    label = "token accuracy"
    convention = (
        "teacher-forced token accuracy of the expected answer after prompt + ' ' (EasyEdit rewrite_acc; ROME zsRE)"
    )

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def value(self, item, current, unedited):
        return current[0].accuracy


class Agreement(ScoreKind):
    name = "agreement"
    label = "argmax agreement"
    convention = "share of argmax tokens along the expected answer equal to the unedited model's (EasyEdit locality)"

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def reference_requests(self, item, config):
        return [Target(item.bare_prompt, item.expected)]

    def value(self, item, current, unedited):
        return agreement(unedited[0].argmax_ids, current[0])


class LogProbability(ScoreKind):
    name = "logprob"
    label = "log-probability"
    convention = "mean per-token log-probability (nats) of the expected answer after prompt + ' ' (BAKE Figure 3)"

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def value(self, item, current, unedited):
        return float(current[0].logprobs.mean())


class GenerationEntropy(ScoreKind):
    name = "entropy"
    label = "n-gram entropy"
    convention = "weighted bi/tri-gram entropy H2/3 + 2*H3/3 (bits) of prompt + generated text (ROME GE)"

    def requests(self, item, config):
        # seeded per case, so a text does not depend on batching or on the number of processes
        seed = config.seed + item.case_id
        return [Sample(item.prompt, seed, config.generation_max_length, config.generation_top_k)]

    def value(self, item, current, unedited):
        return ngram_entropy(item.prompt + current[0])


class Filtered(ScoreKind):
    name = "filtered"
    label = "left out by the pre-edit filter"
    scored = False
    convention = (
        "1 if the prompt was left out because the unedited model did not prefer the original answer "
        "(BAKE's pre-edit filter of reverse prompts)"
    )


class Derived(ScoreKind):
    name = "derived"
    label = "derived"
    scored = False
    convention = "computed from the aggregates of other metrics, aggregation by aggregation (see the metric's formula)"


#: The kinds every benchmark has (read-only); a benchmark adds its own (``EditDataModule.own_kinds``).
BUILTIN_KINDS: Mapping[str, ScoreKind] = MappingProxyType(
    kinds_by_name(
        kind()
        for kind in (
            ProbabilityComparison,
            TokenAccuracy,
            Agreement,
            LogProbability,
            GenerationEntropy,
            Filtered,
            Derived,
        )
    )
)
