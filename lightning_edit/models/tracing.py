"""Causal tracing (Meng et al., 2022, §2.1 and Figure 1): which hidden states carry a fact to its answer.

For a fact prompt whose answer's first token is ``o``, three kinds of forward:

- clean: ``P*(o)``, with every state recorded;
- corrupted: the subject's token embeddings plus noise ``ε ~ N(0, ν²)`` (``ν`` = 3 × the standard deviation of
  subject embeddings, :func:`noise_scale`); ``P(o)``, averaged over ``samples`` noise draws;
- corrupted with one clean state restored: the output of block ``l`` at token ``i`` (``hidden``), or the MLP or
  attention outputs of a ``window`` of layers around ``l`` at token ``i`` (``mlp``, ``attn``; the paper's window is
  10, layers ``l - 5 .. l + 4``); ``P_restored(o)``.

The indirect effect of a state is ``IE = P_restored(o) - P(o)`` (the paper's Figure 1 plots ``P_restored``; its
averages, Figure 2, the effect). :func:`category_effects` averages a fact's effects over the paper's six token
categories. The blocks below the first restored layer see only the corrupted input, so they run once per noise draw
(:class:`~lightning_edit.models.hooks.PrefixReuse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.models.hooks import PrefixReuse, Trace
from lightning_edit.models.registry import ModelArchitecture
from lightning_edit.models.tokenization import encode_prompt, encode_prompt_target, subject_token_span

KINDS = ("hidden", "mlp", "attn")
#: The paper's token categories (Figure 2), in its order.
CATEGORIES = (
    "first subject token",
    "middle subject tokens",
    "last subject token",
    "first subsequent token",
    "further tokens",
    "last token",
)


@dataclass(frozen=True)
class Fact:
    """A prompt that contains ``subject`` once and whose next words are ``answer``."""

    prompt: str
    subject: str
    answer: str


@dataclass
class FactTrace:
    """The traces of one fact: ``effects[kind]`` is ``(layers, tokens)`` of ``P_restored - P_corrupted``."""

    fact: Fact
    tokens: list[str]
    subject: tuple[int, int]  # token positions [first, stop)
    p_clean: float
    p_corrupted: float
    effects: dict[str, torch.Tensor] = field(default_factory=dict)


def noise_scale(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, arch: ModelArchitecture,
                subjects: list[str], factor: float = 3.0) -> float:  # fmt: skip
    """``factor`` × the standard deviation of the embedding outputs of the subjects' tokens (the paper: 3σ)."""
    embedding = model.get_submodule(arch.spec.embedding)
    with torch.no_grad():
        rows = [embedding(torch.tensor(encode_prompt(tokenizer, subject))) for subject in subjects]
    return factor * torch.cat(rows).float().std().item()


@torch.no_grad()
def trace_fact(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    arch: ModelArchitecture,
    fact: Fact,
    noise: float,
    samples: int = 10,
    kinds: tuple[str, ...] = KINDS,
    window: int = 10,
    seed: int = 0,
) -> FactTrace:
    """Every indirect effect of ``fact`` (module docstring); noise draws seeded by ``seed``."""
    if fact.subject not in fact.prompt:
        raise ValueError(f"subject {fact.subject!r} is not in prompt {fact.prompt!r}")
    prompt_ids, answer_ids = encode_prompt_target(tokenizer, fact.prompt, fact.answer)
    first, stop = subject_token_span(tokenizer, fact.prompt[: fact.prompt.index(fact.subject)], fact.subject)
    ids = torch.tensor([prompt_ids])
    n_tokens = len(prompt_ids)
    answer = answer_ids[0]
    generator = torch.Generator().manual_seed(seed)
    hidden_size = model.get_submodule(arch.spec.embedding).weight.shape[1]
    draws = noise * torch.randn(samples, stop - first, hidden_size, generator=generator)
    names = {kind: _template(arch, kind) for kind in kinds}
    recorded = [arch.layer_name(template, layer) for template in names.values() for layer in range(arch.num_layers)]
    with Trace(model, recorded) as clean:
        p_clean = _probability(model, ids, answer).item()

    def corrupt(rows_noise: torch.Tensor):
        def edit(name: str, hidden: torch.Tensor) -> torch.Tensor:
            hidden = hidden.clone()
            hidden[:, first:stop] += rows_noise.to(hidden.dtype)
            return hidden

        return Trace(model, arch.spec.embedding, outputs=False, edit_output=edit)

    with corrupt(draws):
        p_corrupted = _probability(model, ids.expand(samples, -1), answer).mean().item()
    blocks = [arch.module(arch.spec.blocks, layer) for layer in range(arch.num_layers)]
    rows_token = torch.arange(n_tokens).repeat_interleave(samples)  # row r restores token r // samples
    rows_sample = torch.arange(samples).repeat(n_tokens)
    result = FactTrace(fact, tokenizer.convert_ids_to_tokens(prompt_ids), (first, stop), p_clean, p_corrupted)
    for kind, template in names.items():
        effects = torch.zeros(arch.num_layers, n_tokens)
        for layer in range(arch.num_layers):
            restored = range(layer, layer + 1) if kind == "hidden" else _window(layer, window, arch.num_layers)
            reuse = PrefixReuse(blocks, restored.start)
            with reuse, corrupt(draws):  # records the corrupted input of the first restored block, per draw
                model(ids.expand(samples, -1), logits_to_keep=1)
            restore = {arch.layer_name(template, index) for index in restored}

            def edit(name: str, hidden: torch.Tensor) -> torch.Tensor:
                hidden = hidden.clone()
                hidden[torch.arange(len(rows_token)), rows_token] = clean.outputs[name][0, rows_token]
                return hidden

            with (
                reuse.rows(rows_sample),
                corrupt(draws[rows_sample]),
                Trace(model, restore, outputs=False, edit_output=edit),
            ):
                p = _probability(model, ids.expand(len(rows_token), -1), answer)
            effects[layer] = p.view(n_tokens, samples).mean(1) - p_corrupted
        result.effects[kind] = effects
    return result


def category_effects(trace: FactTrace) -> dict[str, list[float | None]]:
    """``kind -> [layer][category]`` mean effect over each of the paper's six token categories (None where a
    fact has no such token, e.g. no middle subject token)."""
    first, stop = trace.subject
    last = len(trace.tokens) - 1
    positions = [
        [first],
        list(range(first + 1, stop - 1)),
        [stop - 1],
        [stop] if stop <= last else [],
        list(range(stop + 1, last)),
        [last],
    ]
    return {
        kind: [[effects[layer, p].mean().item() if p else None for p in positions] for layer in range(len(effects))]
        for kind, effects in trace.effects.items()
    }


def _template(arch: ModelArchitecture, kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown trace kind {kind!r}; expected one of {KINDS}")
    return {"hidden": arch.spec.blocks, "mlp": arch.spec.mlp, "attn": arch.spec.attention}[kind]


def _window(layer: int, window: int, num_layers: int) -> range:
    """The reference code's window of ``window`` layers around ``layer``: ``layer - window // 2`` up to
    ``layer + ceil(window / 2)``, clipped to the model."""
    return range(max(0, layer - window // 2), min(num_layers, layer - (-window // 2)))


def _probability(model: PreTrainedModel, ids: torch.Tensor, answer: int) -> torch.Tensor:
    """``P(answer)`` at the last position of each row."""
    logits = model(ids, logits_to_keep=1).logits[:, -1].float()
    return logits.softmax(-1)[:, answer]
