"""Every method config runs on every benchmark config, as documented, with the default logger.

The composition of docs/configs.md: ``--config configs/methods/<method>.yaml --config
configs/models/tiny-gpt2.yaml --config configs/benchmarks/<benchmark>.yaml``, run by the console script's own
function (:func:`lightning_edit.cli.main`) with Lightning's default logger, which records the editor's and the
DataModule's hyper-parameters together and refuses a name the two give different values. Each cell edits and scores
two cases of the benchmark's default (builtin) file on the tiny GPT-2, with the cheapest settings of its method
(:data:`METHOD_FLAGS`).

:func:`test_no_datamodule_option_is_an_editor_option` is the same rule read off the signatures: an option name means
one thing, whether it is given as ``--model.<name>`` or ``--data.<name>``.
"""

import importlib
import inspect
import json
import pkgutil
import sys
from pathlib import Path

import pytest
import torch
import yaml
from lightning import LightningDataModule, LightningModule

import lightning_edit.data
import lightning_edit.editors
import lightning_edit.toy
from lightning_edit.cli import main
from lightning_edit.data import EditDataModule, EditTraining
from lightning_edit.editors import MEND, EditorModule
from lightning_edit.models.loading import ModelSource

ROOT = Path(__file__).resolve().parents[1]
METHODS = sorted((ROOT / "configs/methods").glob("*.yaml"))
BENCHMARKS = sorted((ROOT / "configs/benchmarks").glob("*.yaml"))
PRESET = ROOT / "configs/models/tiny-gpt2.yaml"
TINY = yaml.safe_load(PRESET.read_text())["model"]["init_args"]["lm"]

#: Key statistics of the locate-then-edit methods: a few documents of the toy corpus (cached for the module).
STATS = ["--model.stats.corpus=builtin:data/toy/corpus.txt", "--model.stats.n_samples=40"]
#: ROME's update (RECT's base) and MEMIT's z: one context template and two v*/z steps (the last only evaluates).
LOCATE = [*STATS, "--model.template_lengths=[[5, 1]]", "--model.target.v_num_grad_steps=2"]
#: method config -> the flags that make a cell cheap, or that the method needs to run at all.
METHOD_FLAGS = {
    "alphaedit": LOCATE,
    "ft": ["--model.num_steps=1"],
    "ft_l": ["--model.num_steps=1"],
    "ft_m": ["--model.num_steps=1"],
    "grace": ["--model.n_iter=1"],
    "ike": [  # a pool of other facts, retrieved lexically (the sentence encoder needs a download)
        "--model.in_context.pool=builtin:data/toy/counterfact.json",
        "--model.in_context.retriever=lexical",
        "--model.in_context.demonstrations=1",
    ],
    "lora": ["--model.num_steps=1"],
    "memit": LOCATE,
    "mend": [],  # --model.ckpt_path: an untrained hypernetwork of the tiny GPT-2 (mend_checkpoint)
    "no_edit": [],
    "prompt": [],
    "rect": LOCATE,
    "rome": LOCATE,
    "ultraedit": [],
    "wise": ["--model.n_iter=1"],  # its own template lengths: a seed prompt longer than one must work
}


#: cells that compose but do not fit the tiny GPT-2's 256 positions: the in-context editors put a rule's three facts
#: before each prompt of DMLE's staged cases; such a run stops before any edit with the one-line length error
TOO_LONG = {("ike", "ruleedit_dmle"), ("prompt", "ruleedit_dmle")}


def test_every_method_config_has_its_flags():
    assert sorted(METHOD_FLAGS) == [method.stem for method in METHODS]


@pytest.fixture(scope="module")
def mend_checkpoint(tmp_path_factory) -> Path:
    """A MEND hypernetwork for the tiny GPT-2 at the layers MEND takes by default (the preset names none), untrained:
    validate needs one, and what it edits does not matter here. The file's rank wins over the config's."""
    path = tmp_path_factory.mktemp("mend") / "mend.pt"
    editor = MEND(ModelSource(TINY["path"], dtype=TINY["dtype"]), rank=4)
    torch.save(editor.hypernetwork_state(), path)
    return path


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """The cells' ``$LIGHTNING_EDIT_CACHE``: the key statistics are computed once, and not into the user's cache."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path, cache):
    """One torch thread: the tiny model gains nothing from more, and threads that wait on each other crawl when
    other jobs hold the cores."""
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])  # pytest's own flags are not the CLI's
    monkeypatch.setenv("LIGHTNING_EDIT_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("data_config", BENCHMARKS, ids=lambda path: path.stem)
@pytest.mark.parametrize("method_config", METHODS, ids=lambda path: path.stem)
def test_method_runs_on_benchmark_with_the_default_logger(
    method_config, data_config, mend_checkpoint, tmp_path, capsys
):
    args = [
        "validate",
        "--config", str(method_config),
        "--config", str(PRESET),
        "--config", str(data_config),
        "--data.limit=2",
        "--trainer.accelerator=cpu",
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={tmp_path}",
        *METHOD_FLAGS[method_config.stem],
    ]  # fmt: skip
    if method_config.stem == "mend":
        args.append(f"--model.ckpt_path={mend_checkpoint}")
    if (method_config.stem, data_config.stem) in TOO_LONG:
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        error = capsys.readouterr().err
        assert exit_info.value.code == 1 and "more than the model's 256 positions" in error
        assert "Traceback" not in error and not list(tmp_path.rglob("results.json"))
        return
    try:
        main(args)
    except SystemExit as exit_info:  # main prints the error (a traceback if it is not a user error) and exits
        pytest.fail(f"lightning-edit {' '.join(args)} exited {exit_info.code}:\n{capsys.readouterr().err[-4000:]}")
    (log_dir,) = (tmp_path / "lightning_logs").iterdir()  # the default logger's version_0
    results = json.loads((log_dir / "results.json").read_text())
    assert results["counts"]["cases"] == 2 and results["metrics"]
    hparams = yaml.safe_load((log_dir / "hparams.yaml").read_text())  # the editor's and the data's, merged
    assert {"lm", "protocol", "path", "batch_size"} <= set(hparams)


# ----------------------------------------------------------------------------------------------------------------
# No option name is both an editor's and a DataModule's


def _import_all(*packages) -> None:
    for package in packages:
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _subclasses(sub)
    return found


def _shipped(base: type) -> list[type]:
    """``base`` and its subclasses defined in lightning_edit (not in the tests), by name."""
    _import_all(lightning_edit.data, lightning_edit.editors, lightning_edit.toy)
    classes = {base} | _subclasses(base)
    return sorted((c for c in classes if c.__module__.startswith("lightning_edit.")), key=lambda c: c.__qualname__)


def init_options(cls: type) -> set[str]:
    """Every ``__init__`` parameter of ``cls`` and its bases: what ``save_hyperparameters`` records of it."""
    names = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and klass not in (LightningModule, LightningDataModule, object):
            for parameter in inspect.signature(vars(klass)["__init__"]).parameters.values():
                if parameter.name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                    names.add(parameter.name)
    return names


EDITORS = _shipped(EditorModule)
#: (DataModule, the editors it is run with): every benchmark with every editor (validate, test, and fit under the
#: closed-form editors); MEND's training edits with the editors that train on them (fit).
PAIRS = [(data, EDITORS) for data in _shipped(EditDataModule)] + [
    (data, [e for e in EDITORS if e.training_step is not EditorModule.training_step]) for data in _shipped(EditTraining)
]


@pytest.mark.parametrize(("datamodule", "editors"), PAIRS, ids=[data.__qualname__ for data, _ in PAIRS])
def test_no_datamodule_option_is_an_editor_option(datamodule, editors):
    """Lightning merges both sets of hyper-parameters into one (and refuses a name the two give different values), and
    ``--model.<name>`` next to ``--data.<name>`` would mean two things."""
    assert editors
    options = init_options(datamodule)
    clashes = {editor.__qualname__: sorted(options & init_options(editor)) for editor in editors}
    assert {editor: names for editor, names in clashes.items() if names} == {}
