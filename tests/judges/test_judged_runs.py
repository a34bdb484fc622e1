"""Judged score kinds in real runs of the ``lightning-edit`` command (this module is imported by name).

A toy benchmark scores the unedited toy GPT-2's greedy answer to each rewrite prompt against the true object (the
toy model gives it) and against the new one (it does not), with judges a config picks: exact match and sympy (their
agreement table lands in results.json), and an LLM judge behind a test server (the cache makes a rerun ask nothing;
no file or log of either run holds the API key).
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest

from lightning_edit.cases import EditCase, PromptGroup
from lightning_edit.cli import main
from lightning_edit.data import CounterFact
from lightning_edit.judges.agreement import cohen_kappa, spearman
from lightning_edit.judges.kind import Generation, JudgedKind

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-run-8d0a61f3c5"


class JudgedFacts(CounterFact):
    """Toy CounterFact scored only by judged kinds, one per entry of ``judges`` (metric name -> judge spec)."""

    def __init__(self, path: str, judges: dict[str, Any], limit: int | None = None, batch_size: int = 8):
        super().__init__(path, limit=limit, batch_size=batch_size)
        self.judges = judges

    def own_kinds(self) -> list[JudgedKind]:
        generation = Generation(max_new_tokens=4, stop=(".", ",", "\n"))
        return [JudgedKind(f"judged_{metric}", spec, generation) for metric, spec in self.judges.items()]

    def load_cases(self) -> list[EditCase]:
        metrics = {f"judged_{metric}": metric for metric in self.judges}
        cases = []
        for case in super().load_cases():
            request = case.requests[0]
            prompts, expected = (request.filled_prompt,) * 2, (request.target_true, request.target_new)
            cases.append(replace(case, groups={"answer": PromptGroup(prompts, expected, metrics=metrics)}))
        return cases

    def declared_metrics(self) -> dict[str, str]:
        return {metric: f"judged_{metric}" for metric in self.judges}


def validate_command(
    directory: Path, judges: dict, devices: int = 1, flags: tuple[str, ...] = (), config: str = "methods/no_edit.yaml"
) -> list[str]:
    """The ``lightning-edit validate`` command of a judged toy run with ``config`` (NoEdit; the quickstart: ROME)."""
    return [
        sys.executable, "-m", "lightning_edit", "validate",
        f"--config={ROOT / 'configs' / config}",
        "--model.lm.path=builtin:models/toy-gpt2",
        f"--data={Path(__file__).stem}.JudgedFacts",
        "--data.path=builtin:data/toy/counterfact.json",
        f"--data.judges={json.dumps(judges)}",
        "--data.limit=6",
        "--data.batch_size=3",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={directory}",
        f"--trainer.devices={devices}",
        *(["--trainer.strategy=ddp"] if devices > 1 else []),
        *flags,
    ]  # fmt: skip


def run_environment(env: dict | None = None, without: tuple[str, ...] = ()) -> dict:
    """The environment of a judged run: this module importable, offline, ``env`` added, ``without`` removed."""
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parent), "HF_HUB_OFFLINE": "1"} | (env or {})
    return {name: value for name, value in env.items() if name not in without}


def validate(
    tmp_path: Path,
    name: str,
    judges: dict,
    env: dict | None = None,
    devices: int = 1,
    status: int = 0,
    flags: tuple[str, ...] = (),
) -> tuple[dict, str, Path]:
    """A run's results.json (anywhere in its folder), its output and its folder; ``status``: its exit status."""
    directory = tmp_path / name
    command = validate_command(directory, judges, devices, flags)
    done = subprocess.run(command, cwd=tmp_path, env=run_environment(env), timeout=600, capture_output=True, text=True)
    assert done.returncode == status, done.stderr[-3000:]
    [results] = directory.rglob("results.json")
    return json.loads(results.read_text()), done.stdout + done.stderr, directory


def loopback_judge(chat_server, tmp_path) -> tuple[dict, dict]:
    """(judge spec, environment) of an openai_chat judge at the loopback server, its key in the environment."""
    spec = {
        "class_path": "openai_chat",
        "init_args": {
            "model": "judge-model",
            "base_url": chat_server.url,
            "api_key_env": "JUDGE_TEST_KEY",
            "max_retries": 0,
            "cache_dir": str(tmp_path / "cache"),
            "template": "rule_edit",  # RULE-EDIT's, named: a judge's default is the generic answer_correct
        },
    }
    return spec, {"JUDGE_TEST_KEY": KEY, "NO_PROXY": "127.0.0.1,localhost"}


@pytest.mark.parametrize("devices", [1, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_exact_match_and_sympy_agree_in_the_results(tmp_path, devices):
    """On 2 processes too: the judges' counts and items are gathered from both."""
    judges = {"EM": "exact_match", "SYM": {"class_path": "symbolic_math"}}
    results, _, directory = validate(tmp_path, "run", judges, devices=devices)
    em = results["metrics"]["EM"]
    assert em["kind"] == "judged_EM" and "ExactMatchJudge" in em["convention"]
    assert em["n_prompts"] == 12 and em["n_missing"] == 0
    assert em["micro"] == 0.5  # the true object every time, never the new one
    judges = results["judges"]
    assert judges["judged_EM"]["class"] == "lightning_edit.judges.exact_match.ExactMatchJudge"
    assert judges["judged_SYM"]["verdicts"] == 12 and judges["judged_SYM"]["rel_tol"] == 1e-3
    [row] = results["judge_agreement"]
    assert row["judges"] == ["judged_EM", "judged_SYM"] and row["n_items"] == 12
    # each case's second prompt (the new object) scores 0 under both judges, so a case's mean holds its first score
    cases = [json.loads(line)["scores"] for line in (directory / "cases.jsonl").read_text().splitlines()]
    first = {name: [2 * case[name] for case in cases] for name in ("EM", "SYM")}
    assert sum(first["EM"]) == 6 and sum(first["SYM"]) == 5  # sympy does not read "Maezvok Motors"
    assert results["metrics"]["SYM"]["micro"] == 5 / 12
    a, b = first["EM"] + [0.0] * 6, first["SYM"] + [0.0] * 6
    assert row["kappa"] == pytest.approx(cohen_kappa(a, b)) == pytest.approx(5 / 6)
    assert row["spearman"] == pytest.approx(spearman(a, b)) and row["kappa_weights"] is None


def test_an_llm_judge_run_is_cached_and_keeps_no_key(tmp_path, chat_server):
    def respond(text: str, n: int):
        reference = text.split("Reference answer: ")[1].split("\n")[0]
        answer = text.split("Model answer: ")[1].split("\n")[0]
        if reference == "yellow":  # case 0's new object: an answer that is no verdict
            return "reply", "I cannot tell."
        return "reply", json.dumps({"verdict": "yes" if answer == reference else "no", "reason": "compared"})

    chat_server.respond = respond
    spec, env = loopback_judge(chat_server, tmp_path)
    first, first_log, first_dir = validate(tmp_path, "first", {"LLM": spec}, env)
    calls = chat_server.calls
    second, second_log, second_dir = validate(tmp_path, "second", {"LLM": spec}, env)

    assert calls == 12 and chat_server.calls == calls  # the rerun asked nothing
    llm = first["metrics"]["LLM"]
    assert (llm["n_prompts"], llm["n_missing"]) == (11, 1) and llm["micro"] == 6 / 11
    judge = first["judges"]["judged_LLM"]
    assert (judge["verdicts"], judge["from_cache"], judge["missing"], judge["failed"]) == (12, 0, 1, 0)
    assert judge["template"] == "rule_edit" and len(judge["template_sha256"]) == 64
    assert second["judges"]["judged_LLM"]["from_cache"] == 12
    for name in ("macro", "micro", "n_prompts", "n_missing", "macro_ci95"):
        assert second["metrics"]["LLM"][name] == llm[name]

    written = [p for d in (first_dir, second_dir, tmp_path / "cache") for p in d.rglob("*") if p.is_file()]
    assert len(written) > 4 and not any(KEY.encode() in p.read_bytes() for p in written)
    assert "results written to" in first_log  # the run's output was captured
    assert KEY not in first_log and KEY not in second_log


def test_a_run_whose_every_judge_request_failed_exits_1_and_keeps_its_results(tmp_path, chat_server):
    chat_server.respond = lambda text, n: ("status", 500)
    spec, env = loopback_judge(chat_server, tmp_path)
    judges = {"LLM": spec, "EM": "exact_match"}
    results, log, directory = validate(tmp_path, "down", judges, env, status=1, flags=("--trainer.logger=true",))

    path = directory / "lightning_logs" / "version_0" / "results.json"  # the default logger's folder, kept
    message = log.strip().splitlines()[-1]
    assert message.startswith(
        f"lightning-edit: error: every request to the judge failed (12 to judge-model at {chat_server.url}; "
    ), message
    assert f"no verdict for LLM, null in {path}," in message and "Traceback" not in log
    assert chat_server.calls == 12 and KEY not in log
    assert (results["metrics"]["LLM"]["n_missing"], results["metrics"]["LLM"]["macro"]) == (12, None)
    assert results["metrics"]["EM"]["n_prompts"] == 12 and results["judges"]["judged_LLM"]["failed"] == 12


def _corrupt_cache(cache: Path) -> None:
    cache.mkdir()
    (cache / "verdicts.sqlite").write_bytes(b"not a database, " * 100)


def _foreign_cache(cache: Path) -> None:
    cache.mkdir()
    with sqlite3.connect(cache / "verdicts.sqlite") as connection:
        connection.execute("CREATE TABLE verdicts (judge TEXT, item TEXT, answer TEXT)")


def _cache_is_a_file(cache: Path) -> None:
    cache.write_text("a file where the cache folder should be")


#: fault -> (change of the judge's init_args, environment variables removed, what the run's cache folder gets,
#: the start of the one-line error after "lightning-edit: error: ")
JUDGE_FAULTS = {
    "no API key": ({}, ("JUDGE_TEST_KEY",), None, "judge openai_chat: its API key is read from $JUDGE_TEST_KEY"),
    "concurrency 0": ({"concurrency": 0}, (), None, "judge openai_chat: concurrency=0"),
    "negative timeout": ({"timeout": -1}, (), None, "judge openai_chat: timeout=-1"),
    "unknown argument": ({"modle": "x"}, (), None, "judge openai_chat: unknown argument 'modle'"),
    "unknown judge": ({"class_path": "openai"}, (), None, "unknown judge 'openai'"),
    "missing template": ({"template": "no_such_template"}, (), None, "judge openai_chat: judge template"),
    "corrupt cache": ({}, (), _corrupt_cache, "judge openai_chat: cannot use the verdict cache"),
    "foreign cache": ({}, (), _foreign_cache, "judge openai_chat: cannot use the verdict cache"),
    "cache folder is a file": ({}, (), _cache_is_a_file, "judge openai_chat: cannot use the verdict cache"),
}


@pytest.mark.parametrize("fault", JUDGE_FAULTS)
def test_a_judge_or_cache_fault_is_one_line_before_any_edit(fault, tmp_path, chat_server, monkeypatch, capsys):
    """ROME (the quickstart) with a faulty judge: the run stops on the fault before the editor's key statistics,
    let alone an edit, and before any request. In process (a subprocess's imports took most of its 9 s a fault)."""
    change, without, make_cache, expected = JUDGE_FAULTS[fault]
    spec, env = loopback_judge(chat_server, tmp_path)
    spec = {"class_path": change.pop("class_path", spec["class_path"]), "init_args": spec["init_args"] | change}
    if make_cache:
        make_cache(tmp_path / "cache")
    stats = tmp_path / "stats"
    command = validate_command(
        tmp_path / "run", {"LLM": spec}, config="quickstart.yaml", flags=(f"--model.stats.cache_dir={stats}",)
    )
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # --data=test_judged_runs.JudgedFacts
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in without:
        monkeypatch.delenv(name)
    with pytest.raises(SystemExit) as exit_info:
        main(command[3:])  # the arguments after ``python -m lightning_edit``
    err = capsys.readouterr().err
    assert exit_info.value.code == 1, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"lightning-edit: error: {expected}"), err[-3000:]
    assert "Traceback" not in err and chat_server.calls == 0
    assert not stats.exists()  # ROME never computed its key statistics: no weight was touched


def test_sigterm_while_a_judge_hangs_stops_within_seconds_and_keeps_the_verdicts(tmp_path, chat_server):
    """The first three requests are answered, every later one hangs (a 60 s timeout, 2 retries: minutes)."""
    chat_server.respond = lambda text, n: ("reply", '{"verdict": "yes"}') if n < 3 else ("sleep", 600)
    spec, env = loopback_judge(chat_server, tmp_path)
    spec["init_args"] |= {"timeout": 60.0, "max_retries": 2, "concurrency": 1}
    command = validate_command(tmp_path / "run", {"LLM": spec})
    log = tmp_path / "run.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(command, cwd=tmp_path, env=run_environment(env), stderr=stderr, text=True)
    start = time.monotonic()
    while chat_server.calls < 4:  # the fourth request hangs
        assert process.poll() is None and time.monotonic() - start < 300, log.read_text()[-3000:]
        time.sleep(0.1)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    status = process.wait(timeout=60)
    assert time.monotonic() - sent < 10
    err = log.read_text()
    assert status == 128 + signal.SIGTERM, err[-3000:]
    message = err.strip().splitlines()[-1]
    assert message.startswith("lightning-edit: error: scoring stopped by SIGTERM"), message
    assert "Traceback" not in err and KEY not in err
    with sqlite3.connect(tmp_path / "cache" / "verdicts.sqlite") as connection:
        assert connection.execute("SELECT COUNT(*) FROM verdicts").fetchone() == (3,)


#: secrets in every secret-shaped config field, in the W&B logger's config (written to its run files)
FIELD_SECRETS = {
    field: f"{field.replace('_', '-')}-secret-{n}93a7"
    for n, field in enumerate(("token", "hf_token", "private_key", "credentials", "password", "secret", "api_key"))
}
PASTED_KEY, ENV_TOKEN = "sk-pasted-4e9d0c11", "hf-environ-7c2b55e1"


def test_no_secret_reaches_any_file_or_output(tmp_path, chat_server):
    """Runs with secrets in every secret-shaped field (W&B config), the judge's key echoed by the endpoint in an error
    body and in a reply, a key pasted into api_key_env, ``--print_config`` and a traceback: no file any run writes
    (results, configs, W&B offline files, the verdict cache) and no output holds a secret."""
    chat_server.respond = lambda text, n: (
        ("status", (401, f"Incorrect API key provided: {KEY}"))
        if n % 2
        else ("reply", f'{{"verdict": "yes", "reason": "{KEY}"}}')
    )
    spec, env = loopback_judge(chat_server, tmp_path)
    env |= {"HF_TOKEN": ENV_TOKEN, "WANDB_MODE": "offline"}
    logger = tmp_path / "logger.yaml"
    logger.write_text(
        "trainer:\n  logger:\n    class_path: lightning.pytorch.loggers.WandbLogger\n"
        f"    init_args: {{offline: true, project: p, save_dir: {tmp_path / 'run'}}}\n"
        f"    dict_kwargs:\n      config: {json.dumps({'service': FIELD_SECRETS})}\n"
    )
    pasted = {"class_path": "openai_chat", "init_args": spec["init_args"] | {"api_key_env": PASTED_KEY}}

    def flags(folder: str, *more: str) -> tuple[str, ...]:  # each run its own folder (a run writes only there)
        return ("--config", str(logger), f"--trainer.logger.init_args.save_dir={tmp_path / folder}", *more)

    runs = {  # name -> (command, exit status)
        "judged": (validate_command(tmp_path / "run", {"LLM": spec}, flags=flags("run")), 0),
        "print_config": (validate_command(tmp_path / "p", {"LLM": spec}, flags=flags("p", "--print_config")), 0),
        "pasted key": (validate_command(tmp_path / "k", {"LLM": pasted}, flags=flags("k")), 1),
        "traceback": (
            validate_command(tmp_path / "t", {"LLM": spec}, flags=flags("t", "--data.limit=0", "--debug")),
            1,
        ),
    }
    started = {  # side by side: their imports took most of the 44 s the four took one after another
        name: subprocess.Popen(command, cwd=tmp_path, env=run_environment(env), stdout=PIPE, stderr=PIPE, text=True)
        for name, (command, _) in runs.items()
    }
    outputs = {}
    for name, process in started.items():
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == runs[name][1], (name, stderr[-3000:])
        outputs[name] = stdout + stderr
    assert (
        "sk-pasted" not in outputs["pasted key"]
        and "api_key_env names the environment variable" in outputs["pasted key"]
    )
    assert "Traceback" in outputs["traceback"] and "<redacted>" in outputs["print_config"]
    assert "failed: AuthenticationError" in outputs["judged"]  # the echoed error was logged, masked
    written = [path for path in tmp_path.rglob("*") if path.is_file() and path.name != "logger.yaml"]
    assert list((tmp_path / "run").rglob("*.wandb")) and (tmp_path / "cache" / "verdicts.sqlite") in written
    texts = {str(path): path.read_bytes().decode("latin-1") for path in written} | outputs
    for secret in [KEY, PASTED_KEY, ENV_TOKEN, *FIELD_SECRETS.values()]:
        assert not [name for name, text in texts.items() if secret in text], secret


def test_generated_answers_graded_by_an_llm_judge(tmp_path, chat_server, monkeypatch):
    """``data.answer_judge``: the edit and paraphrase answers (not the neighbours') go to the judge with the
    ``answer_correct`` template; a server that says yes when the answer contains the reference gives
    ``<metric>_gen_judged`` equal to ``<metric>_gen_contains``, case by case."""
    from lightning import Trainer

    from lightning_edit.editors import NoEdit
    from lightning_edit.errors import ConfigError
    from lightning_edit.models.loading import ModelSource
    from tests.data.test_answers import known_half

    asked = []

    def respond(text: str, n: int):
        prompt = text.split("Prompt: ")[1].split("\n")[0]
        reference = text.split("Reference answer: ")[1].split("\n")[0]
        answer = text.split("Model answer: ")[1].split("\n")[0]
        asked.append(prompt)
        return "reply", json.dumps({"verdict": "yes" if reference.lower() in answer.lower() else "no"})

    chat_server.respond = respond
    records, path = known_half(tmp_path, "counterfact")  # facts the model knows: some answers contain the object
    records = records[:4]
    Path(path).write_text(json.dumps(records))
    spec, env = loopback_judge(chat_server, tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    judge = {"openai_chat": spec["init_args"] | {"template": "answer_correct"}}
    data = CounterFact(path, generated_answers="bare", answer_judge=judge, batch_size=4)
    editor = NoEdit(ModelSource("builtin:models/toy-gpt2"))
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(editor, datamodule=data, verbose=False)

    prompts = [r["requested_rewrite"]["prompt"].format(r["requested_rewrite"]["subject"]) for r in records]
    prompts += [p for r in records for p in r["paraphrase_prompts"]]
    assert sorted(asked) == sorted(prompts)  # each edit and paraphrase answer once; no neighbour
    for metric in ("ES", "PS"):
        case_scores = editor.metrics.case_scores
        assert case_scores[f"{metric}_gen_judged"] == case_scores[f"{metric}_gen_contains"]
    assert editor.metrics.results["ES_gen_judged"]["macro"] > 0 and "NS_gen_judged" not in editor.metrics.results
    assert "answer_correct" in editor.metrics.results["ES_gen_judged"]["convention"]
    with pytest.raises(ConfigError, match="set data.generated_answers too"):
        CounterFact(path, answer_judge=judge)
    with pytest.raises(ConfigError, match="data.answer_judge=.*one judge and its arguments"):
        CounterFact(path, generated_answers="bare", answer_judge={"openai_chat": "x"})


def test_dmle_routing_with_a_key_has_the_llm_grade_every_metric_loc_included(tmp_path, chat_server, monkeypatch):
    """DMLE's judge routing (point 3): with an API key its LLM grades Rel, Gen, IP, RU and Loc (run_new.py grades Loc
    with it always); here the A/B judge at a loopback server, read as DMLE reads it (only "A" scores 1). The keyless
    reference's Rel, Gen, IP, RU are the ``_exact_match`` columns of the same run."""
    from lightning import Trainer

    from lightning_edit.data import RuleEdit
    from lightning_edit.editors import NoEdit
    from lightning_edit.models.loading import ModelSource

    asked = []

    def respond(text: str, n: int):
        asked.append(text)
        return "reply", "A" if n % 2 == 0 else "B, because"

    chat_server.respond = respond
    spec, env = loopback_judge(chat_server, tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    judge = {"openai_chat": spec["init_args"] | {"template": "rule_edit_ab"}}
    data = RuleEdit(
        "builtin:data/ruleedit", task="all", case_grouping="dmle_staged", locality_tokens="expected",
        answer_cleaning="dmle", aggregation="run_new", judge=judge, limit=1,
    )  # fmt: skip
    editor = NoEdit(ModelSource("builtin:models/toy-rule-gpt2"))
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(editor, datamodule=data, verbose=False)
    (case,) = data.cases
    for metric in ("Rel", "Gen", "Loc", "IP", "RU"):
        result = editor.metrics.results[metric]
        assert result["n_missing"] == 0 and "rule_edit_ab" in result["convention"]
        assert editor.metrics.results[f"{metric}_exact_match"]["kind"].startswith("ruleedit_exact_match")
        for group in case.groups.values():
            if metric in group.metrics.values():
                for prompt in group.prompts:  # every prompt of the metric went to the LLM, Loc's too
                    assert any(prompt in text for text in asked), (metric, prompt)
    assert editor.metrics.results["Loc"]["n_prompts"] > 0
