"""ROME, r-ROME, MEMIT and AlphaEdit on a shipped toy model: the metrics table of each protocol (not a test).

    python benchmarks/toy_editing.py                        # toy GPT-2, 50 toy CounterFact edits, single + sequential
    python benchmarks/toy_editing.py --model toy-llama --protocols single --limit 100

Each row is one ``lightning-edit validate`` run, in-process, of the composed configs
``configs/methods/<method>.yaml`` + ``configs/models/<model>.yaml`` + ``configs/benchmarks/counterfact.yaml`` on
``builtin:data/toy/counterfact.json`` (``--data.limit``), exactly what the printed command line runs. ``NoEdit``
gives the unedited reference. r-ROME is ROME with ``--model.key prompt``. The sequential protocol applies all
edits, ``--edit-batch-size`` per call for every method (default 1: one by one; AlphaEdit's config says 100), then
scores every case on the final model. Metrics are macro means (ROME's aggregation);
results.json of each run is under ``--root``.
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

import torch  # noqa: E402

from lightning_edit.cli import build_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METHODS = {  # row name -> (method config, extra flags)
    "unedited": ("rome", ["--model", "NoEdit"]),
    "ROME": ("rome", []),
    "r-ROME": ("rome", ["--model.key", "prompt"]),
    "MEMIT": ("memit", []),
    # AlphaEdit-only values the toy models need: see docs/toy-presets.md
    "AlphaEdit": ("alphaedit", ["--model.nullspace_threshold", "0.5", "--model.l2", "1"]),
    "GRACE": ("grace", ["--model.eps", "3"]),  # toy-gpt2: docs/toy-presets.md
    "WISE": ("wise", ["--model.template_lengths", "[[10,5],[15,5]]"]),  # toy-gpt2
    "FT": ("ft", []),
    "FT-L": ("ft_l", []),
    "FT-M": ("ft_m", []),
    # LoRA's toy steps, early stop and learning rate: see docs/toy-presets.md
    "LoRA": ("lora", ["--model.num_steps", "20", "--model.early_stop_loss", "1e-2", "--model.lr", "1e-3"]),
    "RECT": ("rect", []),
}
METRICS = ("ES", "PS", "NS")


def command(
    method: str, flags: list[str], model: str, protocol: str, limit: int, edit_batch_size: int, directory: Path
) -> list[str]:
    """The ``lightning-edit validate`` arguments of one row."""
    args = [
        f"--config={ROOT / 'configs/methods' / method}.yaml",
        f"--config={ROOT / 'configs/models' / model}.yaml",
        f"--config={ROOT / 'configs/benchmarks/counterfact.yaml'}",
        "--data.path=builtin:data/toy/counterfact.json",
        f"--data.limit={limit}",
        f"--trainer.default_root_dir={directory}",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        *flags,
    ]
    if flags[:2] != ["--model", "NoEdit"]:
        args += [f"--model.protocol={protocol}", f"--model.edit_batch_size={edit_batch_size}"]
    return args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument("--protocols", nargs="+", default=["single", "sequential"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--limit", type=int, default=50, help="edits (the first cases of the toy CounterFact file)")
    parser.add_argument("--edit-batch-size", type=int, default=1, help="sequential protocol: edits per editor call")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--root", type=Path, default=None, help="where the runs write (default: a temporary dir)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    root = args.root or Path(tempfile.mkdtemp(prefix="toy_editing_"))
    rows = []
    for protocol in args.protocols:
        for name in args.methods:
            if name == "unedited" and protocol != args.protocols[0]:
                continue  # the unedited model does not depend on the protocol
            method, flags = METHODS[name]
            directory = root / f"{protocol}-{name}"
            cli_args = command(method, flags, args.model, protocol, args.limit, args.edit_batch_size, directory)
            print("lightning-edit validate " + " ".join(cli_args), file=sys.stderr)
            start = time.perf_counter()
            cli = build_cli(["validate", *cli_args])
            seconds = time.perf_counter() - start
            rows.append((name, "-" if name == "unedited" else protocol, cli.model.results, seconds))
    print(f"\n{args.model}, {args.limit} toy CounterFact edits (macro means; runs in {root})\n")
    print("| method | protocol | " + " | ".join(METRICS) + " | seconds |")
    print("|---|---|" + "---|" * len(METRICS) + "---|")
    for name, protocol, results, seconds in rows:
        values = " | ".join(f"{results[m]['macro']:.3f}" if m in results else "-" for m in METRICS)
        print(f"| {name} | {protocol} | {values} | {seconds:.0f} |")
    (root / "table.json").write_text(
        json.dumps([{"method": n, "protocol": p, "metrics": r, "seconds": s} for n, p, r, s in rows], indent=1)
    )


if __name__ == "__main__":
    main()
