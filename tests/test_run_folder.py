"""A run writes only into its own new folder: a used log version or a folder holding an earlier run's files is
refused before anything is written, and a failed run leaves every earlier file byte-identical."""

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from lightning_edit.cli import build_cli, main
from lightning_edit.data.records import read_records
from lightning_edit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
RUN = [
    "--model=NoEdit", "--model.lm.path=builtin:models/tiny-gpt2", "--data=CounterFact", "--data.limit=2",
    "--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu",
]  # fmt: skip
GOOD = "--data.path=builtin:data/counterfact-flat.json"


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)


def validate(*flags: str) -> None:
    build_cli(["validate", *RUN, *flags])


def defective(tmp_path: Path, defect: str) -> str:
    """The flag of a data file that stops a run: in the data module's setup (a missing subject), or in the editor's
    checks before the first edit, once the settings are written (a prompt too long)."""
    records = read_records("builtin:data/counterfact-flat.json")[:2]
    if defect == "missing subject":
        del records[1]["subject"]
    else:
        records[1]["rephrase_prompt"] = "word " * 2000 + records[1]["rephrase_prompt"]
    path = tmp_path / f"{defect.replace(' ', '-')}.json"
    path.write_text(json.dumps(records))
    return f"--data.path={path}"


def hashes(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def refused(*flags: str) -> str:
    with pytest.raises(ConfigError) as error:
        validate(*flags)
    return str(error.value)


LOGGERS = {
    "version 0": ["--trainer.logger.init_args.version=0"],
    "name and version": ["--trainer.logger.init_args.name=exp", "--trainer.logger.init_args.version=mine"],
}


@pytest.mark.parametrize("later", ["finishes", "missing subject", "prompt too long"])
@pytest.mark.parametrize("chosen", LOGGERS, ids=list(LOGGERS))
def test_a_used_log_version_is_refused_and_left_byte_identical(tmp_path, chosen, later):
    logger = ["--trainer.logger=CSVLogger", f"--trainer.logger.init_args.save_dir={tmp_path}", *LOGGERS[chosen]]
    validate(GOOD, *logger)
    (folder,) = [path.parent for path in tmp_path.rglob("results.json")]
    assert {"config.yaml", "hparams.yaml", "metrics.csv", "results.json", "cases.jsonl"} <= set(hashes(folder))
    before = hashes(folder)
    message = refused(GOOD if later == "finishes" else defective(tmp_path, later), *logger)
    assert hashes(folder) == before
    assert "\n" not in message and f"{folder} holds the files of an earlier run" in message, message
    assert "leave trainer.logger.init_args.version unset" in message, message


def test_a_version_folder_holding_only_settings_is_not_the_runs_to_remove(tmp_path):
    """A failed run removes a settings-only version folder it made, never one that was there before it."""
    logger = ["--trainer.logger=CSVLogger", f"--trainer.logger.init_args.save_dir={tmp_path}"]
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("seed_everything: 0\n")
    (folder / "hparams.yaml").write_text("{}\n")
    before = hashes(folder)
    refused(defective(tmp_path, "missing subject"), *logger, "--trainer.logger.init_args.version=0")
    assert hashes(folder) == before
    with pytest.raises(Exception, match="field 'subject': missing"):  # a new version: its own error, and no folder
        validate(defective(tmp_path, "missing subject"), *logger)
    assert sorted(path.name for path in folder.parent.iterdir()) == ["version_0"]


def test_a_second_run_without_a_logger_into_the_same_folder_is_refused_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    validate(GOOD, "--trainer.logger=false", f"--trainer.default_root_dir={run}")
    before = hashes(run)
    assert {"config.yaml", "results.json", "results.md", "cases.jsonl"} <= set(before)
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", *RUN, GOOD, "--trainer.logger=false", f"--trainer.default_root_dir={run}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"lightning-edit: error: {run} holds the files of an earlier run (cases.jsonl, "), line
    assert "pick another trainer.default_root_dir" in line, line
    assert hashes(run) == before


def test_a_folder_that_cannot_be_made_is_refused_in_one_line(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", *RUN, GOOD, "--trainer.logger=false", f"--trainer.default_root_dir={blocker / 'run'}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"lightning-edit: error: {blocker / 'run'}: cannot be made or opened as the run's folder (Not a directory); "
        "pick another trainer.default_root_dir"
    )


@pytest.mark.parametrize("logger", ["false", "CSVLogger"])
def test_a_failed_run_leaves_no_settings_and_the_same_command_runs_again(tmp_path, logger):
    flags = [f"--trainer.logger={logger}", f"--trainer.default_root_dir={tmp_path / 'run'}"]
    if logger == "CSVLogger":
        flags += [f"--trainer.logger.init_args.save_dir={tmp_path / 'run'}"]
    with pytest.raises(Exception, match="positions"):
        validate(defective(tmp_path, "prompt too long"), *flags)
    assert hashes(tmp_path / "run") == {}  # config.yaml (and the version folder) removed
    validate(GOOD, *flags)
    assert len(list((tmp_path / "run").rglob("results.json"))) == 1


def test_a_fit_resuming_from_a_checkpoint_in_its_folder_continues_there(tmp_path):
    """Without a logger a fit writes into default_root_dir; stopped, it leaves interrupted.ckpt there, and the same
    command with --ckpt_path <folder>/interrupted.ckpt continues that run in that folder
    (docs/quickstart.md#errors-and-interruptions)."""
    run = tmp_path / "run"
    small = ["--data.n_people=16", "--data.n_countries=4", "--data.n_cities=8", "--data.n_companies=6"]
    small += ["--data.n_objects=8", "--data.n_languages=3", "--data.vocab_size=400", "--data.val_size=16"]
    small += ["--model.hidden_size=32", "--model.num_layers=1", "--model.num_heads=2", "--model.val_recall_facts=4"]
    small += ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
    small += ["--trainer.logger=false", f"--trainer.default_root_dir={run}", "--trainer.callbacks=[]"]

    def fit(steps: int, *flags: str):
        return build_cli(["fit", f"--config={ROOT / 'configs/toy/gpt2.yaml'}", *small, f"--trainer.max_steps={steps}",
                          "--trainer.enable_checkpointing=false", *flags])  # fmt: skip

    fit(2).trainer.save_checkpoint(run / "interrupted.ckpt")  # what a stopped fit leaves (InterruptCheckpoint)
    other = Path(shutil.copy(run / "interrupted.ckpt", tmp_path / "elsewhere.ckpt"))
    assert fit(4, f"--ckpt_path={run / 'interrupted.ckpt'}").trainer.global_step == 4
    before = hashes(run)
    for flags in ([], [f"--ckpt_path={other}"]):  # a new run; a resume of a run that is not this folder's
        with pytest.raises(ConfigError, match="holds the files of an earlier run"):
            fit(4, *flags)
    assert hashes(run) == before
