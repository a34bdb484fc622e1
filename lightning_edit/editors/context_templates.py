"""Context templates: the short prefixes, sampled from the model itself, that ROME and MEMIT read a request through.

docs/editors/locate-then-edit.md#context-templates. ``"{}"`` plus one ``"<text>. {}"`` per sampled text; a template is
filled with the request prompt, then the subject is put in its ``{}`` (:func:`~lightning_edit.editors.locate.fill`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.models.tokenization import encode_prompt
from lightning_edit.scoring.generation import generate

#: ROME's template lengths: 10 samples of 5 tokens and 10 of 10 tokens (prompt included) -> 21 templates.
ROME_TEMPLATE_LENGTHS: tuple[tuple[int, int], ...] = ((5, 10), (10, 10))
#: MEMIT/AlphaEdit: 5 samples of 10 tokens, one per seed prompt of :data:`WORD_SEED_PROMPTS`.
MEMIT_TEMPLATE_LENGTHS: tuple[tuple[int, int], ...] = ((10, 5),)
#: The seed prompts of MEMIT/AlphaEdit and of the EasyEdit ROME port (ROME itself samples from the BOS token).
WORD_SEED_PROMPTS: tuple[str, ...] = ("The", "Therefore", "Because", "I", "You")

Templates = Sequence[str] | Sequence[Sequence[str]]


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
    docs/editors/locate-then-edit.md#context-templates). The key holds the model's ``name_or_path`` and ``id``, so two
    models edited in one process never share templates. The templates of a model are those of its first request (usually
    the unedited model), as in the reference code.
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

    def state(self, model: PreTrainedModel) -> list[dict[str, Any]]:
        """The templates cached for ``model``, with what they were generated with (JSON; a stream checkpoint's)."""
        fields = ("lengths", "seed", "seed_prompts", "top_k")
        return [
            dict(zip(fields, key[-4:])) | {"templates": templates}
            for key, templates in self._store.items()
            if key[2] == id(model)
        ]

    def load_state(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, state: list[dict[str, Any]]
    ) -> None:
        """Cache the templates :meth:`state` returned for ``model``, as if generated from it."""
        for entry in state:
            lengths = [tuple(pair) for pair in entry["lengths"]]
            key = self.key(model, tokenizer, lengths, entry["seed"], entry["seed_prompts"], entry["top_k"])
            self._store[key] = list(entry["templates"])

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

    See docs/editors/locate-then-edit.md#keys.
    """
    if not templates or templates[0] != "{}" or len(templates) < 2:
        raise ValueError("expected ['{}', <prefixed templates>...] as returned by context_templates")
    return [[templates[0]], list(templates[1:])]
