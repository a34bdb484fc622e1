"""Model presets compose with every editor: the selected editor takes the preset's sections of its own classes."""

import sys
from pathlib import Path

import pytest
import yaml

from lightning_edit.cli import build_cli
from lightning_edit.editors import MEMIT, ROME, NoEdit
from lightning_edit.errors import ConfigError
from lightning_edit.presets import accepted_arguments, compose_presets

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TOY = CONFIGS / "models/toy-gpt2.yaml"
PRESET = {
    "model": {
        "init_args": {"lm": {"path": "builtin:models/tiny-gpt2"}},
        "editors": {
            "LocateThenEdit": {"fact_token": "last", "target": {"v_lr": 0.1, "v_num_grad_steps": 7}},
            "ROME": {"layer": 1},
            "MEMIT": {"layers": [0, 1], "mom2_update_weight": 20.0, "target": {"v_lr": 0.2}},
            "FT": {"layers": [1]},
        },
    }
}


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])


def composed_init_args(tmp_path: Path, editor: str, preset: dict = PRESET) -> dict:
    """The preset's ``init_args`` once composed for ``editor`` (given by ``--model``)."""
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(preset))
    composed = compose_presets(["validate", "--config", str(path), "--model", editor])
    model = yaml.safe_load(composed[2])["model"]
    assert "editors" not in model
    return model["init_args"]


def test_accepted_arguments_follow_kwargs_to_the_base_class():
    assert {"lm", "protocol", "scoring", "in_context"} <= accepted_arguments(NoEdit)
    assert {"lm", "layer", "target", "stats", "fact_token", "protocol"} <= accepted_arguments(ROME)
    assert {"layers", "mom2_update_weight", "target"} <= accepted_arguments(MEMIT)
    assert "layer" not in accepted_arguments(NoEdit)


def test_rome_takes_its_own_section_and_its_base_classes(tmp_path):
    assert composed_init_args(tmp_path, "ROME") == {
        "lm": {"path": "builtin:models/tiny-gpt2"},
        "fact_token": "last",
        "target": {"v_lr": 0.1, "v_num_grad_steps": 7},
        "layer": 1,
    }  # not MEMIT's layers or λ, not FT's layers


def test_alphaedit_takes_memits_section(tmp_path):
    init_args = composed_init_args(tmp_path, "AlphaEdit")
    assert init_args["layers"] == [0, 1] and init_args["mom2_update_weight"] == 20.0 and "layer" not in init_args


def test_a_subclass_section_overrides_its_base_key_by_key(tmp_path):
    assert composed_init_args(tmp_path, "MEMIT")["target"] == {"v_lr": 0.2, "v_num_grad_steps": 7}
    own = {**PRESET["model"]["editors"], "AlphaEdit": {"layers": [1], "l2": 1.0}}
    init_args = composed_init_args(tmp_path, "AlphaEdit", {"model": {**PRESET["model"], "editors": own}})
    assert init_args["layers"] == [1] and init_args["l2"] == 1.0 and init_args["mom2_update_weight"] == 20.0


def test_an_editor_without_a_section_takes_lm_only(tmp_path):
    assert composed_init_args(tmp_path, "NoEdit") == {"lm": {"path": "builtin:models/tiny-gpt2"}}


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_only_presets_are_composed(form):
    method = CONFIGS / "methods/no_edit.yaml"
    args = ["validate", *(["--config", str(method), "--config", str(TOY)] if form == "separate" else
                          [f"--config={method}", f"--config={TOY}"])]  # fmt: skip
    composed = compose_presets(args)
    assert yaml.safe_load(composed[-1])["model"] == {"init_args": yaml.safe_load(TOY.read_text())["model"]["init_args"]}
    assert composed[2] == str(method)  # the method config is passed on as it is


@pytest.mark.parametrize(
    ("editors", "message"),
    [
        ({"RECT": {"keep_fraction": 0.2}}, "model.editors.RECT: not an editor class"),
        ({"Rome": {"layer": 1}}, "model.editors.Rome: not an editor class"),
        ({"ROME": {"layers": [1]}}, "model.editors.ROME: ROME takes no argument layers"),
        ({"ROME": [1]}, "model.editors.ROME must map ROME's arguments to their values"),
        ([{"ROME": {"layer": 1}}], "model.editors must map editor classes to their arguments"),
    ],
)
def test_a_malformed_preset_is_a_one_line_error_naming_file_and_key(tmp_path, editors, message):
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump({"model": {"init_args": {"lm": {"path": "x"}}, "editors": editors}}))
    with pytest.raises(ConfigError, match=f"^{path}: ") as raised:
        compose_presets(["validate", "--config", str(path), "--model", "MEMIT"])
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_section_values_are_checked_strictly(tmp_path, capsys):
    preset = {"model": {"init_args": {"lm": {"path": "x"}}, "editors": {"LocateThenEdit": {"target": {"v_steps": 3}}}}}
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(preset))
    with pytest.raises(SystemExit):
        build_cli(["validate", "--config", str(CONFIGS / "methods/rome.yaml"), "--config", str(path), "--print_config"])
    assert "v_steps" in capsys.readouterr().err


def test_flags_stay_strict(capsys):
    with pytest.raises(SystemExit):
        build_cli(["validate", "--config", str(CONFIGS / "methods/no_edit.yaml"), "--model.layer=1", "--print_config"])
    assert "layer" in capsys.readouterr().err
