"""ToyEditTraining: MEND training edits of the toy world's facts, disjoint from the held-out benchmark."""

import json

import pytest

from lightning_edit.cli import build_cli
from lightning_edit.resources import resolve_path
from lightning_edit.toy import ToyEditTraining, ToyWorld, load_toy_world
from lightning_edit.toy.benchmark_records import counterfact_records, write_benchmarks

HELDOUT = "builtin:data/toy/counterfact.json"


def setup(**kwargs) -> ToyEditTraining:
    data = ToyEditTraining(**kwargs)
    data.setup()
    return data


def test_training_edits_are_disjoint_from_the_heldout_benchmark():
    data = setup(val_size=20)
    heldout = json.loads(resolve_path(HELDOUT).read_text())
    heldout_pairs = {(r["requested_rewrite"]["subject"], r["requested_rewrite"]["relation_id"]) for r in heldout}
    trained = [(e.request.subject, e.request.extra["relation_id"]) for e in data.train_edits]
    validated = [(c.requests[0].subject, c.requests[0].extra["relation_id"]) for c in data.cases]
    assert not heldout_pairs & (set(trained) | set(validated))
    assert not set(trained) & set(validated)
    world = load_toy_world("builtin:data/toy/world.json")
    assert len(trained) + len(validated) + len(heldout_pairs) == len(counterfact_records(world, 10_000))
    facts = {(f.subject, f.relation): f.object for f in world.facts}
    for example in data.train_edits[:50]:
        request = example.request
        assert facts[request.subject, request.extra["relation_id"]] == request.target_true != request.target_new
        assert example.equivalent and all(answer == request.target_true for _, answer in example.locality)


def test_variants_draw_more_edits_of_the_same_facts():
    one, three = setup(val_size=20), setup(val_size=20, variants=3)
    assert [c.requests for c in three.cases] == [c.requests for c in one.cases]
    assert len(three.train_edits) == 3 * len(one.train_edits)
    validated = {(c.requests[0].subject, c.requests[0].extra["relation_id"]) for c in three.cases}
    targets: dict[tuple[str, str], set[str]] = {}
    for example in three.train_edits:
        fact = (example.request.subject, example.request.extra["relation_id"])
        assert fact not in validated
        targets.setdefault(fact, set()).add(example.request.target_new)
    assert len(targets) == len(one.train_edits) and max(len(t) for t in targets.values()) > 1
    assert len({e.case_id for e in three.train_edits} | {c.case_id for c in three.cases}) == len(three.train_edits) + 20


def test_world_file_round_trip(tmp_path):
    world = ToyWorld.generate(seed=3, n_people=20, n_cities=8, n_companies=6, n_objects=8)
    paths = write_benchmarks(world, tmp_path, n=5)
    loaded = load_toy_world(str(paths["world"]))
    assert loaded.facts == world.facts and loaded.bidirectional == world.bidirectional
    data = setup(world_path=str(paths["world"]), heldout_paths=[str(paths["counterfact"])], val_size=5)
    assert len(data.train_edits) + 5 + 5 == len(counterfact_records(world, 10_000))


def test_short_name_and_too_few_facts(capsys):
    args = ["fit", "--model=MEND", "--model.lm.path=builtin:models/toy-gpt2", "--data=ToyEditTraining"]
    with pytest.raises(SystemExit):
        build_cli([*args, "--data.variants=2", "--print_config"])
    assert "class_path: lightning_edit.toy.ToyEditTraining" in capsys.readouterr().out
    with pytest.raises(ValueError, match="facts to edit, val_size 1000"):
        setup(val_size=1000)
