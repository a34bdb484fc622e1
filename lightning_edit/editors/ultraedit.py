"""UltraEdit (Gu et al., 2025, "UltraEdit: Training-, Subject-, and Memory-Free Lifelong Editing in Large Language
Models"): a closed-form edit from one gradient, normalised by statistics that follow the stream of edits.

For one editor call (a batch of requests) and each edited weight W, ``y_t = W k_t``
(docs/editors/ultraedit.md#ultraedit):

1. the edit loss (mean NLL of the target tokens, one pass per ``pass_size`` requests) gives at every real token t
   the key k_t (the weight's input) and g_t = ∂L/∂y_t (:mod:`lightning_edit.editors.gradients`);
2. **lifelong normalisation**: z_t = [k_t; g_t] is merged into running per-feature statistics of every row of the
   stream so far (one set per weight shape), then ẑ_t = (z_t − μ) / (σ + ε) = [k̂_t; ĝ_t];
3. the value shifts are a normalised gradient step, v_t = −η ‖k̂_t‖² ĝ_t (the change of ŷ_t under ΔW = −η ĝ_t k̂_tᵀ);
4. ΔW = argmin Σ_t ‖ΔW k_t − v_t‖² + λ‖ΔW‖² = Vᵀ K (KᵀK + λI)⁻¹ over the raw keys K (n, d_in), V (n, d_out);
   every weight's ΔW is computed on the model before the call and written at once.

Nothing of an edit is stored but the statistics (O(d) per weight shape): they reset when the protocol restores the
weights (after each case under ``single``, each batch under ``batch``, at the end of a ``sequential`` run).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from lightning_edit.cases import EditRequest
from lightning_edit.editors.base import EditorModule, require
from lightning_edit.editors.gradients import encode_edits, inputs_and_output_gradients, target_token_nll
from lightning_edit.editors.mend_network import RunningNorm
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import from_linear, resolve_architecture, weight_layout

#: ε of the normalisation: float32's machine epsilon, as the reference code
NORM_EPS = torch.finfo(torch.float32).eps
#: η where ``lr`` is not given (EasyEdit's Gemma-3 27B config)
DEFAULT_LR = 1e-6


def value_shifts(keys_hat: Tensor, gradients_hat: Tensor, lr: float) -> Tensor:
    """V (n, d_out) = −η ‖k̂_t‖² ĝ_t per row, for normalised keys (n, d_in) and output gradients (n, d_out)."""
    return -lr * keys_hat.square().sum(-1, keepdim=True) * gradients_hat


def ridge_update(keys: Tensor, values: Tensor, ridge: float) -> Tensor:
    """ΔW (d_out, d_in) = Vᵀ K (KᵀK + λI)⁻¹ for keys K (n, d_in) and values V (n, d_out), in float64.

    Solved in the smaller of the two spaces: with n < d_in through ΔW = ((KKᵀ + λI)⁻¹ V)ᵀ K (the same matrix)."""
    K = keys.double()
    V = values.double()
    n, d_in = K.shape
    if n < d_in:
        gram = K @ K.T + ridge * torch.eye(n, dtype=K.dtype, device=K.device)
        return torch.linalg.solve(gram, V).T @ K
    gram = K.T @ K + ridge * torch.eye(d_in, dtype=K.dtype, device=K.device)
    return torch.linalg.solve(gram, K.T @ V).T


class UltraEdit(EditorModule):
    """Training-, subject- and memory-free lifelong editing.

    Args:
        lm: the causal language model to edit.
        layers: the edited layers (a model preset sets them: GPT-J 18-26, Qwen2.5-7B 18-26 in the UltraEdit repo);
            None: the two layers before the last (the repo's Mistral-7B choice, 29-30 of 32).
        modules: which projections of those layers are edited: ``mlp_out`` (the MLP output projection, the repo's
            GPT-J and Mistral choice) and/or ``mlp_in`` (LLaMA/Qwen gate and up projections, GPT-2 ``c_fc``; the
            repo's Qwen2.5 choice).
        lr: η, the step of the value shifts; it grows with the model's scale, so a model preset sets it (toy GPT-2
            5e-4, toy LLaMA 2e-3, SmolLM2-135M 5e-4); None: 1e-6 (UltraEdit repo, EasyEdit's Gemma-3 27B config).
        ridge: λ of the least-squares solve (reference: 1, the identity added to KᵀK).
        rows: the tokens whose keys and gradients enter: ``all`` real tokens of prompt and target (the reference's
            ``token: mask``) or the ``target`` tokens only (its ``token: ans``).
        pass_size: requests per forward and backward pass; the loss of a pass is the mean NLL over its target
            tokens, so the gradient scale depends on it (reference: 10, its dataset batch size).
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir (see EditorModule).
    """

    def __init__(
        self,
        lm: ModelSource,
        layers: list[int] | None = None,
        modules: list[Literal["mlp_in", "mlp_out"]] = ["mlp_out"],
        lr: float | None = None,
        ridge: float = 1.0,
        rows: Literal["all", "target"] = "all",
        pass_size: int = 10,
        **kwargs,
    ):
        lr = DEFAULT_LR if lr is None else lr
        require(lr > 0, "lr", lr, "η, the step of the value shifts, is positive")
        require(ridge > 0, "ridge", ridge, "λ of the solve is positive (KᵀK alone may be singular)")
        require(pass_size >= 1, "pass_size", pass_size, "requests per forward and backward pass, at least 1")
        super().__init__(lm, **kwargs)
        self.lr = lr
        self.ridge = ridge
        self.rows = rows
        self.pass_size = pass_size
        arch = resolve_architecture(self.model)
        if layers is None:
            layers = list(range(arch.num_layers))[-3:-1]
        roles = {"mlp_in": arch.spec.mlp_in, "mlp_out": (arch.spec.mlp_out,)}
        #: edited module -> its weight's name
        self.weight_of = {
            arch.layer_name(template, layer): f"{arch.layer_name(template, layer)}.weight"
            for layer in layers
            for role in modules
            for template in roles[role]
        }
        self.layouts = {m: weight_layout(self.model.get_submodule(m)) for m in self.weight_of}
        self.norms: dict[tuple[int, int], RunningNorm] = {}  # (d_in, d_out) -> statistics of the stream's rows

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return list(self.weight_of.values())

    def on_edits_restored(self) -> None:
        self.norms = {}

    def stream_state(self) -> dict[str, Any]:
        """The running statistics of the stream's rows, per (d_in, d_out)."""
        return {
            f"norms.{d_in}x{d_out}.{name}": buffer
            for (d_in, d_out), norm in self.norms.items()
            for name, buffer in norm.state_dict().items()
        }

    def load_stream_state(self, state: dict[str, Any]) -> None:
        device = next(iter(self.model.parameters())).device
        shapes = {tuple(map(int, key.split(".")[1].split("x"))) for key in state}
        self.norms = {}
        for d_in, d_out in sorted(shapes):
            prefix = f"norms.{d_in}x{d_out}."
            norm = RunningNorm(d_in + d_out, eps=NORM_EPS).to(device)
            norm.load_state_dict({key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)})
            self.norms[(d_in, d_out)] = norm

    def _rows(self, requests: list[EditRequest]) -> dict[str, tuple[Tensor, Tensor]]:
        """{module: (keys (n, d_in), gradients (n, d_out))} of the requests' tokens, pass by pass, merged into the
        running statistics as they come (the reference's order)."""
        rows: dict[str, list[tuple[Tensor, Tensor]]] = {module: [] for module in self.weight_of}
        for start in range(0, len(requests), self.pass_size):
            chunk = requests[start : start + self.pass_size]
            batch = encode_edits(
                self.tokenizer, [r.filled_prompt for r in chunk], [r.target_new for r in chunk], self.model.device
            )
            n_targets = batch.target_mask[:, 1:].sum()

            def mean_target_nll(logits: Tensor) -> Tensor:
                return target_token_nll(logits, batch).sum() / n_targets

            pairs = inputs_and_output_gradients(self.model, list(self.weight_of), batch, mean_target_nll)
            keep = batch.attention_mask.bool() if self.rows == "all" else batch.target_mask
            for module, (keys, gradients) in pairs.items():
                keys, gradients = keys[keep].double(), gradients[keep].double()
                shape = (keys.shape[-1], gradients.shape[-1])
                if shape not in self.norms:
                    self.norms[shape] = RunningNorm(sum(shape), eps=NORM_EPS).to(keys.device)
                self.norms[shape].update(torch.cat([keys, gradients], dim=-1))
                rows[module].append((keys, gradients))
        return {module: tuple(torch.cat(part) for part in zip(*pairs)) for module, pairs in rows.items()}

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """One closed-form shift of every edited weight for the requests, on the weights as they are."""
        deltas = {}
        for module, (keys, gradients) in self._rows(requests).items():
            d_in = keys.shape[-1]
            normalised = self.norms[(d_in, gradients.shape[-1])](torch.cat([keys, gradients], dim=-1))
            values = value_shifts(normalised[:, :d_in], normalised[:, d_in:], self.lr)
            deltas[module] = ridge_update(keys, values, self.ridge)
        with torch.no_grad():
            for module, delta in deltas.items():
                weight = self.model.get_parameter(self.weight_of[module])
                weight += from_linear(delta, self.layouts[module]).to(weight.dtype)
