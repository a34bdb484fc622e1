"""Adding a benchmark or an editor touches only its own files, and inside the package the touch-points of
docs/contributing.md#checklists.

The first two tests write a throwaway one into a folder of its own, outside the package (a benchmark folder: its
module and its config; an editor: its module, its method config, and a copy of a model preset that gives it a site),
and run the documented ``lightning-edit validate --config ...`` on it. Nothing in ``lightning_edit`` names it: the
configs name its class, and the preset's section is keyed by that class. The last follows the checklists step by step
in a copy of the package, configs and tests, and runs the command line and the tests that check each step.
"""

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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
            country, capital = reader.string("country"), reader.answer("capital")
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
        self.arch = resolve_architecture(self.model)
        self.weight_name = self.arch.layer_name(self.arch.spec.mlp_out, layer) + ".weight"  # out of range: an error

    def edited_parameters(self, requests):
        return [self.weight_name]

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


# Inside the package: docs/contributing.md#checklists, followed in a copy ------------------------------------------

#: What the copy holds: the package, its configs, and the tests that check each touch-point (pyproject.toml: their
#: pytest settings). The docs steps (6) are checked by the docs build, not here.
COPIED = ("lightning_edit", "configs", "tests", "pyproject.toml")

#: The sample the benchmark's config reads by default (step 2), in its own format.
CAPITALS_SAMPLE = [
    {"country": "Freedonia", "capital": " Paris"},
    {"country": "Sylvania", "capital": " Rome"},
    {"country": "Grand Fenwick", "capital": " Vienna"},
]
CAPITALS_CONFIG = """\
# Capitals (tests/test_extending.py): a throwaway benchmark, one edited capital per record.
data:
  class_path: lightning_edit.data.Capitals
  init_args:
    path: builtin:data/samples/capitals.json   # three records written for the test
"""
CAPITALS_TEST = """
from lightning_edit.data import Capitals


def test_a_record_is_a_case_that_edits_its_capital():
    datamodule = Capitals("builtin:data/samples/capitals.json")
    datamodule.setup("validate")
    assert [case.requests[0].target_new for case in datamodule.cases] == [" Paris", " Rome", " Vienna"]
"""
SCALE_CONFIG = """\
# Scale (tests/test_extending.py): a throwaway editor, one MLP output projection times factor.
model:
  class_path: lightning_edit.editors.Scale
  init_args:
    protocol: single
    factor: 3.0                   # any scale: the test checks where it is wired, not what it edits
"""
SCALE_TEST = """
import torch

from lightning_edit.editors import Scale
from lightning_edit.models.loading import ModelSource


def test_an_edit_scales_one_weight_and_its_undo_restores_it():
    editor = Scale(ModelSource("builtin:models/tiny-gpt2"), layer=1, factor=3.0)
    weight = editor.model.get_parameter(editor.weight_name)
    before = weight.detach().clone()
    undo = editor.edit([])
    assert torch.equal(weight, 3.0 * before)
    editor.undo(undo)
    assert torch.equal(weight, before)
"""


def add(path: Path, anchor: str, text: str) -> None:
    """Write ``text`` into ``path`` right after the first ``anchor``; a missing anchor means the checklist is out of
    date with the file it names."""
    content = path.read_text()
    if anchor not in content:
        pytest.fail(f"{path}: no {anchor!r} to add {text.strip()!r} after: docs/contributing.md#checklists is stale")
    path.write_text(content.replace(anchor, anchor + text, 1))


def run_in(copy: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python <args>`` in ``copy``, which comes first on the import path."""
    path = [str(copy), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OMP_NUM_THREADS": "1"}
    env["LIGHTNING_EDIT_CACHE"] = str(copy / "cache")  # not the user's cache
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_checklists_add_a_benchmark_and_an_editor_inside_the_package(tmp_path):
    copy = tmp_path / "repo"
    for name in COPIED:
        source, target = ROOT / name, copy / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(source, target)
    package, tests = copy / "lightning_edit", copy / "tests"
    hardening, matrix, configs = tests / "test_hardening.py", tests / "test_matrix.py", tests / "test_configs.py"

    # A benchmark. 1: its module.
    (package / "data/capitals.py").write_text(BENCHMARK)
    # 2: its config, whose default file is a sample in its format.
    (copy / "configs/benchmarks/capitals.yaml").write_text(CAPITALS_CONFIG)
    (package / "assets/data/samples/capitals.json").write_text(json.dumps(CAPITALS_SAMPLE))
    # 3: one line in EXPORTS, for the short name.
    add(package / "data/__init__.py", "EXPORTS = {\n", '    "Capitals": "capitals",\n')
    # 4: no published files. 5: its tests, and its entry in LOADERS (its sample, where its fields are).
    (tests / "data/test_capitals.py").write_text(CAPITALS_TEST)
    sample = '"builtin:data/samples/capitals.json"'
    add(
        hardening,
        "LOADERS = {\n",
        f'    "Capitals": Loader(lightning_edit.data.Capitals, {sample}, None, "country", "capital"),\n',
    )

    # An editor. 1: its module.
    (package / "editors/scale.py").write_text(EDITOR)
    # 2: its method config.
    (copy / "configs/methods/scale.yaml").write_text(SCALE_CONFIG)
    # 3: its import in lightning_edit/editors/__init__.py (and its name in __all__), for the short name.
    add(package / "editors/__init__.py", "from lightning_edit.editors.base import EditorModule\n",
        "from lightning_edit.editors.scale import Scale\n")  # fmt: skip
    add(package / "editors/__init__.py", "__all__ = [\n", '    "Scale",\n')
    # 4: a section in the presets where it needs a site: its default layer 0 is in every model; the tiny GPT-2's
    # preset moves it to layer 1. Its class joins PRESET_EDITORS, and its method OTHER_METHODS (every preset x it).
    add(copy / "configs/models/tiny-gpt2.yaml", "\n  editors:", "\n    Scale: {layer: 1}")
    add(configs, "PRESET_EDITORS = {", '"Scale", ')
    add(configs, "from lightning_edit.editors import ", "Scale, ")
    add(configs, "OTHER_METHODS = {", '"scale": Scale, ')
    # 5: its tests, and its entries in EDITORS (how to put its layer out of range) and METHOD_FLAGS (its cheapest).
    (tests / "editors/test_scale.py").write_text(SCALE_TEST)
    add(hardening, "EDITORS: dict[str, list[str] | None] = {\n", '    "Scale": ["--model.layer=9"],\n')
    add(matrix, "METHOD_FLAGS = {\n", '    "scale": [],\n')

    # The short names on the command line, and the tests each step names (the registrations, the new tests, the
    # matrix cells, every preset x the method): three processes side by side.
    selected = (
        "capitals or scale or test_every_loader_and_editor_is_registered or test_every_method_config_has_its_flags"
        " or test_model_preset_sets_only_shared_arguments"
    )
    files = ["tests/data/test_capitals.py", "tests/editors/test_scale.py", "tests/test_hardening.py",
             "tests/test_matrix.py", "tests/test_configs.py"]  # fmt: skip
    with ThreadPoolExecutor() as pool:
        imported = pool.submit(run_in, copy, "-c", "import lightning_edit; print(lightning_edit.__file__)", timeout=120)
        run = pool.submit(
            run_in, copy, "-m", "lightning_edit", "validate", "--model", "Scale",
            "--model.lm.path=builtin:models/tiny-gpt2", "--data", "Capitals",
            "--data.path=builtin:data/samples/capitals.json", "--trainer.logger=false",
            "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={copy / 'run'}", timeout=300,
        )  # fmt: skip
        tested = pool.submit(
            run_in, copy, "-m", "pytest", "-q", "-rp", "-p", "no:cacheprovider", *files, "-k", selected, timeout=480
        )
    imported, run, tested = imported.result(), run.result(), tested.result()
    assert Path(imported.stdout.strip()) == package / "__init__.py", imported.stderr
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads((copy / "run/results.json").read_text())
    assert results["counts"]["cases"] == 3 and results["metrics"]["capital_acc"]["n_cases"] == 3

    failures = tested.stdout[tested.stdout.find("= FAILURES =") :]
    assert tested.returncode == 0, failures[:8000] + tested.stderr[-2000:]
    passed = {line.split()[1] for line in tested.stdout.splitlines() if line.startswith("PASSED ")}
    assert {
        "tests/test_hardening.py::test_every_loader_and_editor_is_registered",
        "tests/test_hardening.py::test_out_of_range_layer_is_one_line[Scale]",
        "tests/test_matrix.py::test_every_method_config_has_its_flags",
        "tests/test_matrix.py::test_method_runs_on_benchmark_with_the_default_logger[scale-capitals]",
        "tests/test_configs.py::test_shipped_config_resolves[benchmarks/capitals.yaml]",
        "tests/test_configs.py::test_model_preset_sets_only_shared_arguments[models/tiny-gpt2.yaml]",
        "tests/test_configs.py::test_other_method_on_preset_architecture[models/gpt2-xl.yaml-scale]",
    } <= passed, tested.stdout[-3000:]
