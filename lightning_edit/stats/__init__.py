"""Key statistics ``C = E[k kᵀ]`` for the locate-then-edit editors (ROME, MEMIT, AlphaEdit), cached on disk.

- :mod:`.corpus`: documents from ``.txt``/``.jsonl`` files, a list of strings, or ``hf:<dataset>``.
- :mod:`.second_moment`: :class:`SecondMoment` and the one-forward, all-layers, float64 pass.
- :mod:`.fingerprint`: content-based model fingerprints (what a layer's statistics depend on).
- :mod:`.store`: checksummed safetensors + JSON cache entries.
- :mod:`.cache`: :func:`load_or_compute` — reuse, resume after interruption, merge shards.
- :mod:`.projector`: cached AlphaEdit null-space projectors.

Example::

    stats = load_or_compute(model, tokenizer, "corpus.jsonl", layers=[3, 4, 5], n_samples=10_000)
    C = stats[5].mean()
    # AlphaEdit's null-space basis (nullspace_projector from lightning_edit.editors.solvers); P = U @ U.T
    U = load_or_compute_projector(stats[5], 2e-2, compute=nullspace_projector)
"""

from lightning_edit.stats.cache import StatsKey, load_or_compute, stats_cache_dir
from lightning_edit.stats.corpus import (
    Corpus,
    CorpusError,
    HFCorpus,
    JsonlCorpus,
    ListCorpus,
    TextFileCorpus,
    as_corpus,
)
from lightning_edit.stats.fingerprint import model_fingerprint, model_fingerprints
from lightning_edit.stats.projector import load_or_compute_projector
from lightning_edit.stats.second_moment import (
    LayerProgress,
    SecondMoment,
    collect_second_moments,
    default_max_length,
    key_dimension,
    run_pass,
)

__all__ = [
    "Corpus",
    "CorpusError",
    "HFCorpus",
    "JsonlCorpus",
    "LayerProgress",
    "ListCorpus",
    "SecondMoment",
    "StatsKey",
    "TextFileCorpus",
    "as_corpus",
    "collect_second_moments",
    "default_max_length",
    "key_dimension",
    "load_or_compute",
    "load_or_compute_projector",
    "model_fingerprint",
    "model_fingerprints",
    "run_pass",
    "stats_cache_dir",
]
