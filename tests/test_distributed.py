"""Validate on 2 CPU processes (``ddp_spawn``, gloo) gives exactly the numbers of 1 process."""

import json
import sys
from pathlib import Path

import pytest
from torch.utils.data import DistributedSampler

from lightning_edit.cases import edit_batch_loader, loader_cases
from lightning_edit.cli import build_cli
from lightning_edit.data import CounterFact

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)


def validate(directory: Path, stats: Path, devices: int, *flags: str) -> tuple[dict, list[dict]]:
    """ROME on the toy GPT-2 over 11 toy CounterFact cases, batches of 4: results.json and cases.jsonl."""
    build_cli(
        [
            "validate",
            f"--config={ROOT / 'configs/quickstart.yaml'}",
            "--data.limit=11",  # odd: the distributed sampler repeats a batch to even out the shards
            "--data.batch_size=4",
            "--model.stats.n_samples=300",
            f"--model.stats.cache_dir={stats}",
            "--model.scoring.pre_edit=true",
            f"--trainer.devices={devices}",
            *(["--trainer.strategy=ddp_spawn"] if devices > 1 else []),
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={directory}",
            *flags,
        ]
    )
    results = json.loads((directory / "results.json").read_text())
    cases = [json.loads(line) for line in (directory / "cases.jsonl").read_text().splitlines()]
    return results, cases


@pytest.mark.parametrize(
    "flags",
    [
        ["--model.protocol=single", "--data.generated_answers=bare"],
        ["--model.protocol=sequential", "--model.eval_at=[5]", "--data.generated_answers=bare"],
    ],
    ids=["single", "sequential"],
)
@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_equal_one(tmp_path, flags):
    one, one_cases = validate(tmp_path / "one", tmp_path / "stats-one", 1, *flags)
    two, two_cases = validate(tmp_path / "two", tmp_path / "stats-two", 2, *flags)
    # the two processes shared the statistics pass: one shard each, merged into the whole sample
    shards = sorted(path.name.split(".")[1] for path in (tmp_path / "stats-two").rglob("*.safetensors"))
    assert shards == ["0-150", "0-300", "150-300"]

    assert set(one["metrics"]) == set(two["metrics"])
    assert {"ES", "ES_pre", "NS", "locality_acc"} <= set(one["metrics"])
    if "--model.protocol=sequential" in flags:
        assert one["metrics"]["ES@5"]["n_cases"] == 5
    for name, result in one["metrics"].items():
        other = two["metrics"][name]
        assert (other["n_cases"], other["n_prompts"]) == (result["n_cases"], result["n_prompts"]), name
        assert result["n_cases"] == (5 if name.endswith("@5") else 11), name
        for aggregation in ("macro", "micro"):
            assert other[aggregation] == pytest.approx(result[aggregation], abs=1e-6), (name, aggregation)
    assert (
        one["counts"]
        == two["counts"]
        == {"cases": 11, "skipped_records": [], "target_equals_true": [], "skipped_requests": []}
    )

    assert [c["case_id"] for c in one_cases] == [c["case_id"] for c in two_cases] == list(range(11))
    for mine, theirs in zip(one_cases, two_cases):
        assert mine["requests"] == theirs["requests"]
        assert mine["scores"].keys() == theirs["scores"].keys()
        assert mine["scores"] == pytest.approx(theirs["scores"], abs=1e-6)
        assert mine["answers"] == theirs["answers"]  # gathered from the process that generated them
        assert {"ES_gen", "PS_gen", "NS_gen", "ES_gen_pre"} <= mine["answers"].keys()


def test_processes_share_whole_batches_of_consecutive_cases():
    """The batch protocol edits a dataloader batch together: a batch must hold the same cases on any world size."""
    data = CounterFact("builtin:data/toy/counterfact.json", limit=11, batch_size=4)
    data.setup()
    single = [[case.case_id for case in batch] for batch in data.val_dataloader()]
    assert single == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    loader = edit_batch_loader(data.cases, 4)
    shards = []
    for rank in range(2):
        sampler = DistributedSampler(loader.dataset, num_replicas=2, rank=rank, shuffle=False)
        sharded = type(loader)(loader.dataset, batch_size=1, sampler=sampler, collate_fn=loader.collate_fn)
        shards.append([[case.case_id for case in batch] for batch in sharded])
        assert [case.case_id for case in loader_cases(sharded, local=True)] == [i for b in shards[-1] for i in b]
    assert shards == [[[0, 1, 2, 3], [8, 9, 10]], [[4, 5, 6, 7], [0, 1, 2, 3]]]  # the sampler repeats batch 0
    assert [case.case_id for case in loader_cases(loader)] == list(range(11))
