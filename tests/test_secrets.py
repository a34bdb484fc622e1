"""What is a secret (names and values), and that none reaches a file or a message: unit tests of the rule, and one run
of ``lightning-edit`` as a subprocess with secrets under field names no code has seen."""

import json
import os
import secrets
import string
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lightning_edit.cli import main
from lightning_edit.errors import ConfigError
from lightning_edit.redaction import REDACTED, add_secrets, argv_secrets, mask, redact, secret_values

TINY = "builtin:models/tiny-gpt2"


def unseen_name() -> str:
    """A field name no code has seen: random letters."""
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(10))


def fresh(alphabet: str = string.ascii_letters + string.digits, size: int = 32) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(size))


SECRET_NAMES = (
    "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "passphrase", "Authorization", "Proxy-Authorization", "auth",
    "bearer", "cookie", "Cookie", "session_token", "refresh_token", "clientSecret", "client_secret", "X-Api-Key",
    "apiKey", "encryption_key", "ssh_private_key", "db_password", "webhook_url", "credentials",
)  # fmt: skip
#: settings whose names end like a secret's, or hold other words, and are not secrets
NOT_SECRETS = {
    "fact_token": "subject_last", "eos_token": "</s>", "max_new_tokens": 8, "key": "verdict", "cache_key": "abc12345",
    "tokenizer": "gpt2", "author": "someone", "api_key_env": "OPENAI_API_KEY", "keys": "subject", "auth_enabled": True,
    "base_url": "https://api.deepseek.com/v1", "path": "builtin:data/counterfact-flat.json",
    "repo": "git@github.com:a/b",
}  # fmt: skip


def test_secret_names_are_redacted_and_settings_are_not():
    fields = {name: fresh() for name in SECRET_NAMES}
    config = {"judge": {"headers": fields | NOT_SECRETS}, "x": [{"passphrase": ["p-" + fresh()]}]}
    cleaned = redact(config)
    assert cleaned["judge"]["headers"] == dict.fromkeys(SECRET_NAMES, REDACTED) | NOT_SECRETS
    assert cleaned["x"] == [{"passphrase": REDACTED}]
    assert secret_values(config) == set(fields.values()) | set(config["x"][0]["passphrase"])


def credential_values() -> dict[str, tuple[str, str, str]]:
    """Values that hold a credential under any name: (value, its secret part, the value redacted)."""
    password, token = fresh(size=12), fresh(size=24)
    keys = {
        "openai": "sk-proj-" + fresh(), "huggingface": "hf_" + fresh(size=34), "github": "ghp_" + fresh(size=36),
        "slack": "xoxb-" + fresh(string.digits, 12) + "-" + fresh(size=24),
        "aws": "AKIA" + fresh(string.ascii_uppercase, 16), "google": "AIza" + fresh(size=35),
        "jwt": "eyJ" + fresh(size=20) + ".eyJ" + fresh(size=30) + "." + fresh(size=20),
    }  # fmt: skip
    values = {name: (key, key, REDACTED) for name, key in keys.items()}
    values["url"] = (
        f"http://alice:{password}@judge.example:8080/v1",
        f"alice:{password}",
        f"http://{REDACTED}@judge.example:8080/v1",
    )
    values["header"] = (f"Bearer {token}", token, f"Bearer {REDACTED}")
    values["query"] = (
        f"https://h.example/v1?model=m&api_key={token}",
        token,
        f"https://h.example/v1?model=m&api_key={REDACTED}",
    )
    values["sentence"] = (
        f"key {keys['openai']} and {keys['github']}",
        keys["openai"],
        f"key {REDACTED} and {REDACTED}",
    )
    return values


def test_credentials_in_values_are_redacted_under_any_name():
    values = credential_values()
    config = {unseen_name(): {name: value for name, (value, _, _) in values.items()}, "plain": dict(NOT_SECRETS)}
    cleaned = redact(config)
    assert list(cleaned.values())[0] == {name: redacted for name, (_, _, redacted) in values.items()}
    assert cleaned["plain"] == NOT_SECRETS
    assert {secret for _, secret, _ in values.values()} <= secret_values(config)
    assert "alice" not in json.dumps(cleaned)


@pytest.mark.parametrize(
    "text", ["the bearer of news", "Basic statistics computed", "task-specific keys", "mail a@b.example", "sk-1"]
)
def test_ordinary_text_is_not_masked(text):
    assert mask(text) == text


def test_printed_text_masks_credentials_and_the_secrets_of_the_command_line(tmp_path):
    values = credential_values()
    for value, secret, redacted in values.values():
        assert mask(f"got {value} here") == f"got {redacted} here"
    name, password, token = unseen_name(), fresh(size=10), fresh(size=24)
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump({"data": {name: f"postgres://u:{password}@db/x", "n": {"passphrase": "hunter22"}}})
    )
    found = argv_secrets(["--config", str(config), f'--x=[{{"{name}": "Bearer {token}"}}]'])
    assert {password, "hunter22", token} <= found
    add_secrets(found)
    assert mask(f"the password {password} and hunter22") == f"the password {REDACTED} and {REDACTED}"


def deep_yaml(path: Path, depth: int) -> Path:
    path.write_text("".join("  " * i + f"k{i}:\n" for i in range(depth)))
    return path


def test_a_deep_or_non_utf8_config_is_one_line_naming_the_file(tmp_path, capsys):
    deep = deep_yaml(tmp_path / "deep.yaml", 5000)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("model: NoEdit\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="nested"):
        argv_secrets(["--config", str(deep_yaml(tmp_path / "mid.yaml", 150))])
    assert argv_secrets(["--config", str(deep_yaml(tmp_path / "ok.yaml", 50))]) == set()
    for config, words in ((deep, "nested"), (latin, "UTF-8")):
        with pytest.raises(SystemExit) as exited:
            main(["validate", "--config", str(config)])
        message = capsys.readouterr().err
        assert exited.value.code == 1 and len(message.strip().splitlines()) == 1, message[-2000:]
        assert message.startswith(f"lightning-edit: error: {config}: ") and words in message, message


def test_no_secret_by_another_name_reaches_any_file_or_message(tmp_path):
    """One run with a W&B logger and a CSV logger (hparams.yaml): secrets under a random field name, in a URL, in a
    bearer header and under names the rule learned, planted in W&B's config; then the same command with
    ``--print_config``."""
    pytest.importorskip("wandb")
    run = tmp_path / "run"
    name, other, password, token = unseen_name(), unseen_name(), fresh(size=14), fresh(size=28)
    planted = {
        name: "sk-proj-" + fresh(),
        other: f"Bearer {token}",
        "endpoint": f"http://alice:{password}@judge.example/v1",
        "headers": {"Authorization": f"Bearer {fresh()}"},
        "aws_secret_access_key": fresh(size=40),
        "passphrase": fresh(size=16),
    }
    loggers = [
        {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(run)}},
        {
            "class_path": "lightning.pytorch.loggers.WandbLogger",
            "init_args": {"offline": True, "project": "p", "save_dir": str(run)},
            "dict_kwargs": {"config": {"service": planted}},
        },
    ]
    config = tmp_path / "loggers.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"logger": loggers}}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    common = [
        sys.executable, "-m", "lightning_edit", "validate", "--model=NoEdit", f"--model.lm.path={TINY}",
        "--data=CounterFact", "--data.path=builtin:data/counterfact-flat.json", "--data.limit=2", "--config",
        str(config), "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={run}",
    ]  # fmt: skip
    processes = [  # side by side (--print_config writes nothing)
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        for args in (common, [*common, "--print_config"])
    ]
    (table, run_err), (printed, print_err) = (process.communicate(timeout=600) for process in processes)
    assert [process.returncode for process in processes] == [0, 0], (run_err[-3000:], print_err[-3000:])
    files = [path for path in run.rglob("*") if path.is_file()]
    names = {path.name for path in files}
    assert {"results.json", "config.yaml", "hparams.yaml"} <= names and any(n.endswith(".wandb") for n in names)
    texts = [table, run_err, printed, print_err] + [path.read_bytes().decode("latin-1") for path in files]
    secret_parts = [planted[name], password, token, planted["headers"]["Authorization"].split()[1]]
    secret_parts += [planted["aws_secret_access_key"], planted["passphrase"]]
    for secret in secret_parts:
        assert not [text[:200] for text in texts if secret in text], secret
    for path, text in [(p, p.read_text()) for p in files if p.name in ("results.json", "config.yaml", "hparams.yaml")]:
        assert f"http://{REDACTED}@judge.example/v1" in text and f"Bearer {REDACTED}" in text, path
    assert f"http://{REDACTED}@judge.example/v1" in printed and f"Bearer {REDACTED}" in printed
