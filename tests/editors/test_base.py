"""The editor base class: the single protocol applies each case, scores it, and restores the weights exactly."""

import pytest
import torch
from lightning import Trainer

from lightning_edit.data import CounterFact
from lightning_edit.data.schema import EditRequest
from lightning_edit.editors import EditorModule, NoEdit
from lightning_edit.models.loading import ModelSource

EDITED = "transformer.h.1.mlp.c_proj.weight"


class ScaleEditor(EditorModule):
    """A stand-in for a weight editor: scales one MLP projection per request, and records what it saw."""

    def __init__(self, lm: ModelSource, factor: float = 3.0):
        super().__init__(lm)
        self.factor = factor
        self.seen: list[list[str]] = []

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return [EDITED]

    def apply_edits(self, requests: list[EditRequest]) -> None:
        self.seen.append([r.subject for r in requests])
        self.model.get_parameter(EDITED).data.mul_(self.factor)


def run(editor: EditorModule, limit: int = 4) -> dict:
    data = CounterFact("builtin:data/counterfact-flat.json", limit=limit, batch_size=3)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    return editor.results


def test_single_protocol_edits_each_case_and_restores_bit_identically():
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"))
    before = {name: p.detach().clone() for name, p in editor.model.named_parameters()}
    results = run(editor)
    assert [len(subjects) for subjects in editor.seen] == [1, 1, 1, 1]  # one case at a time
    for name, param in editor.model.named_parameters():
        assert torch.equal(param, before[name]), name
    assert results["locality_acc"]["n_cases"] == 4
    baseline = run(NoEdit(ModelSource("builtin:models/tiny-gpt2")))
    assert baseline["locality_acc"]["macro"] == 1.0
    changed = [name for name in results if results[name]["macro"] != baseline[name]["macro"]]
    assert changed, "scaling a projection by 3 should move at least one metric of the tiny model"


def test_edits_are_restored_when_scoring_fails():
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"))
    before = editor.model.get_parameter(EDITED).detach().clone()
    with pytest.raises(RuntimeError, match="boom"):
        with editor.edits_applied([EditRequest("{} is", "Paris", "big")]):
            assert not torch.equal(editor.model.get_parameter(EDITED), before)
            raise RuntimeError("boom")
    assert torch.equal(editor.model.get_parameter(EDITED), before)


def test_no_edit_scores_all_cases_of_a_batch_together():
    editor = NoEdit(ModelSource("builtin:models/tiny-gpt2"))
    assert not editor.edits_weights and editor.edited_parameters([]) == []
    assert run(editor, limit=5)["ES"]["n_cases"] == 5
