"""Batched, padding-invariant scoring of prompts: target likelihoods, token accuracy, generation."""

from lightning_edit.scoring.generation import cut_at_stop, generate
from lightning_edit.scoring.targets import TargetScore, agreement, prefers, score_targets

__all__ = [
    "TargetScore",
    "agreement",
    "cut_at_stop",
    "generate",
    "prefers",
    "score_targets",
]
