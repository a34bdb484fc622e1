"""Shared fixtures: tiny GPT-2 and LLaMA models saved to disk and loaded by the real loading code; no network."""

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # read by huggingface_hub at import: set before transformers is imported
os.environ["WANDB_MODE"] = "disabled"

import pytest  # noqa: E402
import torch  # noqa: E402

from lightning_edit import redaction, stopping  # noqa: E402
from lightning_edit.models.build import random_model, train_tokenizer  # noqa: E402
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer  # noqa: E402
from lightning_edit.resources import builtin_texts  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
EXTRA_TEXT = ["Answer: A B C D E", "The capital of France is Paris.", "Danielle Darrieux speaks French and English."]


@pytest.fixture(autouse=True)
def _no_stop_signal_left():
    """A stop signal a test sends this process (a trainer's or the CLI's handler records it) ends with the test."""
    yield
    stopping._signals.clear()
    stopping._posted = False
    stopping._held.clear()


@pytest.fixture(autouse=True)
def _no_secret_left():
    """The secrets an in-process run read (a judge's API key) are masked in this test's output, not in later tests',
    whose own checks that a key never reaches the output they would pass vacuously."""
    known = set(redaction._secrets)
    yield
    redaction._secrets.intersection_update(known)


@pytest.fixture(scope="module", autouse=True)
def _threads_put_back():
    """Torch's thread count as each module found it, for the modules after it: a count a module leaves behind would
    run every later test on it (2 threads left by the real-model module, on a core another job used, made a later
    device-map test 10 times slower)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session", params=["gpt2", "llama"])
def tiny_model_dir(request, tmp_path_factory) -> Path:
    """A directory holding a tiny random model of the family and its trained tokenizer (save_pretrained)."""
    directory = tmp_path_factory.mktemp(f"tiny-{request.param}")
    tokenizer = train_tokenizer(builtin_texts() + EXTRA_TEXT * 5, request.param, vocab_size=600)
    random_model(request.param, tokenizer, seed=0).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_lm(tiny_model_dir):
    """(model, tokenizer) of each tiny family, loaded from disk."""
    return load_model_and_tokenizer(ModelSource(str(tiny_model_dir)))
