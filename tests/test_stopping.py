"""SIGTERM stops every strategy within seconds, whether it reaches one process or all of them (lightning_edit.stopping).

The multi-process runs are marked ``slow`` (``pytest -m "not slow"`` leaves them out).
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver
from torch.multiprocessing import spawn
from transformers import GPT2LMHeadModel

from lightning_edit import cli, stopping
from lightning_edit.cli import HoldOnUserError, build_cli
from lightning_edit.editors import FT
from lightning_edit.editors.protocol_runner import ProtocolRunner
from lightning_edit.errors import ConfigError, Interrupted
from lightning_edit.stats.sample_corpus import main as sample_corpus

ROOT = Path(__file__).resolve().parents[1]
SHARDED = "--trainer.strategy.class_path=ModelParallelStrategy"
#: process 0's bar of the edits past its first step (tqdm): sequential's edit calls, or single's batches
EDITING = re.compile(r"(?:sequential edits|Validation DataLoader 0): *\d+%\|[^|]*\| *[1-9]\d*/\d+")


def test_a_signal_only_records_itself():
    assert stopping.stop_requested() is None
    stopping.request_stop(signal.SIGTERM)
    assert stopping.stop_requested() == signal.SIGTERM
    assert stopping.stop_point() == signal.SIGTERM  # not in step: this process alone


def _posts_and_reads(rank: int, port: int, results: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        seen = [stopping.stop_requested()]
        dist.barrier()
        if rank == 1:
            stopping.request_stop(signal.SIGTERM)
            stopping.stop_requested()  # posts it
        dist.barrier()
        seen.append(stopping.stop_requested())  # process 0 reads what process 1 posted
        Path(results, str(rank)).write_text(repr(seen))
    finally:
        dist.destroy_process_group()


@pytest.mark.multiprocess
def test_a_signal_to_one_process_reaches_the_others_without_a_collective(tmp_path):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    spawn(_posts_and_reads, args=(port, str(tmp_path)), nprocs=2)
    assert [(tmp_path / str(rank)).read_text() for rank in range(2)] == ["[None, 15]", "[None, 15]"]


def test_an_agreed_stop_takes_the_launched_processes_from_lightnings_observer():
    """Process 0 of a run Lightning's subprocess launcher started: after an agreed stop, a launched process that exits
    with 143 before process 0 has finished stopping no longer makes the launcher's observer SIGKILL process 0 (a
    2-process sharded stop test ended so, -9 and no line from process 0); the CLI still waits for it."""
    main = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # stands in for process 0
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(143)"])
    child.wait()
    try:
        launched = [child]
        strategy = SimpleNamespace(
            world_size=2, launcher=SimpleNamespace(procs=launched), reduce_boolean_decision=lambda decision, all: True
        )  # the other process asked to stop
        assert stopping.stop_agreed(strategy)
        assert launched == [] and _ChildProcessObserver(main.pid, launched)._run()  # done: nothing to act on
        assert main.poll() is None
        assert stopping.take_held_processes() == [child] and stopping.take_held_processes() == []
        assert _ChildProcessObserver(main.pid, [child])._run()  # not taken from it, the observer kills process 0
        assert main.wait(timeout=10) == -signal.SIGKILL
    finally:
        main.kill()


def test_a_user_error_takes_the_launched_processes_from_lightnings_observer_first(monkeypatch, tmp_path):
    """Lightning's first hook on an exception takes the launched processes from its observer on a user error (one
    that every process meets: a process that exits with 1 while process 0 finalizes its loggers would have the
    observer SIGKILL process 0 before its line); a bug is left to the observer."""
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    child.wait()
    launched = [child]
    trainer = SimpleNamespace(strategy=SimpleNamespace(launcher=SimpleNamespace(procs=launched)))
    HoldOnUserError().on_exception(trainer, None, RuntimeError("a bug"))
    assert launched == [child] and stopping.take_held_processes() == []
    HoldOnUserError().on_exception(trainer, None, ConfigError("a user error"))
    assert launched == [] and stopping.take_held_processes() == [child]

    held = []
    monkeypatch.setattr(cli, "hold_launched_processes", held.append)
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    with pytest.raises(ConfigError, match=r"model.eval_at=\[9\]: \[9\] beyond the 4 cases"):
        build_cli([
            "validate", f"--config={ROOT / 'configs/methods/ft_m.yaml'}",
            f"--config={ROOT / 'configs/models/tiny-gpt2.yaml'}", "--data=CounterFact",
            "--data.path=builtin:data/counterfact-flat.json", "--data.limit=4", "--model.protocol=sequential",
            "--model.eval_at=[9]", "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={tmp_path}",
        ])  # fmt: skip
    assert [type(strategy).__name__ for strategy in held] == ["SingleDeviceStrategy"]  # by the first callback


@pytest.mark.parametrize(("protocol", "edited"), [("single", 1), ("batch", 8)])
def test_sigterm_under_single_stops_after_the_current_case(protocol, edited, monkeypatch, tmp_path):
    """A signal during the first edit of a batch of 8: ``single`` stops after that case (its edit undone), ``batch``
    after the batch it edits together; nothing is written."""
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    calls = []

    def apply_edits(self, requests):
        calls.append(len(requests))
        stopping.request_stop(signal.SIGTERM)

    monkeypatch.setattr(FT, "apply_edits", apply_edits)
    with pytest.raises(Interrupted, match=rf"editing \({protocol}\) stopped by SIGTERM in batch 1; no results"):
        build_cli([
            "validate", f"--config={ROOT / 'configs/methods/ft_m.yaml'}",
            f"--config={ROOT / 'configs/models/tiny-gpt2.yaml'}", "--data=CounterFact",
            "--data.path=builtin:data/counterfact-flat.json", "--data.limit=16", "--data.batch_size=8",
            "--model.edit_batch_size=8", f"--model.protocol={protocol}", "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ])  # fmt: skip
    assert sum(calls) == edited and not list(tmp_path.rglob("results.json"))


class _GlooStrategy:
    """What the protocol runner asks of a strategy, over the gloo group of :func:`_shares_of_the_statistics`."""

    world_size = 2

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        votes = torch.tensor(int(decision))
        dist.all_reduce(votes)
        return bool(votes == 2) if all else bool(votes)


def _shares_of_the_statistics(rank: int, port: int, results: str) -> None:
    """Process 1 is stopped in its share of the statistics pass; process 0 has finished its own by then."""
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=30)
    )

    def share(index: int, count: int) -> None:
        if index == 1:
            dist.barrier()  # process 0 is past its share
            stopping.request_stop(signal.SIGTERM)
            raise Interrupted(f"key statistics pass stopped by signal {stopping.stop_point()} at document 3")
        dist.barrier()

    merged = []
    trainer = SimpleNamespace(world_size=2, global_rank=rank, strategy=_GlooStrategy())
    editor = SimpleNamespace(
        trainer=trainer, placement=SimpleNamespace(shard_mesh=None), compute_statistics_shard=share,
        prepare_statistics=lambda: merged.append(rank),
    )  # fmt: skip
    try:
        ProtocolRunner(editor).prepare_statistics()
        outcome = "merged" if merged else "neither"
    except Interrupted as stopped:
        outcome = str(stopped)
    finally:
        dist.destroy_process_group()
    Path(results, str(rank)).write_text(outcome)


@pytest.mark.multiprocess
def test_a_process_stopped_in_its_share_of_the_statistics_stops_the_one_that_finished(tmp_path):
    """Before, the process that had finished its share waited in a barrier for one that had left (gloo: "Connection
    closed by peer"); now both leave with their own line, and neither merges the shares."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    spawn(_shares_of_the_statistics, args=(port, str(tmp_path)), nprocs=2)
    finished, stopped = [(tmp_path / str(rank)).read_text() for rank in range(2)]
    assert finished == (
        "key statistics pass stopped by signal 15 after this process's share, which is cached: run the same command "
        "again to resume"
    )
    assert stopped == "key statistics pass stopped by signal 15 at document 3"


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(child) for child in found]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def statistics(tmp_path_factory) -> Path:
    """The toy GPT-2's key statistics, computed once for the module's runs (their runs then start editing at once)."""
    return tmp_path_factory.mktemp("stats")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["single", "sequential"])
@pytest.mark.parametrize("strategy", ["ddp", "sharded"])
@pytest.mark.parametrize("target", ["one", "all"])
def test_sigterm_stops_two_processes_within_15_seconds(protocol, strategy, target, statistics, tmp_path):
    """ROME on the toy GPT-2 over 100 toy CounterFact cases on 2 CPU processes; SIGTERM once the edits run, to process
    1 only (``one``: process 0, the launcher, is not told) or to both."""
    command = [
        sys.executable, "-m", "lightning_edit", "validate", f"--config={ROOT / 'configs/methods/rome.yaml'}",
        f"--config={ROOT / 'configs/models/toy-gpt2.yaml'}", f"--config={ROOT / 'configs/benchmarks/counterfact.yaml'}",
        "--data.path=builtin:data/toy/counterfact.json", "--data.batch_size=4", f"--model.protocol={protocol}",
        "--model.stats.n_samples=200", f"--model.stats.cache_dir={statistics}", "--trainer.logger=true",
        "--model.target.v_num_grad_steps=20",  # the paper's 20, not the toy preset's 100: the stop waits for the edit
        f"--trainer.default_root_dir={tmp_path}", "--trainer.devices=2", "--trainer.accelerator=cpu",
        "--trainer.callbacks+=TQDMProgressBar",  # a bar a log shows as it moves (Rich's, the default, at its end)
        SHARDED if strategy == "sharded" else "--trainer.strategy=ddp",
    ]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    log = tmp_path / "run.log"
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment)
    try:
        start = time.monotonic()
        # into the edits: a fixed 3 s after both processes started was past the whole run on 2 free cores (statistics
        # cached), and it ended with 0; the bar's first step leaves a dozen batches of 4, or over 90 edits, to stop in
        while not EDITING.search(log.read_text(errors="replace")) or not _children(process.pid):
            assert process.poll() is None and time.monotonic() - start < 200, log.read_text()[-3000:]
            time.sleep(0.05)
        children = _children(process.pid)
        for pid in children if target == "one" else [process.pid, *children]:
            os.kill(pid, signal.SIGTERM)
        sent = time.monotonic()
        status = process.wait(timeout=60)
        seconds = time.monotonic() - sent
        while any(map(_alive, children)) and time.monotonic() - sent < 60:
            time.sleep(0.1)
        children_seconds = time.monotonic() - sent
    finally:
        process.kill()
    output = log.read_text(errors="replace")
    assert status == 128 + signal.SIGTERM, output[-3000:]
    assert seconds < 15 and children_seconds < 15, (seconds, children_seconds)
    stopped = re.findall(r"lightning-edit: error: [^\r\n]*", output)  # process 1's may follow process 0's bar
    assert len(stopped) == 2 and all("stopped by SIGTERM" in line for line in stopped), output[-3000:]
    assert "Traceback" not in output
    assert not list(tmp_path.rglob("results.json")) and not list(tmp_path.rglob("*.tmp"))
    if protocol == "sequential" and strategy == "ddp":  # the stream's checkpoint, written by process 0
        (checkpoint,) = tmp_path.glob("lightning_logs/version_0/stream_checkpoint.safetensors")
        assert all(f"--ckpt_path {checkpoint}" in line for line in stopped), stopped
    else:  # a sharded model writes no stream checkpoint
        assert not list(tmp_path.glob("lightning_logs/*"))  # no version folder holding only the settings


def test_sigterm_stops_the_corpus_sampling_after_the_current_batch(tmp_path, monkeypatch):
    """``python -m lightning_edit.stats.sample_corpus``: a signal during the first batch stops it after that batch,
    in one line, the ``--out`` file not written."""
    generate = GPT2LMHeadModel.generate

    def signalled(self, *args, **kwargs):
        stopping.request_stop(signal.SIGTERM)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(GPT2LMHeadModel, "generate", signalled)
    out = tmp_path / "corpus.jsonl"
    with pytest.raises(Interrupted, match="sampling stopped by signal 15 after 2 of 6 documents; nothing is written"):
        sample_corpus(["--model", "builtin:models/tiny-gpt2", "--documents", "6", "--documents-per-forward", "2",
                       "--max-new-tokens", "2", "--out", str(out)])  # fmt: skip
    assert list(tmp_path.iterdir()) == []
