import json
import re
from collections import Counter
from pathlib import Path

import pytest

from lightning_edit.data import CounterFact
from lightning_edit.toy.benchmark_records import MULTIPLE_CHOICE_RECORDS, counterfact_records, write_benchmarks
from lightning_edit.toy.relations import COMPANY_SUFFIXES, HOUSEHOLD_NOUNS, RELATIONS
from lightning_edit.toy.world import Fact, ToyWorld, fill

FICTIONAL = ("person", "city", "country", "company", "object", "language")
SHARED_DATA = Path(__file__).parents[2].parent / "shared" / "data"
N = 40


@pytest.fixture(scope="module")
def world() -> ToyWorld:
    return ToyWorld.generate(seed=0)


@pytest.fixture(scope="module")
def files(world, tmp_path_factory) -> dict[str, Path]:
    return write_benchmarks(world, tmp_path_factory.mktemp("toy"), n=N)


def read(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))


def forward_answers(world: ToyWorld) -> dict[str, str]:
    """Every filled forward prompt of the world -> its true object."""
    return {fill(t, f.subject): f.object for f in world.facts for t in world.relations[f.relation].forward}


def fictional_words(world: ToyWorld) -> list[str]:
    """The distinct fictional words of each kind's names (not the company suffixes or household nouns)."""
    common = set(COMPANY_SUFFIXES) | set(HOUSEHOLD_NOUNS)
    return [w for kind in FICTIONAL for w in dict.fromkeys(" ".join(world.entities[kind]).split()) if w not in common]


def test_same_seed_same_world_and_files(world, files, tmp_path):
    again = ToyWorld.generate(seed=0)
    assert again.training_corpus() == world.training_corpus()
    assert again.facts == world.facts and again.bidirectional == world.bidirectional
    for name, path in write_benchmarks(again, tmp_path, n=N).items():
        assert path.read_bytes() == files[name].read_bytes(), name
    other = ToyWorld.generate(seed=1)
    assert other.training_corpus() != world.training_corpus()
    assert set(other.entities["person"]) != set(world.entities["person"])
    assert counterfact_records(other, N) != counterfact_records(world, N)


def test_names_are_unique_fictional_and_short(world):
    names = [name for kind in FICTIONAL for name in world.entities[kind]]
    assert len(names) == len(set(names))
    words = fictional_words(world)
    assert len(words) == len(set(words))  # no two kinds share a word (e.g. a city and a surname)
    assert all(re.fullmatch(r"[A-Z][a-z]+", word) for word in words)
    assert sum(len(word) for word in words) / len(words) < 8


@pytest.mark.parametrize("seed", [0, 1])
def test_two_word_names_are_identified_only_by_both_words(seed):
    world = ToyWorld.generate(seed)
    for kind in ("person", "object"):
        names = [name.split() for name in world.entities[kind]]
        assert all(len(words) == 2 for words in names)
        for position in (0, 1):
            counts = Counter(words[position] for words in names)
            assert sum(counts.values()) / len(counts) >= 2.5, (kind, position)  # a word names several entities
    people = set(world.entities["person"])
    assert all(" ".join(reversed(name.split())) in people for name in people)  # only the order tells them apart


@pytest.mark.parametrize("seed", [0, 1])
def test_a_company_is_a_word_of_its_own_and_a_shared_suffix(seed):
    names = [name.split() for name in ToyWorld.generate(seed).entities["company"]]
    assert all(len(words) == 2 and words[1] in COMPANY_SUFFIXES for words in names)
    firsts = [words[0] for words in names]
    assert len(set(firsts)) == len(firsts)  # no two companies differ only in the suffix
    assert len(names) / len({words[1] for words in names}) >= 2.5  # a suffix names several companies


def test_names_are_not_real_names_of_counterfact():
    files = sorted(SHARED_DATA.glob("counterfact/*.json"))
    if not files:
        pytest.skip("shared CounterFact data not available")
    real = {word.lower() for path in files for word in re.findall(r"[A-Za-z]+", path.read_text(encoding="utf-8"))}
    for seed in range(3):
        assert not {w for w in fictional_words(ToyWorld.generate(seed)) if w.lower() in real}


def test_sizes(world):
    fictional = sum(len(world.entities[kind]) for kind in FICTIONAL[:-1])
    assert 200 <= fictional <= 500
    assert 8 <= len(world.relations) <= 15
    one_to_one = [r for r in RELATIONS if r.invertible]
    assert 3 <= len(one_to_one) < len(RELATIONS)
    for relation in RELATIONS:
        assert 2 <= len(relation.forward) <= 4 and all(t.count("{}") == 1 for t in relation.forward)
        assert len(relation.inverse) <= 3 and all(t.count("{}") == 1 for t in relation.inverse)
        assert all(3 <= len(script.steps) <= 5 for script in relation.scripts)
        facts = world.facts_of(relation.name)
        subjects, objects = [f.subject for f in facts], [f.object for f in facts]
        assert len(subjects) == len(set(subjects)) and set(subjects) <= set(world.entities[relation.subject_type])
        assert set(objects) <= set(world.entities[relation.object_type])
        assert (len(objects) == len(set(objects))) == relation.invertible  # one-to-one vs many-to-one
    assert len(world.bidirectional) == len(world.forward_only) == 60


def test_corpus_states_facts_forward_and_inverse_as_split(world):
    corpus = world.training_corpus()
    sentences = set(corpus)
    assert len(world.training_corpus(biographies=0)) == len(set(world.training_corpus(biographies=0)))
    for fact in world.facts:
        assert set(world.forward_sentences(fact)) <= sentences
    for fact in world.bidirectional:
        assert world.inverse_sentences(fact) and set(world.inverse_sentences(fact)) <= sentences
    for fact in world.forward_only:
        assert not set(world.inverse_sentences(fact)) & sentences
    assert len(world.training_corpus(scripts=False)) == len(corpus) - len(world.facts)


def test_biographies_tell_all_facts_of_a_subject_after_naming_it_once(world):
    facts_of = {}
    for fact in world.facts:
        facts_of.setdefault(fact.subject, []).append(fact)
    extra = Counter(world.training_corpus(biographies=3)) - Counter(world.training_corpus(biographies=0))
    assert sum(extra.values()) == 3 * sum(len(facts) > 1 for facts in facts_of.values())
    for biography in extra:
        first, *rest = re.split(r"(?<=\.) ", biography)
        fact = next(f for f in world.facts if first in world.forward_sentences(f))
        facts = facts_of[fact.subject]
        assert len(rest) == len(facts) - 1 and fact.subject not in " ".join(rest)
        (pronoun,) = {sentence.split()[0] for sentence in rest}
        assert pronoun in {"He", "She", "It"}
        told = {f"{fill(world.relations[f.relation].continuation, pronoun)} {f.object}." for f in facts}
        assert set(rest) < told


def test_forward_only_facts_never_appear_reversed(world):
    """No sentence names a forward-only fact's object before its subject (scripts and other relations included).

    A biography may name a city in one sentence and the country it is the capital of in a later one; no sentence
    states the fact inversely, which is what the reversal curse is about.
    """
    sentences = [s for item in world.training_corpus() for s in re.split(r"(?<=[.?]) ", item)]
    for fact in world.forward_only:
        reversed_order = re.compile(rf"\b{re.escape(fact.object)}\b.*\b{re.escape(fact.subject)}\b")
        assert not [s for s in sentences if reversed_order.search(s)], fact


def test_counterfact_file_loads_with_expected_groups(world, files):
    records = read(files["counterfact"])
    dm = CounterFact(str(files["counterfact"]))
    dm.setup()
    assert len(dm.cases) == len(records) == N
    truth = {(f.subject, f.relation): f.object for f in world.facts}
    for case, record in zip(dm.cases, records):
        (request,) = case.requests
        assert set(case.groups) == {"rewrite", "paraphrase", "neighborhood", "attribute"}
        assert request.target_true == truth[(request.subject, request.extra["relation_id"])] != request.target_new
        assert case.groups["rewrite"].prompts == (fill(record["requested_rewrite"]["prompt"], request.subject),)
        assert case.groups["neighborhood"].prompts and case.groups["attribute"].prompts
    relations = Counter(record["requested_rewrite"]["relation_id"] for record in records)
    assert len(relations) > 5


def test_counterfact_prompts_have_the_right_true_objects(world, files):
    answers = forward_answers(world)
    for record in read(files["counterfact"]):
        rewrite = record["requested_rewrite"]
        subject, true, new = rewrite["subject"], rewrite["target_true"]["str"], rewrite["target_new"]["str"]
        assert answers[fill(rewrite["prompt"], subject)] == true
        assert [answers[p] for p in record["paraphrase_prompts"]] == [true] * len(record["paraphrase_prompts"])
        assert {answers[p] for p in record["neighborhood_prompts"]} == {true}
        assert {answers[p] for p in record["attribute_prompts"]} == {new}
        assert subject not in " ".join(record["neighborhood_prompts"] + record["attribute_prompts"])
        assert all(subject in prompt for prompt in record["generation_prompts"])


def test_bake_reverse_blocks_match_the_facts(world, files):
    records = read(files["bake"])
    dm = CounterFact(str(files["bake"]))
    dm.setup()
    assert len(dm.cases) == len(records) == N
    facts = set(world.facts)
    directions = Counter()
    for record in records:
        rewrite = record["requested_rewrite"]
        relation = world.relations[rewrite["relation_id"]]
        subject, true, new = rewrite["subject"], rewrite["target_true"]["str"], rewrite["target_new"]["str"]
        fact = Fact(subject, relation.name, true)
        assert relation.invertible and fact in facts
        assert record["direction_in_training"] == ("bidirectional" if fact in world.bidirectional else "forward_only")
        directions[record["direction_in_training"]] += 1
        reverse = record["reverse_qa"]
        assert reverse["prompt"] == fill(relation.inverse[0], new) and reverse["target_new"]["str"] == subject
        competitor = Fact(reverse["target_true"]["str"], relation.name, new)
        assert competitor in facts and reverse["direction_in_training"] == world.direction(competitor)
        judge = record["reverse_judge"]
        assert judge["prompt"].startswith("Whether ") and judge["prompt"].endswith("?")
        assert new in judge["prompt"] and subject in judge["prompt"]
        assert (judge["target_new"]["str"], judge["target_true"]["str"]) == ("Yes", "No")
    assert set(directions) == {"bidirectional", "forward_only"}


def test_multiple_choice_answers_point_at_the_right_option(world, files):
    records = read(files["multiple_choice"])
    assert len(records) == max(N, MULTIPLE_CHOICE_RECORDS)
    assert all(world.relations[r["relation"]].subject_type == "object" for r in records)  # household facts only
    letters = Counter()
    for record in records:
        old, new = record["ground_truth"], record["target_new"]
        assert Fact(record["subject"], record["relation"], old) in set(world.facts) and old != new
        assert set(record["questions"]) == {"reliability", "generalization", "locality", "portability"}
        for name, question in record["questions"].items():
            choices = question["choices"]
            assert list(choices) == list("ABCDE") and len(set(choices.values())) == 5
            assert {old, new} <= set(choices.values())
            assert choices[question["answer"]] == (old if name == "locality" else new)
            assert question["question"].endswith(" ___.")
            letters[question["answer"]] += 1
        assert record["questions"]["reliability"]["question"] == record["prompt"] + " ___."
    assert set(letters) == set("ABCDE")


def test_script_clozes_are_followed_by_their_object(world, files):
    records = read(files["script"])
    assert len(records) == N
    clozes = {
        script.cloze(f.subject): (script, f) for f in world.facts for script in world.relations[f.relation].scripts
    }
    for record in records:
        relation = world.relations[record["property"]]
        assert Fact(record["subject"], relation.name, record["ground_truth"]) in set(world.facts)
        assert record["subject"] in record["prompt"] and record["target_new"] != record["ground_truth"]
        assert len(record["rephrase_prompts"]) == len(record["interrupt_step"]) == len(relation.scripts)
        for cloze, script, step in zip(record["rephrase_prompts"], relation.scripts, record["interrupt_step"]):
            full = script.render(record["subject"], record["ground_truth"])
            assert full.startswith(f"{cloze} {record['ground_truth']}")
            assert cloze.rsplit("Step ", 1)[1].startswith(f"{step}: ")
        assert record["neighborhood_prompts"]
        for cloze in record["neighborhood_prompts"]:
            script, fact = clozes[cloze]
            assert fact.object == record["ground_truth"] and fact.subject != record["subject"]
            assert script.render(fact.subject, fact.object).startswith(f"{cloze} {fact.object}")
