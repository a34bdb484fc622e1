"""Model fingerprints: what the key statistics of a layer depend on, hashed — never the model folder's name.

``model_fingerprint(model, layer)`` is the sha256 of

- the model config as canonical JSON, without the keys that name or place the model or only steer outputs
  (``_name_or_path``, ``transformers_version``, ``dtype``, ``use_cache``, ``output_*``, ``return_dict``, ...), and
- for every parameter that can influence the input of layer ``layer``'s MLP output projection — all parameters
  except those of decoder blocks deeper than ``layer`` (embeddings, final norm and unembedding are included;
  harmless, and it keeps tied weights simple) — its name, shape, dtype, a strided sample of at most
  :data:`SAMPLE_SIZE` elements (raw bytes) and the int64 sum of its raw bit patterns.

The bit-pattern sum reads every element, so any single-weight change alters the fingerprint; being an integer
sum it is exact and independent of the device, thread count and reduction order. The cost is one pass of
integer adds over the weights and a tiny device-to-host copy per tensor (seconds for an 8B model). Two weight
changes that cancel in the sum and miss the sample would go unnoticed; edits never look like that.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

import torch
from torch import nn

from lightning_edit.models.placement import named_whole
from lightning_edit.models.registry import resolve_architecture

SAMPLE_SIZE = 4096
_VOLATILE_CONFIG_KEYS = {
    "transformers_version",
    "dtype",
    "torch_dtype",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
}
_BIT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int32}  # element size -> integer view


def config_digest(model: nn.Module) -> str:
    """sha256 of the model config as canonical JSON, without naming/runtime keys."""
    config = {
        key: value
        for key, value in model.config.to_dict().items()
        if not key.startswith("_") and key not in _VOLATILE_CONFIG_KEYS
    }
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def sample_index(numel: int) -> torch.Tensor:
    """``min(SAMPLE_SIZE, numel)`` evenly spaced indices from 0 to ``numel - 1``, in exact integer arithmetic (a
    float32 spacing rounds past the end of tensors of more than 2^24 elements, such as a 49,152 x 576 embedding)."""
    count = min(SAMPLE_SIZE, numel)
    return torch.arange(count, dtype=torch.int64) * max(numel - 1, 0) // max(count - 1, 1)


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's shape, dtype, strided sample and exact bit-pattern sum (see module docstring)."""
    flat = tensor.detach().contiguous().reshape(-1)
    bits = flat.view(_BIT_VIEW[flat.element_size()]) if flat.numel() else flat.new_zeros(0, dtype=torch.int8)
    bit_sum = int(bits.sum(dtype=torch.int64).item())
    sample = bits[sample_index(bits.numel()).to(bits.device)].cpu().numpy().tobytes()
    digest = hashlib.sha256(f"{tuple(tensor.shape)}|{tensor.dtype}|{bit_sum}|".encode())
    digest.update(sample)
    return digest.hexdigest()


def _block_index(name: str, block_prefix: str) -> int | None:
    if not name.startswith(block_prefix):
        return None
    head = name[len(block_prefix) :].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def model_fingerprints(model: nn.Module, layers: Iterable[int]) -> dict[int, str]:
    """``{layer: fingerprint}`` for each layer; each parameter is read once however many layers are asked for."""
    layers = sorted(set(layers))
    if not layers:
        return {}
    prefix = resolve_architecture(model).spec.blocks.split("{}")[0]
    depth = {name: _block_index(name, prefix) for name, _ in model.named_parameters()}
    digests = {
        name: tensor_digest(named_whole(model, name))
        for name in depth
        if depth[name] is None or depth[name] <= layers[-1]
    }
    base = config_digest(model)
    fingerprints = {}
    for layer in layers:
        digest = hashlib.sha256(base.encode())
        for name in sorted(digests):
            if depth[name] is None or depth[name] <= layer:
                digest.update(f"\n{name}={digests[name]}".encode())
        fingerprints[layer] = digest.hexdigest()
    return fingerprints


def weights_digest(model: nn.Module) -> str:
    """sha256 of the config (as :func:`config_digest`) and of every parameter (:func:`tensor_digest`): the whole
    model's weights, whatever folder they were read from."""
    digest = hashlib.sha256(config_digest(model).encode())
    for name in sorted(name for name, _ in model.named_parameters()):
        digest.update(f"\n{name}={tensor_digest(named_whole(model, name))}".encode())
    return digest.hexdigest()


def model_fingerprint(model: nn.Module, layer: int) -> str:
    """Fingerprint of everything the statistics of ``layer`` depend on (see module docstring)."""
    return model_fingerprints(model, [layer])[layer]
