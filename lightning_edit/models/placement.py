"""Where a model's weights are, and how an editor reads and writes them wherever that is.

A parameter is either

- a tensor of this process (the usual case): read and written as it is;
- sharded over processes by FSDP2 (``ModelParallelStrategy``, :mod:`lightning_edit.models.sharding`): a ``DTensor``
  of which each process holds some rows; read gathered, written shard-wise (process 0's update is scattered, so
  every process writes its slice of one update);
- offloaded by a device map (``lm.device_map`` with ``disk`` entries, or ``cpu`` beside GPUs: accelerate's big-model
  inference, docs/sharding.md#device-map): an empty ``meta`` tensor, whose value accelerate's hook on its module
  loads before each forward from a weights map (the checkpoint file, the offload folder, or CPU memory). It is read
  from that map, and an edited value is put in the map's memory, where the hook looks first: the checkpoint and the
  offload folder are never written.

:func:`whole` (:func:`named_whole`: by name) reads a parameter whole, :func:`add_to_weight` adds an update computed
whole, :func:`set_offloaded` replaces an offloaded value (undo).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor, distribute_tensor

from lightning_edit.errors import ConfigError


def is_dispatched(model: nn.Module) -> bool:
    """Whether ``model`` was loaded with a device map (its layers placed by accelerate's hooks)."""
    return bool(getattr(model, "hf_device_map", None))


def is_offloaded(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a parameter a device map offloaded (empty, on the meta device)."""
    return not isinstance(tensor, DTensor) and tensor.is_meta


#: device maps by name: accelerate places the modules (``max_memory`` bounds each device)
PLACEMENT_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device(setting: str, device: int | str) -> None:
    """A device map's device: a GPU index, ``disk``, or a torch device name (``cpu``, ``cuda:1``)."""
    if isinstance(device, int) or device == "disk":
        return
    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{setting}={device!r}: a GPU index, cpu, disk or a torch device name") from None


def check_placement(model: nn.Module, source: Any) -> None:
    """A map names modules of the model and places every parameter; the input embeddings stay on a device
    (batches are put where they are)."""
    if isinstance(source.device_map, dict):
        modules = dict(model.named_modules())
        for key in source.device_map:
            if key not in modules:
                children = ", ".join(name for name, _ in model.named_children())
                raise ConfigError(f"lm.device_map names {key!r}, not a module of the model (its children: {children})")
        for name, _ in model.named_parameters():
            if not any(key in ("", name) or name.startswith(key + ".") for key in source.device_map):
                raise ConfigError(f"lm.device_map places no module holding the parameter {name}")
    if model.get_input_embeddings().weight.is_meta:
        raise ConfigError(
            f"lm.device_map={source.device_map!r} offloads the input embeddings (hf_device_map: "
            f"{model.hf_device_map}): map them to a GPU or cpu"
        )


def _offload_hook(module: nn.Module, name: str) -> Any:
    """accelerate's hook that loads ``module.<name>`` before each forward (an ``AlignDevicesHook`` with a weights
    map; a ``SequentialHook`` holds it among others)."""
    hook = getattr(module, "_hf_hook", None)
    for candidate in getattr(hook, "hooks", [hook]):
        if getattr(candidate, "offload", False) and getattr(candidate, "weights_map", None) is not None:
            return candidate
    raise RuntimeError(f"{type(module).__name__}.{name} is on the meta device and no accelerate hook loads it")


def whole(module: nn.Module, name: str = "weight") -> Tensor:
    """``module.<name>`` whole: gathered from every process when sharded (a collective), loaded from the device
    map's weights map (on the module's execution device) when offloaded, else the parameter itself."""
    tensor = getattr(module, name)
    if isinstance(tensor, DTensor):
        return tensor.full_tensor()
    if tensor.is_meta:
        hook = _offload_hook(module, name)
        return hook.weights_map[name].to(hook.execution_device)
    return tensor


def named_whole(model: nn.Module, name: str) -> Tensor:
    """Parameter (or buffer) ``name`` of ``model`` whole, as :func:`whole` reads it."""
    owner, _, attribute = name.rpartition(".")
    return whole(model.get_submodule(owner), attribute)


def set_offloaded(module: nn.Module, name: str, value: Tensor) -> None:
    """Make ``value`` the offloaded ``module.<name>``: held in memory (on the CPU) by the weights map, whose
    in-memory entries the hook reads before the files."""
    weights_map = _offload_hook(module, name).weights_map  # a PrefixedDataset over one OffloadedWeightsLoader
    weights_map.dataset.state_dict[weights_map.prefix + name] = value.detach().to("cpu", copy=True)


@torch.no_grad()
def add_to_weight(module: nn.Module, update: Tensor) -> None:
    """``module.weight += update`` (``update`` whole, in the weight's layout and dtype), wherever the weight is."""
    weight = module.weight
    if isinstance(weight, DTensor):
        weight += distribute_tensor(update.contiguous(), weight.device_mesh, weight.placements, src_data_rank=0)
    elif weight.is_meta:
        set_offloaded(module, "weight", whole(module) + update.to(_offload_hook(module, "weight").execution_device))
    else:
        weight += update
