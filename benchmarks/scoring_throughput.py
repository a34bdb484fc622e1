"""Prompts per second of batched target scoring against one prompt at a time (not a test).

    python benchmarks/scoring_throughput.py                     # CounterFact prompts of the embedded data
    python benchmarks/scoring_throughput.py --data <dir>/counterfact-val.json --n 512   # files: data/README.md

The model is a GPT-2 built from a config (random weights: speed does not depend on what it knows) with the
embedded tokenizer. Each CounterFact record gives four (prompt, answer) pairs: rewrite and rephrase prompts with
the new and the true object.
"""

import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lightning_edit import tools
from lightning_edit.data.records import read_records
from lightning_edit.models.loading import ModelSource, load_tokenizer
from lightning_edit.scoring import score_targets


def pairs(path: str, n: int) -> tuple[list[str], list[str]]:
    prompts, targets = [], []
    records = read_records(path)
    while len(prompts) < n:
        for record in records:
            for prompt in (record["prompt"], record["rephrase_prompt"]):
                for target in (record["target_new"], record["ground_truth"]):
                    prompts.append(prompt)
                    targets.append(target)
    return prompts[:n], targets[:n]


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="builtin:data/counterfact-flat.json")
    parser.add_argument("--n", type=tools.positive_int, default=256, help="number of (prompt, target) pairs")
    parser.add_argument("--batch-sizes", type=tools.positive_int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--hidden", type=tools.positive_int, default=512)
    parser.add_argument("--layers", type=tools.positive_int, default=6)
    parser.add_argument(
        "--threads", type=tools.positive_int, default=None, help="torch threads (default: torch's choice)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokenizer = load_tokenizer(ModelSource("builtin:models/tiny-gpt2"))
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=args.hidden, n_layer=args.layers, n_head=8, **ids)
    model = GPT2LMHeadModel(config).eval()
    prompts, targets = pairs(args.data, args.n)
    print(
        f"model: GPT-2 {args.layers} layers x {args.hidden}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
        f"parameters; {len(prompts)} pairs; {torch.get_num_threads()} threads"
    )

    score_targets(model, tokenizer, prompts[:8], targets[:8])  # warm-up
    start = time.perf_counter()
    for prompt, target in zip(prompts, targets):
        score_targets(model, tokenizer, [prompt], [target])
    alone = len(prompts) / (time.perf_counter() - start)
    print(f"one at a time       : {alone:8.1f} prompts/s")
    for batch_size in args.batch_sizes:
        start = time.perf_counter()
        score_targets(model, tokenizer, prompts, targets, batch_size=batch_size)
        batched = len(prompts) / (time.perf_counter() - start)
        print(f"batched (size {batch_size:3d}) : {batched:8.1f} prompts/s  ({batched / alone:.1f}x)")


if __name__ == "__main__":
    tools.run(main)
