"""Exact match and containment after SQuAD normalisation, and identical text, against one reference or several."""

from __future__ import annotations

import re
import string

from lightning_edit.judges.base import Judge, JudgeInput, Verdict

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's ``normalize_answer``: lowercase, strip punctuation and the articles a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


class ExactMatchJudge(Judge):
    """1 if the normalised prediction equals a normalised reference, else 0 (SQuAD EM; EasyEdit without a key)."""

    convention = "1 if the SQuAD-normalised prediction equals a normalised reference (SQuAD exact match)"

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        verdicts = []
        for item in items:
            prediction = normalize_answer(item.prediction)
            match = next((r for r in item.references if normalize_answer(r) == prediction), None)
            reason = f"matches reference {match!r}" if match is not None else f"{prediction!r} matches no reference"
            verdicts.append(Verdict(float(match is not None), reason))
        return verdicts


class ContainsJudge(Judge):
    """1 if a normalised reference occurs in the normalised prediction as whole words, else 0 (QAEdit's lenient
    grade of a generated answer: "Paris, the capital" contains "Paris", "Parisian" does not)."""

    convention = "1 if a SQuAD-normalised reference occurs, as whole words, in the normalised prediction"

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        verdicts = []
        for item in items:
            prediction = f" {normalize_answer(item.prediction)} "
            match = next((r for r in item.references if f" {normalize_answer(r)} " in prediction), None)
            reason = f"contains reference {match!r}" if match is not None else f"{prediction.strip()!r} contains none"
            verdicts.append(Verdict(float(match is not None), reason))
        return verdicts


class SameTextJudge(Judge):
    """1 if the prediction is the very text of a reference, else 0: no normalisation (DMLE's and EasyEdit's
    pre/post locality of generated answers, which compares the two decoded strings)."""

    convention = "1 if the prediction is character for character a reference (no normalisation)"

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        verdicts = []
        for item in items:
            same = item.prediction in item.references
            verdicts.append(Verdict(float(same), "the same text" if same else "another text"))
        return verdicts
