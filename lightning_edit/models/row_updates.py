"""Per-row low-rank weight updates: many independent edits of one model scored in one forward pass.

Under the ``single`` protocol every case starts from the unedited model. When a case's edit is a low-rank change
``ΔW_o = U_o V_oᵀ`` of a few projections (ROME: rank one; MEMIT and AlphaEdit: rank ≤ the case's requests, at each
edited layer), the cases of a batch need not be written and undone one by one: a forward hook adds to row b of the
batch its owner's change, ``y_b = W x_b + U_o (V_oᵀ x_b)``, which is what ``(W + ΔW_o) x_b`` computes, up to float
rounding. Code that runs forwards says who owns each row (:func:`routed`); a forward on a model with updates
active and rows without owners is an error, so no row is ever scored on another case's weights.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any
from weakref import WeakKeyDictionary

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from lightning_edit.models.registry import get_module


@dataclass(frozen=True)
class LowRankUpdate:
    """``ΔW = U Vᵀ`` of a weight in the Linear convention ``(d_out, d_in)``: ``U (d_out, r)``, ``V (d_in, r)``."""

    U: Tensor
    V: Tensor

    def matrix(self) -> Tensor:
        """``ΔW (d_out, d_in)``."""
        return self.U @ self.V.T


_ACTIVE: WeakKeyDictionary[nn.Module, RowUpdates] = WeakKeyDictionary()


class RowUpdates:
    """Low-rank updates of ``owners`` independent edits of ``model``, applied row by row while the context is active.

    Example::

        rows = RowUpdates(model, owners=2)
        rows.add(0, "transformer.h.1.mlp.c_proj", LowRankUpdate(U0, V0))
        with rows, routed(model, [0, 1, 1]):
            model(input_ids)  # row 0 sees W + U0 V0ᵀ, rows 1 and 2 see W
    """

    def __init__(self, model: nn.Module, owners: int):
        self.model = model
        self.owners = owners
        self.updates: dict[str, list[list[LowRankUpdate]]] = {}  # module name -> per owner, in the order added
        self._stacked: dict[str, tuple[Tensor, Tensor]] = {}  # module name -> (U (O, d_out, R), V (O, d_in, R))
        self._row_owners: Tensor | int | None = None
        self._handles: list[RemovableHandle] = []

    def add(self, owner: int, name: str, update: LowRankUpdate) -> None:
        """Give ``owner`` the change ``update`` of module ``name`` (on top of the ones it already has there)."""
        if name not in self.updates:
            self.updates[name] = [[] for _ in range(self.owners)]
            if _ACTIVE.get(self.model) is self:
                self._hook(name)
        self.updates[name][owner].append(update)
        self._stacked.pop(name, None)

    def __enter__(self) -> RowUpdates:
        if self.model in _ACTIVE:
            raise RuntimeError("row updates are already active on this model")
        _ACTIVE[self.model] = self
        for name in self.updates:
            self._hook(name)
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        _ACTIVE.pop(self.model, None)

    def _hook(self, name: str) -> None:
        self._handles.append(get_module(self.model, name).register_forward_hook(partial(self._add_rows, name)))

    def _stack(self, name: str, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
        if name not in self._stacked:
            per_owner = self.updates[name]
            first = next(u for updates in per_owner for u in updates)
            d_out = first.U.shape[0]
            d_in = first.V.shape[0]
            rank = max(sum(u.U.shape[1] for u in updates) for updates in per_owner)
            U = torch.zeros(self.owners, d_out, rank, dtype=dtype, device=device)
            V = torch.zeros(self.owners, d_in, rank, dtype=dtype, device=device)
            for owner, updates in enumerate(per_owner):
                if updates:  # an owner's updates side by side: Σ U_j V_jᵀ = [U_1 U_2 …][V_1 V_2 …]ᵀ
                    r = sum(u.U.shape[1] for u in updates)
                    U[owner, :, :r] = torch.cat([u.U for u in updates], dim=1)
                    V[owner, :, :r] = torch.cat([u.V for u in updates], dim=1)
            self._stacked[name] = (U, V)
        return self._stacked[name]

    def _add_rows(self, name: str, module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        if self._row_owners is None:
            raise RuntimeError(f"a forward through {name!r} with row updates active, but its rows have no owners")
        x = args[0]  # (B, L, d_in)
        dtype = torch.promote_types(x.dtype, torch.float32)
        U, V = self._stack(name, dtype, x.device)
        if isinstance(self._row_owners, int):
            change = (x.to(dtype) @ V[self._row_owners]) @ U[self._row_owners].T  # (B, L, d_out)
        else:
            owners = self._row_owners.to(x.device)
            change = torch.bmm(torch.bmm(x.to(dtype), V[owners]), U[owners].transpose(1, 2))  # (B, L, d_out)
        return output + change.to(output.dtype)


@contextmanager
def routed(model: nn.Module, owners: Sequence[int] | int | None) -> Iterator[None]:
    """The rows of the forwards in the block belong to ``owners`` (one per row, or one for every row) of the row
    updates active on ``model``; ``None`` changes nothing (code that knows of no owners passes it)."""
    if owners is None:
        yield
        return
    rows = _ACTIVE.get(model)
    if rows is None:
        raise RuntimeError("rows have owners but no row updates are active on the model")
    previous = rows._row_owners
    rows._row_owners = owners if isinstance(owners, int) else torch.tensor(list(owners))
    try:
        yield
    finally:
        rows._row_owners = previous
