"""Where an editor's key statistics come from: a small config that the editors take as one argument."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from transformers import PreTrainedTokenizerBase

from lightning_edit.errors import ConfigError
from lightning_edit.resources import resolve_path
from lightning_edit.stats.cache import load_or_compute
from lightning_edit.stats.second_moment import SecondMoment


@dataclass
class KeyStatistics:
    """The corpus and sample of the key second moments ``C = E[k kᵀ]`` (computed once, cached on disk).

    Args:
        corpus: a ``.txt`` (one document per line) or ``.jsonl`` file, ``builtin:data/...``, or
            ``hf:<dataset>[:<config>]`` (needs network and the ``datasets`` package). ROME/MEMIT used Wikipedia.
        n_samples: documents used (ROME/MEMIT: 100,000).
        max_length: tokens kept per document (None: the model's context, at most 4096).
        documents_per_forward: documents per forward pass.
        cache_dir: the statistics cache (default ``$LIGHTNING_EDIT_CACHE`` or ``~/.cache/lightning_edit/stats``).
    """

    corpus: str | None = None
    n_samples: int = 100_000
    max_length: int | None = None
    documents_per_forward: int = 8
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        for name in ("n_samples", "documents_per_forward", "max_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"stats.{name}={value}: must be at least 1")

    def second_moments(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, layers: list[int], progress: bool = True
    ) -> dict[int, SecondMoment]:
        """``{layer: SecondMoment}`` from the cache (or merged from cached shards), or from one forward pass over the
        corpus (``progress``: show a progress bar)."""
        if self.corpus is None:
            raise ConfigError("this editor needs key statistics: set stats.corpus (a .txt/.jsonl file or hf:<name>)")
        return load_or_compute(
            model, tokenizer, self._corpus(), layers, n_samples=self.n_samples, progress=progress, **self._options()
        )

    def compute_shard(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        layers: list[int],
        index: int,
        count: int,
        progress: bool = True,
    ) -> None:
        """Cache shard ``index`` of ``count`` of the documents, unless the whole sample is cached already.

        Once every shard is cached, :meth:`second_moments` merges them instead of running the pass, so that
        ``count`` processes share the pass (the sums are added in another order: C equals one process's up to
        float64 rounding).
        """
        if self.corpus is None:  # second_moments says what is missing
            return
        corpus = self._corpus()
        options = self._options()
        cached = load_or_compute(model, tokenizer, corpus, layers, n_samples=self.n_samples, compute=False, **options)
        share = -(-self.n_samples // count)
        start = min(index * share, self.n_samples)
        if len(cached) < len(layers) and start < self.n_samples:
            n_samples = min(share, self.n_samples - start)
            load_or_compute(
                model, tokenizer, corpus, layers, n_samples=n_samples, start=start, progress=progress, **options
            )

    def _corpus(self) -> str:
        return self.corpus if self.corpus.startswith("hf:") else str(resolve_path(self.corpus))

    def _options(self) -> dict:
        return {
            "max_length": self.max_length,
            "documents_per_forward": self.documents_per_forward,
            "cache_dir": self.cache_dir,
        }
