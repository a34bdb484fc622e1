"""Resumable sequential streams: a stream stopped by SIGTERM resumes from its checkpoint (``--ckpt_path``) to the
results of an uninterrupted run; a foreign, truncated or corrupt checkpoint is refused in one line before any edit."""

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

from lightning_edit import stopping
from lightning_edit.cli import build_cli
from lightning_edit.editors import EditorModule
from lightning_edit.editors.stream_checkpoint import (
    FILE_NAME,
    StreamCheckpoint,
    check_identity,
    random_states,
    read_checkpoint,
    set_random_states,
    write_checkpoint,
)
from lightning_edit.errors import ConfigError, Interrupted
from lightning_edit.run_folder import lock_folder

ROOT = Path(__file__).resolve().parents[2]
STATS = ["--model.stats.corpus=builtin:data/toy/corpus.txt", "--model.stats.n_samples=40"]
LOCATE = [*STATS, "--model.template_lengths=[[5, 1]]", "--model.target.v_num_grad_steps=3"]
#: method config -> flags that keep it cheap on the tiny GPT-2 (as tests/test_matrix.py)
EDITORS = {
    "memit": LOCATE,
    "alphaedit": LOCATE,
    "ultraedit": [],
    "grace": ["--model.n_iter=2"],
    "wise": ["--model.n_iter=2", "--model.save_freq=3", "--model.merge_freq=6"],
    "lora": ["--model.num_steps=2", "--model.sequential_adapters=per_edit"],
    "ft_m": ["--model.num_steps=2"],
}
#: fields of results.json that measure the machine, not the edits
MEASURED = {"edit_seconds", "host_peak_bytes", "host_peak_phase", "gpu_peak_bytes", "gpu_peak_phase"}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.setenv("LIGHTNING_EDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    stopping._signals.clear()


def command(method: str, folder: Path, *flags: str) -> list[str]:
    return [
        "validate",
        f"--config={ROOT / 'configs/methods' / f'{method}.yaml'}",
        f"--config={ROOT / 'configs/models/tiny-gpt2.yaml'}",
        f"--config={ROOT / 'configs/benchmarks/counterfact.yaml'}",
        "--data.limit=8",
        "--model.protocol=sequential",
        "--model.edit_batch_size=2",
        "--model.eval_at=[3,6,8]",
        "--seed_everything=0",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={folder}",
        *EDITORS[method],
        *flags,
    ]


def outputs(folder: Path) -> tuple[dict, list[dict], list[dict]]:
    """results.json's metrics and stream (without what measures the machine) and cases.jsonl."""
    results = json.loads((folder / "results.json").read_text())
    stream = [{k: v for k, v in record.items() if k not in MEASURED} for record in results["stream"]]
    cases = [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]
    return results["metrics"], stream, cases


def stop_during_call(monkeypatch, editor: type[EditorModule], call: int) -> list[int]:
    """SIGTERM arrives during the ``call``-th editor call of the next run (as the handler records it); returns the
    list the calls are counted in."""
    calls: list[int] = []
    apply_edits = editor.apply_edits

    def stopping_apply(self, requests):
        apply_edits(self, requests)
        calls.append(len(requests))
        if len(calls) == call:
            stopping.request_stop(signal.SIGTERM)

    monkeypatch.setattr(editor, "apply_edits", stopping_apply)
    return calls


def editor_class(method: str) -> type[EditorModule]:
    return build_cli(command(method, Path("unused"))[1:], run=False).model.__class__


def stopped(method: str, folder: Path, monkeypatch, *flags: str) -> Path:
    """Run the stream until SIGTERM arrives during its first editor call; the checkpoint it wrote."""
    editor = editor_class(method)
    apply_edits = editor.apply_edits
    stop_during_call(monkeypatch, editor, 1)
    with pytest.raises(Interrupted, match="stream checkpoint .*: resume with the same command and --ckpt_path"):
        build_cli(command(method, folder, *flags))
    monkeypatch.setattr(editor, "apply_edits", apply_edits)
    stopping._signals.clear()
    return folder / FILE_NAME


def test_memit_stopped_three_times_ends_as_an_uninterrupted_run(tmp_path, monkeypatch):
    """The fast member of the family below."""
    resumed_equals_uninterrupted("memit", tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("method", [method for method in EDITORS if method != "memit"])
def test_a_stream_stopped_three_times_ends_as_an_uninterrupted_run(method, tmp_path, monkeypatch):
    resumed_equals_uninterrupted(method, tmp_path, monkeypatch)


def resumed_equals_uninterrupted(method: str, tmp_path: Path, monkeypatch) -> None:
    """Stopped after 2, 4 and 6 of 8 edits (each resumed run stopped again in its first call), then resumed to the
    end: results.json's metrics and stream records and cases.jsonl equal an uninterrupted run's."""
    build_cli(command(method, tmp_path / "whole"))
    checkpoint = None
    positions = []
    for stop in range(3):
        resume = [f"--ckpt_path={checkpoint}"] if checkpoint else []
        checkpoint = stopped(method, tmp_path / f"stop{stop}", monkeypatch, *resume)
        positions.append(read_checkpoint(checkpoint).position)
    assert positions == [2, 4, 6]
    build_cli(command(method, tmp_path / "resumed", f"--ckpt_path={checkpoint}"))
    assert outputs(tmp_path / "resumed") == outputs(tmp_path / "whole")


def test_checkpoints_are_written_every_n_edits(tmp_path):
    build_cli(command("memit", tmp_path / "run", "--model.checkpoint_every=3"))
    checkpoint = read_checkpoint(tmp_path / "run" / FILE_NAME)
    assert checkpoint.position == 6  # after 4 (past 3) and 6 (6), the second overwriting the first; 8 is not past 9
    assert [record["edits"] for record in checkpoint.stream] == [4, 6]
    assert not list((tmp_path / "run").glob("*.tmp"))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_stream_resumed_on_two_processes_equals_one_process(tmp_path, monkeypatch):
    """Stopped on one process, resumed on two (``ddp_spawn``, one thread each, as the one process has): the results
    of the uninterrupted one-process run, to the bit (with more threads per process, float rounding differs)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the spawned processes' threads
    build_cli(command("memit", tmp_path / "whole"))
    checkpoint = stopped("memit", tmp_path / "stopped", monkeypatch)
    two = ["--trainer.devices=2", "--trainer.strategy=ddp_spawn", f"--ckpt_path={checkpoint}"]
    build_cli(command("memit", tmp_path / "two", *two))
    assert outputs(tmp_path / "two") == outputs(tmp_path / "whole")


# Refusals ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A MEMIT stream's checkpoint after all 8 edits (checkpoint_every 4)."""
    folder = tmp_path_factory.mktemp("written")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["lightning-edit"])
        patch.setenv("LIGHTNING_EDIT_CACHE", str(folder / "cache"))
        build_cli(command("memit", folder / "run", "--model.checkpoint_every=4"))
    return folder / "run" / FILE_NAME


@pytest.mark.parametrize(
    ("method", "flags", "differs"),
    [
        (
            "alphaedit",
            [],
            "editor: lightning_edit.editors.alphaedit.AlphaEdit here, lightning_edit.editors.memit.MEMIT",
        ),
        ("memit", ["--model.edit_batch_size=4"], "model.edit_batch_size: 4 here, 2 in it"),
        ("memit", ["--data.limit=9"], "cases: "),
        ("memit", ["--model.lm.path=builtin:models/toy-gpt2"], "model weights: "),
    ],
    ids=["method", "setting", "data", "model"],
)
def test_a_foreign_checkpoint_is_refused_before_any_edit(method, flags, differs, written, tmp_path, monkeypatch):
    calls = stop_during_call(monkeypatch, editor_class(method), 0)
    before = written.read_bytes()
    with pytest.raises(ConfigError) as refused:
        build_cli(command(method, tmp_path / "run", *flags, f"--ckpt_path={written}"))
    message = str(refused.value)
    assert message.startswith(f"{written} was written by another run: ") and differs in message, message
    assert "\n" not in message and calls == [] and written.read_bytes() == before


def test_a_refused_resume_in_the_checkpoints_folder_changes_none_of_its_files(tmp_path, monkeypatch):
    """Resumed in the folder it was written to (no logger: one folder), refused: every file as it was."""
    checkpoint = stopped("memit", tmp_path / "run", monkeypatch)
    before = {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir()}
    assert {"config.yaml", FILE_NAME} <= before.keys()
    with pytest.raises(ConfigError, match="was written by another run: model.edit_batch_size"):
        build_cli(command("memit", tmp_path / "run", "--model.edit_batch_size=4", f"--ckpt_path={checkpoint}"))
    assert {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir()} == before


def test_a_second_resume_while_the_first_runs_is_refused_and_the_same_command_resumes_after_it(tmp_path, monkeypatch):
    """A scheduler's requeued job resuming the checkpoint that the first job is still writing: refused in one line
    before any edit, every file as it was; once the first has ended (its lock released), the same command resumes."""
    folder = tmp_path / "run"
    checkpoint = stopped("memit", folder, monkeypatch)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    first = lock_folder(folder, "trainer.default_root_dir")  # what the first run's process 0 holds while it runs
    calls = stop_during_call(monkeypatch, editor_class("memit"), 0)  # counts the calls, stops none
    with pytest.raises(ConfigError) as refused:
        build_cli(command("memit", folder, f"--ckpt_path={checkpoint}"))
    assert str(refused.value) == (
        f"{folder} is in use by another run now (one run at a time writes into a folder): wait for it to end, or "
        "pick another trainer.default_root_dir"
    )
    assert calls == [] and {path.name: path.read_bytes() for path in folder.iterdir()} == before
    os.close(first)
    build_cli(command("memit", folder, f"--ckpt_path={checkpoint}"))
    assert json.loads((folder / "results.json").read_text())["metrics"]


def test_a_new_run_is_refused_in_a_folder_that_holds_a_stream_checkpoint(tmp_path, monkeypatch):
    stopped("memit", tmp_path / "run", monkeypatch)
    with pytest.raises(ConfigError, match=f"holds the files of an earlier run .*{FILE_NAME}"):
        build_cli(command("memit", tmp_path / "run"))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda data: data[: len(data) // 2], "not a complete stream checkpoint"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "corrupt stream checkpoint: its SHA-256 does not match"),
        (lambda data: b"not a checkpoint at all", "not a complete stream checkpoint"),
    ],
    ids=["truncated", "corrupt", "not safetensors"],
)
def test_a_damaged_checkpoint_is_refused_before_any_edit(damage, expected, written, tmp_path, monkeypatch):
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(damage(written.read_bytes()))
    calls = stop_during_call(monkeypatch, editor_class("memit"), 0)
    with pytest.raises(ConfigError, match=expected) as refused:
        build_cli(command("memit", tmp_path / "run", f"--ckpt_path={damaged}"))
    assert "\n" not in str(refused.value) and calls == []


def test_a_stream_checkpoint_resumes_only_a_sequential_run(written, tmp_path):
    with pytest.raises(ConfigError, match="a stream checkpoint resumes a 'sequential' run, not single"):
        build_cli(command("memit", tmp_path / "run", "--model.protocol=single", "--model.eval_at=null",
                          f"--ckpt_path={written}"))  # fmt: skip


def test_a_checkpoint_round_trips_and_its_identity_names_what_differs(tmp_path):
    tensors = {"parameter/w": torch.arange(6.0).reshape(2, 3), "editor/n": torch.tensor([1, 2])}
    generators, python = random_states()
    checkpoint = StreamCheckpoint(
        {"editor": "a.B", "cases": "c1"}, 4, 1.5, [{"edits": 4}], {"ES@4": {3: {0: "Paris"}}}, python,
        tensors | generators, {"labels": ["x"]},
    )  # fmt: skip
    write_checkpoint(tmp_path / "c.safetensors", checkpoint)
    read = read_checkpoint(tmp_path / "c.safetensors")
    assert (read.identity, read.position, read.edit_seconds, read.stream) == ({"editor": "a.B", "cases": "c1"}, 4, 1.5,
                                                                              [{"edits": 4}])  # fmt: skip
    assert read.answers == {"ES@4": {3: {0: "Paris"}}} and read.editor_state()["labels"] == ["x"]
    assert torch.equal(read.part("parameter")["w"], tensors["parameter/w"])
    first = torch.rand(3)
    set_random_states(read.part("random"), read.python_random)
    assert torch.equal(torch.rand(3), first)  # the generators are where they were when written
    message = "^x was written by another run: cases: c2 here, c1 in it; resume with the command that wrote it$"
    with pytest.raises(ConfigError, match=message):
        check_identity("x", read.identity, {"editor": "a.B", "cases": "c2"})
