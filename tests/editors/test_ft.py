"""FT, FT-L and FT-M: the objectives against their equations, FT-L's box, and the edit/undo contract."""

import pytest
import torch
from lightning import Trainer

from lightning_edit.cases import EditRequest
from lightning_edit.data import CounterFact
from lightning_edit.editors import FT
from lightning_edit.editors.ft import clamp_to_box
from lightning_edit.editors.objectives import IGNORE, objective_loss, prompt_last_loss, target_new_loss
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.tokenization import encode_prompt_target

TINY = ModelSource("builtin:models/tiny-gpt2")
REQUEST = EditRequest("{} is located in", "The Eiffel Tower", "Rome")


def test_prompt_last_loss_is_the_mean_target_log_probability_at_the_last_prompt_token():
    logits = torch.randn(2, 7, dtype=torch.double)
    targets = torch.tensor([[3, 5, 0], [1, 0, 0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    log_p = logits.log_softmax(-1)
    expected = -((log_p[0, 3] + log_p[0, 5]) / 2 + log_p[1, 1]) / 2
    assert torch.allclose(prompt_last_loss(logits, targets, mask), expected)


def test_target_new_loss_is_the_teacher_forced_target_cross_entropy():
    logits = torch.randn(1, 5, 9, dtype=torch.double)
    labels = torch.tensor([[IGNORE, IGNORE, 4, 2, IGNORE]])  # prompt of 2 tokens, target [4, 2], then padding
    log_p = logits.log_softmax(-1)
    expected = -(log_p[0, 1, 4] + log_p[0, 2, 2]) / 2  # position i predicts token i + 1
    assert torch.allclose(target_new_loss(logits, labels), expected)


def test_target_new_loss_leaves_the_prompt_positions_out():
    """FT-M: changing what the model predicts for prompt tokens (or after the target) does not change the loss."""
    logits = torch.randn(2, 6, 11, dtype=torch.double)
    labels = torch.tensor([[IGNORE, IGNORE, IGNORE, 7, 1, IGNORE], [IGNORE, 3, 3, 3, IGNORE, IGNORE]])
    changed = logits.clone()
    changed[0, :2] = torch.randn(2, 11)  # predictions of prompt tokens 1, 2
    changed[0, 4:] = torch.randn(2, 11)  # predictions after the target
    changed[1, 3:] = torch.randn(3, 11)  # row 1: position 0 predicts its first target token, 3 on predict padding
    assert torch.equal(target_new_loss(changed, labels), target_new_loss(logits, labels))
    changed[0, 2, 7] += 1.0  # the prediction of the first target token
    assert not torch.equal(target_new_loss(changed, labels), target_new_loss(logits, labels))


def test_one_token_targets_give_one_loss_under_both_objectives():
    """With a one-token target FT-L's bag of tokens is FT-M's cross-entropy (algorithms' FT invariant)."""
    editor = FT(TINY)
    request = EditRequest("{} is located in", "The Eiffel Tower", "the")
    assert len(encode_prompt_target(editor.tokenizer, request.filled_prompt, request.target_new)[1]) == 1
    with torch.no_grad():
        a = objective_loss(editor.model, editor.tokenizer, [request], "prompt_last")
        b = objective_loss(editor.model, editor.tokenizer, [request], "target_new")
    assert torch.allclose(a, b, atol=1e-6)


def test_a_request_has_the_same_loss_alone_or_in_a_batch():
    editor = FT(TINY)
    short = EditRequest("{} is in", "Paris", "the Republic of Italy")
    for objective in ("prompt_last", "target_new"):
        with torch.no_grad():
            alone = [objective_loss(editor.model, editor.tokenizer, [r], objective) for r in (REQUEST, short)]
            together = objective_loss(editor.model, editor.tokenizer, [REQUEST, short], objective)
        assert torch.allclose(together, (alone[0] + alone[1]) / 2, atol=1e-5)


def test_clamp_to_box_keeps_entries_inside_and_clips_the_others():
    original = torch.zeros(4)
    moved = torch.tensor([0.5, -3.0, 1e-4, -2e-4])
    assert torch.equal(clamp_to_box(moved, original, 1e-3), torch.tensor([1e-3, -1e-3, 1e-4, -2e-4]))


def test_ft_l_change_stays_in_the_box_and_only_the_ft_layers_change():
    epsilon = 1e-3
    editor = FT(TINY, layers=[1], norm_constraint=epsilon, num_steps=5, lr=1e-1)
    before = {name: value.clone() for name, value in editor.model.state_dict().items()}
    undo = editor.edit([REQUEST])
    after = editor.model.state_dict()
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed == {"transformer.h.1.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.bias"}
    for name in changed:
        assert (after[name] - before[name]).abs().max() <= epsilon + 1e-7
        assert (after[name] - before[name]).abs().max() > epsilon / 2  # lr 0.1 reaches the box
    editor.undo(undo)
    assert all(torch.equal(before[name], value) for name, value in editor.model.state_dict().items())
    assert not any(p.requires_grad for p in editor.model.parameters())


def test_unconstrained_ft_lowers_the_loss_past_the_box():
    editor = FT(TINY, objective="target_new", num_steps=10, lr=1e-2)
    with torch.no_grad():
        before = objective_loss(editor.model, editor.tokenizer, [REQUEST], "target_new")
    editor.apply_edits([REQUEST])
    with torch.no_grad():
        after = objective_loss(editor.model, editor.tokenizer, [REQUEST], "target_new")
    assert after < before


@pytest.mark.parametrize(
    ("protocol", "options"),
    [("single", {}), ("batch", {"edit_batch_size": 2}), ("sequential", {"edit_batch_size": 2, "eval_at": [2]})],
)
@pytest.mark.parametrize("variant", [{}, {"norm_constraint": 1e-3}, {"objective": "target_new"}])
def test_every_protocol_restores_the_model_bit_identically(protocol, options, variant):
    editor = FT(TINY, layers=[0, 1], num_steps=2, protocol=protocol, **variant, **options)
    before = {name: value.clone() for name, value in editor.model.state_dict().items()}
    data = CounterFact("builtin:data/counterfact-flat.json", limit=4, batch_size=2)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.metrics.results["ES"]["n_cases"] == 4
    state = editor.model.state_dict()
    assert state.keys() == before.keys() and all(torch.equal(before[name], state[name]) for name in state)
