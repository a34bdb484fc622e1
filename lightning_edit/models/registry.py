"""Per-architecture module names, sizes and weight layouts of the supported causal LMs.

Templates use ``{}`` for the layer index, e.g. ``"model.layers.{}.mlp.down_proj"``. The weight layout of a
projection is decided from its module type, never from its shape (a square matrix is ambiguous):
``torch.nn.Linear`` stores ``W`` as ``(d_out, d_in)``, GPT-2's ``Conv1D`` stores ``Wᵀ`` as ``(d_in, d_out)``.
Editors work in the Linear convention ``y = W k + b`` and convert with :func:`to_linear` / :func:`from_linear`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from lightning_edit.errors import ConfigError, UserError

WeightLayout = Literal["linear", "conv1d"]
#: What a projection does in a block, for editors that name modules by role (LoRA's ``target_modules``).
ModuleRole = Literal["attn_q", "attn_k", "attn_v", "attn_out", "mlp_in", "mlp_out"]


class LayerRangeError(ConfigError, IndexError):
    """A layer index (a setting such as ROME's ``model.layer``) outside the model."""


class UnsupportedArchitectureError(UserError, ValueError):
    """The model is not one of the supported families (or not their causal-LM class)."""


@dataclass(frozen=True)
class ArchitectureSpec:
    """Module-name templates of one model family (``{}`` stands for the layer index).

    Attributes:
        family: Family name, equal to the ``model_type`` of its config.
        causal_lm_class: Name of the Hugging Face causal-LM class the templates are written for.
        blocks: Decoder block (its output is the residual stream after the layer).
        attention: Attention sub-module of a block.
        mlp: MLP sub-module of a block.
        mlp_out: MLP output projection; its input is the editing key.
        mlp_in: First MLP projection(s) (e.g. gate and up projections).
        final_norm: Final normalisation before the unembedding.
        unembedding: Output projection to the vocabulary (tied to ``embedding`` for GPT-2).
        embedding: Token embedding.
        mlp_hidden_attr: Config attribute holding d_ff; when its value is ``None`` d_ff is ``4 * hidden_size``.
        attention_proj: Query, key, value and output projections of the attention (one fused module plays the
            query, key and value roles in GPT-2 and GPT-NeoX).
    """

    family: str
    causal_lm_class: str
    blocks: str
    attention: str
    mlp: str
    mlp_out: str
    mlp_in: tuple[str, ...]
    final_norm: str
    unembedding: str
    embedding: str
    mlp_hidden_attr: str
    attention_proj: tuple[str, str, str, str]


def _llama_like(family: str, causal_lm_class: str) -> ArchitectureSpec:
    return ArchitectureSpec(
        family=family,
        causal_lm_class=causal_lm_class,
        blocks="model.layers.{}",
        attention="model.layers.{}.self_attn",
        mlp="model.layers.{}.mlp",
        mlp_out="model.layers.{}.mlp.down_proj",
        mlp_in=("model.layers.{}.mlp.gate_proj", "model.layers.{}.mlp.up_proj"),
        final_norm="model.norm",
        unembedding="lm_head",
        embedding="model.embed_tokens",
        mlp_hidden_attr="intermediate_size",
        attention_proj=tuple(
            f"model.layers.{{}}.self_attn.{name}" for name in ("q_proj", "k_proj", "v_proj", "o_proj")
        ),
    )


ARCHITECTURES: dict[str, ArchitectureSpec] = {
    spec.family: spec
    for spec in (
        ArchitectureSpec(
            family="gpt2",
            causal_lm_class="GPT2LMHeadModel",
            blocks="transformer.h.{}",
            attention="transformer.h.{}.attn",
            mlp="transformer.h.{}.mlp",
            mlp_out="transformer.h.{}.mlp.c_proj",
            mlp_in=("transformer.h.{}.mlp.c_fc",),
            final_norm="transformer.ln_f",
            unembedding="lm_head",
            embedding="transformer.wte",
            mlp_hidden_attr="n_inner",
            attention_proj=("transformer.h.{}.attn.c_attn",) * 3 + ("transformer.h.{}.attn.c_proj",),
        ),
        ArchitectureSpec(
            family="gptj",
            causal_lm_class="GPTJForCausalLM",
            blocks="transformer.h.{}",
            attention="transformer.h.{}.attn",
            mlp="transformer.h.{}.mlp",
            mlp_out="transformer.h.{}.mlp.fc_out",
            mlp_in=("transformer.h.{}.mlp.fc_in",),
            final_norm="transformer.ln_f",
            unembedding="lm_head",
            embedding="transformer.wte",
            mlp_hidden_attr="n_inner",
            attention_proj=tuple(
                f"transformer.h.{{}}.attn.{name}" for name in ("q_proj", "k_proj", "v_proj", "out_proj")
            ),
        ),
        ArchitectureSpec(
            family="gpt_neox",
            causal_lm_class="GPTNeoXForCausalLM",
            blocks="gpt_neox.layers.{}",
            attention="gpt_neox.layers.{}.attention",
            mlp="gpt_neox.layers.{}.mlp",
            mlp_out="gpt_neox.layers.{}.mlp.dense_4h_to_h",
            mlp_in=("gpt_neox.layers.{}.mlp.dense_h_to_4h",),
            final_norm="gpt_neox.final_layer_norm",
            unembedding="lm_head",
            embedding="gpt_neox.embed_in",
            mlp_hidden_attr="intermediate_size",
            attention_proj=("gpt_neox.layers.{}.attention.query_key_value",) * 3
            + ("gpt_neox.layers.{}.attention.dense",),
        ),
        _llama_like("llama", "LlamaForCausalLM"),
        _llama_like("mistral", "MistralForCausalLM"),
        _llama_like("qwen2", "Qwen2ForCausalLM"),
        _llama_like("qwen3", "Qwen3ForCausalLM"),
        # Gemma 3's text model: LLaMA's names; its post-feedforward norm acts on the MLP output after down_proj
        _llama_like("gemma3_text", "Gemma3ForCausalLM"),
    )
}


def to_linear(weight: torch.Tensor, layout: WeightLayout) -> torch.Tensor:
    """View a stored weight (or update) in the Linear convention ``W`` of shape ``(d_out, d_in)``."""
    return _transpose_if_conv1d(weight, layout)


def from_linear(delta: torch.Tensor, layout: WeightLayout) -> torch.Tensor:
    """View a Linear-convention ``(d_out, d_in)`` weight or update in the stored ``layout``."""
    return _transpose_if_conv1d(delta, layout)


def _transpose_if_conv1d(tensor: torch.Tensor, layout: WeightLayout) -> torch.Tensor:
    if layout == "linear":
        return tensor
    if layout == "conv1d":
        return tensor.T
    raise ValueError(f"Unknown weight layout {layout!r}; expected 'linear' or 'conv1d'.")


def weight_layout(module: nn.Module) -> WeightLayout:
    """Return the weight layout of a projection, decided from its type (``nn.Linear`` or HF ``Conv1D``)."""
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, Conv1D):
        return "conv1d"
    raise TypeError(
        f"Cannot determine the weight layout of a {type(module).__name__}: only torch.nn.Linear and "
        "transformers.pytorch_utils.Conv1D projections are supported."
    )


def get_module(model: nn.Module, name: str) -> nn.Module:
    """Return ``model.get_submodule(name)`` with an error naming the path and the model class when absent."""
    try:
        return model.get_submodule(name)
    except AttributeError as err:
        raise AttributeError(f"{type(model).__name__} has no sub-module {name!r} ({err}).") from err


class ModelArchitecture:
    """An :class:`ArchitectureSpec` bound to one model instance (see :func:`resolve_architecture`)."""

    def __init__(self, model: nn.Module, spec: ArchitectureSpec):
        self.model = model
        self.spec = spec
        config = model.config
        self.family = spec.family
        self.num_layers: int = config.num_hidden_layers
        self.hidden_size: int = config.hidden_size
        self.mlp_hidden_size: int = getattr(config, spec.mlp_hidden_attr, None) or 4 * self.hidden_size
        self.vocab_size: int = config.vocab_size

    def __repr__(self) -> str:
        return f"ModelArchitecture(family={self.family!r}, num_layers={self.num_layers}, hidden={self.hidden_size})"

    def layer_name(self, template: str, layer: int | None = None) -> str:
        """Fill ``template`` with ``layer``; a template without ``{}`` takes no layer."""
        if "{}" not in template:
            if layer is not None:
                raise ValueError(f"Template {template!r} has no layer placeholder but layer={layer} was given.")
            return template
        if layer is None:
            raise ValueError(f"Template {template!r} needs a layer index.")
        if not 0 <= layer < self.num_layers:
            raise LayerRangeError(
                f"Layer {layer} out of range for a {self.num_layers}-layer {self.family} model (layers 0 to "
                f"{self.num_layers - 1}): set the edited layers (model.layer or model.layers) to layers of this model."
            )
        return template.format(layer)

    def module(self, template: str, layer: int | None = None) -> nn.Module:
        """Return the sub-module named by ``template`` filled with ``layer``."""
        return get_module(self.model, self.layer_name(template, layer))

    def role_templates(self, role: ModuleRole) -> tuple[str, ...]:
        """Templates of the modules that play ``role`` in a block (``mlp_in`` may be several)."""
        roles = dict(zip(("attn_q", "attn_k", "attn_v", "attn_out"), ((t,) for t in self.spec.attention_proj)))
        roles |= {"mlp_in": self.spec.mlp_in, "mlp_out": (self.spec.mlp_out,)}
        if role not in roles:
            raise ValueError(f"unknown module role {role!r}; expected one of {list(roles)}")
        return roles[role]

    weight_layout = staticmethod(weight_layout)


def resolve_architecture(model: nn.Module) -> ModelArchitecture:
    """Bind the registry entry of ``model``'s family to it.

    Raises:
        UnsupportedArchitectureError: The family is unknown or the model is not its causal-LM class.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    spec = ARCHITECTURES.get(model_type)
    if spec is None:
        raise UnsupportedArchitectureError(
            f"Unsupported architecture: {type(model).__name__} (model_type={model_type!r}). "
            f"Supported families: {', '.join(ARCHITECTURES)}."
        )
    try:
        model.get_submodule(spec.blocks.format(0))
    except AttributeError as err:
        raise UnsupportedArchitectureError(
            f"{type(model).__name__} (model_type={model_type!r}) has no {spec.blocks.format(0)!r}; "
            f"load the causal-LM class {spec.causal_lm_class}."
        ) from err
    return ModelArchitecture(model, spec)
