"""Checkpoints of a sequential stream: what a stopped stream needs to go on, in one safetensors file with a digest.

A checkpoint holds the edited parameters as they are (only those the editor changes), the editor's own stream state
(:meth:`~lightning_edit.editors.base.EditorModule.stream_state`), the position in the stream, the ``@n`` scores and
answers and the ``stream`` records computed so far (every process's), the random states, and the identity of the run
that wrote it (editor and settings, model, cases in order). Tensors are safetensors, everything else JSON in its
metadata; nothing is pickled. It is written to a temporary file and renamed, so a stop while writing leaves the
previous checkpoint whole, and its SHA-256 over tensors and metadata is checked when read (docs/protocols.md#resumable-
streams).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning
import numpy as np
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from lightning_edit.errors import ConfigError
from lightning_edit.models.placement import is_offloaded, named_whole, set_offloaded

FORMAT = "lightning-edit stream checkpoint 1"
FILE_NAME = "stream_checkpoint.safetensors"
#: the key under which :class:`StreamCheckpointIO` hands Lightning's ``on_load_checkpoint`` a stream checkpoint's path
CHECKPOINT_KEY = "lightning_edit_stream_checkpoint"


@dataclass
class StreamCheckpoint:
    """What a checkpoint holds; ``tensors`` are keyed ``parameter/<name>``, ``editor/<key>``,
    ``metric/<metric>/<state>`` and ``random/<generator>``."""

    identity: dict[str, str]
    position: int  # cases applied
    edit_seconds: float
    stream: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, dict[int, dict[int, str]]] = field(default_factory=dict)
    python_random: list[Any] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    editor: dict[str, Any] = field(default_factory=dict)  # the editor's stream state that is not tensors (JSON)

    def editor_state(self) -> dict[str, Any]:
        """The editor's stream state: its tensors and its JSON part."""
        return self.part("editor") | self.editor

    def part(self, prefix: str) -> dict[str, Tensor]:
        """The tensors under ``<prefix>/``, keyed by the rest of their names."""
        return {name[len(prefix) + 1 :]: value for name, value in self.tensors.items() if name.startswith(prefix + "/")}


def _metadata(checkpoint: StreamCheckpoint) -> dict[str, str]:
    return {
        "format": FORMAT,
        "identity": json.dumps(checkpoint.identity, sort_keys=True),
        "position": str(checkpoint.position),
        "edit_seconds": repr(checkpoint.edit_seconds),
        "stream": json.dumps(checkpoint.stream),
        "answers": json.dumps(checkpoint.answers),
        "python_random": json.dumps(checkpoint.python_random),
        "editor": json.dumps(checkpoint.editor),
    }


def _digest(metadata: dict[str, str], tensors: dict[str, Tensor]) -> str:
    """SHA-256 over the metadata (JSON, sorted keys) and each tensor's name, dtype, shape and bytes, sorted by name."""
    sha = hashlib.sha256(json.dumps(metadata, sort_keys=True).encode())
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()  # one at a time: a device's tensors are not all copied
        sha.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        sha.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return sha.hexdigest()


def write_checkpoint(path: Path, checkpoint: StreamCheckpoint) -> None:
    """Write ``checkpoint`` to ``path`` atomically (a temporary file beside it, synced, then renamed)."""
    tensors = {name: value.detach().cpu().contiguous() for name, value in checkpoint.tensors.items()}
    metadata = _metadata(checkpoint)
    metadata["sha256"] = _digest(metadata, tensors)
    temporary = path.with_name(path.name + ".tmp")
    save_file(tensors, str(temporary), metadata=metadata)
    with open(temporary, "rb") as written:
        os.fsync(written.fileno())
    os.replace(temporary, path)


def read_checkpoint(path: str | Path) -> StreamCheckpoint:
    """Read and verify a checkpoint; a :class:`~lightning_edit.errors.ConfigError` in one line if it is missing,
    truncated, not a stream checkpoint, or corrupt (its digest does not match its contents)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"ckpt_path={str(path)!r}: no such stream checkpoint")
    try:
        with safe_open(str(path), framework="pt") as opened:
            metadata = dict(opened.metadata() or {})
            tensors = {name: opened.get_tensor(name) for name in opened.keys()}  # noqa: SIM118 (not a dict)
    except (SafetensorError, OSError, ValueError) as error:
        raise ConfigError(f"{path}: not a complete stream checkpoint (truncated or not safetensors: {error})") from None
    if metadata.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a lightning-edit stream checkpoint (format {metadata.get('format')!r})")
    expected = metadata.pop("sha256", None)
    if expected != _digest(metadata, tensors):
        raise ConfigError(f"{path}: corrupt stream checkpoint: its SHA-256 does not match its contents")
    answers = json.loads(metadata["answers"])
    return StreamCheckpoint(
        identity=json.loads(metadata["identity"]),
        position=int(metadata["position"]),
        edit_seconds=float(metadata["edit_seconds"]),
        stream=json.loads(metadata["stream"]),
        answers={
            m: {int(c): {int(i): t for i, t in texts.items()} for c, texts in by_case.items()}
            for m, by_case in answers.items()
        },  # fmt: skip
        python_random=json.loads(metadata["python_random"]),
        tensors=tensors,
        editor=json.loads(metadata["editor"]),
    )


def check_identity(path: str | Path, written: dict[str, str], here: dict[str, str]) -> None:
    """A :class:`~lightning_edit.errors.ConfigError` naming what differs when the checkpoint's run is not this one."""
    differs = [key for key in sorted(set(written) | set(here)) if written.get(key) != here.get(key)]
    if differs:
        shown = "; ".join(
            f"{key}: {_short(here.get(key))} here, {_short(written.get(key))} in it" for key in differs[:2]
        )
        more = f" (and {len(differs) - 2} more)" if len(differs) > 2 else ""
        raise ConfigError(f"{path} was written by another run: {shown}{more}; resume with the command that wrote it")


def _short(value: str | None, limit: int = 60) -> str:
    if value is None:
        return "nothing"
    return value if len(value) <= limit else value[: limit - 3] + "..."


def random_states() -> tuple[dict[str, Tensor], list[Any]]:
    """The generators' states: torch's (CPU, and each CUDA device's once CUDA is initialised) and numpy's as
    tensors, Python's as JSON."""
    tensors = {"random/torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors |= {f"random/cuda/{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())}
    kind, keys, position, has_gauss, cached = np.random.get_state()
    tensors["random/numpy"] = torch.from_numpy(keys.astype(np.int64))
    version, state, gauss = random.getstate()
    return tensors, [version, list(state), gauss, [kind, position, has_gauss, cached]]


def set_random_states(tensors: dict[str, Tensor], python: list[Any]) -> None:
    """Put back what :func:`random_states` returned."""
    torch.set_rng_state(tensors["torch"])
    cuda = sorted((int(name.split("/")[1]), state) for name, state in tensors.items() if name.startswith("cuda/"))
    if cuda:
        torch.cuda.set_rng_state_all([state for _, state in cuda])
    version, state, gauss, (kind, position, has_gauss, cached) = python
    random.setstate((version, tuple(state), gauss))
    np.random.set_state((kind, tensors["numpy"].numpy().astype(np.uint32), position, has_gauss, cached))


def cases_digest(cases: list[Any]) -> str:
    """SHA-256 of the cases in order (each its full ``repr``: requests, prompt groups, source)."""
    return hashlib.sha256("\n".join(repr(case) for case in cases).encode()).hexdigest()


def is_stream_checkpoint(path: Any) -> bool:
    """Whether a ``--ckpt_path`` names a stream checkpoint (a safetensors file; Lightning writes ``.ckpt``)."""
    return str(path).endswith(".safetensors")


class StreamCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO (the default of ``lightning-edit``'s trainer), which also opens a sequential
    stream's checkpoint given as ``--ckpt_path``: it hands the editor its path (``on_load_checkpoint``), which reads
    and verifies it before any edit; other checkpoints load as Lightning loads them."""

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        if is_stream_checkpoint(path):
            return {"state_dict": {}, "pytorch-lightning_version": lightning.__version__, CHECKPOINT_KEY: str(path)}
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)


def parameter_values(model: nn.Module, names: list[str]) -> dict[str, Tensor]:
    """The named parameters' values, whole (an offloaded one's read from where its device map keeps it)."""
    return {name: named_whole(model, name).detach() for name in names}


@torch.no_grad()
def load_parameters(model: nn.Module, values: dict[str, Tensor]) -> None:
    """Write ``values`` into the named parameters in place (an offloaded one where its device map reads it)."""
    for name, value in values.items():
        param = model.get_parameter(name)
        owner, _, attribute = name.rpartition(".")
        if is_offloaded(param):
            set_offloaded(model.get_submodule(owner), attribute, value)
        else:
            param.copy_(value)


def parameters_digest(values: dict[str, Tensor]) -> str:
    """SHA-256 of named tensors (name, dtype, shape and bytes, sorted by name): the unedited model's identity."""
    return _digest({}, values)
