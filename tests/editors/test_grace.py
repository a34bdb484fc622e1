"""GRACE: the codebook rules and output rule (paper eq. 2, Alg. 1), deferral outside every radius, bit-identical
undo under every protocol, and the fit -> validate round trip of the codebook through the CLI."""

import sys

import pytest
import torch
from lightning import Trainer
from safetensors import safe_open

from lightning_edit.cases import EditRequest
from lightning_edit.cli import build_cli
from lightning_edit.data import CounterFact
from lightning_edit.editors import GRACE
from lightning_edit.editors.grace import CODEBOOK_FILE, SPLIT_MARGIN, codebook_update, grace_output, nearest_entries
from lightning_edit.models.hooks import Trace
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.tokenization import encode_prompt

EIFFEL = EditRequest("{} is located in the city of", "The Eiffel Tower", "Rome")


# ----------------------------------------------------------------------------------------------------------------
# The tensor math


def test_nearest_entries_is_the_euclidean_argmin():
    generator = torch.Generator().manual_seed(0)
    queries, keys = torch.randn(2, 3, 5, generator=generator), torch.randn(4, 5, generator=generator)
    index, distance = nearest_entries(queries, keys)
    brute = (queries.unsqueeze(-2) - keys).norm(dim=-1)  # (2, 3, 4)
    assert torch.equal(index, brute.argmin(-1))
    torch.testing.assert_close(distance, brute.min(-1).values)


def test_nearest_entries_screens_to_the_exact_cdist_argmin_with_ties_and_near_ties():
    generator = torch.Generator().manual_seed(1)
    for d, scale in [(5, 1e-2), (64, 1.0), (512, 1e3)]:
        keys = torch.randn(300, d, generator=generator) * scale
        queries = torch.randn(40, d, generator=generator) * scale
        keys[1] = keys[0]  # a tie: the lower index wins
        queries[0], queries[1] = keys[1], keys[3] + 1e-6 * scale * torch.randn(d, generator=generator)
        queries[2] = (keys[0] + keys[2]) / 2  # halfway between two keys
        distance, index = torch.cdist(queries, keys, compute_mode="donot_use_mm_for_euclid_dist").min(-1)
        assert all(map(torch.equal, nearest_entries(queries, keys), (index, distance)))  # bit for bit
        assert index[0] == 0 and distance[0] == 0


def test_grace_output_defers_outside_every_radius_and_replaces_within():
    keys = torch.tensor([[0.0, 0.0], [10.0, 0.0]])
    values = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    radii = torch.tensor([1.0, 0.5])
    queries = torch.tensor([[[0.5, 0.0], [10.0, 0.6], [9.9, 0.0], [5.0, 5.0]]])  # in, out, in, far
    outputs = torch.randn(1, 4, 3)
    result = grace_output(queries, outputs, keys, values, radii)
    assert torch.equal(result[0, 0], values[0]) and torch.equal(result[0, 2], values[1])
    assert torch.equal(result[0, 1], outputs[0, 1]) and torch.equal(result[0, 3], outputs[0, 3])
    far = queries + 100.0
    assert grace_output(far, outputs, keys, values, radii) is outputs  # bit-identical: the very tensor
    assert grace_output(queries, outputs, keys[:0], values[:0], radii[:0]) is outputs  # empty codebook


@pytest.mark.parametrize(
    ("distance", "radius", "same", "expected"),
    [
        (None, None, False, ("add", None, 1.0)),  # empty codebook
        (2.5, 1.0, True, ("add", 1.0, 1.0)),  # farther than ε_nearest + ε_init
        (1.5, 1.0, True, ("expand", 1.5, 1.5)),  # same label: the radius grows to d
        (0.5, 1.0, True, ("expand", 1.0, 1.0)),  # ... never shrinks
        (1.5, 1.0, False, ("split", 0.75 - SPLIT_MARGIN, 0.75)),  # conflict: both radii d/2 (the old one just less)
        (0.0, 1.0, False, ("replace", 1.0, 1.0)),  # the same query, another label
    ],
)
def test_codebook_update_follows_the_paper_rules(distance, radius, same, expected):
    action, nearest, new = codebook_update(distance, radius, same, eps_init=1.0)
    assert action == expected[0]
    assert nearest == pytest.approx(expected[1]) if expected[1] is not None else nearest is None
    assert new == pytest.approx(expected[2])
    if action == "split":
        assert nearest + new < distance  # the two balls no longer touch


# ----------------------------------------------------------------------------------------------------------------
# The editor on tiny random models (GPT-2 Conv1D and LLaMA Linear)


def grace(directory, **options) -> GRACE:
    options = {"n_iter": 30, "eps": 1.0, **options}
    return GRACE(ModelSource(str(directory)), layer=1, **options)


def module_io(editor: GRACE, text: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input, output of the wrapped module, logits) of ``text``."""
    ids = torch.tensor([encode_prompt(editor.tokenizer, text)])
    with Trace(editor.model, editor.module_name, inputs=True) as trace, torch.no_grad():
        logits = editor.model(input_ids=ids).logits
    return trace.inputs[editor.module_name][0], trace.outputs[editor.module_name][0], logits[0]


def state(editor: GRACE) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in editor.model.state_dict().items()}


def test_edit_writes_the_target_and_defers_far_from_every_key(tiny_model_dir):
    editor = grace(tiny_model_dir, value_init="warm", eps=0.01)  # the tiny LLaMA's keys are 0.2 apart
    far_text = "Answer: A B C D E"
    _, _, far_before = module_io(editor, far_text)
    editor.edit([EIFFEL])
    adapter = editor.adapter
    assert len(adapter) == 1 and adapter.labels == ["Rome"]
    queries, _, far_after = module_io(editor, far_text)
    assert (nearest_entries(queries, adapter.keys)[1] > adapter.radii[0]).all()
    assert torch.equal(far_after, far_before)  # outside every radius: the unedited output, bit-identically
    prompt = EIFFEL.filled_prompt
    queries, outputs, logits = module_io(editor, prompt)
    assert nearest_entries(queries[-1], adapter.keys)[1] == 0  # the key is the prompt's last-token input
    assert torch.equal(outputs[-1], adapter.values[0])  # within the radius: the entry's value
    target = editor.tokenizer(f"{prompt} Rome")["input_ids"][len(encode_prompt(editor.tokenizer, prompt))]
    assert logits[-1].argmax() == target


@pytest.mark.parametrize("update", ["coverage", "moving_average"])
def test_codebook_adds_expands_and_replaces_by_the_rules(tiny_model_dir, update):
    editor = grace(tiny_model_dir, n_iter=2, update=update, eps=1e-3)
    editor.edit([EIFFEL])
    key = editor.adapter.keys[0].clone()
    editor.edit([EIFFEL])  # same query, same label: no new entry
    assert len(editor.adapter) == 1 and torch.equal(editor.adapter.keys[0], key)
    editor.edit([EditRequest(EIFFEL.prompt, EIFFEL.subject, "Paris")])  # same query, another label: replaced
    assert len(editor.adapter) == 1 and editor.adapter.labels == ["Paris"]
    # a new query farther than ε_nearest + ε_init: a new entry
    editor.edit([EditRequest("{} speaks", "Danielle Darrieux", "English")])
    assert len(editor.adapter) == 2 and editor.adapter.labels == ["Paris", "English"]
    editor.eps = 1e3  # every key within reach now; the nearest has another label: split
    editor.edit([EditRequest("{} is located in", "The Eiffel Tower", "Berlin")])
    radii = editor.adapter.radii
    assert len(editor.adapter) == 3
    third = editor.adapter.keys[2]
    nearest = int(nearest_entries(third, editor.adapter.keys[:2])[0])
    assert radii[nearest] + radii[2] < (editor.adapter.keys[nearest] - third).norm()


def test_sequential_edits_accumulate_and_undo_removes_the_adapter(tiny_model_dir):
    editor = grace(tiny_model_dir, n_iter=2)
    before = state(editor)
    undo = editor.prepare_undo([])
    editor.apply_edits([EIFFEL])
    editor.apply_edits([EditRequest("{} speaks", "Danielle Darrieux", "English")])
    assert len(editor.adapter) == 2
    assert any(name.endswith("grace.keys") for name in editor.model.state_dict())
    editor.undo(undo)
    assert editor.adapter is None and not editor.site.module._forward_hooks
    after = state(editor)
    assert after.keys() == before.keys() and all(torch.equal(after[name], before[name]) for name in before)


def test_undo_restores_a_codebook_that_was_there(tiny_model_dir):
    editor = grace(tiny_model_dir, n_iter=2)
    editor.edit([EIFFEL])
    before = state(editor)
    undo = editor.edit([EditRequest("{} speaks", "Danielle Darrieux", "English")])
    editor.undo(undo)
    after = state(editor)
    assert after.keys() == before.keys() and all(torch.equal(after[name], before[name]) for name in before)
    assert editor.adapter.labels == ["Rome"] and len(editor.site.module._forward_hooks) == 1


@pytest.mark.parametrize(
    ("protocol", "options"),
    [("single", {}), ("batch", {"edit_batch_size": 2}), ("sequential", {"edit_batch_size": 2, "eval_at": [2]})],
)
def test_every_protocol_restores_the_model_bit_identically(tiny_model_dir, protocol, options):
    editor = grace(tiny_model_dir, n_iter=2, protocol=protocol, **options)
    before = state(editor)
    data = CounterFact("builtin:data/counterfact-flat.json", limit=5, batch_size=2)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.metrics.results["ES"]["n_cases"] == 5
    after = state(editor)
    assert editor.adapter is None and not editor.site.module._forward_hooks
    assert after.keys() == before.keys() and all(torch.equal(after[name], before[name]) for name in before)


def test_a_preset_without_grace_layer_is_refused(tiny_model_dir):
    with pytest.raises(ValueError, match="model.layer"):
        GRACE(ModelSource(str(tiny_model_dir)))


# ----------------------------------------------------------------------------------------------------------------
# fit -> validate through the CLI, on the toy GPT-2


def test_fit_exports_the_codebook_and_validate_reloads_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    common = [
        "--config=configs/methods/grace.yaml",
        "--model.lm.path=builtin:models/toy-gpt2",
        "--model.layer=2",
        "--model.n_iter=40",
        "--config=configs/benchmarks/counterfact.yaml",
        "--data.path=builtin:data/toy/counterfact.json",
        "--data.limit=4",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
    ]
    out = tmp_path / "codebook"
    fit = build_cli(["fit", *common, f"--model.output_dir={out}", "--trainer.max_epochs=1",
                     f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    assert fit.model.adapter is None  # fit undid its edits after the export
    with safe_open(str(out / CODEBOOK_FILE), framework="pt") as file:
        exported = {name: file.get_tensor(name) for name in file.keys()}
    assert exported["keys"].shape[0] == 4
    # ES_pre is scored before the run's own edits, so those need not train (one step each)
    validate = ["validate", *common, "--model.scoring.pre_edit=true", "--model.protocol=single", "--model.n_iter=1"]
    unedited = build_cli([*validate, f"--trainer.default_root_dir={tmp_path / 'unedited'}"]).model.metrics.results
    reloaded = build_cli([*validate, f"--model.codebook_path={out}", f"--trainer.default_root_dir={out}-run"])
    assert unedited["ES_pre"]["macro"] == 0.0  # the toy model knows the true facts
    assert reloaded.model.metrics.results["ES_pre"]["macro"] == 1.0  # "before any edit of the run": with the codebook
    adapter = reloaded.model.adapter  # each case was edited and undone on top of the loaded codebook
    assert all(torch.equal(adapter.get_buffer(name).cpu(), tensor) for name, tensor in exported.items())


def test_an_edit_made_again_after_its_undo_gives_the_same_codebook(tiny_model_dir):
    """The undo restores the generator of cold values too: the same edit twice draws the same values."""
    editor = grace(tiny_model_dir, n_iter=2)
    codebooks = []
    for _ in range(2):
        undo = editor.edit([EIFFEL])
        adapter = editor.model.get_submodule(editor.module_name).get_submodule(editor.site.attribute)
        codebooks.append({name: value.clone() for name, value in adapter.state_dict().items()})
        editor.undo(undo)
    assert codebooks[0].keys() == codebooks[1].keys()
    assert all(torch.equal(codebooks[0][name], codebooks[1][name]) for name in codebooks[0])
