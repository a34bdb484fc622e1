"""Load a causal language model and its tokenizer from a local directory, a GGUF file or a Hugging Face hub id."""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.errors import ConfigError, UserError, refused_weights
from lightning_edit.models.checks import pad_token, weight_faults
from lightning_edit.models.gguf import converted_folder, gguf_file
from lightning_edit.models.placement import PLACEMENT_STRATEGIES, check_device, check_placement
from lightning_edit.resources import resolve_path

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class ModelNotFoundError(UserError, OSError):
    """A model id that is neither a local directory nor reachable on the hub."""


class ModelLoadError(UserError, ValueError):
    """A model directory whose files cannot be loaded (corrupt weights, an architecture transformers does not know,
    weights missing, unexpected or of the wrong shape, a tokenizer without a token to pad with)."""


@dataclass
class ModelSource:
    """Which causal LM to load, and how.

    Args:
        path: a local directory (``save_pretrained`` layout), ``builtin:models/<name>`` for a model that ships with
            lightning-edit, a ``.gguf`` file or a folder holding one, ``gguf:<name>`` for a real model that a Python
            package ships (``gguf:smollm2-135m-instruct``, ``gguf:gemma-3-270m``; :mod:`lightning_edit.models.gguf`),
            or a Hugging Face hub id (needs network, or the hub cache with ``HF_HUB_OFFLINE=1``).
        dtype: weight dtype: float32, float16, bfloat16, or auto (the checkpoint's own; float32 for a GGUF file,
            whose weights are dequantized).
        revision: hub revision (branch, tag or commit) for a hub id.
        trust_remote_code: run modelling code shipped with the checkpoint. Off by default: only turn it on for
            checkpoints you trust.
        random_init_seed: build the model from the directory's ``config.json`` with random weights, seeded, instead
            of loading weights (for shape-reduced test models and smoke runs).
        device_map: spread the model's layers over devices in one process (accelerate's big-model inference, as
            EasyEdit's ``device_map="auto"``): ``auto`` / ``balanced`` / ``balanced_low_0`` / ``sequential``, or a
            map from module names to a GPU index, ``cpu`` or ``disk`` (docs/sharding.md#device-map). Only editors
            that read and write weights whole run on such a model.
        max_memory: with a device_map by name, the memory each device may hold, e.g. ``{0: 20GiB, cpu: 60GiB}``;
            what does not fit goes to disk.
        offload_folder: where weights mapped to ``disk`` are written when the checkpoint cannot be read in place
            (safetensors checkpoints are read in place; nothing is ever written to them).
    """

    path: str
    dtype: Literal["float32", "float16", "bfloat16", "auto"] = "float32"
    revision: str | None = None
    trust_remote_code: bool = False
    random_init_seed: int | None = None
    device_map: str | dict[str, int | str] | None = None
    max_memory: dict[int | str, str] | None = None
    offload_folder: str | None = None

    def __post_init__(self):
        if isinstance(self.device_map, str) and self.device_map not in PLACEMENT_STRATEGIES:
            check_device("lm.device_map", self.device_map)
        for module, device in self.device_map.items() if isinstance(self.device_map, dict) else ():
            check_device(f"lm.device_map[{module!r}]", device)
        if self.device_map is not None and self.random_init_seed is not None:
            raise ConfigError("lm.device_map places a checkpoint's weights, which lm.random_init_seed replaces: one")
        if self.max_memory is not None and not isinstance(self.device_map, str):
            raise ConfigError("lm.max_memory sizes the devices of a device_map by name (auto, balanced, sequential)")


def _location(source: ModelSource) -> str:
    gguf = gguf_file(source.path)
    if gguf is not None:
        return str(converted_folder(gguf))
    path = resolve_path(source.path)
    if path.is_dir():
        return str(path)
    if str(source.path).startswith(("builtin:", "/", ".", "~")):
        raise ModelNotFoundError(f"model directory {source.path!r} not found ({path})")
    return str(source.path)


def load_tokenizer(source: ModelSource) -> PreTrainedTokenizerBase:
    """The tokenizer, with a pad token (falls back to EOS, then UNK) so that batches can be padded."""
    location = _location(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            location, revision=source.revision, trust_remote_code=source.trust_remote_code
        )
    except OSError as error:
        raise ModelNotFoundError(_not_found(location, error)) from error
    tokenizer.pad_token = pad_token(tokenizer)
    if tokenizer.pad_token is None:
        raise ModelLoadError(f"tokenizer of model {location!r} has no pad, eos or unk token to pad batches with")
    return tokenizer


def load_model(source: ModelSource, device: str | torch.device | None = None) -> PreTrainedModel:
    """The model in eval mode, on ``device`` (CPU if None), in the requested dtype; refused when a weight is missing
    from the checkpoint, of the wrong shape, or a tensor of it fits no weight (:mod:`lightning_edit.models.checks`)."""
    location = _location(source)
    dtype = "auto" if source.dtype == "auto" else DTYPES[source.dtype]
    common = dict(revision=source.revision, trust_remote_code=source.trust_remote_code)
    placement = dict(device_map=source.device_map, max_memory=source.max_memory)
    if source.offload_folder is not None:
        placement["offload_folder"] = _writable(source.offload_folder)
    info = {}
    try:
        if source.random_init_seed is None:
            model, info = AutoModelForCausalLM.from_pretrained(
                location, dtype=dtype, output_loading_info=True, ignore_mismatched_sizes=True, **placement, **common
            )
        else:
            config = AutoConfig.from_pretrained(location, **common)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(source.random_init_seed)
                model = AutoModelForCausalLM.from_config(config, trust_remote_code=source.trust_remote_code)
            if dtype != "auto":
                model = model.to(dtype)
    except OSError as error:
        raise ModelNotFoundError(_not_found(location, error)) from error
    except SafetensorError as error:
        files = sorted(str(path) for path in Path(location).glob("*.safetensors")) or [location]
        raise ModelLoadError(
            f"cannot read the weights of model {location!r} ({', '.join(files)}): {error}. The file is corrupt or "
            "truncated: download or save the model again"
        ) from error
    except pickle.UnpicklingError as error:  # a pytorch_model.bin that torch's weights_only loader refused
        files = sorted(str(path) for path in Path(location).glob("*.bin")) or [location]
        raise ModelLoadError(refused_weights(", ".join(files), error)) from error
    except ValueError as error:  # e.g. a config.json of an architecture transformers does not know
        raise ModelLoadError(f"cannot load model {location!r}: {str(error).splitlines()[0]}") from error
    except RuntimeError as error:  # e.g. a device map naming a GPU this machine does not have
        if source.device_map is None:
            raise
        raise ModelLoadError(
            f"cannot place model {location!r} by lm.device_map={source.device_map!r}: {str(error).splitlines()[0]}"
        ) from error
    faults = weight_faults(info)
    if faults is not None:
        raise ModelLoadError(
            f"cannot load model {location!r}: refused, its weights do not make the model: {faults}. The checkpoint "
            "is incomplete or of another architecture"
        )
    if source.device_map is not None:
        check_placement(model, source)
    elif device is not None:
        model = model.to(device)
    return model.eval()


def load_model_and_tokenizer(
    source: ModelSource, device: str | torch.device | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_model(source, device), load_tokenizer(source)


def _writable(setting: str) -> str:
    """The offload folder, made if needed and checked to be writable before any weight is loaded."""
    folder = resolve_path(setting)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(
            f"lm.offload_folder={setting!r}: cannot write to {str(folder)!r} ({error.strerror or error}): name a "
            "folder this process can write"
        ) from error
    return str(folder)


def _not_found(location: str, error: OSError) -> str:
    if Path(location).is_dir():
        return f"cannot read model directory {location!r}: {error}"
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    hint = (
        "the hub is offline (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE) and the id is not in the local cache"
        if offline
        else "it is not a local directory and could not be fetched from the Hugging Face hub (no network?)"
    )
    return f"cannot load model {location!r}: {hint}. Pass a local directory saved with save_pretrained. ({error})"
