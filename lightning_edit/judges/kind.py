"""A judge as a score kind: generate an answer to the prompt, then judge it ("generate, then judge").

Two request types: :class:`Generate` (a greedy or sampled continuation, cut at stop strings) and :class:`Judged` (a
judge's verdict on a generation). A :class:`Judged` batch first runs the generations it needs (each distinct one once,
so two judges of one answer share its generation), then calls each judge once with all its items. A benchmark makes
a judged kind with its name, its judge (an instance or a config spec, :func:`~lightning_edit.judges.build_judge`)
and its generation settings, and lists it among its own kinds::

    JudgedKind("rule_equivalence", {"class_path": "symbolic_math"}, Generation(max_new_tokens=32))
    # then, in a prompt group: metrics={"rule_equivalence": "Rel"}

Per prompt, the judge sees the group's ``details``: ``question`` (default: the prompt without in-context text),
``references`` (default: the expected answer) and ``context`` (fields for an LLM judge's template). A missing verdict
makes the prompt's value None: it is left out of the metric's means and counted as ``n_missing``.

:func:`judge_report` collects, at the end of a run, what the judges of a benchmark's kinds did (on every process)
for results.json: the judge's class and settings (template name and digest), verdicts, how many came from the cache,
failed and missing ones, and the agreement between judges that scored the same items.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from transformers import PreTrainedTokenizerBase

from lightning_edit.judges import build_judge
from lightning_edit.judges.agreement import agreement_table
from lightning_edit.judges.base import Judge, JudgeInput, JudgeStats, Verdict
from lightning_edit.models.tokenization import encode_prompt, format_prompt
from lightning_edit.scoring.generation import generate
from lightning_edit.scoring.kinds import PromptItem, Request, ScoreKind, run_requests


@dataclass(frozen=True)
class Generation:
    """How a judged kind generates the answer it judges.

    Args:
        max_new_tokens: token budget of the answer.
        do_sample: sample (top-k, temperature; seeded with ``scoring.seed + case_id``) instead of greedy decoding.
        top_k: top-k of sampling.
        temperature: temperature of sampling.
        stop: the answer ends before the first of these.
        per_expected_token: ``max_new_tokens`` counts per token of the expected answer (:func:`answer_budget`;
            DMLE's ``rule_edit`` generation: 3 per token).
        template: the prompt is asked inside it, ``{}`` standing for it (a QA instruction); in-context text, if any,
            stays before the template.
        chat_template: ask the whole prompt (in-context text and template included) as one user turn of the
            tokenizer's chat template (unless ``scoring.chat_template`` already formats every prompt).
        trailing: one of these is removed from the end of the answer, if it ends with one (EasyEdit's and DMLE's
            cleaning: a final ``.`` or newline), before surrounding whitespace is stripped.
    """

    max_new_tokens: int = 64
    do_sample: bool = False
    top_k: int | None = None
    temperature: float = 1.0
    stop: tuple[str, ...] = ("\n",)
    per_expected_token: bool = False
    template: str = "{}"
    chat_template: bool = False
    trailing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generate(Request):
    """A continuation of ``prompt`` (greedy unless ``do_sample``), cut before the first stop string -> str.

    With ``per_token_of``, the budget is ``max_new_tokens`` per token of that text (:func:`answer_budget`); one of
    ``trailing`` is removed from the end of the text (:attr:`Generation.trailing`).
    """

    prompt: str
    max_new_tokens: int
    do_sample: bool = False
    top_k: int | None = None
    temperature: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    per_token_of: str | None = None
    chat_template: bool = False
    trailing: tuple[str, ...] = ()
    routed: ClassVar[bool] = True

    @classmethod
    def run(cls, model, tokenizer, requests: list[Generate], batch_size: int, owners=None) -> list[str]:
        texts: dict[int, str] = {}
        calls: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            budget = answer_budget(tokenizer, r.max_new_tokens, r.per_token_of)
            calls.setdefault((budget, r.do_sample, r.top_k, r.temperature, r.seed, r.stop), []).append(i)
        for (max_new_tokens, do_sample, top_k, temperature, seed, stop), indices in calls.items():
            prompts = [format_prompt(tokenizer, requests[i].prompt, requests[i].chat_template) for i in indices]
            outputs = generate(
                model, tokenizer, prompts, max_new_tokens=max_new_tokens, do_sample=do_sample, top_k=top_k,
                temperature=temperature, stop_strings=stop, seed=seed, batch_size=batch_size,
                owners=None if owners is None else [owners[i] for i in indices],
            )  # fmt: skip
            texts.update((i, without_trailing(text, requests[i].trailing)) for i, text in zip(indices, outputs))
        return [texts[i] for i in range(len(requests))]


@dataclass(frozen=True)
class Judged(Request):
    """The verdict of ``judge`` on the text of ``generation`` -> :class:`JudgedAnswer` (a judge is equal only to
    itself: two kinds' judges never share a verdict)."""

    judge: Judge
    generation: Generate
    question: str
    references: tuple[str, ...]
    context: tuple[tuple[str, str], ...] = ()
    routed: ClassVar[bool] = True

    @classmethod
    def run(cls, model, tokenizer, requests: list[Judged], batch_size: int, owners=None) -> list[JudgedAnswer]:
        generations = [r.generation for r in requests]
        texts = run_requests(model, tokenizer, generations, batch_size, owners)
        answers = [
            (texts[g] if owners is None else texts[owner, g]).strip()
            for g, owner in zip(generations, owners or [None] * len(requests))
        ]
        by_judge: dict[Judge, list[int]] = {}
        for i, request in enumerate(requests):
            by_judge.setdefault(request.judge, []).append(i)
        verdicts: dict[int, Verdict] = {}
        for judge, indices in by_judge.items():
            items = [
                JudgeInput(requests[i].question, requests[i].references, answers[i], requests[i].context)
                for i in indices
            ]
            verdicts.update(zip(indices, judge.judge(items)))
        return [JudgedAnswer(verdicts[i], answers[i]) for i in range(len(requests))]


def answer_budget(tokenizer: PreTrainedTokenizerBase, max_new_tokens: int, per_token_of: str | None) -> int:
    """The new tokens an answer may take: ``max_new_tokens``, or that many per token of ``per_token_of``, counted
    without the special tokens a tokenizer adds (LLaMA's BOS), as DMLE's reference code counts the answer's tokens."""
    if per_token_of is None:
        return max_new_tokens
    return max_new_tokens * len(tokenizer.encode(per_token_of, add_special_tokens=False))


def without_trailing(text: str, trailing: tuple[str, ...]) -> str:
    """``text`` without the first of ``trailing`` it ends with (one removal at most)."""
    end = next((t for t in trailing if t and text.endswith(t)), "")
    return text[: len(text) - len(end)]


class JudgedAnswer(NamedTuple):
    """The result of a :class:`Judged` request: the judge's verdict on the generated answer."""

    verdict: Verdict
    answer: str


class JudgedKind(ScoreKind):
    """Generate an answer to the prompt, then judge it; the value is the verdict's score (None if missing).

    Args:
        name: the kind's name.
        judge: the judge: an instance, a short name, a class path or ``{"class_path": ..., "init_args": {...}}``.
        generation: how the answer is generated (default: :class:`Generation`'s defaults).
        label: a short label for tables (default: ``judged (<judge class>)``).
        against_unedited: the reference is the unedited model's answer to the prompt (generated the same way), not
            the expected answer: a locality that asks whether the answer stayed the same.
    """

    def __init__(
        self,
        name: str,
        judge: str | Mapping[str, Any] | Judge,
        generation: Generation | None = None,
        label: str | None = None,
        against_unedited: bool = False,
    ):
        self.judge = judge = build_judge(judge)
        generation = generation or Generation()
        self.name = name
        self.generation = generation
        self.against_unedited = against_unedited
        self.label = label or f"judged ({type(judge).__name__})"
        how = "sampled" if generation.do_sample else "greedy"
        how += " (the prompt as a user turn of the chat template)" if generation.chat_template else ""
        per = " per token of the expected answer" if generation.per_expected_token else ""
        reference = "the unedited model's answer" if against_unedited else "the expected answer"
        self.convention = (
            f"{how} answer of at most {generation.max_new_tokens} new tokens{per}, cut at {list(generation.stop)}"
            + (f", one final {' or '.join(map(repr, generation.trailing))} removed" if generation.trailing else "")
            + ", "
            f"judged against {reference} by {type(judge).__name__}: {judge.convention}; missing verdicts are left "
            "out (n_missing)"
        )

    def _asked(self, item: PromptItem, prompt: str) -> str:
        """The prompt inside the generation's template; in-context text, if any, stays before the template."""
        if self.generation.template == "{}":
            return prompt
        context = prompt[: -len(item.bare_prompt)] if prompt.endswith(item.bare_prompt) else ""
        return context + self.generation.template.format(prompt[len(context) :])

    def _generate(self, item: PromptItem, prompt: str, config: Any) -> Generate:
        g = self.generation
        prompt = self._asked(item, prompt)
        seed = config.seed + item.case_id if g.do_sample else 0
        per_token_of = item.expected if g.per_expected_token else None
        chat = g.chat_template and not item.chat_template  # scoring.chat_template formatted the prompt already
        return Generate(
            prompt, g.max_new_tokens, g.do_sample, g.top_k, g.temperature, seed, g.stop, per_token_of, chat, g.trailing
        )

    def _input(self, item: PromptItem, references: str | tuple[str, ...], prediction: str) -> JudgeInput:
        context = {k: str(v) for k, v in item.details.get("context", {}).items()} | {"stage": item.stage}
        return JudgeInput.of(item.details.get("question", item.bare_prompt), references, prediction, context)

    def check(self, item: PromptItem, tokenizer: PreTrainedTokenizerBase, positions: int | None) -> None:
        """The prompt and the answer's whole budget must fit in the model's positions, and the judge must be able to
        judge the item (:meth:`~lightning_edit.judges.base.Judge.check_input`: an LLM judge's template fields)."""
        self.judge.check_input(self._input(item, item.details.get("references", item.expected), ""))
        g = self.generation
        budget = answer_budget(tokenizer, g.max_new_tokens, item.expected if g.per_expected_token else None)
        chat = g.chat_template and not item.chat_template
        length = len(encode_prompt(tokenizer, format_prompt(tokenizer, self._asked(item, item.prompt), chat)))
        if positions is not None and length + budget > positions:
            raise ValueError(
                f"the prompt {item.prompt[:60]!r}... is {length} tokens long and its generated answer may take "
                f"{budget} more, more than the model's {positions} positions: shorten it or leave the record out"
            )

    def requests(self, item: PromptItem, config: Any) -> list[Request]:
        generation = self._generate(item, item.prompt, config)
        if self.against_unedited:
            return [generation]
        judged = self._input(item, item.details.get("references", item.expected), "")
        return [Judged(self.judge, generation, judged.question, judged.references, judged.context)]

    def reference_requests(self, item: PromptItem, config: Any) -> list[Request]:
        return [self._generate(item, item.bare_prompt, config)] if self.against_unedited else []

    def value(self, item: PromptItem, current: list, unedited: list) -> float | None:
        if not self.against_unedited:
            return current[0].verdict.score
        (verdict,) = self.judge.judge([self._input(item, unedited[0].strip(), current[0].strip())])
        return verdict.score

    def answer(self, item: PromptItem, current: list) -> str:
        return current[0].strip() if self.against_unedited else current[0].answer


def judges_of(kinds: Mapping[str, ScoreKind]) -> dict[str, Judge]:
    """The judge of each judged kind among ``kinds``, by kind name."""
    return {name: kind.judge for name, kind in kinds.items() if isinstance(kind, JudgedKind)}


def reset_judge_stats(kinds: Mapping[str, ScoreKind]) -> None:
    """Forget this process's counts so far of the judges of ``kinds`` (a run that stopped, a validate without a
    report)."""
    for judge in judges_of(kinds).values():
        judge.take_stats()


def judge_report(kinds: Mapping[str, ScoreKind]) -> dict[str, Any]:
    """What the judges of ``kinds`` did since the last report, gathered from every process (each must call it):
    ``{"judges": {kind: {class, settings, verdicts, from_cache, failed, missing}}, "judge_agreement": [...]}``,
    or ``{}`` if no judge gave a verdict. The judges' counts start again from zero."""
    judges = judges_of(kinds)
    local = {name: judge.take_stats() for name, judge in judges.items() if judge.stats.verdicts}
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        shares: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(shares, local)
    else:
        shares = [local]
    merged: dict[str, JudgeStats] = {}
    for share in shares:
        for name, stats in share.items():
            merged.setdefault(name, JudgeStats()).merge(stats)
    if not merged:
        return {}
    described = {
        name: {
            **judges[name].describe(),
            "verdicts": stats.verdicts,
            "from_cache": stats.cached,
            "failed": stats.failed,
            "missing": stats.missing,
        }
        for name, stats in sorted(merged.items())
    }
    scored = {name: (judges[name].scale, stats.scores) for name, stats in merged.items()}
    return {"judges": described, "judge_agreement": agreement_table(scored)}
