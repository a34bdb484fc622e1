"""QAEdit (Yang et al., 2025, "The Mirage of Model Editing: Revisiting Evaluation in the Wild"): real-world questions.

A record holds a question ``prompt`` about ``subject`` from Natural Questions, TriviaQA or SimpleQA (``source``: NQ,
TQA, SQA), its answer ``target`` (edited in, as published: one record's answer ends in a ``" *"`` marker), a paraphrase
``rephrase`` and five unrelated question/answer pairs ``locality`` (``loc``, ``loc_ans``).

The paper's point is its evaluation: what the edited model *says*, not what teacher forcing scores. So besides the
teacher-forced metrics (EasyEdit's, the paper's "traditional" evaluation: token accuracy of the answer after the
question, rewrite_acc and rephrase_acc, and locality_acc, the argmax agreement of the edited with the unedited model
along each locality answer), a greedy answer is generated and graded by default (``generated_answers: bare``, the
paper's "real-world" evaluation, its question-only context; :mod:`lightning_edit.data.answers`): rewrite_gen and
rephrase_gen (exact match), their ``_contains`` variants and locality_gen (the answer unchanged), and with
``answer_judge`` the paper's LLM judge (``_gen_judged``). docs/benchmarks/qaedit.md#qaedit and docs/metrics.md.

The paper's data has five locality pairs per record; its released ``edit.py`` evaluates the first one only:
``locality="all"`` (default) scores the five, ``locality="first"`` the first as that code does.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning_edit.cases import EditCase, EditRequest, PromptGroup
from lightning_edit.data.answers import AnswerContext, GeneratedAnswers
from lightning_edit.data.base import EditDataModule
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.data.sources import DataSource, SourceFile
from lightning_edit.errors import ConfigError
from lightning_edit.scoring.kinds import ScoreKind

#: the 1,000-record release in the paper's repository (Apache-2.0)
QAEDIT = DataSource(
    "qaedit",
    (
        SourceFile(
            "QAEdit_inter_1k.json",
            "https://raw.githubusercontent.com/WanliYoung/Revisit-Editing-Evaluation/d6025e0ee9731d3b59b84ea242dc06bf0e0c8a74/data/QAEdit_inter_1k.json",
            "640e1d279759263fdaae543a385680d21a55aa3597ca8b597ffd7937fef07c42",
        ),
    ),
    "Apache-2.0",
    "https://github.com/WanliYoung/Revisit-Editing-Evaluation",
)
_USED_KEYS = {"prompt", "subject", "target", "rephrase", "locality"}  # the rest (id, source) kept as extra


class QAEdit(EditDataModule):
    """QAEdit's questions (``QAEdit_inter_1k.json``).

    Groups: ``rewrite`` (rewrite_acc), ``rephrase`` (rephrase_acc), ``locality`` (locality_acc), each with its
    generated-answer metrics.

    Args:
        path: the QAEdit JSON file (or ``qaedit``: the published file, downloaded once and checked).
        locality: ``all`` (the five pairs of each record, the data's design) or ``first`` (the first pair, as the
            released ``edit.py`` evaluates).
        generated_answers: the context of the generated answers (``bare``: the question alone, the paper's default;
            ``qa_inst``: its QA instruction; ``chat``: the tokenizer's chat template) or None for the teacher-forced
            metrics alone.
        answer_judge: also grade the rewrite and paraphrase answers by this judge, ``{judge: its arguments}`` (the
            paper: GPT-4o-mini; e.g. ``openai_chat`` with ``template: answer_correct``): ``<metric>_gen_judged``.
        **kwargs: ``limit``, ``offset``, ``sample_seed``, ``batch_size`` (:class:`EditDataModule`).
    """

    sources = (QAEDIT,)

    def __init__(
        self,
        path: str,
        locality: Literal["all", "first"] = "all",
        generated_answers: AnswerContext | None = "bare",
        answer_judge: dict[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ):
        if locality not in ("all", "first"):
            raise ConfigError(f"data.locality={locality!r}: one of all, first")
        super().__init__(path, **kwargs)
        self.locality = locality
        self.answers = GeneratedAnswers(generated_answers, answer_judge)

    def own_kinds(self) -> list[ScoreKind]:
        """The kinds that grade its generated answers (none without ``generated_answers``)."""
        return self.answers.score_kinds()

    def load_cases(self) -> list[EditCase]:
        records = read_records(self.path)
        return [self._case(RecordReader(self.path, index, record)) for index, record in enumerate(records)]

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        answers = self.answers
        return {
            "rewrite": DeclaredGroup({"token_acc": "rewrite_acc"}, answers.metrics("rewrite")),
            "rephrase": DeclaredGroup({"token_acc": "rephrase_acc"}, answers.metrics("rephrase")),
            "locality": DeclaredGroup({"agreement": "locality_acc"}, answers.metrics("locality", locality=True)),
        }

    def _case(self, reader: RecordReader) -> EditCase:
        subject = reader.string("subject")
        question = reader.string("prompt")
        template = reader.template("prompt", subject)
        target = reader.answer("target")
        rephrase = reader.string("rephrase")
        questions, answers = self._locality(reader)
        declared = self.declared_groups()
        groups = {
            "rewrite": declared["rewrite"].shared_answer([question], target, record_field="prompt"),
            "rephrase": declared["rephrase"].shared_answer([rephrase], target, record_field="rephrase"),
            "locality": PromptGroup(
                tuple(questions), tuple(answers), metrics=declared["locality"].reported, record_field="locality"
            ),
        }
        extra = {key: value for key, value in reader.record.items() if key not in _USED_KEYS}
        request = EditRequest(template, subject, target, None, extra)
        return EditCase(reader.index, (request,), groups, f"{self.path}#{reader.index}")

    def _locality(self, reader: RecordReader) -> tuple[list[str], list[str]]:
        """The questions and answers of the record's locality pairs (all, or the first)."""
        pairs = reader.get("locality", list)
        if not pairs:
            raise reader.error("locality", "expected at least one question/answer pair, found an empty list")
        questions, answers = [], []
        for position, pair in enumerate(pairs[: 1 if self.locality == "first" else None]):
            where = f"locality[{position}]"
            if not isinstance(pair, dict):
                raise reader.error(where, f"expected an object with loc and loc_ans, found {type(pair).__name__}")
            for key, into in (("loc", questions), ("loc_ans", answers)):
                value = pair.get(key)
                if not isinstance(value, str) or not value.strip():
                    found = "missing" if key not in pair else f"expected a non-empty string, found {value!r}"
                    raise reader.error(f"{where}.{key}", found)
                into.append(value)
        return questions, answers
