"""The memory budget of an optimisation graph: how many requests one v*/z graph may hold.

The v*/z optimisation of the locate-then-edit editors keeps one autograd graph for all the requests it optimises
together, and its size grows with them: rows × padded positions × the layers from the injection to the loss
(docs/editors/locate-then-edit.md#memory-budget). The requests of one editor call are therefore optimised in chunks
whose memory fits a budget, in bytes: the tensors autograd saves for the backward pass, and as much again for the
gradients and temporaries of that pass (:data:`BACKWARD_FACTOR`):

- set: ``model.target.memory_budget``;
- automatic (unset): the bytes of the model's own weights, or half of the memory free on the model's device
  (``torch.cuda.mem_get_info``; the host's available memory on a CPU) when that is less. The run's activations then
  never outgrow the model itself, and a batch of cases decides the speed of a run but never whether it fits. Under a
  sharded model every process takes the smallest of the processes' budgets, so all make the same chunks.

A chunk's memory is estimated from one request's graph, measured by a probe forward (:func:`saved_bytes`), as
proportional to the chunk's padded tokens (rows × longest row).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import psutil
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from lightning_edit.errors import ConfigError
from lightning_edit.models.sharding import is_sharded

#: an iteration's memory over the bytes its graph saves: the graph, then the backward pass's gradients of the saved
#: activations and its temporaries, about as large (SmolLM2-135M, ROME: 0.44 GiB of peak resident set per request of
#: a batch, against 0.24 GiB of saved tensors)
BACKWARD_FACTOR = 2


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters (the whole model's, sharded or not)."""
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


def free_bytes(device: torch.device) -> int:
    """Memory free for new tensors: the CUDA device's free memory, else the host's available memory."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return psutil.virtual_memory().available


def automatic_budget(model: nn.Module) -> int:
    """The model's weight bytes, or half the free memory of its device when that is less (the same on every process
    of a sharded model: the smallest)."""
    budget = min(weight_bytes(model), free_bytes(next(model.parameters()).device) // 2)
    if is_sharded(model) and torch.distributed.is_initialized():
        device = next(model.parameters()).device
        value = torch.tensor([budget], dtype=torch.long, device=device if device.type == "cuda" else "cpu")
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MIN)
        budget = int(value.item())
    return budget


@contextlib.contextmanager
def saved_bytes(model: nn.Module) -> Iterator[list[int]]:
    """Count the bytes of the tensors autograd saves for backward inside the block (each storage once; the model's
    parameters and buffers, which a graph only refers to, not counted): ``with saved_bytes(m) as size: ...``, then
    ``size[0]``."""
    resident = {_local(t).untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: set[int] = set()
    size = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = _local(tensor).untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in resident and pointer not in seen:
            seen.add(pointer)
            size[0] += storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield size


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a sharded tensor (a DTensor has no storage of its own), else the tensor."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def bytes_per_token(saved: int, rows: int, length: int) -> float:
    """An iteration's memory per padded token, from the bytes one request's graph saves over its rows × length."""
    return BACKWARD_FACTOR * saved / (rows * length)


def chunk_requests(shapes: Sequence[tuple[int, int]], bytes_per_token: float, budget: int) -> list[range]:
    """Consecutive chunks of requests, each as large as the budget allows.

    Args:
        shapes: (rows, longest row) of each request's prompts.
        bytes_per_token: an iteration's memory per padded token (one row position).
        budget: bytes one chunk may use; a request is always a chunk of its own at least.
    """
    chunks: list[range] = []
    start = 0
    rows = 0
    length = 0
    for i, (request_rows, request_length) in enumerate(shapes):
        grown_rows = rows + request_rows
        grown_length = max(length, request_length)
        if i > start and bytes_per_token * grown_rows * grown_length > budget:
            chunks.append(range(start, i))
            start = i
            grown_rows = request_rows
            grown_length = request_length
        rows = grown_rows
        length = grown_length
    chunks.append(range(start, len(shapes)))
    return chunks


def check_budget(budget: int, one_request: int, setting: str) -> None:
    """A set budget that cannot hold one request's optimisation is a one-line error."""
    if budget < one_request:
        raise ConfigError(
            f"{setting}={budget} bytes cannot hold the optimisation of one request ({one_request} bytes: its graph, "
            "measured, and the backward pass): raise it or leave it unset for the automatic budget "
            "(docs/editors/locate-then-edit.md#memory-budget)"
        )
