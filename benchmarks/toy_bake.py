"""The reversal curse on a shipped toy model: BAKE metrics of weight editors, in-context editors and both (not a test).

    python benchmarks/toy_bake.py                      # toy GPT-2, the 100 toy BAKE-Q&J edits
    python benchmarks/toy_bake.py --model toy-llama --limit 50 --demonstrations 4

Each row is one ``lightning-edit validate`` run, in-process, of ``configs/methods/<method>.yaml`` (+ the model
preset for weight editors) + ``configs/benchmarks/bake.yaml`` on ``builtin:data/toy/bake_qa.json``, the command
printed on stderr. IKE retrieves ``--demonstrations`` demonstrations (lexical retrieval, no download) from the toy
CounterFact file, whose facts are other edits of the same world; "ROME + IKE" prompts the ROME-edited model the
same way and "ROME + PROMPT" with the new fact alone (BAKE §6.2). Metrics are macro means of the paper's
probability comparison; RQS counts only cases whose reverse question the unedited model answered with the original
answer (the paper's filter).
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported
os.environ.setdefault("WANDB_MODE", "offline")

from lightning_edit.cli import build_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
POOL = "builtin:data/toy/counterfact.json"
METRICS = ("ES", "GS", "LS", "RQS", "RJS")
LOGPROBS = ("RQ_logprob_true_pre", "RQ_logprob_true", "RQ_logprob_new_pre", "RQ_logprob_new")


def rows(k: int) -> dict[str, tuple[str, bool, list[str]]]:
    """Row name -> (method config, composes with the model preset, extra flags)."""
    ike = [f"--model.in_context.demonstrations={k}", f"--model.in_context.pool={POOL}"]
    ike += ["--model.in_context.retriever=lexical"]
    return {
        "unedited": ("no_edit", False, []),
        "ROME": ("rome", True, []),
        "MEMIT": ("memit", True, ["--model.protocol=single"]),
        "AlphaEdit": (
            "alphaedit",
            True,
            [
                "--model.protocol=single",
                "--model.edit_batch_size=1",
                "--model.nullspace_threshold=0.5",
                "--model.l2=1",
            ],  # docs/toy-presets.md
        ),
        "GRACE": ("grace", True, ["--model.protocol=single", "--model.eps=3"]),
        "WISE": (
            "wise",
            True,
            ["--model.protocol=single", "--model.template_lengths=[[10,5],[15,5]]"],
        ),
        "PROMPT": ("prompt", False, []),
        "IKE": ("ike", False, ike),
        "ROME + PROMPT": ("rome", True, ["--model.in_context.demonstrations=0"]),
        "ROME + IKE": ("rome", True, ike),
        "FT": ("ft", True, []),
        "FT-L": ("ft_l", True, []),
        "FT-M": ("ft_m", True, []),
        "LoRA": ("lora", True, ["--model.num_steps=20", "--model.early_stop_loss=1e-2", "--model.lr=1e-3"]),
        "RECT": ("rect", True, []),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument("--limit", type=int, default=100, help="the first cases of the toy BAKE file")
    parser.add_argument("--demonstrations", type=int, default=4, help="IKE's k (the toy models see 256 tokens)")
    parser.add_argument("--root", type=Path, default=None, help="where the runs write (default: a temporary dir)")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="toy_bake_"))
    preset = ROOT / "configs/models" / f"{args.model}.yaml"
    results = []
    for name, (method, composes, flags) in rows(args.demonstrations).items():
        cli_args = [f"--config={ROOT / 'configs/methods' / method}.yaml"]
        cli_args += [f"--config={preset}"] if composes else [f"--model.lm.path=builtin:models/{args.model}"]
        cli_args += [
            f"--config={ROOT / 'configs/benchmarks/bake.yaml'}",
            f"--data.limit={args.limit}",
            f"--trainer.default_root_dir={root / name.replace(' ', '')}",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            *flags,
        ]
        print("lightning-edit validate " + " ".join(cli_args), file=sys.stderr)
        start = time.perf_counter()
        cli = build_cli(["validate", *cli_args])
        results.append((name, cli.model.results, time.perf_counter() - start))
    print(f"\n{args.model}, {args.limit} toy BAKE-Q&J edits (macro means; runs in {root})\n")
    print("| method | " + " | ".join(METRICS + LOGPROBS) + " | seconds |")
    print("|---|" + "---|" * len(METRICS + LOGPROBS) + "---|")
    for name, metrics, seconds in results:
        values = " | ".join(f"{metrics[m]['macro']:.3f}" if m in metrics else "-" for m in METRICS + LOGPROBS)
        print(f"| {name} | {values} | {seconds:.0f} |")
    (root / "table.json").write_text(
        json.dumps([{"method": n, "metrics": r, "seconds": s} for n, r, s in results], indent=1, default=str)
    )


if __name__ == "__main__":
    main()
