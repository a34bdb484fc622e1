"""Faults of scoring, editors and judges (issue 46): each stops in one line, or the shipped configs do what they say.

Every run is in process (:func:`lightning_edit.cli.main`), on the tiny or the toy GPT-2, with a handful of cases.
"""

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lightning_edit.cli import build_cli, main
from lightning_edit.editors.context_templates import context_templates
from lightning_edit.errors import ConfigError
from lightning_edit.evaluation import CaseScorer, NonFiniteLogitsError, ScoringConfig
from lightning_edit.judges import build_judge
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TINY = "builtin:models/tiny-gpt2"
QUICK = ["--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu"]
ULTRAEDIT = [
    "--config", str(CONFIGS / "methods/ultraedit.yaml"), "--config", str(CONFIGS / "models/toy-gpt2.yaml"),
    "--config", str(CONFIGS / "benchmarks/counterfact.yaml"), "--data.path=builtin:data/toy/counterfact.json",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])  # pytest's own flags are not the CLI's
    monkeypatch.setenv("LIGHTNING_EDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_main(capsys, *args: str) -> tuple[int, str]:
    """``lightning-edit`` in process: (exit status, stderr); 0 if it returned."""
    try:
        main(list(args))
    except SystemExit as exit_info:
        return exit_info.code, capsys.readouterr().err
    return 0, capsys.readouterr().err


def last_line(err: str) -> str:
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


# Non-finite logits ------------------------------------------------------------------------------------------------


def test_an_edit_that_makes_the_logits_non_finite_stops_the_run_naming_the_case(capsys, tmp_path):
    status, err = run_main(capsys, "validate", *ULTRAEDIT, "--data.limit=2", "--model.lr=1e30", *QUICK)
    line = last_line(err)
    assert status == 1 and line.startswith("lightning-edit: error: builtin:data/toy/counterfact.json: record 0"), err
    assert "the edit of case 0 made the model's logits non-finite (NaN/inf)" in line
    assert not list(tmp_path.rglob("results.json")) and not list(tmp_path.rglob("cases.jsonl"))


def test_non_finite_logits_of_the_unedited_model_are_named_too():
    """The check is the scorer's, whatever computes the request (here the unedited model's reference)."""
    from lightning_edit.data import CounterFact

    data = CounterFact(path="builtin:data/counterfact-flat.json", limit=2)
    data.setup("validate")
    cases = [case for batch in data.val_dataloader() for case in batch]
    model, tokenizer = load_model_and_tokenizer(ModelSource(TINY))
    with torch.no_grad():
        model.get_output_embeddings().weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteLogitsError, match=r"record 0: field '\w+': the unedited model's logits are non-fin"):
        CaseScorer(model, tokenizer, ScoringConfig(), data.score_kinds).reference(cases)


# UltraEdit's η per model ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("preset", "lr"), [("toy-gpt2", 5e-4), ("toy-llama", 2e-3), ("smollm2-135m", 5e-4)])
def test_ultraedit_takes_its_step_size_from_the_model_preset(preset, lr, capsys):
    method = CONFIGS / "methods/ultraedit.yaml"
    with pytest.raises(SystemExit):
        build_cli(["validate", "--config", str(method), "--config", str(CONFIGS / f"models/{preset}.yaml"),
                   "--print_config"])  # fmt: skip
    resolved = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
    assert resolved["lr"] == lr


def test_ultraedit_with_the_shipped_configs_edits_the_toy_model(capsys, tmp_path):
    status, err = run_main(capsys, "validate", *ULTRAEDIT, "--data.limit=20", "--model.scoring.pre_edit=true", *QUICK)
    assert status == 0, err
    (results,) = tmp_path.rglob("results.json")
    metrics = json.loads(results.read_text())["metrics"]
    assert metrics["ES"]["macro"] >= metrics["ES_pre"]["macro"] + 0.5, metrics["ES"]


# Editors' own configs -----------------------------------------------------------------------------------------


def test_fit_of_a_closed_form_editor_on_edit_training_data_is_one_line(capsys, tmp_path):
    status, err = run_main(
        capsys, "fit", "--config", str(CONFIGS / "methods/grace.yaml"),
        "--config", str(CONFIGS / "models/toy-gpt2.yaml"), "--data", "ToyEditTraining", *QUICK,
    )  # fmt: skip
    line = last_line(err)
    assert status == 1 and "GRACE" in line and "ToyEditTraining" in line and "benchmark" in line, err
    assert not list(tmp_path.rglob("codebook.safetensors"))


def test_a_seed_prompt_as_long_as_the_template_is_kept_as_it_is():
    """As the reference's generate_fast: nothing is generated past the length, so the template is the seed text."""
    model, tokenizer = load_model_and_tokenizer(ModelSource(TINY))
    long_seed = "Because"  # 6 tokens on the tiny GPT-2's tokenizer
    assert len(tokenizer(long_seed)["input_ids"]) >= 5
    templates = context_templates(model, tokenizer, [(5, 2)], seed_prompts=("I", long_seed))
    assert len(templates) == 3 and templates[2] == f"{long_seed}. {{}}" and templates[1].startswith("I")


def test_wise_runs_with_its_own_config_on_the_tiny_model(capsys, tmp_path):
    status, err = run_main(
        capsys, "validate", "--config", str(CONFIGS / "methods/wise.yaml"),
        "--config", str(CONFIGS / "models/tiny-gpt2.yaml"), "--config", str(CONFIGS / "benchmarks/counterfact.yaml"),
        "--data.path=builtin:data/counterfact-flat.json", "--data.limit=2", "--model.n_iter=1", *QUICK,
    )  # fmt: skip
    assert status == 0, err
    assert json.loads(next(tmp_path.rglob("results.json")).read_text())["counts"]["cases"] == 2


# Judges -------------------------------------------------------------------------------------------------------


def judge_spec(template: Path, **arguments) -> dict:
    arguments = {"path": TINY, "template": str(template), "scale": "binary", "key": "verdict", **arguments}
    return {"class_path": "local_lm", "init_args": arguments}


def test_a_template_placeholder_the_item_lacks_is_one_line_before_any_edit(capsys, tmp_path):
    template = tmp_path / "judge.txt"
    template.write_text("Question: {question}\nAnswer: {prediction}\nSubject: {subject}\nverdict:")
    judge = json.dumps({"local_lm": judge_spec(template, max_tokens=4)["init_args"]})
    status, err = run_main(
        capsys, "validate", "--model=NoEdit", f"--model.lm.path={TINY}", "--data=CounterFact",
        "--data.path=builtin:data/counterfact-flat.json", "--data.limit=2", "--data.generated_answers=bare",
        f"--data.answer_judge={judge}", *QUICK,
    )  # fmt: skip
    line = last_line(err)
    assert status == 1 and "record 0" in line and str(template) in line and "{subject}" in line, err
    assert not list(tmp_path.rglob("results.json"))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_tokens": "four"}, "max_tokens"),
        ({"temperature": [0]}, "temperature"),
        ({"path": None}, "path"),
        ({"cache_dir": ["sk-not-shown"]}, "cache_dir"),  # a value is never repeated: it may be a secret
    ],
)
def test_a_judge_argument_of_the_wrong_type_is_one_line(arguments, message, tmp_path):
    template = tmp_path / "judge.txt"
    template.write_text("{question} {prediction} verdict:")
    with pytest.raises(ConfigError) as error:
        build_judge(judge_spec(template, **arguments))
    assert str(error.value).startswith("judge local_lm: ") and message in str(error.value)
    assert "\n" not in str(error.value) and "four" not in str(error.value) and "sk-not" not in str(error.value)


def test_a_judge_template_that_is_not_utf8_is_one_line(tmp_path):
    template = tmp_path / "latin1.txt"
    template.write_bytes("Question: {question} réponse: {prediction}".encode("latin-1"))
    with pytest.raises(ConfigError) as error:
        build_judge(judge_spec(template))
    assert str(template) in str(error.value) and "UTF-8" in str(error.value) and "\n" not in str(error.value)
