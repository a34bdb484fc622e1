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

import json
import tempfile
from pathlib import Path

from toy_runs import validate

from lightning_edit import tools

POOL = "builtin:data/toy/counterfact.json"
METRICS = ("ES", "GS", "LS", "RQS", "RJS")
LOGPROBS = ("RQ_logprob_true_pre", "RQ_logprob_true", "RQ_logprob_new_pre", "RQ_logprob_new")
#: row name -> (toy_runs.METHODS entry, extra flags; "ike" stands for IKE's retrieval flags)
ROWS = {
    "unedited": ("unedited", []),
    "ROME": ("ROME", []),
    "MEMIT": ("MEMIT", []),
    "AlphaEdit": ("AlphaEdit", []),
    "GRACE": ("GRACE", []),
    "WISE": ("WISE", []),
    "PROMPT": ("PROMPT", []),
    "IKE": ("IKE", ["ike"]),
    "ROME + PROMPT": ("ROME", ["--model.in_context.demonstrations=0"]),
    "ROME + IKE": ("ROME", ["ike"]),
    "FT": ("FT", []),
    "FT-L": ("FT-L", []),
    "FT-M": ("FT-M", []),
    "LoRA": ("LoRA", []),
    "RECT": ("RECT", []),
}


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument("--methods", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--limit", type=tools.positive_int, default=100, help="the first cases of the toy BAKE file")
    parser.add_argument(
        "--demonstrations", type=tools.positive_int, default=4, help="IKE's k (the toy models see 256 tokens)"
    )
    parser.add_argument("--root", type=Path, default=None, help="where the runs write (default: a temporary dir)")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="toy_bake_"))
    ike = [f"--model.in_context.demonstrations={args.demonstrations}", f"--model.in_context.pool={POOL}"]
    ike += ["--model.in_context.retriever=lexical"]
    results = []
    for name in args.methods:
        method, flags = ROWS[name]
        flags = [f for flag in flags for f in (ike if flag == "ike" else [flag])]
        directory = root / name.replace(" ", "")
        metrics, seconds = validate(method, args.model, "bake", directory, [f"--data.limit={args.limit}", *flags])
        results.append((name, metrics, seconds))
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
    tools.run(main)
