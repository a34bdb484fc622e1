"""On-disk cache of key statistics: reuse, resume, merge shards (docs/editors/locate-then-edit.md#key-statistics).

Location: ``cache_dir`` if given, else ``$LIGHTNING_EDIT_CACHE/stats``, else ``~/.cache/lightning_edit/stats``.
An entry holds one layer's ``Σ k kᵀ`` over documents ``[start, stop)`` of a corpus and lives at
``mom2/<module name>/<base id>.<start>-<stop>.{safetensors,json}``. The base id hashes everything the sums depend
on except the document range: the model fingerprint of that layer (:mod:`.fingerprint`: weights and config, not the
folder name), the hooked module, the corpus identity (content hash for files), ``max_length``, the model dtype and
the float64 accumulation. The JSON metadata also records the corpus description, ``n_documents`` (documents
actually used; fewer than requested if the corpus is short), ``n_tokens`` (non-padding tokens, the divisor of the
mean) and checksums (:mod:`.store`). Documents per forward pass are recorded, not keyed: they change the sums only
by rounding.

:func:`load_or_compute`, per layer: a valid complete entry is loaded (no forward pass); else complete entries of
sub-ranges written by other processes or runs (``start``/``n_samples`` shards) that tile the range are merged;
else the layer joins one forward pass over the corpus, resumed from its ``.partial`` entry when there is one.
Partials are saved every ``save_every`` documents, when the pass is interrupted by an exception, and when
``lightning-edit`` receives SIGTERM (the pass stops after the current batch; the same command resumes it). Each
holds ``Σ k kᵀ`` in float64, ``d_in² · 8`` bytes (1.6 GB for d_in = 14336): keep ``save_every`` large on big models.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from lightning_edit.errors import ConfigError, Interrupted
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.resources import user_cache_dir
from lightning_edit.stats.corpus import Corpus, as_corpus
from lightning_edit.stats.fingerprint import model_fingerprints
from lightning_edit.stats.second_moment import (
    LayerProgress,
    SecondMoment,
    default_max_length,
    key_dimension,
    run_pass,
)
from lightning_edit.stats.store import canonical_sha256, read_entry, remove_entry, write_entry

logger = logging.getLogger(__name__)

COUNT_UNITS = "n_documents counts documents, n_tokens counts non-padding tokens; mean = sum / n_tokens"


def stats_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """The statistics cache directory (see module docstring)."""
    return Path(cache_dir).expanduser() if cache_dir is not None else user_cache_dir("stats")


@dataclass(frozen=True)
class StatsKey:
    """Identity of one layer's statistics over documents ``[start, stop)``."""

    fingerprint: str
    module: str
    layer: int
    corpus: str
    max_length: int
    model_dtype: str
    start: int
    stop: int

    def base(self) -> dict[str, Any]:
        """Everything the sums depend on except the document range."""
        return {
            "kind": "mom2",
            "model_fingerprint": self.fingerprint,
            "module": self.module,
            "layer": self.layer,
            "corpus_identity": self.corpus,
            "max_length": self.max_length,
            "model_dtype": self.model_dtype,
            "accumulate_dtype": "float64",
        }

    @property
    def base_id(self) -> str:
        return canonical_sha256(self.base())[:32]

    @property
    def cache_key(self) -> str:
        """Unique key of the entry; what the projector cache keys on."""
        return f"mom2-{self.base_id}-{self.start}-{self.stop}"

    def with_range(self, start: int, stop: int) -> StatsKey:
        return replace(self, start=start, stop=stop)

    def stem(self, root: Path, partial: bool = False) -> Path:
        suffix = ".partial" if partial else ""
        return root / "mom2" / self.module / f"{self.base_id}.{self.start}-{self.stop}{suffix}"

    def expected(self, complete: bool) -> dict[str, Any]:
        return {**self.base(), "base_id": self.base_id, "start": self.start, "stop": self.stop, "complete": complete}


def _read_moment(key: StatsKey, root: Path, d_in: int, partial: bool = False) -> tuple[SecondMoment, dict] | None:
    stem = key.stem(root, partial)
    entry = read_entry(stem, key.expected(complete=not partial))
    if entry is None:
        return None
    tensors, record = entry
    total = tensors.get("sum")
    if total is None or total.dtype != torch.float64 or tuple(total.shape) != (d_in, d_in):
        logger.warning("ignoring cache entry %s (will recompute): sum is not a float64 %d×%d matrix", stem, d_in, d_in)
        return None
    moment = SecondMoment(total, int(record["n_tokens"]), int(record["n_documents"]), cache_key=key.cache_key)
    return moment, record


def _write_moment(key: StatsKey, root: Path, state: LayerProgress, info: Mapping[str, Any], partial: bool) -> None:
    metadata = {
        **key.expected(complete=not partial),
        **info,
        "cache_key": key.cache_key,
        "n_samples": key.stop - key.start,
        "n_documents": state.moment.n_documents,
        "n_tokens": state.moment.n_tokens,
        "count_units": COUNT_UNITS,
        "next_document": state.next_document,
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_entry(key.stem(root, partial), {"sum": state.moment.sum}, metadata)


def _merge_shards(key: StatsKey, root: Path, d_in: int) -> SecondMoment | None:
    """Merge complete entries of sub-ranges that tile ``[key.start, key.stop)``, if there are any."""
    ranges = []
    for meta_path in (root / "mom2" / key.module).glob(f"{key.base_id}.*-*.json"):
        span = meta_path.name[len(key.base_id) + 1 : -len(".json")]
        first, _, last = span.partition("-")
        if first.isdigit() and last.isdigit() and key.start <= int(first) < int(last) <= key.stop:
            ranges.append((int(first), int(last)))
    pieces = []
    cursor = key.start
    while cursor < key.stop:
        ends = [last for first, last in ranges if first == cursor]
        if not ends:
            return None
        pieces.append((cursor, max(ends)))
        cursor = max(ends)
    if len(pieces) < 2:
        return None
    merged = None
    for first, last in pieces:
        entry = _read_moment(key.with_range(first, last), root, d_in)
        if entry is None:
            return None
        merged = entry[0] if merged is None else merged.merge(entry[0])
    logger.info("merged %d cached shards %s into %s", len(pieces), pieces, key.cache_key)
    return merged


def load_or_compute(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    corpus: Corpus | str | Path | Sequence[str],
    layers: Sequence[int],
    *,
    n_samples: int = 100_000,
    start: int = 0,
    max_length: int | None = None,
    documents_per_forward: int = 8,
    cache_dir: str | Path | None = None,
    save_every: int | None = 10_000,
    text_field: str = "text",
    progress: bool = True,
    on_batch: Callable[[Mapping[int, LayerProgress]], None] | None = None,
    compute: bool = True,
) -> dict[int, SecondMoment]:
    """``{layer: SecondMoment}`` of the MLP-output-projection inputs, from the cache or one forward pass.

    Args:
        model: A causal LM of a registered family (its unedited weights: statistics describe the base model).
        tokenizer: Its tokenizer.
        corpus: A :class:`~lightning_edit.stats.corpus.Corpus`, a list of strings, a ``.txt``/``.jsonl`` path or
            ``hf:<name>[:<config>]``.
        layers: Layer indices; all missing ones are computed in the same forward.
        n_samples: Number of documents, counted from ``start`` (fewer if the corpus ends first).
        start: First document index. Shards ``[0, m)`` and ``[m, n)`` computed by separate runs with the same
            ``cache_dir`` are merged when ``[0, n)`` is requested.
        max_length: Tokens kept per document (default: context length clamped to 4096).
        documents_per_forward: Documents per forward pass.
        cache_dir: Cache directory (default: see :func:`stats_cache_dir`).
        save_every: Save partial sums every this many documents (``None``: only on interruption).
        text_field: Document field of ``.jsonl`` records and Hugging Face datasets.
        progress: Show a progress bar.
        on_batch: Called with the running ``{layer: LayerProgress}`` after each batch.
        compute: False: return only the layers found in the cache (or merged from cached shards), run no pass.

    Returns:
        CPU float64 statistics per layer, each with its ``cache_key``.
    """
    if n_samples < 1 or start < 0:
        raise ConfigError(f"n_samples={n_samples} must be at least 1 and start={start} at least 0")
    corpus = as_corpus(corpus, text_field=text_field)
    root = stats_cache_dir(cache_dir)
    arch = resolve_architecture(model)
    layers = sorted(set(layers))
    max_length = max_length or default_max_length(model)
    model_dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    fingerprints = model_fingerprints(model, layers)
    keys = {
        layer: StatsKey(
            fingerprint=fingerprints[layer],
            module=arch.layer_name(arch.spec.mlp_out, layer),
            layer=layer,
            corpus=corpus.identity,
            max_length=max_length,
            model_dtype=model_dtype,
            start=start,
            stop=start + n_samples,
        )
        for layer in layers
    }
    dims = {layer: key_dimension(model, layer) for layer in layers}
    info = {
        "corpus": corpus.description,
        "model_name_or_path": getattr(model.config, "_name_or_path", ""),
        "model_class": type(model).__name__,
        "documents_per_forward": documents_per_forward,
    }
    results: dict[int, SecondMoment] = {}
    for layer in layers:
        cached = _read_moment(keys[layer], root, dims[layer])
        if cached is not None:
            logger.info("key statistics of layer %d loaded from %s", layer, keys[layer].stem(root))
            results[layer] = cached[0]
            continue
        merged = _merge_shards(keys[layer], root, dims[layer])
        if merged is not None:
            _write_moment(keys[layer], root, LayerProgress(merged, keys[layer].stop), info, partial=False)
            results[layer] = replace(merged, cache_key=keys[layer].cache_key)
    missing = [layer for layer in layers if layer not in results]
    if not missing or not compute:
        return results
    states = {layer: _start_state(keys[layer], root, dims[layer], model) for layer in missing}

    def checkpoint(running: Mapping[int, LayerProgress]) -> None:
        for layer, state in running.items():
            _write_moment(keys[layer], root, state, info, partial=True)

    try:
        run_pass(
            model,
            tokenizer,
            corpus,
            states,
            start + n_samples,
            max_length=max_length,
            documents_per_forward=documents_per_forward,
            save_every=save_every,
            on_checkpoint=checkpoint,
            on_batch=on_batch,
            show_progress=progress,
        )
    except Interrupted as stopped:
        where = keys[missing[0]].stem(root, partial=True).parent.parent
        raise Interrupted(
            f"{stopped}; the partial sums are saved under {where} (*.partial): run the same command again to resume",
            stopped.signum,
        ) from None
    for layer, state in states.items():
        state.moment.sum = state.moment.sum.cpu()
        if state.moment.n_documents < n_samples:
            logger.info("layer %d statistics use %d of %d requested documents of %s (corpus ended)",
                        layer, state.moment.n_documents, n_samples, corpus.description)
        _write_moment(keys[layer], root, state, info, partial=False)
        remove_entry(keys[layer].stem(root, partial=True))
        results[layer] = replace(state.moment, cache_key=keys[layer].cache_key)
    return {layer: results[layer] for layer in layers}


def _start_state(key: StatsKey, root: Path, d_in: int, model: nn.Module) -> LayerProgress:
    """The layer's state to continue from: its valid partial entry, else zeros at ``key.start``."""
    device = next(model.parameters()).device
    partial = _read_moment(key, root, d_in, partial=True)
    if partial is not None:
        moment, record = partial
        next_document = int(record["next_document"])
        if key.start <= next_document <= key.stop:
            logger.info("resuming key statistics of layer %d at document %d", key.layer, next_document)
            return LayerProgress(replace(moment, sum=moment.sum.to(device), cache_key=None), next_document)
        logger.warning("ignoring partial entry %s: next_document %d outside the range", key.stem(root), next_document)
    return LayerProgress(SecondMoment.zeros(d_in, device), key.start)
