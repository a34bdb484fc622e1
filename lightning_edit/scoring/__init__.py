"""Batched, padding-invariant scoring of prompts: target likelihoods, token accuracy, options, generation."""

from lightning_edit.scoring.generation import cut_at_stop, generate
from lightning_edit.scoring.options import option_distribution, option_token_ids
from lightning_edit.scoring.targets import TargetScore, agreement, prefers, score_targets

__all__ = [
    "TargetScore",
    "agreement",
    "cut_at_stop",
    "generate",
    "option_distribution",
    "option_token_ids",
    "prefers",
    "score_targets",
]
