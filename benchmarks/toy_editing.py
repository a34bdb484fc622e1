"""ROME, r-ROME, MEMIT and AlphaEdit on a shipped toy model: the metrics table of each protocol (not a test).

    python benchmarks/toy_editing.py                        # toy GPT-2, 50 toy CounterFact edits, single + sequential
    python benchmarks/toy_editing.py --model toy-llama --protocols single --limit 100

Each row is one ``lightning-edit validate`` run, in-process, of the composed configs
``configs/methods/<method>.yaml`` + ``configs/models/<model>.yaml`` + ``configs/benchmarks/counterfact.yaml`` on
``builtin:data/toy/counterfact.json`` (``--data.limit``), exactly what the printed command line runs. ``NoEdit``
gives the unedited reference. r-ROME is ROME with ``--model.key prompt``. The sequential protocol applies all
edits, ``--edit-batch-size`` per call for every method (default 1: one by one; AlphaEdit's config says 100; the batch
protocol edits as many together), then
scores every case on the final model. Metrics are macro means (ROME's aggregation);
results.json of each run is under ``--root``.
"""

import json
import tempfile
from pathlib import Path

import torch
from toy_runs import PROTOCOLS, validate

from lightning_edit import tools

METHODS = (
    "unedited",
    "ROME",
    "r-ROME",
    "MEMIT",
    "AlphaEdit",
    "GRACE",
    "WISE",
    "FT",
    "FT-L",
    "FT-M",
    "LoRA",
    "RECT",
    "UltraEdit",
)
METRICS = ("ES", "PS", "NS")


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument("--protocols", nargs="+", default=["single", "sequential"], choices=PROTOCOLS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument(
        "--limit", type=tools.positive_int, default=50, help="edits (the first cases of the toy CounterFact file)"
    )
    parser.add_argument(
        "--edit-batch-size", type=tools.positive_int, default=1, help="edits per editor call (batch, sequential)"
    )
    parser.add_argument(
        "--threads", type=tools.positive_int, default=None, help="torch CPU threads (default: torch's choice)"
    )
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
            flags = ["--data.path=builtin:data/toy/counterfact.json", f"--data.limit={args.limit}"]
            directory = root / f"{protocol}-{name}"
            results, seconds = validate(
                name, args.model, "counterfact", directory, flags, protocol, args.edit_batch_size
            )
            rows.append((name, "-" if name == "unedited" else protocol, results, seconds))
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
    tools.run(main)
