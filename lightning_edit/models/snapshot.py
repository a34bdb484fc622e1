"""Bit-exact snapshots of model parameters, to undo in-place edits."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from lightning_edit.models.placement import is_offloaded, set_offloaded, whole


class WeightSnapshot:
    """Copies of named parameters taken at creation; :meth:`restore` writes them back in place.

    Tied parameters appear once, under the name ``model.named_parameters()`` gives them, unless named
    explicitly. A sharded parameter is copied shard-wise; an offloaded one (a device map's, on the meta device) by
    its value, which :meth:`restore` puts back where the offload hook reads it.
    Used as a context manager, the snapshot restores the parameters on exit, also on exceptions.

    Args:
        model: Model whose parameters are saved.
        names: Parameter names to save; all parameters when ``None``.
        device: Device of the copies (e.g. ``"cpu"`` to keep accelerator memory free); same as the parameter's
            when ``None``.
    """

    def __init__(self, model: nn.Module, names: Iterable[str] | None = None, device: torch.device | str | None = None):
        if names is None:
            params = dict(model.named_parameters())
        else:
            params = {name: model.get_parameter(name) for name in names}
        self._params = params
        self._model = model
        self._saved = {name: self._value(name).detach().to(device, copy=True) for name in params}

    def _value(self, name: str) -> torch.Tensor:
        """The parameter's own tensor (a sharded one: this process's shard), or an offloaded one's value."""
        param = self._params[name]
        if not is_offloaded(param):
            return param
        owner, _, attribute = name.rpartition(".")
        return whole(self._model.get_submodule(owner), attribute)

    @property
    def names(self) -> list[str]:
        """Names of the saved parameters."""
        return list(self._params)

    @torch.no_grad()
    def norms(self) -> dict[str, tuple[float, float]]:
        """``{name: (‖W‖, ‖W − W₀‖)}``: each saved parameter's Frobenius norm now and that of its change since the
        snapshot (W₀), in float64 (a sharded parameter's over all its shards)."""
        norms = {}
        for name in self._params:
            now = self._value(name).detach().double()
            change = now - self._saved[name].to(now.device).double()
            values = [torch.linalg.vector_norm(tensor) for tensor in (now, change)]
            norms[name] = tuple(float(v.full_tensor() if isinstance(v, DTensor) else v) for v in values)
        return norms

    @torch.no_grad()
    def restore(self) -> None:
        """Copy the saved values back into the parameters, in place."""
        for name, param in self._params.items():
            if is_offloaded(param):
                owner, _, attribute = name.rpartition(".")
                set_offloaded(self._model.get_submodule(owner), attribute, self._saved[name])
            else:
                param.data.copy_(self._saved[name])

    @torch.no_grad()
    def changed(self) -> list[str]:
        """Names of saved parameters whose current value differs from the snapshot."""
        changed = []
        for name in self._params:
            value = self._value(name).detach()
            if not torch.equal(value, self._saved[name].to(value.device)):
                changed.append(name)
        return changed

    def __enter__(self) -> WeightSnapshot:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        self.restore()
