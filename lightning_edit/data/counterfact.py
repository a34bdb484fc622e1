"""CounterFact (Meng et al., 2022, "Locating and Editing Factual Associations in GPT", ROME).

Each record asks to replace a true fact (``target_true``) by a counterfactual one (``target_new``). Success is a
probability comparison (mean per-token NLL of the new vs the true object): ES on the rewrite prompt, PS on
paraphrases, NS on neighbouring subjects (where the true object must stay preferred). Two file formats exist and
are detected per file:

- ROME format (``counterfact.json``, MEMIT's ``multi_counterfact.json``): a nested ``requested_rewrite`` with a
  ``{}`` template, lists of paraphrase, neighbourhood, attribute and generation prompts, and answers given as
  ``{"str": ..., "id": ...}``;
- the flat MEND/EasyEdit split (``counterfact-{train,val,edit}.json``): one ``prompt``, ``rephrase_prompt`` and
  ``locality_prompt`` per record, answers as plain strings. It has no generation prompts.
"""

from __future__ import annotations

from typing import Any

from lightning_edit.cases import EditCase, EditRequest, PromptGroup
from lightning_edit.data.answers import AnswerContext, answer_kinds, answer_metrics, answer_score_kinds
from lightning_edit.data.base import DataFormatError, EditDataModule, RecordReader, read_records
from lightning_edit.scoring.kinds import ScoreKind

_ROME_KEYS = {
    "case_id",
    "requested_rewrite",
    "paraphrase_prompts",
    "neighborhood_prompts",
    "attribute_prompts",
    "generation_prompts",
}
_REWRITE_KEYS = {"prompt", "subject", "target_new", "target_true"}
_FLAT_KEYS = {
    "case_id",
    "prompt",
    "target_new",
    "subject",
    "ground_truth",
    "rephrase_prompt",
    "locality_prompt",
    "locality_ground_truth",
}


class CounterFact(EditDataModule):
    """CounterFact edits, from the ROME-format file or the flat MEND/EasyEdit split (detected per file).

    Groups: ``rewrite`` (ES, rewrite_acc), ``paraphrase`` (PS, rephrase_acc), ``neighborhood`` (NS, locality_acc);
    in the ROME format also ``attribute`` (unscored, kept for generation consistency) and, with ``generation``,
    ``generation`` (GE).

    Args:
        path: the CounterFact JSON file, in the ROME format or the flat split format.
        generation: also score the ``generation_prompts`` by n-gram entropy (GE); ROME format only.
        generated_answers: also generate an answer to the rewrite, paraphrase and neighbourhood prompts and grade it
            (QAEdit: ES_gen, ES_gen_contains, PS_gen, PS_gen_contains, NS_gen; :mod:`lightning_edit.data.answers`),
            with the prompt alone (``bare``), in a QA instruction (``qa_inst``) or as a user turn of the tokenizer's
            chat template (``chat``); None: teacher forcing only.
        answer_judge: also grade those answers (edit and paraphrase prompts) by this judge, given as ``{judge: its
            arguments}`` (e.g. ``openai_chat`` with ``template: answer_correct``): ``<metric>_gen_judged``.
        **kwargs: ``limit``, ``offset``, ``sample_seed``, ``batch_size`` (:class:`EditDataModule`).
    """

    def __init__(
        self,
        path: str,
        generation: bool = False,
        generated_answers: AnswerContext | None = None,
        answer_judge: dict[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ):
        super().__init__(path, **kwargs)
        self.generation = generation
        self.generated_answers = generated_answers
        self.answer_kinds = answer_kinds(generated_answers, answer_judge)
        self.answer_judge = answer_judge

    def own_kinds(self) -> list[ScoreKind]:
        """With ``generated_answers``, its graded-answer kinds (:func:`~lightning_edit.data.answers.answer_kinds`)."""
        return answer_score_kinds(self.generated_answers, self.answer_judge)

    def load_cases(self) -> list[EditCase]:
        records = read_records(self.path)
        rome = any("requested_rewrite" in record for record in records)
        if self.generation and not rome:
            raise DataFormatError(
                self.path, "generation=True needs the ROME format; the flat split has no generation prompts"
            )
        read_case = self._rome_case if rome else self._flat_case
        return [read_case(RecordReader(self.path, index, record)) for index, record in enumerate(records)]

    def declared_metrics(self) -> dict[str, str]:
        metrics = {"ES": "prob", "rewrite_acc": "token_acc", "PS": "prob", "rephrase_acc": "token_acc"}
        metrics |= {"NS": "prob", "locality_acc": "agreement"}
        for group in _GENERATED if self.answer_kinds else ():
            metrics |= {name: kind for kind, name in _generated(self.answer_kinds, group).items()}
        return metrics | ({"GE": "entropy"} if self.generation else {})

    def _rome_case(self, reader: RecordReader) -> EditCase:
        request = rome_request(reader, _ROME_KEYS)
        new, true = request.target_new, request.target_true
        fields = ("requested_rewrite.prompt", "paraphrase_prompts", "neighborhood_prompts")
        groups = _groups(
            request,
            reader.strings("paraphrase_prompts"),
            reader.strings("neighborhood_prompts"),
            true,
            self.answer_kinds,
            fields,
        )
        attributes = reader.strings("attribute_prompts")
        groups["attribute"] = PromptGroup.shared_answer(attributes, new, true, record_field="attribute_prompts")
        if self.generation:
            prompts = reader.strings("generation_prompts")
            groups["generation"] = PromptGroup.shared_answer(
                prompts, new, record_field="generation_prompts", entropy="GE"
            )
        return EditCase(reader.get("case_id", int), (request,), groups, f"{self.path}#{reader.index}")

    def _flat_case(self, reader: RecordReader) -> EditCase:
        subject = reader.string("subject")
        new, true = reader.answer("target_new"), reader.answer("ground_truth")
        extra = _rest(reader.record, _FLAT_KEYS)
        request = EditRequest(reader.template("prompt", subject), subject, new, true, extra)
        groups = _groups(
            request,
            [reader.string("rephrase_prompt")],
            [reader.string("locality_prompt")],
            reader.answer("locality_ground_truth"),
            self.answer_kinds,
            ("prompt", "rephrase_prompt", "locality_prompt"),
        )
        return EditCase(reader.get("case_id", int), (request,), groups, f"{self.path}#{reader.index}")


def rome_request(reader: RecordReader, record_keys: set[str]) -> EditRequest:
    """The ``requested_rewrite`` of a ROME-format record; fields outside ``record_keys`` are kept as extras."""
    rewrite = reader.get("requested_rewrite", dict)
    subject = reader.string("requested_rewrite.subject")
    new = reader.answer("requested_rewrite.target_new")
    true = reader.answer("requested_rewrite.target_true")
    extra = _rest(rewrite, _REWRITE_KEYS) | _rest(reader.record, record_keys)
    for name in ("target_new", "target_true"):
        if isinstance(rewrite[name], dict) and "id" in rewrite[name]:
            extra[f"{name}_id"] = rewrite[name]["id"]
    return EditRequest(reader.template("requested_rewrite.prompt", subject), subject, new, true, extra)


def _groups(
    request: EditRequest,
    paraphrases: list[str],
    neighbours: list[str],
    neighbour_answer: str,
    answers: dict[str, str] | None,
    fields: tuple[str, str, str],
) -> dict[str, PromptGroup]:
    """The groups of both formats: rewrite (ES), paraphrase (PS) and neighborhood (NS, the true answer preferred),
    with the generated-answer metrics of ``answers`` (:func:`~lightning_edit.data.answers.answer_kinds`); ``fields``:
    the record fields of their prompts."""
    new, true = request.target_new, request.target_true
    rewrite = {"prob": "ES", "token_acc": "rewrite_acc"} | _generated(answers, "rewrite")
    paraphrase = {"prob": "PS", "token_acc": "rephrase_acc"} | _generated(answers, "paraphrase")
    neighborhood = {"prob": "NS", "agreement": "locality_acc"} | _generated(answers, "neighborhood")
    return {
        "rewrite": PromptGroup.shared_answer([request.filled_prompt], new, true, record_field=fields[0], **rewrite),
        "paraphrase": PromptGroup.shared_answer(paraphrases, new, true, record_field=fields[1], **paraphrase),
        "neighborhood": PromptGroup.shared_answer(
            neighbours, neighbour_answer, new, record_field=fields[2], **neighborhood
        ),
    }


#: group -> (the metric its generated answers are named after, whether it is a locality group)
_GENERATED = {"rewrite": ("ES", False), "paraphrase": ("PS", False), "neighborhood": ("NS", True)}


def _generated(answers: dict[str, str] | None, group: str) -> dict[str, str]:
    """Kind -> name of the group's generated-answer metrics (none without ``generated_answers``)."""
    return answer_metrics(answers, *_GENERATED[group]) if answers else {}


def _rest(fields: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """The optional fields of a record (those not turned into requests or prompts), kept for reporting."""
    return {key: value for key, value in fields.items() if key not in used}
