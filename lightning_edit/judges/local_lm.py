"""An LLM judge run locally: a Hugging Face causal LM loaded by the project's loader, decoding greedily.

The conversation is formatted with the tokenizer's chat template when it has one; otherwise the system and user
messages are joined by a blank line. The model is loaded on first use (CUDA if available) and kept, once per process
for all the judges that name it (ScEdit's four scales share one model). A prompt that does not fit in the model's
positions with the reply's budget is an error, before any generation.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

import torch

from lightning_edit.errors import ConfigError
from lightning_edit.judges.base import Scale, stable_digest
from lightning_edit.judges.llm import LLMJudge
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.models.tokenization import encode_prompt
from lightning_edit.scoring.generation import generate
from lightning_edit.stats.fingerprint import weights_digest


class LocalLMJudge(LLMJudge):
    """An LLM judge on a local model.

    Args:
        path: the model (local directory, ``builtin:models/<name>`` or hub id), as for the edited model.
        dtype: weight dtype.
        prompts_per_forward: prompts per forward pass of generation.
        template, scale, key, max_tokens, temperature, cache_dir: see :class:`~lightning_edit.judges.llm.LLMJudge`
            (``temperature`` > 0 samples, seeded with 0).
    """

    def __init__(
        self,
        path: str,
        dtype: Literal["float32", "float16", "bfloat16", "auto"] = "float32",
        prompts_per_forward: int = 8,
        template: str = "answer_correct",
        scale: Scale | None = None,
        key: str | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        cache_dir: str | None = None,
    ):
        super().__init__(template, scale, key, max_tokens, temperature, cache_dir)
        self.path = path
        self.dtype = dtype
        self.prompts_per_forward = prompts_per_forward

    def settings(self) -> dict[str, Any]:
        return {"model": self.path, "dtype": self.dtype, **super().settings()}

    def identity(self) -> str:
        """As :meth:`~lightning_edit.judges.base.Judge.identity`, with the digest of the judge model's weights: a model
        trained again in the same folder is not served the verdicts of the old one (the model is loaded for it)."""
        model, _ = _load(self.path, self.dtype)
        return stable_digest([super().identity(), weights_digest(model)])

    def _prompt(self, tokenizer, messages: list[dict[str, str]]) -> str:
        if tokenizer.chat_template is not None:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(message["content"] for message in messages) + "\n"

    def complete(self, conversations: list[list[dict[str, str]]]) -> list[tuple[str | None, str]]:
        model, tokenizer = _load(self.path, self.dtype)
        prompts = [self._prompt(tokenizer, messages) for messages in conversations]
        limit = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", None)
        longest = max((len(encode_prompt(tokenizer, prompt)) for prompt in prompts), default=0)
        if limit is not None and longest + self.max_tokens > limit:
            raise ConfigError(
                f"judge model {self.path!r} has {limit} positions, but a prompt of the {self.template} template is "
                f"{longest} tokens, and the reply takes up to max_tokens={self.max_tokens}: use a longer-context model"
            )
        replies = generate(
            model,
            tokenizer,
            prompts,
            max_new_tokens=self.max_tokens,
            do_sample=self.temperature > 0,
            temperature=self.temperature or 1.0,
            batch_size=self.prompts_per_forward,
        )
        return [(reply, "") for reply in replies]


@cache
def _load(path: str, dtype: str) -> tuple[Any, Any]:
    """The judge model and tokenizer of ``path``, loaded once per process (on CUDA if available)."""
    return load_model_and_tokenizer(ModelSource(path, dtype), "cuda" if torch.cuda.is_available() else None)
