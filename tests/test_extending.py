"""Adding a benchmark or an editor touches only its own files (README, "Adding a benchmark, a score kind or an editor").

Each test writes a throwaway one into a folder of its own, outside the package (a benchmark folder: its module and
its config; an editor: its module, its method config, and a copy of a model preset that gives it a site), and runs
the documented ``lightning-edit validate --config ...`` on it. Nothing in ``lightning_edit`` names it: the configs
name its class, and the preset's section is keyed by that class.
"""

import json
import sys
from pathlib import Path

import pytest
import yaml

from lightning_edit.cli import main

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "configs/models/tiny-gpt2.yaml"

#: A benchmark of one prompt group: "Q: <subject>'s capital? A:" edited to a new capital, scored by token accuracy.
BENCHMARK = '''
"""Capitals: a throwaway benchmark (one file per benchmark: its reader and its metrics)."""

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.data.base import EditDataModule
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.records import RecordReader, read_records


class Capitals(EditDataModule):
    """Records ``{"country": ..., "capital": ...}``: the capital to write, asked once."""

    def load_cases(self):
        cases = []
        for index, record in enumerate(read_records(self.path)):
            reader = RecordReader(self.path, index, record)
            country, capital = reader.string("country"), reader.string("capital")
            groups = {"rewrite": self.declared_groups()["rewrite"].shared_answer(
                [f"The capital of {country} is"], capital, record_field="capital")}
            request = EditRequest("The capital of {} is", country, capital)
            cases.append(EditCase(index, (request,), groups, f"{self.path}#{index}"))
        return cases

    def declared_groups(self):
        return {"rewrite": DeclaredGroup({"token_acc": "capital_acc"})}
'''

#: An editor of one site, ``layer``: it scales that layer's MLP output projection by ``factor`` (undone by the
#: default snapshot).
EDITOR = '''
"""Scale: a throwaway editor (one file per editor: its settings, its site, its update)."""

from lightning_edit.editors.base import EditorModule
from lightning_edit.models.registry import resolve_architecture


class Scale(EditorModule):
    """Multiplies the MLP output projection of ``layer`` by ``factor``.

    Args:
        layer: the layer it edits (a model preset gives it, keyed ``Scale``).
        factor: the scale.
        **kwargs: the EditorModule arguments.
    """

    def __init__(self, *args, layer: int = 0, factor: float = 2.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.save_hyperparameters()
        self.layer = layer
        self.factor = factor

    def edited_parameters(self, requests):
        arch = resolve_architecture(self.model)
        return [arch.layer_name(arch.spec.mlp_out, self.layer) + ".weight"]

    def apply_edits(self, requests):
        (name,) = self.edited_parameters(requests)
        self.model.get_parameter(name).data.mul_(self.factor)
'''


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """A folder on ``sys.path`` for the throwaway modules; the run writes below it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("capitals", "scale"):
        sys.modules.pop(name, None)


def validate(args: list[str], directory: Path) -> dict:
    main(["validate", *args, "--trainer.logger=false", "--trainer.enable_progress_bar=false",
          f"--trainer.default_root_dir={directory}"])  # fmt: skip
    return json.loads((directory / "results.json").read_text())


def test_a_benchmark_is_its_folder_and_its_config(outside):
    (outside / "capitals").mkdir()
    (outside / "capitals/__init__.py").write_text(BENCHMARK)
    records = [{"country": "Freedonia", "capital": " Paris"}, {"country": "Sylvania", "capital": " Rome"}]
    (outside / "capitals/capitals.json").write_text(json.dumps(records))
    config = {
        "data": {"class_path": "capitals.Capitals", "init_args": {"path": str(outside / "capitals/capitals.json")}}
    }
    (outside / "capitals/capitals.yaml").write_text(yaml.safe_dump(config))
    results = validate(
        ["--config", str(ROOT / "configs/methods/no_edit.yaml"), "--config", str(PRESET),
         "--config", str(outside / "capitals/capitals.yaml")],
        outside / "run",
    )  # fmt: skip
    assert results["counts"]["cases"] == 2 and results["metrics"]["capital_acc"]["n_cases"] == 2


def test_an_editor_is_its_file_its_method_config_and_a_preset_section(outside):
    (outside / "scale.py").write_text(EDITOR)
    method = {"model": {"class_path": "scale.Scale", "init_args": {"protocol": "single", "factor": 3.0}}}
    (outside / "scale.yaml").write_text(yaml.safe_dump(method))
    preset = yaml.safe_load(PRESET.read_text())
    preset["model"]["editors"]["Scale"] = {"layer": 1}  # the site a model preset gives it, keyed by its class
    (outside / "tiny-gpt2.yaml").write_text(yaml.safe_dump(preset))
    results = validate(
        ["--config", str(outside / "scale.yaml"), "--config", str(outside / "tiny-gpt2.yaml"),
         "--config", str(ROOT / "configs/benchmarks/counterfact.yaml"), "--data.limit=2"],
        outside / "run",
    )  # fmt: skip
    assert results["counts"]["cases"] == 2 and results["metrics"]["ES"]["n_cases"] == 2
    assert results["config"]["model"]["init_args"]["layer"] == 1  # from the preset's section
