"""The MEND hypernetwork (Mitchell et al., ICLR 2022, "Fast Model Editing at Scale"), as pure tensor code.

For a weight used as ``y_t = W u_t (+ b)`` at positions t, the gradient of a loss L is the sum of rank-one terms
``∇_W L = Σ_t δ_t u_tᵀ`` with ``δ_t = ∂L/∂y_t`` (paper §3.1). MEND edits with a *pseudo-gradient* built from
transformed factors (paper eq. 3-4; docs/editors/mend.md#mend)::

    (ũ_t, δ̃_t) = g(û_t, δ̂_t)          û, δ̂: u and δ normalised per feature by running statistics
    ∇̃_W = Σ_t δ̃_t ũ_tᵀ                 (d_out, d_in), the Linear convention
    ΔW = −η_W · ∇̃_W                    η_W: a learned edit learning rate per weight

Sign convention: ΔW = **minus** η times the pseudo-gradient, a gradient-descent step on the edit loss (the paper's
``W − η∇̃``; the reference code adds ``η∇̃`` and lets training absorb the sign). With the identity transform and the
normalisation off, ∇̃_W is the true gradient, so a small positive η lowers the edit loss.

g is a residual MLP on the concatenation [û, δ̂] (size D = d_in + d_out) of low-rank layers
``h ← h + A ReLU(B (s_m ⊙ h + t_m) + c)``, A (D, r), B (r, D), with A = 0 at initialisation (g is then the identity).
One g serves every edited weight of one shape; s_m, t_m (initialised to 1 and 0) are per-weight ("mode") scales and
shifts of its input. The ReLU sits inside the bottleneck: outside it, as ``h + ReLU(A B h + c)`` with A = 0 and
c = 0, its argument is exactly 0 at initialisation, where its gradient is 0, and nothing would ever train.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

Factors = tuple[Tensor, Tensor]  # (u (n, d_in), δ (n, d_out)) of one weight


class RunningNorm(nn.Module):
    """Per-feature running mean and unbiased variance of every row seen (Welford, merged batch-wise).

    After one :meth:`update` with rows ``x`` (n, d), ``mean == x.mean(0)`` and ``var == x.var(0)``; after several,
    the statistics equal those of all rows together. Normalisation is ``(x − mean) / (std + eps)``; with fewer than
    two rows seen there is no variance yet and :meth:`forward` returns its input unchanged.
    """

    def __init__(self, dim: int, eps: float = 1e-7):
        super().__init__()
        self.eps = eps
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(dim, dtype=torch.float64))  # Σ (x − mean)²

    @property
    def var(self) -> Tensor:
        return self.m2 / (self.count - 1).clamp(min=1)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge the rows of ``x`` (n, d) into the statistics (Chan et al.'s pairwise update)."""
        x = x.detach().double()
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(0)  # (d,)
        batch_m2 = (x - batch_mean).square().sum(0)  # (d,)
        total = self.count + n
        shift = batch_mean - self.mean
        self.mean += shift * (n / total)
        self.m2 += batch_m2 + shift.square() * (self.count * n / total)
        self.count += n

    def forward(self, x: Tensor) -> Tensor:
        if self.count < 2:
            return x
        mean = self.mean.to(x.dtype)
        std = self.var.sqrt().to(x.dtype)
        return (x - mean) / (std + self.eps)


class ResidualLowRank(nn.Module):
    """``h ← h + A ReLU(B (s_m ⊙ h + t_m) + c)``: A (D, r) = 0 and B (r, D) random at init, so the identity."""

    def __init__(self, dim: int, rank: int, n_modes: int):
        super().__init__()
        self.down = nn.Parameter(torch.empty(rank, dim))  # B
        nn.init.uniform_(self.down, -math.sqrt(6 / (dim + rank)), math.sqrt(6 / (dim + rank)))  # Glorot
        self.up = nn.Parameter(torch.zeros(dim, rank))  # A
        self.bias = nn.Parameter(torch.zeros(rank))  # c
        self.scale = nn.Parameter(torch.ones(n_modes, dim))  # s_m
        self.shift = nn.Parameter(torch.zeros(n_modes, dim))  # t_m

    def forward(self, h: Tensor, mode: int) -> Tensor:  # h (n, D)
        hidden = torch.relu((self.scale[mode] * h + self.shift[mode]) @ self.down.T + self.bias)  # (n, r)
        return h + hidden @ self.up.T  # (n, D)


class GradientTransform(nn.Module):
    """g: normalises [u, δ] and maps it through residual low-rank layers; shared by weights of one shape.

    Args:
        d_in: input size of the edited weights (Linear convention ``(d_out, d_in)``).
        d_out: output size.
        rank: rank r of each layer, at most D = d_in + d_out (MEND: 1920).
        n_layers: residual layers (MEND's ``n_hidden: 1`` builds 2).
        n_modes: weights sharing this transform (one scale/shift pair each).
        norm: normalise u and δ by running statistics (MEND: true).
    """

    def __init__(self, d_in: int, d_out: int, rank: int, n_layers: int = 2, n_modes: int = 1, norm: bool = True):
        super().__init__()
        self.d_in = d_in
        self.d_out = d_out
        dim = d_in + d_out
        self.norm = RunningNorm(dim) if norm else None
        self.layers = nn.ModuleList(ResidualLowRank(dim, min(rank, dim), n_modes) for _ in range(n_layers))

    def forward(self, u: Tensor, delta: Tensor, mode: int = 0, update_stats: bool = False) -> Factors:
        """(ũ (n, d_in), δ̃ (n, d_out)) from u (n, d_in) and δ (n, d_out), in float32."""
        h = torch.cat([u, delta], dim=-1).float()  # (n, D)
        if self.norm is not None:
            if update_stats:
                self.norm.update(h)
            h = self.norm(h)
        for layer in self.layers:
            h = layer(h, mode)
        return h[:, : self.d_in], h[:, self.d_in :]


def pseudo_gradient(u: Tensor, delta: Tensor) -> Tensor:
    """∇̃ = Σ_t δ_t u_tᵀ (d_out, d_in), Linear convention, from u (n, d_in) and δ (n, d_out)."""
    return delta.T @ u


def nonzero_rows(u: Tensor, delta: Tensor) -> Factors:
    """The rows where neither u nor δ is all zero (padding, positions after the target): they add nothing to ∇."""
    keep = (u != 0).any(-1) & (delta != 0).any(-1)
    return u[keep], delta[keep]


class MENDNetwork(nn.Module):
    """The trained part of MEND: the gradient transforms and the per-weight edit learning rates η.

    Args:
        shapes: edited weight name -> (d_out, d_in), in edit order.
        rank: rank of the transforms' layers.
        n_layers: residual layers per transform.
        edit_lr: initial η of every weight (MEND: 1e-4).
        norm: running normalisation of the transforms' inputs.
        shared: one transform per distinct weight shape (MEND: true) instead of one per weight.
    """

    def __init__(
        self,
        shapes: dict[str, tuple[int, int]],
        rank: int,
        n_layers: int = 2,
        edit_lr: float = 1e-4,
        norm: bool = True,
        shared: bool = True,
    ):
        super().__init__()
        self.names = list(shapes)
        groups: dict[object, list[str]] = {}
        for name, shape in shapes.items():
            groups.setdefault(tuple(shape) if shared else name, []).append(name)
        #: weight name -> (transform index, mode within the transform)
        self.slot = {
            name: (index, mode) for index, members in enumerate(groups.values()) for mode, name in enumerate(members)
        }
        self.transforms = nn.ModuleList(
            GradientTransform(shapes[members[0]][1], shapes[members[0]][0], rank, n_layers, len(members), norm)
            for members in groups.values()
        )
        self.edit_lrs = nn.Parameter(torch.full((len(self.names),), float(edit_lr)))  # η, one per weight

    def forward(self, factors: dict[str, Factors], update_stats: bool = False) -> dict[str, Tensor]:
        """ΔW = −η ∇̃ (d_out, d_in), float32, for each weight from its factors u (n, d_in), δ (n, d_out).

        With ``update_stats`` the normalisation statistics first absorb the rows (training only).
        """
        updates = {}
        device = self.edit_lrs.device.type
        with torch.autocast(device, enabled=False):  # the hypernetwork runs in float32 under mixed precision too
            for position, name in enumerate(self.names):
                index, mode = self.slot[name]
                u, delta = nonzero_rows(*factors[name])
                u_tilde, delta_tilde = self.transforms[index](u, delta, mode, update_stats)
                updates[name] = -self.edit_lrs[position] * pseudo_gradient(u_tilde, delta_tilde)
        return updates
