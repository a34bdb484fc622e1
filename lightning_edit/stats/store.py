"""Checksummed cache entries: ``<stem>.safetensors`` (tensors) + ``<stem>.json`` (metadata), no pickles.

The JSON records the metadata, ``sha256`` of the safetensors file bytes and ``metadata_sha256`` of the metadata
itself (canonical JSON), so a truncated or altered tensor file and an edited metadata file are both detected.
:func:`read_entry` also compares the metadata against the fields the caller expects (model fingerprint, layer,
corpus, ...). Any failure is logged and reported as "no entry": a bad entry is never used, and the caller
recomputes and overwrites it. Files are written to a temporary name and renamed into place (a reader never sees a
half-written file; a crash between the two renames leaves a checksum mismatch, detected as above).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1


def canonical_sha256(payload: Mapping[str, Any]) -> str:
    """sha256 of ``payload`` as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def paths(stem: Path) -> tuple[Path, Path]:
    """``(tensor file, metadata file)`` of an entry."""
    return stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".json")


def write_entry(stem: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any]) -> None:
    """Write ``tensors`` and ``metadata`` (JSON-serialisable) under ``stem``."""
    tensor_path, meta_path = paths(stem)
    tensor_path.parent.mkdir(parents=True, exist_ok=True)
    data = save_safetensors({name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()})
    record = {"format_version": FORMAT_VERSION, **metadata}
    record["tensors"] = {name: {"shape": list(t.shape), "dtype": str(t.dtype)} for name, t in tensors.items()}
    record["sha256"] = hashlib.sha256(data).hexdigest()
    record = json.loads(json.dumps(record, default=str))  # hash exactly what a reader will parse
    record["metadata_sha256"] = canonical_sha256(record)
    _write_atomic(tensor_path, data)
    _write_atomic(meta_path, json.dumps(record, indent=2, sort_keys=True, default=str).encode("utf-8"))


def remove_entry(stem: Path) -> None:
    for path in paths(stem):
        path.unlink(missing_ok=True)


def read_entry(stem: Path, expected: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """``(tensors, metadata)`` of a valid entry, or ``None`` if absent or invalid (logged as a warning).

    Args:
        stem: Entry path without suffix.
        expected: Metadata fields that must be equal (after a JSON round-trip) for the entry to be used.
    """
    tensor_path, meta_path = paths(stem)
    if not tensor_path.exists() and not meta_path.exists():
        return None
    try:
        return _read_checked(tensor_path, meta_path, expected)
    except (OSError, ValueError, KeyError, TypeError) as error:  # json and safetensors errors are ValueErrors
        logger.warning("ignoring cache entry %s (will recompute): %s", stem, error)
        return None


def _read_checked(tensor_path: Path, meta_path: Path, expected: Mapping[str, Any]) -> tuple[dict, dict]:
    record = json.loads(meta_path.read_text(encoding="utf-8"))
    if not isinstance(record, dict):
        raise ValueError("metadata is not a JSON object")
    unsigned = {key: value for key, value in record.items() if key != "metadata_sha256"}
    if record.get("metadata_sha256") != canonical_sha256(unsigned):
        raise ValueError("metadata checksum mismatch (metadata file altered or corrupt)")
    if record.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"format version {record.get('format_version')} != {FORMAT_VERSION}")
    wanted = json.loads(json.dumps(dict(expected), default=str))
    for key, value in wanted.items():
        if record.get(key) != value:
            raise ValueError(f"metadata mismatch for {key!r}: cached {record.get(key)!r}, expected {value!r}")
    data = tensor_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise ValueError("tensor file checksum mismatch (truncated or corrupt)")
    tensors = load_safetensors(data)
    described = record["tensors"]
    if set(tensors) != set(described):
        raise ValueError(f"tensor names {sorted(tensors)} != {sorted(described)}")
    for name, tensor in tensors.items():
        if list(tensor.shape) != described[name]["shape"] or str(tensor.dtype) != described[name]["dtype"]:
            raise ValueError(f"tensor {name!r} is {tensor.dtype}{list(tensor.shape)}, metadata says {described[name]}")
    return tensors, record
