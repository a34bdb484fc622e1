"""The health of a model along a sequential stream: held-out perplexity and edited-weight norms (docs/metrics.md)."""

import json
import math
from pathlib import Path

import pytest
import torch

from lightning_edit.cli import build_cli
from lightning_edit.editors.stream_health import StreamHealth, heldout_nll, weight_norms
from lightning_edit.errors import ConfigError
from lightning_edit.models.snapshot import WeightSnapshot

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_heldout_nll_is_the_mean_over_every_predicted_token(tiny_lm):
    model, tokenizer = tiny_lm
    windows = StreamHealth(max_tokens=40).windows(tokenizer, context=16)  # windows of 16, 16 and 8 tokens
    assert [len(window) for window in windows] == [16, 16, 8]
    total, count = 0.0, 0
    for window in windows:  # each window alone: the model's own loss is the mean NLL of its predicted tokens
        ids = torch.tensor([window])
        total += float(model(input_ids=ids, labels=ids).loss) * (len(window) - 1)
        count += len(window) - 1
    assert heldout_nll(model, windows) == pytest.approx(total / count, rel=1e-5)


def test_weight_norms_of_changed_and_added_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    before = {key for name, parameter in model.named_parameters() for key in (name, id(parameter))}
    start = WeightSnapshot(model, ["0.weight"])
    delta = torch.full((3, 3), 0.5)
    with torch.no_grad():
        model[0].weight += delta
    model.register_parameter("added", torch.nn.Parameter(torch.tensor([3.0, 4.0])))
    norms = weight_norms(model, start, before)
    assert set(norms) == {"0.weight", "added"}
    assert norms["0.weight"]["change"] == pytest.approx(1.5)  # ‖Δ‖ of nine entries of 0.5
    assert norms["0.weight"]["norm"] == pytest.approx(float(model[0].weight.norm()))
    assert norms["added"] == {"norm": 5.0, "change": 5.0}


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(text="no-such-file.txt"), "model.stream_health.text='no-such-file.txt': no such file"),
        (dict(text="no-such-file.txt", perplexity=False), None),
        (dict(max_tokens=1), "model.stream_health.max_tokens=1: tokens, at least 2"),
    ],
)
def test_bad_settings_are_one_line_errors(settings, message):
    if message is None:  # the text is not read
        return StreamHealth(**settings)
    with pytest.raises(ConfigError) as error:
        StreamHealth(**settings)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def run(directory: Path, *flags: str) -> dict:
    build_cli([
        "validate", f"--config={CONFIGS}/methods/memit.yaml", f"--config={CONFIGS}/models/toy-gpt2.yaml",
        f"--config={CONFIGS}/benchmarks/counterfact.yaml", "--data.path=builtin:data/toy/counterfact.json",
        "--data.limit=4", "--model.protocol=sequential", "--model.edit_batch_size=2", "--model.eval_at=[2,4]",
        "--model.target.v_num_grad_steps=5", *flags, f"--trainer.default_root_dir={directory}",
        "--trainer.logger=false", "--trainer.enable_progress_bar=false",
    ])  # fmt: skip
    (path,) = directory.rglob("results.json")
    return json.loads(path.read_text())


def test_each_checkpoint_records_perplexity_and_weight_norms(tmp_path):
    stream = run(tmp_path / "on")["stream"]
    assert [record["edits"] for record in stream] == [2, 4]
    unedited = {record["heldout"]["perplexity_unedited"] for record in stream}
    assert len(unedited) == 1 and all(record["heldout"]["tokens"] > 100 for record in stream)
    for record in stream:
        assert record["heldout"]["perplexity"] == pytest.approx(math.exp(record["heldout"]["nll"]))
        assert sorted(record["weights"]) == [f"transformer.h.{layer}.mlp.c_proj.weight" for layer in (1, 2, 3)]
    changes = [sum(norm["change"] ** 2 for norm in record["weights"].values()) for record in stream]
    assert 0 < changes[0] < changes[1]  # the second call's edits move the weights further
    assert list((tmp_path / "on").rglob("retention.png"))

    stream = run(
        tmp_path / "off", "--model.stream_health.perplexity=false", "--model.stream_health.weight_norms=false"
    )["stream"]
    assert [record["edits"] for record in stream] == [2, 4] and not any(
        "heldout" in record or "weights" in record for record in stream
    )


def test_the_stream_figure_gives_each_method_one_color_in_every_panel(tmp_path):
    """``benchmarks/lifelong_stream.py --plot``: a method with no ‖W − W₀‖ curve (GRACE edits no weight) does not
    shift the colors of the methods after it in that panel (AlphaEdit's curve was drawn in GRACE's color)."""
    import importlib.util

    import matplotlib.pyplot as plt

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "lifelong_stream.py"
    spec = importlib.util.spec_from_file_location("lifelong_stream", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def checkpoints(weight_change: float | None) -> list[dict]:
        scores = dict.fromkeys(script.METRICS, 0.5)
        health = {"heldout_perplexity": 20.0, "perplexity_unedited": 15.0, "weight_change": weight_change}
        return [{"edits": edits, "edits_per_s": 1.0, **scores, **health} for edits in (10, 20)]

    table = {"MEMIT": checkpoints(5.0), "GRACE": checkpoints(None), "AlphaEdit": checkpoints(3.0)}
    script.plot(table, tmp_path / "streams.png")
    figure = plt.gcf()
    scores, weight_change = figure.axes[0], figure.axes[len(script.METRICS) + 1]
    colors = {line.get_label(): line.get_color() for line in scores.get_lines()}
    assert weight_change.get_title() == "‖W − W₀‖" and len(set(colors.values())) == 3
    assert {line.get_label(): line.get_color() for line in weight_change.get_lines()} == {
        "MEMIT": colors["MEMIT"],
        "AlphaEdit": colors["AlphaEdit"],
    }
    plt.close(figure)
