"""Score the prompt groups of edit cases: one batched forward pass for every (prompt, answer) pair they need.

:class:`CaseScorer` turns :class:`~lightning_edit.data.schema.EditCase` prompt groups into per-prompt scores of
the kinds each group asks for (see :mod:`lightning_edit.metrics` for the conventions). Pairs shared between kinds
(the expected answer is used by ``prob``, ``token_acc``, ``logprob`` and ``agreement``) are scored once. The
unedited model's scores (:meth:`CaseScorer.reference`) serve locality by agreement, BAKE's pre-edit filter and the
``<metric>_pre`` reports; an in-context editor's text is put before each prompt of its case.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.data.schema import EditCase
from lightning_edit.metrics import ngram_entropy
from lightning_edit.models.tokenization import format_prompt
from lightning_edit.scoring import TargetScore, agreement, generate, prefers, score_targets


@dataclass(frozen=True)
class UneditedScore:
    """The unedited model's scores of one prompt: its expected answer and, if the group has one, the alternative."""

    expected: TargetScore
    alternative: TargetScore | None

    @property
    def prefers_alternative(self) -> bool:
        """BAKE's filter: the unedited model did not find the expected answer more likely (NLL ties are kept)."""
        return self.alternative is not None and not self.alternative.nll > self.expected.nll


# (case id, group name, prompt index) -> the unedited model's scores, for groups scored by agreement or filtered
Reference = dict[tuple[int, str, int], UneditedScore]
# metric name -> (score kind, [(case id, prompt index, score), ...])
Scores = dict[str, tuple[str, list[tuple[int, int, float]]]]


@dataclass
class ScoringConfig:
    """How evaluation prompts are scored.

    Args:
        batch_size: sequences per forward pass.
        chat_template: format every prompt as one user turn of the tokenizer's chat template (instruct models).
            Off by default, as in the papers; note EasyEdit applies it to all but locality prompts.
        generation_max_length: tokens of prompt + generated text for generation metrics (ROME: 100).
        generation_top_k: generation metrics sample with top-k (ROME: 5).
        seed: generation for case ``i`` is seeded with ``seed + case_id``, so it does not depend on batching or
            on the number of processes.
        pre_edit: also score every metric on the unedited model, reported as ``<metric>_pre`` (groups that ask
            for it, such as BAKE's log-probability analysis, always are).
    """

    batch_size: int = 32
    chat_template: bool = False
    generation_max_length: int = 100
    generation_top_k: int = 5
    seed: int = 0
    pre_edit: bool = False


class CaseScorer:
    """Scores edit cases' prompt groups with one model."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: ScoringConfig):
        self.model, self.tokenizer, self.config = model, tokenizer, config

    def _prompt(self, prompt: str) -> str:
        return format_prompt(self.tokenizer, prompt, self.config.chat_template)

    def _score_pairs(self, pairs: dict[tuple[str, str], None]) -> dict[tuple[str, str], TargetScore]:
        keys = list(pairs)
        scores = score_targets(
            self.model, self.tokenizer, [p for p, _ in keys], [t for _, t in keys], self.config.batch_size
        )
        return dict(zip(keys, scores))

    def reference(self, cases: list[EditCase]) -> Reference:
        """The current (unedited) model's scores of every prompt scored by ``agreement`` or filtered before editing."""
        slots = [
            (
                case.case_id,
                name,
                k,
                self._prompt(prompt),
                group.expected[k],
                group.alternatives[k] if group.pre_edit_filter else None,  # the filter compares both
            )
            for case in cases
            for name, group in case.groups.items()
            if "agreement" in group.metrics or group.pre_edit_filter
            for k, prompt in enumerate(group.prompts)
        ]
        pairs = {
            (prompt, answer): None
            for *_, prompt, expected, alternative in slots
            for answer in (expected, alternative)
            if answer
        }
        scores = self._score_pairs(pairs)
        return {
            (case_id, name, k): UneditedScore(scores[(prompt, expected)], alternative and scores[(prompt, alternative)])
            for case_id, name, k, prompt, expected, alternative in slots
        }

    def score(
        self, cases: list[EditCase], reference: Reference | None = None, contexts: dict[int, str] | None = None
    ) -> Scores:
        """Per-prompt scores of every metric of every case, with the model as it is now.

        ``reference`` holds the unedited model's scores (needed by ``agreement`` and filtered groups);
        ``contexts`` maps a case id to a text put before each of its prompts (in-context editing).
        """
        contexts = contexts or {}
        pairs: dict[tuple[str, str], None] = {}
        for case in cases:
            context = contexts.get(case.case_id, "")
            for group in case.groups.values():
                kinds = set(group.metrics) - {"entropy"}
                for k, prompt in enumerate(group.prompts):
                    if kinds:
                        pairs[(self._prompt(context + prompt), group.expected[k])] = None
                    if "prob" in kinds:
                        pairs[(self._prompt(context + prompt), group.alternatives[k])] = None
        target_scores = self._score_pairs(pairs)

        results: Scores = {}
        for case in cases:
            context = contexts.get(case.case_id, "")
            texts = self._generations(case, context)
            for name, group in case.groups.items():
                kept = range(len(group.prompts))
                if group.pre_edit_filter:
                    unedited = _unedited(reference, case, name, len(group.prompts))
                    kept = [k for k in kept if unedited[k].prefers_alternative]
                    rows = results.setdefault(f"{name}_filtered", ("filtered", []))[1]
                    rows += [(case.case_id, k, float(k not in kept)) for k in range(len(group.prompts))]
                for kind, metric in group.metrics.items():
                    rows = results.setdefault(metric, (kind, []))[1]
                    for k in kept:
                        prompt = self._prompt(context + group.prompts[k])
                        if kind == "entropy":
                            value = ngram_entropy(prompt + texts[(name, k)])
                            rows.append((case.case_id, k, value))
                            continue
                        expected = target_scores[(prompt, group.expected[k])]
                        if kind == "prob":
                            value = prefers(expected, target_scores[(prompt, group.alternatives[k])])
                        elif kind == "token_acc":
                            value = expected.accuracy
                        elif kind == "logprob":
                            value = float(expected.logprobs.mean())
                        else:
                            unedited = _unedited(reference, case, name, len(group.prompts))
                            value = agreement(unedited[k].expected.argmax_ids, expected)
                        rows.append((case.case_id, k, value))
        return results

    def score_unedited(self, cases: list[EditCase], reference: Reference, every_group: bool = False) -> Scores:
        """Scores of the groups marked ``pre_edit`` (or of every group), named ``<metric>_pre``; call it before
        any edit, with the reference of the same unedited model."""
        selected = [
            replace(case, groups={name: g for name, g in case.groups.items() if every_group or g.pre_edit})
            for case in cases
        ]
        return {f"{name}_pre": value for name, value in self.score(selected, reference).items()}

    def _generations(self, case: EditCase, context: str) -> dict[tuple[str, int], str]:
        """Sampled continuations of the case's ``entropy`` prompts (ROME ``generate_fast`` settings)."""
        slots = [
            (name, k, self._prompt(context + prompt))
            for name, group in case.groups.items()
            if "entropy" in group.metrics
            for k, prompt in enumerate(group.prompts)
        ]
        if not slots:
            return {}
        texts = generate(
            self.model,
            self.tokenizer,
            [prompt for *_, prompt in slots],
            max_length=self.config.generation_max_length,
            do_sample=True,
            top_k=self.config.generation_top_k,
            seed=self.config.seed + case.case_id,
            batch_size=self.config.batch_size,
        )
        return {(name, k): text for (name, k, _), text in zip(slots, texts)}


def _unedited(reference: Reference | None, case: EditCase, group: str, n_prompts: int) -> list[UneditedScore]:
    """The unedited model's scores of a group's prompts, or an error saying the reference is missing."""
    if n_prompts and (reference is None or (case.case_id, group, 0) not in reference):
        raise ValueError(f"case {case.case_id}, group {group!r}: scoring needs the unedited model's reference")
    return [reference[(case.case_id, group, k)] for k in range(n_prompts)]
