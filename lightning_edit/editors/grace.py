"""GRACE (Hartvigsen et al., NeurIPS 2023, "Aging with GRACE: Lifelong Model Editing with Discrete Key-Value
Adaptors"): a codebook adapter on one module of one layer; the model's weights never change.

The adapter holds entries (key k_i, value v_i, radius ε_i, label y_i) (docs/editors/grace.md#grace). At every token
position t of a forward, the module's input h_t is a query (paper eq. 1-2):

    i* = argmin_i ‖h_t − k_i‖₂;   output_t = v_{i*} if ‖h_t − k_{i*}‖₂ ≤ ε_{i*}, else the module's own output

so a query outside every radius defers to the original layer, bit-identically. An edit (prompt, target_new) reads
its query at the prompt's last token, updates the codebook (paper Alg. 1, :func:`codebook_update`), then trains the
value of the entry it wrote with Adam on the target's NLL for ``n_iter`` steps, the adapter in place.

Undo removes the adapter (or restores the codebook it had); ``fit`` exports the codebook as safetensors with its
metadata, and ``codebook_path`` loads one back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.editors.adapters import Adapter, AdapterSite, AdapterUndo
from lightning_edit.editors.base import EditorModule, require
from lightning_edit.models.hooks import PrefixReuse, Trace
from lightning_edit.models.loading import ModelLoadError, ModelNotFoundError, ModelSource
from lightning_edit.models.registry import ModelArchitecture, resolve_architecture
from lightning_edit.models.tokenization import encode_prompt_target

CODEBOOK_FORMAT = "lightning-edit/GRACE-codebook"
CODEBOOK_FILE = "codebook.safetensors"
ADAPTER_NAME = "grace"  # the adapter's name as a submodule of the wrapped module
#: How far below d/2 the older entry's radius is set on a label conflict, so that the two radii never touch.
SPLIT_MARGIN = 1e-5

Action = Literal["add", "expand", "split", "replace"]


def adapter_module(arch: ModelArchitecture, role: Literal["mlp_in", "mlp_out"], layer: int) -> str:
    """Name of the module GRACE wraps: the layer's MLP input (``mlp_in``: GPT-2 ``c_fc``, the paper's GPT-2 XL
    choice) or output projection (``mlp_out``: LLaMA ``down_proj``, EasyEdit's LLaMA choice)."""
    if role == "mlp_out":
        return arch.layer_name(arch.spec.mlp_out, layer)
    names = [arch.layer_name(t, layer) for t in arch.spec.mlp_in]
    require(len(names) == 1, "module", role, f"one module, and {arch.family}'s MLP input is {names}: use 'mlp_out'")
    return arch.layer_name(arch.spec.mlp_in[0], layer)


def nearest_entries(queries: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """(index, distance) of the nearest key (Euclidean) for each query: queries (..., d), keys (N, d), N ≥ 1.

    The distance is ``torch.cdist``'s exact (difference-based) float32 one and ties go to the lowest index, as
    ``cdist(...).min()`` over all keys gives them; only the keys that can be nearest are measured that way. A matrix
    product screens them: its squared distances ‖q‖² + ‖k‖² − 2 q·k and the exact ones are each within s =
    :func:`screen_slack` of the true ones, so the exact nearest key's true distance is within 2s of any other key's,
    and its screened one within 4s of the least screened value: every key that close is a candidate.
    """
    flat, keys = queries.reshape(-1, queries.shape[-1]).float(), keys.float()
    query_norms = flat.square().sum(-1, keepdim=True)
    key_norms = keys.square().sum(-1)
    screened = query_norms + key_norms - 2 * flat @ keys.T  # (M, N) squared distances, rounded
    slack = screen_slack(flat.shape[-1], query_norms + key_norms.max())
    rows, cols = (screened <= screened.min(dim=-1, keepdim=True).values + 4 * slack).nonzero(as_tuple=True)
    exact = torch.cdist(
        flat[rows].unsqueeze(1), keys[cols].unsqueeze(1), compute_mode="donot_use_mm_for_euclid_dist"
    ).reshape(-1)  # the candidates' distances, bit for bit those of cdist over every key
    distance = exact.new_full((flat.shape[0],), float("inf")).scatter_reduce(0, rows, exact, "amin")
    nearest = exact == distance[rows]
    index = cols.new_full((flat.shape[0],), keys.shape[0]).scatter_reduce(0, rows[nearest], cols[nearest], "amin")
    return index.reshape(queries.shape[:-1]), distance.reshape(queries.shape[:-1])


def screen_slack(d: int, norms: Tensor) -> Tensor:
    """A bound on the float32 rounding of a squared distance of d-vectors with ‖q‖² + ‖k‖² ≤ ``norms``, by the
    expansion or by differences: (d + 2) u per dot product (Higham's γ_d, unit roundoff u = 2⁻²⁴), at most
    4 (d + 2) u (‖q‖² + ‖k‖²) in all."""
    return 4 * (d + 2) * 2.0**-24 * norms


def lookup(queries: Tensor, keys: Tensor, radii: Tensor) -> tuple[Tensor, Tensor]:
    """(index of the nearest entry, whether the query lies within its radius) per query (paper eq. 2)."""
    index, distance = nearest_entries(queries, keys)
    return index, distance <= radii[index]


def grace_output(queries: Tensor, outputs: Tensor, keys: Tensor, values: Tensor, radii: Tensor) -> Tensor:
    """Paper eq. 2 at every position: the nearest entry's value where the query lies within its radius, else the
    module's own output (returned unchanged, bit-identically). queries (B, L, d_in), outputs (B, L, d_out)."""
    if keys.shape[0] == 0:
        return outputs
    index, hit = lookup(queries, keys, radii)
    if not hit.any():
        return outputs
    return torch.where(hit.unsqueeze(-1), values[index].to(outputs.dtype), outputs)


def codebook_update(
    distance: float | None,
    nearest_radius: float | None,
    same_label: bool,
    eps_init: float,
) -> tuple[Action, float | None, float]:
    """What an edit does to the codebook (paper Alg. 1): ``(action, new radius of the nearest entry, radius of the
    written entry)``, from the distance of the edit's query to the nearest key and that entry's radius and label.

    - ``add``: empty codebook, or the query is farther than ε_nearest + ε_init: a new entry of radius ε_init;
    - ``expand`` (same label, radii overlap): no new entry; the nearest radius grows to d if smaller (coverage);
    - ``split`` (other label, radii overlap): a new entry of radius d/2 and the nearest shrinks to d/2 − 1e-5;
    - ``replace`` (other label, d = 0: the same query): the nearest entry is rewritten with the new label.
    """
    if distance is None or nearest_radius is None or distance > nearest_radius + eps_init:
        return "add", nearest_radius, eps_init
    if same_label:
        return "expand", max(nearest_radius, distance), max(nearest_radius, distance)
    if distance == 0.0:
        return "replace", nearest_radius, nearest_radius
    return "split", distance / 2 - SPLIT_MARGIN, distance / 2


class GraceAdapter(Adapter):
    """The codebook (buffers ``keys`` (N, d_in), ``values`` (N, d_out), ``radii`` (N,), float32) and the labels.

    :meth:`hook` is registered as a forward hook of the wrapped module. While a value trains, ``training_value``
    ``(index, tensor)`` replaces that entry's value in the forward (the gradient reaches the tensor only), and the
    first training forward's lookup (``training_lookup``) serves every step: the queries, the module's inputs, lie
    below its output in the layer, so the trained value never changes them.
    """

    def __init__(self, d_in: int, d_out: int, device: torch.device):
        super().__init__()
        self.register_buffer("keys", torch.zeros(0, d_in, device=device))
        self.register_buffer("values", torch.zeros(0, d_out, device=device))
        self.register_buffer("radii", torch.zeros(0, device=device))
        self.labels: list[str] = []
        self.training_value: tuple[int, Tensor] | None = None
        self.training_lookup: tuple[Tensor, Tensor] | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def hook(self, module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        if self.training_value is None:
            return grace_output(args[0], output, self.keys, self.values, self.radii)
        if self.training_lookup is None:  # the first forward of the training: its lookup holds for every step
            self.training_lookup = lookup(args[0], self.keys, self.radii)
        index, hit = self.training_lookup
        trained, value = self.training_value
        values = torch.where((index == trained).unsqueeze(-1), value, self.values[index])
        return torch.where(hit.unsqueeze(-1), values.to(output.dtype), output)

    def load(self, buffers: dict[str, Tensor], labels: list[str]) -> None:
        """Replace the codebook by ``buffers`` (keys, values, radii) and ``labels``."""
        for name, buffer in buffers.items():
            setattr(self, name, buffer.to(self.keys.device))
        self.labels = list(labels)

    def add(self, key: Tensor, value: Tensor, radius: float, label: str) -> int:
        self.keys = torch.cat([self.keys, key.reshape(1, -1).to(self.keys)])
        self.values = torch.cat([self.values, value.reshape(1, -1).to(self.values)])
        self.radii = torch.cat([self.radii, self.radii.new_tensor([radius])])
        self.labels.append(label)
        return len(self.labels) - 1


class GraceUndo:
    """The codebook's undo, and the state of the generator that draws cold values, so that an edit made again after
    an undo draws the same values (an :class:`~.base.Undo`)."""

    def __init__(self, codebook: AdapterUndo, generator: torch.Generator):
        self.codebook = codebook
        self.generator = generator
        self.state = generator.get_state()
        self.names = codebook.names

    def restore(self) -> None:
        self.codebook.restore()
        self.generator.set_state(self.state)


class GRACE(EditorModule):
    """General Retrieval Adaptors for Continual Editing: a codebook adapter on one module of one layer.

    Args:
        lm: the causal language model to edit (its weights are never changed).
        layer: the layer of the adapter (the model preset sets it: gpt2-xl 35, LLaMA-2 7B 27); None where no reference
            value exists: then it must be given.
        module: which module of that layer the adapter wraps, through the registry's roles: ``mlp_out`` (the MLP
            output projection; EasyEdit's LLaMA ``down_proj``) or ``mlp_in`` (GPT-2's ``c_fc``, the paper's GPT-2 XL
            choice; only for families with one MLP input projection).
        eps: ε_init, the radius of a new entry (paper and EasyEdit: 1.0).
        edit_lr: Adam learning rate of the trained value (EasyEdit: 1.0).
        n_iter: Adam steps per edit (EasyEdit: 200 for GPT-2 XL, 50 for LLaMA; paper: about 100).
        value_init: ``cold`` (uniform [0, 1) random vector, EasyEdit's default) or ``warm`` (the module's current
            output at the query) for a new entry's value.
        update: on an overlapping entry of the same label, ``coverage`` grows its radius to the query's distance
            (EasyEdit's default); ``moving_average`` also moves its key halfway to the query.
        seed: seeds the cold value initialisation.
        codebook_path: a codebook written by ``fit`` (``codebook.safetensors`` or its directory) to start from.
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir, in_context (see EditorModule).
    """

    def __init__(
        self,
        lm: ModelSource,
        layer: int | None = None,
        module: Literal["mlp_in", "mlp_out"] = "mlp_out",
        eps: float = 1.0,
        edit_lr: float = 1.0,
        n_iter: int = 100,
        value_init: Literal["cold", "warm"] = "cold",
        update: Literal["coverage", "moving_average"] = "coverage",
        seed: int = 0,
        codebook_path: str | None = None,
        **kwargs,
    ):
        require(layer is not None, "layer", layer, "GRACE's layer: set it (a model preset or the flag)")
        require(eps > 0, "eps", eps, "the initial deferral radius, > 0")
        require(edit_lr > 0, "edit_lr", edit_lr, "a learning rate, > 0")
        require(n_iter >= 1, "n_iter", n_iter, "optimiser steps per edit, at least 1")
        super().__init__(lm, **kwargs)
        self.layer = layer
        self.role = module
        self.eps = eps
        self.edit_lr = edit_lr
        self.n_iter = n_iter
        self.value_init = value_init
        self.update = update
        self.seed = seed
        self.arch = resolve_architecture(self.model)
        self.module_name = adapter_module(self.arch, module, layer)
        self.site = AdapterSite(self.model, self.module_name, ADAPTER_NAME)
        self._generator = torch.Generator().manual_seed(seed)
        if codebook_path is not None:
            self.load_codebook(codebook_path)

    # The adapter ------------------------------------------------------------------------------------------------

    @property
    def adapter(self) -> GraceAdapter | None:
        """The installed adapter, a submodule of the wrapped module (its codebook is in the model's state_dict)."""
        return self.site.adapter

    def install_adapter(self) -> GraceAdapter:
        """The adapter, added empty (the model's outputs are then unchanged) if it is not installed."""
        if self.site.adapter is None:
            d_in, d_out = self.site.sizes()
            self.site.install(GraceAdapter(d_in, d_out, self.site.module.weight.device))
        return self.site.adapter

    # Edit and undo ------------------------------------------------------------------------------------------------

    def stream_state(self) -> dict[str, Any]:
        """The codebook (its buffers and labels) and the state of the generator of cold values."""
        state: dict[str, Any] = {"generator": self._generator.get_state()}
        if self.adapter is not None:
            state |= {f"codebook.{name}": buffer for name, buffer in self.adapter.named_buffers()}
            state["labels"] = list(self.adapter.labels)
        return state

    def load_stream_state(self, state: dict[str, Any]) -> None:
        self._generator.set_state(state["generator"])
        if "labels" in state:
            buffers = {
                key.removeprefix("codebook."): value for key, value in state.items() if key.startswith("codebook.")
            }
            self.install_adapter().load(buffers, state["labels"])

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return []  # no weight of the model changes

    def prepare_undo(self, requests: list[EditRequest]) -> GraceUndo:
        return GraceUndo(self.site.undo(), self._generator)

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """One codebook update and value training per request, in order (GRACE edits one at a time)."""
        if torch.is_inference_mode_enabled():
            raise RuntimeError("GRACE trains codebook values to edit: run the Trainer with inference_mode=False")
        adapter = self.install_adapter()
        for request in requests:
            self._edit(adapter, request)

    def _edit(self, adapter: GraceAdapter, request: EditRequest) -> None:
        prompt_ids, target_ids = encode_prompt_target(self.tokenizer, request.filled_prompt, request.target_new)
        ids = torch.tensor([prompt_ids + target_ids[:-1]], device=self.model.device)
        last = len(prompt_ids) - 1
        with Trace(self.model, self.module_name, inputs=True, stop_after=self.module_name) as trace, torch.no_grad():
            self.model(input_ids=ids[:, : last + 1], use_cache=False)
        query = trace.inputs[self.module_name][0, last].float()
        current = trace.outputs[self.module_name][0, last].float()
        index = self._update_codebook(adapter, query, current, request.target_new)
        value = adapter.values[index].clone().requires_grad_(True)
        optimizer = torch.optim.Adam([value], lr=self.edit_lr)
        labels = torch.tensor(target_ids, device=self.model.device)
        adapter.training_value = (index, value)
        blocks = [self.arch.module(self.arch.spec.blocks, i) for i in range(self.arch.num_layers)]
        prefix = PrefixReuse(blocks, self.layer)  # the codebook sits in block ``layer``: the blocks below run once
        try:
            with torch.enable_grad():
                for _ in range(self.n_iter):
                    with prefix:
                        logits = self.model(input_ids=ids, use_cache=False).logits[0, last:]
                    loss = F.cross_entropy(logits.float(), labels)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        finally:
            adapter.training_value = adapter.training_lookup = None
        adapter.values[index] = value.detach()

    def _update_codebook(self, adapter: GraceAdapter, query: Tensor, current: Tensor, label: str) -> int:
        """Apply :func:`codebook_update` for ``query``; returns the index of the entry whose value the edit trains."""
        distance = radius = None
        nearest = -1
        if len(adapter):
            index, distance_tensor = nearest_entries(query, adapter.keys)
            nearest = int(index)
            distance = float(distance_tensor)
            radius = float(adapter.radii[nearest])
        same = nearest >= 0 and adapter.labels[nearest] == label
        action, nearest_radius, radius_new = codebook_update(distance, radius, same, self.eps)
        if action in ("add", "split"):
            if action == "split":
                adapter.radii[nearest] = nearest_radius
            return adapter.add(query, self._initial_value(current), radius_new, label)
        if action == "replace":
            adapter.labels[nearest] = label
        else:
            adapter.radii[nearest] = nearest_radius
            if self.update == "moving_average":
                adapter.keys[nearest] = (adapter.keys[nearest] + query) / 2
        return nearest

    def _initial_value(self, current: Tensor) -> Tensor:
        if self.value_init == "warm":
            return current
        return torch.rand(current.shape, generator=self._generator).to(current)

    # Export and reload ------------------------------------------------------------------------------------------

    def codebook_metadata(self) -> dict[str, Any]:
        """What the codebook belongs to (model, module, layer) and its labels and settings."""
        d_in, d_out = self.site.sizes()
        return {
            "format": CODEBOOK_FORMAT,
            "base_model": str(getattr(self.model.config, "name_or_path", "")),
            "model_type": self.arch.family,
            "module": self.module_name,
            "layer": self.layer,
            "d_in": d_in,
            "d_out": d_out,
            "labels": list(self.adapter.labels) if self.adapter is not None else [],
            "eps": self.eps,
            "update": self.update,
        }

    def export(self, directory: Path, cases: list[EditCase]) -> Path:
        """Save the codebook (``codebook.safetensors``: keys, values, radii; its header metadata names the module,
        the labels and the settings) and ``edits.json``, the edits it holds."""
        directory.mkdir(parents=True, exist_ok=True)
        adapter = self.install_adapter()
        tensors = {name: buffer.detach().cpu().contiguous() for name, buffer in adapter.named_buffers()}
        path = directory / CODEBOOK_FILE
        save_file(tensors, path, metadata={"grace": json.dumps(self.codebook_metadata())})
        edits = [{"case_id": case.case_id, "source": case.source, "requests": [vars(r) for r in case.requests]}
                 for case in cases]  # fmt: skip
        (directory / "edits.json").write_text(json.dumps({"editor": "GRACE", "edits": edits}, indent=2, default=str))
        rank_zero_info(f"GRACE codebook ({len(adapter)} entries) written to {path}")
        return path

    def load_codebook(self, path: str | Path) -> None:
        """Install the adapter with the codebook of ``path`` (written by :meth:`export`) after checking it belongs
        to this model's wrapped module."""
        path = Path(path)
        path = path / CODEBOOK_FILE if path.is_dir() else path
        if not path.is_file():
            raise ModelNotFoundError(
                f"model.codebook_path: no codebook at {path}: give the {CODEBOOK_FILE} (or its folder) that "
                "lightning-edit fit wrote"
            )
        try:
            with safe_open(str(path), framework="pt") as file:
                meta = json.loads((file.metadata() or {}).get("grace", "{}"))
                tensors = {name: file.get_tensor(name) for name in file.keys()}
        except SafetensorError as error:  # a pickled codebook (never unpickled: it could run code) or a corrupt one
            raise ModelLoadError(
                f"{path}: refused: not a safetensors file ({error}); accepted: the {CODEBOOK_FILE} written by "
                "lightning-edit fit (a pickled codebook is never loaded: unpickling could run code)"
            ) from error
        if meta.get("format") != CODEBOOK_FORMAT:
            raise ModelLoadError(f"{path} is not a GRACE codebook (no {CODEBOOK_FORMAT!r} metadata)")
        d_in, d_out = self.site.sizes()
        ours = {"model_type": self.arch.family, "module": self.module_name, "d_in": d_in, "d_out": d_out}
        differences = [f"{key} {meta[key]!r} != {value!r}" for key, value in ours.items() if meta[key] != value]
        if differences:
            raise ModelLoadError(f"{path}: the codebook does not fit this model: {'; '.join(differences)}")
        adapter = self.install_adapter()
        adapter.load(tensors, meta["labels"])
        rank_zero_info(f"GRACE: {len(adapter)} codebook entries loaded from {path}")
