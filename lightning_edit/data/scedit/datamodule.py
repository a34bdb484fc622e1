"""ScEdit, the DataModule of ScEdit (ACL 2025 Findings, arXiv 2505.23291): does an edit reach procedural use, the
how-to scripts a model writes?

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

Text level (CF, ``text_level``; paper §3 and appendices A and C.1): the model answers each Script Question with a
script, prompted by the paper's :data:`SCRIPT_PROMPT` (sampled top-k 5 as the released ``generate_fast2``, cut before
a 10th step), and an LLM judge rates the script on four 7-point Likert scales with this folder's templates
(``templates/``) ``scedit_executability``, ``scedit_coherence``, ``scedit_consistency`` and ``scedit_completeness``:
Exec, Coh, Cons and Comp (:data:`TEXT_METRICS`). The judge is the paper's (``gpt-4o-2024-11-20`` behind the OpenAI
API) unless ``judge`` names another (a local Hugging Face model, another OpenAI-compatible endpoint); a verdict that
cannot be had is missing, never 0. The plot ``scedit_spearman`` is the Spearman correlation of every two metrics
over cases (paper appendix E; :mod:`~lightning_edit.data.scedit.spearman`); S-BO's score kind is
:class:`~lightning_edit.data.scedit.bleedover.Bleedover`.

A record that does not have the format (a missing or mistyped field, an empty or whitespace-only prompt, an empty
list of prompts: a case that would silently drop out of a metric) is left out and listed, with its file, record and
field, under ``counts.skipped_records`` in results.json; the other records load.
:mod:`~lightning_edit.data.scedit.records` builds ScEdit-style records from a fact and its scripts.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning_edit.cases import EditCase, EditRequest, PromptGroup
from lightning_edit.data.base import DataFormatError, EditDataModule
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.data.scedit.bleedover import Bleedover
from lightning_edit.data.scedit.spearman import spearman_figure, spearman_matrix
from lightning_edit.data.sources import DataSource, SourceFile
from lightning_edit.errors import ConfigError
from lightning_edit.judges import one_judge
from lightning_edit.judges.kind import Generation, JudgedKind
from lightning_edit.scoring.kinds import ScoreKind

#: the paper's script-generation prompt (appendix A), verbatim; ``{question}`` is a Script Question
SCRIPT_PROMPT = (
    "Provide a step-by-step guide in Script form for answering the question: {question}.\n"
    "The Script should consist of brief events starting from Step 1, with a maximum of 9 steps.\n"
    "Each step should be a single concise action statement in one line less than 8 words.\n"
    "Do not include any explanations, details, notes, or further instructions.\n"
    "The script should consist only of the steps, and nothing else."
)
#: text-level metric -> its judge template, also the name of its judged score kind (paper appendix C.1, Figures 8-11)
TEXT_METRICS = {
    "Exec": "scedit_executability",
    "Coh": "scedit_coherence",
    "Cons": "scedit_consistency",
    "Comp": "scedit_completeness",
}
#: a script's default token budget (the released code: 300 tokens with the prompt)
SCRIPT_MAX_NEW_TOKENS = 200


def script_generation(max_new_tokens: int = SCRIPT_MAX_NEW_TOKENS) -> Generation:
    """How the text level writes a script: sampled top-k 5 as the released ``generate_fast2``, cut before a 10th step
    (the prompt allows 9)."""
    return Generation(max_new_tokens, do_sample=True, top_k=5, stop=("Step 10",))


_SCEDIT = "https://raw.githubusercontent.com/asdfo123/ScEdit/8906c5e/data"
#: the two published files, one per variant
SCEDIT_CF = DataSource(
    "scedit-cf",
    (SourceFile("ScEdit-CF.json", f"{_SCEDIT}/ScEdit-CF.json"),),
    "not stated",
    "https://github.com/asdfo123/ScEdit",
)
SCEDIT_T = DataSource(
    "scedit-t",
    (SourceFile("ScEdit-T.json", f"{_SCEDIT}/ScEdit-T.json"),),
    "not stated",
    "https://github.com/asdfo123/ScEdit",
)
#: the paper's judge (appendix B.2), the default of ``judge``
PAPER_JUDGE = {"openai_chat": {"model": "gpt-4o-2024-11-20"}}

_CF_KEYS = {"case_id", "prompt", "subject", "ground_truth", "target_new", "rephrase_prompts", "neighborhood_prompts"}
_T_KEYS = {"case_id", "prompt", "subject", "old_update", "new_update", "question", "neighborhood"}


class ScEdit(EditDataModule):
    """ScEdit-CF (``variant: cf``) or ScEdit-T (``variant: t``), token level and (CF) text level.

    Groups: ``rewrite`` (ES), ``script`` (S-ES), and ``script_neighborhood`` (S-NS, CF) or ``script_bleedover``
    (S-BO, T); with ``generation``, ``generation`` (GE); with ``text_level``, ``text`` (Exec, Coh, Cons, Comp).

    Args:
        path: the ScEdit JSON file (or ``scedit``: the published file of ``variant``, downloaded once).
        variant: ``cf`` (counterfactual edits) or ``t`` (temporal edits); a file of the other setting is an error.
        generation: also score the Script Questions by the n-gram entropy of a sampled script (GE).
        text_level: also judge the scripts the model writes for the Script Questions (CF): Exec, Coh, Cons, Comp.
        judge: the LLM judge of the text level as ``{judge: its arguments}``, the judge a short name or a class
            path: ``{"openai_chat": {"model": ..., "base_url": ..., "api_key_env": ...}}`` or ``{"local_lm":
            {"path": ...}}``, without a template (each metric has its own); None: the paper's,
            ``gpt-4o-2024-11-20`` with the key in ``$OPENAI_API_KEY``.
        script_prompt: the prompt of a script, with ``{question}`` for the Script Question; None: the paper's
            (:data:`SCRIPT_PROMPT`). The toy models, trained on bare how-to scripts, write theirs after ``{question}``.
        script_max_new_tokens: token budget of a generated script (the released code: 300 tokens with the prompt).
        **kwargs: ``limit``, ``offset``, ``sample_seed``, ``batch_size`` (:class:`EditDataModule`).
    """

    sources = (SCEDIT_CF, SCEDIT_T)

    def __init__(
        self,
        path: str,
        variant: Literal["cf", "t"] = "cf",
        generation: bool = False,
        text_level: bool = False,
        judge: dict[str, Any] | None = None,
        script_prompt: str | None = None,
        script_max_new_tokens: int = SCRIPT_MAX_NEW_TOKENS,
        **kwargs: Any,
    ):
        super().__init__(path, **kwargs)
        if text_level and variant != "cf":
            raise ConfigError("data.text_level judges scripts for ScEdit-CF's Script Questions; ScEdit-T has none")
        if judge is not None and "template" in one_judge("data.judge", judge)["init_args"]:
            raise ConfigError("data.judge: leave the template out; each text-level metric has its own (scedit_*)")
        if script_prompt is not None and "{question}" not in script_prompt:
            raise ConfigError(f"data.script_prompt={script_prompt!r}: write {{question}} where the question goes")
        self.variant = variant
        self.generation = generation
        self.text_level = text_level
        self.judge = judge or PAPER_JUDGE
        self.script_prompt = script_prompt or SCRIPT_PROMPT
        self.script_max_new_tokens = script_max_new_tokens

    def source_name(self) -> str | None:
        return f"scedit-{self.variant}" if self.path == "scedit" else self.path

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        groups = {"rewrite": DeclaredGroup({"prob": "ES"}), "script": DeclaredGroup({"prob": "S-ES"})}
        if self.variant == "cf":
            groups["script_neighborhood"] = DeclaredGroup({"prob": "S-NS"})
        else:
            groups["script_bleedover"] = DeclaredGroup({"bleedover": "S-BO"})
        if self.generation:
            groups["generation"] = DeclaredGroup(generated={"entropy": "GE"})
        if self.text_level:
            groups["text"] = DeclaredGroup(generated={template: metric for metric, template in TEXT_METRICS.items()})
        return groups

    def load_cases(self) -> list[EditCase]:
        """Every record that has the format; the others are left out and listed (:meth:`skip`)."""
        records = read_records(self.path)
        other = "new_update" if self.variant == "cf" else "rephrase_prompts"
        for index, record in enumerate(records):
            if other in record:
                setting = "ScEdit-T" if other == "new_update" else "ScEdit-CF"
                raise DataFormatError(
                    self.path, f"a {setting} record, but variant is {self.variant!r}", index, other
                )  # fmt: skip
        read_case = self._cf_case if self.variant == "cf" else self._t_case
        cases = []
        for index, record in enumerate(records):
            try:
                cases.append(read_case(RecordReader(self.path, index, record)))
            except DataFormatError as error:
                self.skip(index, str(error))
        return cases

    def own_kinds(self) -> list[ScoreKind]:
        """S-BO's :class:`Bleedover` and, with ``text_level``, the judged kinds of the text level: ``judge`` with
        each metric's template, on scripts written as :func:`script_generation` writes them."""
        if not self.text_level:
            return [Bleedover()]
        generation = script_generation(self.script_max_new_tokens)
        spec = one_judge("data.judge", self.judge)
        judged = [
            JudgedKind(template, spec | {"init_args": spec["init_args"] | {"template": template}}, generation)
            for template in TEXT_METRICS.values()
        ]
        return [Bleedover(), *judged]

    def figures(self, results: dict[str, dict[str, Any]], case_scores: dict[str, dict[int, float]]) -> dict[str, Any]:
        """``scedit_spearman`` (with ``text_level``): Spearman's rho between every two metrics, token level and text
        level, over the cases both scored (paper appendix E)."""
        names = [name for name in self.declared_metrics() if name in case_scores]
        if not self.text_level or len(names) < 2:
            return {}
        token_level = sum(name not in TEXT_METRICS for name in names)  # the token-level metrics come first
        return {"scedit_spearman": spearman_figure(spearman_matrix(case_scores, names), names, token_level)}

    def _request(self, reader: RecordReader, new_field: str, true_field: str, used: set[str]) -> EditRequest:
        subject = reader.string("subject")
        new = reader.answer(new_field)
        true = reader.answer(true_field)
        extra = {key: value for key, value in reader.record.items() if key not in used}
        return EditRequest(reader.template("prompt", subject), subject, new, true, extra)

    def _cf_case(self, reader: RecordReader) -> EditCase:
        request = self._request(reader, "target_new", "ground_truth", _CF_KEYS)
        new = request.target_new
        true = request.target_true
        declared = self.declared_groups()
        scripts = reader.strings("rephrase_prompts", at_least=1)
        groups = self._shared_groups(request, scripts, "rephrase_prompts", declared)
        neighbours = reader.strings("neighborhood_prompts", at_least=1)
        groups["script_neighborhood"] = declared["script_neighborhood"].shared_answer(
            neighbours, true, new, record_field="neighborhood_prompts"
        )
        if self.generation:
            questions = reader.strings("generation_prompts", at_least=1)
            groups["generation"] = declared["generation"].shared_answer(
                questions, new, record_field="generation_prompts"
            )
        if self.text_level:
            groups["text"] = self._text_group(request, reader.strings("generation_prompts", at_least=1), declared)
        return EditCase(reader.get("case_id", int), (request,), groups, f"{self.path}#{reader.index}")

    def _text_group(
        self, request: EditRequest, questions: list[str], declared: dict[str, DeclaredGroup]
    ) -> PromptGroup:
        """The script prompt around each Script Question; the judge reads the question, the fact prompt, both
        objects and the stage as the template's tag (``post``: Completeness judges by the new object; ``pre`` for the
        unedited model's ``_pre`` scores: by the true one)."""
        context = {
            "prompt": request.filled_prompt,
            "target_true": request.target_true,
            "target_new": request.target_new,
        }
        return PromptGroup(
            tuple(self.script_prompt.replace("{question}", question) for question in questions),
            (request.target_new,) * len(questions),
            metrics=declared["text"].reported,
            details=tuple({"question": question, "context": context} for question in questions),
            record_field="generation_prompts",
        )

    def _t_case(self, reader: RecordReader) -> EditCase:
        request = self._request(reader, "new_update", "old_update", _T_KEYS)
        questions = reader.strings("question", at_least=1)
        declared = self.declared_groups()
        groups = self._shared_groups(request, questions, "question", declared)
        neighbours = reader.get("neighborhood", list)
        if not neighbours:
            raise reader.error("neighborhood", "expected at least 1 neighbour, found 0")
        prompts = []
        objects = []
        for j, neighbour in enumerate(neighbours):
            field = f"neighborhood[{j}]"
            if not isinstance(neighbour, dict):
                raise reader.error(field, f"expected an object, found {type(neighbour).__name__}")
            for key in ("question", "object"):
                if not isinstance(neighbour.get(key), str) or not neighbour[key].strip():
                    raise reader.error(f"{field}.{key}", "missing or not a non-empty string")
            prompts.append(neighbour["question"])
            objects.append(neighbour["object"])
        groups["script_bleedover"] = PromptGroup(
            tuple(prompts), tuple(objects), metrics=declared["script_bleedover"].reported, record_field="neighborhood"
        )
        if self.generation:  # ScEdit-T has no Script Questions of its own: GE samples from its cloze prompts
            groups["generation"] = declared["generation"].shared_answer(
                questions, request.target_new, record_field="question"
            )
        return EditCase(reader.get("case_id", int), (request,), groups, f"{self.path}#{reader.index}")

    @staticmethod
    def _shared_groups(
        request: EditRequest, scripts: list[str], scripts_field: str, declared: dict[str, DeclaredGroup]
    ) -> dict[str, PromptGroup]:
        new = request.target_new
        true = request.target_true
        return {
            "rewrite": declared["rewrite"].shared_answer([request.filled_prompt], new, true, record_field="prompt"),
            "script": declared["script"].shared_answer(scripts, new, true, record_field=scripts_field),
        }
