"""WISE: the activation score, margins, TIES merge and router against their equations; the main memory's output
bit-identically below the routing threshold; masked, box-constrained shards; closing and merging of memories; and
bit-identical undo under every protocol."""

import pytest
import torch
from lightning import Trainer

from lightning_edit.cases import EditRequest
from lightning_edit.data import CounterFact
from lightning_edit.editors import WISE
from lightning_edit.editors.wise import activation_scores, margin_loss, route, ties_merge
from lightning_edit.errors import ConfigError
from lightning_edit.models.hooks import Trace
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.tokenization import encode_prompt

EIFFEL = EditRequest("{} is located in the city of", "The Eiffel Tower", "Rome")
DARRIEUX = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English")

# ----------------------------------------------------------------------------------------------------------------
# The tensor math


def test_activation_scores_are_the_norm_of_the_side_memory_shift():
    generator = torch.Generator().manual_seed(0)
    inputs, delta = torch.randn(2, 3, 5, generator=generator), torch.randn(4, 5, generator=generator)
    expected = torch.stack([torch.stack([(delta @ a).norm() for a in row]) for row in inputs])
    torch.testing.assert_close(activation_scores(inputs, delta), expected)


def test_margin_loss_is_zero_beyond_the_margins_and_linear_inside():
    inside, outside = torch.tensor([25.0, 30.0]), torch.tensor([1.0, 2.0])
    assert margin_loss(inside, outside, alpha=5, beta=20, gamma=10) == 0
    # one out-of-scope token 1 above α, one in-scope token 5 below β, mean gap 17.5 - 5 = 12.5, 2.5 short of γ
    inside, outside = torch.tensor([15.0, 20.0]), torch.tensor([6.0, 4.0])
    expected = (1.0 + 0.0) / 2 + (5.0 + 0.0) / 2 + (15.0 - 12.5)
    assert margin_loss(inside, outside, alpha=5, beta=20, gamma=15) == pytest.approx(expected)


def test_ties_merge_trims_elects_the_sign_and_averages_the_agreeing_entries():
    deltas = torch.tensor(
        [
            [4.0, -1.0, 2.0, 0.1],  # trimmed to its 2 largest: [4, 0, 2, 0]
            [-3.0, 0.2, 1.0, -5.0],  # [-3, 0, 0, -5]
        ]
    )
    merged = ties_merge(deltas, density=0.5)
    # sums: [1, 0, 2, -5] -> signs [+, 0, +, -]; agreeing: [4], none, [2], [-5]
    assert torch.equal(merged, torch.tensor([4.0, 0.0, 2.0, -5.0]))
    assert torch.equal(ties_merge(deltas[:1], density=1.0), deltas[0])


def test_route_keeps_the_main_output_below_every_threshold_and_takes_the_highest_memory():
    inputs = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.1, 0.1]]])
    outputs = torch.randn(1, 3, 2)
    deltas = torch.stack([torch.diag(torch.tensor([3.0, 0.0])), torch.diag(torch.tensor([2.0, 4.0]))])
    result = route(inputs, outputs, deltas, thresholds=torch.tensor([1.0, 1.0]))
    # token 0: scores 3 and 2 -> memory 0; token 1: 0 and 4 -> memory 1; token 2: 0.3 and 0.45 -> main memory
    torch.testing.assert_close(result[0, 0], outputs[0, 0] + torch.tensor([3.0, 0.0]))
    torch.testing.assert_close(result[0, 1], outputs[0, 1] + torch.tensor([0.0, 4.0]))
    assert torch.equal(result[0, 2], outputs[0, 2])
    assert route(inputs * 0.01, outputs, deltas, torch.tensor([1.0, 1.0])) is outputs  # nothing routed
    assert route(inputs, outputs, deltas[:0], torch.zeros(0)) is outputs  # no memory


# ----------------------------------------------------------------------------------------------------------------
# The editor on tiny random models (GPT-2 Conv1D and LLaMA Linear)


def wise(directory, **options) -> WISE:
    options = {"n_iter": 10, "template_lengths": [[8, 2]], "act_margin": [0.5, 2.0, 1.0], **options}
    return WISE(ModelSource(str(directory)), layer=1, **options)


def state(editor: WISE) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in editor.model.state_dict().items()}


def projection_io(editor: WISE, text: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, output) of the edited projection on ``text``."""
    ids = torch.tensor([encode_prompt(editor.tokenizer, text)])
    with Trace(editor.model, editor.module_name, inputs=True) as trace, torch.no_grad():
        editor.model(input_ids=ids)
    return trace.inputs[editor.module_name][0], trace.outputs[editor.module_name][0]


def test_below_the_threshold_the_main_memory_answers_bit_identically(tiny_model_dir):
    editor = wise(tiny_model_dir)
    texts = [EIFFEL.filled_prompt, "Answer: A B C D E", "The capital of France is Paris."]
    before = {text: projection_io(editor, text)[1] for text in texts}
    editor.edit([EIFFEL])
    memory = editor.memory
    deltas, thresholds = memory.routed()
    assert deltas.shape[0] == 1 and torch.isfinite(thresholds).all()
    routed_somewhere = kept_somewhere = False
    for text in texts:
        inputs, outputs = projection_io(editor, text)
        scores = activation_scores(inputs, deltas[0])
        below = scores <= thresholds[0]
        assert torch.equal(outputs[below], before[text][below])  # the unedited output, bit-identically
        expected = before[text][~below] + (inputs[~below] @ deltas[0].T).to(outputs.dtype)
        torch.testing.assert_close(outputs[~below], expected)  # the side memory's W_v' a + b
        routed_somewhere |= bool((~below).any())
        kept_somewhere |= bool(below.any())
    assert routed_somewhere and kept_somewhere
    inputs, _ = projection_io(editor, EIFFEL.filled_prompt)
    assert activation_scores(inputs[-1], deltas[0]) > thresholds[0]  # the edit prompt's last token is routed


def test_a_shard_trains_its_mask_only_within_the_box(tiny_model_dir):
    editor = wise(tiny_model_dir, norm_constraint=0.05, edit_lr=10.0)
    editor.edit([EIFFEL, DARRIEUX])
    memory = editor.memory
    change = memory.side - memory.pristine
    assert torch.equal(change[~memory.mask], torch.zeros_like(change[~memory.mask]))
    assert change.abs().max() <= 0.05 + 1e-7 and change.abs().max() > 0
    assert memory.mask.float().mean() == pytest.approx(0.2, abs=0.05)
    pristine = editor.site.module.weight
    assert torch.equal(memory.pristine, (pristine.T if pristine.shape != memory.pristine.shape else pristine))


def test_memories_close_every_save_freq_and_merge_every_merge_freq(tiny_model_dir):
    editor = wise(tiny_model_dir, save_freq=1, merge_freq=2, n_iter=2)
    requests = [EIFFEL, DARRIEUX, EditRequest("{} speaks", "Danielle Darrieux", "German")]
    editor.edit(requests[:1])
    assert editor.memory.counts.tolist() == [1] and int(editor.memory.open_count) == 0
    first_mask = editor.memory.mask.clone()
    editor.edit(requests[1:2])  # the second closed memory: 2 edits, merged into one
    assert editor.memory.counts.tolist() == [2] and editor.memory.memories.shape[0] == 1
    assert not torch.equal(editor.memory.mask, first_mask)  # every shard has its own mask
    editor.edit(requests[2:])
    assert editor.memory.counts.tolist() == [2, 1]


def test_sequential_edits_undo_bit_identically(tiny_model_dir):
    editor = wise(tiny_model_dir, n_iter=2)
    before = state(editor)
    undo = editor.prepare_undo([])
    editor.apply_edits([EIFFEL])
    editor.apply_edits([DARRIEUX])
    assert int(editor.memory.open_count) == 2
    editor.undo(undo)
    after = state(editor)
    assert editor.memory is None and not editor.site.module._forward_hooks
    assert after.keys() == before.keys() and all(torch.equal(after[name], before[name]) for name in before)


@pytest.mark.parametrize(
    ("protocol", "options"),
    [("single", {}), ("batch", {"edit_batch_size": 2}), ("sequential", {"edit_batch_size": 2, "eval_at": [2]})],
)
def test_every_protocol_restores_the_model_bit_identically(tiny_model_dir, protocol, options):
    editor = wise(tiny_model_dir, n_iter=2, protocol=protocol, **options)
    before = state(editor)
    data = CounterFact("builtin:data/counterfact-flat.json", limit=5, batch_size=2)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.metrics.results["ES"]["n_cases"] == 5
    after = state(editor)
    assert editor.memory is None and not editor.site.module._forward_hooks
    assert after.keys() == before.keys() and all(torch.equal(after[name], before[name]) for name in before)


def test_settings_are_checked(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="model.layer"):
        WISE(ModelSource(str(tiny_model_dir)))
    with pytest.raises(ValueError, match="multiple of save_freq"):
        wise(tiny_model_dir, save_freq=3, merge_freq=4)
    with pytest.raises(ConfigError, match="routed side memories"):
        wise(tiny_model_dir).export(tmp_path, [])  # fit: nothing a saved model could hold
