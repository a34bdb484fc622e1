"""CaseEdit's scalability test on a model preset (not a test): metrics against the number of sequential edits.

    python benchmarks/caseedit_scaling.py                              # toy GPT-2, AlphaEdit/MEMIT/ROME, cloze
    python benchmarks/caseedit_scaling.py --model toy-llama --seeds 0 1 2 --mode checkpoints

Reddy & Kuo 2025 (arXiv 2505.19383, §4.3) apply n = 10, 20, 50, 100, 200 randomly drawn edits sequentially and score
the n edits' questions. ``--mode fresh`` (default) does exactly that: one ``lightning-edit validate`` run, in
process, per method, n and seed (``--data.limit n --data.sample_seed seed``). ``--mode checkpoints`` makes one run
per method and seed with ``--model.eval_at [10,20,...]``: after the n-th edit of one sequence it scores the first n
cases, so the n share their edits (cheaper, and the earliest edits are scored after more later ones). A sample of
all the file's records is the whole file whatever the seed, so such a run is made once. Every run scores the
unedited model too (``_pre``: n = 0). Edits are applied one at a time (``edit_batch_size`` 1); AlphaEdit takes the
toy flags of docs/toy-presets.md. The command of each run is printed on stderr.

Writes into ``--root``: ``table.md`` (mean ± standard deviation over seeds, macro means), ``table.json`` (every run's
metrics), ``caseedit_curves.png`` (accuracy of each question against n, one curve per method) and
``caseedit_probabilities.png`` (reliability: probability of the new truth, of the previous truth and of the
distractors against n, per method).
"""

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported
os.environ.setdefault("WANDB_MODE", "offline")

from lightning_edit import tools  # noqa: E402
from lightning_edit.cli import build_cli  # noqa: E402
from lightning_edit.data.caseedit import QUESTIONS  # noqa: E402
from lightning_edit.data.records import read_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METHODS = {
    "alphaedit": ("AlphaEdit", ["--model.nullspace_threshold=0.5", "--model.l2=1"]),  # docs/toy-presets.md
    "memit": ("MEMIT", []),
    "rome": ("ROME", []),
}
COLUMNS = [f"{q}_acc" for q in QUESTIONS] + ["reliability_entropy", "reliability_p_new", "reliability_p_true"]


def run(args, method: str, limit: int, seed: int, eval_at: list[int], directory: Path) -> dict:
    """One sequential validate run; returns its metrics (with ``--reuse``, those of a finished run in ``directory``)."""
    finished = sorted(directory.glob("lightning_logs/version_*/results.json"), key=lambda p: p.stat().st_mtime)
    if args.reuse and finished:
        print(f"reusing {finished[-1]}", file=sys.stderr)
        return json.loads(finished[-1].read_text())["metrics"]
    cli_args = [
        f"--config={ROOT / 'configs/methods' / method}.yaml",
        f"--config={ROOT / 'configs/models' / args.model}.yaml",
        f"--config={ROOT / 'configs/benchmarks/caseedit.yaml'}",
        f"--data.path={args.path}",
        f"--data.convention={args.convention}",
        f"--data.answer_cue={args.answer_cue}",
        f"--data.limit={limit}",
        f"--data.sample_seed={seed}",
        "--model.protocol=sequential",
        "--model.edit_batch_size=1",
        "--model.scoring.pre_edit=true",
        *([f"--model.eval_at=[{','.join(map(str, eval_at))}]"] if eval_at else []),
        f"--trainer.default_root_dir={directory}",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        *METHODS[method][1],
    ]
    print("lightning-edit validate " + " ".join(cli_args), file=sys.stderr)
    return build_cli(["validate", *cli_args], exit_on_error=False).model.metrics.results


def collect(args, total: int) -> dict[tuple[str, int], list[dict[str, float]]]:
    """(method, n) -> one {metric: macro} per seed; n = 0 is the unedited model on the largest n's cases."""
    values: dict[tuple[str, int], list[dict[str, float]]] = {}
    for method in args.methods:
        seen = set()
        for seed in args.seeds:
            plans = [(n, []) for n in args.n] if args.mode == "fresh" else [(max(args.n), sorted(args.n))]
            for limit, eval_at in plans:
                key = (min(limit, total), tuple(eval_at), seed if limit < total else None)
                if key in seen:  # the whole file: every seed makes the same run
                    continue
                seen.add(key)
                start = time.perf_counter()
                metrics = run(args, method, limit, seed, eval_at, args.root / f"{method}_n{limit}_s{seed}")
                print(f"{method} n={limit} seed={seed}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
                points = {n: f"@{n}" for n in eval_at} if eval_at else {min(limit, total): ""}
                if limit == max(args.n):
                    points[0] = "_pre"  # the unedited model on the largest sample
                for n, suffix in points.items():
                    row = {c: metrics[c + suffix]["macro"] for c in COLUMNS + ["reliability_p_other"]}
                    values.setdefault((method, n), []).append(row)
    return values


def mean_std(rows: list[dict[str, float]], column: str) -> str:
    xs = [row[column] for row in rows]
    return f"{statistics.fmean(xs):.3f} ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"


def plot(values, methods: list[str], root: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(QUESTIONS), figsize=(4 * len(QUESTIONS), 3.4), sharey=True)
    for ax, question in zip(axes, QUESTIONS):
        for method in methods:
            ns = sorted(n for m, n in values if m == method)
            means = [statistics.fmean(r[f"{question}_acc"] for r in values[method, n]) for n in ns]
            ax.plot(ns, means, marker="o", label=METHODS[method][0])
        ax.set_title(question)
        ax.set_xlabel("sequential edits n")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("accuracy")
    axes[-1].legend()
    figure.tight_layout()
    figure.savefig(root / "caseedit_curves.png", dpi=120)

    figure, axes = plt.subplots(1, len(methods), figsize=(4 * len(methods), 3.4), sharey=True, squeeze=False)
    for ax, method in zip(axes[0], methods):
        ns = sorted(n for m, n in values if m == method)
        for role, label in [("new", "new truth"), ("true", "previous truth"), ("other", "distractors (sum)")]:
            ax.plot(ns, [statistics.fmean(r[f"reliability_p_{role}"] for r in values[method, n]) for n in ns],
                    marker="o", label=label)  # fmt: skip
        ax.set_title(f"{METHODS[method][0]}: reliability")
        ax.set_xlabel("sequential edits n")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("mean probability")
    axes[0][-1].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(root / "caseedit_probabilities.png", dpi=120)


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument("--path", default="builtin:data/toy/caseedit.json", help="the CaseEdit file")
    parser.add_argument("--convention", default="cloze", choices=["letter", "cloze"],
                        help="cloze for the toy models (they never saw an option list: letter is chance)")  # fmt: skip
    parser.add_argument("--answer-cue", default="Answer:", help="letter: the last prompt line ($'Answer:\\n': bare)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument(
        "--n", nargs="+", type=tools.positive_int, default=[10, 20, 50, 100, 200], help="numbers of edits"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="--data.sample_seed of the repeats")
    parser.add_argument("--mode", default="fresh", choices=["fresh", "checkpoints"])
    parser.add_argument("--root", type=Path, default=None, help="where the runs write (default: a temporary dir)")
    parser.add_argument("--reuse", action="store_true", help="take the metrics of runs already finished in --root")
    args = parser.parse_args()
    args.root = args.root or Path(tempfile.mkdtemp(prefix="caseedit_scaling_"))
    args.root.mkdir(parents=True, exist_ok=True)
    values = collect(args, len(read_records(args.path)))

    lines = [
        f"{args.model}, CaseEdit {args.path} ({args.convention}), sequential, {args.mode} runs, seeds {args.seeds}: "
        "macro means (± standard deviation over the seeds whose samples differ; n = 0: unedited)",
        "",
        "| method | n | runs | " + " | ".join(COLUMNS) + " |",
        "|---|---|---|" + "---|" * len(COLUMNS),
    ]
    for (method, n), rows in sorted(values.items(), key=lambda item: (args.methods.index(item[0][0]), item[0][1])):
        lines.append(
            f"| {METHODS[method][0]} | {n} | {len(rows)} | " + " | ".join(mean_std(rows, c) for c in COLUMNS) + " |"
        )
    if args.convention == "letter":  # the letter tokens each run read (results.json, "benchmark")
        found = {
            " ".join(row["tokens"])
            for path in args.root.glob("**/results.json")
            for row in json.loads(path.read_text())["benchmark"]["letter_tokens"]
        }
        lines += ["", f"letter tokens after {args.answer_cue!r}: " + "; ".join(sorted(found))]
    table = "\n".join(lines)
    print("\n" + table)
    (args.root / "table.md").write_text(table + "\n")
    (args.root / "table.json").write_text(
        json.dumps([{"method": m, "n": n, "runs": rows} for (m, n), rows in values.items()], indent=1)
    )
    plot(values, args.methods, args.root)
    print(f"\nwritten to {args.root}: table.md, table.json, caseedit_curves.png, caseedit_probabilities.png")


if __name__ == "__main__":
    tools.run(main)
