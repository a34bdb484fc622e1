"""Every editor on CPU and on a GPU: the same toy run on both devices, its metrics side by side (not a test).

    python benchmarks/device_parity.py --limit 10            # needs a CUDA device
    python benchmarks/device_parity.py --methods ROME MEMIT --protocols single sequential

Each row is one ``lightning-edit validate`` run of ``benchmarks/toy_runs.py`` (the toy GPT-2 preset, the first
``--limit`` cases of the toy CounterFact file), once with ``--trainer.accelerator cpu`` and once with ``cuda``.
It checks that every editor runs with the model on a GPU, and how far its macro ES/PS/NS there are from the CPU's
(float32 both; kernels differ, so a difference of a prompt near a tie can flip a comparison). A run that fails is
a row with its error, and the script goes on.
"""

import json
import tempfile
import traceback
from pathlib import Path

import torch
from toy_runs import PROTOCOLS, validate

from lightning_edit import tools

METHODS = (
    "unedited", "ROME", "r-ROME", "MEMIT", "AlphaEdit", "GRACE", "WISE", "FT", "FT-L", "FT-M", "LoRA", "RECT", "PROMPT",
    "IKE",
)  # fmt: skip
METRICS = ("ES", "PS", "NS")
#: IKE's demonstrations: the toy facts, retrieved lexically (the paper's encoder needs a download; as toy_bake.py)
EXTRA = {
    "IKE": [
        "--model.in_context.pool=builtin:data/toy/counterfact.json",
        "--model.in_context.retriever=lexical",
        "--model.in_context.demonstrations=4",  # 16 would not fit in the toy model's 256 positions
    ]
}


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--protocols", nargs="+", default=["single"], choices=PROTOCOLS)
    parser.add_argument("--limit", type=tools.positive_int, default=10)
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        tools.fail("no CUDA device: this script compares CPU and GPU runs")
    root = args.root or Path(tempfile.mkdtemp(prefix="device_parity_"))
    rows = []
    for protocol in args.protocols:
        for method in args.methods:
            row = {"method": method, "protocol": protocol}
            for accelerator in ("cpu", "cuda"):
                flags = [
                    "--data.path=builtin:data/toy/counterfact.json",
                    f"--data.limit={args.limit}",
                    f"--trainer.accelerator={accelerator}",
                    "--trainer.devices=1",
                    *EXTRA.get(method, []),
                ]
                torch.cuda.reset_peak_memory_stats()
                try:
                    results, seconds = validate(
                        method, "toy-gpt2", "counterfact", root / f"{protocol}-{method}-{accelerator}", flags, protocol
                    )
                except Exception as error:  # a row per failure: the other editors still run
                    row[accelerator] = {"error": "".join(traceback.format_exception_only(error)).strip()[-400:]}
                    traceback.print_exc()
                    continue
                row[accelerator] = {name: results[name]["macro"] for name in METRICS} | {"seconds": seconds}
                if accelerator == "cuda":
                    row[accelerator]["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            if "error" not in row["cpu"] and "error" not in row["cuda"]:
                row["max_abs_difference"] = max(abs(row["cpu"][m] - row["cuda"][m]) for m in METRICS)
            rows.append(row)
            print(json.dumps(row), flush=True)
    names = " / ".join(METRICS)
    print(f"\n| method | protocol | CPU {names} | GPU {names} | max difference | s CPU / GPU |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        cells = []
        for accelerator in ("cpu", "cuda"):
            values = row[accelerator]
            cells.append(values["error"][:80] if "error" in values else " / ".join(f"{values[m]:.3f}" for m in METRICS))
        difference = f"{row['max_abs_difference']:.3f}" if "max_abs_difference" in row else "-"
        seconds = " / ".join(f"{row[a].get('seconds', float('nan')):.1f}" for a in ("cpu", "cuda"))
        print(f"| {row['method']} | {row['protocol']} | {cells[0]} | {cells[1]} | {difference} | {seconds} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    tools.run(main)
