"""How many facts of a :class:`~lightning_edit.toy.world.ToyWorld` a model recalls, forward and inverse.

Convention (greedy first object token): a prompt recalls its fact when the argmax next token after the prompt is the
first token of the answer, the answer being encoded as in
:func:`~lightning_edit.models.tokenization.encode_prompt_target` (``prompt + " " + answer``; the answer's tokens are
those the joint string adds after the prompt's own tokens). One teacher-forced pass of
:func:`~lightning_edit.scoring.score_targets` gives it as ``argmax_ids[0] == target_ids[0]``.

- **forward recall**: every forward template of the relation, filled with the subject; the answer is the object.
- **inverse recall**: every inverse template of a one-to-one relation, filled with the object; the answer is the
  subject. Split by how the training text states the fact: ``bidirectional`` facts are also stated inversely,
  ``forward_only`` facts never are, so a model trained on the toy corpus should recall them inversely at chance
  level only (the reversal curse, Berglund et al., 2023).

Shares are over prompts (fact x template); ``by_template`` and ``by_relation`` break them down, and
``facts_all_templates`` is the stricter share of facts recalled under every template.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.scoring import score_targets
from lightning_edit.toy.world import Fact, ToyWorld, fill

CONVENTION = (
    "greedy first object token: a prompt recalls its fact iff the argmax next token after the prompt equals the "
    "first token the answer adds in prompt + ' ' + answer; shares over prompts (fact x template)"
)


def sample_facts(world: ToyWorld, n: int | None, seed: int = 0) -> list[Fact]:
    """``n`` facts of the world drawn with ``seed`` (all facts, in world order, if ``n`` is None or too large)."""
    if n is None or n >= len(world.facts):
        return list(world.facts)
    return random.Random(f"{world.seed}:recall:{seed}").sample(world.facts, n)


def _hits(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    answers: list[str],
    batch_size: int,
) -> list[bool]:
    """For each prompt, whether the greedy next token is the first token of its answer."""
    if not prompts:
        return []
    scores = score_targets(model, tokenizer, prompts, answers, batch_size=batch_size)
    return [bool(score.argmax_ids[0] == score.target_ids[0]) for score in scores]


def _share(values: list[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def _breakdown(keys: list[str], hits: list[bool]) -> dict[str, float]:
    grouped: dict[str, list[bool]] = defaultdict(list)
    for key, hit in zip(keys, hits):
        grouped[key].append(hit)
    return {key: _share(values) for key, values in grouped.items()}


def forward_recall(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    world: ToyWorld,
    facts: Iterable[Fact] | None = None,
    batch_size: int = 64,
) -> dict:
    """Forward recall of ``facts`` (all facts of the world by default) under every forward template.

    Returns:
        ``overall`` (share of prompts), ``facts_all_templates``, ``by_relation``, ``by_template``
        (``"relation: template"`` -> share), ``n_facts`` and ``n_prompts``.
    """
    facts = list(world.facts if facts is None else facts)
    prompts = []
    answers = []
    templates = []
    relations = []
    owners = []
    for index, fact in enumerate(facts):
        for template in world.relations[fact.relation].forward:
            prompts.append(fill(template, fact.subject))
            answers.append(fact.object)
            templates.append(f"{fact.relation}: {template}")
            relations.append(fact.relation)
            owners.append(index)
    hits = _hits(model, tokenizer, prompts, answers, batch_size)
    per_fact: dict[int, list[bool]] = defaultdict(list)
    for owner, hit in zip(owners, hits):
        per_fact[owner].append(hit)
    return {
        "overall": _share(hits),
        "facts_all_templates": _share([all(values) for values in per_fact.values()]),
        "by_relation": _breakdown(relations, hits),
        "by_template": _breakdown(templates, hits),
        "n_facts": len(facts),
        "n_prompts": len(prompts),
    }


def inverse_recall(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    world: ToyWorld,
    facts: Iterable[Fact] | None = None,
    batch_size: int = 64,
) -> dict:
    """Inverse recall of the one-to-one ``facts`` (all of them by default), split by direction in training.

    Returns:
        ``bidirectional`` and ``forward_only`` (share of prompts of each kind), ``by_template``
        (``"direction: relation: template"`` -> share), ``n_facts`` and ``n_prompts`` (each per direction).
    """
    facts = [f for f in (world.facts if facts is None else facts) if world.relations[f.relation].invertible]
    prompts = []
    answers = []
    directions = []
    templates = []
    for fact in facts:
        for template in world.relations[fact.relation].inverse:
            prompts.append(fill(template, fact.object))
            answers.append(fact.subject)
            directions.append(world.direction(fact))
            templates.append(f"{world.direction(fact)}: {fact.relation}: {template}")
    hits = _hits(model, tokenizer, prompts, answers, batch_size)
    kinds = ("bidirectional", "forward_only")
    return {
        **{kind: _share([h for h, d in zip(hits, directions) if d == kind]) for kind in kinds},
        "by_template": _breakdown(templates, hits),
        "n_facts": {kind: sum(world.direction(f) == kind for f in facts) for kind in kinds},
        "n_prompts": {kind: directions.count(kind) for kind in kinds},
    }


def toy_recall(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    world: ToyWorld,
    facts: Iterable[Fact] | None = None,
    batch_size: int = 64,
) -> dict:
    """Forward and inverse recall of ``facts`` (all facts of the world by default), with the convention.

    The model is scored as it is (call ``model.eval()`` first if it has dropout).
    """
    facts = list(world.facts if facts is None else facts)
    return {
        "convention": CONVENTION,
        "forward": forward_recall(model, tokenizer, world, facts, batch_size),
        "inverse": inverse_recall(model, tokenizer, world, facts, batch_size),
    }
