"""Editor settings out of range are one-line errors before the model is loaded (no traceback, no weight touched)."""

import pytest

from lightning_edit.cli import main

TINY = "builtin:models/tiny-gpt2"
#: (editor, its setting, a value out of range, flags it needs besides)
OUT_OF_RANGE = [
    ("FT", "num_steps", "0", []),
    ("FT", "norm_constraint", "-1", []),
    ("FT", "lr", "-1", []),
    ("FT", "step_batch_size", "0", []),
    ("LoRA", "num_steps", "0", []),
    ("LoRA", "rank", "0", []),
    ("LoRA", "lr", "-1", []),
    ("GRACE", "n_iter", "0", ["--model.layer=1"]),
    ("GRACE", "eps", "-1", ["--model.layer=1"]),
    ("GRACE", "edit_lr", "0", ["--model.layer=1"]),
    ("GRACE", "layer", None, []),  # not set: no value to pass
    ("WISE", "layer", None, []),
    ("WISE", "mask_ratio", "0", ["--model.layer=1"]),
    ("WISE", "mask_ratio", "1.5", ["--model.layer=1"]),
    ("WISE", "save_freq", "0", ["--model.layer=1"]),
    ("WISE", "merge_freq", "700", ["--model.layer=1"]),
    ("ROME", "update_filter.keep_fraction", "0", ["--model.update_filter=RECT"]),
    ("UltraEdit", "lr", "0", []),
    ("UltraEdit", "ridge", "-1", []),
    ("UltraEdit", "pass_size", "0", []),
]


@pytest.mark.parametrize("editor, setting, value, flags", OUT_OF_RANGE, ids=lambda v: str(v))
def test_a_setting_out_of_range_is_one_line_naming_it(editor, setting, value, flags, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    loaded = []
    monkeypatch.setattr("lightning_edit.editors.base.load_model_and_tokenizer", lambda *a: loaded.append(a))
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["validate", "--model", editor, f"--model.lm.path={TINY}", *flags]
            + ([f"--model.{setting}={value}"] if value is not None else [])
            + ["--data=CounterFact", "--data.path=builtin:data/counterfact-flat.json", "--trainer.logger=false"]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"lightning-edit: error: model.{setting}="), err
    assert not loaded  # checked before the model is loaded
