"""A seeded toy world of fictional facts, its training text and toy benchmarks in the real file formats.

:meth:`ToyWorld.generate` draws a few hundred fictional entities (people, cities, countries, companies, household
objects) with names built from syllables, and one fact per (subject, relation) for the relations of
:mod:`lightning_edit.toy.relations`. People and objects have two-word names ("Zozvak Mudzan", "Babzo kettle")
in which each word is shared by several entities, and people's names come in reversed pairs ("Mudzan Zozvak"), so
that, as with real names, only the whole name in order identifies the subject. A company is a word of its own and a
shared suffix ("Vizrek Labs"): when two companies differed only in the suffix, an edit from one to the other was one
no weight editor made on the toy models (they read the suffix off the subject, which an edit at the prompt's last
token hardly moves). (The shipped toy models still look facts up at the prompt's last token, not at the subject's
last token; configs/models/toy-gpt2.yaml gives the measurements.) The facts of one-to-one relations are split, with
the seed, into ``bidirectional`` facts (the training text states them forward and inverse) and ``forward_only`` facts
(forward only), so that a model trained on :meth:`ToyWorld.training_corpus` can show the reversal curse.

:mod:`lightning_edit.toy.benchmark_records` renders edits of the same facts in the formats the project's DataModules
read (CounterFact, BAKE, ScEdit-CF, CaseEdit). Everything is deterministic for a seed. :func:`load_toy_world` reads a
world back from the ``world.json`` that :func:`~lightning_edit.toy.benchmark_records.write_benchmarks` writes.

Example:
    >>> world = ToyWorld.generate(seed=0)
    >>> len(world.relations), len(world.entities["person"])
    (12, 150)
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from lightning_edit.resources import resolve_path
from lightning_edit.toy.relations import (
    CLUSTERS,
    CODAS,
    COLOURS,
    COMPANY_SUFFIXES,
    HOUSEHOLD_NOUNS,
    LANGUAGE_SUFFIX,
    ONSETS,
    PROFESSIONS,
    RELATIONS,
    ROOMS,
    VOWELS,
    Relation,
)


class Fact(NamedTuple):
    """One fact of the world: ``relation(subject) = object``."""

    subject: str
    relation: str
    object: str


def fill(template: str, subject: str) -> str:
    """The template with the subject in place of ``{}``."""
    return template.replace("{}", subject, 1)


class Names:
    """Unique fictional words: a syllable, a syllable opening with a rare cluster, sometimes a third, a coda."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used = set()

    def word(self) -> str:
        rng = self.rng
        while True:
            syllables = [rng.choice(ONSETS) + rng.choice(VOWELS), rng.choice(CLUSTERS) + rng.choice(VOWELS)]
            if rng.random() < 0.2:
                syllables.append(rng.choice(ONSETS) + rng.choice(VOWELS))
            word = ("".join(syllables) + rng.choice(CODAS)).capitalize()
            if word not in self.used:
                self.used.add(word)
                return word

    def words(self, n: int) -> list[str]:
        """``n`` new words."""
        return [self.word() for _ in range(n)]

    def branded(self, n: int, suffixes: Sequence[str]) -> list[str]:
        """``n`` names ``"<new word> <suffix>"``: the first word is the name's own, each suffix names several."""
        return [f"{word} {self.rng.choice(suffixes)}" for word in self.words(n)]

    def two_word_names(self, n: int, seconds: Sequence[str] = ()) -> list[str]:
        """``n`` distinct names ``"first second"`` in which each word is shared by several names.

        With ``seconds`` (household nouns), new first words are paired with them, drawn from 1.5·n
        combinations. Without, both words come from one pool of new words and names come in reversed pairs
        (``"Dokvael Dazrael"``, ``"Dazrael Dokvael"``), so that neither a word nor the set of words identifies a
        name, only the words in order, as for people's names.
        """
        if seconds:
            firsts = self.words(math.ceil(1.5 * n / len(seconds)))
            return [f"{a} {b}" for a, b in self.rng.sample([(a, b) for a in firsts for b in seconds], n)]
        pool = self.words(math.ceil(math.sqrt(3 * n)))
        pairs = self.rng.sample([(a, b) for i, a in enumerate(pool) for b in pool[i + 1 :]], math.ceil(n / 2))
        names = [f"{a} {b}" for a, b in pairs] + [f"{b} {a}" for a, b in pairs]
        return self.rng.sample(names, len(names))[:n]


@dataclass
class ToyWorld:
    """Fictional entities, the facts relating them and which facts the training text also states inversely.

    Args:
        seed: the seed every draw derives from (generation, corpus order, benchmark sampling).
        entities: entity type -> names; the fictional types plus the attribute values (language, profession, ...).
        facts: one fact per subject and relation, in relation order.
        bidirectional: the one-to-one facts whose inverse sentences are in the training text.
        relations: relation name -> :class:`~lightning_edit.toy.relations.Relation` (all of ``RELATIONS``).
    """

    seed: int
    entities: dict[str, list[str]]
    facts: list[Fact]
    bidirectional: frozenset[Fact]
    relations: dict[str, Relation] = field(default_factory=lambda: {relation.name: relation for relation in RELATIONS})

    @classmethod
    def generate(
        cls,
        seed: int = 0,
        n_people: int = 150,
        n_countries: int = 12,
        n_cities: int = 48,
        n_companies: int = 30,
        n_objects: int = 60,
        n_languages: int = 8,
        inverse_fraction: float = 0.5,
    ) -> ToyWorld:
        """Draw a world: names, one fact per (subject, relation), and the bidirectional/forward-only split.

        One-to-one relations pair ``min(#subjects, #objects)`` distinct subjects with distinct objects; the other
        relations give every subject a random object. In each one-to-one relation, ``inverse_fraction`` of the facts
        (rounded) are bidirectional.
        """
        rng = random.Random(seed)
        names = Names(rng)
        entities = {
            "person": names.two_word_names(n_people),
            "city": names.words(n_cities),
            "country": names.words(n_countries),
            "company": names.branded(n_companies, COMPANY_SUFFIXES),
            "object": names.two_word_names(n_objects, HOUSEHOLD_NOUNS),
            "language": [names.word() + LANGUAGE_SUFFIX for _ in range(n_languages)],
            "profession": list(PROFESSIONS),
            "room": list(ROOMS),
            "colour": list(COLOURS),
        }
        facts = []
        bidirectional = set()
        for relation in RELATIONS:
            subjects = entities[relation.subject_type]
            objects = entities[relation.object_type]
            if relation.invertible:
                size = min(len(subjects), len(objects))
                pairs = list(zip(rng.sample(subjects, size), rng.sample(objects, size)))
            else:
                pairs = [(subject, rng.choice(objects)) for subject in subjects]
            relation_facts = [Fact(subject, relation.name, obj) for subject, obj in pairs]
            if relation.invertible:
                bidirectional.update(rng.sample(relation_facts, round(inverse_fraction * len(relation_facts))))
            facts += relation_facts
        return cls(seed, entities, facts, frozenset(bidirectional))

    @property
    def forward_only(self) -> frozenset[Fact]:
        """The one-to-one facts whose training text has forward sentences only."""
        return frozenset(f for f in self.facts if self.relations[f.relation].invertible) - self.bidirectional

    def direction(self, fact: Fact) -> str:
        """How the training text states the fact: ``"bidirectional"`` or ``"forward_only"``."""
        return "bidirectional" if fact in self.bidirectional else "forward_only"

    def facts_of(self, relation: str) -> list[Fact]:
        """The facts of one relation."""
        return [f for f in self.facts if f.relation == relation]

    def forward_sentences(self, fact: Fact) -> list[str]:
        """The fact stated with every forward template: ``"The capital of X is Y."``."""
        return [f"{fill(template, fact.subject)} {fact.object}." for template in self.relations[fact.relation].forward]

    def inverse_sentences(self, fact: Fact) -> list[str]:
        """The fact stated with every inverse template: ``"Y is the capital of X."`` (none if not one-to-one)."""
        return [f"{fill(template, fact.object)} {fact.subject}." for template in self.relations[fact.relation].inverse]

    def training_corpus(self, scripts: bool = True, biographies: int = 5) -> list[str]:
        """The training text, one sentence, script or biography per item, shuffled with the seed.

        Every fact with every forward template, the inverse sentences of bidirectional facts, with ``scripts``
        every fact in its relation's first script, and ``biographies`` biographies of every subject with several
        facts (:meth:`biography`).
        """
        corpus = []
        for fact in self.facts:
            corpus += self.forward_sentences(fact)
            if fact in self.bidirectional:
                corpus += self.inverse_sentences(fact)
            if scripts:
                corpus.append(self.relations[fact.relation].scripts[0].render(fact.subject, fact.object))
        rng = self.rng("biographies")
        by_subject = defaultdict(list)
        for fact in self.facts:
            by_subject[fact.subject].append(fact)
        for facts in by_subject.values():
            if len(facts) > 1:
                person = self.relations[facts[0].relation].subject_type == "person"
                pronoun = rng.choice(("He", "She")) if person else "It"
                corpus += [self.biography(facts, pronoun, rng) for _ in range(biographies)]
        random.Random(f"{self.seed}:corpus").shuffle(corpus)
        return corpus

    def biography(self, facts: list[Fact], pronoun: str, rng: random.Random) -> str:
        """All facts of one subject in a random order: the first names the subject, the others use ``pronoun``.

        ``"The birthplace of Dokvael Dazrael is Lakvox. She works as a baker. She is a citizen of Mazra."`` A
        pronoun sentence needs the subject's facts from a name some tokens back: varied text of this kind attaches
        knowledge to the name in Allen-Zhu and Li (2023, "Physics of Language Models 3.1"). On the 4-layer toy
        models it did not move the lookup to the name's last token (see configs/models/toy-gpt2.yaml).
        """
        first, *rest = rng.sample(facts, len(facts))
        sentences = [rng.choice(self.forward_sentences(first))]
        sentences += [f"{fill(self.relations[f.relation].continuation, pronoun)} {f.object}." for f in rest]
        return " ".join(sentences)

    # Helpers ---------------------------------------------------------------------------------------------------

    def rng(self, purpose: str) -> random.Random:
        """A generator for one purpose (a benchmark file, the biographies), so that no draw depends on which others
        were made."""
        return random.Random(f"{self.seed}:{purpose}")


def load_toy_world(path: str | Path) -> ToyWorld:
    """The toy world of a ``world.json`` (written by :func:`~lightning_edit.toy.benchmark_records.write_benchmarks`;
    ``builtin:`` paths too)."""
    data = json.loads(resolve_path(path).read_text(encoding="utf-8"))
    facts = [Fact(f["subject"], f["relation"], f["object"]) for f in data["facts"]]
    bidirectional = {
        fact for fact, record in zip(facts, data["facts"]) if record["direction_in_training"] == "bidirectional"
    }
    return ToyWorld(data["seed"], data["entities"], facts, frozenset(bidirectional))
