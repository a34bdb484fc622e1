"""The key-statistics pass: ``Σ k kᵀ`` over corpus tokens for several layers in one forward.

See docs/editors/locate-then-edit.md#key-statistics.

``k`` is the input of the MLP output projection (``arch.spec.mlp_out``) at one token. Documents are tokenized with
the tokenizer's default special tokens (LLaMA gets its BOS), truncated to ``max_length`` tokens, batched
``documents_per_forward`` at a time with right padding; padded positions are dropped with the attention mask. Every
requested layer is hooked in the same forward, which is aborted right after the deepest layer's projection. Sums are
kept in float64 whatever the model dtype; the count is in tokens (``n_tokens``) and documents (``n_documents``), and
:meth:`SecondMoment.mean` divides by tokens: ``C = E[k kᵀ]``, uncentred, mean over tokens.

The pass can resume: each layer carries ``next_document`` (absolute corpus index); :func:`run_pass` starts at the
smallest and only adds, per layer, the documents at or after its own. With the same batching the resumed sums are
bit-identical to an uninterrupted pass (the same float64 additions in the same order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from lightning_edit.errors import Interrupted
from lightning_edit.models.hooks import Trace
from lightning_edit.models.registry import resolve_architecture, to_linear, weight_layout
from lightning_edit.models.tokenization import pad
from lightning_edit.stats.corpus import Corpus, as_corpus
from lightning_edit.stopping import stop_point

MAX_DEFAULT_LENGTH = 4096  # default max_length = context length clamped to this (as the reference ports do)


@dataclass
class SecondMoment:
    """Running ``Σ k kᵀ`` of one layer's keys.

    Attributes:
        sum: ``Σ k kᵀ`` over the counted tokens, ``(d_in, d_in)`` float64.
        n_tokens: Number of (non-padding) tokens summed; the divisor of :meth:`mean`.
        n_documents: Number of documents those tokens came from.
        cache_key: Key of the cache entry this came from (set by the cache; ``None`` otherwise).
    """

    sum: torch.Tensor
    n_tokens: int = 0
    n_documents: int = 0
    cache_key: str | None = field(default=None, compare=False)

    @classmethod
    def zeros(cls, d_in: int, device: torch.device | str | None = None) -> SecondMoment:
        return cls(torch.zeros(d_in, d_in, dtype=torch.float64, device=device))

    def mean(self) -> torch.Tensor:
        """``C = Σ k kᵀ / n_tokens`` (float64)."""
        if self.n_tokens == 0:
            raise ValueError("no tokens were counted: the second moment is undefined")
        return self.sum / self.n_tokens

    def merge(self, other: SecondMoment) -> SecondMoment:
        """Statistics of the union of two disjoint sets of documents (sums and counts add)."""
        if self.sum.shape != other.sum.shape:
            raise ValueError(f"cannot merge second moments of shapes {self.sum.shape} and {other.sum.shape}")
        total = self.sum + other.sum.to(self.sum.device)
        return SecondMoment(total, self.n_tokens + other.n_tokens, self.n_documents + other.n_documents)


@dataclass
class LayerProgress:
    """A layer's running statistics and the absolute index of the first corpus document not yet in them."""

    moment: SecondMoment
    next_document: int


def default_max_length(model: nn.Module) -> int:
    """The model's context length (``n_positions`` / ``max_position_embeddings``), clamped to 4096."""
    config = model.config
    context = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    return min(int(context or MAX_DEFAULT_LENGTH), MAX_DEFAULT_LENGTH)


def key_dimension(model: nn.Module, layer: int) -> int:
    """``d_in`` of the MLP output projection of ``layer``."""
    arch = resolve_architecture(model)
    module = arch.module(arch.spec.mlp_out, layer)
    return to_linear(module.weight, weight_layout(module)).shape[1]


def _batches(texts: Iterator[str], first: int, size: int) -> Iterator[list[tuple[int, str]]]:
    batch: list[tuple[int, str]] = []
    for index, text in enumerate(texts, start=first):
        batch.append((index, text))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def run_pass(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    corpus: Corpus,
    progress: Mapping[int, LayerProgress],
    stop: int,
    *,
    max_length: int,
    documents_per_forward: int = 8,
    save_every: int | None = None,
    on_checkpoint: Callable[[Mapping[int, LayerProgress]], None] | None = None,
    on_batch: Callable[[Mapping[int, LayerProgress]], None] | None = None,
    show_progress: bool = True,
) -> None:
    """Advance every layer of ``progress`` (in place) to document ``stop`` (or the corpus end) in one pass.

    Args:
        progress: ``{layer: LayerProgress}``; sums on the model's device.
        stop: Absolute index of the first document not to use.
        save_every: Call ``on_checkpoint`` after the batch that completes every ``save_every`` documents.
        on_checkpoint: Receives ``progress`` at checkpoints, and before an exception leaves the pass (also
            :class:`~lightning_edit.errors.Interrupted`, raised after the batch in which a stop signal arrived).
        on_batch: Receives ``progress`` after each batch (progress reporting, tests).
    """
    arch = resolve_architecture(model)
    names = {layer: arch.layer_name(arch.spec.mlp_out, layer) for layer in progress}
    active = [layer for layer, state in progress.items() if state.next_document < stop]
    if not active:
        return
    first = min(progress[layer].next_document for layer in active)
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    since_checkpoint = 0
    consistent = True
    was_training = model.training
    model.eval()
    description = f"key statistics, layers {sorted(active)}"
    bar = tqdm(total=stop - first, desc=description, unit="doc", disable=not show_progress)
    try:
        with torch.no_grad():
            for batch in _batches(corpus.documents(first, stop), first, documents_per_forward):
                encoded = tokenizer([text for _, text in batch], truncation=True, max_length=max_length)["input_ids"]
                kept = [(index, ids) for (index, _), ids in zip(batch, encoded) if ids]
                keys = _forward_keys(model, names, active, kept, pad_id, device) if kept else {}
                consistent = False  # the layers' states are being updated: no checkpoint until done
                for layer in active:
                    if kept:
                        _add(progress[layer], keys[layer], [index for index, _ in kept])
                    progress[layer].next_document = max(progress[layer].next_document, batch[-1][0] + 1)
                consistent = True
                bar.update(len(batch))
                since_checkpoint += len(batch)
                if save_every and since_checkpoint >= save_every and on_checkpoint is not None:
                    on_checkpoint(progress)
                    since_checkpoint = 0
                if on_batch is not None:
                    on_batch(progress)
                if (signum := stop_point()) is not None:  # a document boundary: the sums are consistent
                    done = batch[-1][0] + 1
                    raise Interrupted(f"key statistics pass stopped by signal {signum} at document {done}", signum)
    except BaseException:
        if on_checkpoint is not None and since_checkpoint and consistent:
            on_checkpoint(progress)
        raise
    finally:
        bar.close()
        model.train(was_training)


def _forward_keys(
    model: nn.Module,
    names: Mapping[int, str],
    active: Sequence[int],
    kept: list[tuple[int, list[int]]],
    pad_id: int,
    device: torch.device,
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """One forward, stopped after the deepest layer: ``{layer: (keys (B, L, d_in), attention mask (B, L))}``."""
    input_ids, attention_mask, position_ids = pad([ids for _, ids in kept], pad_id, side="right")
    deepest = names[max(active)]
    with Trace(model, [names[layer] for layer in active], inputs=True, outputs=False, stop_after=deepest) as trace:
        model(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            position_ids=position_ids.to(device),
            use_cache=False,
        )
    mask = attention_mask.bool().to(device)
    return {layer: (trace.inputs[names[layer]], mask) for layer in active}


def _add(state: LayerProgress, keys_and_mask: tuple[torch.Tensor, torch.Tensor], indices: list[int]) -> None:
    """Add the non-padding keys of the documents the layer has not counted yet (index >= its next_document)."""
    keys, mask = keys_and_mask
    rows = torch.tensor(indices) >= state.next_document  # (B,)
    if not rows.any():
        return
    selected = keys[mask & rows.to(mask.device)[:, None]].to(torch.float64)  # (n, d_in)
    state.moment.sum.addmm_(selected.T, selected)
    state.moment.n_tokens += selected.shape[0]
    state.moment.n_documents += int(rows.sum())


def collect_second_moments(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    corpus: Corpus | str | Sequence[str],
    layers: Sequence[int],
    *,
    n_samples: int = 100_000,
    start: int = 0,
    max_length: int | None = None,
    documents_per_forward: int = 8,
    progress: bool = True,
    on_batch: Callable[[Mapping[int, LayerProgress]], None] | None = None,
) -> dict[int, SecondMoment]:
    """``{layer: SecondMoment}`` over documents ``start .. start+n_samples-1`` of ``corpus``, in one pass, uncached.

    Args:
        model: A causal LM of a registered family, in any dtype.
        tokenizer: Its tokenizer.
        corpus: A :class:`Corpus` or a spec accepted by :func:`~lightning_edit.stats.corpus.as_corpus`.
        layers: Layer indices whose MLP output projection input is summed.
        n_samples: Number of documents (fewer if the corpus ends first; ``n_documents`` says how many).
        start: Index of the first document (to compute one shard of a larger range).
        max_length: Tokens kept per document (default :func:`default_max_length`).
        documents_per_forward: Documents per forward pass.
        progress: Show a progress bar.
        on_batch: Called with the running ``{layer: LayerProgress}`` after each batch.
    """
    corpus = as_corpus(corpus)
    device = next(model.parameters()).device
    states = {layer: LayerProgress(SecondMoment.zeros(key_dimension(model, layer), device), start) for layer in layers}
    run_pass(
        model,
        tokenizer,
        corpus,
        states,
        start + n_samples,
        max_length=max_length or default_max_length(model),
        documents_per_forward=documents_per_forward,
        on_batch=on_batch,
        show_progress=progress,
    )
    return {layer: replace(state.moment, sum=state.moment.sum.cpu()) for layer, state in states.items()}
