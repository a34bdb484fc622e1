"""Generated answers: what the model says, graded, beside the teacher-forced metrics (docs/metrics.md).

QAEdit (Yang et al., 2025, "The Mirage of Model Editing: Revisiting Evaluation in the Wild") shows that teacher
forcing leaks the answer's content and length: an edit that wins the probability comparison may not show in what the
model says. With ``generated_answers`` a benchmark also generates a greedy answer to its edit, paraphrase and
neighbourhood prompts, as QAEdit's code does: at most 50 new tokens (a budget that does not depend on the target),
ending before the first ``.`` or newline or at the end of sequence. The answer is graded by SQuAD exact match against
the new object (``<metric>_gen``) and by whole-word containment (``<metric>_gen_contains``); a neighbourhood answer
must equal the unedited model's answer to the same prompt (``<metric>_gen``). With ``answer_judge`` (one judge and
its arguments, e.g. an LLM behind an OpenAI-compatible endpoint with the ``answer_correct`` template) the answers to
the edit and paraphrase prompts are also graded by it (``<metric>_gen_judged``). Contexts: ``bare`` (the prompt alone,
QAEdit's default), ``qa_inst`` (QAEdit's QA instruction around it) or ``chat`` (the prompt as one user turn of the
tokenizer's chat template; a tokenizer without one is an error before any edit). A benchmark holds the two settings
as one :class:`GeneratedAnswers`, which names their score kinds and the metrics a prompt group reports with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lightning_edit.errors import ConfigError
from lightning_edit.scoring.kinds import ScoreKind

AnswerContext = Literal["bare", "qa_inst", "chat"]
#: the prompt as each context asks it (``qa_inst``: QAEdit's ``context_type: qa_inst``; ``chat``: the prompt alone,
#: in the chat template)
CONTEXTS: dict[str, str] = {"bare": "{}", "qa_inst": "Please answer the question:\n\nQ: {}\nA:", "chat": "{}"}
#: QAEdit's generation: greedy, 50 new tokens at most, stopped at a sentence end or a newline (and EOS)
MAX_NEW_TOKENS = 50
STOP = (".", "\n")


@dataclass(frozen=True)
class GeneratedAnswers:
    """A benchmark's generated answers, from its two settings: ``context`` (``data.generated_answers``; None: no
    generated answers) and ``judge`` (``data.answer_judge``: one judge and its arguments, or None). Checked when
    made; it names their score kinds and the metrics a prompt group reports with them."""

    context: AnswerContext | None = None
    judge: dict[str, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.context is None:
            if self.judge is not None:
                raise ConfigError("data.answer_judge grades generated answers: set data.generated_answers too")
            return
        if self.context not in CONTEXTS:
            raise ConfigError(f"data.generated_answers={self.context!r}: one of {', '.join(CONTEXTS)}, or null")
        if self.judge is not None:
            from lightning_edit.judges import one_judge  # judges load only when used

            one_judge("data.answer_judge", self.judge)

    @property
    def kinds(self) -> dict[str, str]:
        """The names of the graded-answer kinds by role: ``exact``, ``contains`` (against the expected answer),
        ``unchanged`` (equal, after normalisation, to the unedited model's answer) and, with a judge, ``judged``;
        none without a context."""
        if self.context is None:
            return {}
        roles = ("exact", "contains", "unchanged") + ("judged",) * (self.judge is not None)
        return {role: f"answer_{role}_{self.context}" for role in roles}

    def score_kinds(self) -> list[ScoreKind]:
        """The judged kinds of :attr:`kinds`, each holding its judge: a benchmark's ``own_kinds``."""
        if self.context is None:
            return []
        from lightning_edit.judges import one_judge
        from lightning_edit.judges.kind import Generation, JudgedKind

        names = self.kinds
        generation = Generation(
            MAX_NEW_TOKENS, stop=STOP, template=CONTEXTS[self.context], chat_template=self.context == "chat"
        )
        kinds = [
            JudgedKind(names["exact"], "exact_match", generation, label="generated, exact match"),
            JudgedKind(names["contains"], "contains", generation, label="generated, contains"),
            JudgedKind(names["unchanged"], "exact_match", generation, "generated, unchanged", against_unedited=True),
        ]
        if self.judge is not None:
            spec = one_judge("data.answer_judge", self.judge)
            label = f"generated, judged ({spec['class_path']})"
            kinds.append(JudgedKind(names["judged"], spec, generation, label=label))
        return kinds

    def metrics(self, metric: str, locality: bool = False) -> dict[str, str]:
        """Kind -> reported name of a group's generated-answer metrics: ``<metric>_gen``, ``<metric>_gen_contains``
        and, with a judge, ``<metric>_gen_judged``; for a locality group ``<metric>_gen`` alone (the answer
        unchanged); none without a context."""
        kinds = self.kinds
        if not kinds:
            return {}
        if locality:
            return {kinds["unchanged"]: f"{metric}_gen"}
        names = {kinds["exact"]: f"{metric}_gen", kinds["contains"]: f"{metric}_gen_contains"}
        return names | ({kinds["judged"]: f"{metric}_gen_judged"} if "judged" in kinds else {})
