"""Fixtures of the statistics tests: a 3-layer random model and a counter of its forward passes."""

import contextlib

import pytest

from lightning_edit.models.build import random_model


@pytest.fixture(scope="module")
def lm(tiny_lm):
    """A 3-layer float32 model of the tiny family."""
    model, tokenizer = tiny_lm
    return random_model(model.config.model_type, tokenizer, seed=2, num_layers=3), tokenizer


@contextlib.contextmanager
def _forward_calls(model):
    calls = []
    handle = model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        yield calls
    finally:
        handle.remove()


@pytest.fixture
def count_forwards():
    """``with count_forwards(model) as calls:``: ``calls`` has one entry per forward of ``model`` in the block."""
    return _forward_calls
