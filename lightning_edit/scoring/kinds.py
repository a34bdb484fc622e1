"""Score kinds: how one evaluation prompt becomes one number, registered by name.

A benchmark's prompt group maps score kinds to the metric names it reports, ``{"prob": "ES"}``. A
:class:`ScoreKind` says, for one prompt (a :class:`PromptItem`):

- which computations it needs with the model as it is now (:meth:`ScoreKind.requests`) and, if it compares with the
  unedited model, with that model (:meth:`ScoreKind.reference_requests`);
- how their results make the prompt's value (:meth:`ScoreKind.value`);
- its convention (written next to every value in results.json) and a short label for tables.

A computation is a :class:`Request`, a hashable value such as ``Target(prompt, answer)`` (teacher-forced scoring) or
``Sample(prompt, seed, ...)`` (a sampled continuation). The scorer collects the requests of every kind of every prompt,
runs each distinct request once (one batched runner call per request type, :func:`register_request`) and gives each
kind the results of its own requests, in the order it asked for them. So kinds that share a pair (``prob``,
``token_acc``, ``logprob`` and ``agreement`` all read ``Target(prompt, expected)``) cost one forward pass together.

A benchmark brings its own kind (and, if it needs another computation, its own request type and runner) by
subclassing :class:`ScoreKind` and calling :func:`register_kind`; nothing in the core changes.

The conventions of the built-in kinds are documented in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
    """A computation a score kind needs; subclasses are frozen dataclasses with a runner (:func:`register_request`)."""


@dataclass(frozen=True)
class Target(Request):
    """Teacher-forced scoring of ``answer`` after ``prompt`` (``prompt + " " + answer``) -> :class:`TargetScore`."""

    prompt: str
    answer: str


@dataclass(frozen=True)
class Sample(Request):
    """A sampled continuation of ``prompt`` (top-k, ``max_length`` tokens of prompt and text together) -> str.

    The requests of one ``seed`` are generated together, in the order they were first asked for, with that seed.
    """

    prompt: str
    seed: int
    max_length: int
    top_k: int


Runner = Callable[..., list]
_RUNNERS: dict[type[Request], Runner] = {}
_ROUTED: set[type[Request]] = set()


def register_request(request_type: type[Request], runner: Runner, routed: bool = False) -> None:
    """Make ``runner(model, tokenizer, requests, batch_size) -> results`` (one per request, in order) compute
    requests of ``request_type``. A ``routed`` runner also takes ``owners`` (one per request, or None) and runs each
    forward inside :func:`~lightning_edit.models.row_updates.routed` with its rows' owners, so requests of many
    independently edited models share its batches; other runners are called once per owner."""
    _RUNNERS[request_type] = runner
    if routed:
        _ROUTED.add(request_type)


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
        if request_type not in _RUNNERS:
            raise ValueError(f"no runner is registered for requests of type {request_type.__name__}")
        runner = _RUNNERS[request_type]
        if owners is None:
            results.update(zip(group, runner(model, tokenizer, group, batch_size)))
        elif request_type in _ROUTED:
            values = runner(model, tokenizer, [r for _, r in group], batch_size, owners=[o for o, _ in group])
            results.update(zip(group, values))
        else:
            for owner in dict.fromkeys(o for o, _ in group):
                mine = [key for key in group if key[0] == owner]
                with routed(model, owner):
                    results.update(zip(mine, runner(model, tokenizer, [r for _, r in mine], batch_size)))
    return results


def _run_targets(model, tokenizer, requests: list[Target], batch_size: int, owners=None) -> list[TargetScore]:
    prompts, answers = [r.prompt for r in requests], [r.answer for r in requests]
    return score_targets(model, tokenizer, prompts, answers, batch_size, owners=owners)


def _run_samples(model, tokenizer, requests: list[Sample], batch_size: int) -> list[str]:
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


register_request(Target, _run_targets, routed=True)
register_request(Sample, _run_samples)


class ScoreKind:
    """A way of scoring one prompt; subclass it, set the class attributes and register an instance.

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


_KINDS: dict[str, ScoreKind] = {}


def register_kind(kind: ScoreKind) -> ScoreKind:
    """Register ``kind`` under ``kind.name``; registering another class under a taken name is an error."""
    known = _KINDS.get(kind.name)
    if known is not None and type(known) is not type(kind):
        raise ValueError(f"score kind {kind.name!r} is already registered by {type(known).__name__}")
    _KINDS[kind.name] = kind
    return kind


def score_kind(name: str) -> ScoreKind:
    """The registered kind called ``name``."""
    if name not in _KINDS:
        raise ValueError(f"unknown score kind {name!r}; known: {sorted(_KINDS)}")
    return _KINDS[name]


def score_kinds() -> dict[str, ScoreKind]:
    """Every registered kind, by name."""
    return dict(_KINDS)


class ProbabilityComparison(ScoreKind):
    name, label, needs_alternative = "prob", "probability comparison", True
    convention = (
        "probability comparison: 1 if mean per-token NLL of the expected answer < that of the alternative "
        "(ROME/MEMIT CounterFact ES/PS/NS)"
    )

    def requests(self, item, config):
        return [Target(item.prompt, item.expected), Target(item.prompt, item.alternative)]

    def value(self, item, current, unedited):
        return prefers(current[0], current[1])


class TokenAccuracy(ScoreKind):
    name, label = "token_acc", "token accuracy"
    convention = (
        "teacher-forced token accuracy of the expected answer after prompt + ' ' (EasyEdit rewrite_acc; ROME zsRE)"
    )

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def value(self, item, current, unedited):
        return current[0].accuracy


class Agreement(ScoreKind):
    name, label = "agreement", "argmax agreement"
    convention = "share of argmax tokens along the expected answer equal to the unedited model's (EasyEdit locality)"

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def reference_requests(self, item, config):
        return [Target(item.bare_prompt, item.expected)]

    def value(self, item, current, unedited):
        return agreement(unedited[0].argmax_ids, current[0])


class LogProbability(ScoreKind):
    name, label = "logprob", "log-probability"
    convention = "mean per-token log-probability (nats) of the expected answer after prompt + ' ' (BAKE Figure 3)"

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def value(self, item, current, unedited):
        return float(current[0].logprobs.mean())


class GenerationEntropy(ScoreKind):
    name, label = "entropy", "n-gram entropy"
    convention = "weighted bi/tri-gram entropy H2/3 + 2*H3/3 (bits) of prompt + generated text (ROME GE)"

    def requests(self, item, config):
        # seeded per case, so a text does not depend on batching or on the number of processes
        seed = config.seed + item.case_id
        return [Sample(item.prompt, seed, config.generation_max_length, config.generation_top_k)]

    def value(self, item, current, unedited):
        return ngram_entropy(item.prompt + current[0])


class Filtered(ScoreKind):
    name, label, scored = "filtered", "left out by the pre-edit filter", False
    convention = (
        "1 if the prompt was left out because the unedited model did not prefer the original answer "
        "(BAKE's pre-edit filter of reverse prompts)"
    )


class Derived(ScoreKind):
    name, label, scored = "derived", "derived", False
    convention = "computed from the aggregates of other metrics, aggregation by aggregation (see the metric's formula)"


for _kind in (ProbabilityComparison, TokenAccuracy, Agreement, LogProbability, GenerationEntropy, Filtered, Derived):
    register_kind(_kind())
