"""Build the embedded default model ``lightning_edit/assets/models/tiny-<family>``.

A randomly initialised, seeded model with a tokenizer trained on the text of the embedded benchmark files: it
makes every command runnable offline in seconds, but knows no facts (its metrics are chance level).

    python scripts/build_tiny_model.py --family gpt2 --out lightning_edit/assets/models/tiny-gpt2
"""

import argparse

from lightning_edit.models.build import random_model, train_tokenizer
from lightning_edit.resources import builtin_texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=["gpt2", "llama"], default="gpt2")
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tokenizer = train_tokenizer(builtin_texts(), args.family, args.vocab_size)
    model = random_model(args.family, tokenizer, seed=args.seed)
    tokenizer.save_pretrained(args.out)
    model.save_pretrained(args.out)


if __name__ == "__main__":
    main()
