"""Forward-hook tracing: record inputs/outputs of named modules, edit outputs in flight, stop a forward early.

Decoder layers return a plain tensor in transformers 5 and a tuple ``(hidden, ...)`` in older versions, and may
receive ``hidden_states`` as a keyword: :func:`hidden_states` / :func:`replace_hidden_states` handle both forms,
so that nothing here ever indexes ``output[0]`` blindly (that silently picks batch row 0 of a tensor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from lightning_edit.models.registry import get_module

EditFn = Callable[[str, torch.Tensor], torch.Tensor]


def hidden_states(output: Any) -> torch.Tensor:
    """Return the hidden-state tensor of a module output: the tensor itself or the first element of a tuple."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(f"Expected a tensor or a tuple starting with a tensor, got {type(output).__name__}.")


def replace_hidden_states(output: Any, new: torch.Tensor) -> Any:
    """Return ``output`` with its hidden-state tensor replaced by ``new``, keeping the tensor/tuple form."""
    if isinstance(output, torch.Tensor):
        return new
    hidden_states(output)  # validates the form
    return type(output)([new, *output[1:]])


def module_input(args: tuple, kwargs: dict[str, Any], name: str = "a block") -> torch.Tensor:
    """The input hidden states of a module call: its first positional tensor, else its ``hidden_states`` keyword."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    if isinstance(kwargs.get("hidden_states"), torch.Tensor):
        return kwargs["hidden_states"]
    raise ValueError(f"Cannot find the input of {name}: no positional tensor and no hidden_states keyword.")


class _StopForward(Exception):
    """Raised after the ``stop_after`` module of a :class:`Trace`; swallowed by that trace on exit."""

    def __init__(self, trace: Trace):
        super().__init__("forward stopped by Trace(stop_after=...)")
        self.trace = trace


class Trace:
    """Context manager hooking named modules of a model for the duration of a ``with`` block.

    Example::

        with Trace(model, ["model.layers.3.mlp.down_proj"], inputs=True, stop_after="model.layers.3") as tr:
            model(**batch)
        keys = tr.inputs["model.layers.3.mlp.down_proj"]

    If ``stop_after`` is set, the forward raises a private exception right after that module, which the trace
    swallows on exit: code after the model call inside the ``with`` block does not run. All hooks are removed on
    exit, also on exceptions. A module called several times keeps the tensors of its last call.

    Args:
        model: Model whose sub-modules are hooked.
        names: Module name(s) to trace.
        inputs: Record each module's input (first positional argument, else the ``hidden_states`` keyword).
        outputs: Record each module's output hidden states (after ``edit_output``).
        edit_output: ``edit_output(name, hidden) -> hidden`` replaces the hidden-state tensor of the outputs of
            the traced modules; the tensor/tuple form of the output is kept and the autograd graph preserved.
        stop_after: Module name after which the forward is aborted (need not be in ``names``).
        detach: Detach recorded tensors (edits are never detached).

    Attributes:
        inputs: Recorded inputs by module name.
        outputs: Recorded output hidden states by module name.
    """

    def __init__(
        self,
        model: nn.Module,
        names: str | Iterable[str],
        inputs: bool = False,
        outputs: bool = True,
        edit_output: EditFn | None = None,
        stop_after: str | None = None,
        detach: bool = True,
    ):
        names = [names] if isinstance(names, str) else list(dict.fromkeys(names))
        self._modules = {name: get_module(model, name) for name in names}
        self._stop_module = get_module(model, stop_after) if stop_after is not None else None
        self._record_inputs = inputs
        self._record_outputs = outputs
        self._edit_output = edit_output
        self._detach = detach
        self._handles: list[RemovableHandle] = []
        self.inputs: dict[str, torch.Tensor] = {}
        self.outputs: dict[str, torch.Tensor] = {}

    def __enter__(self) -> Trace:
        for name, module in self._modules.items():
            if self._record_inputs:
                self._handles.append(module.register_forward_pre_hook(partial(self._on_input, name), with_kwargs=True))
            if self._record_outputs or self._edit_output is not None:
                self._handles.append(module.register_forward_hook(partial(self._on_output, name)))
        if self._stop_module is not None:
            self._handles.append(self._stop_module.register_forward_hook(self._stop))
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return isinstance(exc, _StopForward) and exc.trace is self

    def _keep(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach() if self._detach else tensor

    def _on_input(self, name: str, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        self.inputs[name] = self._keep(module_input(args, kwargs, repr(name)))

    def _on_output(self, name: str, module: nn.Module, args: tuple, output: Any) -> Any:
        if self._edit_output is not None:
            edited = self._edit_output(name, hidden_states(output))
            if not isinstance(edited, torch.Tensor):
                raise TypeError(f"edit_output must return a tensor for {name!r}, got {type(edited).__name__}.")
            output = replace_hidden_states(output, edited)
        if self._record_outputs:
            self.outputs[name] = self._keep(hidden_states(output))
        return output

    def _stop(self, module: nn.Module, args: tuple, output: Any) -> None:
        raise _StopForward(self)


class PrefixReuse:
    """Repeated forwards of one batch that differ only from block ``start`` on: the blocks below run once.

    Each forward runs inside ``with reuse:`` (or ``with reuse.rows(rows):`` for a forward over some of the first
    one's batch rows). The first runs whole and records the input of block ``start``; each later one skips the
    blocks below ``start`` (they hand their input on unchanged) and gives block ``start`` the recorded input of its
    rows instead. Embeddings, masks and positions are still computed, so block ``start`` and everything
    above it see exactly what a whole forward would show them. Valid only while the inputs and every parameter
    below ``start`` stay as they were (the v*/z loop: δ enters at block ``start`` or above it).

    Args:
        blocks: the model's decoder blocks, in order.
        start: the first block that must run at every forward.
    """

    def __init__(self, blocks: list[nn.Module], start: int):
        self.blocks = blocks
        self.start = start
        self.hidden: torch.Tensor | None = None  # (B, L, d) the recorded input of block ``start``
        self._tuple_output = False  # blocks return (hidden, ...) in older transformers
        self._rows: torch.Tensor | None = None  # the recorded rows the next forward runs (None: all)
        self._handles: list[RemovableHandle] = []
        self._forwards: list[Any] = []  # the instance forwards the skipped blocks had (None: the class's)

    def rows(self, rows: torch.Tensor | None) -> PrefixReuse:
        """The next forward runs these rows (indices into the first forward's batch), in this order."""
        self._rows = rows
        return self

    def __enter__(self) -> PrefixReuse:
        if self.start == 0:
            return self
        block = self.blocks[self.start]
        if self.hidden is None:
            self._handles.append(block.register_forward_pre_hook(self._record, with_kwargs=True))
            self._handles.append(self.blocks[self.start - 1].register_forward_hook(self._record_form))
            return self
        for skipped in self.blocks[: self.start]:
            self._forwards.append(skipped.__dict__.get("forward"))  # accelerate's, under a device map
            skipped.forward = self._pass_through  # an instance attribute shadows the class's forward
        self._handles.append(block.register_forward_pre_hook(self._replay, with_kwargs=True))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._rows = None
        for skipped, forward in zip(self.blocks, self._forwards):
            if forward is None:
                del skipped.forward
            else:
                skipped.forward = forward
        self._forwards.clear()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _record(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        self.hidden = module_input(args, kwargs).detach()

    def _record_form(self, module: nn.Module, args: tuple, output: Any) -> None:
        self._tuple_output = not isinstance(output, torch.Tensor)

    def _pass_through(self, *args: Any, **kwargs: Any) -> Any:
        hidden = module_input(args, kwargs)
        return (hidden,) if self._tuple_output else hidden

    def _replay(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        hidden = self.hidden if self._rows is None else self.hidden[self._rows]
        if args and isinstance(args[0], torch.Tensor):
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}
