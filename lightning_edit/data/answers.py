"""Generated answers: what the model says, graded, beside the teacher-forced metrics (docs/metrics.md).

QAEdit (Yang et al., 2025, "The Mirage of Model Editing: Revisiting Evaluation in the Wild") shows that teacher
forcing leaks the answer's content and length: an edit that wins the probability comparison may not show in what the
model says. With ``generated_answers`` a benchmark also generates a greedy answer to its edit, paraphrase and
neighbourhood prompts, as QAEdit's code does: at most 50 new tokens (a budget that does not depend on the target),
ending before the first ``.`` or newline or at the end of sequence. The answer is graded by SQuAD exact match against
the new object (``<metric>_gen``) and by whole-word containment (``<metric>_gen_contains``); a neighbourhood answer
must equal the unedited model's answer to the same prompt (``<metric>_gen``). Contexts: ``bare`` (the prompt alone,
QAEdit's default), ``qa_inst`` (QAEdit's QA instruction around it) or ``chat`` (the prompt as one user turn of the
tokenizer's chat template; a tokenizer without one is an error before any edit).
"""

from __future__ import annotations

from typing import Literal

from lightning_edit.errors import ConfigError

AnswerContext = Literal["bare", "qa_inst", "chat"]
#: the prompt as each context asks it (``qa_inst``: QAEdit's ``context_type: qa_inst``; ``chat``: the prompt alone,
#: in the chat template)
CONTEXTS: dict[str, str] = {"bare": "{}", "qa_inst": "Please answer the question:\n\nQ: {}\nA:", "chat": "{}"}
#: QAEdit's generation: greedy, 50 new tokens at most, stopped at a sentence end or a newline (and EOS)
MAX_NEW_TOKENS, STOP = 50, (".", "\n")


def answer_kinds(context: AnswerContext) -> dict[str, str]:
    """The names of the three graded-answer kinds of ``context`` by role: ``exact``, ``contains`` (against the
    expected answer) and ``unchanged`` (equal, after normalisation, to the unedited model's answer)."""
    if context not in CONTEXTS:
        raise ConfigError(f"data.generated_answers={context!r}: one of {', '.join(CONTEXTS)}, or null")
    return {role: f"answer_{role}_{context}" for role in ("exact", "contains", "unchanged")}


def register_answer_kinds(context: AnswerContext) -> dict[str, str]:
    """Register the kinds of :func:`answer_kinds` (before the prompt groups that name them are built)."""
    from lightning_edit.judges.kind import Generation, register_judged_kind  # judges load only when used

    names = answer_kinds(context)
    generation = Generation(MAX_NEW_TOKENS, stop=STOP, template=CONTEXTS[context], chat_template=context == "chat")
    register_judged_kind(names["exact"], "exact_match", generation, label="generated, exact match")
    register_judged_kind(names["contains"], "contains", generation, label="generated, contains")
    register_judged_kind(names["unchanged"], "exact_match", generation, "generated, unchanged", against_unedited=True)
    return names


def answer_metrics(kinds: dict[str, str], metric: str, locality: bool = False) -> dict[str, str]:
    """Kind -> reported name of a group's generated-answer metrics: ``<metric>_gen`` and ``<metric>_gen_contains``,
    or for a locality group ``<metric>_gen`` alone (the answer unchanged)."""
    if locality:
        return {kinds["unchanged"]: f"{metric}_gen"}
    return {kinds["exact"]: f"{metric}_gen", kinds["contains"]: f"{metric}_gen_contains"}
