"""What a model loaded from weights must hold, wherever they come from (a model folder, a GGUF file).

- Every weight from the checkpoint, and every tensor of the checkpoint in a weight: transformers fills a weight the
  checkpoint lacks with random values, or one of the wrong shape with random values when asked to, and drops a
  tensor that fits no weight, each with a warning at most. Such a model is refused (:func:`weight_faults`); tied
  weights (GPT-2's ``lm_head``, tied to the embedding) are not missing.
- A token to pad batches with: the pad token, else EOS, else UNK (:func:`pad_token`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from transformers import PreTrainedTokenizerBase

#: how many names a message lists before it counts the rest
SHOWN = 3


def listed(names: Iterable[str]) -> str:
    """``names`` sorted, the first :data:`SHOWN` written out and the rest counted: ``a, b, c and 5 more``."""
    names = sorted(names)
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def weight_faults(info: dict[str, Any], unmapped: Iterable[str] = ()) -> str | None:
    """What is wrong with the weights of a model loaded by ``from_pretrained(..., output_loading_info=True,
    ignore_mismatched_sizes=True)`` (its ``info``), with ``unmapped`` tensors of the file that transformers dropped
    (GGUF), or None when every weight came from the checkpoint and every tensor went into a weight."""
    faults = []
    missing = set(info.get("missing_keys", ()))
    if missing:
        faults.append(f"{len(missing)} weights missing from the checkpoint ({listed(missing)})")
    unexpected = set(info.get("unexpected_keys", ())) | set(unmapped)
    if unexpected:
        faults.append(f"{len(unexpected)} tensors that fit no weight of the model ({listed(unexpected)})")
    shapes = {f"{name} {tuple(saved)} for {tuple(model)}" for name, saved, model in info.get("mismatched_keys", ())}
    if shapes:
        faults.append(f"{len(shapes)} tensors of the wrong shape ({listed(shapes)})")
    return "; ".join(faults) or None


def pad_token(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The token batches are padded with: the tokenizer's pad token, else EOS, else UNK, else None."""
    for token in (tokenizer.pad_token, tokenizer.eos_token, tokenizer.unk_token):
        if token is not None:
            return token
    return None
