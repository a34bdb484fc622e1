"""Shared "locate" machinery of ROME, MEMIT and AlphaEdit: context templates, the fact token, keys.

docs/methods.md#locate-then-edit-machinery. A request ``(prompt with "{}", subject, ...)`` is read through *context
templates* (``"{}"`` plus short model-generated prefixes ``"<text>. {}"``): a template is filled with the request
prompt, then the subject is put in its ``{}``. Keys and activations are read at the *fact token* of each such
prompt and averaged over the templates, per template group then across groups::

    k̄ = mean_g [ mean_{t ∈ group g} k(t) ]          (ROME: one group of 21; MEMIT: [["{}"], 5 prefixes])

Every batch is padded on the **right** (the fact-token index counts from the start of the sequence) and the
position ids come from the attention mask, so a prompt gives the same activations alone or in a batch.
Tokenization goes through :mod:`lightning_edit.models.tokenization` only.

    context_templates(model, tokenizer, lengths, seed, seed_prompts)   ["{}", "<text>. {}", ...]
    ContextTemplateCache                                               per-editor cache of the above
    fact_token_index(tokenizer, template, subject, strategy)          position of the fact token
    fact_token_activations(model, tokenizer, requests, module, ...)   (n, d) module input/output at the fact token
    compute_keys(model, tokenizer, requests, layer, templates, ...)   (n, d_in) input of mlp_out (the key k̄)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.cases import EditRequest
from lightning_edit.models.hooks import Trace
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.models.row_updates import routed
from lightning_edit.models.tokenization import encode_prompt, pad, subject_token_span
from lightning_edit.scoring.generation import generate

FactToken = Literal["subject_last", "subject_first", "last"]
FACT_TOKENS: tuple[str, ...] = ("subject_last", "subject_first", "last")
#: where keys are read and δ injected unless an editor is told otherwise: every reference config's choice
DEFAULT_FACT_TOKEN: FactToken = "subject_last"

#: ROME's template lengths: 10 samples of 5 tokens and 10 of 10 tokens (prompt included) -> 21 templates.
ROME_TEMPLATE_LENGTHS: tuple[tuple[int, int], ...] = ((5, 10), (10, 10))
#: MEMIT/AlphaEdit: 5 samples of 10 tokens, one per seed prompt of :data:`WORD_SEED_PROMPTS`.
MEMIT_TEMPLATE_LENGTHS: tuple[tuple[int, int], ...] = ((10, 5),)
#: The seed prompts of MEMIT/AlphaEdit and of the EasyEdit ROME port (ROME itself samples from the BOS token).
WORD_SEED_PROMPTS: tuple[str, ...] = ("The", "Therefore", "Because", "I", "You")

Templates = Sequence[str] | Sequence[Sequence[str]]


# ----------------------------------------------------------------------------------------------------------------
# Context templates (docs/methods.md#context-templates)


@dataclass
class EditSites:
    """Where each editor writes, per model (a model preset sets these; every editor reads its own).

    Args:
        rome_layer: the layer ROME edits (gpt2-xl 17; GPT-J, LLaMA, Qwen 5).
        memit_layers: the layers MEMIT and AlphaEdit edit (gpt2-xl 13-17, GPT-J 3-8, LLaMA/Qwen 4-8).
        mom2_update_weight: MEMIT's λ, the weight of the preserved keys' covariance (gpt2-xl 20000, others 15000).
        mend_layers: the layers whose MLP input and output projections MEND edits (MEND: the last three, e.g.
            gpt2-xl 45-47); None lets MEND take the model's last three layers.
        ft_layers: the layers whose MLP output projection FT, FT-L and FT-M train (FT-L: gpt2-xl and GPT-J 0,
            LLaMA 21 in EasyEdit).
        lora_layers: the layers LoRA adapts; None: every layer (EasyEdit's default).
        grace_layer: the layer of GRACE's codebook (gpt2-xl 35, LLaMA-2 7B 27); None where no reference value
            exists (GRACE then asks for it).
        wise_layer: the layer whose MLP output projection WISE keeps a side memory of (LLaMA-2 7B 27, LLaMA-3 8B
            29); None where no reference value exists (WISE then asks for it).
        ultraedit_layers: the layers UltraEdit edits (GPT-J 18-26, Qwen2.5-7B 18-26 in the UltraEdit repo); None:
            the two layers before the last (the repo's Mistral-7B choice, 29-30 of 32).
        ultraedit_modules: which projections of those layers UltraEdit edits: ``mlp_out`` (the MLP output
            projection, the repo's GPT-J and Mistral choice) and/or ``mlp_in`` (LLaMA/Qwen gate and up projections,
            GPT-2 ``c_fc``; the repo's Qwen2.5 choice).
        ultraedit_lr: UltraEdit's η for this model (it grows with the model's scale: toy GPT-2 5e-4, toy LLaMA
            2e-3, SmolLM2-135M 5e-4); None: UltraEdit's own default, 1e-6. ``--model.lr`` overrides it.
    """

    rome_layer: int = 5
    memit_layers: list[int] = field(default_factory=lambda: [4, 5, 6, 7, 8])
    mom2_update_weight: float = 15000.0
    mend_layers: list[int] | None = None
    ft_layers: list[int] = field(default_factory=lambda: [0])
    lora_layers: list[int] | None = None
    grace_layer: int | None = None
    wise_layer: int | None = None
    ultraedit_layers: list[int] | None = None
    ultraedit_modules: list[Literal["mlp_in", "mlp_out"]] = field(default_factory=lambda: ["mlp_out"])
    ultraedit_lr: float | None = None


def context_templates(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    lengths: Sequence[tuple[int, int]] = ROME_TEMPLATE_LENGTHS,
    seed: int = 0,
    seed_prompts: Sequence[str] | None = None,
    top_k: int = 5,
) -> list[str]:
    """``["{}"]`` followed by one ``"<text>. {}"`` per text the model samples itself (top-k sampling, seeded).

    Args:
        lengths: ``(length, count)`` pairs: ``count`` texts of ``length`` tokens in total, seed prompt included
            (ROME's ``max_out_len``). ROME: ``((5, 10), (10, 10))`` -> 21 templates; MEMIT: ``((10, 5),)`` with
            :data:`WORD_SEED_PROMPTS` -> 6 templates.
        seed: seeds the sampling; group ``g`` of ``lengths`` is sampled with seed ``seed + g``.
        seed_prompts: the texts the samples start from, used in turn (sample ``i`` of a group starts from
            ``seed_prompts[i % len(seed_prompts)]``) and kept at the start of the text. ``None``: the BOS token
            alone (ROME's ``<|endoftext|>``), which is not part of the text. A seed prompt of ``length`` tokens or
            more is its own text, nothing sampled after it (as the reference's ``generate_fast``), so a seed
            prompt longer than a length works with every tokenizer.
        top_k: the sampling's top-k.

    Braces are removed from the sampled texts so that each template has exactly one ``{}``.
    """
    if seed_prompts is None:
        if tokenizer.bos_token is None:
            raise ValueError("the tokenizer has no BOS token to sample context templates from; pass seed_prompts")
        seed_prompts = (tokenizer.bos_token,)
    if not seed_prompts:
        raise ValueError("seed_prompts is empty")
    templates = ["{}"]
    modeling_log = logging.getLogger("transformers.modeling_utils")
    modeling_log.addFilter(_not_the_dropped_mask_warning)
    try:
        for group, (length, count) in enumerate(lengths):
            prompts = [seed_prompts[i % len(seed_prompts)] for i in range(count)]
            short = [prompt for prompt in prompts if len(encode_prompt(tokenizer, prompt)) < length]
            sampled = iter(
                generate(model, tokenizer, short, max_length=length, do_sample=True, top_k=top_k, seed=seed + group)
                if short
                else []
            )
            continuations = [next(sampled) if prompt in short else "" for prompt in prompts]
            for prompt, continuation in zip(prompts, continuations):
                text = _join(tokenizer, prompt, continuation).replace("{", "").replace("}", "")
                templates.append(f"{text}. {{}}")
    finally:
        modeling_log.removeFilter(_not_the_dropped_mask_warning)
    return templates


def _not_the_dropped_mask_warning(record: logging.LogRecord) -> bool:
    """False for transformers' warning that a forward without attention mask "may be padded".

    :func:`~lightning_edit.scoring.generation.generate` passes the mask, but transformers' ``generate`` drops a mask
    of all ones (prompts of one length, as the BOS-only seed prompts are); the model's forward then finds no mask
    and the BOS token, which is also the pad token of GPT-2 tokenizers, and warns. Prompts of different lengths are
    padded and keep their mask.
    """
    return not record.getMessage().startswith("We strongly recommend passing in an `attention_mask`")


def _join(tokenizer: PreTrainedTokenizerBase, prompt: str, continuation: str) -> str:
    """The text of ``prompt`` followed by its generated ``continuation`` (decoded on its own).

    A BOS seed is not text. SentencePiece-style decoders drop the leading space of the first decoded token, so for
    them a space is put back between a word seed and a continuation that starts with a letter or digit.
    """
    if prompt == tokenizer.bos_token:
        return continuation
    probe = tokenizer("a b", add_special_tokens=False)["input_ids"]
    drops_space = not tokenizer.decode(probe[1:]).startswith(" ")
    if drops_space and continuation[:1].isalnum() and not prompt[-1:].isspace():
        return f"{prompt} {continuation}"
    return prompt + continuation


class ContextTemplateCache:
    """Context templates generated once per (model, tokenizer, lengths, seed, seed prompts), kept by an editor.

    Replaces the reference code's module-level global (not keyed by model, unseeded;
    docs/methods.md#context-templates). The key holds the model's ``name_or_path`` and ``id``, so two models edited
    in one process never share templates. The templates of a model are those of its first request (usually the
    unedited model), as in the reference code.
    """

    def __init__(self) -> None:
        self._store: dict[tuple, list[str]] = {}

    @staticmethod
    def key(
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        lengths: Sequence[tuple[int, int]],
        seed: int,
        seed_prompts: Sequence[str] | None,
        top_k: int = 5,
    ) -> tuple:
        lengths = tuple((int(length), int(count)) for length, count in lengths)
        prompts = None if seed_prompts is None else tuple(seed_prompts)
        names = (getattr(model, "name_or_path", ""), getattr(tokenizer, "name_or_path", ""))
        return (*names, id(model), id(tokenizer), lengths, seed, prompts, top_k)

    def get(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        lengths: Sequence[tuple[int, int]] = ROME_TEMPLATE_LENGTHS,
        seed: int = 0,
        seed_prompts: Sequence[str] | None = None,
        top_k: int = 5,
    ) -> list[str]:
        """The cached templates (a copy), generated by :func:`context_templates` on first use."""
        key = self.key(model, tokenizer, lengths, seed, seed_prompts, top_k)
        if key not in self._store:
            self._store[key] = context_templates(model, tokenizer, lengths, seed, seed_prompts, top_k)
        return list(self._store[key])

    def clear(self) -> None:
        self._store.clear()

    def __len__(self) -> int:
        return len(self._store)


def template_groups(templates: Templates) -> list[list[str]]:
    """Normalise ``templates`` to groups: a flat list of strings is one group; a list of lists is kept."""
    if isinstance(templates, str):
        raise TypeError("templates must be a list of template strings or a list of groups, not a string")
    if all(isinstance(t, str) for t in templates):
        groups = [list(templates)]  # type: ignore[arg-type]
    elif any(isinstance(t, str) for t in templates):
        raise TypeError("templates mixes template strings and template groups")
    else:
        groups = [list(group) for group in templates]
    if not groups or any(not group for group in groups):
        raise ValueError("every template group needs at least one template")
    for template in (t for group in groups for t in group):
        if template.count("{}") != 1:
            raise ValueError(f"context template {template!r} must contain exactly one '{{}}'")
    return groups


def bare_and_prefixed(templates: Sequence[str]) -> list[list[str]]:
    """MEMIT's two groups ``[["{}"], prefixed templates]`` from :func:`context_templates`' flat output.

    See docs/methods.md#keys.
    """
    if not templates or templates[0] != "{}" or len(templates) < 2:
        raise ValueError("expected ['{}', <prefixed templates>...] as returned by context_templates")
    return [[templates[0]], list(templates[1:])]


# ----------------------------------------------------------------------------------------------------------------
# Fact token (docs/methods.md#the-fact-token)


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
    ``[["{}"], prefixes]`` gives k̄ = ½·k(bare) + ½·mean(k(prefixed)); see :func:`bare_and_prefixed`).
    """
    arch = resolve_architecture(model)
    return fact_token_activations(
        model, tokenizer, requests, arch.spec.mlp_out, layer, templates, strategy, "input", batch_size, owners
    )
