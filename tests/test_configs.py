"""Every shipped YAML under ``configs/`` parses and resolves, and every model preset fits every locate-then-edit method.

The composition rule (docs/configs.md): ``--config <method> --config <model preset> --config
<benchmark>``, merged left to right. A model preset describes the model for every editor (``lm``, and under
``model.editors`` a section per editor class); each editor takes the sections of its classes
(:mod:`lightning_edit.presets`), so ``NoEdit`` composes with a preset too. The unedited baseline of a run is also the
same command with ``--model NoEdit`` appended (jsonargparse keeps the init_args the new class accepts, such as
``lm`` and ``protocol``, and drops the others).

The preset x method matrix instantiates each editor against a shape-reduced random model of the preset's family
with the real model's number of layers (``tiny_model_dir``), so an edit site outside the real model raises.
"""

import sys
from pathlib import Path

import pytest
import torch
import yaml
from jsonargparse import ArgumentParser
from lightning import LightningModule
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPTJConfig,
    LlamaConfig,
    Qwen2Config,
    Qwen3Config,
)

from lightning_edit.cli import build_cli
from lightning_edit.editors import FT, MEMIT, RECT, ROME, AlphaEdit, LoRA
from lightning_edit.editors.target_vector import TargetOptimization
from lightning_edit.models.build import train_tokenizer
from lightning_edit.presets import compose_presets, editor_arguments
from lightning_edit.resources import builtin_texts, resolve_path

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "configs"
CONFIGS = sorted(CONFIG_DIR.rglob("*.yaml"))
PRESETS = sorted((CONFIG_DIR / "models").glob("*.yaml"))
LOCATE_METHODS = {"rome": ROME, "memit": MEMIT, "alphaedit": AlphaEdit}  # configs/methods/<name>.yaml
DEFAULTS = {  # the other parts of a composition when one part is under test
    "methods": CONFIG_DIR / "methods/memit.yaml",
    "models": CONFIG_DIR / "models/tiny-gpt2.yaml",
    "benchmarks": CONFIG_DIR / "benchmarks/counterfact.yaml",
}
#: What a model preset sets for every editor; the rest is keyed by editor class under ``model.editors``.
PRESET_KEYS = {"lm"}
#: The editor classes the presets key sections by (LocateThenEdit: what ROME, MEMIT and AlphaEdit share).
PRESET_EDITORS = {"LocateThenEdit", "ROME", "MEMIT", "MEND", "FT", "LoRA", "GRACE", "WISE", "UltraEdit"}

#: (family, number of layers) of the real model behind each hub preset. A preset whose ``lm.path`` is a local or
#: builtin directory is used as it is.
ARCHITECTURES = {
    "gpt2-xl": ("gpt2", 48),
    "gpt-j-6b": ("gptj", 28),
    "llama-2-7b": ("llama", 32),
    "llama-2-13b": ("llama", 40),
    "llama-3-8b": ("llama", 32),
    "llama-3.2-3b": ("llama", 28),
    "qwen2-7b": ("qwen2", 28),
    "qwen2.5-7b": ("qwen2", 28),
    "qwen3-8b": ("qwen3", 36),
    "smollm2-135m": ("llama", 30),
    "qwen2.5-coder-1.5b": ("qwen2", 28),
    "gemma3-270m": ("gemma3_text", 18),
}
#: Tokenizer style of each family: LLaMA's SentencePiece-like pieces with BOS; byte-level BPE otherwise (Qwen too).
TOKENIZER_STYLE = {
    "gpt2": "gpt2", "gptj": "gpt2", "llama": "llama", "qwen2": "gpt2", "qwen3": "gpt2", "gemma3_text": "llama"
}  # fmt: skip


@pytest.fixture(autouse=True)
def _argv(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])  # pytest's own flags are not the CLI's
    monkeypatch.chdir(tmp_path)


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def configs(*paths: Path) -> list[str]:
    return [item for path in paths for item in ("--config", str(path))]


def print_config(capsys, *args: str, subcommand: str = "validate") -> dict:
    """The config LightningCLI resolves from ``args`` (``--print_config``, in process)."""
    with pytest.raises(SystemExit) as exit_info:
        build_cli([subcommand, *args, "--print_config"])
    captured = capsys.readouterr()
    assert exit_info.value.code in (0, None), captured.err
    return yaml.safe_load(captured.out)


def instantiate_model(model_config: dict) -> LightningModule:
    """The ``model`` section of a resolved config instantiated the way LightningCLI does (jsonargparse)."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(LightningModule, "model")
    return parser.instantiate_classes(parser.parse_object({"model": model_config})).model


def is_locate_method(method: Path) -> bool:
    class_path = load(method)["model"]["class_path"]
    return class_path.rsplit(".", 1)[-1] in {cls.__name__ for cls in LOCATE_METHODS.values()}


def config_id(path: Path) -> str:
    return str(path.relative_to(CONFIG_DIR))


# ----------------------------------------------------------------------------------------------------------------
# Every shipped YAML resolves


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_shipped_config_resolves(config, capsys):
    """Each method, model preset and benchmark composes with defaults for the other two; other YAMLs parse alone."""
    kind = config.relative_to(CONFIG_DIR).parts[0]
    data = load(config)
    if kind in DEFAULTS:
        parts = {**DEFAULTS, kind: config}
        extra = []
        if kind == "methods" and not is_locate_method(config):  # NoEdit and the like take no locate preset
            del parts["models"]
            extra = [f"--model.lm.path={load(DEFAULTS['models'])['model']['init_args']['lm']['path']}"]
        resolved = print_config(capsys, *configs(*parts.values()), *extra)
    else:  # quickstart.yaml, configs/toy/..., any other folder: parsed alone, with the subcommand of its header
        subcommand = "fit" if "lightning-edit fit" in config.read_text() else "validate"
        resolved = print_config(capsys, *configs(config), subcommand=subcommand)
    assert resolved["model"]["class_path"]
    if kind == "methods":
        assert resolved["model"]["class_path"] == data["model"]["class_path"]
    if kind == "models":
        init_args = resolved["model"]["init_args"]
        assert init_args["lm"]["path"] == data["model"]["init_args"]["lm"]["path"]
        memit = editor_arguments(data, MEMIT)  # DEFAULTS' method
        assert init_args["layers"] == memit["layers"] and init_args["mom2_update_weight"] == memit["mom2_update_weight"]
    if kind == "benchmarks":
        assert resolved["data"]["class_path"] == data["data"]["class_path"]


def test_quickstart_is_rome_with_the_toy_gpt2_preset(capsys):
    """quickstart.yaml writes out the ROME run of configs/methods/rome.yaml + configs/models/toy-gpt2.yaml."""
    quickstart = print_config(capsys, *configs(CONFIG_DIR / "quickstart.yaml"))
    composed = print_config(
        capsys,
        *configs(CONFIG_DIR / "methods/rome.yaml", CONFIG_DIR / "models/toy-gpt2.yaml", DEFAULTS["benchmarks"]),
        "--data.path=builtin:data/toy/counterfact.json",
        "--data.limit=50",
    )
    assert quickstart["model"] == composed["model"]
    assert quickstart["data"] == composed["data"]


@pytest.mark.parametrize("preset", PRESETS, ids=config_id)
def test_model_preset_sets_only_shared_arguments(preset):
    """A preset sets the model, and per editor class its sites and per-model values, never the class."""
    data = load(preset)
    assert set(data) == {"model"} and set(data["model"]) == {"init_args", "editors"}, "a preset never sets the class"
    init_args, editors = data["model"]["init_args"], data["model"]["editors"]
    assert set(init_args) == PRESET_KEYS and init_args["lm"]["path"]
    assert set(editors) <= PRESET_EDITORS, f"{preset.name} has sections {set(editors) - PRESET_EDITORS}"
    compose_presets(["validate", "--config", str(preset)])  # each section's keys: arguments of its class
    memit_layers = editors["MEMIT"]["layers"]
    assert memit_layers == sorted(set(memit_layers)) and editors["ROME"]["layer"] >= 0
    TargetOptimization(**editors.get("LocateThenEdit", {}).get("target", {}))  # only real fields


@pytest.mark.parametrize("preset", PRESETS, ids=config_id)
def test_no_edit_baseline_of_a_preset_run(preset, capsys):
    """NoEdit takes the preset's model and nothing else; so does ``--model NoEdit`` after a method's configs."""
    benchmark = DEFAULTS["benchmarks"]
    lm = load(preset)["model"]["init_args"]["lm"]
    sectioned = {key for section in load(preset)["model"]["editors"].values() for key in section}
    composed = print_config(capsys, *configs(CONFIG_DIR / "methods/no_edit.yaml", preset, benchmark))
    assert composed["model"]["class_path"] == "lightning_edit.editors.NoEdit"
    assert {key: composed["model"]["init_args"]["lm"][key] for key in lm} == lm
    assert not sectioned & set(composed["model"]["init_args"])

    resolved = print_config(capsys, *configs(CONFIG_DIR / "methods/rome.yaml", preset, benchmark), "--model=NoEdit")
    init_args = resolved["model"]["init_args"]
    assert resolved["model"]["class_path"] == "lightning_edit.editors.NoEdit"
    assert {key: init_args["lm"][key] for key in lm} == lm
    assert not sectioned & set(init_args)
    assert init_args["protocol"] == load(CONFIG_DIR / "methods/rome.yaml")["model"]["init_args"]["protocol"]


# ----------------------------------------------------------------------------------------------------------------
# Every model preset x every locate-then-edit method, on a shape-reduced model of the preset's architecture


def _tiny_config(family: str, num_layers: int, tokenizer) -> object:
    common = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    llama_like = dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        **common,
    )
    if family == "gpt2":
        return GPT2Config(n_embd=16, n_layer=num_layers, n_head=2, n_positions=128, **common)
    if family == "gptj":
        return GPTJConfig(n_embd=16, n_layer=num_layers, n_head=2, rotary_dim=4, n_positions=128, **common)
    if family == "llama":
        return LlamaConfig(tie_word_embeddings=False, **llama_like)
    if family == "qwen2":
        return Qwen2Config(**llama_like)
    if family == "qwen3":
        return Qwen3Config(head_dim=8, **llama_like)
    if family == "gemma3_text":
        return Gemma3TextConfig(head_dim=8, **llama_like)
    raise ValueError(f"no tiny config for family {family!r}")


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """``(family, num_layers) -> directory`` of a tiny random model (hidden size 16) and tokenizer, built once."""
    tokenizers, directories = {}, {}

    def build(family: str, num_layers: int) -> Path:
        if (family, num_layers) not in directories:
            style = TOKENIZER_STYLE[family]
            if style not in tokenizers:
                tokenizers[style] = train_tokenizer(builtin_texts(), style, vocab_size=300)
            tokenizer = tokenizers[style]
            directory = tmp_path_factory.mktemp(f"{family}-{num_layers}-layers")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = AutoModelForCausalLM.from_config(_tiny_config(family, num_layers, tokenizer))
            model.save_pretrained(directory)
            tokenizer.save_pretrained(directory)
            directories[family, num_layers] = directory
        return directories[family, num_layers]

    return build


def preset_model(preset: Path, tiny_model_dir) -> tuple[str, int]:
    """(model directory, expected number of layers) to check ``preset`` against."""
    path = load(preset)["model"]["init_args"]["lm"]["path"]
    if preset.stem in ARCHITECTURES:
        family, num_layers = ARCHITECTURES[preset.stem]
        return str(tiny_model_dir(family, num_layers)), num_layers
    local = resolve_path(path)
    if not (local / "config.json").is_file():
        pytest.fail(f"{preset.name}: lm.path {path!r} is no local model; add its architecture to ARCHITECTURES")
    config = yaml.safe_load((local / "config.json").read_text())  # JSON is YAML
    return path, config.get("num_hidden_layers") or config["n_layer"]


@pytest.mark.parametrize("method", sorted(LOCATE_METHODS))
@pytest.mark.parametrize("preset", PRESETS, ids=config_id)
def test_locate_method_on_preset_architecture(method, preset, tiny_model_dir, capsys):
    """The composed config resolves (preset values over method defaults) and the editor instantiates on the model."""
    directory, num_layers = preset_model(preset, tiny_model_dir)
    method_config = load(CONFIG_DIR / f"methods/{method}.yaml")["model"]
    preset_args = editor_arguments(load(preset), LOCATE_METHODS[method])
    resolved = print_config(
        capsys,
        *configs(CONFIG_DIR / f"methods/{method}.yaml", preset, DEFAULTS["benchmarks"]),
        f"--model.lm.path={directory}",
        "--model.stats.corpus=corpus.txt",
    )
    model_config = resolved["model"]
    init_args = model_config["init_args"]
    assert model_config["class_path"] == method_config["class_path"]
    assert init_args["lm"] == {**init_args["lm"], **preset_args["lm"], "path": directory}
    assert init_args["target"] == {**method_config["init_args"]["target"], **preset_args.get("target", {})}
    assert init_args["stats"]["corpus"] == "corpus.txt"
    for own in ("layer", "layers", "mom2_update_weight", "fact_token", "template_lengths"):
        if own in preset_args:
            assert init_args[own] == preset_args[own]

    editor = instantiate_model(model_config)
    assert type(editor) is LOCATE_METHODS[method]
    assert editor.arch.num_layers == num_layers and editor.arch.family == editor.model.config.model_type
    target = init_args["target"]
    assert editor.target == TargetOptimization(**{**target, "kl_prompts": tuple(target["kl_prompts"])})
    parameters = dict(editor.model.named_parameters())
    if isinstance(editor, ROME):
        assert editor.layer == preset_args["layer"] and editor.weight_name in parameters
    else:
        assert editor.layers == preset_args["layers"]
        assert editor.mom2_update_weight == preset_args["mom2_update_weight"]
        assert all(name in parameters for name in editor.weight_names)


@pytest.mark.parametrize("method", sorted(LOCATE_METHODS))
def test_site_outside_the_model_raises(method, tiny_model_dir, capsys):
    """The check above bites: gpt2-xl's sites (layers 13-17) on a 12-layer GPT-2 do not resolve."""
    directory = tiny_model_dir("gpt2", 12)
    resolved = print_config(
        capsys,
        *configs(CONFIG_DIR / f"methods/{method}.yaml", CONFIG_DIR / "models/gpt2-xl.yaml"),
        f"--model.lm.path={directory}",
    )
    with pytest.raises(ValueError, match="Layer 1[3-7] out of range for a 12-layer gpt2 model") as error:
        instantiate_model(resolved["model"])  # jsonargparse wraps the editor's IndexError
    assert isinstance(error.value.__cause__, IndexError)


#: The fine-tuning editors, RECT and any other method with a site (configs/methods/<name>.yaml -> its class): each
#: takes the preset's sections of its classes.
OTHER_METHODS = {"ft": FT, "ft_l": FT, "ft_m": FT, "lora": LoRA, "rect": ROME}


@pytest.mark.parametrize("method", sorted(OTHER_METHODS))
@pytest.mark.parametrize("preset", PRESETS, ids=config_id)
def test_other_method_on_preset_architecture(method, preset, tiny_model_dir, capsys):
    """FT, FT-L, FT-M, LoRA and RECT compose with every preset and edit sites of the real model's layers."""
    directory, num_layers = preset_model(preset, tiny_model_dir)
    preset_args = editor_arguments(load(preset), OTHER_METHODS[method])
    resolved = print_config(
        capsys,
        *configs(CONFIG_DIR / f"methods/{method}.yaml", preset, DEFAULTS["benchmarks"]),
        f"--model.lm.path={directory}",
    )
    init_args = resolved["model"]["init_args"]
    assert {own: init_args[own] for own in ("layer", "layers") if own in preset_args} == {
        own: preset_args[own] for own in ("layer", "layers") if own in preset_args
    }
    editor = instantiate_model(resolved["model"])
    assert isinstance(editor, OTHER_METHODS[method]) and editor.arch.num_layers == num_layers
    parameters = dict(editor.model.named_parameters())
    if isinstance(editor, FT):
        assert editor.parameter_names and set(editor.parameter_names) <= set(parameters)
        assert {int(name.split(".")[-4]) for name in editor.parameter_names} == set(init_args["layers"])
    elif isinstance(editor, LoRA):
        assert all(editor.model.get_submodule(name) is not None for name in editor.module_names)
    elif isinstance(editor, ROME):
        assert editor.weight_name in parameters and editor.layer == preset_args["layer"]
        assert isinstance(editor.update_filter, RECT)


# ----------------------------------------------------------------------------------------------------------------
# Batch sizes are named by their unit


@pytest.mark.parametrize(
    "method, setting, old",
    [
        ("memit", "scoring.sequences_per_forward", "scoring.batch_size"),
        ("memit", "stats.documents_per_forward", "stats.batch_size"),
        ("ike", "in_context.texts_per_forward", "in_context.batch_size"),
    ],
)
def test_a_batch_size_is_set_by_its_unit_name_only(method, setting, old, capsys):
    """The unit-named setting resolves; its old name ``batch_size`` is jsonargparse's own error, not an alias."""
    lm = "--model.lm.path=builtin:models/tiny-gpt2"
    args = [*configs(CONFIG_DIR / f"methods/{method}.yaml", DEFAULTS["benchmarks"]), lm]
    section, name = setting.split(".")
    assert print_config(capsys, *args, f"--model.{setting}=3")["model"]["init_args"][section][name] == 3
    with pytest.raises(SystemExit) as exit_info:
        build_cli(["validate", *args, f"--model.{old}=3", "--print_config"])
    error = capsys.readouterr().err.split("error:", 1)[-1]
    assert exit_info.value.code == 2 and "batch_size" in error, error
