"""The toy judge's rating rules: four pure functions that rate a toy script on ScEdit's four 7-point scales, and
:class:`ToyRuleJudge`, the rules as a judge.

ScEdit's text level (:mod:`lightning_edit.data.scedit`) has a judge rate a generated script on four Likert scales.
The toy judge (``builtin:models/toy-judge-gpt2``, trained on :class:`~lightning_edit.toy.judge_corpus.JudgeCorpus`)
imitates these rules: :func:`executability`, :func:`coherence`, :func:`consistency` and :func:`completeness`, functions
of the script and the template's context fields, written after the templates' own instructions. They read the step
markers, the objects' names and capitalised words, never what a step means: rules of a toy, not a model of human
judgement.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from lightning_edit.data.scedit.datamodule import TEXT_METRICS
from lightning_edit.judges.base import Judge, JudgeInput, Verdict

_STEP = re.compile(r"Step (\d+):")
_NAME = re.compile(r"\b[A-Z][a-z]+\b")


class Context(NamedTuple):
    """The fields a judge template reads besides the script: ScEdit's ``_text_group`` gives the first four, the
    judged kind the stage (``post``: the edited model's script; ``pre``: the unedited model's, for ``_pre``)."""

    question: str
    prompt: str
    target_true: str
    target_new: str
    stage: str = "post"


class Rating(NamedTuple):
    """A rule's rating, 1 (worst) to 7 (best), and the reason it gives."""

    score: int
    reason: str


class Parsed(NamedTuple):
    """A script cut at its ``Step k:`` markers: the text before the first, and each step's number and text."""

    preamble: str
    steps: list[tuple[int, str]]

    @property
    def texts(self) -> list[str]:
        return [text for _, text in self.steps]

    @property
    def unfinished(self) -> bool:
        """The last step is empty or does not end with a full stop (the text was cut)."""
        return bool(self.steps) and not self.steps[-1][1].endswith(".")

    @property
    def repeated(self) -> bool:
        """A step's text repeats an earlier step's."""
        return len(set(self.texts)) < len(self.texts)


def parse(script: str) -> Parsed:
    """The script's preamble and ``(number, text)`` steps, texts stripped."""
    parts = _STEP.split(script)
    return Parsed(parts[0].strip(), [(int(n), text.strip()) for n, text in zip(parts[1::2], parts[2::2])])


def mentions(script: str, name: str) -> int:
    """How often ``name`` occurs in the script as whole words (case-sensitive)."""
    return len(re.findall(rf"(?<!\w){re.escape(name)}(?!\w)", script)) if name else 0


def foreign_names(script: str, context: Context) -> list[str]:
    """Capitalised words of the script that do not start a sentence or a step and that no context field has (the
    question, the fact prompt, the two objects): names of something the question is not about."""
    known = set(re.findall(r"\w+", " ".join(context[:4])))
    text = _STEP.sub(":", script)
    found = []
    for match in _NAME.finditer(text):
        before = text[: match.start()].rstrip()
        if before and before[-1] not in ".?!:" and match.group() not in known:
            found.append(match.group())
    return found


def executability(script: str, context: Context) -> Rating:
    """Are the steps well formed? (The template shows the judge the script only.)

    No ``Step k:`` marker: 1. Otherwise 7, less 2 if the steps are not numbered 1, 2, ..., n in order, 2 if a step
    repeats an earlier one, 1 if text comes before ``Step 1``, 1 if the last step is unfinished (no full stop);
    at least 1.
    """
    parsed = parse(script)
    if not parsed.steps:
        return Rating(1, "no steps")
    faults = {
        "steps not numbered 1 to n": (2, [n for n, _ in parsed.steps] != list(range(1, len(parsed.steps) + 1))),
        "a repeated step": (2, parsed.repeated),
        "text before the steps": (1, bool(parsed.preamble)),
        "an unfinished step": (1, parsed.unfinished),
    }
    return _deduct(7, 1, faults, "well-formed steps")


def coherence(script: str, context: Context) -> Rating:
    """Does the script follow the new fact, and stay on the question?

    The template's anchors: the true object named and the new one not, 1; both named, 2; neither, 3. The new object
    alone: 7, less 2 for a name the context does not give (:func:`foreign_names`), 1 if the new object is named more
    than once, 1 if it is not named inside a step (before ``Step 1``, or no steps); at least 4.
    """
    new = mentions(script, context.target_new)
    true = mentions(script, context.target_true)
    if true:
        return Rating(2, "names both objects") if new else Rating(1, "names the old object only")
    if not new:
        return Rating(3, "names neither object")
    parsed = parse(script)
    faults = {
        "names something off the question": (2, bool(foreign_names(script, context))),
        "names the new object twice": (1, new > 1),
        "the new object outside the steps": (1, not any(mentions(t, context.target_new) for t in parsed.texts)),
    }
    return _deduct(7, 4, faults, "follows the new fact")


def consistency(script: str, context: Context) -> Rating:
    """Is the script free of contradictions?

    The template's anchor: both objects named (which one holds cannot be told), 1. Otherwise 7, less 2 if the step
    numbers do not go up, 1 if a step repeats an earlier one, 2 for a name the context does not give (another
    candidate); at least 2.
    """
    if mentions(script, context.target_new) and mentions(script, context.target_true):
        return Rating(1, "names both objects")
    parsed = parse(script)
    numbers = [n for n, _ in parsed.steps]
    faults = {
        "step numbers out of order": (2, any(b <= a for a, b in zip(numbers, numbers[1:]))),
        "a repeated step": (1, parsed.repeated),
        "names something off the question": (2, bool(foreign_names(script, context))),
    }
    return _deduct(7, 2, faults, "no contradiction")


def completeness(script: str, context: Context) -> Rating:
    """Does the script answer the question in enough steps, by the stage's fact (the template's Tag)?

    ``1 + 2n`` for n steps (``Step k:`` markers), at most 7 (three steps, the toy world's scripts, are complete); less
    3 if the script names the other stage's object and not its own (stage ``post``: the old object and not the new
    one; ``pre``: the reverse), 1 if the last step is unfinished; at least 1. Naming neither costs nothing.
    """
    parsed = parse(script)
    steps = len(parsed.steps)
    right, wrong = (context.target_new, context.target_true) if context.stage == "post" else context[2:4]
    wrong_only = bool(mentions(script, wrong)) and not mentions(script, right)
    faults = {"names the other object only": (3, wrong_only), "an unfinished step": (1, parsed.unfinished)}
    return _deduct(min(1 + 2 * steps, 7), 1, faults, f"{steps} steps", always=True)


def _deduct(start: int, floor: int, faults: dict[str, tuple[int, bool]], clean: str, always: bool = False) -> Rating:
    """``start`` less the points of the faults found, at least ``floor``; the reason lists them (or ``clean``)."""
    found = [name for name, (_, present) in faults.items() if present]
    score = max(start - sum(points for points, present in faults.values() if present), floor)
    reason = ", ".join(([clean] if always or not found else []) + found)
    return Rating(score, reason)


#: judge template -> its rating rule
RULES: dict[str, Callable[[str, Context], Rating]] = {
    "scedit_executability": executability,
    "scedit_coherence": coherence,
    "scedit_consistency": consistency,
    "scedit_completeness": completeness,
}
SCALES = tuple(TEXT_METRICS.values())


class ToyRuleJudge(Judge):
    """The rules as a judge: the ratings ``toy-judge-gpt2`` was trained to give, exactly and without a model. For
    toy runs of ScEdit's text level, to set the toy judge's ratings against (``--data.judge
    '{"lightning_edit.toy.ToyRuleJudge": {}}'``; ScEdit gives each metric's template).

    Args:
        template: one of ScEdit's four templates (:data:`RULES`); the rule of that scale rates.
        cache_dir: see :class:`~lightning_edit.judges.base.Judge` (no cache by default: rules are cheap).
    """

    scale = "likert7"

    def __init__(self, template: str, cache_dir: str | None = None):
        if template not in RULES:
            raise ValueError(f"ToyRuleJudge rates ScEdit's scales {sorted(RULES)}, not template {template!r}")
        super().__init__(cache_dir)
        self.template = template
        self.convention = f"7-point Likert rating (1 worst, 7 best) by the toy rule of {template} (toy.judge_rules)"

    def settings(self) -> dict[str, str]:
        return {"template": self.template}

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        verdicts = []
        for item in items:
            fields = dict(item.context)
            missing = set(Context._fields[1:]) - set(fields)
            if missing:
                raise ValueError(f"ToyRuleJudge rates ScEdit scripts; the item has no {sorted(missing)}")
            rating = RULES[self.template](item.prediction, Context(item.question, **fields))
            verdicts.append(Verdict(float(rating.score), rating.reason))
        return verdicts
