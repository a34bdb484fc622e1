"""CaseEdit, the DataModule of CaseEdit (Reddy & Kuo 2025, "CaseEdit: Enhancing Localized Commonsense Reasoning via
Null-Space Constrained Knowledge Editing in Small Parameter Language Models", arXiv 2505.19383): household commonsense
edits.

An edit changes what one household's object is used for, where it is kept or what it is like, from the typical
``ground_truth`` to an atypical ``target_new``. Each edit has four five-option questions (options under letters
A-E in random order; paper §3): reliability and generalization expect the new truth, locality asks about something
the edit must not change, portability applies the new truth. No official data or field names are published; the
schema below is the project's (docs/benchmarks/caseedit.md#caseedit).

Scoring (paper §4.3, Appendix 8.4; :mod:`~lightning_edit.data.caseedit.multiple_choice`): per question, the five-way
distribution gives accuracy (the correct option most probable), its Shannon entropy in bits, and the probability of
the new truth, of the previous truth and of the distractors (summed), wherever their letters fall. ``convention:
letter`` (the paper's) lists the options and reads the next-token logits of the letters; ``cloze`` compares the
options' likelihoods as continuations of the question stem.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from lightning_edit.cases import EditCase, EditRequest, PromptGroup
from lightning_edit.data.base import EditDataModule
from lightning_edit.data.caseedit.multiple_choice import (
    LETTERS,
    MULTIPLE_CHOICE_KINDS,
    QUANTITIES,
    ROLES,
    kind_name,
    letter_tokens,
)
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.models.tokenization import format_prompt
from lightning_edit.scoring.kinds import ScoreKind

QUESTIONS = ("reliability", "generalization", "locality", "portability")
PAPER_RELATIONS = ("ObjectUse", "HasProperty", "AtLocation")  # ATOMIC2020 physical-entity relations (paper §3)
BLANK = "___"


def parse_record(reader: RecordReader) -> dict[str, Any]:
    """The checked fields of one CaseEdit record (see the module docstring); raises DataFormatError.

    Returns the record's fields with ``prompt`` as a template (``{}`` for the subject) and each question as
    ``{"question", "options" (texts in letter order), "answer" (position)}``.
    """
    subject = reader.string("subject")
    if not subject.strip():
        raise reader.error("subject", "empty subject")
    relation = reader.string("relation")
    if not relation.strip():
        raise reader.error("relation", "empty relation")
    ground_truth = reader.answer("ground_truth")
    target_new = reader.answer("target_new")
    if ground_truth.strip().casefold() == target_new.strip().casefold():
        raise reader.error("target_new", f"the new truth {target_new!r} is the ground truth")
    parsed: dict[str, Any] = {
        "case_id": reader.get("case_id", int),
        "subject": subject,
        "relation": relation,
        "prompt": reader.template("prompt", subject),
        "ground_truth": ground_truth,
        "target_new": target_new,
        "questions": {},
    }
    questions = reader.get("questions", dict)
    if sorted(questions) != sorted(QUESTIONS):
        raise reader.error(
            "questions", f"expected exactly the questions {', '.join(QUESTIONS)}, found {sorted(questions)}"
        )
    for name in QUESTIONS:
        parsed["questions"][name] = _question(reader, f"questions.{name}", ground_truth, target_new, name)
    return parsed


def _question(reader: RecordReader, field: str, ground_truth: str, target_new: str, name: str) -> dict[str, Any]:
    question = reader.string(f"{field}.question")
    if not question.strip():
        raise reader.error(f"{field}.question", "empty question")
    choices = reader.get(f"{field}.choices", dict)
    if list(choices) != list(LETTERS):
        raise reader.error(
            f"{field}.choices", f"expected the letters {'-'.join(LETTERS)} in order, found {list(choices)}"
        )
    options = [reader.string(f"{field}.choices.{letter}") for letter in LETTERS]
    keys = [option.strip().casefold() for option in options]
    if any(not key for key in keys):
        raise reader.error(f"{field}.choices", "empty choice")
    if len(set(keys)) != len(keys):
        duplicate = next(option for option, key in zip(options, keys) if keys.count(key) > 1)
        raise reader.error(f"{field}.choices", f"duplicate choice {duplicate!r}")
    if target_new.strip().casefold() not in keys:
        raise reader.error(f"{field}.choices", f"the new truth {target_new!r} is not among the choices")
    if name in ("reliability", "generalization") and ground_truth.strip().casefold() not in keys:
        raise reader.error(f"{field}.choices", f"the previous truth {ground_truth!r} is not among the choices")
    answer = reader.string(f"{field}.answer")
    if answer not in LETTERS:
        raise reader.error(f"{field}.answer", f"{answer!r} is not one of the letters {', '.join(LETTERS)}")
    position = LETTERS.index(answer)
    if name in ("reliability", "generalization") and keys[position] != target_new.strip().casefold():
        raise reader.error(f"{field}.answer", f"{answer} is {options[position]!r}, not the new truth {target_new!r}")
    return {"question": question, "options": options, "answer": position}


def _roles(options: list[str], ground_truth: str, target_new: str) -> tuple[str, ...]:
    role = {target_new.strip().casefold(): "new", ground_truth.strip().casefold(): "true"}
    return tuple(role.get(option.strip().casefold(), "other") for option in options)


def letter_prompt(question: str, options: list[str], answer_cue: str = "Answer:") -> str:
    """The ``letter`` prompt: the question, one ``"A. option"`` line per option, then ``answer_cue``."""
    lines = [question, *(f"{letter}. {option}" for letter, option in zip(LETTERS, options)), answer_cue]
    return "\n".join(lines)


def cloze_stem(question: str) -> str:
    """The ``cloze`` stem: the question up to its blank ``___`` (toy questions), else ``question + "\\nAnswer:"``."""
    if BLANK in question:
        return question.split(BLANK)[0].rstrip()
    return f"{question}\nAnswer:"


class CaseEdit(EditDataModule):
    """CaseEdit: household commonsense edits scored by five-option multiple choice (paper §4).

    Reports, for each question ``q`` in reliability, generalization, locality and portability: ``q_acc``,
    ``q_entropy`` (bits), ``q_p_new``, ``q_p_true`` and ``q_p_other``. The fixed test is the ``sequential``
    protocol over 50 edits; the scalability test n = 10, 20, 50, 100, 200 (``limit`` or ``eval_at``,
    docs/benchmarks/caseedit.md#caseedit).

    Args:
        path: the CaseEdit JSON (list) or JSONL file.
        convention: ``letter`` (the paper's: next-token logits of A-E after the listed options) or ``cloze``
            (option likelihoods after the question stem).
        answer_cue: the last line of a ``letter`` prompt. The letter follows it after a space (``ĠA``, ``▁A``)
            unless it ends with whitespace: ``"Answer:\\n"`` reads the bare letters (``A``), for tokenizers that
            have no single token for a letter after a space.
        **kwargs: ``limit``, ``offset``, ``sample_seed``, ``batch_size`` (:class:`EditDataModule`); ``sample_seed``
            draws the n edits at random, as the paper does.
    """

    def __init__(
        self,
        path: str,
        convention: Literal["letter", "cloze"] = "letter",
        answer_cue: str = "Answer:",
        **kwargs: Any,
    ):
        super().__init__(path, **kwargs)
        self.convention = convention
        self.answer_cue = answer_cue

    def own_kinds(self) -> list[ScoreKind]:
        """The multiple-choice kinds (:mod:`~lightning_edit.data.caseedit.multiple_choice`), both conventions."""
        return list(MULTIPLE_CHOICE_KINDS)

    def load_cases(self) -> list[EditCase]:
        records = read_records(self.path)
        return [self._case(RecordReader(self.path, index, record)) for index, record in enumerate(records)]

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        """A group per question ``q``, its metrics ``q_<quantity>``."""
        return {
            q: DeclaredGroup({kind_name(self.convention, quantity): f"{q}_{quantity}" for quantity in QUANTITIES})
            for q in QUESTIONS
        }

    def _case(self, reader: RecordReader) -> EditCase:
        record = parse_record(reader)
        new = record["target_new"]
        true = record["ground_truth"]
        request = EditRequest(record["prompt"], record["subject"], new, true, {"relation": record["relation"]})
        declared = self.declared_groups()
        groups = {}
        for name, question in record["questions"].items():
            options = question["options"]
            answer = question["answer"]
            letter = self.convention == "letter"
            stem = question["question"]
            prompt = letter_prompt(stem, options, self.answer_cue) if letter else cloze_stem(stem)
            details = {
                "options": LETTERS if letter else tuple(options),
                "answer": answer,
                "roles": _roles(options, true, new),
            }
            groups[name] = PromptGroup(
                (prompt,),
                (options[answer],),
                metrics=declared[name].reported,
                details=(details,),
                record_field=f"questions.{name}",
            )
        return EditCase(record["case_id"], (request,), groups, f"{self.path}#{reader.index}")

    def run_notes(self, module: Any) -> dict[str, Any]:
        """The letter tokens the run's ``letter`` scores read (each distinct set, with its number of prompts)."""
        if self.convention != "letter":
            return {"convention": self.convention}
        found: dict[tuple[str, ...], int] = {}
        for case in self.cases:
            for group in case.groups.values():
                prompt = format_prompt(module.tokenizer, group.prompts[0], module.scoring.chat_template)
                tokens = tuple(letter_tokens(module.tokenizer, prompt))
                found[tokens] = found.get(tokens, 0) + 1
        return {
            "convention": self.convention,
            "letter_tokens": [{"tokens": list(tokens), "prompts": count} for tokens, count in found.items()],
        }

    def figures(self, results: dict[str, dict[str, Any]], case_scores: dict[str, dict[int, float]]) -> dict[str, Any]:
        """``caseedit_probabilities``: per question, the probability of each option role (and the entropy) against
        the number of edits, from the ``@n`` metrics of a sequential ``eval_at`` run (paper Figure 3)."""
        points = _points(results)
        if len(points) < 2:
            return {}
        return {"caseedit_probabilities": probability_figure(results, points)}


def _points(results: dict[str, dict[str, Any]]) -> dict[int, str]:
    """Number of edits -> metric suffix: 0 (``_pre``) if scored, each ``@n``, and the run's final state."""
    name = f"{QUESTIONS[0]}_p_new"
    points = {0: "_pre"} if f"{name}_pre" in results else {}
    for metric in results:
        if metric.startswith(f"{name}@"):
            points[int(metric.rpartition("@")[2])] = "@" + metric.rpartition("@")[2]
    if name in results and points:
        points.setdefault(results[name]["n_cases"], "")
    return dict(sorted(points.items()))


def probability_figure(results: dict[str, dict[str, Any]], points: dict[int, str]):
    """One panel per question: P(new truth), P(previous truth), P(distractors) and the entropy against n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(QUESTIONS), figsize=(4 * len(QUESTIONS), 3.4), sharey=True)
    xs = list(points)
    colours = {"new": "tab:green", "true": "tab:blue", "other": "tab:gray"}
    labels = {"new": "new truth", "true": "previous truth", "other": "distractors (sum)"}
    for ax, question in zip(axes, QUESTIONS):
        for role in ROLES:
            ys = [results.get(f"{question}_p_{role}{points[n]}", {}).get("macro", math.nan) for n in xs]
            ax.plot(xs, ys, marker="o", color=colours[role], label=labels[role])
        entropy = [results.get(f"{question}_entropy{points[n]}", {}).get("macro", math.nan) for n in xs]
        ax.plot(xs, [h / math.log2(len(LETTERS)) for h in entropy], "--", color="black", label="entropy / log2(5)")
        ax.set_title(question)
        ax.set_xlabel("sequential edits n")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("mean probability")
    axes[-1].legend(fontsize=7)
    figure.suptitle("CaseEdit: five-way probabilities by option role")
    figure.tight_layout()
    return figure
