"""A model sharded over processes by PyTorch FSDP2 (``fully_shard``): its weights read whole, written shard-wise,
and forwards kept in step across the processes.

Under Lightning's ``ModelParallelStrategy`` the editor shards its model in ``configure_model``
(:func:`shard_model`: each decoder block, then the rest). A parameter is then a ``DTensor`` of which each process
holds a slice of rows; a forward gathers each block's weights just before it runs (forward hooks see whole
activations) and frees them after. So a forward is a collective: every process of the shard group must run as many,
in the same order (docs/sharding.md).

- editors read and write its weights through :mod:`lightning_edit.models.placement` (gathered whole, written
  shard-wise);
- :class:`Lockstep` lets the processes run different forwards (each scores its own cases): before each forward they
  say whether they still have one, and a process that has run out runs a one-token forward, its output unused, until
  none has.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.utils.hooks import RemovableHandle


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are sharded (DTensors)."""
    return any(isinstance(param, DTensor) for param in model.parameters())


def shard_model(model: nn.Module, blocks: list[nn.Module], mesh: DeviceMesh) -> None:
    """FSDP2 over ``mesh``: each decoder block is a unit, gathered while it runs; so are the input and output
    embeddings when they are two matrices; the rest (final norm, tied embeddings) is the root's, gathered for the
    whole forward."""
    from torch.distributed.fsdp import fully_shard

    for block in blocks:
        fully_shard(block, mesh=mesh)
    embeddings = model.get_input_embeddings()
    unembedding = model.get_output_embeddings()
    if unembedding is not None and unembedding.weight is not embeddings.weight:
        fully_shard(embeddings, mesh=mesh)
        fully_shard(unembedding, mesh=mesh)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)  # FSDP2 keeps a root gathered for a backward: none here


def broadcast_shards(params: list[Tensor], mesh: DeviceMesh | None) -> None:
    """Give each sharded parameter, in place, the slice that process 0 of ``mesh`` (the replicas of one shard,
    e.g. Lightning's ``data_parallel`` dimension) holds; nothing when ``mesh`` has one process."""
    if mesh is None or mesh.size() == 1:
        return
    for param in params:
        dist.broadcast(param.to_local(), group=mesh.get_group(), group_src=0)


class Lockstep:
    """Forwards of a sharded ``model`` kept in step over ``mesh`` while each process runs its own (a "join").

    Inside the block, every forward of ``model`` first all-reduces a 1 (it has a forward to run). On exit, a process
    all-reduces a 0 and, while the sum says another process still runs forwards, runs a one-token forward of its
    own (no grad, output unused) to pair with it. Every forward inside must run the whole model (no early stop):
    then each one gathers the same blocks in the same order, whatever its input. Hooks that expect particular
    inputs (row updates) must be removed before the block exits.
    """

    def __init__(self, model: nn.Module, mesh: DeviceMesh | None):
        self.model = model
        self.mesh = mesh
        self._handle: RemovableHandle | None = None

    def _vote(self, running: int) -> int:
        flag = torch.tensor([running], device=self.mesh.device_type)
        dist.all_reduce(flag, group=self.mesh.get_group())
        return int(flag.item())

    def _pre_forward(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        self._vote(1)

    def __enter__(self) -> Lockstep:
        if self.mesh is not None and self.mesh.size() > 1:
            # before FSDP's own pre-forward hook (its gathers): every process votes, then gathers
            self._handle = self.model.register_forward_pre_hook(self._pre_forward, with_kwargs=True, prepend=True)
        return self

    def __exit__(self, exc_type: type | None, *exc: Any) -> None:
        if self._handle is None:
            return
        self._handle.remove()
        self._handle = None
        if exc_type is not None:
            return  # the run fails: no forward is paired any more
        idle = torch.zeros(1, 1, dtype=torch.long, device=self.mesh.device_type)
        while self._vote(0) > 0:
            with torch.no_grad():
                self.model(input_ids=idle, use_cache=False)
