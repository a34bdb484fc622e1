"""The toy benchmarks: edits of a toy world's facts rendered in the formats the project's DataModules read.

ROME CounterFact (:func:`counterfact_records`), BAKE (:func:`bake_records`, CounterFact plus reverse blocks), ScEdit-CF
scripts (:func:`script_records`) and the project's CaseEdit multiple-choice schema (:func:`multiple_choice_records`);
:func:`write_benchmarks` writes them all with the world and its training text (``builtin:data/toy``). Each file draws
from a generator of its own (:meth:`~lightning_edit.toy.world.ToyWorld.rng`), so it does not depend on which others
were drawn; everything is deterministic for the world's seed.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

from lightning_edit.toy.world import Fact, ToyWorld, fill

LETTERS = "ABCDE"
NEIGHBOURS = 5  # neighbourhood / attribute prompts per record at most
MULTIPLE_CHOICE_RECORDS = 200  # CaseEdit's scalability test goes up to n = 200 sequential edits
BENCHMARK_FILES = {
    "counterfact": "counterfact.json",
    "bake": "bake_qa.json",
    "script": "scedit_cf.json",
    "multiple_choice": "caseedit.json",
}


def counterfact_records(world: ToyWorld, n: int = 100) -> list[dict]:
    """ROME CounterFact records (read by :class:`~lightning_edit.data.CounterFact`).

    Neighbourhood prompts are other subjects of the relation whose true object is ``target_true``, in the edit's
    template; attribute prompts those whose true object is ``target_new``. One-to-one relations have no such
    subjects, so theirs come from other relations with that object (in those relations' first template).
    """
    rng = world.rng("counterfact")
    return [{"case_id": i, **rome_record(world, fact, rng)} for i, fact in enumerate(_sample(world, n, rng))]


def bake_records(world: ToyWorld, n: int = 100) -> list[dict]:
    """BAKE-Q&J records of one-to-one relations: CounterFact records plus ``reverse_qa`` and ``reverse_judge``.

    ``direction_in_training`` says whether the edited fact is bidirectional or forward-only in the training
    text; ``reverse_qa.direction_in_training`` says the same of the fact the reverse prompt asks about (the
    true subject of ``target_new``).
    """
    rng = world.rng("bake")
    records = []
    for i, fact in enumerate(_sample(world, n, rng, invertible=True)):
        record = {"case_id": i, **rome_record(world, fact, rng)}
        relation = world.relations[fact.relation]
        new = record["requested_rewrite"]["target_new"]["str"]
        competitor = next(f for f in world.facts_of(fact.relation) if f.object == new)
        record["reverse_qa"] = {
            "prompt": fill(relation.inverse[0], new),
            "target_new": {"str": fact.subject},
            "target_true": {"str": competitor.subject},
            "direction_in_training": world.direction(competitor),
        }
        record["reverse_judge"] = {
            "prompt": relation.judge.format(object=new, subject=fact.subject),
            "target_new": {"str": "Yes"},
            "target_true": {"str": "No"},
        }
        record["direction_in_training"] = world.direction(fact)
        records.append(record)
    return records


def script_records(world: ToyWorld, n: int = 100) -> list[dict]:
    """ScEdit-CF records: the fact prompt, and script clozes cut right before the object.

    ``rephrase_prompts`` are the subject's clozes in every script of the relation (``interrupt_step`` gives
    each one's step); ``neighborhood_prompts`` are clozes of other subjects with the same true object.
    """
    rng = world.rng("script")
    records = []
    for i, fact in enumerate(_sample(world, n, rng)):
        relation = world.relations[fact.relation]
        neighbours = _sharing(world, fact, fact.object, rng)
        records.append(
            {
                "case_id": i,
                "prompt": fill(rng.choice(relation.forward), fact.subject),
                "subject": fact.subject,
                "ground_truth": fact.object,
                "target_new": _target_new(world, fact, rng),
                "rephrase_prompts": [script.cloze(fact.subject) for script in relation.scripts],
                "neighborhood_prompts": [
                    rng.choice(world.relations[f.relation].scripts).cloze(f.subject) for f in neighbours
                ],
                "interrupt_step": [script.interrupt_step for script in relation.scripts],
                "property": relation.name,
                "generation_prompts": [script.question.format(subject=fact.subject) for script in relation.scripts],
            }
        )
    return records


def multiple_choice_records(world: ToyWorld, n: int = MULTIPLE_CHOICE_RECORDS) -> list[dict]:
    """CaseEdit-style records (a project schema: CaseEdit publishes no data): four 5-option questions per edit.

    Only the household objects' facts are edited (relations whose subject is an ``object``: ``room``,
    ``colour``, ``maker``). Reliability (the edit prompt), generalization (a paraphrase) and portability (a
    script cloze) expect ``target_new``; locality (a neighbour with the same true object) expects
    ``ground_truth``. The options are the new and the old object and three other objects of the type, in seeded
    random order. The world has fewer household facts (180) than CaseEdit's largest n (200): past them, records
    repeat the earliest edits (same fact and new truth, newly drawn questions; ``repeat_of`` names the case).
    """
    rng = world.rng("multiple_choice")
    eligible = _sample(world, len(world.facts), rng)
    household = [f for f in eligible if world.relations[f.relation].subject_type == "object"]
    news: list[str] = []
    records = []
    for i in range(n):
        fact = household[i % len(household)]
        relation = world.relations[fact.relation]
        template, paraphrase = rng.sample(relation.forward, 2)
        if i < len(household):
            news.append(_target_new(world, fact, rng))
        new = news[i % len(household)]
        others = sorted(set(world.entities[relation.object_type]) - {fact.object, new})
        options = [new, fact.object, *rng.sample(others, len(LETTERS) - 2)]
        neighbour = rng.choice(_sharing(world, fact, fact.object, rng))
        questions = {
            "reliability": (fill(template, fact.subject), new),
            "generalization": (fill(paraphrase, fact.subject), new),
            "locality": (_prompt(world, neighbour, fact.relation, template), fact.object),
            "portability": (rng.choice(relation.scripts).cloze(fact.subject), new),
        }
        records.append(
            {
                "case_id": i,
                "subject": fact.subject,
                "relation": relation.name,
                "ground_truth": fact.object,
                "target_new": new,
                "prompt": fill(template, fact.subject),
                "questions": {
                    name: _multiple_choice(f"{prompt} ___.", options, answer, rng)
                    for name, (prompt, answer) in questions.items()
                },
                **({"repeat_of": i % len(household)} if i >= len(household) else {}),
            }
        )
    return records


def write_benchmarks(world: ToyWorld, directory: str | Path, n: int = 100) -> dict[str, Path]:
    """Write the four benchmarks (``n`` records each at most; CaseEdit ``max(n, 200)``), ``world.json`` (facts
    and directions) and ``corpus.txt`` (the training text, one item per line: the toy models' key-statistics
    corpus).

    Returns:
        benchmark name (``counterfact``, ``bake``, ``script``, ``multiple_choice``), ``world`` or ``corpus``
        -> file path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    contents = {
        "counterfact": counterfact_records(world, n),
        "bake": bake_records(world, n),
        "script": script_records(world, n),
        "multiple_choice": multiple_choice_records(world, max(n, MULTIPLE_CHOICE_RECORDS)),
    }
    paths = {name: directory / file for name, file in BENCHMARK_FILES.items()}
    contents["world"] = {
        "seed": world.seed,
        "entities": world.entities,
        "facts": [{**fact._asdict(), "direction_in_training": world.direction(fact)} for fact in world.facts],
    }
    paths["world"] = directory / "world.json"
    for name, path in paths.items():
        path.write_text(json.dumps(contents[name], indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["corpus"] = directory / "corpus.txt"
    paths["corpus"].write_text("\n".join(world.training_corpus()) + "\n", encoding="utf-8")
    return paths


def _sharing(world: ToyWorld, fact: Fact, obj: str, rng: random.Random) -> list[Fact]:
    """Up to :data:`NEIGHBOURS` facts of other subjects with object ``obj``: of the same relation if any."""
    others = [f for f in world.facts if f.object == obj and f.subject != fact.subject]
    same = [f for f in others if f.relation == fact.relation]
    chosen = same or others
    return rng.sample(chosen, min(NEIGHBOURS, len(chosen)))


def _sample(world: ToyWorld, n: int, rng: random.Random, invertible: bool = False) -> list[Fact]:
    """``n`` facts (all if fewer) that have a neighbour, optionally of one-to-one relations only."""
    objects = defaultdict(set)
    for f in world.facts:
        objects[f.object].add(f.subject)
    eligible = [
        f
        for f in world.facts
        if objects[f.object] - {f.subject} and (world.relations[f.relation].invertible or not invertible)
    ]
    return rng.sample(eligible, min(n, len(eligible)))


def _target_new(world: ToyWorld, fact: Fact, rng: random.Random) -> str:
    """A counterfactual object: another object the relation has, so that some subject truly has it."""
    return rng.choice(sorted({f.object for f in world.facts_of(fact.relation)} - {fact.object}))


def _prompt(world: ToyWorld, fact: Fact, relation: str, template: str) -> str:
    """A neighbour's prompt: in ``template`` if it is of ``relation``, else in its relation's first template."""
    return fill(template if fact.relation == relation else world.relations[fact.relation].forward[0], fact.subject)


def rome_record(world: ToyWorld, fact: Fact, rng: random.Random) -> dict:
    """The ROME-format fields (all but ``case_id``) of an edit of ``fact``."""
    relation = world.relations[fact.relation]
    template = rng.choice(relation.forward)
    new = _target_new(world, fact, rng)
    neighbours = _sharing(world, fact, fact.object, rng)
    attributes = _sharing(world, fact, new, rng)
    return {
        "requested_rewrite": {
            "prompt": template,
            "subject": fact.subject,
            "relation_id": relation.name,
            "target_new": {"str": new},
            "target_true": {"str": fact.object},
        },
        "paraphrase_prompts": [fill(other, fact.subject) for other in relation.forward if other != template],
        "neighborhood_prompts": [_prompt(world, f, relation.name, template) for f in neighbours],
        "attribute_prompts": [_prompt(world, f, relation.name, template) for f in attributes],
        "generation_prompts": [script.question.format(subject=fact.subject) for script in relation.scripts],
    }


def _multiple_choice(question: str, options: list[str], answer: str, rng: random.Random) -> dict:
    """A question with the options under letters A-E in random order, and the letter of ``answer``."""
    choices = dict(zip(LETTERS, rng.sample(options, len(options))))
    return {"question": question, "choices": choices, "answer": next(k for k, v in choices.items() if v == answer)}
