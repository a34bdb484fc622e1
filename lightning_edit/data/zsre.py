"""zsRE question answering edits, in the MEND format used by ROME, MEMIT and EasyEdit (Levy et al., 2017;
De Cao et al., 2021; Mitchell et al., 2022).

A record has a question ``src`` about ``subject``, its paraphrase ``rephrase``, the gold ``answers``, an
alternative answer ``alt``, and an unrelated Natural Questions prompt ``loc`` with its answer ``loc_ans``
(``pred`` and ``cond`` are informational and kept in :attr:`EditRequest.extra`). The frameworks disagree on what
to edit towards:

- ``edit_target="alt"`` (default, EasyEdit and MEND): edit towards ``alt``, with ``answers[0]`` as the true answer.
  Records whose ``alt`` is empty have no target; EasyEdit drops them silently, here they are skipped on the record
  (:attr:`EditDataModule.skipped`).
- ``edit_target="answers0"`` (ROME and MEMIT): edit towards ``answers[0]``; the true answer is unknown (None).

Every group is scored by teacher-forced token accuracy except ``locality``, which is EasyEdit's argmax agreement of
the edited with the unedited model along ``loc_ans``; ``neighborhood`` is ROME's zsRE neighbourhood score, the token
accuracy of ``loc_ans`` after ``loc + "?"``.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.data.answers import AnswerContext, GeneratedAnswers
from lightning_edit.data.base import EditDataModule
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.data.sources import DataSource, SourceFile
from lightning_edit.errors import ConfigError
from lightning_edit.scoring.kinds import ScoreKind

#: the MEND evaluation split as ROME publishes it
ZSRE = DataSource(
    "zsre",
    (SourceFile("zsre_mend_eval.json", "https://rome.baulab.info/data/dsets/zsre_mend_eval.json"),),
    "not stated for the data (the ROME code, github.com/kmeng01/rome, is MIT)",
    "https://rome.baulab.info/",
)
_USED_KEYS = {"case_id", "subject", "src", "rephrase", "alt", "answers", "loc", "loc_ans"}


class ZsRE(EditDataModule):
    """zsRE edits in the MEND format (``zsre_mend_eval.json``, ``zsre_mend_train.json``).

    Groups: ``rewrite`` (rewrite_acc), ``rephrase`` (rephrase_acc), ``locality`` (locality_acc, EasyEdit) and
    ``neighborhood`` (neighborhood_acc, ROME).

    Args:
        path: the zsRE JSON file in the MEND format (or ``zsre``: the evaluation split ROME publishes, downloaded once).
        edit_target: the edit target. "alt" edits towards ``alt`` as EasyEdit and MEND do (true answer ``answers[0]``;
            records with an empty ``alt`` are skipped and reported); "answers0" edits towards ``answers[0]`` as
            ROME and MEMIT do (true answer unknown).
        generated_answers: also generate an answer to the rewrite, rephrase and locality questions and grade it
            (QAEdit: rewrite_gen, rewrite_gen_contains, rephrase_gen, rephrase_gen_contains, locality_gen;
            :mod:`lightning_edit.data.answers`), the question alone (``bare``), in a QA instruction (``qa_inst``) or
            as a user turn of the tokenizer's chat template (``chat``).
        answer_judge: also grade those answers (edit and paraphrase prompts) by this judge, given as ``{judge: its
            arguments}`` (e.g. ``openai_chat`` with ``template: answer_correct``): ``<metric>_gen_judged``.
        **kwargs: ``limit``, ``offset``, ``sample_seed``, ``batch_size`` (:class:`EditDataModule`).
    """

    sources = (ZSRE,)

    def __init__(
        self,
        path: str,
        edit_target: Literal["alt", "answers0"] = "alt",
        generated_answers: AnswerContext | None = None,
        answer_judge: dict[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ):
        if edit_target not in ("alt", "answers0"):
            raise ConfigError(f"data.edit_target={edit_target!r}: one of alt, answers0")
        super().__init__(path, **kwargs)
        self.edit_target = edit_target
        self.answers = GeneratedAnswers(generated_answers, answer_judge)

    def own_kinds(self) -> list[ScoreKind]:
        """The kinds that grade its generated answers (none without ``generated_answers``)."""
        return self.answers.score_kinds()

    def load_cases(self) -> list[EditCase]:
        cases = []
        for index, record in enumerate(read_records(self.path)):
            case = self._case(RecordReader(self.path, index, record))
            if case is not None:
                cases.append(case)
        return cases

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        """The groups; ``generated_answers`` grades the answers to the rewrite, rephrase and locality questions
        (QAEdit's reliability, generalisation, locality)."""
        answers = self.answers
        return {
            "rewrite": DeclaredGroup({"token_acc": "rewrite_acc"}, answers.metrics("rewrite")),
            "rephrase": DeclaredGroup({"token_acc": "rephrase_acc"}, answers.metrics("rephrase")),
            "locality": DeclaredGroup({"agreement": "locality_acc"}, answers.metrics("locality", locality=True)),
            "neighborhood": DeclaredGroup({"token_acc": "neighborhood_acc"}),
        }

    def _case(self, reader: RecordReader) -> EditCase | None:
        subject = reader.string("subject")
        question = reader.string("src")
        template = reader.template("src", subject)
        rephrase = reader.string("rephrase")
        alt = reader.string("alt")
        answers = reader.strings("answers")
        loc = reader.string("loc")
        loc_answer = reader.string("loc_ans")
        case_id = reader.get("case_id", int, default=reader.index)
        if not answers:
            raise reader.error("answers", "expected at least one answer, found an empty list")
        if self.edit_target == "answers0":
            new = answers[0]
            true = None
        elif alt.strip():
            new = alt
            true = answers[0]
        else:
            self.skip(reader.index, 'empty "alt": no edit target with edit_target="alt"')
            return None
        extra = {key: value for key, value in reader.record.items() if key not in _USED_KEYS}
        declared = self.declared_groups()
        groups = {
            "rewrite": declared["rewrite"].shared_answer([question], new, record_field="src"),
            "rephrase": declared["rephrase"].shared_answer([rephrase], new, record_field="rephrase"),
            "locality": declared["locality"].shared_answer([loc], loc_answer, record_field="loc"),
            "neighborhood": declared["neighborhood"].shared_answer([loc + "?"], loc_answer, record_field="loc"),
        }
        request = EditRequest(template, subject, new, true, extra)
        return EditCase(case_id, (request,), groups, f"{self.path}#{reader.index}")
