"""An offline corpus for key statistics: text the model itself writes.

ROME's ``C = E[k kᵀ]`` wants keys of text like the model's training text (the papers: 100,000 Wikipedia articles).
Without network, sample the model: each document is ancestral sampling (temperature 1, no top-k or top-p) from the
model's start token (BOS, else EOS), so the keys follow the model's own distribution. The documents are written as
JSONL (``{"text": ...}``), an ordinary corpus file for ``--model.stats.corpus``, cached on its content like any other::

    python -m lightning_edit.stats.sample_corpus --model gguf:smollm2-135m-instruct --documents 2000 \\
        --out smollm2-samples.jsonl
    lightning-edit validate ... --model.stats.corpus smollm2-samples.jsonl --model.stats.n_samples 2000

The same model, seed and settings give the same file. An instruct model's samples are chat turns; docs/models.md
measures what C from such a corpus changes against C = I. Bad options and an ``--out`` that cannot be written are
one-line errors before the model loads (:mod:`lightning_edit.tools`); a progress bar shows the sampling.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from lightning_edit import tools
from lightning_edit.errors import Interrupted
from lightning_edit.stopping import stop_requested

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def sample_documents(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    documents: int,
    max_new_tokens: int = 128,
    documents_per_forward: int = 32,
    seed: int = 0,
    progress: bool = True,
) -> list[str]:
    """``documents`` texts sampled from the start token, ``documents_per_forward`` at a time, batch ``b`` seeded with
    ``seed + b`` (module docstring); ``progress``: a progress bar on stderr."""
    import torch
    from tqdm.auto import tqdm

    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has neither a BOS nor an EOS token to start from")
    texts: list[str] = []
    with tqdm(total=documents, desc="sampling", unit="doc", disable=not progress) as bar, torch.no_grad():
        for batch, first in enumerate(range(0, documents, documents_per_forward)):
            rows = min(documents_per_forward, documents - first)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + batch)
                ids = model.generate(
                    torch.full((rows, 1), start, device=model.device),
                    attention_mask=torch.ones(rows, 1, dtype=torch.long, device=model.device),
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
            texts += tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)
            bar.update(rows)
            if (signum := stop_requested()) is not None:
                raise Interrupted(f"sampling stopped by signal {signum} after {len(texts)} of {documents} documents; "
                                  "nothing is written: run the same command again", signum)  # fmt: skip
    return texts


def main(argv: list[str] | None = None) -> None:
    """The command line (module docstring): options and ``--out`` are checked before the model loads; ``--out`` is
    replaced only when every document is sampled."""
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="lm.path of the model (a folder, gguf:<name>, a hub id)")
    parser.add_argument("--documents", type=tools.positive_int, default=2000)
    parser.add_argument("--max-new-tokens", type=tools.positive_int, default=128)
    parser.add_argument("--documents-per-forward", type=tools.positive_int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="the .jsonl file to write")
    args = parser.parse_args(argv)
    with tools.output(args.out, "--out") as file:
        from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(ModelSource(args.model))
        texts = sample_documents(
            model, tokenizer, args.documents, args.max_new_tokens, args.documents_per_forward, args.seed
        )
        for text in texts:
            file.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    empty = sum(not text.strip() for text in texts)
    print(f"wrote {len(texts)} documents ({empty} empty, skipped by the corpus reader) to {args.out}")


if __name__ == "__main__":
    tools.run(main)
