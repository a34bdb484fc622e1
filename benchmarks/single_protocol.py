"""Cases per second of the ``single`` protocol, end to end, on the three paths (not a test).

    python benchmarks/single_protocol.py --threads 1                   # ROME and MEMIT, toy GPT-2, 100 toy cases
    python benchmarks/single_protocol.py --methods AlphaEdit --model toy-llama --batch-size 100
    python benchmarks/single_protocol.py --generated-answers bare   # also a greedy answer to every prompt

For each method, three ``lightning-edit validate`` runs in this process (``build_cli``, so the clock covers the whole
command after Python's imports: model loading, Trainer set-up, editing, scoring and reports) on the same cases:

1. ``reference``: one case at a time, written and undone, and the v*/z loop of the reference computation (the
   whole model at every step, every position's logits): ``--model.batched_single=false
   --model.target.full_forward=true``;
2. ``one at a time``: the same, with the default v*/z loop (blocks below the injection once, logits only at the
   target and KL positions);
3. ``batched``: the default, the cases of a data batch (``--batch-size``) optimised together and scored in one
   pass where each case's rows see its own low-rank update.

The scorer computes logits only where it scores on every path. With ``--generated-answers`` every run also generates
and grades an answer to each prompt (``--data.generated_answers``, QAEdit's convention); on the batched path the
answers of a data batch's cases are generated together, each row on its own case's update. The statistics cache and
the context templates are warmed first by a short run. The script checks that every path gives every case the same
scores (cases.jsonl) and prints cases/s and each path's speed-up over the first path run (``--paths``).
``--whole-process`` times each run as a new Python process instead, from its start to its exit (interpreter start
and imports included: what a user waits for).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from toy_runs import validate

from lightning_edit import tools

PATHS = {
    "reference": ["--model.batched_single=false", "--model.target.full_forward=true"],
    "one at a time": ["--model.batched_single=false"],
    "batched": [],
}


def run(method: str, args, limit: int, flags: list[str], directory: Path) -> tuple[float, list[dict]]:
    """Seconds of one validate command (``single`` protocol, the toy flags of toy_runs.py), and its per-case scores.

    With ``--whole-process`` the command runs in a new Python process (this script with ``--child``), timed from its
    start to its exit: interpreter start and imports included."""
    if args.whole_process and not args.child:
        command = [sys.executable, __file__, "--child", "--methods", method, "--model", args.model]
        command += ["--batch-size", str(args.batch_size), "--root", str(directory), "--limit", str(limit)]
        command += [*(["--threads", str(args.threads)] if args.threads else [])]
        command += [*(["--generated-answers", args.generated_answers] if args.generated_answers else [])]
        start = time.perf_counter()
        subprocess.run([*command, "--", *flags], check=True, capture_output=True)
        seconds = time.perf_counter() - start
    else:
        data = ["--data.path=builtin:data/toy/counterfact.json", f"--data.limit={limit}"]
        data += [f"--data.batch_size={args.batch_size}"]
        if args.generated_answers:
            data += [f"--data.generated_answers={args.generated_answers}"]
        _, seconds = validate(method, args.model, "counterfact", directory, [*data, *flags])
    cases = [json.loads(line) for line in (directory / "cases.jsonl").read_text().splitlines()]
    return seconds, [{"case_id": case["case_id"], "scores": case["scores"]} for case in cases]


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument("--methods", nargs="+", default=["ROME", "MEMIT"], help="rows of toy_runs.py")
    parser.add_argument(
        "--limit", type=tools.positive_int, default=100, help="the first cases of the toy CounterFact file"
    )
    parser.add_argument(
        "--batch-size", type=tools.positive_int, default=32, help="--data.batch_size: cases edited together"
    )
    parser.add_argument(
        "--generated-answers", default=None, choices=("bare", "qa_inst", "chat"), help="--data.generated_answers"
    )
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS), help="the paths to run")
    parser.add_argument(
        "--threads", type=tools.positive_int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--root", type=Path, default=None, help="where the runs write (default: a temporary dir)")
    parser.add_argument("--whole-process", action="store_true", help="time each run as a new process, imports included")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one run; flags after "--"
    parser.add_argument("flags", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        run(args.methods[0], args, args.limit, args.flags, args.root)
        return
    root = args.root or Path(tempfile.mkdtemp(prefix="single_protocol_"))
    rows = []
    for method in args.methods:
        run(method, args, 4, [], root / f"{method}-warm-up")  # statistics, templates
        timings, scores = {}, {}
        for path in args.paths:
            timings[path], scores[path] = run(method, args, args.limit, PATHS[path], root / f"{method}-{path}")
        first = args.paths[0]
        equal = all(scores[path] == scores[first] for path in args.paths)
        for path in args.paths:
            seconds = timings[path]
            rows.append((method, path, seconds, args.limit / seconds, timings[first] / seconds, equal))
    answers = f", generated answers ({args.generated_answers})" if args.generated_answers else ""
    clock = "each a new process, imports included" if args.whole_process else "in this process, after its imports"
    print(f"\n{args.model}, {args.limit} toy CounterFact cases{answers}, single protocol, data.batch_size "
          f"{args.batch_size}, threads {torch.get_num_threads()}, {clock} (runs in {root})\n")  # fmt: skip
    print(f"| method | path | seconds | cases/s | speed-up over {first} | per-case scores equal to {first}'s |")
    print("|---|---|---|---|---|---|")
    for method, path, seconds, rate, speedup, equal in rows:
        print(f"| {method} | {path} | {seconds:.1f} | {rate:.2f} | {speedup:.2f}x | {'yes' if equal else 'NO'} |")


if __name__ == "__main__":
    tools.run(main)
