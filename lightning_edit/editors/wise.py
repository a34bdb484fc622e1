"""WISE (Wang et al., NeurIPS 2024, "WISE: Rethinking the Knowledge Memory for Lifelong Model Editing of Large
Language Models"): edits go to a side memory of one FFN value matrix, and a router sends an input there only when
its activation score is high; the model's weights never change.

With W_v the MLP output projection of ``layer`` (main memory, frozen) and a(x) its input at one token
(docs/editors/wise.md#wise):

- side memory W_v' = W_v + ΔW, a copy that edits train; an edit trains only the entries of the shard's random
  gradient mask (``mask_ratio``, knowledge sharding, paper §3.3), with SGD, keeping ‖ΔW‖_∞ ≤ ``norm_constraint``;
- activation score Δ_act(x) = ‖ΔW a(x)‖₂ (paper eq. 3); the edit loss (paper eq. 5) is the target NLL plus
  [Δ_out − α]₊ + [β − Δ_in]₊ + [γ − (Δ_in − Δ_out)]₊, in-scope scores Δ_in at the positions that predict the
  target, out-of-scope scores Δ_out on irrelevant text;
- routing (paper eq. 4): a token whose score exceeds ε = ``act_ratio`` × (least in-scope score of the memory's
  edits) gets W_v' a + b (the memory of highest score above its ε), any other token W_v's output, bit-identically;
- every ``save_freq`` edits the side memory is closed and a new one starts from W_v with a new mask; every
  ``merge_freq`` edits the closed memories are merged by TIES (``density``) relative to W_v (paper §3.3).

Undo removes the side memory; the model's weights are never written. ``fit`` has no export (the memories are routed,
not weights a saved model could hold).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.editors.adapters import Adapter, AdapterSite, AdapterUndo
from lightning_edit.editors.base import EditorModule, require
from lightning_edit.editors.context_templates import ContextTemplateCache
from lightning_edit.errors import ConfigError
from lightning_edit.models.hooks import PrefixReuse
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import resolve_architecture, to_linear, weight_layout
from lightning_edit.models.tokenization import encode_prompt, encode_prompt_target, pad

ADAPTER_NAME = "wise"
#: The seed texts of WISE's editing prefixes (EasyEdit): each is continued by the model itself.
WISE_SEED_PROMPTS: tuple[str, ...] = ("I", "You", "Because", "Yes", "Q: ")
#: Early stop of an edit: the loss changed by at most this and is at most :data:`STOP_LOSS` (EasyEdit).
STOP_DELTA = 1e-4
STOP_LOSS = 2e-2

_NO_EXPORT = (
    "WISE's edits live in routed side memories, which an exported model would not hold: evaluate them with validate "
    "(protocol sequential) instead of fit"
)


def activation_scores(inputs: Tensor, delta: Tensor) -> Tensor:
    """Δ_act per token (paper eq. 3): ‖ΔW a‖₂ for inputs a (..., d_in) and ΔW (d_out, d_in); returns (...)."""
    return (inputs.to(delta.dtype) @ delta.T).norm(dim=-1)


def margin_loss(inside: Tensor, outside: Tensor, alpha: float, beta: float, gamma: float) -> Tensor:
    """The routing margins of paper eq. 5: [Δ_out − α]₊ + [β − Δ_in]₊ + [γ − (Δ_in − Δ_out)]₊, each term a mean
    over its tokens (the last over the mean scores)."""
    return (
        F.relu(outside - alpha).mean() + F.relu(beta - inside).mean() + F.relu(gamma - (inside.mean() - outside.mean()))
    )


def ties_merge(deltas: Tensor, density: float) -> Tensor:
    """TIES merging (Yadav et al., 2023) of task vectors ``deltas`` (k, ...) relative to W_v, weight 1.

    Trim: each keeps its ``density`` fraction of largest-magnitude entries; elect: the sign of the entry-wise sum of
    the trimmed vectors; merge: the mean of the trimmed entries that agree with the elected sign (0 where none do).
    """
    flat = deltas.reshape(deltas.shape[0], -1)
    keep = max(1, int(round(density * flat.shape[1])))
    threshold = flat.abs().kthvalue(flat.shape[1] - keep + 1, dim=1, keepdim=True).values
    trimmed = torch.where(flat.abs() >= threshold, flat, torch.zeros_like(flat))
    sign = torch.sign(trimmed.sum(dim=0))
    agree = (torch.sign(trimmed) == sign) & (trimmed != 0)
    merged = (trimmed * agree).sum(dim=0) / agree.sum(dim=0).clamp(min=1)
    return merged.reshape(deltas.shape[1:])


def route(inputs: Tensor, outputs: Tensor, deltas: Tensor, thresholds: Tensor) -> Tensor:
    """Paper eq. 4 per token: ``outputs + ΔW_m a`` for the memory m of highest score among those whose score exceeds
    their threshold, ``outputs`` (bit-identical) where none does. inputs (B, L, d_in), deltas (m, d_out, d_in)."""
    if deltas.shape[0] == 0:
        return outputs
    shifts = torch.einsum("bli,moi->mblo", inputs.to(deltas.dtype), deltas)  # (m, B, L, d_out)
    scores = shifts.norm(dim=-1)  # (m, B, L)
    active = scores > thresholds.reshape(-1, 1, 1)
    if not active.any():
        return outputs
    best = torch.where(active, scores, torch.full_like(scores, -1.0)).argmax(dim=0)  # (B, L)
    shift = shifts.gather(0, best.unsqueeze(0).unsqueeze(-1).expand(1, *shifts.shape[1:])).squeeze(0)
    return torch.where(active.any(dim=0).unsqueeze(-1), outputs + shift.to(outputs.dtype), outputs)


class SideMemory(Adapter):
    """WISE's memories of one projection W_v (buffers, in the Linear convention, float32).

    Buffers: ``pristine`` W_v (d_out, d_in); ``memories`` (m, d_out, d_in), the closed side memories, and their
    ``thresholds`` (m,) and ``counts`` (m,) of edits; ``side`` W_v', the open side memory, its gradient ``mask``, its
    ``least_score`` (least in-scope score of its edits) and ``open_count``.

    While an edit trains, ``training_side`` holds the side memory tensor every token uses, and the projection's
    inputs are recorded in ``inputs`` (for the activation scores). ``act_ratio`` turns the open memory's least
    score into its threshold.
    """

    def __init__(self, pristine: Tensor, mask: Tensor, act_ratio: float):
        super().__init__()
        self.act_ratio = act_ratio
        d_out, d_in = pristine.shape
        self.register_buffer("pristine", pristine.float().clone())
        self.register_buffer("memories", pristine.new_zeros(0, d_out, d_in, dtype=torch.float32))
        self.register_buffer("thresholds", pristine.new_zeros(0, dtype=torch.float32))
        self.register_buffer("counts", pristine.new_zeros(0, dtype=torch.long))
        self.register_buffer("side", pristine.float().clone())
        self.register_buffer("mask", mask)
        self.register_buffer("least_score", pristine.new_tensor(float("inf"), dtype=torch.float32))
        self.register_buffer("open_count", pristine.new_tensor(0, dtype=torch.long))
        self.training_side: Tensor | None = None
        self.inputs: Tensor | None = None

    def hook(self, module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        if self.training_side is not None:
            self.inputs = args[0]
            return output + (args[0].to(self.side.dtype) @ (self.training_side - self.pristine).T).to(output.dtype)
        deltas, thresholds = self.routed()
        return route(args[0], output, deltas, thresholds)

    def routed(self) -> tuple[Tensor, Tensor]:
        """(ΔW of every memory the router chooses from, their thresholds): the closed ones and the open one."""
        deltas = self.memories - self.pristine
        thresholds = self.thresholds
        if int(self.open_count) > 0:
            deltas = torch.cat([deltas, (self.side - self.pristine).unsqueeze(0)])
            thresholds = torch.cat([thresholds, self.least_score.reshape(1) * self.act_ratio])
        return deltas, thresholds


class WISE(EditorModule):
    """WISE: a routed side memory of one MLP output projection, edited in random-mask shards.

    Args:
        lm: the causal language model to edit (its weights are never changed).
        layer: the layer whose MLP output projection is copied (the model preset sets it: LLaMA-2 7B 27, LLaMA-3 8B
            29); None where no reference value exists: then it must be given.
        mask_ratio: fraction of the side memory's entries a shard trains (paper: 0.2).
        edit_lr: SGD learning rate (EasyEdit: 1.0 LLaMA-2, 0.9 LLaMA-3).
        n_iter: SGD steps per edit at most (EasyEdit: 70 LLaMA-2, 30 LLaMA-3).
        norm_constraint: ‖W_v' − W_v‖_∞ bound after every step (EasyEdit: 1.0).
        act_margin: α, β, γ of the routing margins (EasyEdit: 5, 20, 10 LLaMA-2; 2, 20, 10 LLaMA-3).
        act_ratio: the routing threshold ε as a fraction of the least in-scope score (EasyEdit: 0.88 LLaMA-2).
        save_freq: edits per side memory before it is closed and a new one started (EasyEdit: 500).
        merge_freq: every this many edits the closed memories are TIES-merged into one (EasyEdit: 1000).
        density: the fraction of entries each memory keeps in the TIES merge (paper: 0.53).
        template_lengths: editing prefixes as (tokens, count) pairs, continued by the model from "I", "You",
            "Because", "Yes", "Q: " (EasyEdit: 5 and 10 new tokens, 5 each); their text is also the out-of-scope
            text of the margins.
        seed: seeds the prefixes and the shards' masks.
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir, in_context (see EditorModule).
    """

    def __init__(
        self,
        lm: ModelSource,
        layer: int | None = None,
        mask_ratio: float = 0.2,
        edit_lr: float = 1.0,
        n_iter: int = 70,
        norm_constraint: float = 1.0,
        act_margin: tuple[float, float, float] = (5.0, 20.0, 10.0),
        act_ratio: float = 0.88,
        save_freq: int = 500,
        merge_freq: int = 1000,
        density: float = 0.53,
        template_lengths: list[tuple[int, int]] | None = None,
        seed: int = 0,
        **kwargs,
    ):
        require(layer is not None, "layer", layer, "WISE's layer: set it (a model preset or the flag)")
        require(
            0 < mask_ratio < 1, "mask_ratio", mask_ratio, "the share of the side memory one shard trains, in (0, 1)"
        )
        require(edit_lr > 0, "edit_lr", edit_lr, "a learning rate, > 0")
        require(n_iter >= 1, "n_iter", n_iter, "optimiser steps per edit, at least 1")
        require(norm_constraint > 0, "norm_constraint", norm_constraint, "the side memory's L∞ radius, > 0")
        require(0 < act_ratio <= 1, "act_ratio", act_ratio, "a share of the routing threshold, in (0, 1]")
        require(0 < density <= 1, "density", density, "the share of each shard kept by the merge, in (0, 1]")
        require(save_freq >= 1, "save_freq", save_freq, "edits per shard, at least 1")
        require(merge_freq >= 1 and merge_freq % save_freq == 0, "merge_freq", merge_freq,
                f"edits per merge, a multiple of save_freq={save_freq}")  # fmt: skip
        super().__init__(lm, **kwargs)
        self.layer = layer
        self.mask_ratio = mask_ratio
        self.edit_lr = edit_lr
        self.n_iter = n_iter
        self.norm_constraint = norm_constraint
        self.alpha, self.beta, self.gamma = act_margin
        self.act_ratio = act_ratio
        self.save_freq = save_freq
        self.merge_freq = merge_freq
        self.density = density
        self.template_lengths = tuple(map(tuple, template_lengths or ((5, 5), (10, 5))))
        self.seed = seed
        self.templates = ContextTemplateCache()
        self.arch = resolve_architecture(self.model)
        self.module_name = self.arch.layer_name(self.arch.spec.mlp_out, layer)
        self.site = AdapterSite(self.model, self.module_name, ADAPTER_NAME)

    @property
    def memory(self) -> SideMemory | None:
        """The installed side memory (a submodule of the projection: its buffers are in the model's state_dict)."""
        return self.site.adapter

    def install_memory(self) -> SideMemory:
        if self.memory is None:
            module = self.site.module
            pristine = to_linear(module.weight.detach(), weight_layout(module))
            self.site.install(SideMemory(pristine, self._mask(0), self.act_ratio))
        return self.memory

    def _mask(self, start: int) -> Tensor:
        """The random gradient mask of the shard that starts after ``start`` edits (Bernoulli(mask_ratio), seeded)."""
        d_in, d_out = self.site.sizes()
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + start)
        return (torch.rand(d_out, d_in, generator=generator) < self.mask_ratio).to(self.site.module.weight.device)

    # Edit and undo ------------------------------------------------------------------------------------------------

    def stream_state(self) -> dict[str, Any]:
        """The side memories (every buffer) and the context templates, generated from the model at the first edit."""
        state: dict[str, Any] = {"context_templates": self.templates.state(self.model)}
        if self.memory is not None:
            state |= {f"memory.{name}": buffer for name, buffer in self.memory.named_buffers()}
        return state

    def load_stream_state(self, state: dict[str, Any]) -> None:
        self.templates.load_state(self.model, self.tokenizer, state["context_templates"])
        buffers = {key.removeprefix("memory."): value for key, value in state.items() if key.startswith("memory.")}
        if buffers:
            memory = self.install_memory()
            for name, buffer in buffers.items():
                setattr(memory, name, buffer.to(memory.pristine.device))

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return []  # no weight of the model changes

    def prepare_undo(self, requests: list[EditRequest]) -> AdapterUndo:
        return self.site.undo()

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Train the open side memory on the requests together, then close / merge memories as due."""
        if torch.is_inference_mode_enabled():
            raise RuntimeError("WISE trains its side memory to edit: run the Trainer with inference_mode=False")
        memory = self.install_memory()
        least = self._train(memory, requests)
        memory.least_score = torch.minimum(memory.least_score, least)
        memory.open_count += len(requests)
        if int(memory.open_count) >= self.save_freq:
            self._close(memory)

    def on_fit_start(self) -> None:
        """``fit`` exports, which WISE does not offer: say so before any edit."""
        raise ConfigError(_NO_EXPORT)

    def export(self, directory: Path, cases: list[EditCase]) -> Path:
        """Not offered: the memories are routed, not weights a saved model could hold (docs/editors/wise.md#wise)."""
        raise ConfigError(_NO_EXPORT)

    def _close(self, memory: SideMemory) -> None:
        """Store the open memory as a closed one, start a new one from W_v, and merge if due."""
        memory.memories = torch.cat([memory.memories, memory.side.unsqueeze(0)])
        memory.thresholds = torch.cat([memory.thresholds, (memory.least_score * self.act_ratio).reshape(1)])
        memory.counts = torch.cat([memory.counts, memory.open_count.reshape(1)])
        memory.side = memory.pristine.clone()
        memory.mask = self._mask(int(memory.counts.sum()))
        memory.least_score = torch.full_like(memory.least_score, float("inf"))
        memory.open_count = torch.zeros_like(memory.open_count)
        if len(memory.counts) > 1 and int(memory.counts.sum()) % self.merge_freq == 0:
            merged = memory.pristine + ties_merge(memory.memories - memory.pristine, self.density)
            memory.memories = merged.unsqueeze(0)
            memory.thresholds = memory.thresholds.min().reshape(1)
            memory.counts = memory.counts.sum().reshape(1)

    def _batch(self, requests: list[EditRequest]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(input ids, position ids, target tokens (B, L; -100 elsewhere), in-scope mask, out-of-scope mask):
        every request under every prefix; in scope, the positions that predict the target; out of scope, the
        prefix text's own tokens."""
        templates = self.templates.get(
            self.model, self.tokenizer, self.template_lengths, self.seed, WISE_SEED_PROMPTS, top_k=1
        )  # greedy continuations, as EasyEdit
        sequences = []
        spans = []
        for request in requests:
            for template in templates:
                prompt = template.replace("{}", request.filled_prompt)
                prompt_ids, target_ids = encode_prompt_target(self.tokenizer, prompt, request.target_new)
                prefix_ids = encode_prompt(self.tokenizer, template.split("{}")[0].rstrip()) if template != "{}" else []
                shared = next((i for i, (a, b) in enumerate(zip(prefix_ids, prompt_ids)) if a != b), len(prefix_ids))
                sequences.append(prompt_ids + target_ids[:-1])
                spans.append((shared, len(prompt_ids) - 1, target_ids))
        input_ids, attention_mask, position_ids = pad(sequences, self.tokenizer.pad_token_id, "right")
        labels = torch.full_like(input_ids, -100)
        inside = torch.zeros_like(input_ids, dtype=torch.bool)
        outside = torch.zeros_like(input_ids, dtype=torch.bool)
        for row, (shared, first, target_ids) in enumerate(spans):
            labels[row, first : first + len(target_ids)] = torch.tensor(target_ids)
            inside[row, first : first + len(target_ids)] = True
            outside[row, :shared] = True
        device = self.model.device
        return input_ids.to(device), position_ids.to(device), labels.to(device), inside.to(device), outside.to(device)

    def _train(self, memory: SideMemory, requests: list[EditRequest]) -> Tensor:
        """Train the open side memory on ``requests`` (paper eq. 5, masked SGD, L∞ box, early stop); returns the
        least in-scope score after training."""
        input_ids, position_ids, labels, inside, outside = self._batch(requests)
        side = memory.side.clone().requires_grad_(True)
        mask = memory.mask.to(side.dtype)
        previous = None
        memory.training_side = side
        blocks = [self.arch.module(self.arch.spec.blocks, i) for i in range(self.arch.num_layers)]
        prefix = PrefixReuse(blocks, self.layer)  # the side memory sits in block ``layer``: the blocks below run once
        try:
            with torch.enable_grad():
                for _ in range(self.n_iter):
                    with prefix:
                        logits = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits
                    nll = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
                    scores = activation_scores(memory.inputs, side - memory.pristine)
                    margins = margin_loss(scores[inside], scores[outside], self.alpha, self.beta, self.gamma)
                    loss = nll + margins
                    if previous is not None and abs(previous - loss.item()) <= STOP_DELTA and loss.item() <= STOP_LOSS:
                        break
                    previous = loss.item()
                    (gradient,) = torch.autograd.grad(loss, side)
                    with torch.no_grad():
                        side -= self.edit_lr * gradient * mask
                        bound = self.norm_constraint
                        side.copy_(torch.clamp(side, memory.pristine - bound, memory.pristine + bound))
                with torch.no_grad():
                    self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False)
                    least = activation_scores(memory.inputs, side - memory.pristine)[inside].min()
        finally:
            memory.training_side = None
            memory.inputs = None
        memory.side = side.detach()
        return least
