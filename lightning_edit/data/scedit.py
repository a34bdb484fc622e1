"""ScEdit (ACL 2025 Findings, arXiv 2505.23291): does an edit reach procedural use, the how-to scripts a model writes?

Two settings, detected from the record's fields and checked against ``variant``:

- **ScEdit-CF** (counterfactual edits, ``ScEdit-CF.json``): ``prompt``/``subject``/``ground_truth``/``target_new``,
  ``rephrase_prompts`` (script cloze prompts: a Script Question followed by a script cut right before the first
  mention of the old object), ``neighborhood_prompts`` (script cloze prompts of neighbour facts that share the old
  object) and ``generation_prompts`` (the Script Questions);
- **ScEdit-T** (temporal edits, ``ScEdit-T.json``): ``prompt``/``subject``/``old_update``/``new_update``,
  ``question`` (script cloze prompts) and ``neighborhood`` (``{"object", "prompt", "question"}`` of similar subjects).

Token-level metrics (paper §3; fractions, not percentages):

- ES: the fact prompt prefers the new object to the old one (probability comparison, mean per-token NLL);
- S-ES: the same on every script cloze prompt;
- S-NS (CF): a neighbour's script cloze prompt still prefers the old object (its true one) to the new one;
- S-BO (T, lower is better): ``max(P_pre(o_j) − P_post(o_j), 0)`` on a neighbour's script cloze prompt, ``P`` the
  geometric-mean per-token probability ``exp(−mean NLL)`` of the neighbour's own object ``o_j`` (the formula of the
  ScEdit project page; the released code computes the pre-edit value by restoring the weights, here it is the
  unedited model's reference, computed once).

With ``generation``, the Script Questions are also scored by the n-gram entropy of a sampled continuation (GE).
:func:`script_cloze` and :func:`scedit_cf_record` build ScEdit-style records from a fact and its scripts.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from lightning_edit.data.base import DataFormatError, EditDataModule, RecordReader, read_records
from lightning_edit.data.schema import EditCase, EditRequest, PromptGroup
from lightning_edit.scoring.kinds import ScoreKind, Target, register_kind

_CF_KEYS = {"case_id", "prompt", "subject", "ground_truth", "target_new", "rephrase_prompts", "neighborhood_prompts"}
_T_KEYS = {"case_id", "prompt", "subject", "old_update", "new_update", "question", "neighborhood"}


class Bleedover(ScoreKind):
    """ScEdit's S-BO: how much probability a neighbour's own object lost through the edit (0 if none)."""

    name, label, higher_is_better = "bleedover", "probability drop", False
    convention = (
        "max(P_pre(o) - P_post(o), 0) with P = exp(-mean per-token NLL) of the expected (the neighbour's own) "
        "object after the prompt, before and after editing (ScEdit S-BO; lower is better)"
    )

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def reference_requests(self, item, config):
        return [Target(item.bare_prompt, item.expected)]

    def value(self, item, current, unedited):
        return max(math.exp(-unedited[0].nll) - math.exp(-current[0].nll), 0.0)


register_kind(Bleedover())


class ScEdit(EditDataModule):
    """ScEdit-CF (``variant: cf``) or ScEdit-T (``variant: t``), token level.

    Groups: ``rewrite`` (ES), ``script`` (S-ES), and ``script_neighborhood`` (S-NS, CF) or ``script_bleedover``
    (S-BO, T); with ``generation``, ``generation`` (GE).

    Args:
        path: the ScEdit JSON file (or ``scedit``: the published file of ``variant``, downloaded once).
        limit: keep only this many cases (quick runs); None keeps all.
        sample_seed: with ``limit``, take a seeded random sample of the cases instead of the first ones.
        batch_size: edit cases per validation step.
        variant: ``cf`` (counterfactual edits) or ``t`` (temporal edits); a file of the other setting is an error.
        generation: also score the Script Questions by the n-gram entropy of a sampled script (GE).
    """

    def __init__(
        self,
        path: str,
        limit: int | None = None,
        sample_seed: int | None = None,
        batch_size: int = 8,
        variant: Literal["cf", "t"] = "cf",
        generation: bool = False,
    ):
        super().__init__(path, limit, sample_seed, batch_size)
        self.variant, self.generation = variant, generation

    def source_name(self) -> str | None:
        return f"scedit-{self.variant}" if self.path == "scedit" else self.path

    def declared_metrics(self) -> dict[str, str]:
        locality = {"S-NS": "prob"} if self.variant == "cf" else {"S-BO": "bleedover"}
        return {"ES": "prob", "S-ES": "prob"} | locality | ({"GE": "entropy"} if self.generation else {})

    def load_cases(self) -> list[EditCase]:
        records = read_records(self.path)
        other = "new_update" if self.variant == "cf" else "rephrase_prompts"
        for index, record in enumerate(records):
            if other in record:
                setting = "ScEdit-T" if other == "new_update" else "ScEdit-CF"
                raise DataFormatError(
                    self.path, f"a {setting} record, but variant is {self.variant!r}", index, other
                )  # fmt: skip
        read_case = self._cf_case if self.variant == "cf" else self._t_case
        return [read_case(RecordReader(self.path, index, record)) for index, record in enumerate(records)]

    def _request(self, reader: RecordReader, new_field: str, true_field: str, used: set[str]) -> EditRequest:
        subject = reader.string("subject")
        new, true = reader.answer(new_field), reader.answer(true_field)
        extra = {key: value for key, value in reader.record.items() if key not in used}
        return EditRequest(reader.template("prompt", subject), subject, new, true, extra)

    def _cf_case(self, reader: RecordReader) -> EditCase:
        request = self._request(reader, "target_new", "ground_truth", _CF_KEYS)
        new, true = request.target_new, request.target_true
        groups = self._shared_groups(request, reader.strings("rephrase_prompts"))
        groups["script_neighborhood"] = PromptGroup.shared_answer(
            reader.strings("neighborhood_prompts"), true, new, prob="S-NS"
        )
        if self.generation:
            groups["generation"] = PromptGroup.shared_answer(reader.strings("generation_prompts"), new, entropy="GE")
        return EditCase(reader.get("case_id", int), (request,), groups, f"{self.path}#{reader.index}")

    def _t_case(self, reader: RecordReader) -> EditCase:
        request = self._request(reader, "new_update", "old_update", _T_KEYS)
        questions = reader.strings("question")
        groups = self._shared_groups(request, questions)
        neighbours = reader.get("neighborhood", list)
        prompts, objects = [], []
        for j, neighbour in enumerate(neighbours):
            field = f"neighborhood[{j}]"
            if not isinstance(neighbour, dict):
                raise reader.error(field, f"expected an object, found {type(neighbour).__name__}")
            for key in ("question", "object"):
                if not isinstance(neighbour.get(key), str) or not neighbour[key].strip():
                    raise reader.error(f"{field}.{key}", "missing or not a non-empty string")
            prompts.append(neighbour["question"])
            objects.append(neighbour["object"])
        groups["script_bleedover"] = PromptGroup(tuple(prompts), tuple(objects), metrics={"bleedover": "S-BO"})
        if self.generation:  # ScEdit-T has no Script Questions of its own: GE samples from its cloze prompts
            groups["generation"] = PromptGroup.shared_answer(questions, request.target_new, entropy="GE")
        return EditCase(reader.get("case_id", int), (request,), groups, f"{self.path}#{reader.index}")

    @staticmethod
    def _shared_groups(request: EditRequest, scripts: list[str]) -> dict[str, PromptGroup]:
        new, true = request.target_new, request.target_true
        return {
            "rewrite": PromptGroup.shared_answer([request.filled_prompt], new, true, prob="ES"),
            "script": PromptGroup.shared_answer(scripts, new, true, prob="S-ES"),
        }


def script_cloze(question: str, script: str, old_object: str) -> str:
    """A script cloze prompt (paper §3): the Script Question, then the script cut right before the first mention of
    the old object (its trailing whitespace removed; the object is scored after one space)."""
    position = script.find(old_object)
    if position < 0:
        raise ValueError(f"the script does not mention {old_object!r}: {script!r}")
    return f"{question} {script[:position].rstrip()}".strip()


def scedit_cf_record(
    case_id: int,
    prompt: str,
    subject: str,
    ground_truth: str,
    target_new: str,
    scripts: list[tuple[str, str]],
    neighbour_scripts: list[tuple[str, str]],
) -> dict[str, Any]:
    """An ScEdit-CF record from a fact, its (Script Question, script) pairs and those of neighbour facts that share
    the old object; every script must mention ``ground_truth`` (where its cloze prompt is cut)."""
    return {
        "case_id": case_id,
        "prompt": prompt,
        "subject": subject,
        "ground_truth": ground_truth,
        "target_new": target_new,
        "rephrase_prompts": [script_cloze(q, s, ground_truth) for q, s in scripts],
        "neighborhood_prompts": [script_cloze(q, s, ground_truth) for q, s in neighbour_scripts],
        "generation_prompts": [q for q, _ in scripts],
    }
