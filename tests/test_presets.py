"""Model presets compose with every editor: a preset gives the selected editor only the arguments it accepts."""

import sys
from pathlib import Path

import pytest
import yaml

from lightning_edit.cli import build_cli
from lightning_edit.editors import ROME, NoEdit
from lightning_edit.presets import accepted_arguments, compose_presets

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TOY = CONFIGS / "models/toy-gpt2.yaml"


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])


def test_accepted_arguments_follow_kwargs_to_the_base_class():
    assert {"lm", "protocol", "scoring", "in_context"} <= accepted_arguments(NoEdit)
    assert {"lm", "sites", "target", "stats", "fact_token", "protocol"} <= accepted_arguments(ROME)
    assert "sites" not in accepted_arguments(NoEdit)


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_a_preset_loses_what_the_selected_editor_does_not_take(form):
    method = CONFIGS / "methods/no_edit.yaml"
    args = ["validate", *(["--config", str(method), "--config", str(TOY)] if form == "separate" else
                          [f"--config={method}", f"--config={TOY}"])]  # fmt: skip
    composed = compose_presets(args)
    preset = yaml.safe_load(composed[-1])
    assert set(preset["model"]["init_args"]) == {"lm"}  # sites, stats, target, fact_token, template_lengths dropped
    assert composed[2] == str(method)  # the method config is passed on as it is


def test_the_last_class_given_selects_and_memit_keeps_everything():
    args = ["validate", "--config", str(CONFIGS / "methods/memit.yaml"), "--config", str(TOY)]
    assert compose_presets(args) == args  # MEMIT takes every key of the preset: nothing changes
    everything = set(yaml.safe_load(TOY.read_text())["model"]["init_args"])
    rome = compose_presets([*args, "--model", "ROME"])
    assert set(yaml.safe_load(rome[4])["model"]["init_args"]) == everything - {"mom2_update_weight"}  # MEMIT's λ
    reduced = compose_presets([*args, "--model", "NoEdit"])
    assert set(yaml.safe_load(reduced[4])["model"]["init_args"]) == {"lm"}


def test_only_presets_are_filtered_flags_stay_strict(capsys):
    with pytest.raises(SystemExit):
        build_cli(
            ["validate", "--config", str(CONFIGS / "methods/no_edit.yaml"), "--model.sites.rome_layer=1",
             "--print_config"]
        )  # fmt: skip
    assert "sites" in capsys.readouterr().err
