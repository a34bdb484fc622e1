"""Peak memory of the editors on a real model, and the memory budget in force (not a test).

    python benchmarks/editing_memory.py --data <dir>/counterfact-train.json --stats-corpus smollm2-samples.jsonl \
        --threads 1
    python benchmarks/editing_memory.py --data <file> --stats-corpus <corpus> --single ROME --single-batches 1 8 \
        --sequential MEMIT --per-call 10 100 --flags --model.target.memory_budget=2000000000

Each row is one ``lightning-edit validate`` command in a process of its own (``real_editing.py``'s composition: method
config, model preset, benchmark config), so its peak is its own: every ``--single`` editor under ``single`` with each
data batch size of ``--single-batches`` (``--limit`` cases), and every ``--sequential`` editor under ``sequential`` with
each ``--per-call`` number of cases per editor call (``--limit`` cases, or that number when larger). The key
statistics are computed first by a one-case run of each editor that reads them, so the rows find them cached. Printed
per row: the process's peak resident set and the phase that set it (results.json's ``memory``), the v*/z memory budget
in force (``target_budget_bytes``; docs/editors/locate-then-edit.md#memory-budget), and seconds per edit
(results.json's ``seconds``: editing and scoring, over the cases). Each run's results.json is under ``--root``.
"""

import argparse
import json
import tempfile
from pathlib import Path

from real_editing import METHODS, TAKES_STATS, command, run

from lightning_edit import tools


def row(directory: Path, method: str, protocol: str, per_call: int, cases: int) -> dict:
    results = json.loads(next(directory.glob("**/results.json")).read_text())
    memory = results["memory"][0]
    gpu = memory.get("gpu_peak_bytes", {})
    return {
        "method": method,
        "protocol": protocol,
        "per_call": per_call,
        "peak_gib": max(gpu.values(), default=memory["host_peak_bytes"]) / 2**30,
        "phase": next(iter(memory.get("gpu_peak_phase", {}).values()), memory["host_peak_phase"]),
        "budget_gib": memory.get("target_budget_bytes", 0) / 2**30,
        "s_per_edit": results["seconds"] / cases,
    }


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="smollm2-135m", help="configs/models/<preset>.yaml")
    parser.add_argument("--data", required=True, help="a CounterFact file")
    parser.add_argument("--limit", type=tools.positive_int, default=8, help="cases of each run")
    parser.add_argument("--stats-corpus", required=True, help="key-statistics corpus (--model.stats.corpus)")
    parser.add_argument("--stats-samples", type=tools.positive_int, default=64, help="--model.stats.n_samples")
    parser.add_argument("--single", nargs="*", default=["ROME", "MEMIT", "AlphaEdit", "FT-M", "GRACE", "UltraEdit"])
    parser.add_argument("--single-batches", nargs="+", type=tools.positive_int, default=[1, 8])
    parser.add_argument("--sequential", nargs="*", default=["MEMIT", "AlphaEdit", "UltraEdit"])
    parser.add_argument("--per-call", nargs="+", type=tools.positive_int, default=[10, 100])
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="appended to every command")
    parser.add_argument("--threads", type=tools.positive_int, default=1)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    for method in {*args.single, *args.sequential} - set(METHODS):
        parser.error(f"--single/--sequential: unknown method {method!r}; known: {', '.join(METHODS)}")
    root = args.root or Path(tempfile.mkdtemp(prefix="editing_memory_"))

    def validate(method: str, name: str, protocol: str, flags: list[str]) -> None:
        flags = [f"--data.path={args.data}", *flags]
        if method in TAKES_STATS:
            flags += [f"--model.stats.corpus={args.stats_corpus}", f"--model.stats.n_samples={args.stats_samples}"]
        run(command(method, args.preset, "counterfact", root / name, [*flags, *args.flags], protocol), args.threads)

    for method in sorted({*args.single, *args.sequential} & TAKES_STATS):
        validate(method, f"warm-{method}", "single", ["--data.limit=1"])
    runs = [("single", method, batch, args.limit) for method in args.single for batch in args.single_batches]
    runs += [("sequential", m, k, max(k, args.limit)) for m in args.sequential for k in args.per_call]
    rows = []
    for protocol, method, per_call, cases in runs:
        name = f"{method}-{protocol}-{per_call}"
        size = ["--data.batch_size" if protocol == "single" else "--model.edit_batch_size", str(per_call)]
        validate(method, name, protocol, [f"--data.limit={cases}", f"{size[0]}={size[1]}"])
        rows.append(row(root / name, method, protocol, per_call, cases))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| editor | protocol | cases per call | peak memory (GiB) | phase | budget (GiB) | s/edit |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['method']} | {r['protocol']} | {r['per_call']} | {r['peak_gib']:.2f} | {r['phase']} | "
            f"{r['budget_gib']:.2f} | {r['s_per_edit']:.1f} |"
        )
    (root / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    tools.run(main)
