"""Lifelong editing on a toy model: retention and throughput along a stream of sequential edits (not a test).

    python benchmarks/lifelong_stream.py --methods unedited MEMIT AlphaEdit UltraEdit --edit-batch-size 100 \\
        --edits 10000 --checkpoints 1000 5000 10000 --sample 200 --plot docs/figures/lifelong-stream-toy-gpt2.png
    python benchmarks/lifelong_stream.py --methods UltraEdit --edits 1000 --checkpoints 1000 --edit-batch-size 10
    python benchmarks/lifelong_stream.py --model smollm2-135m --data counterfact-train.json --edits 1000 \\
        --checkpoints 100 500 1000 --methods UltraEdit GRACE --flags --model.stats.corpus=smollm2-samples.jsonl

Each method is one ``lightning-edit validate`` run under ``sequential`` (``toy_runs.validate``, in a process of its
own so that its peak memory is its own) on a stream of toy CounterFact edits (``lightning_edit.toy.stream``: the toy
world's 929 facts, then facts of generated subjects) or, with ``--data``, the first ``--edits`` records of a CounterFact
file (a real model: ``--model`` its preset, ``--flags`` its other settings, e.g. the key statistics corpus), with
``--model.eval_at`` at the checkpoints and ``--model.eval_sample`` cases scored at each (the same cases for every
method). Per checkpoint it prints ES / PS / NS
(and rewrite_acc, locality_acc) of the sample (macro means), edits/s (cumulative: edits over the seconds spent
editing, scoring excluded) and the process's peak memory; then the final scores of every edit. ``--methods unedited``
adds the unedited model's scores of every edit, the reference the edits start from. ``--plot`` writes the retention
and throughput curves as a PNG. Edits per call: each method config's own (AlphaEdit, UltraEdit 100; GRACE, WISE 1;
MEMIT 8) unless ``--edit-batch-size``. A method whose run is already in ``--root`` (with as many edits per call) is
read, not run again; one whose stream stopped (SIGTERM, a crash) goes on from the stream checkpoint in its folder
(``stream_checkpoint.safetensors``, written every 500 edits and on SIGTERM): run the same command with the same
``--root`` again.
"""

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from lightning_edit import tools

#: CounterFact's probability comparisons, then token accuracy of target_new and argmax agreement on neighbours: on
#: the generated subjects the unedited model's ES is near chance (it knows neither object), its rewrite_acc is not
METRICS = ("ES", "PS", "NS", "rewrite_acc", "locality_acc")
DEFAULT_METHODS = ("MEMIT", "AlphaEdit", "UltraEdit", "GRACE", "WISE")
REFERENCE = "unedited"  # NoEdit over every edit of the stream: the scores the edits start from


def config_batch(method: str) -> int:
    """Edits per call of the method's config (configs/methods/<config>.yaml; MEMIT's, under ``batch``, is 1)."""
    import yaml
    from toy_runs import METHODS, ROOT

    config = yaml.safe_load((ROOT / "configs/methods" / f"{METHODS[method][0]}.yaml").read_text())
    return config["model"]["init_args"].get("edit_batch_size", 1)


def write_stream(path: Path, edits: int) -> None:
    from lightning_edit.resources import resolve_path
    from lightning_edit.toy.stream import stream_records
    from lightning_edit.toy.world import load_toy_world

    world = load_toy_world(resolve_path("builtin:data/toy/world.json"))
    path.write_text(json.dumps(stream_records(world, edits)))


def run_forwarding_stop(command: list[str]) -> int:
    """Run one stream in a process of its own; a SIGTERM to this script is passed on to it, so the stream stops after
    its current editor call and writes its checkpoint (this script's own handler only records a stop)."""
    child = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    return child.wait()


def run_one(args: argparse.Namespace) -> None:
    """The child process: one method's sequential run (its results.json is read by the parent)."""
    import torch
    from toy_runs import validate

    torch.set_num_threads(args.threads)
    flags = [f"--data.path={args.stream}", f"--data.limit={args.edits}", *args.flags]
    if args.run != REFERENCE:
        flags += [f"--model.eval_at=[{','.join(map(str, args.checkpoints))}]", f"--model.eval_sample={args.sample}"]
    directory = args.root / f"{args.run}-{args.batch}"
    checkpoint = directory / "stream_checkpoint.safetensors"
    if checkpoint.is_file():  # a stream stopped earlier: go on from its checkpoint
        print(f"{args.run}: resuming from {checkpoint}", file=sys.stderr)
        flags.append(f"--ckpt_path={checkpoint}")
    validate(args.run, args.model, "counterfact", directory, flags, "sequential", args.batch)


def rows_of(results: dict) -> list[dict]:
    """One row per checkpoint (the sample's scores and the model's health: held-out perplexity, ‖W − W₀‖ over every
    edited weight), then one of every edit's final scores."""
    from lightning_edit.editors.stream_health import stream_summary

    rows = []
    # one stream record per eval_at checkpoint n, in order; its scores are ``<metric>@n``, taken after the editor call
    # that brought the applied edits (``edits``) to n or past it
    checkpoints = sorted({int(name.rpartition("@")[2]) for name in results["metrics"] if "@" in name})
    for n, record in zip(checkpoints, results.get("stream", []), strict=True):
        applied = record["edits"]
        scores = {m: results["metrics"][f"{m}@{n}"]["macro"] for m in METRICS}
        rows.append(
            {
                "edits": n,
                "applied": applied,
                **scores,
                "edits_per_s": applied / record["edit_seconds"],
                "peak_gib": max(record.get("gpu_peak_bytes", {}).values(), default=record["host_peak_bytes"]) / 2**30,
                **stream_summary(record),
                "perplexity_unedited": record.get("heldout", {}).get("perplexity_unedited"),
            }
        )
    final = {m: results["metrics"][m]["macro"] for m in METRICS}
    return rows + [{"edits": f"all {results['counts']['cases']}, at the end", **final}]


def plot(table: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = len(METRICS) + 3  # the scores, then perplexity, ‖ΔW‖ and edits/s, in rows of four
    figure, axes = plt.subplots(2, 4, figsize=(14.4, 6.4))
    axes = axes.flatten()[:panels]
    unedited = None
    streams = {method: [row for row in rows if "edits_per_s" in row] for method, rows in table.items()}  # checkpoints
    streams = {method: rows for method, rows in streams.items() if rows}
    for color, (method, rows) in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], streams.items()):
        # one color per method in every panel, also where a method has no curve (GRACE edits no weight)
        line = {"marker": "o", "label": method, "color": color}
        edits = [row["edits"] for row in rows]
        for axis, metric in zip(axes, METRICS):
            axis.plot(edits, [row[metric] for row in rows], **line)
            axis.set(title=metric, xlabel="edits", ylim=(0, 1.02))
        for axis, key, title in (
            (axes[-3], "heldout_perplexity", "held-out perplexity (dashed: unedited)"),
            (axes[-2], "weight_change", "‖W − W₀‖"),
        ):  # log scales: a stream that diverges grows them by orders of magnitude
            if all(row.get(key) is not None for row in rows):
                axis.plot(edits, [row[key] for row in rows], **line)
                axis.set(title=title, xlabel="edits", yscale="log")
        unedited = rows[0].get("perplexity_unedited", unedited)  # the same for every method
        axes[-1].plot(edits, [row["edits_per_s"] for row in rows], **line)
        axes[-1].set(title="edits/s (cumulative)", xlabel="edits", yscale="log")
    if unedited is not None:
        axes[-3].axhline(unedited, color="gray", linestyle="--")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=(*DEFAULT_METHODS, REFERENCE))
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument("--edits", type=tools.positive_int, default=10000)
    parser.add_argument(
        "--checkpoints",
        type=tools.positive_int,
        nargs="+",
        help="edits after which the sample is scored (default: 1000, 5000, 10000 up to --edits)",
    )
    parser.add_argument(
        "--sample", type=tools.positive_int, default=200, help="cases scored at each checkpoint (eval_sample)"
    )
    parser.add_argument(
        "--edit-batch-size", type=tools.positive_int, default=None, help="edits per call (default: the config's)"
    )
    parser.add_argument("--threads", type=tools.positive_int, default=2, help="torch CPU threads")
    parser.add_argument("--data", type=Path, default=None, help="a CounterFact file (default: the toy stream)")
    parser.add_argument("--root", type=Path, default=None, help="where the runs write (default: a temporary dir)")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="appended to every run's command")
    parser.add_argument("--plot", type=Path, default=None, help="write the curves to this PNG")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # the child process: the method to run
    parser.add_argument("--stream", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        return run_one(args)
    if beyond := [checkpoint for checkpoint in args.checkpoints or [] if checkpoint > args.edits]:
        parser.error(f"argument --checkpoints: {beyond[0]} is beyond --edits {args.edits}")
    args.checkpoints = args.checkpoints or [n for n in (1000, 5000) if n < args.edits] + [min(args.edits, 10000)]
    root = args.root or Path(tempfile.mkdtemp(prefix="lifelong_stream_"))
    root.mkdir(parents=True, exist_ok=True)
    stream = args.data.resolve() if args.data else root / f"toy_stream_{args.edits}.json"
    if not stream.is_file():
        write_stream(stream, args.edits)
    table = {}
    for method in args.methods:
        batch = 1 if method == REFERENCE else args.edit_batch_size or config_batch(method)
        command = [sys.executable, __file__, "--run", method, "--stream", str(stream), "--batch", str(batch)]
        command += ["--model", args.model, "--root", str(root), "--threads", str(args.threads)]
        command += ["--sample", str(args.sample), "--edits", str(args.edits)]
        command += ["--checkpoints", *map(str, args.checkpoints)]
        command += ["--flags", *args.flags] if args.flags else []
        found = list((root / f"{method}-{batch}").rglob("results.json"))
        if found:
            print(f"{method}: reusing {found[0]} (delete it to run again)", file=sys.stderr)
        elif run_forwarding_stop(command) != 0:
            raise SystemExit(f"{method} stopped; the same command with --root {root} goes on from its checkpoint")
        (path,) = (root / f"{method}-{batch}").rglob("results.json")
        results = json.loads(path.read_text())
        table[method if method == REFERENCE else f"{method} ({batch}/call)"] = rows_of(results)
    edits = f"{args.edits} {'edits of ' + args.data.name if args.data else 'toy edits'}"
    print(f"\n{args.model}, {edits}, {args.sample} sampled cases per checkpoint (runs in {root})\n")
    print(f"| method | edits | {' | '.join(METRICS)} | perplexity (unedited) | ‖ΔW‖ | edits/s | peak memory (GiB) |")
    print("|---|---|" + "---|" * (len(METRICS) + 4))
    for method, rows in table.items():
        for row in rows:
            scores = " | ".join(f"{row[m]:.2f}" for m in METRICS)
            health = " | "
            if row.get("heldout_perplexity") is not None:
                perplexity = row["heldout_perplexity"]  # a collapsed model's: 2.31e+11
                health = f"{perplexity:.{'1f' if perplexity < 1e5 else '2e'}} ({row['perplexity_unedited']:.1f}) | "
            health += f"{row['weight_change']:.2f}" if row.get("weight_change") is not None else ""
            rate = row.get("edits_per_s")  # three decimals below 1 (a real model on a CPU: 0.053)
            speed = f"{rate:.{1 if rate >= 1 else 3}f} | {row['peak_gib']:.2f}" if rate is not None else " |"
            edits = (
                row["edits"]
                if row.get("applied", row["edits"]) == row["edits"]
                else f"{row['edits']} ({row['applied']} applied)"
            )
            print(f"| {method} | {edits} | {scores} | {health} | {speed} |")
    if args.plot:
        plot({method: rows[:-1] for method, rows in table.items()}, args.plot)
        print(f"\ncurves written to {args.plot}")


if __name__ == "__main__":
    tools.run(main)
