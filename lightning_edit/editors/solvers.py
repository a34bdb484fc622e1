"""Closed-form weight updates of ROME, MEMIT and AlphaEdit as pure tensor functions (no model, no hooks).

Everything is in the Linear convention of docs/editors/index.md#conventions: ``W`` is ``(d_out, d_in)``, a key ``k`` is
in ``R^{d_in}``, keys are stacked as columns ``K (d_in, n)``, residuals as ``R (d_out, n)``, and
``C = E[k kᵀ]`` is the uncentred key second moment ``(d_in, d_in)``. Convert stored weights with
:func:`lightning_edit.models.registry.to_linear` / ``from_linear`` before and after.

All arithmetic is done in float64 whatever the input dtype (bf16 cannot resolve an ill-conditioned ``C``;
docs/editors/locate-then-edit.md#numerics); results are float64 unless ``dtype`` asks for another one. Every inverse is
a solve: Cholesky for SPD systems (with a tiny ridge if the factorisation fails), LU only for AlphaEdit's non-symmetric
full system.

    rome_update(C, k, v_star, W)          ΔW = (v* − W k) (C⁻¹k)ᵀ / (kᵀC⁻¹k)                   (ROME eq. 2)
    memit_update(C, K, R, lam)            ΔW (λC + K Kᵀ) = R Kᵀ                               (MEMIT eq. 14)
    memit_layer_residual(Z, H, m_left)    R_l = (Z − H) / m_left                              (MEMIT Alg. 1)
    nullspace_projector(C, tau)           P = Û Ûᵀ, Û = eigenvectors of C with eigenvalue < τ (AlphaEdit)
    alphaedit_update(K, R, P=|U=, ...)    (P(K Kᵀ + C_p) + αI) ΔWᵀ = P K Rᵀ                   (AlphaEdit)

Each update is low rank and also comes as its factors ``ΔW = U Vᵀ`` (``rome_factors``, ``memit_factors``,
``alphaedit_factors``), which the batched ``single`` protocol adds row by row instead of writing
(:class:`~lightning_edit.models.row_updates.RowUpdates`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_edit.models.row_updates import LowRankUpdate

F64 = torch.float64
_RIDGES = (1e-12, 1e-10, 1e-8, 1e-6, 1e-4)  # relative to the mean diagonal, tried in order if Cholesky fails


def _f64(x: Tensor, device: torch.device | None = None) -> Tensor:
    return x.detach().to(device=device if device is not None else x.device, dtype=F64)


def _out(x: Tensor, dtype: torch.dtype | None) -> Tensor:
    return x if dtype is None else x.to(dtype)


def cholesky(A: Tensor) -> tuple[Tensor, float]:
    """Lower Cholesky factor of a symmetric PSD ``A`` (float64), and the relative ridge that was needed.

    If ``A`` is not numerically positive definite, ``ε·mean(diag A)·I`` is added with ε growing from 1e-12
    (docs/editors/locate-then-edit.md#numerics); the returned ε is 0.0 when none was needed.
    """
    A = _f64(A)
    A = (A + A.T) / 2  # (d, d) exact symmetry; rounding can break it
    L, info = torch.linalg.cholesky_ex(A)
    if info.item() == 0:
        return L, 0.0
    eye = torch.eye(A.shape[0], dtype=F64, device=A.device)
    scale = A.diagonal().abs().mean().clamp_min(torch.finfo(F64).tiny)
    for eps in _RIDGES:
        L, info = torch.linalg.cholesky_ex(A + eps * scale * eye)
        if info.item() == 0:
            return L, eps
    raise torch.linalg.LinAlgError(f"Cholesky failed even with a relative ridge of {_RIDGES[-1]:g}.")


class CovarianceFactor:
    """A key covariance ``C`` with its Cholesky factor cached, so ``C⁻¹B`` costs two triangular solves.

    Build it once per (model, layer) and pass it wherever a ``C`` is accepted; since ``(λC)⁻¹ = C⁻¹/λ`` the same
    factor serves every λ (MEMIT's Woodbury path then needs only ``n×n`` work per batch;
    docs/editors/locate-then-edit.md#solvers).
    """

    def __init__(self, C: Tensor):
        C = _f64(C)
        self.C = (C + C.T) / 2  # (d_in, d_in)
        self.L, self.ridge = cholesky(self.C)  # (d_in, d_in) lower triangular; ridge is relative

    @property
    def d_in(self) -> int:
        return self.C.shape[0]

    def solve(self, B: Tensor) -> Tensor:
        """``C⁻¹ B`` for ``B`` of shape ``(d_in,)`` or ``(d_in, n)``, in float64 on ``B``'s device."""
        B = _f64(B)
        L = self.L if self.L.device == B.device else self.L.to(B.device)
        return torch.cholesky_solve(B.unsqueeze(-1) if B.ndim == 1 else B, L).reshape(B.shape)


def _as_factor(C: Tensor | CovarianceFactor) -> CovarianceFactor:
    return C if isinstance(C, CovarianceFactor) else CovarianceFactor(C)


# ------------------------------------------------------------------------------------------------------------- ROME


def rome_update(
    C: Tensor | CovarianceFactor | None,
    k: Tensor,
    v_star: Tensor,
    W: Tensor,
    *,
    k0: Tensor | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """ROME's rank-one update (Meng et al. 2022, eq. 2): ``ΔW = (v* − W k₀) uᵀ / (uᵀk₀)``, ``u = C⁻¹k``.

    It is the minimum-change (in the metric ``C``) update with ``(W + ΔW) k₀ = v*``; its row space is
    ``span(C⁻¹k)``, so ``ΔW k' = 0`` whenever ``k'ᵀC⁻¹k = 0`` (docs/editors/rome.md#rome).

    Args:
        C: key covariance ``(d_in, d_in)`` (or a cached :class:`CovarianceFactor`); ``None`` means no mom2
            adjustment (``C = I``, ``u ∥ k``).
        k: key defining the direction ``u`` ``(d_in,)`` (the prefix-averaged k̄ of the original code).
        v_star: target output ``(d_out,)`` of the projection at ``k₀`` (bias already removed: ``v* − b``).
        W: current weight ``(d_out, d_in)``.
        k0: key whose output must become ``v*`` (the bare-prompt key of the original code); defaults to ``k``,
            which is the paper form and r-ROME.
        dtype: dtype of the result (float64 if ``None``).

    Returns:
        ``ΔW`` of shape ``(d_out, d_in)``.
    """
    return _out(rome_factors(C, k, v_star, W, k0=k0).matrix(), dtype)


def rome_factors(
    C: Tensor | CovarianceFactor | None, k: Tensor, v_star: Tensor, W: Tensor, *, k0: Tensor | None = None
) -> LowRankUpdate:
    """:func:`rome_update` as its two factors, ``U = (v* − W k₀) / (uᵀk₀)`` ``(d_out, 1)`` and ``V = u`` ``(d_in, 1)``
    (float64)."""
    k = _f64(k)  # (d_in,)
    k0 = k if k0 is None else _f64(k0, k.device)  # (d_in,)
    W = _f64(W, k.device)  # (d_out, d_in)
    u = k if C is None else _as_factor(C).solve(k)  # (d_in,) C⁻¹k
    r = _f64(v_star, k.device) - W @ k0  # (d_out,) residual v* − W k₀
    return LowRankUpdate((r / (u @ k0))[:, None], u[:, None])


# ------------------------------------------------------------------------------------------------------------ MEMIT


def memit_layer_residual(Z: Tensor, H: Tensor, layers_remaining: int) -> Tensor:
    """Residual spreading (MEMIT, Meng et al. 2023, Alg. 1): ``R_l = (Z − H) / (m − i)`` at layer index ``i``.

    ``Z`` are the target hidden states and ``H`` the current ones at the last edited layer, both ``(d, n)``;
    ``layers_remaining = m − i`` counts this layer and the later ones (the last layer takes all that is left).
    """
    if layers_remaining < 1:
        raise ValueError(f"layers_remaining must be >= 1, got {layers_remaining}.")
    return (_f64(Z) - _f64(H, Z.device)) / layers_remaining  # (d, n)


def memit_update(
    C: Tensor | CovarianceFactor,
    K: Tensor,
    R: Tensor,
    lam: float,
    *,
    method: str = "auto",
    dtype: torch.dtype | None = None,
) -> Tensor:
    """MEMIT's batch update (Meng et al. 2023, eq. 14): the ``ΔW`` solving ``ΔW (λC + K Kᵀ) = R Kᵀ``.

    It minimises ``‖ΔW K − R‖² + λ tr(ΔW C ΔWᵀ)`` (docs/editors/memit.md#memit). Methods:
      - ``"cholesky"``: ``adj = (λC + KKᵀ)⁻¹ K`` via a Cholesky factor of ``λC + KKᵀ``; ``ΔW = R adjᵀ``.
      - ``"woodbury"``: push-through identity, ``ΔW = R (I_n + Kᵀ(λC)⁻¹K)⁻¹ ((λC)⁻¹K)ᵀ``, which needs only
        ``n×n`` work when ``C`` comes as a cached :class:`CovarianceFactor`
        (docs/editors/locate-then-edit.md#solvers). Requires ``λ > 0``.
      - ``"auto"``: Woodbury when ``λ > 0``, ``C`` comes with its cached factor and ``2n ≤ d_in`` (measured on
        CPU at d_in 2048: 17x faster at n = 1, 1.7x at n = 1000, slower from n ≈ d_in), else the direct solve.

    Args:
        C: key covariance ``(d_in, d_in)`` or its :class:`CovarianceFactor`.
        K: keys ``(d_in, n)``; R: residuals ``(d_out, n)`` (already spread over layers).
        lam: ``λ = mom2_update_weight``.

    Returns:
        ``ΔW`` of shape ``(d_out, d_in)``, of rank ≤ n.
    """
    return _out(memit_factors(C, K, R, lam, method=method).matrix(), dtype)


def memit_factors(
    C: Tensor | CovarianceFactor, K: Tensor, R: Tensor, lam: float, *, method: str = "auto"
) -> LowRankUpdate:
    """:func:`memit_update` as ``ΔW = U Vᵀ`` with ``U (d_out, n)`` and ``V (d_in, n)`` (float64): ``(R, adj)`` on the
    Cholesky path, ``((S⁻¹Rᵀ)ᵀ, (λC)⁻¹K)`` on the Woodbury path."""
    K = _f64(K)  # (d_in, n)
    R = _f64(R, K.device)  # (d_out, n)
    d_in, n = K.shape
    if method == "auto":
        cached = isinstance(C, CovarianceFactor)
        method = "woodbury" if lam > 0 and cached and 2 * n <= d_in else "cholesky"
    if method == "woodbury":
        if lam <= 0:
            raise ValueError("The Woodbury path needs lam > 0.")
        A = _as_factor(C).solve(K) / lam  # (d_in, n) (λC)⁻¹K
        S = torch.eye(n, dtype=F64, device=K.device) + K.T @ A  # (n, n) SPD
        X = torch.cholesky_solve(R.T, cholesky(S)[0])  # (n, d_out) S⁻¹Rᵀ
        return LowRankUpdate(X.T, A)
    if method == "cholesky":
        C = C.C if isinstance(C, CovarianceFactor) else _f64(C)
        M = lam * C.to(K.device) + K @ K.T  # (d_in, d_in) λC + KKᵀ
        adj = torch.cholesky_solve(K, cholesky(M)[0])  # (d_in, n)
        return LowRankUpdate(R, adj)
    raise ValueError(f"Unknown method {method!r}; expected 'auto', 'cholesky' or 'woodbury'.")


# -------------------------------------------------------------------------------------------------------- AlphaEdit


def nullspace_projector(C: Tensor, threshold: float = 2e-2) -> tuple[Tensor, Tensor]:
    """AlphaEdit's null-space projector (Fang et al. 2025): ``P = Û Ûᵀ`` from ``eigh(C)``.

    See docs/editors/alphaedit.md#alphaedit.

    ``Û (d_in, r)`` holds the orthonormal eigenvectors of ``C`` whose eigenvalue is below ``threshold`` (τ), so
    ``P`` is symmetric, idempotent, of rank ``r`` and (nearly) annihilates the preserved keys: ``‖P C‖₂ < τ``.

    Returns:
        ``(P, U_keep)`` of shapes ``(d_in, d_in)`` and ``(d_in, r)``, float64.
    """
    C = _f64(C)
    evals, evecs = torch.linalg.eigh((C + C.T) / 2)  # (d_in,), (d_in, d_in)
    U = evecs[:, evals < threshold]  # (d_in, r)
    return U @ U.T, U


def alphaedit_update(
    K: Tensor,
    R: Tensor,
    *,
    P: Tensor | None = None,
    U: Tensor | None = None,
    C_prev: Tensor | None = None,
    alpha: float = 10.0,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """AlphaEdit's projected update (Fang et al. 2025): ``(P(KKᵀ+C_p) + αI) ΔWᵀ = PKRᵀ``.

    See docs/editors/alphaedit.md#alphaedit.

    The solution lies in ``range(P)`` (apply ``I − P`` to the equation: ``α(I − P)ΔWᵀ = 0``), so ``ΔW = ΔW P`` and
    the preserved keys are left (nearly) unchanged. Pass exactly one of:

      - ``P (d_in, d_in)``: the full ``d_in × d_in`` (non-symmetric) system, solved by LU;
      - ``U (d_in, r)``: the cheaper equivalent in the basis ``Û``, ``ΔWᵀ = Û Z`` with the ``r × r`` SPD system
        ``(Ûᵀ(KKᵀ + C_p)Û + αI) Z = ÛᵀK Rᵀ`` solved by Cholesky. Same ``ΔW`` as the full solve
        (docs/editors/locate-then-edit.md#solvers).

    Args:
        K: keys ``(d_in, n)``; R: residuals ``(d_out, n)``.
        C_prev: ``C_p = Σ K'K'ᵀ`` of previously edited batches ``(d_in, d_in)`` (``None`` = 0), see
            :class:`EditedKeyCache`.
        alpha: ``α = L2`` (> 0).

    Returns:
        ``ΔW`` of shape ``(d_out, d_in)``.
    """
    return _out(alphaedit_factors(K, R, P=P, U=U, C_prev=C_prev, alpha=alpha).matrix(), dtype)


def alphaedit_factors(
    K: Tensor,
    R: Tensor,
    *,
    P: Tensor | None = None,
    U: Tensor | None = None,
    C_prev: Tensor | None = None,
    alpha: float = 10.0,
) -> LowRankUpdate:
    """:func:`alphaedit_update` as ``ΔW = R Vᵀ`` (float64): ``V = A⁻¹PK`` ``(d_in, n)`` for the full system
    ``A = P(KKᵀ+C_p) + αI``, or ``V = Û A⁻¹ÛᵀK`` for the reduced, symmetric ``A = Ûᵀ(KKᵀ+C_p)Û + αI``."""
    if (P is None) == (U is None):
        raise ValueError("Pass exactly one of P (full solve) or U (reduced r×r solve).")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}.")
    K = _f64(K)  # (d_in, n)
    R = _f64(R, K.device)  # (d_out, n)
    Cp = None if C_prev is None else _f64(C_prev, K.device)  # (d_in, d_in)
    if U is not None:
        U = _f64(U, K.device)  # (d_in, r)
        UK = U.T @ K  # (r, n)
        A = UK @ UK.T + alpha * torch.eye(U.shape[1], dtype=F64, device=K.device)  # (r, r) Ûᵀ KKᵀ Û + αI
        if Cp is not None:
            A = A + U.T @ Cp @ U
        return LowRankUpdate(R, U @ torch.cholesky_solve(UK, cholesky(A)[0]))  # V (d_in, n) = Û A⁻¹ ÛᵀK
    P = _f64(P, K.device)  # (d_in, d_in)
    M = K @ K.T if Cp is None else K @ K.T + Cp  # (d_in, d_in)
    A = P @ M + alpha * torch.eye(K.shape[0], dtype=F64, device=K.device)  # (d_in, d_in)
    return LowRankUpdate(R, torch.linalg.solve(A, P @ K))  # V (d_in, n) = A⁻¹PK


class EditedKeyCache:
    """AlphaEdit's ``cache_c`` for one layer: ``C_p = Σ K Kᵀ`` over the batches edited so far.

    Call :meth:`update` with the keys of a batch recomputed on the edited model, pass :attr:`matrix` as
    ``C_prev`` to the next :func:`alphaedit_update`, and :meth:`reset` between independent edit sequences.
    ``dtype`` sets the storage (float64 by default; float32 halves the memory at large ``d_in``).
    """

    def __init__(self, d_in: int, *, dtype: torch.dtype = F64, device: torch.device | str | None = None):
        self.matrix = torch.zeros(d_in, d_in, dtype=dtype, device=device)  # (d_in, d_in)
        self.n_keys = 0

    def update(self, K: Tensor) -> None:
        """Add ``K Kᵀ`` (computed in float64) of keys ``K (d_in, n)``."""
        K = _f64(K)  # (d_in, n)
        self.matrix += (K @ K.T).to(device=self.matrix.device, dtype=self.matrix.dtype)
        self.n_keys += K.shape[1]

    def reset(self) -> None:
        """Forget every batch: ``C_p = 0``."""
        self.matrix.zero_()
        self.n_keys = 0


class UpdateFilter:
    """A change of what ROME or MEMIT writes: ``filter(ΔW, W)`` (d_out, d_in) is written instead of ΔW (RECT keeps
    the largest relative changes, :class:`~lightning_edit.editors.rect.RECT`). A filtered update is in general not
    low rank, so an editor with a filter edits the cases of ``single`` one at a time."""

    def __call__(self, delta: Tensor, W: Tensor) -> Tensor:
        raise NotImplementedError
