"""The editor base class: protocols apply cases, score them, and restore the weights exactly; fit saves edits."""

import inspect
import json
import logging
from abc import ABC
from dataclasses import replace

import pytest
import torch
from lightning import LightningModule, Trainer

from lightning_edit.cases import EditRequest
from lightning_edit.data import CounterFact
from lightning_edit.editors import EditorModule, NoEdit
from lightning_edit.editors.placement import ModelPlacement
from lightning_edit.editors.protocol_runner import ProtocolRunner
from lightning_edit.editors.protocols import BatchProtocol, EditScoreUndo, SingleProtocol
from lightning_edit.editors.run_metrics import RunMetrics
from lightning_edit.editors.sequential import SequentialProtocol, checkpoint_sample
from lightning_edit.errors import ConfigError
from lightning_edit.models.loading import ModelSource, load_model
from lightning_edit.report import RunReport

EDITED = "transformer.h.1.mlp.c_proj.weight"


class ScaleEditor(EditorModule):
    """A stand-in for a weight editor: scales one MLP projection per request, and records what it saw."""

    def __init__(self, lm: ModelSource, factor: float = 3.0, **options):
        super().__init__(lm, **options)
        self.factor = factor
        self.seen: list[list[str]] = []
        self.norms: list[float] = []  # norm of the edited weight after each apply_edits

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return [EDITED]

    def apply_edits(self, requests: list[EditRequest]) -> None:
        self.seen.append([r.subject for r in requests])
        self.model.get_parameter(EDITED).data.mul_(self.factor)
        self.norms.append(self.model.get_parameter(EDITED).norm().item())


def run(editor: EditorModule, limit: int = 4) -> dict:
    data = CounterFact("builtin:data/counterfact-flat.json", limit=limit, batch_size=3)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    return editor.metrics.results


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


def test_batch_protocol_applies_edit_batch_size_cases_together():
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="batch", edit_batch_size=3)
    before = editor.model.get_parameter(EDITED).detach().clone()
    results = run(editor, limit=4)  # calls of 3 and 1 cases
    assert [len(subjects) for subjects in editor.seen] == [3, 1]
    assert editor.norms[0] == pytest.approx(editor.norms[1])  # restored between calls
    assert torch.equal(editor.model.get_parameter(EDITED), before) and results["ES"]["n_cases"] == 4


def test_under_batch_the_validation_step_is_one_editor_call_of_edit_batch_size():
    """One setting of cases per call: the benchmark's steps follow the editor's; a data batch size that differs is
    refused in one line before any edit."""
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="batch", edit_batch_size=2)
    data = CounterFact("builtin:data/counterfact-flat.json", limit=5)  # data.batch_size unset
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    assert [len(subjects) for subjects in editor.seen] == [2, 2, 1] and data.batch_size == 2
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="batch", edit_batch_size=2)
    data = CounterFact("builtin:data/counterfact-flat.json", limit=5, batch_size=4)
    message = r"^data.batch_size=4: under protocol 'batch' the cases edited together are model.edit_batch_size \(2\)"
    with pytest.raises(ConfigError, match=message):
        trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.seen == []


def test_sequential_protocol_accumulates_edits_then_evaluates_and_restores():
    editor = ScaleEditor(
        ModelSource("builtin:models/tiny-gpt2"), protocol="sequential", edit_batch_size=2, eval_at=[2, 4]
    )
    before = editor.model.get_parameter(EDITED).detach().clone()
    results = run(editor, limit=5)
    assert [len(subjects) for subjects in editor.seen] == [2, 2, 1]  # all cases, cumulatively
    assert editor.norms == pytest.approx([before.norm().item() * 3**k for k in (1, 2, 3)], rel=1e-5)
    assert results["ES"]["n_cases"] == 5 and results["ES@2"]["n_cases"] == 2 and results["ES@4"]["n_cases"] == 4
    assert torch.equal(editor.model.get_parameter(EDITED), before)
    # locality compares with the model before the run: after three x3 scalings the argmax may move, but the
    # reference is the same for the whole run, so the metric is present for every case
    assert results["locality_acc"]["n_cases"] == 5


class TwoRequestCases(CounterFact):
    """Toy cases of two requests each (the case's and a copy with another subject), every other case split in two
    editor calls."""

    def load_cases(self):
        return [
            replace(
                case,
                requests=(case.requests[0], replace(case.requests[0], subject="X")),
                calls=(1, 1) if i % 2 == 0 else (),
            )
            for i, case in enumerate(super().load_cases())
        ]


@pytest.mark.parametrize("protocol", ["single", "batch", "sequential"])
def test_the_requests_of_a_case_go_to_the_editor_in_its_calls(protocol):
    options = {"edit_batch_size": 3} if protocol != "single" else {}
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol=protocol, **options)
    data = TwoRequestCases("builtin:data/counterfact-flat.json", limit=4, batch_size=3)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=data, verbose=False)
    s = [case.requests[0].subject for case in data.cases]
    # cases 0 and 2 in two calls, one request each; case 1 (and 3) in one call
    assert editor.seen == [[s[0]], ["X"], [s[1], "X"], [s[2]], ["X"], [s[3], "X"]]
    if protocol == "batch":  # the cases of a batch are edited together, in their calls
        assert editor.norms[4] == pytest.approx(editor.norms[0] * 3**4, rel=1e-5)


def test_a_checkpoint_sample_is_the_first_positions_of_one_seeded_order():
    assert checkpoint_sample(3, 5, 100) == [0, 1, 2]  # no more cases than the sample: all of them
    order = torch.randperm(100, generator=torch.Generator().manual_seed(0)).tolist()
    for n in (10, 60, 100):
        sample = checkpoint_sample(n, 5, 100)
        assert sample == sorted([p for p in order if p < n][:5]) and len(sample) == 5 and max(sample) < n
    assert checkpoint_sample(60, 5, 100) == checkpoint_sample(60, 5, 100)
    assert checkpoint_sample(60, 5, 100, seed=1) != checkpoint_sample(60, 5, 100)


def test_eval_sample_scores_a_sample_at_each_checkpoint_and_every_case_at_the_end(tmp_path):
    """``ES@4`` over 2 of the first 4 cases, ``ES`` over all 5; each checkpoint's edits, seconds and peak memory are
    recorded and reach results.json."""
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="sequential", eval_at=[2, 4], eval_sample=2)
    data = CounterFact("builtin:data/counterfact-flat.json", limit=5, batch_size=3)
    trainer = Trainer(
        accelerator="cpu",
        enable_progress_bar=False,
        inference_mode=False,
        default_root_dir=tmp_path,
        callbacks=[RunReport({})],
    )
    trainer.validate(editor, datamodule=data, verbose=False)
    results = editor.metrics.results
    assert (results["ES@2"]["n_cases"], results["ES@4"]["n_cases"], results["ES"]["n_cases"]) == (2, 2, 5)
    assert [record["edits"] for record in editor.runner.stream] == [2, 4]
    assert 0 < editor.runner.stream[0]["edit_seconds"] <= editor.runner.stream[1]["edit_seconds"]
    assert editor.runner.stream[1]["host_peak_bytes"] >= editor.runner.stream[0]["host_peak_bytes"] > 0
    phases = {"loading", "statistics", "editing", "scoring"}
    assert {record["host_peak_phase"] for record in editor.runner.stream} <= phases
    (path,) = tmp_path.rglob("results.json")
    written = json.loads(path.read_text())
    assert written["stream"] == editor.runner.stream
    (memory,) = written["memory"]  # one process
    assert memory["process"] == 0 and memory["host_peak_bytes"] >= editor.runner.stream[1]["host_peak_bytes"]
    assert memory["host_peak_phase"] in ("loading", "statistics", "editing", "scoring")


def test_eval_sample_needs_eval_at():
    with pytest.raises(ValueError, match="eval_sample=3: cases scored at each eval_at checkpoint"):
        NoEdit(ModelSource("builtin:models/tiny-gpt2"), protocol="sequential", eval_sample=3)


def test_eval_at_needs_the_sequential_protocol():
    with pytest.raises(ValueError, match="needs protocol='sequential'"):
        NoEdit(ModelSource("builtin:models/tiny-gpt2"), eval_at=[10])


def test_fit_applies_every_case_and_saves_the_edited_model(tmp_path):
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), edit_batch_size=2, output_dir=str(tmp_path / "out"))
    before = editor.model.get_parameter(EDITED).detach().clone()
    data = CounterFact("builtin:data/counterfact-flat.json", limit=3)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, max_epochs=5)
    trainer.fit(editor, datamodule=data)
    assert [len(subjects) for subjects in editor.seen] == [2, 1] and trainer.global_step == 0
    saved = load_model(ModelSource(str(tmp_path / "out")))
    # two editor calls, x3 each, held by the saved model
    assert torch.equal(saved.get_parameter(EDITED), before * 3 * 3)
    record = json.loads((tmp_path / "out" / "edits.json").read_text())
    assert record["editor"] == "ScaleEditor" and [e["case_id"] for e in record["edits"]] == [
        c.case_id for c in data.cases
    ]
    assert record["edits"][0]["requests"][0]["subject"] == data.cases[0].requests[0].subject


def test_a_case_that_cannot_be_edited_fails_before_any_weight_changes():
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="sequential")
    before = editor.model.get_parameter(EDITED).detach().clone()
    data = CounterFact("builtin:data/counterfact-flat.json", limit=3)
    data.setup()
    good, bad = data.cases[0], data.cases[2]
    broken = type(bad)(bad.case_id, (EditRequest("{} is", bad.requests[0].subject, "  "),), bad.groups, "file.json#2")
    data.cases = [good, data.cases[1], broken]
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    with pytest.raises(ValueError, match="file.json: record 2: field .target_new.: empty target"):
        trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.seen == [] and torch.equal(editor.model.get_parameter(EDITED), before)


def test_edit_batch_size_under_single_is_ignored_with_a_note(caplog):
    """A sequential method config (AlphaEdit: edit_batch_size 100) composes with ``single``."""
    expected = run(ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="single"), limit=4)
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="single", edit_batch_size=4)
    with caplog.at_level(logging.INFO):
        results = run(editor, limit=4)
    assert results == expected
    assert [len(subjects) for subjects in editor.seen] == [1, 1, 1, 1]
    assert "edit_batch_size=4 is read by protocols 'batch' and 'sequential' and by fit; ignored under 'single'" in (
        caplog.text
    )


def test_a_batch_limit_under_sequential_is_an_error():
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="sequential")
    data = CounterFact("builtin:data/counterfact-flat.json", limit=4, batch_size=2)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, limit_val_batches=1)
    with pytest.raises(ValueError, match="limit_val_batches=1 would score only some.*--data.limit"):
        trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.seen == []


class UndeclaringCounterFact(CounterFact):
    def declared_metrics(self) -> dict[str, str]:
        return {"ES": "prob"}


def test_a_metric_the_benchmark_does_not_declare_is_an_error_before_any_edit():
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"))
    data = UndeclaringCounterFact("builtin:data/counterfact-flat.json", limit=2)
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    with pytest.raises(ValueError, match=r"group 'rewrite' reports \['rewrite_acc'\], which the benchmark does not"):
        trainer.validate(editor, datamodule=data, verbose=False)
    assert editor.seen == []


def test_metrics_are_created_from_the_declaration_with_their_variants():
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol="sequential", eval_at=[2])
    editor.scoring.pre_edit = True
    results = run(editor)
    declared = list(CounterFact("x").declared_metrics())
    assert list(results) == declared + [f"{m}_pre" for m in declared] + [f"{m}@2" for m in declared]
    assert results["ES@2"]["n_cases"] == 2 and results["ES_pre"]["n_cases"] == 4


@pytest.mark.parametrize(
    ("protocol", "runner"),
    [("single", SingleProtocol), ("batch", BatchProtocol), ("sequential", SequentialProtocol)],
)
def test_the_editor_owns_its_parts(protocol, runner):
    """No mixins: the editor is a LightningModule whose runner, metrics and placement are objects it owns."""
    assert EditorModule.__bases__ == (LightningModule, ABC)
    editor = ScaleEditor(ModelSource("builtin:models/tiny-gpt2"), protocol=protocol)
    assert type(editor.runner) is runner and editor.runner.editor is editor
    assert isinstance(editor.metrics, RunMetrics) and isinstance(editor.placement, ModelPlacement)
    assert "metrics" in dict(editor.named_children())  # moved and synced with the module
    for part in (ProtocolRunner, ModelPlacement):
        assert part.__mro__[1:] == (object,)  # plain objects, not LightningModule parts


def test_the_route_of_a_batch_names_the_object_of_each_call():
    """Reading the source from ``validation_step``: each call to the weight update and to the metrics names the
    object it goes to (``self.runner``, ``editor.metrics``, ``editor.apply_edits``...), resolved without running."""
    step = inspect.getsource(EditorModule.validation_step)
    assert "self.runner.score(batch)" in step
    score = inspect.getsource(EditScoreUndo.score) + inspect.getsource(EditScoreUndo.edit_score_undo)
    assert "editor.metrics.update(" in score and "editor.edits_applied(" in score and "scorer.score(" in score
    assert "editor.apply_edits(call)" in inspect.getsource(ProtocolRunner.apply_in_order)
    assert "self.metrics.compute(" in inspect.getsource(EditorModule.on_validation_epoch_end)
