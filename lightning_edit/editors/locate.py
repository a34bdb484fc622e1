"""Where the locate-then-edit editors read a fact: the fact token of a prompt and the keys there.

docs/editors/locate-then-edit.md#locate-then-edit-machinery. A request ``(prompt with "{}", subject, ...)`` is read
through *context templates* (``"{}"`` plus short model-generated prefixes ``"<text>. {}"``): a template is filled with
the request prompt, then the subject is put in its ``{}``. Keys and activations are read at the *fact token* of each
such prompt and averaged over the templates, per template group then across groups::

    k̄ = mean_g [ mean_{t ∈ group g} k(t) ]          (ROME: one group of 21; MEMIT: [["{}"], 5 prefixes])

Every batch is padded on the **right** (the fact-token index counts from the start of the sequence) and the
position ids come from the attention mask, so a prompt gives the same activations alone or in a batch.
Tokenization goes through :mod:`lightning_edit.models.tokenization` only.

    context_templates(model, tokenizer, lengths, seed, seed_prompts)   ["{}", "<text>. {}", ...] (context_templates.py)
    fact_token_index(tokenizer, template, subject, strategy)          position of the fact token
    fact_token_activations(model, tokenizer, requests, module, ...)   (n, d) module input/output at the fact token
    compute_keys(model, tokenizer, requests, layer, templates, ...)   (n, d_in) input of mlp_out (the key k̄)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.cases import EditRequest
from lightning_edit.editors.context_templates import Templates, template_groups
from lightning_edit.models.hooks import Trace
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.models.row_updates import routed
from lightning_edit.models.tokenization import encode_prompt, pad, subject_token_span

FactToken = Literal["subject_last", "subject_first", "last"]
FACT_TOKENS: tuple[str, ...] = ("subject_last", "subject_first", "last")
#: where keys are read and δ injected unless an editor is told otherwise: every reference config's choice
DEFAULT_FACT_TOKEN: FactToken = "subject_last"


# ----------------------------------------------------------------------------------------------------------------
# Fact token (docs/editors/locate-then-edit.md#the-fact-token)


def fact_token_index(
    tokenizer: PreTrainedTokenizerBase, template: str, subject: str, strategy: FactToken = DEFAULT_FACT_TOKEN
) -> int:
    """Position, in ``encode_prompt(template with subject)``, of the token where keys are read and δ injected.

    SentencePiece-safe: the subject's tokens are those of
    :func:`~lightning_edit.models.tokenization.subject_token_span` with ``template = prefix + "{}" + suffix``. The index
    counts from the start of the sequence: valid with **right** padding only.

    Strategies: ``subject_last`` (default) = the subject's last sub-token, ``subject_first`` = its first,
    ``last`` = the prompt's final token.
    """
    if strategy not in FACT_TOKENS:
        raise ValueError(f"unknown fact token strategy {strategy!r}; expected one of {FACT_TOKENS}")
    if "{}" not in template:
        raise ValueError(f"template {template!r} has no '{{}}' placeholder for the subject")
    prefix, suffix = template.split("{}", 1)
    if strategy == "last":
        return len(encode_prompt(tokenizer, prefix + subject + suffix)) - 1
    first, stop = subject_token_span(tokenizer, prefix, subject)
    return first if strategy == "subject_first" else stop - 1


def fill(template: str, request: EditRequest) -> str:
    """The request prompt inside a context template, still with ``{}`` for the subject: ``"<text>. <prompt>"``."""
    return template.replace("{}", request.prompt, 1)


def encode_fact_prompt(
    tokenizer: PreTrainedTokenizerBase, template: str, subject: str, strategy: FactToken = DEFAULT_FACT_TOKEN
) -> tuple[str, list[int], int]:
    """``(text, ids, fact index)`` of ``template`` (with ``{}``) filled with ``subject``; ids = encode_prompt(text)."""
    text = template.replace("{}", subject, 1)
    ids = encode_prompt(tokenizer, text)
    index = fact_token_index(tokenizer, template, subject, strategy)
    if not 0 <= index < len(ids):
        raise ValueError(f"fact token {index} outside the {len(ids)} tokens of {text!r}")
    return text, ids, index


# ----------------------------------------------------------------------------------------------------------------
# Keys and activations at the fact token


@torch.no_grad()
def fact_token_activations(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: Sequence[EditRequest],
    module: str,
    layer: int | None,
    templates: Templates = ("{}",),
    strategy: FactToken = DEFAULT_FACT_TOKEN,
    read: Literal["input", "output"] = "output",
    batch_size: int | None = None,
    owners: Sequence[int] | None = None,
) -> Tensor:
    """(n, d): the input or output hidden states of ``module`` (a registry template) at the fact token, averaged.

    Every request is read through every template (``fill`` then the subject placed); the activations are averaged
    within each template group, then across groups. All prompts run in one right-padded forward (or chunks of
    ``batch_size`` prompts) that stops right after ``module``. Returned in at least float32 on the model's device.

    Uses: MEMIT's ``H`` (``spec.blocks`` output at the last edited layer, templates ``["{}"]``); ROME's clean key
    ``k₀`` (``spec.mlp_out`` input, ``["{}"]``); the keys :func:`compute_keys`. ``owners`` (one per request) say
    whose :class:`~lightning_edit.models.row_updates.RowUpdates` each request's prompts see.
    """
    if not requests:
        raise ValueError("no requests")
    arch = resolve_architecture(model)
    name = arch.layer_name(module, layer)
    groups = template_groups(templates)
    prompts: list[list[int]] = []
    positions: list[int] = []
    prompt_owners: list[int] = []
    for i, request in enumerate(requests):
        for group in groups:
            for template in group:
                _, ids, index = encode_fact_prompt(tokenizer, fill(template, request), request.subject, strategy)
                prompts.append(ids)
                positions.append(index)
                prompt_owners.append(owners[i] if owners is not None else -1)
    chunk = batch_size or max(len(prompts), 1)
    vectors = []  # (n_prompts, d) in chunks
    for start in range(0, len(prompts), chunk):
        input_ids, attention_mask, position_ids = pad(prompts[start : start + chunk], tokenizer.pad_token_id, "right")
        rows_owners = None if owners is None else prompt_owners[start : start + chunk]
        trace = Trace(model, name, inputs=read == "input", outputs=read == "output", stop_after=name)
        with routed(model, rows_owners), trace:
            model(
                input_ids=input_ids.to(model.device),
                attention_mask=attention_mask.to(model.device),
                position_ids=position_ids.to(model.device),
                use_cache=False,
            )
        hidden = (trace.inputs if read == "input" else trace.outputs)[name]  # (B, L, d)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        index = torch.tensor(positions[start : start + chunk], device=hidden.device)
        vectors.append(hidden[rows, index])  # (B, d)
    flat = torch.cat(vectors).to(torch.promote_types(hidden.dtype, torch.float32))  # (n·Σ|g|, d)
    return average_over_groups(flat, [len(g) for g in groups])


def average_over_groups(flat: Tensor, group_sizes: Sequence[int]) -> Tensor:
    """(n, d) from (n·Σ sizes, d) laid out request-major: mean within each group, then mean across groups."""
    per_request = flat.reshape(-1, sum(group_sizes), flat.shape[-1])  # (n, Σ sizes, d)
    means = [part.mean(dim=1) for part in per_request.split(list(group_sizes), dim=1)]  # each (n, d)
    return torch.stack(means).mean(dim=0)


def compute_keys(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: Sequence[EditRequest],
    layer: int,
    templates: Templates,
    strategy: FactToken = DEFAULT_FACT_TOKEN,
    batch_size: int | None = None,
    owners: Sequence[int] | None = None,
) -> Tensor:
    """(n, d_in): the key k̄ of each request, the **input** of ``mlp_out`` at ``layer`` at the fact token.

    ``templates`` is a flat list (ROME: plain mean over the 21 templates) or a list of groups (MEMIT's
    ``[["{}"], prefixes]`` gives k̄ = ½·k(bare) + ½·mean(k(prefixed));
    see :func:`~lightning_edit.editors.context_templates.bare_and_prefixed`).
    """
    arch = resolve_architecture(model)
    return fact_token_activations(
        model, tokenizer, requests, arch.spec.mlp_out, layer, templates, strategy, "input", batch_size, owners
    )
