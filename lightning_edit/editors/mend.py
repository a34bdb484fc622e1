"""MEND (Mitchell et al., ICLR 2022, "Fast Model Editing at Scale"): a trained hypernetwork edits with one gradient.

An edit (docs/editors/mend.md#mend; the hypernetwork in :mod:`lightning_edit.editors.mend_network`):

1. one forward and backward pass of the edit loss, the summed per-request mean NLL of ``target_new`` after the
   request prompt, records for each edited weight W the layer inputs u and output gradients δ (∇_W = Σ_t δ_t u_tᵀ);
2. the transform g maps (u, δ) to (ũ, δ̃), and ΔW = −η_W Σ_t δ̃_t ũ_tᵀ (minus: a descent step on the edit loss);
3. W ← W + ΔW, stored in the module's layout (``Conv1D`` keeps Wᵀ).

Training (``lightning-edit fit``, paper §3.2): on a batch of edits, ΔW is applied functionally (``functional_call``,
the base model stays frozen and untouched) and

    L = c_edit · NLL(targets | edit and paraphrase prompts, W + ΔW) + c_loc · KL(p_W ‖ p_{W+ΔW}) on locality prompts

trains g and η (Adam, gradients accumulated over ``accumulate`` batches, norm clipped to ``grad_clip``). An
accumulated step with a non-finite gradient is skipped (never applied) and counted in ``train/skipped_steps``.

Checkpoints hold the hypernetwork only (no base-model weight) with the base model's fingerprint and the edited
parameter names; loading one for another base model or other layers raises :class:`MENDCheckpointError`.
Validation (``lightning-edit validate --model MEND --model.ckpt_path ...``) edits under the ``single``, ``batch``
and ``sequential`` protocols of :class:`~lightning_edit.editors.base.EditorModule`.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.data import AttributeDict
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torch.func import functional_call

from lightning_edit.cases import EditRequest, TrainingEdit
from lightning_edit.editors.base import EditorModule
from lightning_edit.editors.gradients import EditBatch, encode_edits, inputs_and_output_gradients, target_nll
from lightning_edit.editors.mend_network import Factors, MENDNetwork
from lightning_edit.editors.stream_health import StreamHealth
from lightning_edit.errors import ConfigError, UserError, refused_weights
from lightning_edit.evaluation import ScoringConfig
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import from_linear, resolve_architecture, to_linear, weight_layout

CHECKPOINT_FORMAT = "lightning-edit/MEND-hypernetwork"
#: Settings that shape the network: taken from a checkpoint when one is loaded.
NETWORK_SETTINGS = ("rank", "n_layers", "norm", "shared")
_PROBES = 8  # weight entries recorded per edited weight to recognise the base model
# A fit checkpoint's hyper-parameters hold these plain config dataclasses: allow them in ``weights_only`` loads, which
# Lightning uses to resume a fit (``--ckpt_path``) and :func:`read_hypernetwork` to read a checkpoint.
torch.serialization.add_safe_globals([AttributeDict, ModelSource, ScoringConfig, StreamHealth])


class MENDCheckpointError(UserError, ValueError):
    """A MEND checkpoint that does not belong to this base model or these edited parameters."""


class MEND(EditorModule):
    """Model Editor Networks with Gradient Decomposition.

    Args:
        lm: the causal language model to edit (frozen: only the hypernetwork trains).
        layers: the layers whose MLP input and output projections are edited (GPT-2 ``c_fc`` and ``c_proj``, LLaMA
            ``gate/up/down_proj``; the model preset sets them, e.g. gpt2-xl 45-47); None: the last three layers, as
            MEND does.
        inner_params: explicit weight names to edit instead (e.g. ``transformer.h.3.mlp.c_proj.weight``).
        rank: rank of the transform's low-rank layers (MEND: 1920, capped at d_in + d_out).
        n_layers: residual low-rank layers per transform (MEND's ``n_hidden: 1`` = 2 layers).
        norm: normalise u and δ by running statistics (MEND: true).
        shared: one transform per weight shape, with per-weight scale and shift (MEND: true).
        edit_lr: initial learned edit learning rate η of every weight (MEND: 1e-4).
        lr_scale: factor on η when editing outside training (MEND: 1.0).
        lr: Adam learning rate of the transforms (MEND: 1e-6).
        lr_lr: Adam learning rate of the edit learning rates (MEND: 1e-4).
        c_edit: weight of the edit NLL in the training loss (MEND: 0.1).
        c_loc: weight of the locality KL (MEND: 1.0).
        accumulate: training batches per optimizer step (MEND: 10).
        grad_clip: gradient norm clip of each step (MEND: 100).
        ckpt_path: a trained hypernetwork: the ``mend.pt`` written by fit or a fit checkpoint (``.ckpt``). Its
            network settings (rank, n_layers, norm, shared) replace the ones given here.
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir (fit writes ``mend.pt`` there; default
            the log directory) (see EditorModule).
    """

    def __init__(
        self,
        lm: ModelSource,
        layers: list[int] | None = None,
        inner_params: list[str] | None = None,
        rank: int = 1920,
        n_layers: int = 2,
        norm: bool = True,
        shared: bool = True,
        edit_lr: float = 1e-4,
        lr_scale: float = 1.0,
        lr: float = 1e-6,
        lr_lr: float = 1e-4,
        c_edit: float = 0.1,
        c_loc: float = 1.0,
        accumulate: int = 10,
        grad_clip: float = 100.0,
        ckpt_path: str | None = None,
        **kwargs,
    ):
        super().__init__(lm, **kwargs)
        self.automatic_optimization = False  # steps with non-finite gradients are skipped, not applied
        self.strict_loading = False  # checkpoints hold no base-model weight; on_load_checkpoint checks the rest
        self.arch = resolve_architecture(self.model)
        self.inner_params = inner_params or self._default_inner_params(layers)
        self.modules_of = {name: self._inner_module(name) for name in self.inner_params}
        self.layouts = {name: weight_layout(self.model.get_submodule(m)) for name, m in self.modules_of.items()}
        self.lr_scale = lr_scale
        self.lr = lr
        self.lr_lr = lr_lr
        self.c_edit = c_edit
        self.c_loc = c_loc
        self.accumulate = accumulate
        self.grad_clip = grad_clip
        settings = dict(rank=rank, n_layers=n_layers, norm=norm, shared=shared)
        state = None
        if ckpt_path is not None:
            state, meta = read_hypernetwork(ckpt_path)
            self.check_compatible(meta, ckpt_path)
            settings = {key: meta["network"][key] for key in NETWORK_SETTINGS}
        self.settings = settings
        self.network = MENDNetwork(self._shapes(), edit_lr=edit_lr, **settings)
        self.ckpt_path = ckpt_path
        if state is not None:
            self.network.load_state_dict(state)
            rank_zero_info(f"MEND: hypernetwork loaded from {ckpt_path} ({settings})")
        self.skipped_steps = 0  # accumulated steps skipped for non-finite gradients
        self.batches_seen = 0  # training batches, across epochs (accumulation boundaries)
        self._accumulated_grads: dict[str, Tensor] = {}  # of a resumed fit, set in on_train_start

    # Edited parameters ---------------------------------------------------------------------------------------

    def _default_inner_params(self, layers: list[int] | None) -> list[str]:
        layers = layers if layers is not None else range(self.arch.num_layers)[-3:]
        templates = (*self.arch.spec.mlp_in, self.arch.spec.mlp_out)
        return [f"{self.arch.layer_name(t, layer)}.weight" for layer in layers for t in templates]

    def _inner_module(self, name: str) -> str:
        """The module of an edited weight, with an error naming the model when it has no such parameter."""
        parameters = dict(self.model.named_parameters())
        module, _, leaf = name.rpartition(".")
        if name not in parameters or leaf != "weight":
            example = f"{self.arch.layer_name(self.arch.spec.mlp_out, self.arch.num_layers - 1)}.weight"
            raise ConfigError(
                f"MEND cannot edit {name!r}: {type(self.model).__name__} ({self.arch.family}, "
                f"{self.arch.num_layers} layers) has no such weight; expected names like {example!r}"
            )
        try:
            weight_layout(self.model.get_submodule(module))
        except TypeError as error:
            raise ConfigError(f"MEND cannot edit {name!r}: {error}") from None
        return module

    def _shapes(self) -> dict[str, tuple[int, int]]:
        """Edited weight -> (d_out, d_in), the Linear convention."""
        parameters = dict(self.model.named_parameters())
        return {name: tuple(to_linear(parameters[name], self.layouts[name]).shape) for name in self.inner_params}

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return list(self.inner_params)

    # Gradient decomposition and the edit -------------------------------------------------------------------------

    def _logits(self, batch: EditBatch, weights: dict[str, Tensor] | None = None) -> Tensor:
        """(B, L, V) logits of the base model, or of the model with ``weights`` swapped in (functionally)."""
        if weights is None:
            return self.model(**batch.model_inputs()).logits
        return functional_call(self.model, weights, args=(), kwargs=batch.model_inputs()).logits

    def encode(self, prompts: list[str], targets: list[str]) -> EditBatch:
        return encode_edits(self.tokenizer, prompts, targets, self.model.device)

    def edit_factors(self, requests: list[EditRequest]) -> dict[str, Factors]:
        """{weight: (u (n, d_in), δ (n, d_out))} of one pass of the edit loss over the requests, on the current weights.

        The edit loss is the sum over requests of the mean NLL of ``target_new``; u is the input of each edited
        module, δ the gradient of the loss with respect to its output. Rows are flattened over batch and positions.
        """
        batch = self.encode([r.filled_prompt for r in requests], [r.target_new for r in requests])
        modules = list(self.modules_of.values())
        pairs = inputs_and_output_gradients(self.model, modules, batch, lambda logits: target_nll(logits, batch).sum())
        return {
            name: (u.reshape(-1, u.shape[-1]), delta.reshape(-1, delta.shape[-1]))  # (B·L, d)
            for name, (u, delta) in zip(self.inner_params, (pairs[m] for m in modules))
        }

    def updates(self, requests: list[EditRequest], update_stats: bool = False) -> dict[str, Tensor]:
        """ΔW (float32, Linear convention (d_out, d_in)) of each edited weight for the requests."""
        return self.network(self.edit_factors(requests), update_stats=update_stats)

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """W ← W + lr_scale · ΔW in place, on the weights as they are (sequential edits compound)."""
        with torch.no_grad():
            for name, delta in self.updates(requests).items():
                weight = self.model.get_parameter(name)
                weight += from_linear(self.lr_scale * delta, self.layouts[name]).to(weight.dtype)

    # Training ----------------------------------------------------------------------------------------------------

    def train(self, mode: bool = True) -> MEND:
        super().train(mode)
        self.model.eval()  # the frozen base model never runs dropout
        return self

    def on_fit_start(self) -> None:
        """MEND trains its hypernetwork in ``training_step``: nothing is edited before the fit."""

    def setup(self, stage: str) -> None:
        """As :meth:`EditorModule.setup`; a validate or test needs a trained hypernetwork (``ckpt_path``)."""
        if stage in ("validate", "test") and self.ckpt_path is None:
            raise ConfigError(
                f"MEND {stage} without model.ckpt_path would edit with an untrained, random hypernetwork: pass "
                "--model.ckpt_path <dir>/mend.pt (written by lightning-edit fit)"
            )
        super().setup(stage)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        transforms = [p for name, p in self.network.named_parameters() if name != "edit_lrs"]
        return torch.optim.Adam(
            [{"params": transforms, "lr": self.lr}, {"params": [self.network.edit_lrs], "lr": self.lr_lr}]
        )

    def training_losses(self, batch: list[TrainingEdit]) -> dict[str, Tensor]:
        """The loss terms of one batch of training edits (paper §3.2), ΔW applied functionally."""
        deltas = self.updates([example.request for example in batch], update_stats=True)
        weights = {}
        for name, delta in deltas.items():
            weight = self.model.get_parameter(name)
            weights[name] = weight + from_linear(delta, self.layouts[name]).to(weight.dtype)
        equivalent = [(example.request.filled_prompt, example.request.target_new) for example in batch]
        equivalent += [pair for example in batch for pair in example.equivalent]
        edit_batch = self.encode(*zip(*equivalent))
        edit_nll = target_nll(self._logits(edit_batch, weights), edit_batch).mean()
        locality = [pair for example in batch for pair in example.locality]
        loc_kl = self.locality_kl(self.encode(*zip(*locality)), weights) if locality else edit_nll.new_zeros(())
        return {"loss": self.c_edit * edit_nll + self.c_loc * loc_kl, "edit_nll": edit_nll, "loc_kl": loc_kl}

    def locality_kl(self, batch: EditBatch, weights: dict[str, Tensor]) -> Tensor:
        """KL(p_unedited ‖ p_edited) of the next-token distributions, mean over the real positions of ``batch``."""
        with torch.no_grad():
            before = torch.log_softmax(self._logits(batch).float(), dim=-1)  # (B, L, V)
        after = torch.log_softmax(self._logits(batch, weights).float(), dim=-1)
        kl = (before.exp() * (before - after)).sum(-1)  # (B, L)
        mask = batch.attention_mask.float()
        return (kl * mask).sum() / mask.sum()

    def training_step(self, batch: list[TrainingEdit], batch_idx: int) -> Tensor:
        losses = self.training_losses(batch)
        self.manual_backward(losses["loss"] / self.accumulate)
        self.batches_seen += 1
        if self.batches_seen % self.accumulate == 0:
            self._step()
        for name, value in losses.items():
            self.log(f"train/{name}", value.detach(), batch_size=len(batch), prog_bar=name == "loss")
        self.log("train/skipped_steps", float(self.skipped_steps), batch_size=len(batch))
        self.log("train/edit_lr_mean", self.network.edit_lrs.detach().mean(), batch_size=len(batch))
        return losses["loss"].detach()

    def _step(self) -> None:
        """One optimizer step on the accumulated gradients, unless one of them is not finite (then skipped)."""
        optimizer = self.optimizers()
        parameters = [p for p in self.network.parameters() if p.grad is not None]
        if all(torch.isfinite(p.grad).all() for p in parameters):
            torch.nn.utils.clip_grad_norm_(parameters, self.grad_clip)
            optimizer.step()
        else:
            self.skipped_steps += 1
        optimizer.zero_grad()

    def on_fit_end(self) -> None:
        """Write the trained hypernetwork to ``<output_dir>/mend.pt`` (default: the log directory)."""
        if self.trainer.is_global_zero:
            directory = Path(self.output_dir or self.trainer.log_dir or self.trainer.default_root_dir)
            directory.mkdir(parents=True, exist_ok=True)
            torch.save(self.hypernetwork_state(), directory / "mend.pt")
            rank_zero_info(f"MEND hypernetwork written to {directory / 'mend.pt'}")

    # Checkpoints -------------------------------------------------------------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the base model: its config sizes and a few entries of every edited weight."""
        config = self.model.config
        generator = torch.Generator().manual_seed(0)
        probes = {}
        for name in self.inner_params:
            flat = self.model.get_parameter(name).detach().reshape(-1)
            index = torch.randint(flat.numel(), (_PROBES,), generator=generator).to(flat.device)
            probes[name] = flat[index].double().cpu().tolist()
        return {
            "name_or_path": str(getattr(config, "name_or_path", "")),
            "model_type": self.arch.family,
            "num_layers": self.arch.num_layers,
            "hidden_size": self.arch.hidden_size,
            "mlp_hidden_size": self.arch.mlp_hidden_size,
            "vocab_size": self.arch.vocab_size,
            "probes": probes,
        }

    def meta(self) -> dict[str, Any]:
        """What the hypernetwork belongs to (base model, edited weights) and its network settings."""
        return {"base_model": self.fingerprint(), "inner_params": list(self.inner_params), "network": self.settings}

    def hypernetwork_state(self) -> dict[str, Any]:
        """The hypernetwork and its :meth:`meta`: plain tensors, strings and numbers (``weights_only`` loadable)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "meta": self.meta(),
            "state_dict": {key: value.detach().cpu() for key, value in self.network.state_dict().items()},
        }

    def check_compatible(self, meta: dict[str, Any], source: str | Path) -> None:
        """Raise :class:`MENDCheckpointError` unless the checkpoint belongs to this base model and these weights."""
        trained_for = meta["base_model"]
        loaded = self.fingerprint()
        differences = [
            f"{key} {trained_for[key]} != {loaded[key]}"
            for key in ("model_type", "num_layers", "hidden_size", "mlp_hidden_size", "vocab_size")
            if trained_for[key] != loaded[key]
        ]
        if not differences and meta["inner_params"] != list(self.inner_params):
            raise MENDCheckpointError(
                f"{source}: the MEND checkpoint edits {meta['inner_params']}, but this run edits {self.inner_params} "
                "(set model.layers or model.inner_params to the checkpoint's)"
            )
        if not differences:
            for name, values in trained_for["probes"].items():
                if not all(
                    math.isclose(a, b, rel_tol=2e-2, abs_tol=1e-4) for a, b in zip(values, loaded["probes"][name])
                ):
                    differences.append(f"the weights of {name} differ")
                    break
        if differences:
            raise MENDCheckpointError(
                f"{source}: this MEND checkpoint was trained for base model {trained_for['name_or_path']!r}, not for "
                f"the loaded {loaded['name_or_path']!r}: {'; '.join(differences)}"
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the hypernetwork only: drop every base-model weight; record what the hypernetwork belongs to."""
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith("network.")}
        checkpoint["mend_meta"] = self.meta()
        checkpoint["mend_progress"] = {"skipped_steps": self.skipped_steps, "batches_seen": self.batches_seen}
        checkpoint["mend_accumulated_grads"] = {  # a fit stopped between optimizer steps resumes bit-identically
            name: p.grad.detach().cpu() for name, p in self.network.named_parameters() if p.grad is not None
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "mend_meta" not in checkpoint:
            raise MENDCheckpointError("the checkpoint was not written by MEND (no 'mend_meta')")
        self.check_compatible(checkpoint["mend_meta"], "checkpoint")
        expected = {f"network.{key}" for key in self.network.state_dict()}
        if set(checkpoint["state_dict"]) != expected:
            raise MENDCheckpointError(
                f"the checkpoint's hypernetwork has parameters {sorted(set(checkpoint['state_dict']) ^ expected)} "
                f"that do not match this network ({self.settings})"
            )
        progress = checkpoint.get("mend_progress", {})
        self.skipped_steps = progress.get("skipped_steps", 0)
        self.batches_seen = progress.get("batches_seen", 0)
        self._accumulated_grads = checkpoint.get("mend_accumulated_grads", {})

    def on_train_start(self) -> None:
        """Put back the gradients a resumed fit had accumulated (after the trainer zeroed every gradient)."""
        parameters = dict(self.network.named_parameters())
        for name, grad in self._accumulated_grads.items():
            parameters[name].grad = grad.to(parameters[name].device)
        self._accumulated_grads = {}


def read_hypernetwork(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """(network state dict, meta) of a ``mend.pt`` or of a MEND fit checkpoint, read with ``weights_only=True``."""
    path = Path(path)
    if not path.is_file():
        raise MENDCheckpointError(f"MEND checkpoint {path} not found (model.ckpt_path: the mend.pt written by fit)")
    accepted = "the mend.pt written by lightning-edit fit, or a fit checkpoint"
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:  # pickled objects beyond tensors, or a corrupt file
        raise MENDCheckpointError(refused_weights(path, error, accepted)) from error
    except Exception as error:  # truncated, or not a torch file
        raise MENDCheckpointError(
            f"{path}: cannot read this MEND checkpoint ({type(error).__name__}: {str(error).splitlines()[0]}); "
            f"pass {accepted}"
        ) from error
    if not isinstance(content, dict):
        raise MENDCheckpointError(f"{path} is not a MEND hypernetwork (a {type(content).__name__}, not a dict)")
    if content.get("format") == CHECKPOINT_FORMAT:
        return content["state_dict"], content["meta"]
    if "mend_meta" in content:
        prefix = "network."
        state = {k[len(prefix) :]: v for k, v in content["state_dict"].items() if k.startswith(prefix)}
        return state, content["mend_meta"]
    raise MENDCheckpointError(f"{path} is not a MEND hypernetwork (no {CHECKPOINT_FORMAT!r} format, no 'mend_meta')")
