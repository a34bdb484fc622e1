"""A causal LM whose greedy answers are scripted, for tests that write every generated answer down by hand.

:class:`ScriptedLM` is a real ``transformers`` model as far as ``generate`` is concerned, but its next token is read
from a script: after a row's prompt (its tokens without padding) it continues with the tokens a real model would add
for a given text, ``prompt + " " + text`` (:func:`continuation`), then ends the sequence.
"""

import torch
from transformers import AutoTokenizer, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from lightning_edit.models.tokenization import encode_prompt, encode_prompt_target
from lightning_edit.resources import resolve_path


class ScriptedLM(PreTrainedModel, GenerationMixin):
    """A row that starts with a scripted prompt (``{prompt ids: continuation ids}``) and has followed its continuation
    so far gets the continuation's next token (then EOS); any other row gets EOS. Only the last position's logits are
    set; the stub keeps no cache (it reads each row whole)."""

    config_class = PretrainedConfig

    def __init__(self, vocab_size: int, eos: int, script: dict[tuple[int, ...], list[int]]):
        super().__init__(PretrainedConfig(vocab_size=vocab_size, eos_token_id=eos, num_hidden_layers=1))
        self.script, self.eos = script, eos
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the model a device and a dtype

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def next_token(self, ids: list[int]) -> int:
        for prompt, continuation in self.script.items():
            said = ids[len(prompt) :]
            if tuple(ids[: len(prompt)]) == prompt and len(said) < len(continuation):
                if said == continuation[: len(said)]:
                    return continuation[len(said)]
        return self.eos

    def forward(self, input_ids, attention_mask=None, **kwargs):
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        logits = torch.zeros(*input_ids.shape, self.config.vocab_size)
        for row, (ids, mask) in enumerate(zip(input_ids.tolist(), attention_mask.tolist())):
            logits[row, -1, self.next_token([i for i, m in zip(ids, mask) if m])] = 10.0
        return CausalLMOutputWithPast(logits=logits)


def toy_tokenizer(name: str, padding_side: str = "left", chat_template: str | None = None):
    """A toy model's tokenizer (``toy-gpt2``: GPT-2's ``Ġ``, no BOS; ``toy-llama``: LLaMA's ``▁``, adds BOS), with a
    pad token and a newline token (the toy LLaMA vocabulary has none; LLaMA's own has byte fallback)."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_path(f"builtin:models/{name}"))
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    tokenizer.padding_side = padding_side
    tokenizer.chat_template = chat_template
    if tokenizer.unk_token_id in tokenizer.encode("\n", add_special_tokens=False):
        tokenizer.add_tokens(["\n"])
    return tokenizer


def continuation(tokenizer, prompt: str, text: str) -> list[int]:
    """The tokens ``prompt + " " + text`` adds to the prompt's, as teacher forcing reads a target
    (:func:`~lightning_edit.models.tokenization.encode_prompt_target`)."""
    return encode_prompt_target(tokenizer, prompt, text)[1]


def scripted(tokenizer, says: dict[str, str]) -> ScriptedLM:
    """The stub that answers each prompt (as it is sent to the model) with ``prompt + " " + text``'s tokens."""
    script = {tuple(encode_prompt(tokenizer, p)): continuation(tokenizer, p, t.rstrip()) for p, t in says.items()}
    return ScriptedLM(len(tokenizer), tokenizer.eos_token_id, script)
