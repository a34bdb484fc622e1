"""Bad input, over every loader and every editor: each gives one named error (or documented behaviour).

A new loader joins the matrix by an entry in ``LOADERS`` (its sample file and where its fields are); a new editor by
an entry in ``EDITORS`` (how to put one of its layers out of range). ``test_every_loader_and_editor_is_registered``
fails until it is there.
"""

import importlib
import inspect
import io
import json
import logging
import os
import pkgutil
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

import lightning_edit.data
import lightning_edit.editors
from lightning_edit.cli import build_cli, main
from lightning_edit.data.base import DataFormatError, EditDataModule
from lightning_edit.data.records import read_records
from lightning_edit.editors.base import EditorModule
from lightning_edit.editors.mend import MENDCheckpointError
from lightning_edit.errors import ConfigError, UserError, user_error
from lightning_edit.models.loading import ModelNotFoundError
from lightning_edit.redaction import REDACTED, add_secrets, argv_secrets, mask_output, redact_text
from lightning_edit.resources import resolve_path

ROOT = Path(__file__).resolve().parents[1]
TINY = "builtin:models/tiny-gpt2"
QUICK = ["--trainer.enable_progress_bar=false", "--trainer.logger=false", "--trainer.accelerator=cpu"]


# Loaders ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loader:
    """A registered benchmark: its class, a valid sample file, and the dotted paths of its fields (None: absent)."""

    cls: type[EditDataModule]
    sample: str
    prompt: str | None = None
    subject: str | None = None
    target_new: str | None = None
    target_true: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    skips_bad_records: bool = False  # a bad record is listed in results.json and the others load (ScEdit)
    prompt_lists: tuple[str, ...] = ()  # the fields that hold lists of prompts


ROME_FIELDS = dict(
    prompt="requested_rewrite.prompt",
    subject="requested_rewrite.subject",
    target_new="requested_rewrite.target_new.str",
    target_true="requested_rewrite.target_true.str",
    prompt_lists=("paraphrase_prompts", "neighborhood_prompts"),
)
FLAT_FIELDS = dict(prompt="prompt", subject="subject", target_new="target_new", target_true="ground_truth")
LOADERS = {
    "CounterFact": Loader(lightning_edit.data.CounterFact, "builtin:data/counterfact-rome.json", **ROME_FIELDS),
    "CounterFact-flat": Loader(lightning_edit.data.CounterFact, "builtin:data/counterfact-flat.json", **FLAT_FIELDS),
    "ZsRE": Loader(lightning_edit.data.ZsRE, "builtin:data/zsre.json", "src", "subject", "alt"),
    "QAEdit": Loader(lightning_edit.data.QAEdit, "builtin:data/samples/qaedit.json", "prompt", "subject", "target"),
    "BAKE": Loader(lightning_edit.data.BAKE, "builtin:data/toy/bake_qa.json", **ROME_FIELDS),
    "ScEdit": Loader(
        lightning_edit.data.ScEdit,
        "builtin:data/toy/scedit_cf.json",
        **FLAT_FIELDS,
        skips_bad_records=True,
        prompt_lists=("rephrase_prompts", "neighborhood_prompts"),
    ),
    "CaseEdit": Loader(lightning_edit.data.CaseEdit, "builtin:data/toy/caseedit.json", **FLAT_FIELDS),
    "RuleEdit": Loader(lightning_edit.data.RuleEdit, "builtin:data/ruleedit"),  # a folder: only the settings rows
}


def package_subclasses(package, base: type) -> set[type]:
    """The concrete subclasses of ``base`` defined in the modules of ``package``."""
    found = set()
    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if issubclass(cls, base) and not inspect.isabstract(cls) and cls.__module__ == module.name:
                found.add(cls)
    return found


def _set(record: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        record = record[part]
    if value is _DELETE:
        del record[leaf]
    else:
        record[leaf] = value


def _get(record: dict, path: str) -> Any:
    for part in path.split("."):
        record = record[part]
    return record


_DELETE = object()


def _write(tmp_path: Path, loader: Loader, edit: Callable[[list[dict]], Any] | None = None, text: str | None = None):
    path = tmp_path / f"bench{Path(loader.sample).suffix or '.json'}"
    if text is None:
        records = read_records(loader.sample)[:3]
        if edit is not None:
            edit(records)
        text = json.dumps(records)
    path.write_text(text)
    return loader.cls(str(path), **dict(loader.options))


def _load(datamodule: EditDataModule) -> EditDataModule:
    datamodule.setup("validate")
    return datamodule


def _rejected(loader: Loader, datamodule: EditDataModule, pattern: str) -> None:
    """Loading fails with a named error matching ``pattern``, or (for a loader that skips bad records) record 0 is
    listed as skipped with such a reason and the other records load."""
    if not loader.skips_bad_records:
        with pytest.raises(DataFormatError, match=pattern) as error:
            _load(datamodule)
        assert error.value.path.endswith("bench.json") and error.value.field
        return
    _load(datamodule)
    assert [skip["record"] for skip in datamodule.skipped] == [0] and datamodule.cases
    assert re.search(pattern, datamodule.skipped[0]["reason"]), datamodule.skipped[0]["reason"]


FILE_LOADERS = [name for name, loader in LOADERS.items() if resolve_path(loader.sample).is_file()]


def test_every_loader_and_editor_is_registered():
    loaders = package_subclasses(lightning_edit.data, EditDataModule)
    assert loaders <= {loader.cls for loader in LOADERS.values()}, "register the new loader in LOADERS"
    editors = package_subclasses(lightning_edit.editors, EditorModule)
    assert {cls.__name__ for cls in editors} <= set(EDITORS), "register the new editor in EDITORS"


@pytest.mark.parametrize("name", FILE_LOADERS)
def test_the_sample_loads(name):
    assert _load(_write_sample(name)).cases


def _write_sample(name: str) -> EditDataModule:
    loader = LOADERS[name]
    return loader.cls(loader.sample, **dict(loader.options))


@pytest.mark.parametrize("name", FILE_LOADERS)
@pytest.mark.parametrize(
    "text, message",
    [("[{]", "malformed JSON"), ("[]", "no edit cases"), ('{"a": 1}', "expected a JSON list"), ("[1]", "record 0")],
    ids=["malformed", "empty", "not a list", "not an object"],
)
def test_malformed_and_empty_files(name, text, message, tmp_path):
    with pytest.raises(DataFormatError, match=message):
        _load(_write(tmp_path, LOADERS[name], text=text))


def _field_rows() -> list:
    """(loader, field, mutation, expected message) for every registered field of every file loader."""
    rows = []
    for name in FILE_LOADERS:
        loader = LOADERS[name]
        for field in ("prompt", "subject", "target_new"):
            path = getattr(loader, field)
            if path is not None:
                rows.append(pytest.param(name, path, _DELETE, "(missing|expected)", id=f"{name}-{field}-missing"))
                rows.append(pytest.param(name, path, 7, "expected", id=f"{name}-{field}-wrong-type"))
    return rows


@pytest.mark.parametrize("name, path, value, message", _field_rows())
def test_missing_wrong_typed_and_empty_fields(name, path, value, message, tmp_path):
    datamodule = _write(tmp_path, LOADERS[name], lambda records: _set(records[0], path, value))
    _rejected(LOADERS[name], datamodule, f"record 0.*{message}")


@pytest.mark.parametrize("name", [n for n in FILE_LOADERS if LOADERS[n].target_new])
def test_empty_target_is_an_error_or_a_skipped_record(name, tmp_path):
    datamodule = _write(tmp_path, LOADERS[name], lambda records: _set(records[0], LOADERS[name].target_new, " "))
    try:
        _load(datamodule)
    except DataFormatError as error:
        assert "record 0" in str(error) and "empty" in str(error)
    else:  # zsRE: a record without an edit target is skipped and listed in results.json (documented)
        assert [skip["record"] for skip in datamodule.skipped] == [0]


@pytest.mark.parametrize(
    "name, field", [(name, field) for name in FILE_LOADERS for field in LOADERS[name].prompt_lists]
)
@pytest.mark.parametrize("blank", ["", "  \n"], ids=["empty", "whitespace"])
def test_a_blank_prompt_in_a_list_is_named_not_scored(name, field, blank, tmp_path):
    def blank_first(records):
        _get(records[0], field)[0] = blank

    _rejected(LOADERS[name], _write(tmp_path, LOADERS[name], blank_first), rf"record 0: field '{field}\[0\]': empty")


@pytest.mark.parametrize("field", LOADERS["ScEdit"].prompt_lists)
def test_an_empty_list_of_scedit_prompts_is_skipped_and_listed(field, tmp_path):
    """Documented behaviour (data/scedit.py): the case would drop out of S-ES or S-NS unseen, so it is listed."""
    datamodule = _write(tmp_path, LOADERS["ScEdit"], lambda records: _set(records[0], field, []))
    _rejected(LOADERS["ScEdit"], datamodule, f"record 0: field '{field}': expected at least 1")


@pytest.mark.parametrize("name", [n for n in FILE_LOADERS if LOADERS[n].prompt and LOADERS[n].subject])
def test_subject_not_in_prompt_and_doubled_placeholder(name, tmp_path):
    loader = LOADERS[name]

    def elsewhere(records):
        _set(records[0], loader.subject, "Nobody Here At All")
        _set(records[0], loader.prompt, _get(records[0], loader.prompt).replace("{}", "Someone"))

    _rejected(loader, _write(tmp_path, loader, elsewhere), "does not occur in the prompt")

    def doubled(records):
        _set(records[0], loader.prompt, "{} and {} are")

    _rejected(loader, _write(tmp_path, loader, doubled), r"record 0.* has 2 '\{\}'")


@pytest.mark.parametrize("name", [n for n in FILE_LOADERS if LOADERS[n].target_true])
def test_target_equal_to_the_true_answer_is_counted(name, tmp_path):
    """Documented behaviour: the case is kept (the reference scores it) and counted in results.json, unless the
    benchmark's format forbids it (CaseEdit: a named error)."""
    loader = LOADERS[name]

    def same(records):
        _set(records[1], loader.target_new, _get(records[1], loader.target_true))

    datamodule = _write(tmp_path, loader, same)
    try:
        _load(datamodule)
    except DataFormatError as error:
        assert "record 1" in str(error) and "target_new" in str(error)
    else:
        assert datamodule.target_equals_true == [1]


@pytest.mark.parametrize("name", list(LOADERS))
@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(limit=0), "data.limit=0"),
        (dict(limit=-3), "data.limit=-3"),
        (dict(sample_seed=1), "set data.limit too"),
        (dict(batch_size=0), "data.batch_size=0"),
    ],
    ids=["limit 0", "negative limit", "seed without limit", "batch size 0"],
)
def test_bad_limits(name, settings, message):
    loader = LOADERS[name]
    with pytest.raises(ConfigError, match=message):
        loader.cls(loader.sample, **dict(loader.options), **settings)


@pytest.mark.parametrize("path", ["builtin:../../../../etc/passwd", "builtin:/etc/passwd", "builtin:data/../../cli.py"])
def test_a_builtin_path_cannot_leave_the_shipped_files(path):
    with pytest.raises(ConfigError, match=f"{re.escape(repr(path))} leads out of the files shipped"):
        read_records(path)
    assert resolve_path("builtin:data/../data/zsre.json").is_file()


def test_limit_larger_than_the_file_keeps_every_case():
    loader = LOADERS["CounterFact"]
    everything = len(_load(loader.cls(loader.sample)).cases)
    assert len(_load(loader.cls(loader.sample, limit=10_000, sample_seed=0)).cases) == everything


# Editors ----------------------------------------------------------------------------------------------------------

#: editor -> the flags that put one of its layers out of the 2-layer tiny model (None: it edits no layer)
EDITORS: dict[str, list[str] | None] = {
    "NoEdit": None,
    "IKE": None,
    "ROME": ["--model.layer=9"],
    "MEMIT": ["--model.layers=[0, 9]"],
    "AlphaEdit": ["--model.layers=[0, 9]"],
    "MEND": ["--model.layers=[9]"],
    "FT": ["--model.layers=[9]"],
    "LoRA": ["--model.layers=[9]"],
    "GRACE": ["--model.layer=9"],
    "WISE": ["--model.layer=9"],
    "UltraEdit": ["--model.layers=[9]"],
}


def editor_class(name: str) -> str:
    """The class path of a registered editor."""
    (cls,) = [c for c in package_subclasses(lightning_edit.editors, EditorModule) if c.__name__ == name]
    return f"{cls.__module__}.{cls.__name__}"


def run_main(capsys, *args: str) -> tuple[int, str]:
    """``lightning-edit`` in-process: (exit status, stderr)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code, capsys.readouterr().err


# what an editor needs besides the model to be built at all
REQUIRED = {
    "GRACE": ["--model.layer=1"],  # no default layer: a missing one is an error before the model loads
    "WISE": ["--model.layer=1"],
}


def construct(name: str, *flags: str):
    data = ["--data=CounterFact", "--data.path=builtin:data/counterfact-flat.json"]
    model = ["--model", editor_class(name), f"--model.lm.path={TINY}", *REQUIRED.get(name, [])]
    return build_cli([*model, *data, *flags], run=False).model


@pytest.mark.parametrize("name", [n for n, flags in EDITORS.items() if flags is not None])
def test_out_of_range_layer_is_one_line(name, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    status, err = run_main(
        capsys, "validate", "--model", editor_class(name), f"--model.lm.path={TINY}", *REQUIRED.get(name, []),
        *EDITORS[name],
        "--data=CounterFact", "--data.path=builtin:data/counterfact-flat.json", *QUICK,
    )  # fmt: skip
    line = err.strip().splitlines()[-1]
    assert status == 1 and line.startswith("lightning-edit: error:") and "9" in line, err
    assert "Traceback" not in err and "Union subtypes" not in err and "Namespace(" not in err


@pytest.mark.parametrize("name", list(EDITORS))
def test_missing_model_and_bad_edit_batch_size(name):
    with pytest.raises(Exception) as error:
        construct(name, "--model.lm.path=/nonexistent/model")
    assert isinstance(user_error(error.value), ModelNotFoundError)
    with pytest.raises(Exception) as error:
        construct(name, "--model.edit_batch_size=0")
    assert isinstance(user_error(error.value), ConfigError) and "edit_batch_size=0" in str(user_error(error.value))


@pytest.fixture(scope="module")
def foreign_and_corrupt_models(tmp_path_factory) -> dict[str, Path]:
    """A directory with a truncated safetensors file and one holding a file that is not a model."""
    root = tmp_path_factory.mktemp("models")
    corrupt = root / "corrupt"
    corrupt.mkdir()
    for path in resolve_path(TINY).iterdir():
        (corrupt / path.name).write_bytes(path.read_bytes())
    (corrupt / "model.safetensors").write_bytes(b"\xff" * 64)
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text('{"model_type": "no-such-model"}')
    return {"corrupt": corrupt, "foreign": foreign}


@pytest.mark.parametrize("kind", ["corrupt", "foreign"])
def test_corrupt_or_foreign_model_names_the_file(kind, foreign_and_corrupt_models):
    with pytest.raises(Exception) as error:
        construct("NoEdit", f"--model.lm.path={foreign_and_corrupt_models[kind]}")
    found = user_error(error.value)
    assert isinstance(found, UserError) and str(foreign_and_corrupt_models[kind]) in str(found)


def test_mend_checkpoint_missing_corrupt_or_absent(tmp_path, capsys, monkeypatch):
    corrupt = tmp_path / "mend.pt"
    corrupt.write_bytes(b"\x00" * 100)
    for path in (tmp_path / "missing.pt", corrupt):
        with pytest.raises(Exception) as error:
            construct("MEND", f"--model.ckpt_path={path}")
        found = user_error(error.value)
        assert isinstance(found, MENDCheckpointError) and str(path) in str(found)
    monkeypatch.chdir(tmp_path)
    status, err = run_main(
        capsys, "validate", "--model=MEND", f"--model.lm.path={TINY}", "--model.rank=4",
        "--data=CounterFact", "--data.path=builtin:data/counterfact-flat.json", *QUICK,
    )  # fmt: skip
    assert status == 1 and "without model.ckpt_path" in err and "Traceback" not in err


class Payload:
    """Unpickles as ``os.mkdir(path)``: a file holding one runs that call if anything ever unpickles it."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (str(self.path),)


def _pickled_weights(name: str, tmp_path: Path) -> tuple[Path, list[str]]:
    """A weights file of editor ``name`` that holds a :class:`Payload`, and the flags that load it."""
    weights = {"weight": torch.zeros(2), "payload": Payload(tmp_path / "payload ran")}
    if name == "MEND":
        path = tmp_path / "mend.pt"
        torch.save(weights, path)
        return path, [f"--model.ckpt_path={path}"]
    if name == "GRACE":
        path = tmp_path / "codebook.safetensors"
        torch.save(weights, path)
        return path, ["--model.layer=0", f"--model.codebook_path={path}"]
    if name == "NoEdit":  # a model folder whose only weights are a pickled pytorch_model.bin
        folder = tmp_path / "model"
        shutil.copytree(resolve_path(TINY), folder, ignore=shutil.ignore_patterns("model.safetensors"))
        path = folder / "pytorch_model.bin"
        torch.save(weights, path)
        return path, [f"--model.lm.path={folder}"]
    editor = construct("LoRA", "--model.export=adapter")
    editor.add_adapter()
    editor.export(tmp_path / "adapter", [])
    (tmp_path / "adapter" / "edit_0" / "adapter_model.safetensors").unlink()
    path = tmp_path / "adapter" / "edit_0" / "adapter_model.bin"
    torch.save(weights, path)
    return path, [f"--model.adapter_path={tmp_path / 'adapter'}"]


@pytest.mark.parametrize("name", ["MEND", "LoRA", "GRACE", "NoEdit"])
def test_pickled_weights_are_refused_in_one_line(name, tmp_path):
    path, flags = _pickled_weights(name, tmp_path)
    with pytest.raises(Exception) as error:
        construct(name, *flags)
    found = str(user_error(error.value))
    assert found.startswith(f"{path}: refused: ") and "pickled" in found and "accepted: " in found, found
    assert "\n" not in found and "weights_only" not in found and not (tmp_path / "payload ran").exists()


@pytest.mark.parametrize(
    "name, flags, message",
    [
        ("LoRA", ["--model.adapter_path={missing}"], "model.adapter_path={missing}: no adapter"),
        ("LoRA", ["--model.adapter_path={empty}"], "model.adapter_path={empty}: no adapter"),
        ("GRACE", ["--model.layer=0", "--model.codebook_path={missing}"], "codebook_path: no codebook"),
        ("GRACE", ["--model.layer=0", "--model.codebook_path={foreign}"], "is not a GRACE codebook"),
    ],
    ids=["LoRA missing", "LoRA empty folder", "GRACE missing", "GRACE foreign"],
)
def test_a_missing_or_foreign_adapter_or_codebook_is_one_line(name, flags, message, tmp_path):
    (tmp_path / "empty").mkdir()
    save_file({"weight": torch.zeros(2)}, tmp_path / "foreign.safetensors")
    places = {place: tmp_path / f"{place}.safetensors" if place == "foreign" else tmp_path / place
              for place in ("missing", "empty", "foreign")}  # fmt: skip
    with pytest.raises(Exception) as error:
        construct(name, *(flag.format(**places) for flag in flags))
    found = user_error(error.value)
    assert found is not None and message.format(**places) in str(found) and "\n" not in str(found), error.value


def test_over_long_prompt_is_named_before_any_edit(tmp_path, capsys, monkeypatch):
    records = read_records("builtin:data/counterfact-flat.json")[:2]
    records[1]["rephrase_prompt"] = "word " * 2000 + records[1]["rephrase_prompt"]
    path = tmp_path / "long.json"
    path.write_text(json.dumps(records))
    monkeypatch.chdir(tmp_path)
    status, err = run_main(
        capsys, "validate", "--model=NoEdit", f"--model.lm.path={TINY}", "--data=CounterFact", f"--data.path={path}",
        *QUICK,
    )  # fmt: skip
    assert status == 1 and f"{path}: record 1: field 'paraphrase'" in err and "positions" in err, err


@pytest.mark.parametrize("defect", ["missing subject", "prompt too long"])
def test_a_run_stopped_before_any_result_leaves_no_log_folder(defect, tmp_path, capsys, monkeypatch):
    """The default logger's ``lightning_logs/version_N`` would hold only config.yaml and hparams.yaml (or nothing)."""
    records = read_records("builtin:data/counterfact-flat.json")[:2]
    if defect == "missing subject":  # stops in the data module's setup
        del records[1]["subject"]
    else:  # stops in the editor's checks before the first edit
        records[1]["rephrase_prompt"] = "word " * 2000 + records[1]["rephrase_prompt"]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(records))
    monkeypatch.chdir(tmp_path)
    status, err = run_main(
        capsys, "validate", "--model=NoEdit", f"--model.lm.path={TINY}", "--data=CounterFact", f"--data.path={path}",
        "--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu",
    )  # fmt: skip
    assert status == 1 and f"{path}: record 1" in err, err
    assert not list(tmp_path.glob("lightning_logs/*")), list(tmp_path.rglob("*"))


def test_a_prompt_too_long_with_its_in_context_text_is_named_before_any_edit(tmp_path, capsys, monkeypatch):
    records = read_records("builtin:data/counterfact-flat.json")[:2]
    records[1]["target_new"] = "word " * 100  # the prompts fit alone, not after the new fact (PROMPT)
    path = tmp_path / "long_target.json"
    path.write_text(json.dumps(records))
    monkeypatch.chdir(tmp_path)
    main(["validate", "--model=NoEdit", f"--model.lm.path={TINY}", "--data=CounterFact", f"--data.path={path}", *QUICK,
          f"--trainer.default_root_dir={tmp_path / 'no-edit'}"])  # fmt: skip
    status, err = run_main(
        capsys, "validate", f"--config={ROOT / 'configs/methods/prompt.yaml'}", f"--model.lm.path={TINY}",
        "--data=CounterFact", f"--data.path={path}", *QUICK,
    )  # fmt: skip
    assert status == 1 and f"{path}: record 1: field" in err and "positions" in err and "Traceback" not in err, err


def test_a_prompt_a_score_kind_cannot_score_is_named_before_any_edit(capsys, monkeypatch, tmp_path):
    """The toy GPT-2 has no single token for " E", so CaseEdit's letter convention cannot read its answer; the run stops
    in the checks before any edit (ScoreKind.check), naming the file, record and question."""
    monkeypatch.chdir(tmp_path)
    status, err = run_main(
        capsys, "validate", f"--config={ROOT / 'configs/methods/rome.yaml'}",
        f"--config={ROOT / 'configs/models/toy-gpt2.yaml'}", f"--config={ROOT / 'configs/benchmarks/caseedit.yaml'}",
        "--data.limit=2", *QUICK,
    )  # fmt: skip
    assert status == 1 and "Traceback" not in err, err
    assert "builtin:data/toy/caseedit.json: record 0: field 'reliability': letter 'E'" in err.strip().splitlines()[-1]
    assert not list(tmp_path.rglob("results.json"))


def test_fit_of_an_editor_that_cannot_export_is_one_line_before_any_edit(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    status, err = run_main(
        capsys, "fit", f"--config={ROOT / 'configs/methods/wise.yaml'}",
        f"--config={ROOT / 'configs/models/toy-gpt2.yaml'}", f"--config={ROOT / 'configs/benchmarks/counterfact.yaml'}",
        "--data.path=builtin:data/toy/counterfact.json", "--data.limit=2", *QUICK,
    )  # fmt: skip
    assert status == 1 and "Traceback" not in err and "routed side memories" in err.strip().splitlines()[-1], err


def test_contradictory_settings_and_rejected_options(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    common = [f"--model.lm.path={TINY}", "--data=CounterFact", "--data.path=builtin:data/counterfact-flat.json"]
    status, err = run_main(capsys, "validate", "--model=NoEdit", "--model.eval_at=[2]", *common, *QUICK)
    assert status == 1 and "eval_at=[2] needs protocol='sequential'" in err and len(err.strip().splitlines()) == 1
    ft = [f"--config={ROOT / 'configs' / name}.yaml" for name in ("methods/ft_m", "models/tiny-gpt2")]
    sequential = [*ft, *common[1:], "--model.protocol=sequential", "--data.limit=3", "--model.eval_at=[2,500]"]
    status, err = run_main(capsys, "validate", *sequential, *QUICK)  # refused before any edit
    last = err.strip().splitlines()[-1]  # after transformers' weight-loading bar
    assert status == 1 and "eval_at=[2, 500]: [500] beyond the 3 cases" in last and "Traceback" not in err
    status, err = run_main(capsys, "validate", "--model=ROME", "--model.target.fact_token=last", *common, *QUICK)
    assert status == 2 and "fact_token" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("model", "flags", "message"),
    [
        (TINY, ["--model=IKE", "--model.in_context.demonstrations=2"], "in_context.pool=None: the file the 2 demo"),
        (TINY, ["--model=IKE", "--model.in_context.demonstrations=-1"], "model.in_context.demonstrations=-1: k"),
        (TINY, ["--model=ROME", "--model.target.v_num_grad_steps=0"], "model.target.v_num_grad_steps=0: at least 1"),
        (TINY, ["--model=ROME", "--model.target.v_loss_layer=9"], "model.target.v_loss_layer=9: the layer whose"),
        ("builtin:models/toy-llama", ["--model=GRACE", "--model.layer=1", "--model.module=mlp_in"], "model.module="),
    ],
    ids=["IKE without a pool", "IKE k<0", "ROME no steps", "ROME loss layer", "GRACE mlp_in of LLaMA"],
)
def test_a_bad_setting_inside_an_editor_section_is_one_line(model, flags, message, capsys, monkeypatch, tmp_path):
    """Settings checked where their section is built (in_context, target, GRACE's module): one line, not the
    parser's traceback of union types."""
    monkeypatch.chdir(tmp_path)
    data = ["--data=CounterFact", "--data.path=builtin:data/counterfact-flat.json"]
    status, err = run_main(capsys, "validate", *flags, f"--model.lm.path={model}", *data, *QUICK)
    assert status == 1 and message in err.strip().splitlines()[-1], err
    assert "Traceback" not in err and "Union subtypes" not in err and "Namespace(" not in err


def test_debug_shows_the_traceback(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    args = ["validate", "--model=NoEdit", "--model.lm.path=/nonexistent", "--data=CounterFact", "--data.path=x.json"]
    status, err = run_main(capsys, *args, "--debug", *QUICK)
    assert status == 1 and "Traceback" in err and "ModelNotFoundError" in err
    monkeypatch.setenv("LIGHTNING_EDIT_DEBUG", "1")
    assert "Traceback" in run_main(capsys, *args, *QUICK)[1]


def test_corrupt_statistics_cache_is_recomputed(tmp_path, caplog):
    """Documented behaviour (stats/cache.py): an entry that fails its checksum is ignored, with a warning, and
    computed again."""
    from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
    from lightning_edit.stats.cache import load_or_compute

    model, tokenizer = load_model_and_tokenizer(ModelSource(TINY))
    corpus = ["The capital of France is Paris."] * 6
    first = load_or_compute(model, tokenizer, corpus, [1], n_samples=6, cache_dir=tmp_path, progress=False)
    (entry,) = tmp_path.rglob("*.safetensors")
    entry.write_bytes(entry.read_bytes()[:-8] + b"\x00" * 8)
    again = load_or_compute(model, tokenizer, corpus, [1], n_samples=6, cache_dir=tmp_path, progress=False)
    assert again[1].sum.equal(first[1].sum)


@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_statistics_sample_is_refused(value):
    from lightning_edit.stats.config import KeyStatistics

    with pytest.raises(ConfigError, match=f"stats.n_samples={value}"):
        KeyStatistics(n_samples=value)


def test_secrets_are_masked_in_messages(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("trainer:\n  logger:\n    dict_kwargs:\n      config: {service: {api_key: sk-file123}}\n")
    secrets = argv_secrets(["--config", str(config), "--model.api_key", "sk-flag456", '--x={"password": "hunter22"}'])
    assert secrets == {"sk-file123", "sk-flag456", "hunter22"}
    assert redact_text("a sk-file123 b hunter22", secrets) == f"a {REDACTED} b {REDACTED}"


def test_a_known_secret_is_masked_in_log_records_and_printed_text(capsys):
    """A handler made before the masking starts (as libraries make theirs at import) masks its records too."""
    stream = io.StringIO()
    logger = logging.getLogger("lightning_edit.tests.masking")
    logger.addHandler(logging.StreamHandler(stream))
    add_secrets(["sk-logged-51c0e2"])
    mask_output()
    logger.warning("the endpoint said: bad key %s", "sk-logged-51c0e2")
    print("echo sk-logged-51c0e2")
    assert stream.getvalue() == f"the endpoint said: bad key {REDACTED}\n"
    assert capsys.readouterr().out == f"echo {REDACTED}\n"


# Deviations from the reference code, fixed --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MEMIT", "AlphaEdit"])
def test_memit_templates_start_with_the_reference_seed_words(name):
    from lightning_edit.editors.context_templates import WORD_SEED_PROMPTS

    editor = construct(name, "--model.layers=[0, 1]")
    templates = editor.context_templates()
    assert templates[0] == "{}" and len(templates) == 6
    for template, seed in zip(templates[1:], WORD_SEED_PROMPTS):
        assert template.startswith(seed) and template.endswith(". {}"), (template, seed)


def test_bake_j_statement_is_built_as_the_reference_builds_it(tmp_path):
    from lightning_edit.data.bake import judge_statement

    assert judge_statement("Whether london is in France? Whether it is?") == "London is in France it is"
    record = read_records("builtin:data/toy/bake_qa.json")[0]
    del record["reverse_qa"]
    record["reverse_judge"]["prompt"] = "Whether london is the capital of France?"
    path = tmp_path / "bake_judge.json"
    path.write_text(json.dumps([record]))
    expected = {
        "gpt-j": "London is the capital of France, is the information described in this sentence correct?",
        "llama-2": "Please use yes or no to judge the factuality of the following sentence. Yes means this sentence is "
        "correct, and no means it is wrong.London is the capital of France. Is this sentence correct?",
    }
    for family, prompt in expected.items():
        datamodule = _load(lightning_edit.data.BAKE(str(path), variant="judge", judge_template=family))
        group = datamodule.cases[0].groups["reverse_judge"]
        assert group.prompts == (prompt,) and group.expected[0] == "yes, it is true"
