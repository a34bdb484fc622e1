"""Adapters that editors add to the model instead of changing its weights (GRACE's codebook, WISE's side memory).

An adapter is an ``nn.Module`` registered as a submodule of the module it wraps (so its buffers are in the model's
``state_dict``, e.g. ``transformer.h.2.mlp.c_proj.grace.keys``) whose :meth:`Adapter.hook` is a forward hook of that
module, rewriting its output. :meth:`AdapterSite.undo` makes the editor's :class:`~lightning_edit.editors.base.Undo`:
it removes an adapter added later, or puts back a copy of the adapter present when it was made, so the model is
bit-identical to its state then (docs/protocols.md#edit-and-undo).
"""

from __future__ import annotations

import copy

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from lightning_edit.models.registry import to_linear, weight_layout


class Adapter(nn.Module):
    """Base of an adapter: :meth:`hook` maps the wrapped module's ``(args, output)`` to its new output."""

    def hook(self, module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        raise NotImplementedError


class AdapterSite:
    """The module ``module_name`` of ``model`` and the adapter an editor keeps on it under ``attribute``."""

    def __init__(self, model: nn.Module, module_name: str, attribute: str):
        self.model = model
        self.module_name = module_name
        self.attribute = attribute
        self._handle: RemovableHandle | None = None

    @property
    def module(self) -> nn.Module:
        """The wrapped module."""
        return self.model.get_submodule(self.module_name)

    @property
    def adapter(self) -> Adapter | None:
        """The installed adapter, or None."""
        return getattr(self.module, self.attribute, None)

    def sizes(self) -> tuple[int, int]:
        """(d_in, d_out) of the wrapped projection."""
        d_out, d_in = to_linear(self.module.weight, weight_layout(self.module)).shape
        return d_in, d_out

    def install(self, adapter: Adapter) -> Adapter:
        """Register ``adapter`` on the module (replacing any installed one) and hook it."""
        self.remove()
        self.module.add_module(self.attribute, adapter)
        self._handle = self.module.register_forward_hook(adapter.hook)
        return adapter

    def remove(self) -> None:
        """Take the adapter and its hook off the module."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self.adapter is not None:
            delattr(self.module, self.attribute)

    def undo(self) -> AdapterUndo:
        """How to return to the present adapter state (none, or a copy of the installed adapter)."""
        adapter = self.adapter
        if adapter is None:
            return AdapterUndo(self, [], None)
        names = [f"{self.module_name}.{self.attribute}.{name}" for name, _ in adapter.named_buffers()]
        names += [f"{self.module_name}.{self.attribute}.{name}" for name, _ in adapter.named_parameters()]
        return AdapterUndo(self, names, copy.deepcopy(adapter))


class AdapterUndo:
    """Removes the adapter, then re-installs the saved copy if there was one (an :class:`~.base.Undo`).

    Attributes:
        names: the state names of the adapter that existed when the undo was made (shared from process 0 after
            sequential edits; an adapter added later is new state, shared anyway).
    """

    def __init__(self, site: AdapterSite, names: list[str], saved: Adapter | None):
        self.site = site
        self.names = names
        self._saved = saved

    def restore(self) -> None:
        self.site.remove()
        if self._saved is not None:
            self.site.install(copy.deepcopy(self._saved))
