"""Score the prompt groups of edit cases: one batched forward pass for every (prompt, answer) pair they need.

:class:`CaseScorer` turns :class:`~lightning_edit.data.schema.EditCase` prompt groups into per-prompt scores of
the kinds each group asks for (see :mod:`lightning_edit.metrics` for the conventions). Pairs shared between kinds
(the expected answer is used by ``prob``, ``token_acc`` and ``agreement``) are scored once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.data.schema import EditCase
from lightning_edit.metrics import ngram_entropy
from lightning_edit.models.tokenization import format_prompt
from lightning_edit.scoring import TargetScore, agreement, generate, prefers, score_targets

# (case id, group name, prompt index) -> argmax token ids of the unedited model along the expected answer
Reference = dict[tuple[int, str, int], torch.Tensor]
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
    """

    batch_size: int = 32
    chat_template: bool = False
    generation_max_length: int = 100
    generation_top_k: int = 5
    seed: int = 0


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
        """Argmax tokens of the current (unedited) model on every prompt scored by ``agreement``."""
        slots = [
            (case.case_id, name, k, (self._prompt(prompt), group.expected[k]))
            for case in cases
            for name, group in case.groups.items()
            if "agreement" in group.metrics
            for k, prompt in enumerate(group.prompts)
        ]
        scores = self._score_pairs(dict.fromkeys(pair for *_, pair in slots))
        return {(case_id, name, k): scores[pair].argmax_ids for case_id, name, k, pair in slots}

    def score(self, cases: list[EditCase], reference: Reference | None = None) -> Scores:
        """Per-prompt scores of every metric of every case, with the model as it is now."""
        pairs: dict[tuple[str, str], None] = {}
        for case in cases:
            for group in case.groups.values():
                kinds = set(group.metrics) - {"entropy"}
                for k, prompt in enumerate(group.prompts):
                    if kinds:
                        pairs[(self._prompt(prompt), group.expected[k])] = None
                    if "prob" in kinds:
                        pairs[(self._prompt(prompt), group.alternatives[k])] = None
        target_scores = self._score_pairs(pairs)

        results: Scores = {}
        for case in cases:
            texts = self._generations(case)
            for name, group in case.groups.items():
                for kind, metric in group.metrics.items():
                    rows = results.setdefault(metric, (kind, []))[1]
                    for k, prompt in enumerate(group.prompts):
                        prompt = self._prompt(prompt)
                        if kind == "entropy":
                            value = ngram_entropy(prompt + texts[(name, k)])
                        else:
                            expected = target_scores[(prompt, group.expected[k])]
                            if kind == "prob":
                                value = prefers(expected, target_scores[(prompt, group.alternatives[k])])
                            elif kind == "token_acc":
                                value = expected.accuracy
                            else:
                                if reference is None:
                                    raise ValueError(f"metric {metric!r} (agreement) needs a pre-edit reference")
                                value = agreement(reference[(case.case_id, name, k)], expected)
                        rows.append((case.case_id, k, value))
        return results

    def _generations(self, case: EditCase) -> dict[tuple[str, int], str]:
        """Sampled continuations of the case's ``entropy`` prompts (ROME ``generate_fast`` settings)."""
        slots = [
            (name, k, self._prompt(prompt))
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
