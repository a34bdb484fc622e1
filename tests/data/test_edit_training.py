"""EditTraining: MEND training examples from CounterFact and zsRE; seeded, resumable order."""

import json

import pytest

from lightning_edit.data import DataFormatError, EditTraining
from lightning_edit.data.edit_training import EpochOrder
from lightning_edit.resources import resolve_path


def setup(**kwargs) -> EditTraining:
    data = EditTraining(**kwargs)
    data.setup()
    return data


def test_flat_counterfact_examples():
    data = setup(source="counterfact", train_path="builtin:data/counterfact-flat.json", val_size=2)
    records = json.loads(resolve_path("builtin:data/counterfact-flat.json").read_text())
    assert len(data.train_edits) == len(records) - 2 and [c.case_id for c in data.cases] == [
        r["case_id"] for r in records[-2:]
    ]
    example, record = data.train_edits[0], records[0]
    assert example.request.filled_prompt == record["prompt"] and example.request.target_new == record["target_new"]
    assert example.equivalent == ((record["rephrase_prompt"], record["target_new"]),)
    assert example.locality == ((record["locality_prompt"], record["locality_ground_truth"]),)  # the neighbour


def test_rome_counterfact_samples_neighbourhood_prompts():
    data = setup(source="counterfact", train_path="builtin:data/counterfact-rome.json", val_size=2, n_locality=3)
    records = {r["case_id"]: r for r in json.loads(resolve_path("builtin:data/counterfact-rome.json").read_text())}
    for example in data.train_edits:
        record = records[example.case_id]
        true = record["requested_rewrite"]["target_true"]["str"]
        assert len(example.locality) == 3 and len(set(example.locality)) == 3
        assert all(prompt in record["neighborhood_prompts"] and answer == true for prompt, answer in example.locality)
        assert [p for p, _ in example.equivalent] == record["paraphrase_prompts"]
    again = setup(source="counterfact", train_path="builtin:data/counterfact-rome.json", val_size=2, n_locality=3)
    assert again.train_edits == data.train_edits  # seeded
    other_seed = setup(
        source="counterfact", train_path="builtin:data/counterfact-rome.json", val_size=2, n_locality=3, seed=1
    )
    assert [e.locality for e in other_seed.train_edits] != [e.locality for e in data.train_edits]


def test_zsre_locality_is_the_nq_prompt():
    data = setup(source="zsre", train_path="builtin:data/zsre.json", val_size=2)
    records = json.loads(resolve_path("builtin:data/zsre.json").read_text())
    by_question = {r["src"]: r for r in records}
    for example in data.train_edits:
        record = by_question[example.request.filled_prompt]
        assert example.request.target_new == record["alt"]  # MEND edits towards alt
        assert example.equivalent == ((record["rephrase"], record["alt"]),)
        assert example.locality == ((record["loc"], record["loc_ans"]),)
    assert len(data.train_edits) + len(data.cases) + len(data.skipped) == len(records)


def test_epoch_order_is_seeded_per_epoch_and_resumes():
    order = EpochOrder(10, seed=0)
    first = list(order)
    assert sorted(first) == list(range(10)) and list(order) == first
    order.set_epoch(1)
    second = list(order)
    assert second != first
    order.resume = (1, 4)
    assert list(order) == second[4:]
    assert list(order) == second  # a resume applies once
    order.resume = (0, 4)
    assert list(order) == second  # only in its own epoch


def test_state_round_trip_resumes_the_loader():
    data = setup(source="counterfact", train_path="builtin:data/counterfact-flat.json", val_size=2, batch_size=2)
    assert data.state_dict() == {}  # no trainer attached
    full = [[e.case_id for e in batch] for batch in data.train_dataloader()]
    data.load_state_dict({"epoch": 0, "batches": 2})
    assert [[e.case_id for e in batch] for batch in data.train_dataloader()] == full[2:]


def test_bad_input():
    with pytest.raises(ValueError, match="needs train_path"):
        setup(source="counterfact")
    with pytest.raises(ValueError, match="source must be one of"):
        EditTraining(source="toy")
    with pytest.raises(ValueError, match="val_size"):
        setup(source="counterfact", train_path="builtin:data/counterfact-flat.json", val_size=50)


class MisnamedKind(EditTraining):
    """Training edits whose validation case names a score kind the benchmark does not have."""

    def load_splits(self):
        from dataclasses import replace

        train, val = super().load_splits()
        return train, [replace(val[0], groups={"rewrite": replace(val[0].groups["rewrite"], metrics={"bleu": "ES"})})]


def test_its_groups_are_checked_against_the_benchmarks_kinds():
    data = MisnamedKind(source="counterfact", train_path="builtin:data/toy/counterfact.json", val_size=5)
    with pytest.raises(DataFormatError, match=r"record \d+: field 'rewrite': prompt group: unknown score kind"):
        data.setup()
