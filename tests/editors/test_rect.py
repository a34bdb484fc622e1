"""RECT: exactly the top-k% entries of the base editor's update, by relative change, are written."""

import math

import pytest
import torch
from lightning import Trainer

from lightning_edit.cases import EditRequest
from lightning_edit.data import CounterFact
from lightning_edit.editors import MEMIT, RECT, ROME, AlphaEdit
from lightning_edit.editors.rect import rect_mask, rect_update
from lightning_edit.editors.target_vector import TargetOptimization
from lightning_edit.models.loading import ModelSource
from lightning_edit.stats.config import KeyStatistics

TINY = ModelSource("builtin:models/tiny-gpt2")
REQUEST = EditRequest("{} is located in", "The Eiffel Tower", "Rome")
FAST = dict(mom2_adjustment=False, target=TargetOptimization(v_num_grad_steps=4), template_lengths=[[5, 1]])


@pytest.mark.parametrize("keep_fraction", [0.2, 0.4, 0.05, 1.0])
def test_exactly_the_top_k_percent_relative_changes_are_kept(keep_fraction):
    generator = torch.Generator().manual_seed(0)
    delta = torch.randn(37, 23, generator=generator, dtype=torch.double)
    weight = torch.randn(37, 23, generator=generator, dtype=torch.double)
    weight[0, :5] = 0.0  # |W| = 0: guarded by ε, such entries have the largest relative change
    mask = rect_mask(delta, weight, keep_fraction)
    relative = delta.abs() / weight.abs()
    assert mask.sum() == math.ceil(keep_fraction * delta.numel())
    if keep_fraction < 1:
        assert relative[mask].min() >= relative[~mask].max()
        assert mask[0, :5].all()
    update = rect_update(delta, weight, keep_fraction)
    assert torch.equal(update[mask], delta[mask]) and not update[~mask].any()


def test_keep_fraction_outside_0_1_raises():
    with pytest.raises(ValueError, match="keep_fraction"):
        rect_mask(torch.ones(2, 2), torch.ones(2, 2), 0.0)


def recorded(editor, method: str) -> list:
    """Record the (arguments, result) of every call of ``editor.<method>``."""
    calls, original = [], getattr(editor, method)

    def record(*args):
        result = original(*args)
        calls.append((args, result))
        return result

    setattr(editor, method, record)
    return calls


def test_rect_on_rome_writes_rome_update_with_only_its_top_entries():
    rome = ROME(TINY, layer=1, **FAST)
    rome_calls = recorded(rome, "written_update")
    rome.edit([REQUEST])
    rect = ROME(TINY, layer=1, update_filter=RECT(keep_fraction=0.2), **FAST)
    rect_calls = recorded(rect, "written_update")
    weight = rect.model.get_parameter(rect.weight_name)
    before = weight.detach().clone()
    undo = rect.edit([REQUEST])
    (rome_delta, _), _ = rome_calls[0]
    (rect_delta, _), written = rect_calls[0]
    assert torch.equal(rect_delta, rome_delta)  # the base editor's update, computed as ROME computes it
    mask = rect_mask(rome_delta, before.T, 0.2)  # relative to the unedited W (Conv1D stores Wᵀ)
    assert torch.equal(written, rome_delta * mask)
    change = (weight.detach() - before).T
    assert (change != 0).sum() <= mask.sum() and not change[~mask].any()
    rect.undo(undo)
    assert torch.equal(weight, before)


@pytest.mark.parametrize("base", [MEMIT, AlphaEdit])
def test_rect_on_memit_sparsifies_every_layer_update(base):
    common = dict(
        layers=[0, 1],
        mom2_update_weight=100.0,
        stats=KeyStatistics(corpus="builtin:data/toy/corpus.txt", n_samples=50),
        target=TargetOptimization(v_num_grad_steps=4),
        template_lengths=[[5, 1]],
    )
    rect = base(TINY, update_filter=RECT(keep_fraction=0.3), **common)
    calls = recorded(rect, "written_update")
    undo = rect.edit([REQUEST, EditRequest("{} speaks", "Danielle Darrieux", "English")])
    assert len(calls) == 2  # one update per edited layer
    for _, delta in calls:
        assert (delta != 0).sum() == math.ceil(0.3 * delta.numel())
    rect.undo(undo)


def test_a_filtered_update_is_not_low_rank():
    """With a filter the batched ``single`` path (low-rank row updates) is not taken: cases go one at a time."""
    assert ROME(TINY, layer=1, update_filter=RECT(), **FAST).low_rank_edits([[REQUEST]]) is None


@pytest.mark.parametrize(
    ("protocol", "options"),
    [("single", {}), ("batch", {"edit_batch_size": 2}), ("sequential", {"edit_batch_size": 2, "eval_at": [2]})],
)
def test_every_protocol_restores_the_model_bit_identically(protocol, options):
    editor = ROME(TINY, layer=1, update_filter=RECT(), protocol=protocol, **FAST, **options)
    before = {name: value.clone() for name, value in editor.model.state_dict().items()}
    data = CounterFact("builtin:data/counterfact-flat.json", limit=4, batch_size=2)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.metrics.results["ES"]["n_cases"] == 4
    state = editor.model.state_dict()
    assert state.keys() == before.keys() and all(torch.equal(before[name], state[name]) for name in state)
