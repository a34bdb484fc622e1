"""Small models built from a config: a tokenizer trained with ``tokenizers`` and a randomly initialised model.

Used for shape-reduced test models and for the embedded default model (``scripts/build_tiny_model.py``). The
tokenizers mimic their families: GPT-2's byte-level BPE (no BOS added) and LLaMA's SentencePiece-style
``▁word`` pieces with a BOS prepended.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

TokenizerStyle = Literal["gpt2", "llama"]


def train_tokenizer(texts: Iterable[str], style: TokenizerStyle, vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A BPE tokenizer trained on ``texts`` in the style of GPT-2 or LLaMA."""
    if style == "gpt2":
        specials = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tokenizer.train_from_iterator(texts, trainer)
    else:
        specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
        alphabet = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(0xC0, 0x180)] + ["▁"]
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=alphabet
        )
        tokenizer.train_from_iterator(texts, trainer)
        bos_id = tokenizer.token_to_id("<s>")
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
        )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **specials)


def random_model(
    family: Literal["gpt2", "llama"],
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
) -> PreTrainedModel:
    """A randomly initialised GPT-2 or LLaMA causal LM sized to ``tokenizer``, seeded."""
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=len(tokenizer), n_embd=hidden_size, n_layer=num_layers, n_head=num_heads, n_positions=256, **ids
        )
    else:
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=hidden_size * 3,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=num_heads // 2,
            max_position_embeddings=256,
            tie_word_embeddings=False,
            **ids,
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config).eval()
