"""Closed-form solvers of ROME, MEMIT and AlphaEdit: the invariants of docs/editors/index.md#invariants (Solvers)."""

import pytest
import torch

from lightning_edit.editors.solvers import (
    CovarianceFactor,
    EditedKeyCache,
    alphaedit_update,
    memit_layer_residual,
    memit_update,
    nullspace_projector,
    rome_update,
)

F64 = torch.float64
D_IN, D_OUT, N = 40, 24, 5
TAU = 2e-2


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative Frobenius distance ‖a − b‖ / ‖b‖."""
    return ((a - b).norm() / b.norm()).item()


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def covariance(d: int = D_IN, n_samples: int = 400, seed: int = 0) -> torch.Tensor:
    """An uncentred second moment E[k kᵀ] of non-isotropic random keys, full rank."""
    keys = randn(d, n_samples, seed=seed) * torch.linspace(0.3, 2.0, d, dtype=F64)[:, None]  # (d, N)
    return keys @ keys.T / n_samples


def spectral_covariance(n_small: int = 12, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """C = Q diag(λ) Qᵀ with n_small eigenvalues well below τ, the others well above; returns (C, Q_big, Q_small)."""
    Q, _ = torch.linalg.qr(randn(D_IN, D_IN, seed=seed))
    big = torch.linspace(0.5, 5.0, D_IN - n_small, dtype=F64)
    small = torch.logspace(-6, -3, n_small, dtype=F64)
    C = Q @ torch.diag(torch.cat([big, small])) @ Q.T
    return (C + C.T) / 2, Q[:, : D_IN - n_small], Q[:, D_IN - n_small :]


@pytest.fixture
def rome_problem():
    return covariance(), randn(D_IN, seed=2), randn(D_OUT, seed=3), randn(D_OUT, D_IN, seed=4)


@pytest.fixture
def batch():
    return randn(D_IN, N, seed=5), randn(D_OUT, N, seed=6)  # K (d_in, n), R (d_out, n)


# -------------------------------------------------------------------------------------------------------------- ROME


def test_rome_hits_the_target_with_a_rank_one_update(rome_problem):
    C, k, v, W = rome_problem
    dW = rome_update(C, k, v, W)
    assert dW.shape == (D_OUT, D_IN) and dW.dtype == F64
    assert ((W + dW) @ k - v).norm() <= 1e-10 * v.norm()
    assert torch.linalg.matrix_rank(dW) == 1
    torch.testing.assert_close(dW, rome_update(CovarianceFactor(C), k, v, W), rtol=1e-12, atol=0)


def test_rome_with_a_separate_residual_key_hits_k0(rome_problem):
    C, k, v, W = rome_problem
    k0 = k + 0.3 * randn(D_IN, seed=7)  # the original code: direction from k̄, target at the bare-prompt key k₀
    dW = rome_update(C, k, v, W, k0=k0)
    assert ((W + dW) @ k0 - v).norm() <= 1e-10 * v.norm()
    assert torch.linalg.matrix_rank(dW) == 1


def test_rome_leaves_keys_conjugate_to_k_unchanged(rome_problem):
    C, k, v, W = rome_problem
    u = torch.linalg.solve(C, k)  # C⁻¹k
    for seed in range(3):
        x = randn(D_IN, seed=10 + seed)
        k_perp = x - (x @ u) / (u @ u) * u  # k'ᵀC⁻¹k = 0
        dW = rome_update(C, k, v, W)
        assert (dW @ k_perp).norm() <= 1e-12 * dW.norm() * k_perp.norm()
    # the row space is span(C⁻¹k): ΔW ∝ r uᵀ
    expected = torch.outer(v - W @ k, u) / (u @ k)
    torch.testing.assert_close(dW, expected, rtol=1e-10, atol=0)


@pytest.mark.parametrize("C", [None, "eye"])
def test_rome_without_mom2_adjustment_is_parallel_to_k(rome_problem, C):
    _, k, v, W = rome_problem
    C = torch.eye(D_IN, dtype=F64) if C == "eye" else None
    dW = rome_update(C, k, v, W)
    torch.testing.assert_close(dW, torch.outer(v - W @ k, k) / (k @ k), rtol=1e-12, atol=1e-14)
    k_perp = randn(D_IN, seed=8)
    k_perp -= (k_perp @ k) / (k @ k) * k
    assert (dW @ k_perp).norm() <= 1e-12 * dW.norm() * k_perp.norm()


# ------------------------------------------------------------------------------------------------------------- MEMIT


@pytest.mark.parametrize("method", ["cholesky", "woodbury", "auto"])
@pytest.mark.parametrize("lam", [0.5, 20.0, 15000.0])
def test_memit_solves_the_normal_equations(batch, method, lam):
    K, R = batch
    C = covariance()
    dW = memit_update(C, K, R, lam, method=method)
    assert dW.shape == (D_OUT, D_IN)
    assert rel(dW @ (lam * C + K @ K.T), R @ K.T) < 1e-10
    assert torch.linalg.matrix_rank(dW) <= N


@pytest.mark.parametrize("n", [1, 5, 30])
@pytest.mark.parametrize("lam", [1.0, 15000.0])
def test_memit_woodbury_equals_the_direct_solve(n, lam):
    K, R = randn(D_IN, n, seed=20), randn(D_OUT, n, seed=21)
    C = covariance()
    direct = memit_update(C, K, R, lam, method="cholesky")
    factor = CovarianceFactor(C)  # cached once, reused for every λ and batch
    assert rel(memit_update(factor, K, R, lam, method="woodbury"), direct) < 1e-9
    assert rel(memit_update(C, K, R, lam, method="woodbury"), direct) < 1e-9
    assert rel(memit_update(factor, K, R, lam, method="cholesky"), direct) < 1e-12


def test_memit_limits_in_lambda(batch):
    K, R = batch
    C = covariance()
    assert rel(memit_update(C, K, R, 1e-9, method="cholesky") @ K, R) < 1e-6  # λ → 0: exact fit (n ≤ d_in)
    norms = [memit_update(C, K, R, lam).norm().item() for lam in (1.0, 1e3, 1e6, 1e12)]
    assert norms == sorted(norms, reverse=True)
    assert norms[-1] < 1e-9 * R.norm().item()  # λ → ∞: no change


@pytest.mark.parametrize("method", ["cholesky", "woodbury"])
@pytest.mark.parametrize("lam", [20.0, 15000.0])
def test_memit_single_edit_is_a_shrunken_rome(rome_problem, method, lam):
    C, k, v, W = rome_problem
    r = v - W @ k  # the ROME target residual
    q = k @ torch.linalg.solve(C, k)  # kᵀC⁻¹k
    memit = memit_update(C, k[:, None], r[:, None], lam, method=method)
    rome = rome_update(C, k, v, W)
    assert rel(memit, q / (lam + q) * rome) < 1e-10


def test_memit_residual_spreading():
    Z, H0 = randn(D_OUT, N, seed=30), randn(D_OUT, N, seed=31)
    m = 4
    torch.testing.assert_close(memit_layer_residual(Z, H0, m), (Z - H0) / m)
    H = H0.clone()
    for i in range(m):  # each layer fits its share exactly: the last layer takes all that is left
        H = H + memit_layer_residual(Z, H, m - i)
    torch.testing.assert_close(H, Z, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        memit_layer_residual(Z, H0, 0)


# --------------------------------------------------------------------------------------------------------- AlphaEdit


def test_nullspace_projector():
    C, Q_big, Q_small = spectral_covariance()
    P, U = nullspace_projector(C, TAU)
    n_small = int((torch.linalg.eigvalsh(C) < TAU).sum())
    assert U.shape == (D_IN, n_small) == Q_small.shape
    torch.testing.assert_close(P, P.T, rtol=0, atol=1e-14)
    torch.testing.assert_close(P @ P, P, rtol=0, atol=1e-12)
    assert torch.linalg.matrix_rank(P) == n_small
    torch.testing.assert_close(U.T @ U, torch.eye(n_small, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(P, torch.eye(D_IN, dtype=F64) - Q_big @ Q_big.T, rtol=0, atol=1e-12)
    assert torch.linalg.matrix_norm(P @ C, ord=2) < TAU


@pytest.fixture
def alphaedit_problem(batch):
    C, Q_big, _ = spectral_covariance()
    P, U = nullspace_projector(C, TAU)
    K_prev = randn(D_IN, 7, seed=40)
    return C, Q_big, P, U, K_prev @ K_prev.T, *batch


@pytest.mark.parametrize("with_prev", [False, True])
def test_alphaedit_update_lies_in_the_null_space(alphaedit_problem, with_prev):
    C, Q_big, P, U, Cp, K, R = alphaedit_problem
    dW = alphaedit_update(K, R, P=P, C_prev=Cp if with_prev else None, alpha=10.0)
    assert dW.shape == (D_OUT, D_IN)
    assert (dW - dW @ P).norm() <= 1e-12 * dW.norm()  # (I − P)ΔWᵀ = 0
    assert (dW @ Q_big).norm() <= 1e-12 * dW.norm()  # preserved directions: no change
    keys0 = Q_big @ randn(Q_big.shape[1], 50, seed=41)  # preserved keys
    assert (dW @ keys0).norm() <= 1e-12 * dW.norm() * keys0.norm()
    assert torch.linalg.matrix_norm(dW @ C, ord=2) <= TAU * torch.linalg.matrix_norm(dW, ord=2)


@pytest.mark.parametrize("with_prev", [False, True])
@pytest.mark.parametrize("alpha", [1.0, 10.0])
def test_alphaedit_normal_equations_and_reduced_solve(alphaedit_problem, with_prev, alpha):
    _, _, P, U, Cp, K, R = alphaedit_problem
    Cp = Cp if with_prev else None
    full = alphaedit_update(K, R, P=P, C_prev=Cp, alpha=alpha)
    M = K @ K.T + (Cp if Cp is not None else 0)
    lhs = (P @ M + alpha * torch.eye(D_IN, dtype=F64)) @ full.T
    assert rel(lhs, P @ K @ R.T) < 1e-10
    reduced = alphaedit_update(K, R, U=U, C_prev=Cp, alpha=alpha)
    assert rel(reduced, full) < 1e-10


def test_alphaedit_without_projection_is_ridge(batch):
    K, R = batch
    alpha = 3.0
    ridge = (K @ torch.linalg.solve(K.T @ K + alpha * torch.eye(N, dtype=F64), R.T)).T  # (d_out, d_in)
    eye = torch.eye(D_IN, dtype=F64)
    assert rel(alphaedit_update(K, R, P=eye, alpha=alpha), ridge) < 1e-10
    assert rel(alphaedit_update(K, R, U=eye, alpha=alpha), ridge) < 1e-10


def test_alphaedit_argument_checks(batch):
    K, R = batch
    eye = torch.eye(D_IN, dtype=F64)
    with pytest.raises(ValueError):
        alphaedit_update(K, R, alpha=1.0)
    with pytest.raises(ValueError):
        alphaedit_update(K, R, P=eye, U=eye, alpha=1.0)
    with pytest.raises(ValueError):
        alphaedit_update(K, R, P=eye, alpha=0.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_edited_key_cache_accumulates_and_resets(dtype):
    K1, K2 = randn(D_IN, 6, seed=50), randn(D_IN, 9, seed=51)
    cache = EditedKeyCache(D_IN, dtype=dtype)
    assert cache.matrix.count_nonzero() == 0 and cache.n_keys == 0
    cache.update(K1)
    cache.update(K2)
    tol = 1e-12 if dtype == F64 else 1e-6
    expected = K1 @ K1.T + K2 @ K2.T
    assert cache.matrix.dtype == dtype and cache.n_keys == 15
    assert rel(cache.matrix.double(), expected) < tol
    torch.testing.assert_close(cache.matrix, cache.matrix.T, rtol=0, atol=tol * expected.norm().item())
    assert torch.linalg.eigvalsh(cache.matrix.double()).min() >= -tol * expected.norm()
    cache.reset()
    assert cache.matrix.count_nonzero() == 0 and cache.n_keys == 0


# ------------------------------------------------------------------------------------------------------------ dtypes


def _all_solvers(cast):
    """Run every solver on inputs passed through ``cast``; return the named results."""
    C, k, v, W = covariance(), randn(D_IN, seed=2), randn(D_OUT, seed=3), randn(D_OUT, D_IN, seed=4)
    K, R = randn(D_IN, N, seed=5), randn(D_OUT, N, seed=6)
    Cs, _, _ = spectral_covariance()
    P, U = nullspace_projector(cast(Cs), TAU)
    return {
        "rome": rome_update(cast(C), cast(k), cast(v), cast(W)),
        "memit_cholesky": memit_update(cast(C), cast(K), cast(R), 20.0, method="cholesky"),
        "memit_woodbury": memit_update(cast(C), cast(K), cast(R), 20.0, method="woodbury"),
        "residual": memit_layer_residual(cast(R), cast(R.flip(1)), 3),
        "projector": P,
        "alphaedit_full": alphaedit_update(cast(K), cast(R), P=cast(P), C_prev=cast(C), alpha=10.0),
        "alphaedit_reduced": alphaedit_update(cast(K), cast(R), U=cast(U), C_prev=cast(C), alpha=10.0),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_inputs_are_upcast(dtype):
    low = _all_solvers(lambda x: x.to(dtype))
    ref = _all_solvers(lambda x: x.to(dtype).double())  # the same rounded inputs, given in float64
    for name, out in low.items():
        assert out.dtype == F64, name
        torch.testing.assert_close(out, ref[name], rtol=1e-12, atol=1e-14, msg=name)
    if dtype == torch.float32:  # float32 rounding of the inputs barely moves the results
        exact = _all_solvers(lambda x: x)
        for name, out in low.items():
            assert rel(out, exact[name]) < 1e-4, name


def test_requested_output_dtype(rome_problem, batch):
    C, k, v, W = rome_problem
    K, R = batch
    assert rome_update(C.float(), k.float(), v.float(), W.float(), dtype=torch.float32).dtype == torch.float32
    assert memit_update(C, K, R, 20.0, dtype=torch.bfloat16).dtype == torch.bfloat16
    eye = torch.eye(D_IN)
    assert alphaedit_update(K, R, P=eye, alpha=1.0, dtype=torch.float32).dtype == torch.float32


def test_cholesky_ridge_fallback_on_a_singular_covariance(rome_problem):
    _, k, v, W = rome_problem
    low_rank = randn(D_IN, 10, seed=60)
    factor = CovarianceFactor(low_rank @ low_rank.T)  # rank 10 < d_in: plain Cholesky fails
    assert factor.ridge > 0
    dW = rome_update(factor, k, v, W)
    assert torch.isfinite(dW).all()
    assert ((W + dW) @ k - v).norm() <= 1e-8 * v.norm()  # the constraint holds whatever u is
