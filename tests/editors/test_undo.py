"""The edit/undo contract for an editor that adds a module instead of changing weights: every protocol and fit
leave the model bit-identical to the original after each undo."""

import pytest
import torch
from lightning import Trainer
from safetensors.torch import load_file, save_file
from torch import nn

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.data import CounterFact
from lightning_edit.editors import EditorModule
from lightning_edit.models.loading import ModelSource

MLP = "transformer.h.1.mlp"


class ShiftAdapter(nn.Module):
    """A stub adapter: adds a learned vector to the output of the module it is hooked on."""

    def __init__(self, width: int):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(width))

    def hook(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        return output + self.shift


class AdapterUndo:
    """Removes the adapter the editor added, and checks the model is the original again."""

    names: list[str] = []

    def __init__(self, editor: "AdapterEditor"):
        self.editor = editor

    def restore(self) -> None:
        editor = self.editor
        if editor.handle is not None:
            editor.handle.remove()
            del editor.model.get_submodule(MLP).adapter
            editor.handle = None
        state = editor.model.state_dict()
        editor.undone.append(
            state.keys() == editor.original.keys()
            and all(torch.equal(state[name], editor.original[name]) for name in state)
            and not editor.model.get_submodule(MLP)._forward_hooks
        )


class AdapterEditor(EditorModule):
    """Adds (on its first edit) a ShiftAdapter after one MLP; each edited request moves the shift."""

    def __init__(self, lm: ModelSource, **options):
        super().__init__(lm, **options)
        self.original = {name: value.clone() for name, value in self.model.state_dict().items()}
        self.handle = None
        self.undone: list[bool] = []  # one entry per undo: was the model the original again?
        self.applied: list[int] = []  # requests per apply_edits call

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return []  # no existing weight changes

    def prepare_undo(self, requests: list[EditRequest]) -> AdapterUndo:
        return AdapterUndo(self)

    def apply_edits(self, requests: list[EditRequest]) -> None:
        mlp = self.model.get_submodule(MLP)
        if self.handle is None:
            mlp.add_module("adapter", ShiftAdapter(self.model.config.n_embd))
            self.handle = mlp.register_forward_hook(mlp.adapter.hook)
        generator = torch.Generator().manual_seed(len(requests))
        mlp.adapter.shift.data += 5.0 * torch.randn(mlp.adapter.shift.shape, generator=generator)
        self.applied.append(len(requests))

    def export(self, directory, cases: list[EditCase]):
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "adapter.safetensors"
        save_file({"shift": self.model.get_submodule(MLP).adapter.shift.detach().clone()}, path)
        return path


def data() -> CounterFact:
    return CounterFact("builtin:data/counterfact-flat.json", limit=5, batch_size=2)


@pytest.mark.parametrize(
    ("protocol", "options", "calls", "undos"),
    [
        ("single", {}, [1, 1, 1, 1, 1], 5),
        ("batch", {"edit_batch_size": 2}, [2, 2, 1], 3),  # calls of 2
        ("sequential", {"edit_batch_size": 2, "eval_at": [2]}, [2, 2, 1], 1),
    ],
)
def test_every_protocol_removes_the_adapter_bit_identically(protocol, options, calls, undos):
    editor = AdapterEditor(ModelSource("builtin:models/tiny-gpt2"), protocol=protocol, **options)
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(
        editor, datamodule=data(), verbose=False
    )
    assert editor.applied == calls
    assert editor.undone == [True] * undos
    assert editor.metrics.results["ES"]["n_cases"] == 5


def test_fit_exports_the_adapter_and_undoes_it(tmp_path):
    editor = AdapterEditor(ModelSource("builtin:models/tiny-gpt2"), edit_batch_size=2, output_dir=str(tmp_path / "out"))
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, max_epochs=1).fit(editor, datamodule=data())
    assert editor.applied == [2, 2, 1] and editor.undone == [True]
    shift = load_file(tmp_path / "out" / "adapter.safetensors")["shift"]
    assert shift.abs().sum() > 0


def test_an_edit_returns_its_undo():
    editor = AdapterEditor(ModelSource("builtin:models/tiny-gpt2"))
    ids = editor.tokenizer("The Eiffel Tower is in", return_tensors="pt").input_ids
    before = editor.model(ids).logits
    undo = editor.edit([EditRequest("{} is in", "The Eiffel Tower", "Rome")])
    assert not torch.equal(editor.model(ids).logits, before)
    editor.undo(undo)
    assert torch.equal(editor.model(ids).logits, before) and editor.undone == [True]
