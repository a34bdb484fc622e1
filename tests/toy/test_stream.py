import json

import pytest

from lightning_edit.data import CounterFact
from lightning_edit.toy.benchmark_records import counterfact_records
from lightning_edit.toy.stream import stream_records
from lightning_edit.toy.world import ToyWorld


@pytest.fixture(scope="module")
def world() -> ToyWorld:
    return ToyWorld.generate(seed=0)


def test_a_stream_takes_every_fact_of_the_world_then_new_subjects(world):
    facts = counterfact_records(world, len(world.facts))
    records = stream_records(world, len(facts) + 300)
    assert records[: len(facts)] == facts and [r["case_id"] for r in records] == list(range(len(records)))
    pairs = {(r["requested_rewrite"]["subject"], r["requested_rewrite"]["relation_id"]) for r in records}
    assert len(pairs) == len(records)  # no (subject, relation) edited twice
    subjects = {fact.subject for fact in world.facts}
    words = {word for names in world.entities.values() for name in names for word in name.split()}
    truth = {(fact.relation, fact.object) for fact in world.facts}
    for record in records[len(facts) :]:
        rewrite = record["requested_rewrite"]
        relation = world.relations[rewrite["relation_id"]]
        assert rewrite["subject"] not in subjects
        assert set(rewrite["subject"].split()) - words  # a new word names it
        new, true = rewrite["target_new"]["str"], rewrite["target_true"]["str"]
        assert new != true and {(relation.name, new), (relation.name, true)} <= truth
        assert rewrite["prompt"] in relation.forward and record["neighborhood_prompts"]
        for prompt in record["neighborhood_prompts"]:  # real facts whose object is target_true
            assert any(
                fact.object == true and fact.subject in prompt for fact in world.facts if fact.relation == relation.name
            )
    assert stream_records(world, len(records)) == records  # seeded


def test_a_stream_reads_as_counterfact(world, tmp_path):
    path = tmp_path / "stream.json"
    records = stream_records(world, len(world.facts) + 5)  # the world's 929 editable facts and 6 generated ones
    path.write_text(json.dumps(records))
    data = CounterFact(str(path))
    data.setup("validate")
    assert len(data.cases) == len(records)
