"""Streams of toy edits longer than the toy world: each of its facts once, then facts of subjects it does not have.

The toy world has 929 editable facts (CounterFact records: every fact with a neighbour). A lifelong run of 10,000
edits takes them all, in the order ``counterfact_records`` draws them, then generated records: a new subject
of a relation's subject type (new words, named as the world names that type), one of the relation's templates, and
two of its objects, one as ``target_new`` and one as ``target_true``. The model never read of the new subject, so for
those ``target_true`` is only the alternative of the probability comparison (ES, PS), not a belief the edit
overwrites; their neighbourhood prompts are real facts of the world whose object is that ``target_true``, so NS keeps
its meaning. No two records of a stream share a (subject, relation) pair.
"""

from __future__ import annotations

import random

from lightning_edit.toy.benchmark_records import counterfact_records, rome_record
from lightning_edit.toy.relations import COMPANY_SUFFIXES, HOUSEHOLD_NOUNS
from lightning_edit.toy.world import Fact, Names, ToyWorld


def new_subject(names: Names, subject_type: str) -> str:
    """A name of ``subject_type`` the world does not have, formed as the world forms that type's names."""
    if subject_type == "person":
        return f"{names.word()} {names.word()}"
    if subject_type == "company":
        return names.branded(1, COMPANY_SUFFIXES)[0]
    if subject_type == "object":
        return f"{names.word()} {names.rng.choice(HOUSEHOLD_NOUNS)}"
    return names.word()  # country, city


def stream_records(world: ToyWorld, n: int) -> list[dict]:
    """``n`` ROME-format CounterFact records (``case_id`` 0 ... n-1): the world's facts, then generated ones."""
    records = counterfact_records(world, n)
    rng = random.Random(f"{world.seed}:stream")
    names = Names(rng)
    names.used = {word for entity in world.entities.values() for name in entity for word in name.split()}
    relations = list(world.relations.values())
    while len(records) < n:
        relation = rng.choice(relations)
        objects = sorted({fact.object for fact in world.facts_of(relation.name)})
        fact = Fact(new_subject(names, relation.subject_type), relation.name, rng.choice(objects))
        records.append({"case_id": len(records), **rome_record(world, fact, rng)})
    return records
