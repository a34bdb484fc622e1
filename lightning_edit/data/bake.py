"""BAKE (Ma et al., "Untying the Reversal Curse via Bidirectional Language Model Editing", the reversal curse).

A record is a ROME-format CounterFact record plus a ``reverse_qa`` block (BAKE-Q&J only: ``"London is the capital of"``
→ ``France``, competing with the original ``England``) and a ``reverse_judge`` block (``"Whether London is the capital
of France?"`` → ``Yes`` vs ``No``); docs/benchmarks/bake.md#bake. Metrics (paper §4; fractions, not percentages):

- ES (rewrite prompt), GS (paraphrases), LS (neighbourhood prompts keep the true answer);
- RQS (reverse QA) and RJS (reverse judgment), each counted only where the unedited model preferred the original
  answer (the paper's filter, ``pre_edit_filter``; the prompts left out are reported as ``reverse_qa_filtered`` and
  ``reverse_judge_filtered``);
- RS = mean(RQS, RJS) (BAKE-J: RS = RJS) and S = harmonic mean of ES, GS, LS and RS, computed from the aggregates
  (macro from macro, micro from micro);
- the log-probability analysis (paper Figure 3): the mean per-token log-probability of the desired answer
  (``RQ_logprob_new``) and of the original answer (``RQ_logprob_true``) on reverse-QA prompts, after editing and,
  as ``<metric>_pre``, before; drawn as the figure ``bake_logprob``.

Two scoring conventions (``convention``): ``probability``, the paper's code (1 iff the mean per-token NLL of the new
answer is below that of the true one; LS: the true answer stays preferred), and ``token_accuracy``, the 2025
EasyEdit-based code (teacher-forced token accuracy; LS: argmax agreement with the unedited model; without its
judgment bug that scores 0 for every non-GRACE method; docs/benchmarks/bake.md#bake). The filter compares probabilities
under both. With ``generated_answers``, a greedy answer to each prompt is also generated and graded beside them
(``ES_gen``, ``GS_gen``, ``RQS_gen``, ``RJS_gen`` and their ``_contains``, ``LS_gen``;
:mod:`lightning_edit.data.answers`); the filter leaves the same reverse prompts out of them.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

from lightning_edit.cases import EditCase
from lightning_edit.data.answers import AnswerContext, GeneratedAnswers
from lightning_edit.data.base import EditDataModule
from lightning_edit.data.counterfact_records import rome_request
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.data.sources import DataSource, SourceFile
from lightning_edit.errors import ConfigError
from lightning_edit.scoring.kinds import ScoreKind

log = logging.getLogger(__name__)

_HUB = "https://huggingface.co/datasets/jym7/BAKE"
_LICENSE = "not stated (github.com/mjy1111/BAKE has no licence file)"
#: the two files of the Hugging Face dataset jym7/BAKE, one per variant
BAKE_QA = DataSource(
    "bake-qa", (SourceFile("BAKE_qa.json", f"{_HUB}/resolve/main/BAKE_qa.json", hf_repo="jym7/BAKE"),), _LICENSE, _HUB
)
BAKE_JUDGE = DataSource(
    "bake-judge",
    (SourceFile("BAKE_judge.json", f"{_HUB}/resolve/main/BAKE_judge.json", hf_repo="jym7/BAKE"),),
    _LICENSE,
    _HUB,
)

# Judgment prompts of the paper's code per model family; {} is the statement (docs/benchmarks/bake.md#bake). "record"
# uses the record's reverse_judge.prompt as it is (the code's setting for GPT-2 XL). "llama-2" joins its
# instruction and the statement with no space, as the paper's code does.
JUDGE_TEMPLATES = {
    "record": "",
    "gpt-j": "{}, is the information described in this sentence correct?",
    "llama": "{}, is the information described in this sentence true?",
    "llama-2": "Please use yes or no to judge the factuality of the following sentence. Yes means this sentence is "
    "correct, and no means it is wrong.{}. Is this sentence correct?",
}
FAMILY_CANDIDATES = ("yes, it is true", "no, it is false")  # the answers compared with a family template
_BAKE_KEYS = {
    "case_id",
    "requested_rewrite",
    "paraphrase_prompts",
    "neighborhood_prompts",
    "reverse_qa",
    "reverse_judge",
}


class BAKE(EditDataModule):
    """BAKE-Q&J (``variant: qa``, file ``BAKE_qa.json``) or BAKE-J (``variant: judge``, ``BAKE_judge.json``).

    Groups: ``rewrite`` (ES), ``paraphrase`` (GS), ``neighborhood`` (LS), ``reverse_judge`` (RJS) and, for
    BAKE-Q&J, ``reverse_qa`` (RQS) with ``reverse_qa_new``/``reverse_qa_true`` (the log-probability analysis).

    Args:
        path: the BAKE JSON file (or ``bake``: the published file of ``variant``, downloaded once; ``bake-qa`` and
            ``bake-judge`` name each).
        variant: ``qa`` scores reverse QA and judgment; ``judge`` judgment only (a record's ``reverse_qa`` block is
            then ignored, as the paper's code does, with a logged note).
        convention: ``probability`` (the paper) or ``token_accuracy`` (the 2025 EasyEdit-based code).
        pre_edit_filter: count a reverse prompt only where the unedited model preferred the original answer.
        judge_template: ``record`` (the record's judgment prompt), a family (``gpt-j``, ``llama``, ``llama-2``) or a
            template with one ``{}`` for the statement: ``reverse_qa.prompt + " " + reverse_qa.target_new``
            (BAKE-Q&J) or the judgment prompt with every ``"Whether "`` and ``"?"`` removed and its first letter
            upper-cased (BAKE-J, :func:`judge_statement`).
        judge_candidates: the (expected, alternative) answers of a judgment; default: the record's
            ``reverse_judge`` targets with ``record``, ("yes, it is true", "no, it is false") with a template.
        generated_answers: also generate an answer to every prompt and grade it (``bare``, ``qa_inst`` or ``chat``;
            docs/metrics.md#generated-answers): ``<metric>_gen`` (exact match against the expected answer: the new
            object, the reverse question's new answer, the judgment's "yes") and ``<metric>_gen_contains``; ``LS_gen``
            (the neighbour's answer unchanged).
        answer_judge: also grade those answers (edit and paraphrase prompts) by this judge, given as ``{judge: its
            arguments}`` (e.g. ``openai_chat`` with ``template: answer_correct``): ``<metric>_gen_judged``.
        **kwargs: ``limit``, ``offset``, ``sample_seed``, ``batch_size`` (:class:`EditDataModule`).
    """

    sources = (BAKE_QA, BAKE_JUDGE)

    def __init__(
        self,
        path: str,
        variant: Literal["qa", "judge"] = "qa",
        convention: Literal["probability", "token_accuracy"] = "probability",
        pre_edit_filter: bool = True,
        judge_template: str = "record",
        judge_candidates: tuple[str, str] | None = None,
        generated_answers: AnswerContext | None = None,
        answer_judge: dict[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ):
        super().__init__(path, **kwargs)
        self.answers = GeneratedAnswers(generated_answers, answer_judge)
        self.variant = variant
        self.convention = convention
        self.pre_edit_filter = pre_edit_filter
        template = JUDGE_TEMPLATES.get(judge_template, judge_template)
        if template and template.count("{}") != 1:
            raise ConfigError(
                f"judge_template {judge_template!r}: neither a family ({', '.join(JUDGE_TEMPLATES)}) nor a template "
                "with one {} for the statement"
            )
        self.judge_template = template
        self.judge_candidates = tuple(judge_candidates) if judge_candidates else None

    def source_name(self) -> str | None:
        """``path: bake`` names the published file of the variant, source ``bake-qa`` or ``bake-judge``."""
        return f"bake-{self.variant}" if self.path == "bake" else self.path

    def own_kinds(self) -> list[ScoreKind]:
        """The kinds that grade its generated answers (none without ``generated_answers``)."""
        return self.answers.score_kinds()

    def load_cases(self) -> list[EditCase]:
        records = read_records(self.path)
        cases = [self._case(RecordReader(self.path, index, record)) for index, record in enumerate(records)]
        ignored = sum("reverse_qa" in record for record in records)
        if self.variant == "judge" and ignored:
            log.warning(
                "%s: %d of %d records carry reverse_qa; BAKE-J scores reverse judgment only, as the paper's code "
                "does, so it is not scored (variant: qa scores it)",
                self.path,
                ignored,
                len(records),
            )
        return cases

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        """The groups; with ``generated_answers``, every group but the log-probability analysis's also grades an
        answer (the locality group: ``LS_gen``, the answer unchanged)."""
        probability = self.convention == "probability"
        success = "prob" if probability else "token_acc"
        stays = "prob" if probability else "agreement"  # LS: the true answer stays preferred, or the argmax unchanged
        answers = self.answers
        groups = {
            "rewrite": DeclaredGroup({success: "ES"}, answers.metrics("ES")),
            "paraphrase": DeclaredGroup({success: "GS"}, answers.metrics("GS")),
            "neighborhood": DeclaredGroup({stays: "LS"}, answers.metrics("LS", locality=True)),
        }
        reverse = [("reverse_qa", "RQS")] * (self.variant == "qa") + [("reverse_judge", "RJS")]
        for group, metric in reverse:
            groups[group] = DeclaredGroup(
                {success: metric}, answers.metrics(metric), pre_edit_filter=self.pre_edit_filter
            )
        if self.variant == "qa":
            groups["reverse_qa_new"] = DeclaredGroup({"logprob": "RQ_logprob_new"}, pre_edit=True)
            groups["reverse_qa_true"] = DeclaredGroup({"logprob": "RQ_logprob_true"}, pre_edit=True)
        return groups

    def derived_names(self) -> tuple[str, ...]:
        return ("RS", "S")

    def _case(self, reader: RecordReader) -> EditCase:
        request = rome_request(reader, _BAKE_KEYS)
        new = request.target_new
        true = request.target_true
        declared = self.declared_groups()
        groups = {
            "rewrite": declared["rewrite"].shared_answer(
                [request.filled_prompt], new, true, record_field="requested_rewrite.prompt"
            ),
            "paraphrase": declared["paraphrase"].shared_answer(
                reader.strings("paraphrase_prompts"), new, true, record_field="paraphrase_prompts"
            ),
            "neighborhood": declared["neighborhood"].shared_answer(
                reader.strings("neighborhood_prompts"), true, new, record_field="neighborhood_prompts"
            ),
        }
        statement = None
        if self.variant == "qa":
            prompt = reader.string("reverse_qa.prompt")
            qa_new = reader.answer("reverse_qa.target_new")
            qa_true = reader.answer("reverse_qa.target_true")
            field = "reverse_qa.prompt"
            groups["reverse_qa"] = declared["reverse_qa"].shared_answer([prompt], qa_new, qa_true, record_field=field)
            groups["reverse_qa_new"] = declared["reverse_qa_new"].shared_answer([prompt], qa_new, record_field=field)
            groups["reverse_qa_true"] = declared["reverse_qa_true"].shared_answer([prompt], qa_true, record_field=field)
            statement = f"{prompt} {qa_new}"
        judge = reader.string("reverse_judge.prompt")
        if self.judge_template:
            if statement is None:
                statement = judge_statement(judge)
            judge = self.judge_template.replace("{}", statement)
            yes, no = self.judge_candidates or FAMILY_CANDIDATES
        else:
            yes, no = self.judge_candidates or (
                reader.answer("reverse_judge.target_new"),
                reader.answer("reverse_judge.target_true"),
            )
        groups["reverse_judge"] = declared["reverse_judge"].shared_answer(
            [judge], yes, no, record_field="reverse_judge.prompt"
        )
        return EditCase(reader.get("case_id", int), (request,), groups, f"{self.path}#{reader.index}")

    def derived_metrics(self, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """RS = mean(RQS, RJS) (BAKE-J: RJS) and S = harmonic mean of ES, GS, LS and RS, per aggregation."""
        rs_parts = ["RQS", "RJS"] if self.variant == "qa" else ["RJS"]
        derived = {"RS": _combine(results, rs_parts, _mean, f"RS = mean({', '.join(rs_parts)})")}
        derived["S"] = _combine(
            results | derived, ["ES", "GS", "LS", "RS"], _harmonic_mean, "S = harmonic mean(ES, GS, LS, RS)"
        )
        return derived

    def figures(self, results: dict[str, dict[str, Any]], case_scores: dict[str, dict[int, float]]) -> dict[str, Any]:
        """``bake_logprob``: mean log-probability of the original and desired reverse answers, before and after."""
        names = ["RQ_logprob_true_pre", "RQ_logprob_true", "RQ_logprob_new_pre", "RQ_logprob_new"]
        if not all(name in results for name in names):
            return {}
        return {"bake_logprob": logprob_figure({name: results[name]["macro"] for name in names})}


def judge_statement(prompt: str) -> str:
    """BAKE-J's statement of a judgment prompt, as the paper's code builds it: every ``"Whether "`` and every ``"?"``
    removed, then the first character upper-cased (``"Whether london is in France?"`` -> ``"London is in France"``)."""
    statement = prompt.replace("Whether ", "").replace("?", "")
    return statement[:1].upper() + statement[1:]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _harmonic_mean(values: list[float]) -> float:
    return 0.0 if min(values) <= 0 else len(values) / sum(1 / v for v in values)


def _combine(results: dict[str, dict[str, Any]], parts: list[str], combine, formula: str) -> dict[str, Any]:
    """A derived metric: ``combine`` of the parts' aggregates, NaN when a part is missing or NaN."""
    row: dict[str, Any] = {"kind": "derived", "convention": formula}
    for aggregation in ("macro", "micro"):
        values = [results[p][aggregation] if p in results else math.nan for p in parts]
        row[aggregation] = math.nan if any(math.isnan(v) for v in values) else combine(values)
    row["n_cases"] = max((results[p]["n_cases"] for p in parts if p in results), default=0)
    row["n_prompts"] = sum(results[p]["n_prompts"] for p in parts if p in results)
    return row


def logprob_figure(values: dict[str, float]):
    """Grouped bars (paper Figure 3): original and desired answer on reverse-QA prompts, before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3.5))
    positions = [0, 1]
    for offset, (label, suffix, colour) in enumerate(
        [("before editing", "_pre", "tab:gray"), ("after", "", "tab:orange")]
    ):
        heights = [values[f"RQ_logprob_true{suffix}"], values[f"RQ_logprob_new{suffix}"]]
        axes.bar([p + (offset - 0.5) * 0.38 for p in positions], heights, width=0.38, label=label, color=colour)
    axes.set_xticks(positions, ["original answer", "desired answer"])
    axes.set_ylabel("mean log-probability (nats/token)")
    axes.set_title("Reverse QA: log-probability of the answers")
    axes.axhline(0, color="black", linewidth=0.8)
    axes.legend()
    figure.tight_layout()
    return figure
