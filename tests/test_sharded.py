"""Validate with the model sharded over 2 CPU processes (``ModelParallelStrategy``, FSDP2, gloo), or spread by a
device map with its blocks offloaded to disk, gives the numbers of the model on one device; every editor either runs
so or refuses with one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lightning_edit.cli import build_cli
from lightning_edit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
METHODS = sorted((ROOT / "configs/methods").glob("*.yaml"))
SHARDED = "--trainer.strategy.class_path=ModelParallelStrategy"  # docs/sharding.md
#: the method configs whose editor runs sharded or spread by a device map (the others refuse)
SPLITTABLE = {"rome", "memit", "alphaedit", "rect", "no_edit", "ike", "prompt"}
#: toy values of the AlphaEdit row (benchmarks/toy_runs.py)
ALPHAEDIT = ["--model.nullspace_threshold=0.5", "--model.l2=1"]
#: the toy GPT-2's blocks offloaded to disk, read in place from its safetensors (docs/sharding.md#device-map)
DISK = {f"transformer.h.{i}": "disk" for i in range(4)}
DEVICE_MAP = "--model.lm.device_map=" + json.dumps(
    {"transformer.wte": "cpu", "transformer.wpe": "cpu", **DISK, "transformer.ln_f": "cpu", "lm_head": "cpu"}
)


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def shared_stats(tmp_path_factory) -> Path:
    """One key statistics cache for the module's runs: a sharded run reads what an unsharded one wrote (the model
    fingerprint reads each weight whole)."""
    return tmp_path_factory.mktemp("stats")


def arguments(method: str, directory: Path, stats: Path | None, flags: list[str]) -> list[str]:
    """A toy run: ``method`` on the toy GPT-2 over 5 toy CounterFact cases in batches of 4 (the second batch has
    one case: the other process scores none of it)."""
    return [
        f"--config={ROOT / 'configs/methods' / method}.yaml",
        f"--config={ROOT / 'configs/models/toy-gpt2.yaml'}",
        f"--config={ROOT / 'configs/benchmarks/counterfact.yaml'}",
        "--data.path=builtin:data/toy/counterfact.json",
        "--data.limit=5",
        "--data.batch_size=4",
        # 200 of the preset's 4,890 documents: a statistics pass in seconds (a device map's reads blocks from disk)
        *([f"--model.stats.cache_dir={stats}", "--model.stats.n_samples=200"] if stats else []),
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={directory}",
        *flags,
    ]


def outputs(directory: Path) -> tuple[dict, list[dict]]:
    results = json.loads((directory / "results.json").read_text())
    return results, [json.loads(line) for line in (directory / "cases.jsonl").read_text().splitlines()]


def sharded_run(arguments: list[str]) -> subprocess.CompletedProcess:
    """``lightning-edit validate`` on 2 processes sharing one sharded model (its launcher starts the second)."""
    command = [sys.executable, "-m", "lightning_edit", "validate", *arguments]
    command += ["--trainer.devices=2", "--trainer.accelerator=cpu", SHARDED]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    ("method", "flags"),
    [
        ("rome", ["--model.protocol=single", "--data.generated_answers=bare", "--model.scoring.pre_edit=true"]),
        ("rome", ["--model.protocol=sequential", "--model.eval_at=[3]"]),
        ("memit", ["--model.protocol=single", "--model.batched_single=false"]),  # written, scored, undone per case
        ("memit", ["--model.protocol=sequential", "--model.edit_batch_size=2", "--data.generated_answers=bare"]),
        ("alphaedit", ["--model.protocol=single", *ALPHAEDIT]),
        ("alphaedit", ["--model.protocol=sequential", "--model.eval_at=[2]", *ALPHAEDIT]),
        ("rect", ["--model.protocol=single"]),
        ("no_edit", []),
        ("prompt", []),  # IKE with no demonstrations: in-context text, no weight edit
    ],
    ids=["rome-single", "rome-sequential", "memit-single", "memit-sequential", "alphaedit-single",
         "alphaedit-sequential", "rect-single", "no_edit", "prompt"],
)  # fmt: skip
def test_two_sharded_processes_equal_one(tmp_path, shared_stats, method, flags):
    one, two = tmp_path / "one", tmp_path / "two"
    stats = shared_stats if method not in ("no_edit", "prompt") else None  # they read no key statistics
    own_pass = method == "memit" and "--model.protocol=sequential" in flags  # a statistics pass run sharded
    build_cli(["validate", *arguments(method, one, stats, flags)])
    run = sharded_run(arguments(method, two, tmp_path / "stats-two" if own_pass else stats, flags))
    assert run.returncode == 0, run.stderr[-3000:]
    if own_pass:  # the processes ran the statistics pass together, into a cache of their own
        assert len(list((tmp_path / "stats-two").rglob("*.safetensors"))) == 3  # MEMIT's 3 toy layers
    assert_same_outputs(one, two)


def assert_same_outputs(first: Path, second: Path) -> None:
    """The same results.json metrics and cases.jsonl, within float32 rounding (equal on our runs)."""
    (one, one_cases), (sharded, sharded_cases) = outputs(first), outputs(second)
    assert one["metrics"].keys() == sharded["metrics"].keys()
    for name, result in one["metrics"].items():
        assert (sharded["metrics"][name]["n_cases"], sharded["metrics"][name]["n_prompts"]) == (
            result["n_cases"],
            result["n_prompts"],
        )
        for aggregation in ("macro", "micro"):
            assert sharded["metrics"][name][aggregation] == pytest.approx(result[aggregation], abs=1e-6), name
    assert one["counts"] == sharded["counts"]
    assert [case["case_id"] for case in one_cases] == [case["case_id"] for case in sharded_cases] == list(range(5))
    for mine, theirs in zip(one_cases, sharded_cases):
        assert mine["scores"] == pytest.approx(theirs["scores"], abs=1e-6)  # float32 rounding (equal on our runs)
        assert mine.get("answers") == theirs.get("answers")


@pytest.mark.parametrize(
    ("method", "flags"),
    [
        ("rome", ["--model.protocol=single", "--data.generated_answers=bare", "--model.scoring.pre_edit=true"]),
        ("rome", ["--model.protocol=single", "--model.batched_single=false"]),  # written, scored, undone per case
        ("memit", ["--model.protocol=sequential", "--model.edit_batch_size=2", "--model.eval_at=[3]"]),
        ("alphaedit", ["--model.protocol=sequential", "--model.eval_at=[2]", *ALPHAEDIT]),
    ],
    ids=["rome-single", "rome-reference", "memit-sequential", "alphaedit-sequential"],
)
def test_a_device_map_with_blocks_on_disk_gives_the_numbers_of_one_device(tmp_path, shared_stats, method, flags):
    own_pass = method == "memit"  # a statistics pass run through the offloaded blocks, into a cache of its own
    build_cli(["validate", *arguments(method, tmp_path / "one", shared_stats, flags)])
    spread = arguments(method, tmp_path / "spread", tmp_path / "stats-spread" if own_pass else shared_stats, flags)
    build_cli(["validate", *spread, DEVICE_MAP])
    assert_same_outputs(tmp_path / "one", tmp_path / "spread")
    if own_pass:  # the same statistics, bit for bit, under the same fingerprints (read from the offloaded values)
        cache = tmp_path / "stats-spread"
        own = sorted(path.relative_to(cache) for path in cache.rglob("*.safetensors"))
        assert len(own) == 3  # MEMIT's 3 toy layers
        for path in own:
            assert (shared_stats / path).read_bytes() == (cache / path).read_bytes()


def editor_of(method: Path, capsys, *flags: str):
    """The editor of a method config composed with the toy GPT-2 preset, instantiated as LightningCLI does."""
    from jsonargparse import ArgumentParser
    from lightning import LightningModule

    if method.stem == "ike":
        flags = (*flags, "--model.in_context.pool=builtin:data/toy/counterfact.json")  # required
    with pytest.raises(SystemExit):
        build_cli(["validate", f"--config={method}", f"--config={ROOT / 'configs/models/toy-gpt2.yaml'}", *flags,
                   "--print_config"])  # fmt: skip
    config = yaml.safe_load(capsys.readouterr().out)["model"]
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningModule, "model")
    return parser.instantiate_classes(parser.parse_object({"model": config})).model


@pytest.mark.parametrize("method", METHODS, ids=lambda path: path.stem)
def test_every_editor_runs_sharded_or_refuses_in_one_line(method, capsys):
    editor = editor_of(method, capsys)
    assert editor.edits_split_models == (method.stem in SPLITTABLE)
    if not editor.edits_split_models:
        editor._device_mesh = {"tensor_parallel": None}  # what ModelParallelStrategy sets before configure_model
        with pytest.raises(ConfigError, match=f"^{type(editor).__name__} does not edit a sharded model") as error:
            editor.configure_model()
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("method", METHODS, ids=lambda path: path.stem)
def test_every_editor_runs_spread_by_a_device_map_or_refuses_in_one_line(method, capsys):
    if method.stem in SPLITTABLE:  # it loads the model spread (the runs above compare the numbers)
        assert editor_of(method, capsys, DEVICE_MAP).model.hf_device_map["transformer.h.3"] == "disk"
        return
    with pytest.raises(ValueError, match=f"{type(editor_of(method, capsys)).__name__} does not edit a model spread"):
        editor_of(method, capsys, DEVICE_MAP)  # jsonargparse wraps the ConfigError; the CLI prints one line (below)


@pytest.mark.parametrize(
    ("method", "flags", "message"),
    [
        ("grace", ["--trainer.devices=1", SHARDED], "GRACE does not edit a sharded model"),
        ("grace", [DEVICE_MAP], "GRACE does not edit a model spread by lm.device_map"),
        pytest.param(
            "rome",
            ["--trainer.devices=2", DEVICE_MAP],
            "lm.device_map spreads one model over the devices of one",
            marks=pytest.mark.multiprocess,  # the 2 processes start, then refuse
        ),
    ],
    ids=["sharded", "device-map", "device-map-2-processes"],
)
def test_a_refusal_reaches_the_user_as_one_line_before_any_edit(tmp_path, method, flags, message):
    run = subprocess.run(
        [sys.executable, "-m", "lightning_edit", "validate", *arguments(method, tmp_path / "run", None, []),
         "--trainer.accelerator=cpu", *flags],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"lightning-edit: error: {message}")
    assert not (tmp_path / "run" / "results.json").exists()


def test_fit_refuses_offloaded_weights_before_any_edit(tmp_path):
    with pytest.raises(ConfigError, match="^fit exports the whole edited model, which a device map with offloaded"):
        build_cli(["fit", *arguments("rome", tmp_path / "run", None, []), DEVICE_MAP])
    assert not (tmp_path / "run" / "edited_model").exists()
