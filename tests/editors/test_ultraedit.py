"""UltraEdit: its value shifts and ridge solve against the equations, its lifelong statistics, and the editor."""

import pytest
import torch

from lightning_edit.cases import EditRequest
from lightning_edit.editors import UltraEdit
from lightning_edit.editors.gradients import encode_edits, target_token_nll
from lightning_edit.editors.ultraedit import ridge_update, value_shifts
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import to_linear

REQUESTS = [
    EditRequest("The capital of {} is", "France", "Paris"),
    EditRequest("{} speaks", "Danielle Darrieux", "English"),
    EditRequest("{} is a", "Paris", "city"),
]


def ultraedit(model_dir, **kwargs) -> UltraEdit:
    kwargs = {"layers": [0, 1], "modules": ["mlp_in", "mlp_out"], **kwargs}
    return UltraEdit(ModelSource(str(model_dir)), **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# The equations


@pytest.mark.parametrize("n", [3, 40])  # fewer rows than d_in (the n×n system) and more (the d_in×d_in one)
def test_ridge_update_solves_its_normal_equations(n):
    """ΔW (KᵀK + λI) = Vᵀ K: the minimiser of Σ_t ‖ΔW k_t − v_t‖² + λ‖ΔW‖²."""
    generator = torch.Generator().manual_seed(0)
    K, V = torch.randn(n, 12, generator=generator, dtype=torch.float64), torch.randn(n, 5, dtype=torch.float64)
    delta = ridge_update(K, V, ridge=0.7)
    assert delta.shape == (5, 12)
    torch.testing.assert_close(delta @ (K.T @ K + 0.7 * torch.eye(12, dtype=K.dtype)), V.T @ K)


def test_ridge_update_in_the_small_space_is_the_direct_formula_and_vanishes_as_the_ridge_grows():
    """With n < d_in the n×n solve gives Vᵀ K (KᵀK + λI)⁻¹ itself; λ → ∞ gives ΔW → 0 (the d_in×d_in solve)."""
    K, V = torch.randn(12, 12, dtype=torch.float64), torch.randn(12, 4, dtype=torch.float64)
    wide = ridge_update(K[:11], V[:11], ridge=1.0)  # n = 11 < d_in = 12
    direct = V[:11].T @ K[:11] @ torch.linalg.inv(K[:11].T @ K[:11] + torch.eye(12, dtype=K.dtype))
    torch.testing.assert_close(wide, direct)
    assert (ridge_update(K, V, ridge=1e12).abs() < 1e-9).all()


def test_value_shift_is_the_output_change_of_a_gradient_step_at_its_key():
    """v_t = −η ‖k̂_t‖² ĝ_t = (−η ĝ_t k̂_tᵀ) k̂_t."""
    k_hat, g_hat = torch.randn(6, 8, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    shifts = value_shifts(k_hat, g_hat, lr=0.3)
    for t in range(6):
        torch.testing.assert_close(shifts[t], (-0.3 * torch.outer(g_hat[t], k_hat[t])) @ k_hat[t])


# ----------------------------------------------------------------------------------------------------------------
# The editor


def test_rows_are_the_real_tokens_and_their_gradients_sum_to_the_weight_gradient(tiny_model_dir):
    """Σ_t g_t k_tᵀ over the kept rows is ∇_W of the pass's mean target NLL (padding rows carry no gradient)."""
    editor = ultraedit(tiny_model_dir)
    rows = editor._rows(REQUESTS)
    batch = encode_edits(editor.tokenizer, [r.filled_prompt for r in REQUESTS], [r.target_new for r in REQUESTS], "cpu")
    weights = {module: editor.model.get_parameter(name) for module, name in editor.weight_of.items()}
    for weight in weights.values():
        weight.requires_grad_(True)
    logits = editor.model(**batch.model_inputs()).logits
    (target_token_nll(logits, batch).sum() / batch.target_mask[:, 1:].sum()).backward()
    for module, (keys, gradients) in rows.items():
        assert keys.shape[0] == gradients.shape[0] == batch.attention_mask.sum()
        gradient = to_linear(weights[module].grad, editor.layouts[module]).double()
        torch.testing.assert_close(gradients.T @ keys, gradient, rtol=1e-5, atol=1e-8)
        weights[module].requires_grad_(False)
        weights[module].grad = None


def test_target_rows_are_the_target_tokens(tiny_model_dir):
    editor = ultraedit(tiny_model_dir, rows="target")
    batch = encode_edits(editor.tokenizer, [r.filled_prompt for r in REQUESTS], [r.target_new for r in REQUESTS], "cpu")
    for keys, gradients in editor._rows(REQUESTS).values():
        assert keys.shape[0] == gradients.shape[0] == batch.target_mask.sum()


def test_statistics_follow_the_stream_and_reset_with_the_weights(tiny_model_dir):
    """After two editor calls of a stream, each weight shape's statistics are those of every row of both calls
    (merged pass by pass); restoring the weights forgets them."""
    editor = ultraedit(tiny_model_dir, pass_size=2)
    calls, read_rows = [], editor._rows
    editor._rows = lambda requests: calls.append(read_rows(requests)) or calls[-1]
    undo = editor.edit(REQUESTS[:2])
    editor.apply_edits(REQUESTS[2:])  # the second call of the stream, on the edited model
    assert len(calls) == 2 and len(editor.norms) == 2  # (d, d_ff) and (d_ff, d) of the tiny models
    for shape, norm in editor.norms.items():
        rows = torch.cat([
            torch.cat([keys, gradients], dim=-1)
            for call in calls
            for keys, gradients in call.values()
            if (keys.shape[-1], gradients.shape[-1]) == shape
        ])  # fmt: skip
        assert norm.count == rows.shape[0]
        torch.testing.assert_close(norm.mean, rows.mean(0))
        torch.testing.assert_close(norm.var, rows.var(0))
    editor.undo(undo)
    assert editor.norms == {}


def test_a_small_step_lowers_the_edit_loss_and_undo_is_bit_exact(tiny_model_dir):
    editor = ultraedit(tiny_model_dir, lr=1e-3)
    batch = encode_edits(editor.tokenizer, [r.filled_prompt for r in REQUESTS], [r.target_new for r in REQUESTS], "cpu")
    before_weights = {name: editor.model.get_parameter(name).clone() for name in editor.weight_of.values()}

    def loss() -> float:
        with torch.no_grad():
            return float(target_token_nll(editor.model(**batch.model_inputs()).logits, batch).sum())

    before = loss()
    undo = editor.edit(REQUESTS)
    assert loss() < before
    editor.undo(undo)
    for name, weight in before_weights.items():
        assert torch.equal(editor.model.get_parameter(name), weight)
