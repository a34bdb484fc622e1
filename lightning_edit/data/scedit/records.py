"""ScEdit-style records built from a fact and its how-to scripts: script cloze prompts and ScEdit-CF records."""

from __future__ import annotations

from typing import Any


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
