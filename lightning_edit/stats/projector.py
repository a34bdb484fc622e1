"""On-disk cache of AlphaEdit's null-space basis ``Û`` of a layer's key statistics.

See docs/editors/alphaedit.md#alphaedit. Only ``Û`` (d_in × r) is stored: the projector is ``P = Û Ûᵀ`` and the reduced
solve needs ``Û`` alone, while a stored ``P`` would cost d_in² floats per layer (1.6 GB at d_in 14336).

Entries live at ``<stats cache>/projector/<id>.{safetensors,json}``; the id hashes the statistics' cache key (or,
for statistics that did not come from the cache, a content hash of their sum and token count), the threshold τ and
the name of the function that computed the projector. Same checksum/metadata discipline as the statistics.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import torch

from lightning_edit.stats.cache import stats_cache_dir
from lightning_edit.stats.second_moment import SecondMoment
from lightning_edit.stats.store import canonical_sha256, read_entry, write_entry

logger = logging.getLogger(__name__)

ProjectorFn = Callable[[torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


def statistics_key(moment: SecondMoment) -> str:
    """The moment's cache key, or a content hash when it was not loaded from / written to the cache."""
    if moment.cache_key is not None:
        return moment.cache_key
    digest = hashlib.sha256(moment.sum.detach().cpu().to(torch.float64).contiguous().numpy().tobytes())
    digest.update(f"|{moment.n_tokens}".encode())
    return f"content-{digest.hexdigest()}"


def load_or_compute_projector(
    moment: SecondMoment,
    threshold: float = 2e-2,
    *,
    compute: ProjectorFn,
    cache_dir: str | Path | None = None,
) -> torch.Tensor:
    """``Û (d_in, r)``, the null-space basis of ``C = moment.mean()`` (``P = Û Ûᵀ``): cached, or computed by
    ``compute(C, threshold)`` and cached.

    Args:
        moment: A layer's key statistics (from :func:`~lightning_edit.stats.cache.load_or_compute`).
        threshold: τ, eigenvalues of ``C`` below it span the null space (AlphaEdit ``nullspace_threshold``).
        compute: ``compute(C, threshold) -> (P (d, d), Û (d, r))`` (AlphaEdit:
            :func:`lightning_edit.editors.solvers.nullspace_projector`); its name is part of the cache key.
        cache_dir: Statistics cache directory (default: see :func:`~lightning_edit.stats.cache.stats_cache_dir`).
    """
    d_in = moment.sum.shape[0]
    identity = {
        "kind": "nullspace_projector",
        "statistics_key": statistics_key(moment),
        "threshold": float(threshold),
        "compute": f"{compute.__module__}.{compute.__qualname__}",
    }
    stem = stats_cache_dir(cache_dir) / "projector" / canonical_sha256(identity)[:40]
    entry = read_entry(stem, identity)
    if entry is not None:
        U = entry[0].get("U")
        if U is not None and U.ndim == 2 and U.shape[0] == d_in:
            return U
        logger.warning("ignoring projector cache entry %s (will recompute): unexpected tensors", stem)
    _, U = compute(moment.mean(), threshold)
    write_entry(stem, {"U": U}, {**identity, "rank": int(U.shape[1]), "d_in": d_in})
    return U.cpu()
