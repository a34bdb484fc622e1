"""CounterFact's two record formats read into edit cases: the ROME format and the flat MEND/EasyEdit split.

The groups of both, their metrics declared by :func:`counterfact_groups`: ``rewrite`` (ES, rewrite_acc),
``paraphrase`` (PS, rephrase_acc), ``neighborhood`` (NS, locality_acc, the true answer preferred), each with its
generated-answer metrics; the ROME format also ``attribute`` (unscored) and, with ``generation``, ``generation``
(GE). In-context editors build their demonstrations from such a file too
(:meth:`~lightning_edit.data.base.EditDataModule.demonstration_cases`).
"""

from __future__ import annotations

from typing import Any

from lightning_edit.cases import EditCase, EditRequest, PromptGroup
from lightning_edit.data.answers import GeneratedAnswers
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.errors import DataFormatError

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


def counterfact_groups(
    answers: GeneratedAnswers = GeneratedAnswers(), generation: bool = False
) -> dict[str, DeclaredGroup]:
    """The metrics of the scored groups, in report order: ``rewrite`` (ES), ``paraphrase`` (PS) and ``neighborhood``
    (NS), with those of ``answers``, and with ``generation``, ``generation`` (GE)."""
    groups = {
        "rewrite": DeclaredGroup({"prob": "ES", "token_acc": "rewrite_acc"}, answers.metrics("ES")),
        "paraphrase": DeclaredGroup({"prob": "PS", "token_acc": "rephrase_acc"}, answers.metrics("PS")),
        "neighborhood": DeclaredGroup(
            {"prob": "NS", "agreement": "locality_acc"}, answers.metrics("NS", locality=True)
        ),
    }
    return groups | ({"generation": DeclaredGroup(generated={"entropy": "GE"})} if generation else {})


def counterfact_cases(
    path: str, generation: bool = False, answers: GeneratedAnswers = GeneratedAnswers()
) -> list[EditCase]:
    """Every case of the CounterFact file ``path``, its format detected (ROME or flat); ``generation`` and
    ``answers`` as :func:`rome_case` (``generation`` needs the ROME format)."""
    records = read_records(path)
    rome = any("requested_rewrite" in record for record in records)
    if generation and not rome:
        raise DataFormatError(path, "generation=True needs the ROME format; the flat split has no generation prompts")
    if rome:
        return [
            rome_case(RecordReader(path, index, record), answers, generation) for index, record in enumerate(records)
        ]
    return [flat_case(RecordReader(path, index, record), answers) for index, record in enumerate(records)]


def rome_case(
    reader: RecordReader, answers: GeneratedAnswers = GeneratedAnswers(), generation: bool = False
) -> EditCase:
    """A ROME-format record's case; ``answers``: the generated answers its groups report (none by default);
    ``generation``: with the ``generation`` group (GE)."""
    request = rome_request(reader, _ROME_KEYS)
    new = request.target_new
    true = request.target_true
    fields = ("requested_rewrite.prompt", "paraphrase_prompts", "neighborhood_prompts")
    declared = counterfact_groups(answers, generation)
    groups = _groups(
        request,
        reader.strings("paraphrase_prompts"),
        reader.strings("neighborhood_prompts"),
        true,
        declared,
        fields,
    )
    attributes = reader.strings("attribute_prompts")
    groups["attribute"] = PromptGroup.shared_answer(attributes, new, true, record_field="attribute_prompts")
    if generation:
        prompts = reader.strings("generation_prompts")
        groups["generation"] = declared["generation"].shared_answer(prompts, new, record_field="generation_prompts")
    return EditCase(reader.get("case_id", int), (request,), groups, f"{reader.path}#{reader.index}")


def flat_case(reader: RecordReader, answers: GeneratedAnswers = GeneratedAnswers()) -> EditCase:
    """A record's case in the flat MEND/EasyEdit split; ``answers`` as :func:`rome_case`."""
    subject = reader.string("subject")
    new = reader.answer("target_new")
    true = reader.answer("ground_truth")
    extra = _rest(reader.record, _FLAT_KEYS)
    request = EditRequest(reader.template("prompt", subject), subject, new, true, extra)
    groups = _groups(
        request,
        [reader.string("rephrase_prompt")],
        [reader.string("locality_prompt")],
        reader.answer("locality_ground_truth"),
        counterfact_groups(answers),
        ("prompt", "rephrase_prompt", "locality_prompt"),
    )
    return EditCase(reader.get("case_id", int), (request,), groups, f"{reader.path}#{reader.index}")


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
    declared: dict[str, DeclaredGroup],
    fields: tuple[str, str, str],
) -> dict[str, PromptGroup]:
    """The groups of both formats: rewrite (ES), paraphrase (PS) and neighborhood (NS, the true answer preferred),
    reporting the metrics ``declared`` (:func:`counterfact_groups`); ``fields``: the record fields of their prompts."""
    new = request.target_new
    true = request.target_true
    return {
        "rewrite": declared["rewrite"].shared_answer([request.filled_prompt], new, true, fields[0]),
        "paraphrase": declared["paraphrase"].shared_answer(paraphrases, new, true, fields[1]),
        "neighborhood": declared["neighborhood"].shared_answer(neighbours, neighbour_answer, new, fields[2]),
    }


def _rest(fields: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """The optional fields of a record (those not turned into requests or prompts), kept for reporting."""
    return {key: value for key, value in fields.items() if key not in used}
